//! Host calls that may block on a join set's next response: join-next, await-next, the direct
//! call and sleep.
//!
//! A blocking call records its events, then takes the join set's next response. Without one
//! it returns [`Progress::Blocked`] and remembers itself as pending; the host retries the very
//! same call after delivering responses, and the retry resumes at the take, recording nothing
//! again. A replay reaching the same point blocks the same way, which is what makes the
//! in-memory resume and the rebuild from history produce the same events.

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::model::{
    ChildKind, DelayOutcome, EventOutcome, ExecutionId, ExecutionResult, Ffqn, HistoryEvent,
    JoinSetId, ScheduleAt,
};

use super::calls::NewJoinSet;
use super::engine::{PendingCall, Replay};
use super::error::ReplayError;
use super::join_sets::Request;
use super::matching;
use super::outcome::{AllProcessed, AwaitNextError, Cancelled, Joined, Progress};

impl Replay {
    /// The join set's next response in arrival order: a child's result or a delay's outcome.
    /// With nothing left to await: `Err(AllProcessed)`, recorded as `JoinNextTooMany`.
    pub fn join_next(
        &mut self,
        js: &JoinSetId,
    ) -> Result<Progress<Result<Joined, AllProcessed>>, ReplayError> {
        Ok(self
            .join_next_inner(js, None)?
            .map(|r| r.ok_or(AllProcessed)))
    }

    /// `<f>-await-next`: the join set's next response, which should be a result of `ffqn`.
    /// A response of another function or a delay is consumed and reported as
    /// [`AwaitNextError::FunctionMismatch`] (the child's result stays available to `get`).
    #[allow(clippy::type_complexity)]
    pub fn await_next(
        &mut self,
        js: &JoinSetId,
        ffqn: &Ffqn,
    ) -> Result<Progress<Result<(ExecutionId, ExecutionResult), AwaitNextError>>, ReplayError> {
        Ok(self
            .join_next_inner(js, Some(ffqn))?
            .map(|joined| match joined {
                None => Err(AwaitNextError::AllProcessed),
                Some(Joined::Child {
                    child_execution_id,
                    ffqn: actual,
                    result,
                }) if actual == *ffqn => Ok((child_execution_id, result)),
                Some(actual) => Err(AwaitNextError::FunctionMismatch {
                    requested: ffqn.clone(),
                    actual: Box::new(actual),
                }),
            }))
    }

    /// A direct (blocking) call: a one-off join set `o:<n>-<function>`, the child, and a
    /// join-next for it. Returns the child's result.
    pub fn call(
        &mut self,
        ffqn: &Ffqn,
        params: &Value,
        kind: ChildKind,
    ) -> Result<Progress<ExecutionResult>, ReplayError> {
        let resumed = self.resume_pending(
            |p| matches!(p, PendingCall::Call { ffqn: f, params: p } if f == ffqn && p == params),
            || format!("call of {ffqn}"),
        )?;
        let slot = match resumed {
            Some(slot) => slot,
            None => {
                let (js, slot) =
                    self.record_join_set_create(NewJoinSet::OneOff(ffqn.function()))?;
                self.submit_into(slot, &js, ffqn, params, kind)?;
                self.record_join_next(&js, false, Some(ffqn))?;
                slot
            }
        };
        let progress = self.consume_or_block(slot, || PendingCall::Call {
            ffqn: ffqn.clone(),
            params: params.clone(),
        })?;
        Ok(progress.map(|joined| match joined {
            Joined::Child { result, .. } => result,
            Joined::Delay { .. } | Joined::Event { .. } => {
                unreachable!("a call's one-off join set holds one child")
            }
        }))
    }

    /// `sleep`: a one-off join set `o:<n>-sleep`, a delay and a join-next. Returns the delay's
    /// recorded expiry (never the current time), or `Cancelled`.
    pub fn sleep(
        &mut self,
        timeout: ScheduleAt,
    ) -> Result<Progress<Result<DateTime<Utc>, Cancelled>>, ReplayError> {
        let resumed = self.resume_pending(
            |p| matches!(p, PendingCall::Sleep { timeout: t } if *t == timeout),
            || format!("sleep {timeout}"),
        )?;
        let slot = match resumed {
            Some(slot) => slot,
            None => {
                let (js, slot) = self.record_join_set_create(NewJoinSet::OneOff("sleep"))?;
                self.submit_delay_into(slot, &js, timeout)?;
                self.record_join_next(&js, false, None)?;
                slot
            }
        };
        let progress = self.consume_or_block(slot, || PendingCall::Sleep { timeout })?;
        Ok(progress.map(|joined| match joined {
            Joined::Delay {
                outcome: DelayOutcome::Ok,
                ..
            } => match self.join_sets.get(slot).request(1) {
                Some(Request::Delay { expires_at, .. }) => Ok(*expires_at),
                _ => unreachable!("a sleep's one-off join set holds one delay"),
            },
            Joined::Delay {
                outcome: DelayOutcome::Cancelled,
                ..
            } => Err(Cancelled),
            Joined::Child { .. } | Joined::Event { .. } => {
                unreachable!("a sleep's one-off join set holds one delay")
            }
        }))
    }

    /// `await-event`: a one-off join set `o:<n>-event`, a wait for the next event named
    /// `name` and a join-next. Returns the event's id and payload, or `Cancelled` (which a
    /// one-off join set, never closed before its join-next returns, does not see).
    #[allow(clippy::type_complexity)]
    pub fn await_event(
        &mut self,
        name: &str,
    ) -> Result<Progress<Result<(String, Value), Cancelled>>, ReplayError> {
        let resumed = self.resume_pending(
            |p| matches!(p, PendingCall::AwaitEvent { name: n } if n == name),
            || format!("await-event {name}"),
        )?;
        let slot = match resumed {
            Some(slot) => slot,
            None => {
                let (js, slot) = self.record_join_set_create(NewJoinSet::OneOff("event"))?;
                self.submit_event_into(slot, &js, name)?;
                self.record_join_next(&js, false, None)?;
                slot
            }
        };
        let progress = self.consume_or_block(slot, || PendingCall::AwaitEvent {
            name: name.to_string(),
        })?;
        Ok(progress.map(|joined| match joined {
            Joined::Event {
                outcome: EventOutcome::Received { event_id, payload },
                ..
            } => Ok((event_id, payload)),
            Joined::Event {
                outcome: EventOutcome::Cancelled,
                ..
            } => Err(Cancelled),
            Joined::Child { .. } | Joined::Delay { .. } => {
                unreachable!("an await-event's one-off join set holds one event wait")
            }
        }))
    }

    /// Join-next with an optional requested function; `None` inside: all processed.
    fn join_next_inner(
        &mut self,
        js: &JoinSetId,
        requested: Option<&Ffqn>,
    ) -> Result<Progress<Option<Joined>>, ReplayError> {
        let resumed = self.resume_pending(
            |p| {
                matches!(p, PendingCall::JoinNext { join_set_id, requested: r }
                    if join_set_id == js && r.as_ref() == requested)
            },
            || format!("join-next of {js}"),
        )?;
        let slot = match resumed {
            Some(slot) => slot,
            None => {
                let slot = self.join_sets.usable(js)?;
                if self.join_sets.get(slot).all_processed() {
                    self.record_join_next_too_many(js, requested)?;
                    return Ok(Progress::Ready(None));
                }
                self.record_join_next(js, false, requested)?;
                slot
            }
        };
        let progress = self.consume_or_block(slot, || PendingCall::JoinNext {
            join_set_id: js.clone(),
            requested: requested.cloned(),
        })?;
        Ok(progress.map(Some))
    }

    pub(super) fn record_join_next(
        &mut self,
        js: &JoinSetId,
        closing: bool,
        requested: Option<&Ffqn>,
    ) -> Result<(), ReplayError> {
        let event = || HistoryEvent::JoinNext {
            join_set_id: js.clone(),
            closing,
            requested_ffqn: requested.cloned(),
        };
        if self
            .replay_step(
                |r| matching::join_next(r, js, closing, requested),
                |_| event(),
            )?
            .is_none()
        {
            self.append(event());
        }
        Ok(())
    }

    fn record_join_next_too_many(
        &mut self,
        js: &JoinSetId,
        requested: Option<&Ffqn>,
    ) -> Result<(), ReplayError> {
        let event = || HistoryEvent::JoinNextTooMany {
            join_set_id: js.clone(),
            requested_ffqn: requested.cloned(),
        };
        if self
            .replay_step(
                |r| matching::join_next_too_many(r, js, requested),
                |_| event(),
            )?
            .is_none()
        {
            self.append(event());
        }
        Ok(())
    }
}
