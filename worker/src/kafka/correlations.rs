//! Correlation keys over Kafka, for clients (`weir correlation list`, the API): the states of
//! the keys as their owners committed them to the compacted `weir.state` (header
//! `weir.kind = correlation`); the rules of a key are `weir_core::correlation`'s. Events are
//! sent to a key like to an execution (`weir send-event <key>`).

use weir_core::correlation::CorrelationState;

use super::KafkaConfig;
use super::history_reader::{self, HistoryReadError, Wanted};
use crate::codec::Codec;
use crate::topology::Topology;

/// Every correlation key of the deployment that `weir.state` holds (held, queued for, or
/// with events buffered or remembered), by key (see [`history_reader::list_keyed_state`]).
/// `only`: just that key.
pub fn list(
    kafka: &KafkaConfig,
    codec: &Codec,
    topology: &Topology,
    only: Option<&str>,
) -> Result<Vec<CorrelationState>, HistoryReadError> {
    let mut keys = history_reader::list_keyed_state(kafka, codec, topology, Wanted::Correlations)?
        .correlations;
    keys.retain(|k| only.is_none_or(|only| k.key == only));
    keys.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(keys)
}
