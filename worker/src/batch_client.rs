//! What a client checks before it starts a batch operation (`weir batch start`, `POST
//! /v1/batches`; the design: `docs/design/batches.md`): the spec, by the core's one rule
//! ([`weir_core::batch::check`]), and what its filter selects now (a filter that selects
//! nothing is refused: nothing is sent).

use weir_core::batch::{
    self, BatchAction, BatchCommandAction, BatchFilter, BatchReset, BatchSpec, BatchState,
};
use weir_core::list::MAX_LIST_LIMIT;
use weir_core::records::ResetPoint;

use crate::store::list::{ListFilter, ListFilterError};
use crate::store::{Store, StoreError};

/// Why a batch is not started.
#[derive(Debug, thiserror::Error)]
pub enum BatchInputError {
    #[error(transparent)]
    Spec(#[from] batch::BatchError),
    #[error(transparent)]
    Filter(#[from] ListFilterError),
    #[error("a batch selects by creation time: --finished-since/--finished-until are list-only")]
    FinishTime,
    #[error("the store: {0}")]
    Store(#[from] StoreError),
    #[error("a reset point is `latest` or a seq (0 or more), not `{0}`")]
    ResetTo(String),
    #[error("what becomes of a reset execution is keep, cancel or terminate, not `{0}`")]
    ResetThen(String),
    #[error("a reset point and what becomes of the executions are for a reset batch, not a {0}")]
    NotAReset(BatchAction),
}

/// A reset batch's point (`latest`, the default, or a seq) and what becomes of the executions
/// it resets (`keep`, the default, `cancel`, `terminate`), as the CLI and the API take them.
pub fn reset_of(
    action: &str,
    to: Option<&str>,
    then: Option<&str>,
) -> Result<BatchReset, BatchInputError> {
    let action: BatchAction = action.parse()?;
    if action != BatchAction::Reset && (to.is_some() || then.is_some()) {
        return Err(BatchInputError::NotAReset(action));
    }
    let mut reset = BatchReset::default();
    if let Some(to) = to {
        reset.to = match to {
            "latest" => ResetPoint::Latest,
            seq => ResetPoint::Seq(
                seq.parse()
                    .map_err(|_| BatchInputError::ResetTo(seq.to_owned()))?,
            ),
        };
    }
    if let Some(then) = then {
        reset.then = weir_core::records::ResetThen::named(then)
            .ok_or_else(|| BatchInputError::ResetThen(then.to_owned()))?;
    }
    Ok(reset)
}

/// The spec of a batch `id` of `action` over what `filter` selects, at most `rate` a second
/// (checked as the owner checks it).
pub fn spec_of(
    filter: &ListFilter,
    action: &str,
    rate: f64,
    reset: BatchReset,
    reason: &str,
    id: &str,
) -> Result<BatchSpec, BatchInputError> {
    let action: BatchAction = action.parse()?;
    if filter.finished_since.is_some() || filter.finished_until.is_some() {
        return Err(BatchInputError::FinishTime);
    }
    let query = filter.query(1, None, chrono::Utc::now())?;
    let spec = BatchSpec {
        filter: BatchFilter {
            by: query.by,
            state: query.state,
            outcome: query.outcome,
            created_from: query.created_from,
            created_until: query.created_until,
        },
        action,
        per_second: rate,
        reset,
        reason: reason.to_owned(),
    };
    batch::check(id, &spec)?;
    Ok(spec)
}

/// How many executions the spec's filter selects now (the progress bar's total: executions
/// created since are not selected, ones finished since are skipped, so it is what the batch
/// will give an outcome, as far as the store is up to date).
pub async fn count(store: &impl Store, spec: &BatchSpec) -> Result<u64, BatchInputError> {
    let now = chrono::Utc::now();
    let mut state = match batch::apply(
        None,
        &batch::BatchCommand {
            id: "count".to_owned(),
            action: BatchCommandAction::Start(spec.clone()),
            requested_at: now,
        },
        now,
    ) {
        batch::Applied::Put(state) => *state,
        batch::Applied::Refused(e) => return Err(e.into()),
        batch::Applied::Unchanged => return Ok(0),
    };
    let mut total = 0;
    loop {
        let query = page_query(&state);
        let page = store.list_executions(&query).await?;
        total += page.executions.len() as u64;
        match page.next {
            Some(next) => state.cursor = Some(next),
            None => return Ok(total),
        }
    }
}

/// The query of the next page of `state`'s selection, as large as a page may be.
fn page_query(state: &BatchState) -> weir_core::rows::ListQuery {
    let f = &state.spec.filter;
    weir_core::rows::ListQuery {
        by: f.by.clone(),
        state: f.state,
        outcome: f.outcome.clone(),
        created_from: f.created_from,
        created_until: f.created_until,
        finished_from: None,
        finished_until: None,
        limit: MAX_LIST_LIMIT,
        after: state.cursor.clone(),
    }
}
