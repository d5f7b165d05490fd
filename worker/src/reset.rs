//! Resetting an execution from outside (`weir reset`, `POST /v1/executions/{id}/reset`): the
//! client reads the execution's history from the store and checks the point by the one rule
//! ([`weir_core::reset::cut`], the one the owner applies) before it sends a
//! [`ResetRequest`] naming a new execution id of its own, so that a request sent twice makes
//! one execution. The owner decides (`weir_core::processor`'s `reset` module,
//! `docs/design/reset.md`); the store may be a moment behind it, so a point the client
//! allows may still be refused there (dead-lettered with why), never the other way round.

use chrono::{DateTime, Utc};

use crate::codec::{Codec, DecodeError, HistoryEntry, HistoryRecord, ResetRequest, ResetThen};
use crate::model::ExecutionId;
use crate::store::HistoryRow;
pub use weir_core::reset::points;
use weir_core::reset::{ResetError, cut};

/// Why a reset is not sent.
#[derive(Debug, thiserror::Error)]
pub enum ResetRefusal {
    #[error(
        "no execution {0} in the store (an execution submitted an instant ago is not in the \
         store yet: try again)"
    )]
    NotFound(ExecutionId),
    #[error(transparent)]
    Point(#[from] ResetError),
    #[error(transparent)]
    Decode(#[from] DecodeError),
}

/// The decoded history of `rows` (an execution's, in seq order), as the rule reads it.
pub fn records(
    codec: &Codec,
    rows: &[HistoryRow],
) -> Result<Vec<(HistoryRecord, DateTime<Utc>)>, DecodeError> {
    Ok(crate::present::decode_history(codec, rows)?
        .into_iter()
        .map(|(row, record)| (record, row.recorded_at))
        .collect())
}

/// Checks a reset of `id`, whose stored history is `rows`, to `to_seq` into `new`: the
/// owner's own rule on what the store holds.
pub fn check(
    codec: &Codec,
    id: &ExecutionId,
    rows: &[HistoryRow],
    to_seq: u64,
    new: &ExecutionId,
) -> Result<(), ResetRefusal> {
    if rows.is_empty() {
        return Err(ResetRefusal::NotFound(id.clone()));
    }
    cut(id, &records(codec, rows)?, to_seq, new)?;
    Ok(())
}

/// Whether the history `records` shows the reset into `new` taken (its `Reset` entry).
pub fn taken(records: &[(HistoryRecord, DateTime<Utc>)], new: &ExecutionId) -> bool {
    records.iter().any(|(r, _)| {
        matches!(&r.entry, HistoryEntry::Reset { new_execution_id, .. } if new_execution_id == new)
    })
}

/// A new execution's id for a reset, fresh.
pub fn new_id() -> ExecutionId {
    ExecutionId::top_level(ulid::Ulid::new())
}

/// The request, sent now.
pub fn request(
    id: &ExecutionId,
    to_seq: u64,
    new: &ExecutionId,
    then: ResetThen,
    reason: String,
) -> ResetRequest {
    ResetRequest {
        execution_id: id.clone(),
        to: weir_core::records::ResetPoint::Seq(to_seq),
        new_execution_id: new.clone(),
        then,
        reason,
        requested_at: Utc::now(),
    }
}
