//! Shared harness of the end-to-end tests. They run against the real local stack started by
//! `docker/local/stack.sh` (through `tests/run.sh`), found through the same variables as the
//! worker: `WEIR_BROKERS` and `WEIR_CQL`.
//!
//! Tests run in parallel: each one takes its own topic namespace and keyspace from
//! [`unique_name`], so none shares state with another.

use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use weir::kafka::KafkaConfig;
use weir::store::CqlConfig;

pub fn brokers() -> String {
    std::env::var("WEIR_BROKERS").unwrap_or_else(|_| "127.0.0.1:9092".to_owned())
}

pub fn cql_contact_points() -> Vec<String> {
    std::env::var("WEIR_CQL")
        .unwrap_or_else(|_| "127.0.0.1:9042".to_owned())
        .split(',')
        .map(str::to_owned)
        .collect()
}

pub fn kafka_config() -> KafkaConfig {
    KafkaConfig::new(brokers())
}

pub fn cql_config(keyspace: &str) -> CqlConfig {
    CqlConfig::new(cql_contact_points(), keyspace)
}

/// The repository root (for `topology/`, `docker/`, …).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_owned()
}

/// `$WEIR_CACHE` (default `/var/cache/weir`): where tests/run.sh put the Java classpaths.
pub fn weir_cache() -> PathBuf {
    PathBuf::from(std::env::var("WEIR_CACHE").unwrap_or_else(|_| "/var/cache/weir".to_owned()))
}

/// The Java 17 `java` that docker/local/install.sh installs (`JAVA17` overrides).
pub fn java() -> String {
    std::env::var("JAVA17")
        .unwrap_or_else(|_| "/usr/lib/jvm/java-17-openjdk-amd64/bin/java".to_owned())
}

/// The classpath (`<dir>/*`) of the programs outside Weir in tests/java: kafka-clients and
/// Apache Avro only, resolved by tests/run.sh from tests/java/pom.xml.
pub fn external_classpath() -> String {
    let dir = weir_cache().join("external-activity-lib");
    assert!(
        dir.is_dir(),
        "no {}: run `bash tests/run.sh` (it resolves tests/java/pom.xml)",
        dir.display()
    );
    format!("{}/*", dir.display())
}

/// `java -cp <classpath> tests/java/<program>` (Java's single-file source launcher); the caller
/// adds the program's arguments and I/O.
pub fn java_program(classpath: &str, program: &str) -> std::process::Command {
    let mut command = std::process::Command::new(java());
    command
        .arg("-cp")
        .arg(classpath)
        .arg(repo_root().join("tests/java").join(program));
    command
}

/// A CQL session and a new keyspace of its own (SimpleStrategy, one replica), named after
/// `prefix`.
pub async fn scratch_keyspace(prefix: &str) -> (scylla::client::session::Session, String) {
    let keyspace = unique_name(prefix);
    let session = weir::store::connect(&cql_config(&keyspace))
        .await
        .expect("connect to the CQL store");
    session
        .query_unpaged(
            format!(
                "CREATE KEYSPACE {keyspace} WITH replication = \
                 {{'class': 'SimpleStrategy', 'replication_factor': 1}}"
            ),
            (),
        )
        .await
        .expect("create keyspace");
    (session, keyspace)
}

/// A name no other test (in this run or an earlier one) uses: usable as a topic namespace, a
/// consumer group, a transactional id and a CQL keyspace (letters, digits, `_`; ≤ 48 chars).
pub fn unique_name(prefix: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let millis = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis()
        % 1_000_000_000;
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}_{millis}_{}_{n}", std::process::id() % 100_000)
}

/// A port of 127.0.0.1 nobody listens on, below 32768 (above, Linux hands ports out to
/// client connections, which could take it before the test's server binds it). Tests in
/// parallel start at different places of the range.
pub fn free_port() -> u16 {
    const FIRST: u32 = 20_000;
    const SPAN: u32 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let start = std::process::id().wrapping_mul(7_919) % SPAN;
    for _ in 0..SPAN {
        let port = FIRST + (start + NEXT.fetch_add(37, Ordering::Relaxed)) % SPAN;
        let port = u16::try_from(port).expect("below 32768");
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {FIRST}..{}", FIRST + SPAN)
}

/// A child process killed (and reaped) when dropped, so a failing test leaves none behind.
pub struct Killed(pub std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Polls `probe` until it yields `Some`, or fails the test after `timeout` naming `what`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Blocking twin of [`wait_for`] for tests that drive synchronous clients (librdkafka's
/// `BaseConsumer` makes progress only inside `poll`, so the probe usually polls).
pub fn wait_until<T>(what: &str, timeout: Duration, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = probe() {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `work` to its end on a thread and current-thread runtime of its own, so that sync
/// tests, async tests and `Drop` can all use async clients; `Err` if the runtime cannot be
/// built or `work` panics.
fn on_own_runtime<T: Send>(work: impl AsyncFnOnce() -> T + Send) -> Result<T, String> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| format!("runtime: {e}"))?;
                Ok(runtime.block_on(work()))
            })
            .join()
            .map_err(|_| "the thread of its own runtime panicked".to_owned())?
    })
}

/// Runs `call` with an admin client of the test cluster ([`on_own_runtime`]).
fn with_admin<T: Send>(
    call: impl AsyncFnOnce(&rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext>) -> T
    + Send,
) -> T {
    let admin: rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext> =
        kafka_config().client().create().expect("admin client");
    on_own_runtime(async || call(&admin).await).expect("admin thread")
}

/// Removes a test's keyspace and every topic of its namespace (`<namespace>.…`), on a thread
/// and runtime of its own ([`on_own_runtime`]). Best effort, for `Drop`: it reports what it could not remove instead
/// of panicking. Cassandra keeps about a megabyte of heap per table (its metrics and memtables)
/// until the table is dropped, so a suite that left its deployments behind ran the test node's
/// 1 GiB heap out (a late test's CREATE TABLE timed out while the node collected garbage).
pub fn remove_deployment(namespace: &str, keyspace: &str) -> Result<(), String> {
    use rdkafka::admin::{AdminClient, AdminOptions};
    use rdkafka::client::DefaultClientContext;
    const TIMEOUT: Duration = Duration::from_secs(60);
    let prefix = format!("{namespace}.");
    let remove = async || -> Result<(), String> {
        let session = weir::store::connect(&cql_config(keyspace))
            .await
            .map_err(|e| format!("connect to the CQL store: {e}"))?;
        let mut drop =
            scylla::statement::Statement::new(format!("DROP KEYSPACE IF EXISTS {keyspace}"));
        drop.set_request_timeout(Some(TIMEOUT));
        session
            .query_unpaged(drop, ())
            .await
            .map_err(|e| format!("drop keyspace {keyspace}: {e}"))?;
        let admin: AdminClient<DefaultClientContext> = kafka_config()
            .client()
            .create()
            .map_err(|e| format!("admin client: {e}"))?;
        let metadata = admin
            .inner()
            .fetch_metadata(None, TIMEOUT)
            .map_err(|e| format!("topic metadata: {e}"))?;
        let topics: Vec<&str> = metadata
            .topics()
            .iter()
            .map(|t| t.name())
            .filter(|name| name.starts_with(&prefix))
            .collect();
        if topics.is_empty() {
            return Ok(());
        }
        let results = admin
            .delete_topics(
                &topics,
                &AdminOptions::new().operation_timeout(Some(TIMEOUT)),
            )
            .await
            .map_err(|e| format!("delete topics of {namespace}: {e}"))?;
        for result in results {
            result.map_err(|(topic, code)| format!("delete topic {topic}: {code}"))?;
        }
        Ok(())
    };
    on_own_runtime(remove)?
}

/// Creates plain topics `(name, partitions)` with replication 1, failing the test on error.
/// Callable from sync and async tests alike.
pub fn create_topics(topics: &[(&str, i32)]) {
    use rdkafka::admin::{AdminOptions, NewTopic, TopicReplication};
    let new_topics: Vec<NewTopic> = topics
        .iter()
        .map(|(name, partitions)| NewTopic::new(name, *partitions, TopicReplication::Fixed(1)))
        .collect();
    let results =
        with_admin(async |admin| admin.create_topics(&new_topics, &AdminOptions::new()).await)
            .expect("create topics");
    for result in results {
        result.unwrap_or_else(|(topic, code)| panic!("cannot create topic {topic}: {code}"));
    }
}

/// Deletes consumer groups (they must have no members), failing the test on error.
pub fn delete_groups(groups: &[&str]) {
    use rdkafka::admin::AdminOptions;
    let results = with_admin(async |admin| admin.delete_groups(groups, &AdminOptions::new()).await)
        .expect("delete groups");
    for result in results {
        result.unwrap_or_else(|(group, code)| panic!("cannot delete group {group}: {code}"));
    }
}

/// The `weir` binary of the same build as the running test (target/<profile>/weir). `cargo test`
/// does not build another package's binaries: `tests/run.sh` runs `cargo build --bins` first.
pub fn weir_binary() -> PathBuf {
    let test_exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/<test> → target/<profile>/weir; a binary of this package
    // (target/<profile>/fault_run) finds it beside itself.
    let dir = test_exe.parent().expect("the executable is in a directory");
    let profile_dir = if dir.file_name().is_some_and(|name| name == "deps") {
        dir.parent()
            .expect("test executable lives in target/<profile>/deps")
    } else {
        dir
    };
    let binary = profile_dir.join("weir");
    assert!(
        binary.exists(),
        "{} is missing: run `cargo build -p weir --bins` before the e2e tests",
        binary.display()
    );
    binary
}

pub mod cli;
pub mod deployment;
pub mod faults;
pub mod registry;

/// The child requests of an execution's `history`, in order: (seq, child id, function, kind).
pub fn child_requests(
    history: &[weir::codec::HistoryRecord],
) -> Vec<(
    u64,
    weir::model::ExecutionId,
    String,
    weir::model::ChildKind,
)> {
    use weir::codec::HistoryEntry;
    use weir::model::{HistoryEvent, JoinSetRequest};
    history
        .iter()
        .filter_map(|r| match &r.entry {
            HistoryEntry::Event {
                event:
                    HistoryEvent::JoinSetRequest {
                        request:
                            JoinSetRequest::ChildExecutionRequest {
                                child_execution_id,
                                target_ffqn,
                                child_kind,
                                ..
                            },
                        ..
                    },
                ..
            } => Some((
                r.seq,
                child_execution_id.clone(),
                target_ffqn.to_string(),
                *child_kind,
            )),
            _ => None,
        })
        .collect()
}

/// The ids of the events an execution's `history` took (its `EventDelivered` received), in
/// order.
pub fn delivered_events(history: &[weir::codec::HistoryRecord]) -> Vec<String> {
    use weir::codec::HistoryEntry;
    use weir::model::{EventOutcome, Response};
    history
        .iter()
        .filter_map(|r| match &r.entry {
            HistoryEntry::ResponseAppended(Response::EventDelivered {
                outcome: EventOutcome::Received { event_id, .. },
                ..
            }) => Some(event_id.clone()),
            _ => None,
        })
        .collect()
}

/// An HTTP client builder for the tests' requests to `weir serve` and its UI, with the crypto
/// provider reqwest needs installed first ([`weir::tls::install_crypto_provider`]).
pub fn http() -> reqwest::ClientBuilder {
    weir::tls::install_crypto_provider();
    reqwest::Client::builder()
}

/// An HTTP client with reqwest's defaults ([`http`]).
pub fn http_client() -> reqwest::Client {
    http().build().expect("an HTTP client")
}
