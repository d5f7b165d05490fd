//! Correlation keys over Kafka, for clients (`weir correlation list`, the API): the states of
//! the keys as their owners committed them to the compacted `weir.state` (header
//! `weir.kind = correlation`); the rules of a key are `weir_core::correlation`'s. Events are
//! sent to a key like to an execution (`weir send-event <key>`).

use std::collections::BTreeMap;

use weir_core::correlation::CorrelationState;

use super::KafkaConfig;
use super::history_reader::{self, HistoryReadError, Wanted};
use crate::codec::Codec;
use crate::topology::Topology;

/// A key as a listing shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct ListedKey {
    /// Its state (empty for a key that holds nothing but remembered ids).
    pub state: CorrelationState,
    /// How many event ids it remembers having forwarded.
    pub remembered: usize,
}

/// Every correlation key of the deployment that `weir.state` holds (held, queued for, or
/// with events buffered or remembered), by key (see [`history_reader::list_keyed_state`]).
/// `only`: just that key.
pub fn list(
    kafka: &KafkaConfig,
    codec: &Codec,
    topology: &Topology,
    only: Option<&str>,
) -> Result<Vec<ListedKey>, HistoryReadError> {
    let state = history_reader::list_keyed_state(kafka, codec, topology, Wanted::Correlations)?;
    let mut keys: BTreeMap<String, ListedKey> = BTreeMap::new();
    for s in state.correlations {
        let key = s.key.clone();
        keys.insert(
            key,
            ListedKey {
                state: s,
                remembered: 0,
            },
        );
    }
    for r in state.remembered {
        keys.entry(r.key.clone())
            .or_insert_with(|| ListedKey {
                state: CorrelationState::new(&r.key),
                remembered: 0,
            })
            .remembered += 1;
    }
    Ok(keys
        .into_values()
        .filter(|k| only.is_none_or(|only| k.state.key == only))
        .collect())
}
