//! The simulated producer side of a worker process: its transactions, the records its effects
//! become (routed by the wire table), commits, fencing and refusals.

use super::*;

impl World {
    fn refused(&mut self, pid: u64, refused: TxnRefused) -> CommitError {
        let name = self.procs[&pid].name();
        if let Some(txn) = self.proc(pid).open_txn.take() {
            self.cluster.end(txn, false, self.now);
        }
        match refused {
            TxnRefused::Generation(e) => {
                self.stats.refused_generation += 1;
                self.proc(pid).refused = true;
                self.event(format!("{name}: commit refused, transaction aborted: {e}"));
                CommitError::Refused(e.into())
            }
            TxnRefused::Fenced(e) => {
                self.stats.fenced += 1;
                self.event(format!("{name}: commit fenced: {e}"));
                CommitError::Fatal(e.into())
            }
        }
    }

    /// Begins the transaction and produces every record of `effects` into it.
    pub fn commit_begin(
        &mut self,
        pid: u64,
        effects: &[Effect],
    ) -> Result<(u64, Vec<Landed>), CommitError> {
        let now = self.now;
        let (tid, epoch) = {
            let p = &self.procs[&pid];
            (p.transactional_id.clone(), p.epoch)
        };
        let txn = match self.cluster.begin(&tid, epoch, pid, now) {
            Ok(txn) => txn,
            Err(e) => return Err(self.refused(pid, e)),
        };
        self.proc(pid).open_txn = Some(txn);
        let mut landed = Vec::new();
        for effect in effects {
            self.produce(pid, txn, effect, &mut landed);
        }
        Ok((txn, landed))
    }

    /// Produces the record of `effect` (if it writes one) into `txn`, where
    /// [`wire::address`] says, as the worker's encoder does.
    fn produce(&mut self, pid: u64, txn: u64, effect: &Effect, landed: &mut Vec<Landed>) {
        let now = self.now;
        let producer = Producer::Worker { pid };
        let address = match wire::address(effect) {
            Ok(Some(address)) => address,
            Ok(None) => return,
            Err(e) => {
                let name = self.procs[&pid].name();
                self.anomalies
                    .push(format!("{name}: an effect without an address: {e}"));
                return;
            }
        };
        // Who serves a route decides, by the wire table's rule, whether it hears of a
        // cancellation: the activity workers (`Faults::activity_workers`) serve the route of
        // `double`; the simulated activity service is an outside one that asks for nothing;
        // the external route (its own topic, which the activity workers watch) asks.
        if let wire::Destination::Route(ffqn) = &address.destination {
            let workers = self.faults.activity_workers;
            let service = wire::RouteService {
                external: !(workers && *ffqn == double_ffqn()),
                cancel_notices: workers && *ffqn == external_ffqn(),
            };
            if !service.takes(&address) {
                return;
            }
        }
        let topic = match &address.destination {
            wire::Destination::Route(ffqn)
                if self.faults.activity_workers && *ffqn == external_ffqn() =>
            {
                Topic::External
            }
            destination => Topic::of_destination(destination),
        };
        // A retry's backoff, as the table's header says it (the activity workers honour it).
        let not_before = address
            .headers
            .iter()
            .find(|(name, _)| *name == wire::NOT_BEFORE_HEADER)
            .filter(|_| self.faults.activity_workers)
            .and_then(|(_, value)| std::str::from_utf8(value).ok()?.parse::<i64>().ok())
            .and_then(chrono::DateTime::from_timestamp_millis);
        let (key, partitioned_by) = match address.key {
            Key::Exactly(key) => (key.clone(), key),
            Key::Within { key, partition_of } => (key, partition_of),
            Key::OfInput(input) => match self.procs[&pid].consumer.polled.get(&input) {
                Some(original) => {
                    let key = original.key.clone().unwrap_or_default();
                    (key.clone(), key)
                }
                None => {
                    let name = self.procs[&pid].name();
                    self.anomalies.push(format!(
                        "{name}: DeadLetter names input {input}, which its last poll does not have"
                    ));
                    return;
                }
            },
        };
        // The value, as the simulation keeps it (its "encoding").
        let payload = match effect {
            Effect::Append {
                execution_id,
                seq,
                entry,
                at,
            } => Payload::History(HistoryRecord {
                execution_id: execution_id.clone(),
                seq: *seq,
                entry: entry.clone(),
                at: Some(*at),
            }),
            Effect::Submit(s) => Payload::Submission(s.clone()),
            // The simulated activity service answers when it chooses: a retry's backoff is
            // not modelled. The activity workers (`Faults::activity_workers`) honour it: the
            // table's not-before header is kept with the record.
            Effect::RequestActivity(r) | Effect::RetryActivity { request: r, .. } => {
                Payload::Activity(r.clone())
            }
            Effect::CancelActivity { parent, child, .. } => {
                Payload::ActivityCancel(crate::records::ActivityCancel {
                    execution_id: child.clone(),
                    parent_execution_id: parent.clone(),
                    cancelled_at: now,
                })
            }
            Effect::RetryParkedActivity { parent, child, .. } => {
                Payload::ActivityRetry(crate::records::ActivityRetry {
                    execution_id: child.clone(),
                    parent_execution_id: parent.clone(),
                    resumed_at: now,
                })
            }
            Effect::Respond { response, .. } => Payload::Response(response.clone()),
            Effect::CancelExecution(request) => Payload::Cancel(request.clone()),
            Effect::StartReset(start) => Payload::ResetStart(start.clone()),
            Effect::ResendReset(request) => Payload::Reset(request.clone()),
            Effect::PublishResult(f) => Payload::Result(f.clone()),
            Effect::AnswerQuery(a) => Payload::Answer(a.clone()),
            Effect::DeadLetter {
                input,
                reason,
                error,
            } => {
                let Some(original) = self.procs[&pid].consumer.polled.get(input).cloned() else {
                    return;
                };
                let copy = dlq::copy(
                    dlq::Original {
                        topic: original.topic.name(),
                        partition: original.partition,
                        offset: original.offset,
                        timestamp_millis: Some(original.timestamp.timestamp_millis()),
                        key: original.key.as_deref().map(str::as_bytes),
                        value: Some(&original.bytes),
                    },
                    [],
                    *reason,
                    error.clone(),
                    now,
                );
                Payload::Dlq(Box::new(copy.envelope))
            }
            Effect::DeadLetterState(state) => {
                let copy = dlq::copy(
                    dlq::Original {
                        topic: Topic::State.name(),
                        partition: state.partition,
                        offset: state.offset,
                        timestamp_millis: state.timestamp_millis,
                        key: state.key.as_deref(),
                        value: Some(&state.value),
                    },
                    state
                        .headers
                        .iter()
                        .map(|(name, value)| (name.as_str(), value.as_deref())),
                    DlqReason::Undecodable,
                    state.error.clone(),
                    now,
                );
                Payload::Dlq(Box::new(copy.envelope))
            }
            Effect::PutSchedule { state, .. } => Payload::Schedule(state.clone()),
            Effect::PutBatch(state) => Payload::Batch(Some((**state).clone())),
            Effect::PutBatchOutcomes { outcomes, .. } => Payload::BatchOutcomes(outcomes.clone()),
            Effect::BatchRequest(crate::batch::BatchRequest::Pause(r)) => Payload::Pause(r.clone()),
            Effect::BatchRequest(crate::batch::BatchRequest::Cancel(r)) => {
                Payload::Cancel(r.clone())
            }
            Effect::BatchRequest(crate::batch::BatchRequest::Reset(r)) => Payload::Reset(r.clone()),
            Effect::PutCorrelation { state, .. } => Payload::Correlation(state.clone()),
            Effect::PutRemembered { key, event_id, at } => {
                Payload::Remembered(at.map(|at| crate::correlation::RememberedEvent {
                    key: key.clone(),
                    forwarded: crate::correlation::Forwarded {
                        event_id: event_id.clone(),
                        at,
                    },
                }))
            }
            Effect::Correlation(command) => Payload::CorrelationCommand(command.clone()),
            Effect::Slot(command) => Payload::SlotCommand(command.clone()),
            Effect::PutSlot { state, .. } => Payload::Slot(state.clone()),
            Effect::ForwardEvent(event) => Payload::Event(event.clone()),
            Effect::ReturnEvent(event) => Payload::KeyedEvent(event.clone()),
            Effect::WriteStub(write) => Payload::StubWrite(write.clone()),
            Effect::ScheduleCommand(command) => Payload::ScheduleCommand(command.clone()),
            // Routed above: no record.
            Effect::PutTimer(_) | Effect::DeleteTimer(_) => return,
        };
        let partition = if topic == Topic::Dlq {
            0
        } else {
            self.cluster.partition_for(topic, &partitioned_by)
        };
        let bytes = match &payload {
            Payload::History(record) => self.codec.encode(record),
            payload => encode(payload),
        };
        let offset = self.cluster.append(
            topic,
            partition,
            Some(key),
            address.kind,
            payload,
            bytes.clone(),
            producer,
            Some(txn),
            now,
        );
        if topic == Topic::History {
            landed.push(Landed {
                partition,
                offset,
                bytes,
            });
            return;
        }
        if let Some(not_before) = not_before {
            self.act
                .log
                .headers
                .insert((topic, partition, offset), not_before);
        }
        // What a correlation key does is read from the records (the processor traces it only
        // through `tracing`).
        let what = match effect {
            Effect::Correlation(c) => Some(format!(
                "{} {} for `{}`",
                c.action.as_str(),
                c.execution_id,
                c.key
            )),
            Effect::ForwardEvent(e) => Some(format!(
                "forward {} of `{}` to {}",
                e.event.event_id,
                e.correlation_key.as_deref().unwrap_or_default(),
                e.target
            )),
            Effect::ReturnEvent(e) => Some(format!(
                "return {} of `{}` by {}",
                e.event.event_id,
                e.key,
                e.returned_by
                    .as_ref()
                    .map_or_else(String::new, ToString::to_string)
            )),
            Effect::PutCorrelation { key, state } => Some(format!(
                "state of `{key}`: {}",
                state.as_ref().map_or_else(
                    || "forgotten".to_owned(),
                    |s| format!(
                        "holders {:?}, buffered {:?}",
                        s.holders
                            .iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>(),
                        s.buffered
                            .iter()
                            .map(|b| b.event.event_id.as_str())
                            .collect::<Vec<_>>()
                    )
                )
            )),
            _ => None,
        };
        if let Some(what) = what {
            let name = self.procs[&pid].name();
            self.event(format!(
                "{name}: txn {txn}: {what} -> {}/{partition}@{offset}",
                topic.name()
            ));
        }
    }

    /// `send_offsets_to_transaction` (nothing to send: nothing is checked).
    pub fn commit_offsets(
        &mut self,
        pid: u64,
        txn: u64,
        offsets: &[Position],
    ) -> Result<(), CommitError> {
        let (tid, epoch, member, generation) = {
            let p = &self.procs[&pid];
            (
                p.transactional_id.clone(),
                p.epoch,
                p.consumer.member,
                p.consumer.generation,
            )
        };
        if let Err(e) = self.cluster.check_open(txn, &tid, epoch) {
            return Err(self.refused(pid, e));
        }
        if offsets.is_empty() {
            return Ok(());
        }
        // How far it had read the submissions partitions (for the fairness check).
        let read: BTreeMap<i32, i64> = self.procs[&pid]
            .consumer
            .positions
            .iter()
            .filter(|((topic, _), _)| *topic == InputTopic::Submissions)
            .map(|(&(_, partition), &offset)| (partition, offset))
            .collect();
        match self.cluster.send_offsets(
            txn,
            offsets,
            (&read, self.procs[&pid].consumer.rewinds),
            member,
            generation,
        ) {
            Ok(()) => Ok(()),
            Err(e) => Err(self.refused(pid, e)),
        }
    }

    /// `commit_transaction`.
    pub fn commit_end(&mut self, pid: u64, txn: u64) -> Result<(), CommitError> {
        let (tid, epoch, name) = {
            let p = &self.procs[&pid];
            (p.transactional_id.clone(), p.epoch, p.name())
        };
        if let Err(e) = self.cluster.check_open(txn, &tid, epoch) {
            return Err(self.refused(pid, e));
        }
        let Some(done) = self.cluster.end(txn, true, self.now) else {
            return Err(self.refused(
                pid,
                TxnRefused::Fenced(format!("transaction {txn} vanished")),
            ));
        };
        self.proc(pid).open_txn = None;
        self.proc(pid).commits += 1;
        self.stats.commits += 1;
        if self.store.available(self.now).is_err() {
            self.stats.commits_while_store_down += 1;
        }
        let member = self.procs[&pid].consumer.member;
        let current = member.is_some_and(|m| {
            self.cluster
                .group
                .is_current(m, self.procs[&pid].consumer.generation)
        });
        if !current {
            let owned = self.procs[&pid].consumer.owned.clone();
            let (tag, what) = if done.offsets.is_empty() {
                (
                    "item-2-unfenced-commit",
                    "a batch without input offsets (due timers only): nothing checked the generation",
                )
            } else {
                (
                    "item-1-commit-after-reassignment",
                    "its offsets were accepted before the group moved on; the new owner may have caught up already",
                )
            };
            self.finding(
                tag,
                format!(
                    "{name} (owns {owned:?} as of generation {}, the group is at {}) commits txn {txn} with {} records: {what}",
                    self.procs[&pid].consumer.generation,
                    self.cluster.group.generation,
                    done.written.len()
                ),
            );
        }
        self.event(format!(
            "{name}: committed txn {txn}: {} records, offsets {:?}{}",
            done.written.len(),
            done.offsets,
            if current {
                ""
            } else {
                " — by a member the group no longer has in this generation"
            }
        ));
        Ok(())
    }
}
