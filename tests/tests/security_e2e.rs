//! Issue 15 items 1 and 2 on the secure local stack (`docker/local/stack.sh` with
//! `WEIR_STACK_SECURE=1`, started by tests/run.sh beside the test stack): Cassandra with
//! `PasswordAuthenticator` and client TLS required, Kafka with a SASL_SSL listener (PLAIN and
//! SCRAM-SHA-512) and an authorizer that denies whatever no ACL allows.
//!
//! - The store: a connection with the right credentials and CA works (also presenting a
//!   client certificate, and with hostname verification off through an address the
//!   certificate does not name); the wrong password, no credentials, another CA, an address
//!   the certificate does not name and plaintext each fail with an error that says which.
//! - Kafka: `topology apply` as the admin; a worker as `worker` (SCRAM-SHA-512) with only the
//!   ACLs docs/security.md lists for a worker, activities through their topics; `weir submit
//!   --follow` as `client` (PLAIN) with only a client's ACLs gets the result; `intruder`, with
//!   none, is refused.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use weir::store::{ConnectFailure, CqlConfig, CqlLogin, CqlTls, StoreError, connect};
use weir_e2e::{Killed, repo_root, unique_name, wait_until, weir_binary};

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

fn secure_cql() -> String {
    env_or("WEIR_SECURE_CQL", "127.0.0.1:19142")
}

fn secure_brokers() -> String {
    env_or("WEIR_SECURE_BROKERS", "127.0.0.1:19192")
}

fn tls_dir() -> PathBuf {
    std::env::var_os("WEIR_SECURE_TLS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| weir_e2e::weir_cache().join("secure-stack/tls"))
}

fn login(password: &str) -> Option<CqlLogin> {
    Some(CqlLogin {
        username: "weir".into(),
        password: secrecy::SecretString::from(password.to_owned()),
    })
}

fn tls(ca: &str, client: bool, verify_hostname: bool) -> Option<CqlTls> {
    let dir = tls_dir();
    assert!(
        dir.join("ca.pem").exists(),
        "no secure stack: {} has no ca.pem (start it: `. docker/local/install.sh; use_secure_stack; \
         bash docker/local/stack.sh up`; tests/run.sh does)",
        dir.display()
    );
    Some(CqlTls {
        ca: Some(dir.join(ca)),
        client: client.then(|| (dir.join("client.pem"), dir.join("client-key.pem"))),
        verify_hostname,
    })
}

fn config(contact: &str, login: Option<CqlLogin>, tls: Option<CqlTls>) -> CqlConfig {
    let mut config = CqlConfig::new(vec![contact.to_owned()], "system");
    config.login = login;
    config.tls = tls;
    config
}

/// Connects and reads the node's version; or the failure and the whole message.
async fn try_connect(config: &CqlConfig) -> Result<String, (ConnectFailure, String)> {
    match connect(config).await {
        Ok(session) => {
            let (version,): (String,) = session
                .query_unpaged("SELECT release_version FROM system.local", ())
                .await
                .expect("query")
                .into_rows_result()
                .expect("rows")
                .single_row()
                .expect("one row");
            Ok(version)
        }
        Err(e @ StoreError::Connect { failure, .. }) => Err((failure, e.to_string())),
        Err(e) => panic!("not a connection error: {e}"),
    }
}

/// A TCP forwarder from 127.0.0.2 (an address the server's certificate does not name) to
/// `target`; returns its address.
async fn forwarder(target: String) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.2:0")
        .await
        .expect("bind 127.0.0.2");
    let address = listener.local_addr().expect("addr").to_string();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            let target = target.clone();
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    address
}

#[tokio::test(flavor = "multi_thread")]
async fn the_store_needs_the_right_credentials_and_certificate_and_says_what_failed() {
    let cql = secure_cql();
    let right = try_connect(&config(
        &cql,
        login("weir-secret"),
        tls("ca.pem", false, true),
    ))
    .await;
    assert!(
        right.as_ref().is_ok_and(|v| v.starts_with("5.")),
        "{right:?}"
    );
    let with_cert = try_connect(&config(
        &cql,
        login("weir-secret"),
        tls("ca.pem", true, true),
    ))
    .await;
    assert!(with_cert.is_ok(), "{with_cert:?}");

    let expect = |what: &str,
                  got: Result<String, (ConnectFailure, String)>,
                  want: ConnectFailure| match got {
        Err((failure, message)) => {
            assert_eq!(failure, want, "{what}: {message}");
            assert!(
                message.contains(&cql) || message.contains("127.0.0.2"),
                "{message}"
            );
            assert!(
                !message.contains("weir-secret") && !message.contains("wrong-secret"),
                "{what} prints a password: {message}"
            );
            message
        }
        Ok(v) => panic!("{what} connected (release {v})"),
    };
    let message = expect(
        "a wrong password",
        try_connect(&config(
            &cql,
            login("wrong-secret"),
            tls("ca.pem", false, true),
        ))
        .await,
        ConnectFailure::Credentials,
    );
    assert!(message.contains("as `weir`"), "{message}");
    expect(
        "no credentials",
        try_connect(&config(&cql, None, tls("ca.pem", false, true))).await,
        ConnectFailure::NoCredentials,
    );
    expect(
        "another CA",
        try_connect(&config(
            &cql,
            login("weir-secret"),
            tls("other-ca.pem", false, true),
        ))
        .await,
        ConnectFailure::Certificate,
    );
    let elsewhere = forwarder(cql.clone()).await;
    expect(
        "an address the certificate does not name",
        try_connect(&config(
            &elsewhere,
            login("weir-secret"),
            tls("ca.pem", false, true),
        ))
        .await,
        ConnectFailure::Hostname,
    );
    // Without hostname verification, the chain is still checked: that address works, and
    // another CA still does not.
    // (Only the control connection goes through the forwarder: the driver then reaches the
    // node at the address it advertises, so the session is built but is not queried here.)
    let unverified = connect(&config(
        &elsewhere,
        login("weir-secret"),
        tls("ca.pem", false, false),
    ))
    .await;
    assert!(unverified.is_ok(), "{:?}", unverified.err());
    expect(
        "another CA without hostname verification",
        try_connect(&config(
            &elsewhere,
            login("weir-secret"),
            tls("other-ca.pem", false, false),
        ))
        .await,
        ConnectFailure::Certificate,
    );
    let plaintext = try_connect(&config(&cql, login("weir-secret"), None)).await;
    assert!(
        matches!(
            plaintext,
            Err((ConnectFailure::TlsMismatch | ConnectFailure::Other, _))
        ),
        "{plaintext:?}"
    );
}

/// A secure deployment: its namespace and keyspace, and the files of its credentials.
struct SecureDeployment {
    namespace: String,
    dir: PathBuf,
}

impl SecureDeployment {
    fn new(prefix: &str) -> Self {
        let namespace = unique_name(prefix);
        let dir = std::env::temp_dir().join("weir-e2e").join(&namespace);
        std::fs::create_dir_all(&dir).expect("dir");
        for (user, password) in [
            ("admin", "admin-secret"),
            ("worker", "worker-secret"),
            ("client", "client-secret"),
            ("intruder", "intruder-secret"),
            ("cql", "weir-secret"),
        ] {
            std::fs::write(
                dir.join(format!("{user}.password")),
                format!("{password}\n"),
            )
            .expect("password file");
        }
        SecureDeployment { namespace, dir }
    }

    /// `weir` as Kafka user `user` with `mechanism`, and as the store's `weir`, all over TLS.
    fn command(&self, user: &str, mechanism: &str) -> Command {
        let mut command = Command::new(weir_binary());
        let ca = tls_dir().join("ca.pem");
        command
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("WEIR_BROKERS", secure_brokers())
            .env("WEIR_KAFKA_SECURITY_PROTOCOL", "sasl-ssl")
            .env("WEIR_KAFKA_SASL_MECHANISM", mechanism)
            .env("WEIR_KAFKA_SASL_USERNAME", user)
            .env(
                "WEIR_KAFKA_SASL_PASSWORD_FILE",
                self.dir.join(format!("{user}.password")),
            )
            .env("WEIR_KAFKA_TLS_CA", &ca)
            .env("WEIR_CQL", secure_cql())
            .env("WEIR_CQL_USERNAME", "weir")
            .env("WEIR_CQL_PASSWORD_FILE", self.dir.join("cql.password"))
            .env("WEIR_CQL_TLS_CA", &ca)
            .env("WEIR_KEYSPACE", &self.namespace)
            .env("WEIR_NAMESPACE", &self.namespace)
            .env("WEIR_TOPOLOGY", repo_root().join("topology"))
            .env(
                "WEIR_COMPONENTS",
                repo_root().join("topology/components.toml"),
            )
            .env(
                "WEIR_COMPONENTS_DIR",
                weir_e2e::deployment::components_dir(),
            )
            .env("WEIR_LOG", "info,weir=debug,scylla=warn");
        command
    }

    fn grant(&self, role: &str, user: &str) {
        let output = Command::new("bash")
            .arg(repo_root().join("docker/local/kafka-acls.sh"))
            .args(["grant", role, &format!("User:{user}"), &self.namespace])
            .output()
            .expect("run kafka-acls.sh");
        assert!(
            output.status.success(),
            "kafka-acls.sh grant {role} {user}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    fn submit(
        &self,
        user: &str,
        mechanism: &str,
        params: &str,
        timeout: &str,
    ) -> std::process::Output {
        self.command(user, mechanism)
            .args([
                "submit",
                "--follow",
                "--timeout",
                timeout,
                "weir-examples:workflows/steps.fibonacci-chain",
                params,
            ])
            .output()
            .expect("run weir submit")
    }
}

#[test]
fn a_worker_and_a_client_run_over_sasl_ssl_with_only_their_documented_acls() {
    let deployment = SecureDeployment::new("sec");
    let apply = deployment
        .command("admin", "scram-sha-512")
        .args(["topology", "apply"])
        .output()
        .expect("topology apply");
    assert!(
        apply.status.success(),
        "topology apply as admin: {}",
        String::from_utf8_lossy(&apply.stderr)
    );
    deployment.grant("worker", "worker");
    deployment.grant("client", "client");

    // No ACL at all: refused, and told why.
    let refused = deployment.submit("intruder", "plain", "[10, 1]", "20");
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr).to_lowercase();
    assert!(stderr.contains("authoriz"), "intruder: {stderr}");

    let log = deployment.dir.join("worker.log");
    let worker = deployment
        .command("worker", "scram-sha-512")
        .args([
            "worker",
            "--metrics-addr",
            "127.0.0.1:0",
            "--inline-activities",
            "off",
        ])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("start the worker");
    let _worker = Killed(worker);
    wait_until("the worker to run", Duration::from_secs(120), || {
        std::fs::read_to_string(&log)
            .ok()
            .filter(|text| text.contains("worker running"))
    });

    // fibonacci(10) three times, each through the compute activity's topic.
    let answered = deployment.submit("client", "plain", "[10, 3]", "120");
    let stdout = String::from_utf8_lossy(&answered.stdout);
    assert!(
        answered.status.success(),
        "client submit: {stdout}{}\nworker log:\n{}",
        String::from_utf8_lossy(&answered.stderr),
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    assert!(stdout.contains("165"), "{stdout}");
    let text = std::fs::read_to_string(&log).expect("log");
    assert!(
        !text.to_lowercase().contains("authorization failed")
            && !text.contains("TOPIC_AUTHORIZATION_FAILED")
            && !text.contains("GROUP_AUTHORIZATION_FAILED"),
        "the worker was refused something:\n{text}"
    );
    for password in ["worker-secret", "weir-secret"] {
        assert!(!text.contains(password), "the worker logged a password");
    }
}

/// Issue 33 F15: the schema registry over HTTPS with HTTP basic authentication, as the Kafka
/// and CQL clients have. The registry (the tests' stand-in, `weir_e2e::registry`) serves the
/// secure stack's server certificate and asks for a login.
///
/// - The client with the stack's CA and the right login registers a schema; with the wrong
///   password it gets the registry's 401 (an answer, not an outage); trusting another CA, or
///   the Mozilla roots, its handshake fails on the certificate (not an outage either); TLS
///   files given for an `http://` URL are an error, not ignored.
/// - `weir worker` with `--schema-registry https://…`, `--schema-registry-tls-ca`,
///   `--schema-registry-username` and `--schema-registry-password-file` registers every
///   schema at start-up and runs a workflow submitted in the Confluent wire format.
#[tokio::test(flavor = "multi_thread")]
async fn the_schema_registry_is_reached_over_tls_with_a_login() {
    use secrecy::SecretString;
    use serde_json::json;
    use weir::codec::{Codec, HttpRegistry, RegistryError, SchemaRegistry};
    use weir::model::ExecutionResult;
    use weir::tls::ClientTls;
    use weir::topology::TopicRole;
    use weir_e2e::deployment::Deployment;
    use weir_e2e::registry::TestRegistry;

    let dir = tls_dir();
    assert!(
        dir.join("server-key.pem").exists(),
        "no secure stack: {} has no server-key.pem (tests/run.sh starts it)",
        dir.display()
    );
    let registry = TestRegistry::start_tls(
        &dir.join("server.pem"),
        &dir.join("server-key.pem"),
        "weir",
        "registry-secret",
    );
    let trusting = |ca: &str| ClientTls {
        ca: Some(dir.join(ca)),
        client: None,
        verify_hostname: true,
    };
    let schema = r#"{"type":"record","name":"Probe","fields":[{"name":"a","type":"int"}]}"#;
    let client = |tls: Option<&ClientTls>, password: &str| {
        HttpRegistry::with_tls(&registry.url, tls)
            .expect("a client")
            .with_basic_auth("weir", SecretString::from(password.to_owned()))
    };

    let id = client(Some(&trusting("ca.pem")), "registry-secret")
        .register("probe-value", schema)
        .await
        .expect("registered over TLS with the login");
    assert_eq!(id, 1);
    match client(Some(&trusting("ca.pem")), "wrong")
        .register("probe-value", schema)
        .await
    {
        Err(e @ RegistryError::Http { status: 401, .. }) => assert!(!e.is_transient(), "{e}"),
        other => panic!("a wrong password: {other:?}"),
    }
    assert_eq!(registry.unauthorized(), 1);
    for (what, tls) in [
        ("another CA", Some(trusting("other-ca.pem"))),
        ("the Mozilla roots", None),
    ] {
        match client(tls.as_ref(), "registry-secret")
            .register("probe-value", schema)
            .await
        {
            Err(e @ RegistryError::Tls { .. }) => {
                assert!(e.to_string().contains("certificate"), "{what}: {e}");
                assert!(!e.is_transient(), "{what}: {e}");
            }
            other => panic!("{what}: {other:?}"),
        }
    }
    let plain = registry.url.replacen("https://", "http://", 1);
    match HttpRegistry::with_tls(&plain, Some(&trusting("ca.pem"))) {
        Err(RegistryError::Setup { message, .. }) => {
            assert!(message.contains("https"), "{message}")
        }
        other => panic!(
            "TLS files for an http:// URL: {:?}",
            other.map(|r| r.base_url().to_owned())
        ),
    }

    let mut deployment = Deployment::new("registry_tls");
    deployment.codec = Codec::new(Some(std::sync::Arc::new(client(
        Some(&trusting("ca.pem")),
        "registry-secret",
    ))));
    let password_file = std::env::temp_dir().join(unique_name("registry-password"));
    std::fs::write(&password_file, "registry-secret\n").expect("password file");
    let ca = dir.join("ca.pem");
    let _worker = deployment.start_worker(
        "w",
        &[
            "--schema-registry",
            &registry.url,
            "--schema-registry-tls-ca",
            ca.to_str().expect("a UTF-8 path"),
            "--schema-registry-username",
            "weir",
            "--schema-registry-password-file",
            password_file.to_str().expect("a UTF-8 path"),
        ],
    );
    // The worker registered every schema at start-up; the submission is written with them.
    let subject = format!("{}-value", deployment.topic(TopicRole::Submissions));
    wait_until(
        "the worker's schemas registered",
        Duration::from_secs(60),
        || registry.subjects().contains_key(&subject).then_some(()),
    );
    // The test's codec learns the ids the worker's registrations got (the same schema text
    // keeps its id), over the same TLS and login.
    deployment
        .codec
        .register_topology(&deployment.topology)
        .await
        .expect("the schemas' ids");
    let producer = deployment.producer();
    let id = deployment
        .submit(
            &producer,
            "weir-examples:workflows/hello.greet",
            json!(["ada"]),
        )
        .await;
    let results = deployment.results(std::slice::from_ref(&id), Duration::from_secs(180));
    assert_eq!(results[&id], ExecutionResult::Ok(json!("hello, ada")));
    assert_eq!(
        registry.unauthorized(),
        1,
        "the worker always sent its login"
    );
}
