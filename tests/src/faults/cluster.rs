//! What a fault run acts on: its `weir worker` processes (started, killed, frozen and
//! restarted like a supervisor would) and the services of the local stack (Kafka and
//! Cassandra, through the pid files `docker/local/stack.sh` keeps in `$WEIR_STACK_DIR`).

use std::fmt;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::deployment::{Deployment, WorkerProcess};

/// Why a fault could not be injected or the run could not go on.
#[derive(Debug)]
pub enum FaultError {
    /// A scenario that acts on the stack needs the stack's state directory.
    NoStackDir,
    /// A pid file is missing or does not hold a pid.
    NoPid {
        service: Service,
        path: PathBuf,
    },
    /// `kill` failed.
    Signal {
        what: String,
        signal: &'static str,
        detail: String,
    },
    /// A process did not exit in time after SIGKILL or SIGTERM.
    StillRunning {
        what: String,
        after: Duration,
    },
    /// `docker/local/stack.sh up` failed.
    StackUp {
        status: String,
        log: PathBuf,
    },
    /// A condition the fault waits for did not come true.
    Timeout {
        what: String,
        after: Duration,
    },
    /// The worker slot does not exist.
    NoWorker(String),
    Io(std::io::Error),
}

impl fmt::Display for FaultError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FaultError::NoStackDir => write!(
                f,
                "WEIR_STACK_DIR is not set: the broker and Cassandra scenarios act on the stack \
                 started by tests/faults/run.sh"
            ),
            FaultError::NoPid { service, path } => {
                write!(f, "no pid of {service} in {}", path.display())
            }
            FaultError::Signal {
                what,
                signal,
                detail,
            } => write!(f, "kill -{signal} {what}: {detail}"),
            FaultError::StillRunning { what, after } => {
                write!(f, "{what} still runs {after:?} after the signal")
            }
            FaultError::StackUp { status, log } => write!(
                f,
                "docker/local/stack.sh up failed ({status}); see {}",
                log.display()
            ),
            FaultError::Timeout { what, after } => {
                write!(f, "timed out after {after:?} waiting for {what}")
            }
            FaultError::NoWorker(name) => write!(f, "no worker {name}"),
            FaultError::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for FaultError {}

impl From<std::io::Error> for FaultError {
    fn from(e: std::io::Error) -> Self {
        FaultError::Io(e)
    }
}

/// Polls `probe` every 50 ms until it yields `Some`, or fails naming `what`.
pub fn wait_until<T>(
    what: &str,
    timeout: Duration,
    mut probe: impl FnMut() -> Option<T>,
) -> Result<T, FaultError> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = probe() {
            return Ok(value);
        }
        if Instant::now() >= deadline {
            return Err(FaultError::Timeout {
                what: what.to_owned(),
                after: timeout,
            });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn kill(pid: u32, signal: &'static str, what: &str) -> Result<(), FaultError> {
    let output = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .output()?;
    if output.status.success() {
        Ok(())
    } else {
        Err(FaultError::Signal {
            what: what.to_owned(),
            signal,
            detail: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        })
    }
}

fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|stat| stat.split_whitespace().nth(2) == Some("Z"))
}

/// A service of the local stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Service {
    Kafka,
    Cassandra,
}

impl Service {
    /// The ports it listens on, from the variables `docker/local/stack.sh` reads.
    fn ports(self) -> Vec<u16> {
        let port = |variable: &str, default: u16| {
            std::env::var(variable)
                .ok()
                .and_then(|p| p.parse().ok())
                .unwrap_or(default)
        };
        match self {
            Service::Kafka => vec![
                port("WEIR_KAFKA_PORT", 9092),
                port("WEIR_KAFKA_CONTROLLER_PORT", 9093),
            ],
            Service::Cassandra => vec![
                port("WEIR_CQL_PORT", 9042),
                port("WEIR_CASSANDRA_STORAGE_PORT", 7000),
            ],
        }
    }
}

impl fmt::Display for Service {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Service::Kafka => "kafka",
            Service::Cassandra => "cassandra",
        })
    }
}

/// The local stack of `docker/local/stack.sh`, found through `WEIR_STACK_DIR` (which
/// `tests/run.sh` and `tests/faults/run.sh` export).
pub struct Stack {
    dir: PathBuf,
    logs: PathBuf,
}

impl Stack {
    pub fn from_env(logs: PathBuf) -> Result<Stack, FaultError> {
        let dir = std::env::var_os("WEIR_STACK_DIR").ok_or(FaultError::NoStackDir)?;
        Ok(Stack {
            dir: PathBuf::from(dir),
            logs,
        })
    }

    pub fn pid(&self, service: Service) -> Result<u32, FaultError> {
        let path = self.dir.join(service.to_string()).join("pid");
        std::fs::read_to_string(&path)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .filter(|pid| alive(*pid))
            .ok_or(FaultError::NoPid { service, path })
    }

    pub fn signal(&self, service: Service, signal: &'static str) -> Result<(), FaultError> {
        kill(self.pid(service)?, signal, &service.to_string())
    }

    /// `kill -9`, and waits until the process is gone. Its pid file is removed: a dead
    /// process not yet reaped by init still answers `kill -0`, which `stack.sh up` would take
    /// for a running service.
    pub fn kill9(&self, service: Service) -> Result<(), FaultError> {
        let pid = self.pid(service)?;
        kill(pid, "KILL", &service.to_string())?;
        let after = Duration::from_secs(30);
        wait_until(&format!("{service} to die"), after, || {
            (!alive(pid)).then_some(())
        })
        .map_err(|_| FaultError::StillRunning {
            what: service.to_string(),
            after,
        })?;
        // The thread group leader turns zombie before its last threads let go of the sockets:
        // `stack.sh up` refuses a port still taken.
        for port in service.ports() {
            wait_until(&format!("port {port} to be free"), after, || {
                let address = std::net::SocketAddr::from(([127, 0, 0, 1], port));
                std::net::TcpStream::connect_timeout(&address, Duration::from_millis(500))
                    .is_err()
                    .then_some(())
            })?;
        }
        std::fs::remove_file(self.dir.join(service.to_string()).join("pid"))?;
        Ok(())
    }

    /// `docker/local/stack.sh up`: starts what is not running and waits until both services
    /// answer a real request.
    pub fn up(&self) -> Result<(), FaultError> {
        let log = self.logs.join("stack-up.log");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)?;
        // `WEIR_FAULTS_STACK_SCRIPT` names another copy of the script (a stack configured
        // otherwise, for an experiment); the repository's by default.
        let script = std::env::var_os("WEIR_FAULTS_STACK_SCRIPT")
            .map(PathBuf::from)
            .unwrap_or_else(|| crate::repo_root().join("docker/local/stack.sh"));
        let status = Command::new("bash")
            .arg(script)
            .arg("up")
            .stdout(file.try_clone()?)
            .stderr(file)
            .status()?;
        if status.success() {
            Ok(())
        } else {
            Err(FaultError::StackUp {
                status: status.to_string(),
                log,
            })
        }
    }
}

/// The pids of every worker process a run started, for [`kill_started_workers`].
static STARTED: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// Kills (-9) every worker process this process started that still runs: for a run that is
/// interrupted (SIGINT, SIGTERM), whose workers would otherwise outlive it.
pub fn kill_started_workers() {
    let pids = STARTED.lock().map(|p| p.clone()).unwrap_or_default();
    for pid in pids {
        let ours = std::fs::read(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|cmdline| String::from_utf8_lossy(&cmdline).contains("worker"));
        if ours && alive(pid) {
            let _ = kill(pid, "KILL", "worker");
        }
    }
}

/// How a worker of the run is started.
#[derive(Clone, Debug)]
pub struct WorkerSpec {
    /// `a`, `b`: the worker's slot, and its instance id when it has one.
    pub slot: String,
    /// `--instance-id <slot>` (stable identity) or none (a new dynamic identity per process).
    pub stable_id: bool,
    /// More arguments (session and transaction timeouts, …).
    pub args: Vec<String>,
}

/// A worker process that exited without the run asking it to.
#[derive(Clone, Debug)]
pub struct WorkerExit {
    pub worker: String,
    pub at: Instant,
    pub status: String,
    /// The last ERROR (or WARN) line of its log.
    pub last_error: Option<String>,
    pub log: PathBuf,
}

/// One worker slot: its spec and the current process.
pub struct Worker {
    pub spec: WorkerSpec,
    pub process: Option<WorkerProcess>,
    /// Processes started so far (the log of the n-th is `<slot>.<n>.log`).
    pub starts: u32,
}

impl Worker {
    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(|p| p.child.id())
    }

    /// The workflow partitions it owns, from its metrics.
    pub fn partitions_owned(&self) -> Option<f64> {
        self.process
            .as_ref()?
            .metrics()?
            .get("weir_partitions_owned")
            .copied()
    }
}

/// The workers of a run, started through `deployment`.
pub struct Workers {
    pub workers: Vec<Worker>,
    pub exits: Vec<WorkerExit>,
}

/// `text` without its ANSI colour sequences (`ESC [ … m`).
pub fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Why a worker stopped: its `worker failed` line, or else the last line of its log with
/// ERROR in it (or else WARN), without colours.
pub fn last_error(log: &std::path::Path) -> Option<String> {
    let text = strip_ansi(&std::fs::read_to_string(log).ok()?);
    let lines: Vec<&str> = text.lines().collect();
    lines
        .iter()
        .rev()
        .find(|l| l.contains("worker failed"))
        .or_else(|| lines.iter().rev().find(|l| l.contains("ERROR")))
        .or_else(|| lines.iter().rev().find(|l| l.contains("WARN")))
        .map(|l| l.trim().to_owned())
}

impl Workers {
    pub fn new(specs: Vec<WorkerSpec>) -> Self {
        Workers {
            workers: specs
                .into_iter()
                .map(|spec| Worker {
                    spec,
                    process: None,
                    starts: 0,
                })
                .collect(),
            exits: Vec::new(),
        }
    }

    pub fn get(&self, slot: &str) -> Result<&Worker, FaultError> {
        self.workers
            .iter()
            .find(|w| w.spec.slot == slot)
            .ok_or_else(|| FaultError::NoWorker(slot.to_owned()))
    }

    fn get_mut(&mut self, slot: &str) -> Result<&mut Worker, FaultError> {
        self.workers
            .iter_mut()
            .find(|w| w.spec.slot == slot)
            .ok_or_else(|| FaultError::NoWorker(slot.to_owned()))
    }

    /// Starts the process of `slot` (which must not run), with more environment `env`.
    pub fn start(
        &mut self,
        deployment: &Deployment,
        slot: &str,
        env: &[(&str, &str)],
    ) -> Result<(), FaultError> {
        let worker = self.get_mut(slot)?;
        worker.starts += 1;
        let mut args: Vec<&str> = Vec::new();
        if worker.spec.stable_id {
            args.extend(["--instance-id", worker.spec.slot.as_str()]);
        }
        args.extend(worker.spec.args.iter().map(String::as_str));
        let name = format!("{}.{}", worker.spec.slot, worker.starts);
        let process = deployment.spawn_worker(&name, &args, env);
        if let Ok(mut started) = STARTED.lock() {
            started.push(process.child.id());
        }
        worker.process = Some(process);
        Ok(())
    }

    pub fn start_all(&mut self, deployment: &Deployment) -> Result<(), FaultError> {
        let slots: Vec<String> = self.workers.iter().map(|w| w.spec.slot.clone()).collect();
        for slot in slots {
            self.start(deployment, &slot, &[])?;
        }
        Ok(())
    }

    /// Sends `signal` to the process of `slot`.
    pub fn signal(&self, slot: &str, signal: &'static str) -> Result<(), FaultError> {
        let pid = self
            .get(slot)?
            .pid()
            .ok_or_else(|| FaultError::NoWorker(slot.to_owned()))?;
        kill(pid, signal, &format!("worker {slot}"))
    }

    /// Sends `signal` and waits (up to `timeout`) for the process to exit; its status.
    pub fn stop(
        &mut self,
        slot: &str,
        signal: &'static str,
        timeout: Duration,
    ) -> Result<String, FaultError> {
        self.signal(slot, signal)?;
        let worker = self.get_mut(slot)?;
        let Some(process) = worker.process.as_mut() else {
            return Err(FaultError::NoWorker(slot.to_owned()));
        };
        let status = wait_until(&format!("worker {slot} to exit"), timeout, || {
            process.child.try_wait().ok().flatten()
        })
        .map_err(|_| FaultError::StillRunning {
            what: format!("worker {slot}"),
            after: timeout,
        })?;
        worker.process = None;
        Ok(status.to_string())
    }

    /// The supervisor's round: every process that exited is recorded and started again.
    pub fn supervise(&mut self, deployment: &Deployment) -> Result<Vec<WorkerExit>, FaultError> {
        let mut exited = Vec::new();
        for worker in &mut self.workers {
            let Some(process) = worker.process.as_mut() else {
                continue;
            };
            if let Ok(Some(status)) = process.child.try_wait() {
                exited.push(WorkerExit {
                    worker: process.name.clone(),
                    at: Instant::now(),
                    status: status.to_string(),
                    last_error: last_error(&process.log),
                    log: process.log.clone(),
                });
                worker.process = None;
            }
        }
        for exit in &exited {
            let slot = exit
                .worker
                .split('.')
                .next()
                .unwrap_or(&exit.worker)
                .to_owned();
            self.start(deployment, &slot, &[])?;
        }
        self.exits.extend(exited.iter().cloned());
        Ok(exited)
    }

    /// The sum of the partitions owned, and whether every running worker owns some.
    pub fn ownership(&self) -> (f64, bool) {
        let owned: Vec<Option<f64>> = self
            .workers
            .iter()
            .filter(|w| w.process.is_some())
            .map(Worker::partitions_owned)
            .collect();
        let all = owned.iter().all(|o| o.is_some_and(|n| n > 0.0));
        (owned.iter().map(|o| o.unwrap_or(0.0)).sum(), all)
    }
}
