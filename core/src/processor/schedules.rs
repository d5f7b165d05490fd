//! Schedules of the owned partitions: the processor's glue to the rules of
//! [`crate::schedule`].
//!
//! A command (`weir.responses`, keyed `schedule:<name>` on that key's partition, else
//! `misrouted`, [`super::admit`]) is folded into the schedule's state, a refused one
//! dead-lettered with why (a `create` whose function the host does not have, or whose params
//! do not fit it, as a submission would be). Each batch takes the due ticks of the owned
//! schedules: a submission per tick that starts an execution (its id derived from the schedule
//! and the tick), the cancellations `cancel-previous` makes, and the new state
//! (`PutSchedule`, on `weir.state`), all in the batch's transaction. A tick's execution, when
//! it finishes, tells its schedule (`RUN_FINISHED`, [`super::finish`]), which `skip` waits
//! for.

use super::Processor;
use super::effect::Batch;
use super::effect::Effect;
use crate::records::DlqReason;
use crate::runner::Rejection;
use crate::runner::WorkflowRunner;
use crate::schedule;
use crate::schedule::Applied;
use crate::schedule::ScheduleAction;
use crate::schedule::ScheduleCommand;
use crate::schedule::ScheduleState;
use chrono::DateTime;
use chrono::Utc;

impl<R: WorkflowRunner> Processor<R> {
    /// A command about a schedule of an owned partition; see [`crate::schedule::apply`]. A
    /// `create` whose function the host does not have, or whose params do not fit it, is
    /// refused like a submission would be.
    pub(super) fn schedule_command(
        &mut self,
        batch: &mut Batch,
        index: usize,
        command: ScheduleCommand,
    ) {
        let name = command.name.clone();
        if let ScheduleAction::Create(spec) = &command.action
            && let Err(rejection) = self.runner.check_submission(&spec.ffqn, &spec.params)
        {
            let (reason, error) = match rejection {
                Rejection::UnknownFunction(e) => (DlqReason::UnknownFfqn, e),
                Rejection::InvalidParams(e) => (DlqReason::InvalidParams, e),
            };
            let error = format!("create of schedule `{name}` refused: {error}");
            tracing::warn!(schedule = %name, %error, "schedule command refused");
            self.dead_letter(batch, index, reason, error);
            return;
        }
        match schedule::apply(self.schedules.get(&name), &command, batch.now) {
            Applied::Unchanged => {
                tracing::debug!(schedule = %name, action = command.action.as_str(), "schedule command changes nothing");
            }
            Applied::Refused(error) => {
                tracing::warn!(schedule = %name, %error, "schedule command refused");
                let reason = match command.action {
                    ScheduleAction::Create(_) => DlqReason::InvalidParams,
                    _ => DlqReason::Other,
                };
                self.dead_letter(batch, index, reason, error);
            }
            Applied::Delete => {
                tracing::info!(schedule = %name, "schedule deleted");
                self.schedules.remove(&name);
                batch
                    .effects
                    .push(Effect::PutSchedule { name, state: None });
            }
            Applied::Put(state) => {
                if !matches!(command.action, ScheduleAction::RunFinished(_)) {
                    tracing::info!(schedule = %name, action = command.action.as_str(), status = state.status.as_str(), next_tick = ?state.next_tick, "schedule changed");
                }
                self.put_schedule(batch, *state);
            }
        }
    }

    fn put_schedule(&mut self, batch: &mut Batch, state: ScheduleState) {
        let name = state.name.clone();
        batch.effects.push(Effect::PutSchedule {
            name: name.clone(),
            state: Some(state.clone()),
        });
        self.schedules.insert(name, state);
    }

    /// Adopts the schedules of a partition taken over, as `weir.state` has them.
    pub fn restore_schedules(&mut self, states: impl IntoIterator<Item = ScheduleState>) {
        for state in states {
            self.schedules.insert(state.name.clone(), state);
        }
    }

    /// The schedules of the owned partitions.
    pub fn schedules(&self) -> impl Iterator<Item = &ScheduleState> {
        self.schedules.values()
    }

    /// Whether a schedule has a tick due at `now` (the driver makes a batch for it).
    pub fn schedule_due(&self, now: DateTime<Utc>) -> bool {
        self.schedules.values().any(|s| schedule::is_due(s, now))
    }

    /// Takes the due ticks of every schedule ([`crate::schedule::fire`]): a submission per
    /// tick that starts an execution, the cancellations `cancel-previous` makes, and the new
    /// state, all in this batch.
    pub fn fire_schedules(&mut self, batch: &mut Batch) {
        let due: Vec<String> = self
            .schedules
            .values()
            .filter(|s| schedule::is_due(s, batch.now))
            .map(|s| s.name.clone())
            .collect();
        for name in due {
            let Some(fired) = self
                .schedules
                .get(&name)
                .and_then(|state| schedule::fire(state, batch.now))
            else {
                continue;
            };
            self.stats.ticks_started += fired.starts.len() as u64;
            self.stats.ticks_skipped += fired.skipped;
            self.stats.ticks_missed += fired.missed;
            if fired.missed > 0 {
                tracing::warn!(schedule = %name, missed = fired.missed, "schedule ticks missed: owed for longer than the catch-up window");
            }
            for request in fired.cancels {
                tracing::info!(schedule = %name, execution = %request.execution_id, "previous run cancelled (overlap cancel-previous)");
                batch.effects.push(Effect::CancelExecution(request));
            }
            for submission in fired.starts {
                tracing::debug!(schedule = %name, execution = %submission.execution_id, "schedule tick starts an execution");
                batch.effects.push(Effect::Submit(submission));
            }
            self.put_schedule(batch, fired.state);
        }
    }
}
