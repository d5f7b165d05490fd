//! One scenario's run: workers, submissions, faults, checks (see the module above).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use rdkafka::producer::{FutureProducer, FutureRecord};
use weir::codec::Submission;
use weir::model::ExecutionId;
use weir::topology::TopicRole;

use super::cluster::{FaultError, Service, Stack, WorkerSpec, Workers, strip_ansi, wait_until};
use super::verify::verify;
use super::watch::{ResultsWatcher, longest_gap};
use super::workload::{Job, plan};
use super::{FaultRecord, Options, Report, Scenario};
use crate::deployment::Deployment;
use crate::kafka_config;

/// What the threads of a run share.
struct Run<'a> {
    scenario: Scenario,
    options: &'a Options,
    deployment: &'a Deployment,
    workers: Mutex<Workers>,
    watcher: ResultsWatcher,
    stack: Option<Stack>,
    jobs: Vec<Job>,
    submitted: AtomicUsize,
    submitted_at: Mutex<HashMap<ExecutionId, (SystemTime, Instant)>>,
    partitions: f64,
    done: AtomicBool,
    violations: Mutex<Vec<String>>,
}

impl Run<'_> {
    fn workers(&self) -> MutexGuard<'_, Workers> {
        self.workers.lock().expect("workers")
    }

    fn violation(&self, text: String) {
        eprintln!("[fault run] VIOLATION: {text}");
        self.violations.lock().expect("violations").push(text);
    }

    fn pending(&self) -> usize {
        self.submitted
            .load(Ordering::SeqCst)
            .saturating_sub(self.watcher.finished())
    }

    fn log(&self, started: Instant, text: &str) {
        eprintln!(
            "[fault run {} {:>6.1} s] {text}",
            self.scenario.name(),
            started.elapsed().as_secs_f64()
        );
    }

    /// The submitter: keeps at most `in_flight` executions unfinished until all are sent.
    async fn submit_all(&self) {
        let producer: FutureProducer = kafka_config()
            .producer()
            .set("enable.idempotence", "true")
            // Ride out a broker restart: the client retries (without duplicates) for 10 min.
            .set("message.timeout.ms", "600000")
            .set("linger.ms", "5")
            .create()
            .expect("producer");
        let topic = self.deployment.topic(TopicRole::Submissions);
        let mut next = 0;
        let began = Instant::now();
        while next < self.jobs.len() && !self.done.load(Ordering::SeqCst) {
            let paced = (began.elapsed().as_secs_f64() * self.options.rate) as usize + 1;
            let room = self
                .options
                .in_flight
                .saturating_sub(self.pending())
                .min(paced.saturating_sub(next));
            let chunk: Vec<&Job> = self.jobs[next..].iter().take(room.min(100)).collect();
            if chunk.is_empty() {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
            next += chunk.len();
            let sends = chunk.iter().map(|job| {
                let submission = Submission {
                    execution_id: job.id.clone(),
                    ffqn: job.ffqn.parse().expect("ffqn"),
                    params: job.params.clone(),
                    parent: None,
                    scheduled_at: None,
                    correlation_id: None,
                    metadata: Default::default(),
                    deadline: None,
                    concurrency: None,
                    tenant: None,
                };
                let value = self
                    .deployment
                    .codec
                    .encode(&topic, &submission)
                    .expect("a submission encodes");
                let key = job.id.to_string();
                let (producer, topic) = (&producer, &topic);
                async move {
                    self.submitted_at
                        .lock()
                        .expect("submitted_at")
                        .insert(job.id.clone(), (SystemTime::now(), Instant::now()));
                    self.submitted.fetch_add(1, Ordering::SeqCst);
                    let record = FutureRecord::to(topic).key(&key).payload(&value);
                    if let Err((e, _)) = producer.send(record, Duration::from_secs(600)).await {
                        self.violation(format!("the submission of {key} failed: {e}"));
                    }
                }
            });
            futures::future::join_all(sends).await;
        }
    }

    /// The supervisor: restarts a worker that exits, until the run is over.
    fn supervise(&self, started: Instant) {
        while !self.done.load(Ordering::SeqCst) {
            match self.workers().supervise(self.deployment) {
                Ok(exits) => {
                    for exit in exits {
                        self.log(
                            started,
                            &format!(
                                "worker {} exited ({}), restarted; last error: {}",
                                exit.worker,
                                exit.status,
                                exit.last_error.as_deref().unwrap_or("-")
                            ),
                        );
                    }
                }
                Err(e) => self.violation(format!("the supervisor cannot restart a worker: {e}")),
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Waits for a worker slot to own at least one partition (a kill must hit work).
    fn wait_owner(&self, slot: &str) -> Result<f64, FaultError> {
        wait_until(
            &format!("worker {slot} to own partitions"),
            self.options.patience,
            || {
                self.workers()
                    .get(slot)
                    .ok()?
                    .partitions_owned()
                    .filter(|n| *n > 0.0)
            },
        )
    }

    fn kill_worker(&self, n: usize) -> Result<(Instant, String), FaultError> {
        let slot = if n % 2 == 1 { "b" } else { "a" };
        let owned = self.wait_owner(slot)?;
        let mut workers = self.workers();
        let at = Instant::now();
        workers.stop(slot, "KILL", Duration::from_secs(30))?;
        workers.start(self.deployment, slot, &[])?;
        let identity = if self.scenario == Scenario::Kill9 {
            "with its instance id"
        } else {
            "with a new dynamic identity"
        };
        Ok((
            at,
            format!(
                "kill -9 {slot} (owned {owned} of {} partitions), restarted at once {identity}",
                self.partitions
            ),
        ))
    }

    /// Freezes `a` inside an open transaction, past its session, and resumes it after `b`
    /// owns every partition and before the transaction times out.
    fn freeze(&self) -> Result<(Instant, String), FaultError> {
        let transaction_timeout = self.options.transaction_timeout(self.scenario);
        // A fresh process of `a` whose first commit pauses with its transaction open.
        let log = {
            let mut workers = self.workers();
            if workers.get("a")?.process.is_some() {
                workers.stop("a", "TERM", Duration::from_secs(60))?;
            }
            workers.start(
                self.deployment,
                "a",
                &[("WEIR_FAILPOINTS", "before-commit=pause-once(5000)")],
            )?;
            let a = workers.get("a")?;
            a.process
                .as_ref()
                .map(|p| p.log.clone())
                .ok_or_else(|| FaultError::NoWorker("a".to_owned()))?
        };
        wait_until(
            "a's first commit to reach the failpoint",
            self.options.patience,
            || {
                std::fs::read_to_string(&log)
                    .ok()
                    .filter(|l| l.contains("failpoint before-commit reached"))
                    .map(|_| ())
            },
        )?;
        let reached = Instant::now();
        let b_log = {
            let workers = self.workers();
            let b = workers.get("b")?;
            b.process
                .as_ref()
                .map(|p| p.log.clone())
                .ok_or_else(|| FaultError::NoWorker("b".to_owned()))?
        };
        let b_from = std::fs::metadata(&b_log).map(|m| m.len()).unwrap_or(0);
        self.workers().signal("a", "STOP")?;
        let at = Instant::now();
        // The new owner is assigned when b's rebalance callback gives it every partition of
        // weir.submissions (its take-over, which waits for the zombie's transaction, follows).
        let submissions = format!("{}\"", self.deployment.topic(TopicRole::Submissions));
        let assigned = wait_until(
            "b to be assigned every partition",
            self.options.session_timeout + self.options.patience,
            || {
                let text = std::fs::read(&b_log).ok()?;
                let after = strip_ansi(&String::from_utf8_lossy(
                    text.get(b_from as usize..).unwrap_or_default(),
                ));
                after
                    .lines()
                    .any(|l| {
                        l.contains("partitions assigned")
                            && l.matches(&submissions).count() as f64 == self.partitions
                    })
                    .then(Instant::now)
            },
        )?;
        // The chosen moment: the new owner has the partitions, the transaction is still open.
        std::thread::sleep(self.options.freeze_hold);
        let age = reached.elapsed();
        let offset = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
        self.workers().signal("a", "CONT")?;
        let resumed = Instant::now();
        if age >= transaction_timeout {
            self.violation(format!(
                "freeze: SIGCONT came {:.1} s into the transaction, not inside the window (timeout {:.0} s)",
                age.as_secs_f64(),
                transaction_timeout.as_secs_f64()
            ));
        }
        // Which transaction the failpoint froze (the first of the process's two workers to
        // reach it), and what became of the zombie's transactions on waking.
        let text = |from: u64| {
            std::fs::read(&log)
                .map(|t| {
                    strip_ansi(&String::from_utf8_lossy(
                        t.get(from as usize..).unwrap_or_default(),
                    ))
                })
                .unwrap_or_default()
        };
        let frozen = match text(0)
            .lines()
            .find(|l| l.contains("failpoint before-commit reached"))
        {
            Some(l) if l.contains("activity_batch") => "the activity worker's",
            Some(_) => "the workflow worker's",
            None => "a",
        };
        let markers = [
            (
                "batch aborted; reprocessing",
                "a workflow batch's commit was refused",
            ),
            (
                "activity batch aborted",
                "an activity batch's commit was refused",
            ),
            ("fenced", "fenced"),
        ];
        let refused_own = if frozen == "the activity worker's" {
            "activity batch aborted"
        } else {
            "batch aborted; reprocessing"
        };
        // Up to 5 s for the frozen transaction's outcome to show (a refusal is logged; a
        // commit is not), or for the process to exit.
        let _ = wait_until("the zombie's reaction", Duration::from_secs(5), || {
            let after = text(offset);
            let exited = self
                .workers()
                .get("a")
                .ok()
                .is_some_and(|a| a.process.is_none());
            (after.contains(refused_own) || after.contains("fenced") || exited).then_some(())
        });
        let after = text(offset);
        let seen: Vec<&str> = markers
            .iter()
            .filter(|(marker, _)| after.contains(marker))
            .map(|(_, meaning)| *meaning)
            .collect();
        let outcome = if after.contains(refused_own) || after.contains("fenced") {
            format!("{} ({})", seen.join(", "), refused_own)
        } else if seen.is_empty() {
            "no commit refused: the frozen transaction committed on waking (its offsets were \
             sent before the rebalance; the new owner's stable offset fetch waited for it)"
                .to_owned()
        } else {
            format!(
                "{}; the frozen transaction itself committed on waking",
                seen.join(", ")
            )
        };
        Ok((
            at,
            format!(
                "a frozen with {frozen} transaction open (at its failpoint); b was assigned all \
                 {} partitions {:.1} s later; SIGCONT {:.1} s after SIGSTOP, {:.1} s into the \
                 transaction (timeout {:.0} s); the zombie: {}",
                self.partitions,
                (assigned - at).as_secs_f64(),
                (resumed - at).as_secs_f64(),
                age.as_secs_f64(),
                transaction_timeout.as_secs_f64(),
                outcome,
            ),
        ))
    }

    fn stack(&self) -> Result<&Stack, FaultError> {
        self.stack.as_ref().ok_or(FaultError::NoStackDir)
    }

    fn kill_service(&self, service: Service) -> Result<(Instant, String), FaultError> {
        let stack = self.stack()?;
        let at = Instant::now();
        stack.kill9(service)?;
        let dead = at.elapsed();
        stack.up()?;
        Ok((
            at,
            format!(
                "kill -9 {service} (gone after {:.1} s), restarted: answering again {:.1} s after the kill",
                dead.as_secs_f64(),
                at.elapsed().as_secs_f64()
            ),
        ))
    }

    fn stop_cassandra(&self) -> Result<(Instant, String), FaultError> {
        let stack = self.stack()?;
        let at = Instant::now();
        stack.signal(Service::Cassandra, "STOP")?;
        std::thread::sleep(self.options.cassandra_stop);
        stack.signal(Service::Cassandra, "CONT")?;
        Ok((
            at,
            format!(
                "SIGSTOP cassandra, SIGCONT {:.1} s later",
                at.elapsed().as_secs_f64()
            ),
        ))
    }

    fn inject(&self, n: usize) -> Result<(Instant, String), FaultError> {
        match self.scenario {
            Scenario::Kill9 | Scenario::Kill9Dynamic => self.kill_worker(n),
            Scenario::Freeze | Scenario::FreezeWorkflow => self.freeze(),
            Scenario::BrokerKill => self.kill_service(Service::Kafka),
            Scenario::CassandraKill => self.kill_service(Service::Cassandra),
            Scenario::CassandraStop => self.stop_cassandra(),
        }
    }

    /// The fault driver: fault k once k·N/(F+1) executions finished; then every execution's
    /// result. Returns the faults, each with the instant it was over.
    fn drive(&self, started: Instant) -> Vec<(FaultRecord, Instant)> {
        let total = self.jobs.len();
        let count = self
            .options
            .faults
            .unwrap_or(self.scenario.default_faults());
        let mut faults = Vec::new();
        let mut quiet_since = Instant::now();
        for n in 1..=count {
            let threshold = n * total / (count + 1);
            let ready = wait_until(
                &format!("{threshold} results before fault {n}"),
                self.options.patience,
                || {
                    (self.watcher.finished() >= threshold
                        && quiet_since.elapsed() >= self.options.min_fault_gap)
                        .then_some(())
                },
            );
            if let Err(e) = ready {
                self.violation(format!("no progress before fault {n}: {e}"));
                break;
            }
            let pending = self.pending();
            if self.watcher.finished() >= total {
                self.violation(format!(
                    "every execution finished before fault {n}: the run needs more executions"
                ));
                break;
            }
            if pending == 0 {
                self.violation(format!("fault {n} found no execution in flight"));
            }
            let injected = self.inject(n);
            let (at, detail) = match injected {
                Ok(done) => done,
                Err(e) => {
                    self.violation(format!("fault {n} could not be injected: {e}"));
                    break;
                }
            };
            let over = Instant::now();
            self.log(started, &format!("fault {n}: {detail}"));
            // Over when a result is seen after the fault's own actions ended.
            let recovered = wait_until(
                &format!("a result after fault {n}"),
                self.options.patience,
                || {
                    self.watcher
                        .last_result()
                        .filter(|t| *t > over || self.watcher.finished() >= total)
                },
            );
            match recovered {
                Ok(t) => quiet_since = t,
                Err(e) => {
                    self.violation(format!("no result after fault {n}: {e}"));
                    break;
                }
            }
            self.log(
                started,
                &format!(
                    "fault {n}: results again {:.1} s after it; {} of {total} finished",
                    (quiet_since - at).as_secs_f64(),
                    self.watcher.finished()
                ),
            );
            faults.push((
                FaultRecord {
                    n,
                    at,
                    wall: SystemTime::now() - at.elapsed(),
                    pending,
                    detail,
                    stall: Duration::ZERO,
                    first_result: None,
                    drained: None,
                },
                over,
            ));
        }
        let all = wait_until("every result", self.options.patience, || {
            (self.watcher.finished() >= total).then_some(())
        });
        if let Err(e) = all {
            self.violation(format!(
                "{} of {total} executions finished: {e}",
                self.watcher.finished()
            ));
        }
        faults
    }
}

/// Runs one scenario to the end and checks everything; never panics on a broken invariant
/// (the report lists it).
pub fn run(scenario: Scenario, options: &Options) -> Report {
    let started = Instant::now();
    let deployment = Deployment::new(&format!("faults_{}", scenario.name().replace('-', "_")));
    let mut report = Report {
        scenario,
        options: options.clone(),
        namespace: deployment.namespace.clone(),
        logs: deployment.logs().to_owned(),
        executions: options.executions,
        faults: Vec::new(),
        exits: Vec::new(),
        baseline_gap: None,
        verdict: None,
        violations: Vec::new(),
        started,
        total: Duration::ZERO,
    };
    let stack = if scenario.needs_stack() {
        match Stack::from_env(deployment.logs().to_owned()) {
            Ok(stack) => Some(stack),
            Err(e) => {
                report.violations.push(e.to_string());
                return report;
            }
        }
    } else {
        None
    };
    let session = options.session_timeout.as_millis().to_string();
    let transaction = options
        .transaction_timeout(scenario)
        .as_millis()
        .to_string();
    let spec = |slot: &str| WorkerSpec {
        slot: slot.to_owned(),
        stable_id: scenario != Scenario::Kill9Dynamic,
        args: [
            "--session-timeout-ms",
            &session,
            "--transaction-timeout-ms",
            &transaction,
        ]
        .into_iter()
        .chain((scenario == Scenario::FreezeWorkflow && slot == "a").then_some("--workflows-only"))
        .map(str::to_owned)
        .chain(options.worker_args.iter().cloned())
        .collect(),
    };
    let mut workers = Workers::new(vec![spec("a"), spec("b")]);
    if let Err(e) = workers.start_all(&deployment) {
        report
            .violations
            .push(format!("cannot start the workers: {e}"));
        return report;
    }
    let partitions = f64::from(deployment.topology.topic(TopicRole::Submissions).partitions);
    if let Err(e) = wait_until(
        "both workers to own partitions",
        Duration::from_secs(180),
        || {
            let (owned, all) = workers.ownership();
            (all && owned == partitions).then_some(())
        },
    ) {
        report.violations.push(e.to_string());
        return report;
    }
    let run = Run {
        scenario,
        options,
        deployment: &deployment,
        workers: Mutex::new(workers),
        watcher: ResultsWatcher::start(deployment.topic(TopicRole::Results)),
        stack,
        jobs: plan(options.seed, options.executions, options.long_sleeps),
        submitted: AtomicUsize::new(0),
        submitted_at: Mutex::new(HashMap::new()),
        partitions,
        done: AtomicBool::new(false),
        violations: Mutex::new(Vec::new()),
    };
    run.log(started, "workers up; submitting");
    let faults = std::thread::scope(|scope| {
        scope.spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime")
                .block_on(run.submit_all())
        });
        scope.spawn(|| run.supervise(started));
        let faults = run.drive(started);
        run.done.store(true, Ordering::SeqCst);
        faults
    });
    run.log(
        started,
        "every fault injected; stopping the workers (SIGTERM)",
    );

    // The stalls, from the results' stamps.
    let (times, first) = {
        let progress = run.watcher.progress();
        (progress.times.clone(), progress.times.first().copied())
    };
    let end = times.last().copied().unwrap_or_else(Instant::now);
    let submitted_at = run.submitted_at.lock().expect("submitted_at").clone();
    let first_seen = run.watcher.progress().first_seen.clone();
    let mut records = Vec::new();
    for (i, (fault, _)) in faults.iter().enumerate() {
        let until = faults.get(i + 1).map_or(end, |(next, _)| next.at);
        let (stall, first_result) = longest_gap(&times, fault.at, until);
        // When the last execution in flight at the fault (long sleeps aside) finished.
        let in_flight = run.jobs.iter().filter(|job| {
            job.kind != "long-sleep"
                && submitted_at
                    .get(&job.id)
                    .is_some_and(|(_, t)| *t < fault.at)
                && first_seen.get(&job.id).is_none_or(|t| *t > fault.at)
        });
        let drained = in_flight
            .map(|job| first_seen.get(&job.id).map(|t| *t - fault.at))
            .try_fold(Duration::ZERO, |longest, d| d.map(|d| longest.max(d)));
        records.push(FaultRecord {
            stall,
            first_result,
            drained,
            ..fault.clone()
        });
    }
    if let (Some(first), Some((fault, _))) = (first, faults.first()) {
        report.baseline_gap = Some(longest_gap(&times, first, fault.at).0);
    }
    if scenario.stall_bound_asserted() {
        for f in &records {
            if f.stall > options.stall_bound() {
                run.violation(format!(
                    "the stall after fault {} was {:.1} s, over the bound of {:.0} s (session timeout + {:.0} s)",
                    f.n,
                    f.stall.as_secs_f64(),
                    options.stall_bound().as_secs_f64(),
                    options.stall_margin.as_secs_f64()
                ));
            }
        }
    }

    // Stop the workers gracefully: each waits for its store writer.
    {
        let mut workers = run.workers();
        let slots: Vec<String> = workers
            .workers
            .iter()
            .filter(|w| w.process.is_some())
            .map(|w| w.spec.slot.clone())
            .collect();
        for slot in slots {
            match workers.stop(&slot, "TERM", Duration::from_secs(90)) {
                Ok(status) if status.contains("exit status: 0") => {}
                Ok(status) => run.violation(format!("worker {slot} stopped with {status}")),
                Err(e) => run.violation(format!("worker {slot} did not stop: {e}")),
            }
        }
        report.exits = workers.exits.clone();
    }
    let submitted_at: HashMap<ExecutionId, SystemTime> = submitted_at
        .into_iter()
        .map(|(id, (t, _))| (id, t))
        .collect();
    run.log(started, "checking");
    let verdict = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(verify(
            &deployment,
            &run.jobs,
            &submitted_at,
            Duration::from_secs(120),
        ));
    match verdict {
        Ok(verdict) => {
            if verdict.duplicates_total() > 0 {
                run.violation(format!("duplicate outputs: {:?}", verdict.duplicates));
            }
            if verdict.mismatches_total() > 0 {
                run.violation(format!("mismatches: {:?}", verdict.mismatches));
            }
            report.verdict = Some(verdict);
        }
        Err(e) => run.violation(format!("the checks could not run: {e}")),
    }
    report.faults = records;
    report
        .violations
        .extend(run.violations.lock().expect("violations").drain(..));
    report.total = started.elapsed();
    report
}
