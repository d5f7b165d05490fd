//! Queries (`weir query`; issue 35 item 5; the records and their invariants:
//! [`crate::query`], the design: `docs/design/queries.md`).
//!
//! A [`QueryRequest`] on `weir.responses`, keyed by its execution, is answered in the batch
//! that takes it ([`Effect::AnswerQuery`]) and changes nothing:
//! - a query past its deadline is answered `deadline-exceeded` without running;
//! - a malformed one (its id, name or params) is answered `invalid-request`;
//! - an execution that does not exist, has finished, is paused or has not started answers
//!   that (`unknown-execution`, `finished`, `paused`, `not-started`);
//! - a running one is queried through its parked run ([`WorkflowRun::query`]). A run not in
//!   memory was rebuilt before the step, as for any input ([`Processor::needs`]); one that
//!   could not be (no room, its build not deployed) answers `unavailable`;
//! - an answer larger than a record may carry is answered `value-too-large`.
//!
//! Nothing is appended, no timer is put and the execution is not marked touched: a query
//! neither pins an execution nor keeps it in the cache longer than a use.

use super::Processor;
use super::config::ProcessorError;
use super::effect::Batch;
use super::effect::Effect;
use crate::query::{QueryAnswer, QueryError, QueryErrorKind, QueryRequest, check_request};
use crate::rows::ExecutionState;
use crate::runner::WorkflowRun;
use crate::runner::WorkflowRunner;

impl<R: WorkflowRunner> Processor<R> {
    /// Answers a query (see the module docs).
    pub(super) async fn query(
        &mut self,
        batch: &mut Batch,
        request: QueryRequest,
    ) -> Result<(), ProcessorError> {
        let limit = self.value_limit();
        let (version, outcome) = self.run_query(batch, &request).await;
        let outcome = outcome.and_then(|value| {
            let size = value.to_string().len();
            if size > limit {
                Err(QueryError::new(
                    QueryErrorKind::ValueTooLarge,
                    format!("the answer is {size} bytes of JSON; a record carries at most {limit}"),
                ))
            } else {
                Ok(value)
            }
        });
        if let Err(e) = &outcome {
            tracing::debug!(execution = %request.execution_id, query = %request.name, query_id = %request.query_id, error = %e, "query answered with an error");
        }
        self.stats.queries += 1;
        batch.effects.push(Effect::AnswerQuery(QueryAnswer {
            query_id: request.query_id,
            execution_id: request.execution_id,
            outcome,
            version,
            answered_at: batch.now,
        }));
        Ok(())
    }

    /// The execution's history version and the query's outcome.
    async fn run_query(
        &mut self,
        batch: &mut Batch,
        request: &QueryRequest,
    ) -> (u64, Result<serde_json::Value, QueryError>) {
        let id = &request.execution_id;
        let error = |kind, message: String| Err(QueryError::new(kind, message));
        if request.deadline <= batch.now {
            let message = format!(
                "taken at {}, after its deadline {}",
                batch.now.to_rfc3339(),
                request.deadline.to_rfc3339()
            );
            return (0, error(QueryErrorKind::DeadlineExceeded, message));
        }
        if let Err(e) = check_request(&request.query_id, &request.name, &request.params) {
            return (0, Err(e));
        }
        let Some((_, live)) = self.ctx_of(batch, id) else {
            return (
                0,
                error(
                    QueryErrorKind::UnknownExecution,
                    format!("no execution {id}"),
                ),
            );
        };
        let version = live.view.next_seq;
        let outcome = match (live.view.state, live.run.as_ref()) {
            (ExecutionState::Finished, _) => error(
                QueryErrorKind::Finished,
                format!("{id} has finished: its result is its answer (`weir result {id}`)"),
            ),
            (ExecutionState::Paused, _) => error(
                QueryErrorKind::Paused,
                format!("{id} is paused: it runs no code until it is resumed"),
            ),
            (ExecutionState::Scheduled | ExecutionState::Queued, _) => error(
                QueryErrorKind::NotStarted,
                format!("{id} has not started: it has no state yet"),
            ),
            (ExecutionState::Running, None) => error(
                QueryErrorKind::Unavailable,
                format!(
                    "{id}'s run could not be rebuilt now (no room, or its build is not deployed here): ask again later"
                ),
            ),
            (ExecutionState::Running, Some(run)) => run.query(&request.name, &request.params).await,
        };
        (version, outcome)
    }
}
