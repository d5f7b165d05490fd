//! The dashboard and the alerts of `docker/monitoring/` (issue 37 item 7) name only metrics a
//! worker exports: every metric name in every PromQL expression of `alerts.yml` and of
//! `grafana/weir-dashboard.json` must be in the `/metrics` of a real `weir worker` on the test
//! stack, or the test fails listing the missing ones. A renamed or removed metric thus breaks
//! this test rather than an operator's dashboard (a panel with no data) or alert (an
//! expression that silently never fires).
//!
//! Names are read from PromQL textually: every identifier that starts with `weir_`, outside
//! quoted strings (label values). A name ending in `_sum`, `_count` or `_bucket` whose base is
//! a summary or histogram of the worker's output stands for that base's family. A family is
//! exported when the output declares it (`# TYPE`) and has a sample of it.
//!
//! The rules are also checked for what an operator needs of them: the five subjects of the
//! issue (a stuck partition, growing consumer lag, the DLQ rate, store retries, deferred
//! starts) each have an alert, and every alert has a `for:`, a severity, a summary, and a
//! description and a runbook that point to a section of `docs/operating.md` that exists.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value as Json;
use serde_yaml::Value as Yaml;
use weir_e2e::deployment::{Deployment, WorkerProcess};
use weir_e2e::{repo_root, wait_until};

/// How long a fresh worker may take to join its groups, own its partitions and sample them.
const STARTUP: Duration = Duration::from_secs(120);

/// Each subject the alerts must cover, and what the name of its alert contains.
const SUBJECTS: [(&str, &str); 5] = [
    ("a stuck partition", "PartitionStuck"),
    ("growing consumer lag", "ConsumerLag"),
    ("the DLQ rate", "DeadLetter"),
    ("store retries", "StoreRetries"),
    ("deferred starts", "DeferredStarts"),
];

fn monitoring() -> PathBuf {
    repo_root().join("docker/monitoring")
}

/// One alerting rule of `alerts.yml`, as far as this test reads it.
#[derive(Debug)]
struct Rule {
    alert: String,
    expr: String,
    duration: Option<String>,
    severity: Option<String>,
    summary: Option<String>,
    description: Option<String>,
    runbook: Option<String>,
}

fn alert_rules() -> Vec<Rule> {
    let path = monitoring().join("alerts.yml");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let rules: Yaml = serde_yaml::from_str(&text)
        .unwrap_or_else(|e| panic!("{} is no YAML: {e}", path.display()));
    let string = |value: &Yaml, key: &str| value.get(key).and_then(Yaml::as_str).map(str::to_owned);
    rules["groups"]
        .as_sequence()
        .expect("alerts.yml has `groups`")
        .iter()
        .flat_map(|group| {
            group["rules"]
                .as_sequence()
                .expect("every group has `rules`")
                .iter()
        })
        .map(|rule| Rule {
            alert: string(rule, "alert").expect("every rule is an alerting rule (`alert:`)"),
            expr: string(rule, "expr").expect("every rule has an `expr`"),
            duration: string(rule, "for"),
            severity: string(&rule["labels"], "severity"),
            summary: string(&rule["annotations"], "summary"),
            description: string(&rule["annotations"], "description"),
            runbook: string(&rule["annotations"], "runbook"),
        })
        .collect()
}

/// Every PromQL query of the dashboard: its panels' targets (rows' nested panels too) and its
/// query variables.
fn dashboard_queries() -> Vec<String> {
    let path = monitoring().join("grafana/weir-dashboard.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let dashboard: Json = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{} is no JSON: {e}", path.display()));
    fn collect(value: &Json, out: &mut Vec<String>) {
        match value {
            Json::Object(fields) => {
                for (key, field) in fields {
                    match (key.as_str(), field) {
                        ("expr" | "query" | "definition", Json::String(query)) => {
                            out.push(query.clone())
                        }
                        _ => collect(field, out),
                    }
                }
            }
            Json::Array(items) => items.iter().for_each(|item| collect(item, out)),
            _ => {}
        }
    }
    let mut queries = Vec::new();
    collect(&dashboard, &mut queries);
    queries
}

/// The metric names (`weir_…`) in a PromQL expression: identifiers outside quoted strings.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut chars = expr.char_indices().peekable();
    while let Some((start, c)) = chars.next() {
        match c {
            '"' | '\'' | '`' => {
                // A string (a label value, a regex): skip to its closing quote.
                let mut escaped = false;
                for (_, next) in chars.by_ref() {
                    match next {
                        _ if escaped => escaped = false,
                        '\\' if c != '`' => escaped = true,
                        _ if next == c => break,
                        _ => {}
                    }
                }
            }
            c if c.is_ascii_alphabetic() || c == '_' || c == ':' => {
                let mut end = start + c.len_utf8();
                while let Some(&(at, next)) = chars.peek() {
                    if next.is_ascii_alphanumeric() || next == '_' || next == ':' {
                        end = at + next.len_utf8();
                        chars.next();
                    } else {
                        break;
                    }
                }
                let word = &expr[start..end];
                if word.starts_with("weir_") {
                    names.insert(word.to_owned());
                }
            }
            _ => {}
        }
    }
    names
}

/// What a worker's `/metrics` says: each family's type, and the names of its samples.
struct Exposition {
    types: BTreeMap<String, String>,
    samples: BTreeSet<String>,
}

impl Exposition {
    fn parse(text: &str) -> Self {
        let mut types = BTreeMap::new();
        let mut samples = BTreeSet::new();
        for line in text.lines() {
            if let Some(declared) = line.strip_prefix("# TYPE ") {
                let mut words = declared.split_whitespace();
                if let (Some(name), Some(kind)) = (words.next(), words.next()) {
                    types.insert(name.to_owned(), kind.to_owned());
                }
            } else if !line.starts_with('#') && !line.trim().is_empty() {
                let name = line.split(['{', ' ']).next().unwrap_or_default();
                samples.insert(name.to_owned());
            }
        }
        Exposition { types, samples }
    }

    /// The family `name` belongs to: its base when it is a summary's or histogram's `_sum`,
    /// `_count` or `_bucket`, else itself.
    fn family<'a>(&self, name: &'a str) -> &'a str {
        ["_sum", "_count", "_bucket"]
            .iter()
            .find_map(|suffix| {
                let base = name.strip_suffix(suffix)?;
                matches!(
                    self.types.get(base).map(String::as_str),
                    Some("summary" | "histogram")
                )
                .then_some(base)
            })
            .unwrap_or(name)
    }

    /// Whether `name` is exported: its family is declared and has a sample of that name.
    fn exports(&self, name: &str) -> bool {
        self.types.contains_key(self.family(name)) && self.samples.contains(name)
    }
}

/// The worker's `/metrics` as served (with its `# HELP` and `# TYPE` lines).
fn scrape(worker: &WorkerProcess) -> Option<String> {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", worker.metrics_port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    stream.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_owned())
}

/// The anchors GitHub gives the headings of a Markdown file.
fn anchors(markdown: &str) -> BTreeSet<String> {
    markdown
        .lines()
        .filter_map(|line| {
            let title = line.trim_start_matches('#');
            (line.starts_with('#') && title.starts_with(' ')).then_some(title.trim())
        })
        .map(|title| {
            title
                .to_lowercase()
                .chars()
                .filter_map(|c| match c {
                    ' ' => Some('-'),
                    c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                    _ => None,
                })
                .collect()
        })
        .collect()
}

#[test]
fn metric_names_are_read_from_promql_outside_strings() {
    let names = metric_names(
        r#"sum by (worker) (rate(weir_batch_seconds_sum{job="weir_not_a_metric", instance=~"$instance"}[5m])) / ignoring(le) weir_up:ratio > 0 and on() weir_x"#,
    );
    assert_eq!(
        names,
        BTreeSet::from([
            "weir_batch_seconds_sum".to_owned(),
            "weir_up:ratio".to_owned(),
            "weir_x".to_owned()
        ])
    );
    let exposition = Exposition::parse(
        "# TYPE weir_batch_seconds summary\nweir_batch_seconds_sum{worker=\"a\"} 0\nweir_batch_seconds_count{worker=\"a\"} 0\n# TYPE weir_other_total counter\nweir_other_total 1\n# TYPE weir_declared_only gauge\n",
    );
    assert_eq!(
        exposition.family("weir_batch_seconds_count"),
        "weir_batch_seconds"
    );
    assert_eq!(exposition.family("weir_other_total"), "weir_other_total");
    assert!(exposition.exports("weir_batch_seconds_sum"));
    assert!(exposition.exports("weir_other_total"));
    assert!(
        !exposition.exports("weir_batch_seconds_bucket"),
        "no such sample"
    );
    assert!(
        !exposition.exports("weir_declared_only"),
        "declared, no sample"
    );
    assert!(!exposition.exports("weir_nothing"));
}

#[test]
fn the_alerts_cover_the_five_subjects_and_each_says_what_to_look_at() {
    let rules = alert_rules();
    let names: Vec<&str> = rules.iter().map(|r| r.alert.as_str()).collect();
    let uncovered: Vec<&str> = SUBJECTS
        .iter()
        .filter(|(_, part)| !names.iter().any(|name| name.contains(part)))
        .map(|(subject, _)| *subject)
        .collect();
    assert!(
        uncovered.is_empty(),
        "no alert for {uncovered:?} among {names:?}"
    );
    let operating = std::fs::read_to_string(repo_root().join("docs/operating.md"))
        .expect("read docs/operating.md");
    let sections = anchors(&operating);
    let mut problems = Vec::new();
    for rule in &rules {
        let alert = &rule.alert;
        if rule.duration.is_none() {
            problems.push(format!("{alert}: no `for:`"));
        }
        if !matches!(rule.severity.as_deref(), Some("critical" | "warning")) {
            problems.push(format!("{alert}: severity {:?}", rule.severity));
        }
        if rule.summary.as_deref().is_none_or(str::is_empty) {
            problems.push(format!("{alert}: no summary"));
        }
        if !rule
            .description
            .as_deref()
            .is_some_and(|d| d.contains("docs/operating.md"))
        {
            problems.push(format!(
                "{alert}: the description names no docs/operating.md"
            ));
        }
        match rule
            .runbook
            .as_deref()
            .and_then(|r| r.strip_prefix("docs/operating.md#"))
        {
            Some(anchor) if sections.contains(anchor) => {}
            other => problems.push(format!(
                "{alert}: runbook {other:?} is no section of docs/operating.md"
            )),
        }
        if metric_names(&rule.expr).is_empty() && !rule.expr.contains("up{") {
            problems.push(format!("{alert}: its expression names no metric"));
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn every_metric_the_dashboard_and_the_alerts_name_is_exported_by_a_running_worker() {
    let mut named: BTreeMap<String, BTreeSet<&str>> = BTreeMap::new();
    let rules = alert_rules();
    for rule in &rules {
        for name in metric_names(&rule.expr) {
            named.entry(name).or_default().insert("alerts.yml");
        }
    }
    for query in dashboard_queries() {
        for name in metric_names(&query) {
            named.entry(name).or_default().insert("weir-dashboard.json");
        }
    }
    assert!(
        named.len() >= 20,
        "the dashboard and the alerts name only {} metrics: {:?}",
        named.len(),
        named.keys()
    );

    let deployment = Deployment::new("dashboards");
    let worker = deployment.start_worker("w", &[]);
    // The per-partition series exist once the worker owns partitions and has sampled them;
    // every other family is rendered from the start.
    let text = wait_until(
        "the worker to own and sample its partitions",
        STARTUP,
        || {
            let text = scrape(&worker)?;
            let owned = text
                .lines()
                .find_map(|l| l.strip_prefix("weir_partitions_owned "))
                .and_then(|v| v.trim().parse::<f64>().ok())?;
            (owned > 0.0 && text.contains("weir_consumer_lag{worker=\"workflow\"")).then_some(text)
        },
    );
    let exposition = Exposition::parse(&text);
    let missing: Vec<String> = named
        .iter()
        .filter(|(name, _)| !exposition.exports(name))
        .map(|(name, files)| {
            format!(
                "{name} (in {})",
                Vec::from_iter(files.iter().copied()).join(", ")
            )
        })
        .collect();
    assert!(
        missing.is_empty(),
        "{} metrics named by docker/monitoring/ are not in the worker's /metrics:\n  {}\n(the worker exports {:?})",
        missing.len(),
        missing.join("\n  "),
        exposition.types.keys()
    );
    println!(
        "{} metrics named by {} alerts and the dashboard, all exported",
        named.len(),
        rules.len()
    );
}
