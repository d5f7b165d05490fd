//! Queries of executions (`Faults::queries`; `weir query`, [`crate::query`]): a client asks
//! a submitted execution (mostly) for the scripted runs' `progress`, now and then for
//! `effectful` (a query function that tries a side effect), a name no component declares, an
//! id nobody submitted, with a deadline too short to be met, or malformed (an empty query
//! id). When the faults stop, clients go on asking for a while as the executions run
//! ([`Sim::queries_after_faults`]), so that queries also meet runs parked in memory, not only
//! ones rebuilt after a take-over. Drawn from an RNG of its own ([`Sim::query_rng`]): the
//! fault phase's other draws are the same with or without the class. What is checked:
//! `checks/queries.rs`.

use chrono::Duration;
use serde_json::json;

use crate::model::ExecutionId;
use crate::query::QueryRequest;
use crate::sim::cluster::{Payload, Topic};
use crate::sim::rng::Rng;
use crate::sim::scheduler::Sim;
use crate::sim::sent::QuerySend;
use crate::sim::world::lock;

/// How long a client waits for an answer: the fault phase stalls partitions for minutes of
/// sim time, and most queries should still be run.
const PATIENCE_MS: i64 = 5 * 60 * 1_000;

impl Sim {
    /// The side RNG of the class, seeded from the run's seed.
    pub(in crate::sim) fn query_rng(seed: u64) -> Rng {
        Rng::new(seed ^ 0x0e5e_1a11_cafe)
    }

    /// During the fault phase, at about one step in ten: a query.
    pub(in crate::sim) fn maybe_query(&mut self) {
        if self.query_rng.chance(100) {
            self.random_query();
        }
    }

    /// After the fault phase: for 5–30 rounds the workers run without faults while clients
    /// go on asking.
    pub(in crate::sim) fn queries_after_faults(&mut self) {
        self.stop_faults("faults stop; clients go on querying executions");
        let rounds = self.query_rng.range(5, 30);
        for _ in 0..rounds {
            for slot in self.slots() {
                let polls = self.query_rng.range(1, 6) as usize;
                self.run(slot, polls);
            }
            self.materialise_all();
            self.activities();
            self.act_all(3);
            self.trig_all(3);
            for _ in 0..self.query_rng.range(0, 3) {
                self.random_query();
            }
            let ms = self.query_rng.range(100, 1_500) as i64;
            self.advance(ms);
        }
    }

    /// A query, chosen as the module docs say.
    fn random_query(&mut self) {
        let submitted: Vec<ExecutionId> = self.submitted.keys().cloned().collect();
        let r = self.query_rng.below(100);
        let (id, name, deadline_ms, query_id) = match r {
            0..4 => {
                let ms = self.now().timestamp_millis() as u64;
                let id = ExecutionId::top_level(ulid::Ulid::from_parts(
                    ms,
                    u128::from(self.query_rng.next_u64()),
                ));
                (id, "progress", PATIENCE_MS, None)
            }
            _ if submitted.is_empty() => return,
            4..12 => (
                self.pick_query_target(&submitted),
                "effectful",
                PATIENCE_MS,
                None,
            ),
            12..16 => (
                self.pick_query_target(&submitted),
                "undeclared",
                PATIENCE_MS,
                None,
            ),
            // Too short to be met unless the owner is quick: answered `deadline-exceeded`.
            16..24 => (self.pick_query_target(&submitted), "progress", 1, None),
            24..26 => (
                self.pick_query_target(&submitted),
                "progress",
                PATIENCE_MS,
                Some(String::new()),
            ),
            _ => (
                self.pick_query_target(&submitted),
                "progress",
                PATIENCE_MS,
                None,
            ),
        };
        self.send_query(&id, name, deadline_ms, query_id);
    }

    fn pick_query_target(&mut self, ids: &[ExecutionId]) -> ExecutionId {
        self.query_rng.pick(ids).clone()
    }

    /// A client asks `id` the query `name` (`weir.responses`, keyed by the execution, kind
    /// `query`), to be answered within `deadline_ms`; its query id is unique in the run
    /// unless `query_id` gives one (an empty one is malformed).
    pub fn send_query(
        &mut self,
        id: &ExecutionId,
        name: &str,
        deadline_ms: i64,
        query_id: Option<String>,
    ) -> (i32, i64) {
        let query_id = query_id.unwrap_or_else(|| format!("sim-q{}", self.query_sends.len() + 1));
        let now = self.now();
        let request = QueryRequest {
            query_id: query_id.clone(),
            execution_id: id.clone(),
            name: name.to_owned(),
            params: json!([]),
            requested_at: now,
            deadline: now + Duration::milliseconds(deadline_ms),
        };
        let at = lock(&self.world).client_append(
            Topic::Responses,
            id.to_string(),
            Some(crate::wire::RecordKind::Query),
            Payload::Query(request.clone()),
        );
        self.query_sends.push(QuerySend { request, at });
        at
    }
}
