//! Events (`weir.events`) and correlation keys: the processor's glue to the rules of
//! [`crate::correlation`].
//!
//! An event keyed by its target execution: for an execution that has finished it is
//! dead-lettered (`refused`, with why); for one that does not exist it is kept under the
//! execution's id until the submission creates it (journalled right after `Created`,
//! [`super::submit`]) or `early_event_wait` passes (then it comes back marked `waited_until`
//! and is dead-lettered `other`, [`correlation::hold_early`] — unless the owner was not
//! reading the submissions at some time during that wait, paused by admission or not owning
//! them yet: the submission may be in the part not read, so the event is kept again, issue
//! 33 F7, [`Processor::submissions_read`]); an event id the execution has
//! seen is dropped (counted); one whose name has an open wait is delivered to the oldest such
//! wait as `EventDelivered` (journalled as a response, like any other); otherwise it is
//! journalled as `EventReceived` and kept until a wait of its name takes it (the projection's
//! buffer, at most [`MAX_BUFFERED_EVENTS`] events and [`MAX_BUFFERED_EVENT_BYTES`] of payloads
//! per execution; beyond, dead-lettered `refused`). After every step of a run, an open wait
//! whose name has a buffered event takes the oldest one ([`super::run`]), so an event sent
//! before the workflow waits is not lost. Events still buffered when the execution finishes
//! are dropped (counted: `events_unclaimed`).
//!
//! An event sent to a correlation key, a key's registration and its end are folded into the
//! key's state by [`crate::correlation`]; the processor writes the new state (`weir.state`)
//! and forwards what the rule forwards, in the same batch.

use super::Processor;
use super::cancel::rfc3339;
use super::config::ProcessorError;
use super::effect::Batch;
use super::effect::Effect;
use super::size::json_size;
use crate::correlation;
use crate::correlation::CorrelationCommand;
use crate::correlation::CorrelationState;
use crate::correlation::Forwarded;
use crate::correlation::KeyedEvent;
use crate::correlation::Received;
use crate::correlation::RememberedEvent;
use crate::correlation::{MAX_BUFFERED_EVENT_BYTES, MAX_BUFFERED_EVENTS};
use crate::model::EventOutcome;
use crate::model::ExecutionId;
use crate::model::Response;
use crate::records::DlqReason;
use crate::records::HistoryEntry;
use crate::records::InboundEvent;
use crate::records::ReceivedEvent;
use crate::rows::ExecutionState;

use crate::runner::WorkflowRunner;
use chrono::DateTime;
use chrono::Utc;

impl<R: WorkflowRunner> Processor<R> {
    /// An event sent to an execution; see the module docs.
    pub(super) async fn receive_event(
        &mut self,
        batch: &mut Batch,
        index: usize,
        inbound: InboundEvent,
    ) -> Result<(), ProcessorError> {
        let id = inbound.target;
        let event = inbound.event;
        let what = format!("event {} `{}` for {id}", event.event_id, event.name);
        let finished = match self.cache.get(&id) {
            // Its submission may still be on its way (another topic, read in no fixed order
            // with this one): kept until it comes, or for `early_event_wait`.
            None if inbound.waited_until.is_none() && inbound.correlation_key.is_none() => {
                self.hold_early(batch, index, &id, event, inbound.sent_at);
                return Ok(());
            }
            // Its wait ran out, but not all of it with the submissions read: kept again.
            None if inbound.correlation_key.is_none()
                && inbound.waited_until.is_some_and(|until| {
                    self.submissions_unread_since(until - self.config.early_event_wait)
                }) =>
            {
                tracing::debug!(execution = %id, event = %event.event_id, "event kept again: its wait ran out while the submissions were not all read");
                self.hold_early(batch, index, &id, event, inbound.sent_at);
                return Ok(());
            }
            None => Some((DlqReason::Other, "the execution does not exist")),
            // One it took before it finished is a duplicate, not one to give the next holder.
            Some(live)
                if live.view.state == ExecutionState::Finished
                    && inbound.correlation_key.is_some()
                    && live.view.events_seen.contains(&event.event_id) =>
            {
                tracing::debug!(execution = %id, event = %event.event_id, "event dropped: the execution had it already");
                self.stats.events_duplicate += 1;
                return Ok(());
            }
            Some(live) if live.view.state == ExecutionState::Finished => {
                Some((DlqReason::Refused, "the execution has finished"))
            }
            Some(_) => None,
        };
        if let Some((reason, why)) = finished {
            let why = match inbound.waited_until {
                Some(at) if reason == DlqReason::Other => {
                    format!(
                        "{why} (the event waited for its submission until {})",
                        rfc3339(at)
                    )
                }
                _ => why.to_owned(),
            };
            match inbound.correlation_key {
                // Forwarded by its key before the key heard that the execution finished: it
                // goes back, to the key's next holder or its buffer.
                Some(key) => {
                    tracing::debug!(execution = %id, event = %event.event_id, %key, "event of a correlation key returned: {why}");
                    self.stats.keyed_events_returned += 1;
                    batch.effects.push(Effect::ReturnEvent(KeyedEvent {
                        event,
                        key,
                        sent_at: inbound.sent_at,
                        returned_by: Some(id),
                    }));
                }
                None => self.dead_letter(batch, index, reason, format!("{what}: {why}")),
            }
            return Ok(());
        }
        let Some((mut ctx, live)) = self.ctx_of(batch, &id) else {
            return Ok(());
        };
        if live.view.events_seen.contains(&event.event_id) {
            tracing::debug!(execution = %id, event = %event.event_id, "event dropped: the execution has it already");
            ctx.stats.events_duplicate += 1;
            return Ok(());
        }
        if let Some(request) = live.view.open_event_request(&event.name) {
            let response = Response::EventDelivered {
                event_request_id: request.clone(),
                outcome: EventOutcome::Received {
                    event_id: event.event_id,
                    payload: event.payload,
                },
            };
            ctx.stats.events_received += 1;
            return ctx.deliver(live, response, Some(index), None).await;
        }
        let buffered = live.view.buffered_events();
        let bytes: usize = buffered.iter().map(|e| json_size(&e.payload)).sum();
        if buffered.len() >= MAX_BUFFERED_EVENTS
            || bytes + json_size(&event.payload) > MAX_BUFFERED_EVENT_BYTES
        {
            let error = format!(
                "{what}: the execution holds {} events ({bytes} bytes) no wait has taken; at \
                 most {MAX_BUFFERED_EVENTS} events and {MAX_BUFFERED_EVENT_BYTES} bytes wait",
                buffered.len()
            );
            ctx.dead_letter(index, DlqReason::Refused, error);
            return Ok(());
        }
        ctx.stats.events_received += 1;
        ctx.append(&mut live.view, HistoryEntry::EventReceived(event))
    }

    /// An event for `id`, an execution that does not exist: kept under its id until its
    /// submission takes it ([`Processor::submit`]) or `early_event_wait` passes
    /// ([`correlation::hold_early`], [`correlation::expire`]).
    fn hold_early(
        &mut self,
        batch: &mut Batch,
        index: usize,
        id: &ExecutionId,
        event: ReceivedEvent,
        sent_at: DateTime<Utc>,
    ) {
        let key = id.to_string();
        let event_id = event.event_id.clone();
        let wait = self.config.early_event_wait;
        match correlation::hold_early(
            self.correlations.get(&key),
            id,
            event,
            sent_at,
            batch.now,
            wait,
        ) {
            Received::Changed(changed) => {
                tracing::debug!(execution = %id, event = %event_id, "event kept: the execution does not exist yet");
                self.stats.events_early += 1;
                self.put_correlation(batch, &key, changed);
            }
            Received::Duplicate => {
                tracing::debug!(execution = %id, event = %event_id, "event dropped: kept for the execution already");
                self.stats.events_duplicate += 1;
            }
            Received::Full(error) => {
                let error = format!("{error} (the execution does not exist yet)");
                self.dead_letter(batch, index, DlqReason::Refused, error);
            }
        }
    }

    /// An event sent to a correlation key of an owned partition; see [`crate::correlation`].
    pub(super) fn receive_keyed_event(
        &mut self,
        batch: &mut Batch,
        index: usize,
        event: KeyedEvent,
    ) {
        let key = event.key.clone();
        let remembered = self.correlations.remembered(&key);
        match correlation::receive(self.correlations.get(&key), remembered, event) {
            Received::Changed(changed) => {
                match changed.forwards.first() {
                    Some(f) => {
                        tracing::debug!(%key, execution = %f.target, event = %f.event.event_id, "event of a correlation key forwarded")
                    }
                    None => {
                        tracing::debug!(%key, "event of a correlation key buffered: no execution holds the key");
                        self.stats.keyed_events_buffered += 1;
                    }
                }
                self.put_correlation(batch, &key, changed);
            }
            Received::Duplicate => {
                tracing::debug!(%key, "event dropped: the key has this event id already");
                self.stats.events_duplicate += 1;
            }
            Received::Full(error) => {
                tracing::warn!(%key, %error, "event of a correlation key refused");
                self.dead_letter(batch, index, DlqReason::Refused, error);
            }
        }
    }

    /// A registration of a correlation key of an owned partition, or the end of one.
    pub(super) fn correlation_command(
        &mut self,
        batch: &mut Batch,
        index: usize,
        command: CorrelationCommand,
    ) {
        let key = command.key.clone();
        match correlation::apply(self.correlations.get(&key), &command) {
            correlation::Applied::Unchanged => {
                tracing::debug!(%key, execution = %command.execution_id, action = command.action.as_str(), "correlation command changes nothing");
            }
            correlation::Applied::Refused { error, tell } => {
                tracing::warn!(%key, %error, "correlation command refused; the execution is told");
                self.dead_letter(batch, index, DlqReason::Refused, error);
                batch.effects.push(Effect::ForwardEvent(tell));
            }
            correlation::Applied::Changed(changed) => {
                tracing::info!(%key, execution = %command.execution_id, action = command.action.as_str(), forwarded = changed.forwards.len(), "correlation key changed");
                self.put_correlation(batch, &key, changed);
            }
        }
    }

    /// Writes a key's new state (if it changed: a forward to the holder changes nothing of
    /// it) and forwards what the rule forwards, in this batch; the ids a correlation key
    /// forwards are remembered, each a record of its own.
    pub(super) fn put_correlation(
        &mut self,
        batch: &mut Batch,
        key: &str,
        changed: correlation::Changed,
    ) {
        self.stats.keyed_events_forwarded += changed.forwards.len() as u64;
        for forward in &changed.forwards {
            // A key's forward (not an early buffer's event sent back to its execution).
            if forward.correlation_key.is_some() {
                self.remember(batch, key, &forward.event.event_id);
            }
        }
        batch
            .effects
            .extend(changed.forwards.into_iter().map(Effect::ForwardEvent));
        batch
            .effects
            .extend(changed.cancel_back.map(|c| Effect::CancelExecution(*c)));
        if self.correlations.get(key) == changed.state.as_ref() {
            return;
        }
        match &changed.state {
            Some(state) => {
                debug_assert_eq!(state.key, key, "a key's state names its key");
                self.correlations.insert(state.clone());
            }
            None => {
                self.correlations.remove(key);
            }
        }
        batch.effects.push(Effect::PutCorrelation {
            key: key.to_owned(),
            state: changed.state,
        });
    }

    /// Remembers that `key` forwarded `event_id` now: its record, and the tombstones of the
    /// oldest ids forgotten beyond [`correlation::MAX_REMEMBERED`].
    fn remember(&mut self, batch: &mut Batch, key: &str, event_id: &str) {
        let forwarded = Forwarded {
            event_id: event_id.to_owned(),
            at: batch.now,
        };
        let (new, forgotten) = self.correlations.remember(key, forwarded);
        if new {
            batch.effects.push(Effect::PutRemembered {
                key: key.to_owned(),
                event_id: event_id.to_owned(),
                at: Some(batch.now),
            });
        }
        self.stats.remembered_cut += forgotten.len() as u64;
        batch
            .effects
            .extend(forgotten.into_iter().map(|f| Effect::PutRemembered {
                key: key.to_owned(),
                event_id: f.event_id,
                at: None,
            }));
    }

    /// Whether a correlation key has an event id to forget at `now`, or an execution's early
    /// events stop waiting (the driver makes a batch for it).
    pub fn correlation_due(&self, now: DateTime<Utc>) -> bool {
        self.correlations.due(now)
    }

    /// Forgets the event ids the keys forwarded [`correlation::DEDUP_WINDOW`] ago (their
    /// records tombstoned), and sends back the early events whose wait ran out; a key left
    /// with nothing is a tombstone.
    pub fn expire_correlations(&mut self, batch: &mut Batch) {
        for (key, forgotten) in self.correlations.forget_due(batch.now) {
            batch.effects.push(Effect::PutRemembered {
                key,
                event_id: forgotten.event_id,
                at: None,
            });
        }
        let expired: Vec<(String, correlation::Changed)> = self
            .correlations
            .due_keys(batch.now)
            .into_iter()
            .filter_map(|key| {
                let state = self.correlations.get(&key)?;
                Some((key, correlation::expire(state, batch.now)?))
            })
            .collect();
        for (key, changed) in expired {
            self.put_correlation(batch, &key, changed);
        }
    }

    /// Tells whether the owner reads the submissions partitions at `now`: `false` while
    /// admission pauses them, and at a take-over (the new owner has read none of them yet).
    /// An early event whose wait ran out is dead-lettered only if they were read all along
    /// that wait (issue 33 F7: under a backlog an event sent before its submission was
    /// dead-lettered while the submission waited, unread, behind admission).
    pub fn submissions_read(&mut self, reading: bool, now: DateTime<Utc>) {
        if !reading {
            self.submissions_unread_at = Some(now);
        }
    }

    /// Whether the submissions were not read at some instant since `since`.
    pub(super) fn submissions_unread_since(&self, since: DateTime<Utc>) -> bool {
        self.submissions_unread_at.is_some_and(|at| at >= since)
    }

    /// Adopts the correlation keys of a partition taken over, as `weir.state` has them.
    pub fn restore_correlations(&mut self, states: impl IntoIterator<Item = CorrelationState>) {
        for state in states {
            self.correlations.insert(state);
        }
    }

    /// Adopts the ids the keys of a partition taken over remember, as `weir.state` has them.
    /// Ids that came in their key's own record (`unrecorded`: written before each id was a
    /// record of its own) are written as records by the first batch, with the key's record
    /// without them, so that the next owner reads them the new way.
    pub fn restore_remembered(
        &mut self,
        ids: impl IntoIterator<Item = RememberedEvent>,
        unrecorded: impl IntoIterator<Item = String>,
    ) {
        // In time order per key, so that each id goes to the end of its key's queue (the
        // state topic gives them in the order of their record keys).
        let mut ids: Vec<RememberedEvent> = ids.into_iter().collect();
        ids.sort_by(|a, b| (&a.key, a.forwarded.at).cmp(&(&b.key, b.forwarded.at)));
        for id in ids {
            let (_, forgotten) = self.correlations.remember(&id.key, id.forwarded);
            // Beyond the bound (written by a Weir of a larger one): forgotten by the first batch.
            self.take_over_effects
                .extend(forgotten.into_iter().map(|f| Effect::PutRemembered {
                    key: id.key.clone(),
                    event_id: f.event_id,
                    at: None,
                }));
        }
        for key in unrecorded {
            let remembered = self.correlations.remembered(&key);
            self.take_over_effects
                .extend(remembered.into_iter().flat_map(|r| r.iter()).map(|f| {
                    Effect::PutRemembered {
                        key: key.clone(),
                        event_id: f.event_id.clone(),
                        at: Some(f.at),
                    }
                }));
            let state = self.correlations.get(&key).cloned();
            self.take_over_effects
                .push(Effect::PutCorrelation { key, state });
        }
    }

    /// The correlation keys of the owned partitions that hold something.
    pub fn correlations(&self) -> impl Iterator<Item = &CorrelationState> {
        self.correlations.values()
    }

    /// The ids the keys of the owned partitions remember.
    pub fn remembered(&self) -> impl Iterator<Item = RememberedEvent> + '_ {
        self.correlations.all_remembered().flat_map(|(key, r)| {
            r.iter().map(move |f| RememberedEvent {
                key: key.to_owned(),
                forwarded: f.clone(),
            })
        })
    }
}
