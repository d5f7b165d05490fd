//! A batch (step 2 of the loop in the [module docs](super)): each input stepped through the
//! processor, inline activity rounds, and one transaction with every effect and the input
//! offsets.

use super::*;

impl<R, L, S, M, I> Driver<R, L, S, M, I>
where
    R: WorkflowRunner,
    L: Log,
    S: StoreRead,
    M: Materialise,
    I: InlineActivities,
{
    pub(super) async fn process_and_commit(
        &mut self,
        records: Vec<PolledRecord>,
        timers: Vec<TimerRow>,
        now: DateTime<Utc>,
    ) -> Result<(), DriverError> {
        let mut batch = Batch::new(now);
        // Before any input's effects: an input may write one of these keys afresh.
        self.processor.take_over_effects(&mut batch);
        // The held submissions first: an answer read in the same poll as the submission of
        // its execution must find the execution.
        let taken = self.take_held();
        let inputs = taken.len() + records.len() + timers.len();
        let mut consumed = std::mem::take(&mut self.released);
        for record in taken.into_iter().chain(records) {
            if let Input::Record { index, .. } = &record.input {
                consumed.push(*index);
            }
            self.process(&mut batch, record.input).await?;
        }
        for timer in &timers {
            // The fired timer is deleted before what its input does: a step may put the same
            // timer again (a `retry` due now: same partition, time and id), and a delete after
            // it would take the new one too, in memory and in the store.
            let consumed_at = batch.effects.len();
            if self
                .process(&mut batch, Input::TimerDue(timer.clone()))
                .await?
            {
                let delete = Effect::DeleteTimer(timer.key());
                batch.effects.insert(consumed_at, delete);
            }
        }
        self.processor.fire_schedules(&mut batch);
        self.turn_batches(&mut batch).await;
        self.processor.expire_correlations(&mut batch);
        self.run_inline(&mut batch).await?;
        let offsets = self.commit_positions();
        let traces: Vec<_> = batch
            .effects
            .iter()
            .map(|effect| self.processor.trace_of(effect))
            .collect();
        let commit = Commit {
            effects: &batch.effects,
            offsets: &offsets,
            consumed: &consumed,
            traces: &traces,
        };
        let landed = match self.log.commit(commit).await {
            Ok(landed) => landed,
            Err(CommitError::Retry(e)) => {
                tracing::warn!(error = %e, "batch aborted; reprocessing from the committed offsets");
                self.retried += 1;
                let (generation, owned) = self.log.membership();
                return self.take_over(generation, owned).await;
            }
            Err(CommitError::Refused(e)) => {
                tracing::warn!(error = %e, "batch refused; waiting for the new membership, then reprocessing from the committed offsets");
                self.retried += 1;
                // The log may still report the assignment the group just took away (librdkafka
                // has not noticed yet): wait for the next one (see `turn`).
                self.refused = Some(Refused {
                    generation: self.generation,
                    at: self.log.now(),
                });
                self.report(0, 0);
                return Ok(());
            }
            Err(CommitError::Fatal(e)) => return Err(DriverError::Commit(e)),
        };
        // A reminder that fired in a committed batch has had its start tried (or its
        // execution was left as unreadable): no checkpoint waits for it any longer.
        for timer in &timers {
            if let Ok(TimerId::Retry(id)) = timer.id() {
                self.reminded.shift_remove(&id);
            }
        }
        self.materialise(batch, landed, now).await?;
        self.report(inputs, 0);
        Ok(())
    }

    /// A turn of each batch operation with a token ([`crate::batch`]): its list page read
    /// from the store and given to the processor. A page the store cannot give now leaves
    /// the batch where it is (its cursor unmoved: the next batch tries again).
    pub(super) async fn turn_batches(&mut self, batch: &mut Batch) {
        for (id, query) in self.processor.batch_wants(batch.now) {
            match self.store.list(&query).await {
                Ok(page) => self.processor.advance_batch(batch, &id, &page),
                Err(error) => {
                    tracing::warn!(batch = %id, %error, "a batch's list page cannot be read now; it waits");
                }
            }
        }
    }

    /// Answers the batch's inline activity requests in the batch ([`crate::inline`]): rounds
    /// of attempts while the answers request more, at most `max_inline_rounds`; every
    /// request not answered goes to its topic in this same transaction.
    pub(super) async fn run_inline(&mut self, batch: &mut Batch) -> Result<(), DriverError> {
        let mut from = 0;
        for _ in 0..self.config.max_inline_rounds {
            let requests = inline::take_requests(batch, from, &self.inline);
            if requests.is_empty() {
                break;
            }
            let traces: Vec<_> = requests
                .iter()
                .map(|r| {
                    Some(
                        self.processor
                            .activity_trace(&r.parent_execution_id, &r.execution_id),
                    )
                })
                .collect();
            let outcomes = self.inline.run(&requests, &traces, batch.now).await;
            // What this round's answers make comes after `from`: the next round's requests.
            from = batch.effects.len();
            let mut spilled = Vec::new();
            for (index, request) in requests.into_iter().enumerate() {
                // The seam owes one outcome per request; a missing one is sent to the topic.
                let outcome = outcomes.get(index).unwrap_or(&InlineOutcome::Spill);
                match outcome {
                    InlineOutcome::Answered { result, ran } => {
                        self.inline_answered += 1;
                        self.processor
                            .answer_inline(batch, &request, result.clone(), *ran)
                            .await?;
                    }
                    other => spilled.extend(inline::spill(request, other)),
                }
            }
            // Spilled requests are not run again by a later round.
            batch.effects.splice(from..from, spilled.iter().cloned());
            from += spilled.len();
            self.inline_spilled += spilled.len() as u64;
        }
        Ok(())
    }

    /// Steps one input, rehydrating the execution it names first. An execution whose stored
    /// history cannot be read or rebuilt is left alone (its input dead-lettered, its timer
    /// kept): one bad execution must not stop the partition. `false` if not stepped.
    pub(super) async fn process(
        &mut self,
        batch: &mut Batch,
        input: Input,
    ) -> Result<bool, DriverError> {
        if let Some((id, pinned_until)) = self.processor.needs(batch, &input) {
            // Rebuilt from the store: it must hold every batch that touched the execution.
            self.materialiser
                .wait_for(pinned_until)
                .await
                .map_err(DriverError::Materialise)?;
            let unreadable = match self.store.load(&id).await {
                Ok(stored) => match self.processor.rehydrate(batch, &id, stored).await {
                    Ok(()) => None,
                    Err(ProcessorError::Projection(e)) => Some(e.to_string()),
                },
                Err(LoadError::Unreadable { reason, .. }) => Some(reason),
                Err(LoadError::Store(e)) => return Err(DriverError::Store(e)),
            };
            if let Some(reason) = unreadable {
                self.processor.unreadable(batch, &id, &input, reason);
                return Ok(false);
            }
        }
        if let Some((id, pinned_until)) = self.processor.reads(batch, &input) {
            // Read from the store: it must hold every batch that touched the execution.
            self.materialiser
                .wait_for(pinned_until)
                .await
                .map_err(DriverError::Materialise)?;
            match self.store.load(&id).await {
                Ok(stored) => self.processor.provide(id, stored),
                Err(LoadError::Unreadable { reason, .. }) => {
                    self.processor.unreadable(batch, &id, &input, reason);
                    return Ok(false);
                }
                Err(LoadError::Store(e)) => return Err(DriverError::Store(e)),
            }
        }
        self.processor.step(batch, input).await?;
        Ok(true)
    }
}
