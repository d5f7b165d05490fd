//! A Weir deployment of its own for one test: a topic namespace and a keyspace nobody else
//! uses, the topology applied by the real `weir topology apply`, and `weir worker` processes
//! started (and killed, stopped, resumed) by the test.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};
use serde_json::Value;
use weir::codec::{
    AvroRecord, Codec, DlqEnvelope, ExecutionFinished, HistoryEntry, HistoryRecord, RecordPosition,
};
use weir::model::{ExecutionId, ExecutionResult, Ffqn};
use weir::store::{CqlStore, Store, connect};
use weir::topology::{TopicRole, Topology};

use crate::{
    Killed, brokers, cql_config, cql_contact_points, external_classpath, free_port, java_program,
    kafka_config, remove_deployment, repo_root, unique_name, wait_until, weir_binary,
};

/// Where `bash examples/build.sh` put the components.
pub fn components_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("WEIR_EXAMPLES_OUT") {
        return PathBuf::from(dir);
    }
    let cache = std::env::var("WEIR_CACHE").unwrap_or_else(|_| "/var/cache/weir".to_owned());
    let dir = PathBuf::from(cache).join("examples");
    assert!(
        dir.join("order.wasm").exists(),
        "no example components in {}: run `bash examples/build.sh` first",
        dir.display()
    );
    dir
}

pub struct Deployment {
    pub namespace: String,
    pub keyspace: String,
    pub topology: Topology,
    pub codec: Codec,
    logs: PathBuf,
}

/// A `weir serve` process; killed when dropped.
pub struct ApiServer {
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    pub port: u16,
    pub log: PathBuf,
    _child: Killed,
}

/// A `weir worker` process; killed when dropped.
pub struct WorkerProcess {
    pub name: String,
    pub child: Child,
    pub metrics_port: u16,
    pub log: PathBuf,
}

impl WorkerProcess {
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} {}", self.child.id());
    }

    /// The worker's Prometheus metrics, as name → value.
    pub fn metrics(&self) -> Option<BTreeMap<String, f64>> {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", self.metrics_port)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        stream.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").ok()?;
        let mut text = String::new();
        stream.read_to_string(&mut text).ok()?;
        Some(
            text.lines()
                .filter(|l| l.starts_with("weir_"))
                .filter_map(|l| {
                    let (name, value) = l.split_once(' ')?;
                    Some((name.to_owned(), value.parse().ok()?))
                })
                .collect(),
        )
    }
}

impl WorkerProcess {
    /// Waits until the worker's log contains `text`.
    pub fn wait_for_log(&self, text: &str, timeout: Duration) {
        crate::wait_until(
            &format!("`{text}` in {}", self.log.display()),
            timeout,
            || {
                std::fs::read_to_string(&self.log)
                    .ok()
                    .filter(|log| log.contains(text))
                    .map(|_| ())
            },
        );
    }

    pub fn log_contains(&self, text: &str) -> bool {
        std::fs::read_to_string(&self.log).is_ok_and(|log| log.contains(text))
    }
}

/// A program outside Weir serving an activity route; killed when dropped.
pub struct ExternalService {
    child: Child,
    pub log: PathBuf,
}

impl ExternalService {
    /// The lines it printed for answered requests (`answered <child> for <parent>: <json>`).
    pub fn answered(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with("answered "))
            .map(str::to_owned)
            .collect()
    }

    /// Waits until it has its partitions (it prints `ready`): a request it must answer by a
    /// deadline is sent only once it reads (a JVM starting on a busy machine takes seconds).
    pub fn wait_ready(&self, timeout: Duration) {
        crate::wait_until(
            "the external service to have its partitions",
            timeout,
            || {
                std::fs::read_to_string(&self.log)
                    .unwrap_or_default()
                    .lines()
                    .any(|l| l.starts_with("ready "))
                    .then_some(())
            },
        );
    }
}

impl Drop for ExternalService {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Deployment {
    /// The keyspace and topics go with the test (see [`crate::remove_deployment`]); its logs
    /// stay in [`Deployment::logs`].
    fn drop(&mut self) {
        if let Err(error) = remove_deployment(&self.namespace, &self.keyspace) {
            eprintln!("could not remove deployment {}: {error}", self.namespace);
        }
    }
}

impl Deployment {
    /// A fresh namespace and keyspace with the repository's topology applied.
    pub fn new(prefix: &str) -> Self {
        let namespace = unique_name(prefix);
        let keyspace = namespace.clone();
        let topology = Topology::load(&repo_root().join("topology"))
            .and_then(|t| t.with_namespace(&namespace))
            .expect("topology");
        let logs = std::env::temp_dir().join("weir-e2e").join(&namespace);
        std::fs::create_dir_all(&logs).expect("log dir");
        let deployment = Deployment {
            namespace,
            keyspace,
            topology,
            codec: Codec::single_object(),
            logs,
        };
        let output = deployment
            .command()
            .args(["topology", "apply"])
            .output()
            .expect("run weir topology apply");
        assert!(
            output.status.success(),
            "topology apply failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        deployment
    }

    /// `weir` with this deployment's cluster, keyspace, namespace and registry in its environment.
    pub fn command(&self) -> Command {
        let mut command = Command::new(weir_binary());
        command
            .env("WEIR_BROKERS", brokers())
            .env("WEIR_CQL", cql_contact_points().join(","))
            .env("WEIR_KEYSPACE", &self.keyspace)
            .env("WEIR_NAMESPACE", &self.namespace)
            .env("WEIR_TOPOLOGY", repo_root().join("topology"))
            .env(
                "WEIR_COMPONENTS",
                repo_root().join("topology/components.toml"),
            )
            .env("WEIR_COMPONENTS_DIR", components_dir())
            .env("WEIR_LOG", "info,weir=debug,scylla=warn,rdkafka=warn");
        command
    }

    /// Starts a worker; `extra` are more command-line arguments.
    pub fn start_worker(&self, name: &str, extra: &[&str]) -> WorkerProcess {
        self.start_worker_with_env(name, extra, &[])
    }

    /// Starts a worker with more environment variables (e.g. `WEIR_FAILPOINTS`).
    pub fn start_worker_with_env(
        &self,
        name: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> WorkerProcess {
        // Short sessions so that a dead member is noticed within seconds.
        let session = [
            "--kafka-property",
            "session.timeout.ms=6000",
            "--kafka-property",
            "heartbeat.interval.ms=1000",
        ];
        let args: Vec<&str> = ["--instance-id", name]
            .into_iter()
            .chain(session)
            .chain(extra.iter().copied())
            .collect();
        self.spawn_worker(name, &args, env)
    }

    /// Starts `weir worker` with exactly `args` (plus its metrics address): no instance id,
    /// no session settings unless given. Its log is `<log_name>.log`.
    pub fn spawn_worker(
        &self,
        log_name: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> WorkerProcess {
        self.spawn_worker_on(log_name, free_port(), args, env)
    }

    /// [`spawn_worker`](Self::spawn_worker) with its metrics served on `metrics_port` of
    /// 127.0.0.1 (a caller that must keep to a range of ports picks it).
    pub fn spawn_worker_on(
        &self,
        log_name: &str,
        metrics_port: u16,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> WorkerProcess {
        let log = self.logs.join(format!("{log_name}.log"));
        let file = std::fs::File::create(&log).expect("log file");
        let child = self
            .command()
            .arg("worker")
            .args(["--metrics-addr", &format!("127.0.0.1:{metrics_port}")])
            .args(args)
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("start weir worker");
        WorkerProcess {
            name: log_name.to_owned(),
            child,
            metrics_port,
            log,
        }
    }

    /// Starts `weir serve` (the HTTP API and the web UI) on a free port, with one read and one
    /// admin token, and waits until it listens.
    pub fn serve_api(&self, read_token: &str, admin_token: &str) -> ApiServer {
        let read = self.logs.join("read.tokens");
        let admin = self.logs.join("admin.tokens");
        std::fs::write(&read, format!("# readers\n{read_token}\n")).expect("write tokens");
        std::fs::write(&admin, format!("{admin_token}\n")).expect("write tokens");
        self.serve_api_with(&[
            "--read-tokens-file".as_ref(),
            read.as_os_str(),
            "--admin-tokens-file".as_ref(),
            admin.as_os_str(),
        ])
    }

    /// [`serve_api`](Self::serve_api) with `args` instead of the tokens (e.g.
    /// `--api-insecure-no-auth`).
    pub fn serve_api_with(&self, args: &[&std::ffi::OsStr]) -> ApiServer {
        let port = free_port();
        let log = self.logs.join("serve.log");
        let child = self
            .command()
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .args(args)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log"))
            .spawn()
            .expect("start weir serve");
        let child = Killed(child);
        wait_until("the API to listen", Duration::from_secs(60), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).ok()
        });
        ApiServer {
            base: format!("http://127.0.0.1:{port}"),
            port,
            log,
            _child: child,
        }
    }

    /// Starts `tests/java/TaxService.java`, the external activity of the route of
    /// `weir-examples:tax/rates`: a Java program using only kafka-clients, Avro and
    /// `schemas/avro/` (its classpath is resolved by tests/run.sh into
    /// `$WEIR_CACHE/external-activity-lib`).
    pub fn start_external_tax_service(&self) -> ExternalService {
        let route = self
            .topology
            .route("weir-examples:tax/rates")
            .expect("a route for weir-examples:tax/rates in topology/routes.toml");
        assert!(route.external, "the tax route must be external");
        let log = self.logs.join("tax-service.log");
        let file = std::fs::File::create(&log).expect("log file");
        let child = crate::java_program(&crate::external_classpath(), "TaxService.java")
            .arg(brokers())
            .arg(&route.topic)
            .arg(self.topic(TopicRole::Responses))
            .arg(format!("{}.tax-service", self.namespace))
            .arg(repo_root().join("schemas/avro"))
            .stdout(file.try_clone().expect("log file"))
            .stderr(file)
            .spawn()
            .expect("start the external tax service (java)");
        ExternalService { child, log }
    }

    /// The repository's `topology/components.toml` as changed by `edit`, written for this
    /// deployment; give it to a worker as `WEIR_COMPONENTS`.
    pub fn components_with(&self, name: &str, edit: impl FnOnce(String) -> String) -> PathBuf {
        let text = std::fs::read_to_string(repo_root().join("topology/components.toml"))
            .expect("read topology/components.toml");
        let path = self.logs.join(format!("{name}.components.toml"));
        std::fs::write(&path, edit(text)).expect("write a components file");
        path
    }

    /// A copy of the repository's `topology/` directory with its `routes.toml` changed by
    /// `edit`, written for this deployment; give it to a worker as `WEIR_TOPOLOGY`.
    pub fn topology_with(&self, name: &str, edit: impl FnOnce(String) -> String) -> PathBuf {
        let dir = self.logs.join(format!("{name}.topology"));
        std::fs::create_dir_all(&dir).expect("a topology directory");
        for entry in std::fs::read_dir(repo_root().join("topology")).expect("read topology/") {
            let path = entry.expect("an entry of topology/").path();
            if path.extension().is_some_and(|e| e == "toml") {
                let file = path.file_name().expect("a file name");
                std::fs::copy(&path, dir.join(file)).expect("copy a topology file");
            }
        }
        let routes = dir.join("routes.toml");
        let text = std::fs::read_to_string(&routes).expect("read routes.toml");
        std::fs::write(&routes, edit(text)).expect("write routes.toml");
        dir
    }

    /// The offset (and its metadata) the consumer group `<namespace>.<group>` has committed
    /// for a partition, if any.
    pub fn committed(&self, group: &str, topic: &str, partition: i32) -> Option<(i64, String)> {
        let mut config = kafka_config().client();
        config
            .set("group.id", format!("{}.{group}", self.namespace))
            .set("isolation.level", "read_committed")
            .set("enable.auto.commit", "false");
        let consumer: BaseConsumer = config.create().expect("consumer");
        let mut list = TopicPartitionList::new();
        list.add_partition(topic, partition);
        // The group's coordinator can move or be loading (`NotCoordinator`, seen in CI right
        // after a worker restart): asked again, by the worker's rule of what passes, within
        // the call's 30 s.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let committed = loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match consumer.committed_offsets(list.clone(), left) {
                Ok(committed) => break committed,
                Err(e)
                    if !left.is_zero()
                        && e.rdkafka_error_code()
                            .is_some_and(weir::kafka::recovery::is_transient) =>
                {
                    eprintln!(
                        "committed offsets of {group} on {topic}/{partition}: {e} (transient, asking again)"
                    );
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(e) => panic!("committed offsets of {group} on {topic}/{partition}: {e}"),
            }
        };
        let element = committed.find_partition(topic, partition)?;
        match element.offset() {
            Offset::Offset(offset) => Some((offset, element.metadata().to_owned())),
            _ => None,
        }
    }

    /// `weir correlation list --key <key> --json` (a correlation key, or the id of an
    /// execution that does not exist yet): the key's entry, if it is listed.
    pub fn correlation_listed(&self, key: &str) -> Option<Value> {
        let output = self
            .command()
            .args(["correlation", "list", "--key", key, "--json"])
            .output()
            .expect("run weir correlation list");
        assert!(
            output.status.success(),
            "weir correlation list failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let listed: Vec<Value> = serde_json::from_slice(&output.stdout).expect("a JSON array");
        assert!(listed.len() <= 1, "--key {key} listed {listed:?}");
        listed.into_iter().next()
    }

    /// [`correlation_listed`](Self::correlation_listed), polled until `want` holds of the
    /// key's entry; the entry.
    pub async fn correlation_listed_until(
        &self,
        key: &str,
        what: &str,
        want: impl Fn(&Value) -> bool,
    ) -> Value {
        crate::wait_for(what, Duration::from_secs(120), || async {
            self.correlation_listed(key).filter(|entry| want(entry))
        })
        .await
    }

    /// The folder of this deployment's worker logs.
    pub fn logs(&self) -> &std::path::Path {
        &self.logs
    }

    pub fn topic(&self, role: TopicRole) -> String {
        self.topology.topic(role).name.clone()
    }

    pub fn producer(&self) -> FutureProducer {
        kafka_config().producer().create().expect("producer")
    }

    /// The dead letters of records read from `topic`, as the DLQ has them now (read to its
    /// end, for at most `timeout`).
    pub fn dead_letters_from(&self, topic: &str, timeout: Duration) -> Vec<DlqEnvelope> {
        self.read_to_end::<DlqEnvelope>(&self.topic(TopicRole::Dlq), timeout)
            .into_iter()
            .map(|(_, dead)| dead)
            .filter(|dead| dead.original_topic == topic)
            .collect()
    }

    /// Produces raw bytes to a topic with a key.
    pub async fn produce_raw(
        &self,
        producer: &FutureProducer,
        topic: &str,
        key: &str,
        value: &[u8],
    ) {
        producer
            .send(
                FutureRecord::to(topic).key(key).payload(value),
                Duration::from_secs(30),
            )
            .await
            .expect("produce");
    }

    /// Submits a top-level execution; returns its id.
    /// Sends event `name` to `target` (an execution id or a correlation key) with
    /// `tests/java/SendEvent.java`: a program that knows Weir only by kafka-clients, Avro and
    /// `schemas/avro/`.
    pub fn send_event_with_java(&self, target: &str, name: &str, payload: &str, event_id: &str) {
        let output = java_program(&external_classpath(), "SendEvent.java")
            .arg(brokers())
            .arg(self.topic(TopicRole::Events))
            .arg(repo_root().join("schemas/avro"))
            .arg(target)
            .arg(name)
            .arg(payload)
            .arg(event_id)
            .output()
            .expect("run SendEvent.java (Java 17)");
        assert!(
            output.status.success(),
            "SendEvent.java failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(String::from_utf8_lossy(&output.stdout).starts_with("sent "));
    }

    pub async fn submit(
        &self,
        producer: &FutureProducer,
        ffqn: &str,
        params: Value,
    ) -> ExecutionId {
        self.submit_with_headers(producer, ffqn, params, &[]).await
    }

    /// [`submit`](Self::submit) as execution `id` (a test that needs to know the id first).
    pub async fn submit_as(
        &self,
        producer: &FutureProducer,
        id: &ExecutionId,
        ffqn: &str,
        params: Value,
    ) {
        self.submit_record_as(producer, id, ffqn, params, (None, None), &[])
            .await
    }

    /// [`submit`](Self::submit) for `tenant` (fairness: taken round-robin by tenant).
    pub async fn submit_for_tenant(
        &self,
        producer: &FutureProducer,
        tenant: &str,
        ffqn: &str,
        params: Value,
    ) -> ExecutionId {
        let id = ExecutionId::top_level(ulid::Ulid::new());
        self.submit_record_as(producer, &id, ffqn, params, (None, Some(tenant)), &[])
            .await;
        id
    }

    /// [`submit`](Self::submit) with Kafka headers on the record (`traceparent`, …).
    pub async fn submit_with_headers(
        &self,
        producer: &FutureProducer,
        ffqn: &str,
        params: Value,
        headers: &[(&str, &str)],
    ) -> ExecutionId {
        self.submit_record(producer, ffqn, params, None, headers)
            .await
    }

    /// [`submit`](Self::submit) with a deadline.
    pub async fn submit_with_deadline(
        &self,
        producer: &FutureProducer,
        ffqn: &str,
        params: Value,
        deadline: chrono::DateTime<chrono::Utc>,
    ) -> ExecutionId {
        self.submit_record(producer, ffqn, params, Some(deadline), &[])
            .await
    }

    async fn submit_record(
        &self,
        producer: &FutureProducer,
        ffqn: &str,
        params: Value,
        deadline: Option<chrono::DateTime<chrono::Utc>>,
        headers: &[(&str, &str)],
    ) -> ExecutionId {
        let id = ExecutionId::top_level(ulid::Ulid::new());
        self.submit_record_as(producer, &id, ffqn, params, (deadline, None), headers)
            .await;
        id
    }

    async fn submit_record_as(
        &self,
        producer: &FutureProducer,
        id: &ExecutionId,
        ffqn: &str,
        params: Value,
        (deadline, tenant): (Option<chrono::DateTime<chrono::Utc>>, Option<&str>),
        headers: &[(&str, &str)],
    ) {
        let ffqn = ffqn.parse::<Ffqn>().expect("ffqn");
        let submission = weir::codec::Submission {
            tenant: tenant.map(str::to_owned),
            ..weir::codec::Submission::top_level(id, ffqn, params, Default::default(), deadline)
        };
        let topic = self.topic(TopicRole::Submissions);
        let value = self.codec.encode(&topic, &submission).expect("encode");
        let mut owned = rdkafka::message::OwnedHeaders::new();
        for (key, value) in headers {
            owned = owned.insert(rdkafka::message::Header {
                key,
                value: Some(value.as_bytes()),
            });
        }
        let key = id.to_string();
        producer
            .send(
                FutureRecord::to(&topic)
                    .key(&key)
                    .payload(&value)
                    .headers(owned),
                Duration::from_secs(30),
            )
            .await
            .expect("produce");
    }

    /// Every committed record of a topic, decoded, read until `done` says enough.
    pub fn read_topic<R: AvroRecord>(
        &self,
        topic: &str,
        timeout: Duration,
        what: &str,
        mut done: impl FnMut(&[(String, R)]) -> bool,
    ) -> Vec<(String, R)> {
        let consumer = committed_reader(topic);
        let mut records: Vec<(String, R)> = Vec::new();
        crate::wait_until(what, timeout, || {
            while let Some(message) = consumer.poll(Duration::from_millis(100)) {
                let message = message.expect("consume");
                let key = String::from_utf8_lossy(message.key().unwrap_or_default()).into_owned();
                let position = RecordPosition::at(topic, message.partition(), message.offset());
                let record = self
                    .codec
                    .decode::<R>(message.payload().unwrap_or_default(), &position)
                    .expect("decodable record");
                records.push((key, record));
            }
            done(&records).then_some(())
        });
        records
    }

    /// Waits for the result of every id on weir.results, then reads the topic to its end (the
    /// last stable offset of every partition) and panics if any execution on it — wanted or
    /// not — has more than one result (an exactly-once violation), naming each with all its
    /// results. Returns the result of each wanted id. (A test that submits a finished
    /// execution again, which is answered again by design, reads the topic itself.)
    pub fn results(
        &self,
        ids: &[ExecutionId],
        timeout: Duration,
    ) -> HashMap<ExecutionId, ExecutionResult> {
        let topic = self.topic(TopicRole::Results);
        let wanted: std::collections::HashSet<String> =
            ids.iter().map(ToString::to_string).collect();
        self.read_topic::<ExecutionFinished>(&topic, timeout, "every result", |records| {
            let seen: std::collections::HashSet<&String> = records
                .iter()
                .map(|(k, _)| k)
                .filter(|k| wanted.contains(*k))
                .collect();
            seen.len() == wanted.len()
        });
        // Read again, to the end: a duplicate may come after the result waited for.
        let all = results_by_id(
            self.read_to_end::<ExecutionFinished>(&topic, timeout)
                .into_iter()
                .map(|(_, finished)| finished),
        );
        let duplicates = duplicate_results(&all);
        assert!(
            duplicates.is_empty(),
            "{} executions with more than one result on {topic}: {duplicates:#?}",
            duplicates.len()
        );
        all.into_iter()
            .filter(|(id, _)| wanted.contains(&id.to_string()))
            .filter_map(|(id, results)| Some((id, results.into_iter().next()?)))
            .collect()
    }

    /// Every committed record of `topic`, decoded, read to the last stable offset of every
    /// partition.
    pub fn read_to_end<R: AvroRecord>(&self, topic: &str, timeout: Duration) -> Vec<(String, R)> {
        self.read_records_to_end(topic, timeout)
            .into_iter()
            .map(|read| (read.key, read.record))
            .collect()
    }

    /// [`Deployment::read_to_end`], with where each record was and its headers.
    pub fn read_records_to_end<R: AvroRecord>(
        &self,
        topic: &str,
        timeout: Duration,
    ) -> Vec<ReadRecord<R>> {
        use rdkafka::message::Headers;
        let consumer = reader(topic, true);
        let partitions = consumer.assignment().map(|a| a.count()).unwrap_or_default();
        let mut at_end = std::collections::HashSet::new();
        let mut records = Vec::new();
        crate::wait_until(&format!("the end of {topic}"), timeout, || {
            while let Some(polled) = consumer.poll(Duration::from_millis(100)) {
                let message = match polled {
                    Ok(message) => message,
                    Err(rdkafka::error::KafkaError::PartitionEOF(p)) => {
                        at_end.insert(p);
                        continue;
                    }
                    // librdkafka reports a broker it lost touch with and reconnects by
                    // itself: the worker's rule of what passes; the wait's timeout bounds it.
                    Err(e)
                        if e.rdkafka_error_code()
                            .is_some_and(weir::kafka::recovery::is_transient) =>
                    {
                        eprintln!("consume {topic}: {e} (transient, reading on)");
                        continue;
                    }
                    Err(e) => panic!("consume {topic}: {e}"),
                };
                at_end.remove(&message.partition());
                let key = String::from_utf8_lossy(message.key().unwrap_or_default()).into_owned();
                let position = RecordPosition::at(topic, message.partition(), message.offset());
                let record = self
                    .codec
                    .decode::<R>(message.payload().unwrap_or_default(), &position)
                    .expect("decodable record");
                let headers = message
                    .headers()
                    .map(|headers| {
                        headers
                            .iter()
                            .map(|h| (h.key.to_owned(), h.value.unwrap_or_default().to_vec()))
                            .collect()
                    })
                    .unwrap_or_default();
                records.push(ReadRecord {
                    partition: message.partition(),
                    offset: message.offset(),
                    key,
                    headers,
                    record,
                });
            }
            (at_end.len() == partitions).then_some(())
        });
        records
    }

    /// The committed `weir.history` of every execution, read to the last stable offset of
    /// every partition.
    pub fn kafka_histories(&self) -> HashMap<ExecutionId, Vec<HistoryRecord>> {
        let topic = self.topic(TopicRole::History);
        let mut histories: HashMap<ExecutionId, Vec<HistoryRecord>> = HashMap::new();
        for (_, record) in self.read_to_end::<HistoryRecord>(&topic, Duration::from_secs(60)) {
            histories
                .entry(record.execution_id.clone())
                .or_default()
                .push(record);
        }
        histories
    }

    pub async fn store(&self) -> CqlStore {
        let session = connect(&cql_config(&self.keyspace)).await.expect("connect");
        CqlStore::new(Arc::new(session), &self.keyspace)
            .await
            .expect("store")
    }

    /// The materialised history of an execution, decoded.
    pub async fn store_history(&self, store: &CqlStore, id: &ExecutionId) -> Vec<HistoryRecord> {
        store
            .history(id)
            .await
            .expect("store history")
            .iter()
            .map(|row| {
                let position = RecordPosition::at("store", row.kafka_partition, row.kafka_offset);
                self.codec
                    .decode(&row.record, &position)
                    .expect("decodable stored history")
            })
            .collect()
    }
    /// The stored history of the finished execution `id`, once the store holds it to its end
    /// (its `Finished` entry): the store lags the log, and a read right after the result
    /// can see a part of it.
    pub async fn finished_history(&self, store: &CqlStore, id: &ExecutionId) -> Vec<HistoryRecord> {
        let what = format!("the stored history of {id} to reach its end");
        crate::wait_for(&what, Duration::from_secs(120), || async {
            let history = self.store_history(store, id).await;
            history
                .iter()
                .any(|r| matches!(r.entry, HistoryEntry::Finished { .. }))
                .then_some(history)
        })
        .await
    }
}

/// A read_committed consumer of every partition of `topic`, from the beginning.
/// Two or more results on `weir.results` for one execution: an exactly-once violation.
#[derive(Debug, Clone, PartialEq)]
pub struct DuplicateResult {
    pub execution_id: ExecutionId,
    /// Every result it has, in log order (per partition).
    pub results: Vec<ExecutionResult>,
}

/// Every result of `finished` per execution, in the order given.
pub fn results_by_id(
    finished: impl IntoIterator<Item = ExecutionFinished>,
) -> HashMap<ExecutionId, Vec<ExecutionResult>> {
    let mut by_id: HashMap<ExecutionId, Vec<ExecutionResult>> = HashMap::new();
    for f in finished {
        by_id.entry(f.execution_id).or_default().push(f.result);
    }
    by_id
}

/// The executions of `by_id` with more than one result, each with all of them, by id.
pub fn duplicate_results(
    by_id: &HashMap<ExecutionId, Vec<ExecutionResult>>,
) -> Vec<DuplicateResult> {
    let mut duplicates: Vec<DuplicateResult> = by_id
        .iter()
        .filter(|(_, results)| results.len() > 1)
        .map(|(id, results)| DuplicateResult {
            execution_id: id.clone(),
            results: results.clone(),
        })
        .collect();
    duplicates.sort_by_key(|d| d.execution_id.to_string());
    duplicates
}

/// A committed record as [`Deployment::read_records_to_end`] read it.
#[derive(Debug, Clone)]
pub struct ReadRecord<R> {
    pub partition: i32,
    pub offset: i64,
    pub key: String,
    pub headers: Vec<(String, Vec<u8>)>,
    pub record: R,
}

pub fn committed_reader(topic: &str) -> BaseConsumer {
    reader(topic, false)
}

/// A read_committed consumer of every partition of `topic` from the beginning, with partition
/// EOFs reported or not; it does not long-poll at the end (`fetch.wait.max.ms=10`).
pub fn reader(topic: &str, report_end: bool) -> BaseConsumer {
    let mut config = kafka_config().client();
    config
        .set("group.id", unique_name("reader"))
        .set("isolation.level", "read_committed")
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "10")
        .set("enable.partition.eof", report_end.to_string());
    let consumer: BaseConsumer = config.create().expect("consumer");
    let metadata = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(30))
        .expect("metadata");
    let mut list = TopicPartitionList::new();
    for p in metadata.topics()[0].partitions() {
        list.add_partition_offset(topic, p.id(), Offset::Beginning)
            .expect("offset");
    }
    consumer.assign(&list).expect("assign");
    consumer
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn finished(id: &ExecutionId, value: i64) -> ExecutionFinished {
        ExecutionFinished {
            execution_id: id.clone(),
            ffqn: "example:wf/flows.f".parse().expect("ffqn"),
            result: ExecutionResult::Ok(json!(value)),
            finished_at: chrono::Utc::now(),
            correlation_id: None,
        }
    }

    /// Every result of an execution is kept, not only the first: a second one (here with
    /// another value, and a third identical one for another execution) is reported, with all
    /// of them.
    #[test]
    fn a_second_result_for_an_execution_is_reported_with_both() {
        let once = ExecutionId::top_level(ulid::Ulid::new());
        let twice = ExecutionId::top_level(ulid::Ulid::new());
        let thrice = ExecutionId::top_level(ulid::Ulid::new());
        let by_id = results_by_id([
            finished(&twice, 1),
            finished(&once, 7),
            finished(&thrice, 3),
            finished(&twice, 2),
            finished(&thrice, 3),
            finished(&thrice, 3),
        ]);
        assert_eq!(by_id[&once], vec![ExecutionResult::Ok(json!(7))]);
        let mut expected = vec![
            DuplicateResult {
                execution_id: twice.clone(),
                results: vec![ExecutionResult::Ok(json!(1)), ExecutionResult::Ok(json!(2))],
            },
            DuplicateResult {
                execution_id: thrice.clone(),
                results: vec![ExecutionResult::Ok(json!(3)); 3],
            },
        ];
        expected.sort_by_key(|d| d.execution_id.to_string());
        assert_eq!(duplicate_results(&by_id), expected);
        assert!(duplicate_results(&results_by_id([finished(&once, 7)])).is_empty());
    }
}
