//! Shared by the `wasm_*` integration tests: where the example components are, a host over
//! `topology/components.toml`, a tiny HTTP server on 127.0.0.1, small helpers.

#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use weir::model::Ffqn;
use weir::wasm::{ComponentsFile, EngineConfig, WasmHost};

pub const EXAMPLES: [&str; 18] = [
    "order",
    "order-swapped",
    "fanout",
    "sleepy",
    "random-schedule",
    "approval",
    "misbehave",
    "compute",
    "http-get",
    "flaky",
    "stub",
    "steps",
    "hello",
    "checkout",
    "tax-declaration",
    "slow",
    "patience",
    "clock-random",
];

/// `WEIR_EXAMPLES_OUT` or `/var/cache/weir/examples`; fails (never skips) when a component
/// is missing.
pub fn examples_dir() -> PathBuf {
    let dir = std::env::var_os("WEIR_EXAMPLES_OUT")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/weir/examples"));
    for name in EXAMPLES {
        let path = dir.join(format!("{name}.wasm"));
        assert!(
            path.is_file(),
            "example component {} is missing: run `bash examples/build.sh` first \
             (tests/run.sh does it)",
            path.display()
        );
    }
    dir
}

/// The workflow examples built in TypeScript and Python as well (`examples/ts`,
/// `examples/python`), each into `<name>-ts.wasm` and `<name>-py.wasm` beside the Rust build.
pub const INTERPRETED: [&str; 5] = [
    "order",
    "fanout",
    "approval",
    "approval-event",
    "clock-random",
];

/// A host over components.toml with workflow `name` (a Rust example) replaced by the build
/// `file` of the same world (`order-ts.wasm`, …).
pub fn host_with_build(name: &str, file: &str) -> Arc<WasmHost> {
    let dir = examples_dir();
    for lang in ["ts", "py"] {
        for example in INTERPRETED.iter().chain(&["http-get"]) {
            let path = dir.join(format!("{example}-{lang}.wasm"));
            assert!(
                path.is_file(),
                "example component {} is missing: run `bash examples/build.sh` first",
                path.display()
            );
        }
    }
    let from = format!("path = \"{name}.wasm\"");
    let to = format!("path = \"{file}\"");
    Arc::new(
        host_with(|t| {
            assert!(t.contains(&from), "components.toml has no {from}");
            t.replace(&from, &to)
        })
        .unwrap_or_else(|e| panic!("loading the host with {file} failed: {e}")),
    )
}

pub fn components_toml() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../topology/components.toml")
}

/// A small pool; compiled components cached in `WEIR_COMPILED_DIR` (as `weir worker` does) or
/// the default directory.
pub fn engine_config() -> EngineConfig {
    let default = EngineConfig::default();
    EngineConfig {
        cache_dir: std::env::var_os("WEIR_COMPILED_DIR")
            .map(PathBuf::from)
            .or(default.cache_dir.clone()),
        // Tests run in parallel, each with its own pool: keep the reservation small.
        max_instances: 16,
        ..default
    }
}

/// A host over the repository's components.toml.
pub fn host() -> Arc<WasmHost> {
    let dir = examples_dir();
    Arc::new(
        WasmHost::from_file(
            engine_config(),
            &components_toml(),
            &dir,
            &Default::default(),
        )
        .unwrap_or_else(|e| panic!("loading the host failed: {e}")),
    )
}

/// A host over components.toml as edited by `edit` (text replacement on the file).
pub fn host_with(edit: impl FnOnce(String) -> String) -> Result<WasmHost, weir::wasm::HostError> {
    let dir = examples_dir();
    let text = std::fs::read_to_string(components_toml()).unwrap();
    let file = ComponentsFile::parse(&edit(text), &components_toml())?;
    WasmHost::load(engine_config(), file.resolve(&dir)?)
}

/// A host whose `http-get` activity is the build `file` and may reach only `allowed`'s
/// port, with that component's egress counter.
pub fn host_with_http_get_allowed_to(
    file: &str,
    allowed: &TestServer,
) -> (WasmHost, Arc<weir::wasm::egress::Egress>) {
    let port = allowed
        .url("/")
        .trim_start_matches("http://127.0.0.1:")
        .split('/')
        .next()
        .expect("port")
        .to_owned();
    let text = std::fs::read_to_string(components_toml())
        .unwrap()
        .replace("path = \"http-get.wasm\"", &format!("path = \"{file}\""));
    let mut file = ComponentsFile::parse(&text, &components_toml()).unwrap();
    for c in &mut file.components {
        if c.name == "http-get" {
            c.allowed_hosts = vec![format!("http://127.0.0.1:{port}")];
        }
    }
    let specs = file.resolve(&examples_dir()).unwrap();
    let egress = specs
        .iter()
        .find(|s| s.name == "http-get")
        .map(|s| Arc::clone(&s.egress))
        .expect("http-get");
    (WasmHost::load(engine_config(), specs).unwrap(), egress)
}

pub fn t0() -> DateTime<Utc> {
    DateTime::from_timestamp(1_767_225_600, 0).unwrap() // 2026-01-01T00:00:00Z
}

pub fn ffqn(s: &str) -> Ffqn {
    s.parse().unwrap()
}

/// A minimal HTTP/1.1 server: `GET /counter/<name>` answers the number of requests that
/// path has received (this one included); any other path answers `hello from <path>`.
pub struct TestServer {
    pub port: u16,
    pub counts: Arc<Mutex<HashMap<String, u32>>>,
    /// The head (request line and headers) of every request, in order.
    pub requests: Arc<Mutex<Vec<String>>>,
}

impl TestServer {
    pub fn start() -> TestServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let counts = Arc::new(Mutex::new(HashMap::new()));
        let c = counts.clone();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let r = requests.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut buf = Vec::new();
                let mut chunk = [0u8; 1024];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut chunk) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let text = String::from_utf8_lossy(&buf);
                r.lock().unwrap().push(text.to_string());
                let path = text.split_whitespace().nth(1).unwrap_or("/").to_string();
                let body = if path.starts_with("/counter/") {
                    let mut counts = c.lock().unwrap();
                    let n = counts.entry(path.clone()).or_insert(0);
                    *n += 1;
                    n.to_string()
                } else {
                    format!("hello from {path}")
                };
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        TestServer {
            port,
            counts,
            requests,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn count(&self, path: &str) -> u32 {
        self.counts.lock().unwrap().get(path).copied().unwrap_or(0)
    }
}
