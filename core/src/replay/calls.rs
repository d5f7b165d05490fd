//! Host calls that never block: join set creation, submissions, random draws, schedule, stub,
//! get.

use serde_json::Value;
use ulid::Ulid;

use crate::model::{
    ChildKind, DelayId, EventRequestId, ExecutionId, ExecutionResult, Ffqn, HistoryEvent,
    JoinSetId, JoinSetKind, JoinSetRequest, PersistValue, ScheduleAt, StubOutcome,
    join_set::MAX_NAME_LEN,
};

use super::engine::Replay;
use super::error::{ReplayError, UsageError};
use super::join_sets::Request;
use super::matching;
use super::outcome::{CreateJoinSetError, GetError, Output, StubError};
use super::rng::{self, Draw};

/// Longest string `random_string` draws: a persisted value lives in the history forever.
pub const MAX_RANDOM_STRING_LEN: u64 = 65_536;

impl Replay {
    /// Creates a generated join set `g:<n>`.
    pub fn create_join_set(&mut self) -> Result<JoinSetId, ReplayError> {
        self.ensure_idle("create-join-set")?;
        Ok(self.record_join_set_create(NewJoinSet::Generated)?.0)
    }

    /// Creates a named join set `n:<name>`. An invalid name or a name already used by this
    /// execution is the workflow's error (nothing is recorded; both are deterministic).
    pub fn create_named_join_set(
        &mut self,
        name: &str,
    ) -> Result<Result<JoinSetId, CreateJoinSetError>, ReplayError> {
        self.ensure_idle("create-named-join-set")?;
        let js = match JoinSetId::named(name) {
            Ok(js) => js,
            Err(e) => return Ok(Err(e.into())),
        };
        if self.join_sets.is_created(&js) {
            return Ok(Err(CreateJoinSetError::Conflict(js)));
        }
        Ok(Ok(self.record_join_set_create(NewJoinSet::Named(js))?.0))
    }

    /// Submits a child execution of `ffqn` into `js`; returns its derived id.
    ///
    /// `kind` comes from the component registry and decides what closing does with the child
    /// (workflows are awaited, activities and stubs cancelled). When replaying, the recorded
    /// kind is used and not compared: it describes what was started then, and is no part of
    /// the workflow's code.
    pub fn submit(
        &mut self,
        js: &JoinSetId,
        ffqn: &Ffqn,
        params: &Value,
        kind: ChildKind,
    ) -> Result<ExecutionId, ReplayError> {
        self.ensure_idle("submit")?;
        let slot = self.join_sets.usable(js)?;
        self.submit_into(slot, js, ffqn, params, kind)
    }

    /// Submits a delay into `js`; returns its id. The expiry is resolved against
    /// [`Replay::now`] on the first run and recorded.
    pub fn submit_delay(
        &mut self,
        js: &JoinSetId,
        timeout: ScheduleAt,
    ) -> Result<DelayId, ReplayError> {
        self.ensure_idle("submit-delay")?;
        let slot = self.join_sets.usable(js)?;
        self.submit_delay_into(slot, js, timeout)
    }

    /// Adds a wait for the next event named `name` into `js`; returns its id. An invalid
    /// name is the workflow's bug, fatal like a trap ([`UsageError::InvalidEventName`]).
    pub fn submit_event(
        &mut self,
        js: &JoinSetId,
        name: &str,
    ) -> Result<EventRequestId, ReplayError> {
        self.ensure_idle("submit-event")?;
        let slot = self.join_sets.usable(js)?;
        self.submit_event_into(slot, js, name)
    }

    /// A random number in `[min, max_exclusive)`, drawn on the first run and persisted.
    pub fn random_u64(&mut self, min: u64, max_exclusive: u64) -> Result<u64, ReplayError> {
        self.ensure_idle("random-u64")?;
        if min >= max_exclusive {
            return Err(UsageError::InvalidRange {
                what: "random-u64",
                min,
                max_exclusive,
            }
            .into());
        }
        let fresh =
            |this: &Self| min + Draw::at(this.seed, this.cursor as u64).below(max_exclusive - min);
        let event = |value| HistoryEvent::Persist {
            value: PersistValue::RandomU64 {
                min,
                max_exclusive,
                value,
            },
        };
        let recorded = self.replay_step(
            |r| matching::random_u64(r, min, max_exclusive),
            |this| event(fresh(this)),
        )?;
        Ok(match recorded {
            Some(v) => match &self.history[v] {
                HistoryEvent::Persist {
                    value: PersistValue::RandomU64 { value, .. },
                } => *value,
                _ => unreachable!("matched a RandomU64"),
            },
            None => {
                let value = fresh(self);
                self.append(event(value));
                value
            }
        })
    }

    /// A random alphanumeric string with a length in `[min_length, max_length_exclusive)`
    /// (at most [`MAX_RANDOM_STRING_LEN`]), drawn on the first run and persisted.
    pub fn random_string(
        &mut self,
        min_length: u64,
        max_length_exclusive: u64,
    ) -> Result<String, ReplayError> {
        self.ensure_idle("random-string")?;
        if min_length >= max_length_exclusive || max_length_exclusive > MAX_RANDOM_STRING_LEN + 1 {
            return Err(UsageError::InvalidRange {
                what: "random-string length",
                min: min_length,
                max_exclusive: max_length_exclusive,
            }
            .into());
        }
        let fresh = |this: &Self| {
            let mut draw = Draw::at(this.seed, this.cursor as u64);
            rng::random_string(&mut draw, min_length, max_length_exclusive)
        };
        let event = |value| HistoryEvent::Persist {
            value: PersistValue::RandomString {
                min_length,
                max_length_exclusive,
                value,
            },
        };
        let recorded = self.replay_step(
            |r| matching::random_string(r, min_length, max_length_exclusive),
            |this| event(fresh(this)),
        )?;
        Ok(match recorded {
            Some(v) => match &self.history[v] {
                HistoryEvent::Persist {
                    value: PersistValue::RandomString { value, .. },
                } => value.clone(),
                _ => unreachable!("matched a RandomString"),
            },
            None => {
                let value = fresh(self);
                self.append(event(value.clone()));
                value
            }
        })
    }

    /// Schedules a new top-level execution of `ffqn`; returns its id. The id is generated
    /// deterministically from the clock, the execution's seed and the version, so a redone
    /// batch schedules the same execution; replay returns the recorded id and compares the
    /// function, the parameters and the intention.
    pub fn schedule(
        &mut self,
        ffqn: &Ffqn,
        params: &Value,
        intention: ScheduleAt,
    ) -> Result<ExecutionId, ReplayError> {
        self.ensure_idle("schedule")?;
        let event = |this: &Self| HistoryEvent::Schedule {
            execution_id: this.fresh_top_level_id(),
            ffqn: ffqn.clone(),
            params: params.clone(),
            intention,
            scheduled_at: intention.resolve(this.now),
        };
        let recorded =
            self.replay_step(|r| matching::schedule(r, ffqn, params, &intention), event)?;
        Ok(match recorded {
            Some(v) => match &self.history[v] {
                HistoryEvent::Schedule { execution_id, .. } => execution_id.clone(),
                _ => unreachable!("matched a Schedule"),
            },
            None => {
                let e = event(self);
                let HistoryEvent::Schedule {
                    execution_id,
                    scheduled_at,
                    ..
                } = &e
                else {
                    unreachable!("built a Schedule")
                };
                self.outputs.push(Output::Schedule {
                    execution_id: execution_id.clone(),
                    ffqn: ffqn.clone(),
                    params: params.clone(),
                    at: *scheduled_at,
                });
                let id = execution_id.clone();
                self.append(e);
                id
            }
        })
    }

    /// Registers the execution for the events sent to correlation key `key`
    /// ([`crate::correlation`]): recorded, and emitted as [`Output::Correlate`] on the first
    /// run. An invalid key is the workflow's bug, fatal like a trap
    /// ([`UsageError::InvalidCorrelationKey`]).
    pub fn correlate(&mut self, key: &str) -> Result<(), ReplayError> {
        self.ensure_idle("correlate")?;
        if let Err(e) = crate::state_key::check_correlation_key(key) {
            return Err(UsageError::InvalidCorrelationKey(e.to_string()).into());
        }
        let event = HistoryEvent::Correlate {
            key: key.to_owned(),
        };
        let recorded = self.replay_step(|r| matching::correlate(r, key), |_| event.clone())?;
        if recorded.is_none() {
            self.append(event);
            self.outputs.push(Output::Correlate {
                key: key.to_owned(),
            });
        }
        Ok(())
    }

    /// Writes `result` as the result of the stub activity child `target`. The first write is
    /// emitted as [`Output::StubWrite`]; writing the value already there is `Ok`, a different
    /// one is [`StubError::Conflict`]. The outcome is recorded (it can depend on whether a
    /// response had arrived) and replayed; the value is compared.
    pub fn stub(
        &mut self,
        target: &ExecutionId,
        result: ExecutionResult,
    ) -> Result<Result<(), StubError>, ReplayError> {
        self.ensure_idle("stub")?;
        let Some((slot, index)) = self.stub_target(target) else {
            return Ok(Err(StubError::NotFound));
        };
        if self.is_fresh() {
            // The outcome depends on whether the child's response has arrived.
            self.join_sets.flush();
        }
        let event = |this: &Self, result: &ExecutionResult| HistoryEvent::Stub {
            target_execution_id: target.clone(),
            result: result.clone(),
            outcome: this.fresh_stub_outcome(slot, index, result).0,
        };
        let recorded = self.replay_step(
            |r| matching::stub(r, target, &result),
            |this| event(this, &result),
        )?;
        let outcome = match recorded {
            Some(v) => match &self.history[v] {
                HistoryEvent::Stub { outcome, .. } => *outcome,
                _ => unreachable!("matched a Stub"),
            },
            None => {
                let (outcome, write) = self.fresh_stub_outcome(slot, index, &result);
                self.append(event(self, &result));
                if write {
                    self.outputs.push(Output::StubWrite {
                        execution_id: target.clone(),
                        result: result.clone(),
                    });
                }
                outcome
            }
        };
        if outcome == StubOutcome::Conflict {
            return Ok(Err(StubError::Conflict));
        }
        if let Some(Request::Child { stubbed, .. }) =
            self.join_sets.get_mut(slot).request_mut(index)
        {
            stubbed.get_or_insert_with(|| Box::new(result));
        }
        Ok(Ok(()))
    }

    /// The result of child `child`, if a join-next has processed its response. Records nothing:
    /// the answer follows from the history processed so far.
    pub fn get(&self, child: &ExecutionId, ffqn: &Ffqn) -> Result<ExecutionResult, GetError> {
        if !child.is_child_of(&self.execution.id) {
            return Err(GetError::NotFound);
        }
        let step = child.step().expect("a child id has a step");
        let request = self
            .join_sets
            .find(&step.join_set_id)
            .filter(|s| s.created)
            .and_then(|s| s.request(step.index));
        match request {
            Some(Request::Child {
                ffqn: actual,
                result: Some(result),
                ..
            }) => {
                if actual != ffqn {
                    Err(GetError::FunctionMismatch {
                        requested: ffqn.clone(),
                        actual: actual.clone(),
                    })
                } else {
                    Ok(result.clone())
                }
            }
            _ => Err(GetError::NotFound),
        }
    }

    // ---- shared by the composite calls ----

    /// Records (fresh) or replays the creation of the next join set; returns its id (when
    /// replaying, the recorded one, so later comparisons can share it) and its slot.
    pub(super) fn record_join_set_create(
        &mut self,
        new: NewJoinSet<'_>,
    ) -> Result<(JoinSetId, usize), ReplayError> {
        let counter = self.join_set_counter + 1;
        let recorded = self.replay_step(
            |r| matching::join_set_create(r, |id| new.is(counter, id)),
            |_| HistoryEvent::JoinSetCreate {
                join_set_id: new.build(counter),
            },
        )?;
        let js = match recorded {
            Some(v) => match &self.history[v] {
                HistoryEvent::JoinSetCreate { join_set_id } => join_set_id.clone(),
                _ => unreachable!("matched a JoinSetCreate"),
            },
            None => {
                let js = new.build(counter);
                self.append(HistoryEvent::JoinSetCreate {
                    join_set_id: js.clone(),
                });
                js
            }
        };
        self.join_set_counter = counter;
        let slot = self.join_sets.create(&js);
        Ok((js, slot))
    }

    pub(super) fn submit_into(
        &mut self,
        slot: usize,
        js: &JoinSetId,
        ffqn: &Ffqn,
        params: &Value,
        kind: ChildKind,
    ) -> Result<ExecutionId, ReplayError> {
        let index = self.join_sets.get(slot).next_index();
        let event = |child: ExecutionId| HistoryEvent::JoinSetRequest {
            join_set_id: js.clone(),
            request: JoinSetRequest::ChildExecutionRequest {
                child_execution_id: child,
                target_ffqn: ffqn.clone(),
                params: params.clone(),
                child_kind: kind,
            },
        };
        let parent = self.execution.id.clone();
        let recorded = self.replay_step(
            |r| matching::child_request(r, &parent, js, index, ffqn, params),
            |this| event(this.execution.id.child(js, index)),
        )?;
        // Replaying, the recorded id is returned: equal to the derived one (compared above),
        // and sharing its allocation.
        let (child, kind) = match recorded {
            Some(v) => match &self.history[v] {
                HistoryEvent::JoinSetRequest {
                    request:
                        JoinSetRequest::ChildExecutionRequest {
                            child_execution_id,
                            child_kind,
                            ..
                        },
                    ..
                } => (child_execution_id.clone(), *child_kind),
                _ => unreachable!("matched a ChildExecutionRequest"),
            },
            None => {
                let child = self.execution.id.child(js, index);
                self.append(event(child.clone()));
                self.outputs.push(Output::SubmitChild {
                    child_execution_id: child.clone(),
                    ffqn: ffqn.clone(),
                    params: params.clone(),
                    kind,
                });
                (child, kind)
            }
        };
        self.join_sets.get_mut(slot).push_request(Request::Child {
            ffqn: ffqn.clone(),
            kind,
            result: None,
            stubbed: None,
        });
        Ok(child)
    }

    pub(super) fn submit_delay_into(
        &mut self,
        slot: usize,
        js: &JoinSetId,
        timeout: ScheduleAt,
    ) -> Result<DelayId, ReplayError> {
        let index = self.join_sets.get(slot).next_index();
        let delay_id = self.execution.id.delay(js, index);
        let event = |expires_at| HistoryEvent::JoinSetRequest {
            join_set_id: js.clone(),
            request: JoinSetRequest::DelayRequest {
                delay_id: delay_id.clone(),
                timeout,
                expires_at,
            },
        };
        let recorded = self.replay_step(
            |r| matching::delay_request(r, js, &delay_id, &timeout),
            |this| event(timeout.resolve(this.now)),
        )?;
        let expires_at = match recorded {
            Some(v) => match &self.history[v] {
                HistoryEvent::JoinSetRequest {
                    request: JoinSetRequest::DelayRequest { expires_at, .. },
                    ..
                } => *expires_at,
                _ => unreachable!("matched a DelayRequest"),
            },
            None => {
                let expires_at = timeout.resolve(self.now);
                self.append(event(expires_at));
                self.outputs.push(Output::RequestDelay {
                    delay_id: delay_id.clone(),
                    expires_at,
                });
                expires_at
            }
        };
        self.join_sets.get_mut(slot).push_request(Request::Delay {
            expires_at,
            outcome: None,
        });
        Ok(delay_id)
    }

    pub(super) fn submit_event_into(
        &mut self,
        slot: usize,
        js: &JoinSetId,
        name: &str,
    ) -> Result<EventRequestId, ReplayError> {
        if let Err(e) = crate::model::check_event_name(name) {
            return Err(UsageError::InvalidEventName(e.to_string()).into());
        }
        let index = self.join_sets.get(slot).next_index();
        let event_request_id = self.execution.id.event_request(js, index);
        let event = HistoryEvent::JoinSetRequest {
            join_set_id: js.clone(),
            request: JoinSetRequest::EventRequest {
                event_request_id: event_request_id.clone(),
                name: name.to_string(),
            },
        };
        let recorded = self.replay_step(
            |r| matching::event_request(r, js, &event_request_id, name),
            |_| event.clone(),
        )?;
        if recorded.is_none() {
            self.append(event);
        }
        self.join_sets.get_mut(slot).push_request(Request::Event {
            name: name.to_string(),
            outcome: None,
        });
        Ok(event_request_id)
    }

    fn fresh_top_level_id(&self) -> ExecutionId {
        let mut draw = Draw::at(self.seed, self.cursor as u64);
        let random = (u128::from(draw.next_u64()) << 64) | u128::from(draw.next_u64());
        let millis = u64::try_from(self.now.timestamp_millis()).unwrap_or(0);
        ExecutionId::top_level(Ulid::from_parts(millis, random))
    }

    /// `(slot, index)` of `target` if it is a stub child of this execution.
    fn stub_target(&self, target: &ExecutionId) -> Option<(usize, u64)> {
        if !target.is_child_of(&self.execution.id) {
            return None;
        }
        let step = target.step()?;
        let slot = self.join_sets.created_slot(&step.join_set_id)?;
        match self.join_sets.get(slot).request(step.index)? {
            Request::Child {
                kind: ChildKind::Stub,
                ..
            } => Some((slot, step.index)),
            _ => None,
        }
    }

    /// The outcome of writing `result` now, and whether it is a first write. What is "already
    /// there": our earlier stub, else the child's response if it has arrived.
    fn fresh_stub_outcome(
        &self,
        slot: usize,
        index: u64,
        result: &ExecutionResult,
    ) -> (StubOutcome, bool) {
        let state = self.join_sets.get(slot);
        let existing = match state.request(index) {
            Some(Request::Child {
                stubbed: Some(v), ..
            }) => Some(&**v),
            Some(Request::Child {
                result: Some(v), ..
            }) => Some(v),
            _ => match self.join_sets.queued_response(slot, index) {
                Some(crate::model::Response::ChildExecutionFinished { result, .. }) => Some(result),
                _ => None,
            },
        };
        match existing {
            None => (StubOutcome::Ok, true),
            Some(v) if v == result => (StubOutcome::Ok, false),
            Some(_) => (StubOutcome::Conflict, false),
        }
    }
}

/// The join set a creation call means, before its id is built: replay compares the recorded
/// id with it without building (and allocating) its own.
pub(super) enum NewJoinSet<'a> {
    /// `g:<counter>`.
    Generated,
    /// `o:<counter>-<label>`, labelled after what it is for: a function name or `sleep`.
    OneOff(&'a str),
    Named(JoinSetId),
}

impl NewJoinSet<'_> {
    /// The label cut to fit the name limit; it is informational (the counter makes the id
    /// unique). Labels are function names (ASCII identifiers) or `sleep`: any byte is a
    /// boundary.
    fn label(label: &str, counter: u64) -> &str {
        let digits = counter.checked_ilog10().unwrap_or(0) as usize + 1;
        let room = MAX_NAME_LEN - digits - 1;
        &label[..label.len().min(room)]
    }

    fn build(&self, counter: u64) -> JoinSetId {
        match self {
            NewJoinSet::Generated => {
                JoinSetId::generated(counter).expect("a positive counter is a valid generated name")
            }
            NewJoinSet::OneOff(label) => JoinSetId::one_off(counter, Self::label(label, counter))
                .expect("a function name is a valid label"),
            NewJoinSet::Named(js) => js.clone(),
        }
    }

    fn is(&self, counter: u64, id: &JoinSetId) -> bool {
        let counter_matches = |digits: &str| digits.parse::<u64>() == Ok(counter);
        match self {
            // Names are canonical (no leading zeros), so equal numbers mean equal names.
            NewJoinSet::Generated => {
                id.kind() == JoinSetKind::Generated && counter_matches(id.name())
            }
            NewJoinSet::OneOff(label) => {
                id.kind() == JoinSetKind::OneOff
                    && id.name().split_once('-').is_some_and(|(digits, rest)| {
                        counter_matches(digits) && rest == Self::label(label, counter)
                    })
            }
            NewJoinSet::Named(js) => id == js,
        }
    }
}
