//! The side-by-side summary of issue 38: one run's figures of Weir through the activity
//! topics, Weir inline and the bare Kafka floor — and, with `WEIR_BENCH_PEERS=restate`, the
//! Restate server on the same machine (`tests/benches/peers/restate.sh`) — printed as ratios,
//! beside the goals. Figures, never assertions.

use std::collections::BTreeMap;
use std::process::Command;

/// A figure of this run, by name.
#[derive(Default)]
pub struct Figures(BTreeMap<&'static str, f64>);

/// Through topics at this many concurrent executions, and inline (the two levels).
pub const LEVELS: [usize; 2] = [20, 200];

impl Figures {
    pub fn set(&mut self, key: &'static str, value: f64) {
        self.0.insert(key, value);
    }

    fn get(&self, key: &str) -> Option<f64> {
        self.0.get(key).copied()
    }
}

/// `throughput.<how>.<level>`: the key of a throughput figure (steps/s).
pub fn throughput_key(how: &str, level: usize) -> &'static str {
    match (how, level) {
        ("inline", 20) => "throughput.inline.20",
        ("inline", 200) => "throughput.inline.200",
        ("topics", 20) => "throughput.topics.20",
        ("topics", 200) => "throughput.topics.200",
        _ => "throughput.other",
    }
}

/// A peer's figures, from its script's JSON lines: `<scenario>.<field>` → number.
pub struct Peer {
    pub name: String,
    figures: BTreeMap<String, f64>,
}

/// The peers `WEIR_BENCH_PEERS` names (`restate`), each run once by its script.
pub fn peers_from_env(root: &std::path::Path) -> Vec<Peer> {
    let Ok(list) = std::env::var("WEIR_BENCH_PEERS") else {
        return Vec::new();
    };
    list.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .filter_map(|name| {
            let script = root.join(format!("tests/benches/peers/{name}.sh"));
            eprintln!("running the peer {name}: {}", script.display());
            let output = Command::new("bash").arg(&script).output();
            match output {
                Ok(out) if out.status.success() => Some(Peer {
                    name: name.to_owned(),
                    figures: parse_peer(&String::from_utf8_lossy(&out.stdout)),
                }),
                Ok(out) => {
                    eprintln!(
                        "peer {name} failed ({}): {}",
                        out.status,
                        String::from_utf8_lossy(&out.stderr)
                    );
                    None
                }
                Err(e) => {
                    eprintln!("peer {name}: cannot run {}: {e}", script.display());
                    None
                }
            }
        })
        .collect()
}

/// Every numeric field of every JSON line, as `<scenario>.<field>` (nested objects joined by
/// dots).
fn parse_peer(stdout: &str) -> BTreeMap<String, f64> {
    fn flatten(prefix: &str, value: &serde_json::Value, out: &mut BTreeMap<String, f64>) {
        match value {
            serde_json::Value::Number(n) => {
                if let Some(f) = n.as_f64() {
                    out.insert(prefix.to_owned(), f);
                }
            }
            serde_json::Value::Object(map) => {
                for (k, v) in map {
                    flatten(&format!("{prefix}.{k}"), v, out);
                }
            }
            _ => {}
        }
    }
    let mut out = BTreeMap::new();
    for line in stdout.lines() {
        let Ok(value) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let scenario = value["scenario"].as_str().unwrap_or("?").to_owned();
        flatten(&scenario, &value, &mut out);
    }
    out
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}x", a / b),
        _ => "n/a".to_owned(),
    }
}

fn ms(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".to_owned(), |v| format!("{v:.2} ms"))
}

fn rate(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".to_owned(), |v| format!("{v:.0}/s"))
}

/// Prints the summary: one line per comparison.
pub fn print(figures: &Figures, peers: &[Peer]) {
    let f = |k: &str| figures.get(k);
    println!();
    println!("side by side (issue 38; every figure from this run):");
    let round = f("floor.txn-txn.round");
    let round_idem = f("floor.txn-idem.round");
    println!(
        "  Kafka floor, a round of two hops: both transactional {}; a transaction + an idempotent answer {} ({} of the former)",
        ms(round),
        ms(round_idem),
        ratio(round_idem, round)
    );
    let (topics, inline) = (f("lone.topics.step"), f("lone.inline.step"));
    println!(
        "  lone step: through topics {} ({} CPU, stack included, net of the observer), {} the idempotent round, {} the two-transaction round; inline {} (topics = {} inline); goal <= 8 ms and <= 8 ms CPU",
        ms(topics),
        ms(f("lone.topics.cpu")),
        ratio(topics, round_idem),
        ratio(topics, round),
        ms(inline),
        ratio(topics, inline)
    );
    for level in LEVELS {
        let t = f(throughput_key("topics", level));
        let i = f(throughput_key("inline", level));
        let goal = if level == 20 { 1_000 } else { 2_500 };
        println!(
            "  {level} concurrent 20-step: through topics {}, inline {} (topics = {} inline); goal through topics >= {goal}/s",
            rate(t),
            rate(i),
            ratio(t, i)
        );
    }
    let (fan_t, fan_i) = (f("fanout.topics"), f("fanout.inline"));
    println!(
        "  100-way fan-out, submit -> result p50: through topics {}, inline {}; goal through topics <= 50 ms",
        ms(fan_t),
        ms(fan_i)
    );
    for peer in peers {
        let p = |k: &str| peer.figures.get(k).copied();
        let lone = p("lone.per_step_ms_p50");
        let lone_cpu = p("lone.cpu_ms_per_step.total");
        println!(
            "    lone step: {} {} ({} CPU); Weir through topics = {} of it ({} of its CPU), inline = {}",
            peer.name,
            ms(lone),
            ms(lone_cpu),
            ratio(topics, lone),
            ratio(f("lone.topics.cpu"), lone_cpu),
            ratio(inline, lone)
        );
        for level in LEVELS {
            let theirs = p(&format!("throughput_{level}.steps_per_s"));
            println!(
                "    {level} concurrent: {} {}; Weir through topics = {} of it, inline = {}",
                peer.name,
                rate(theirs),
                ratio(f(throughput_key("topics", level)), theirs),
                ratio(f(throughput_key("inline", level)), theirs)
            );
        }
        let fan = p("fanout_100.latency_ms_p50");
        println!(
            "    100-way fan-out: {} {}; Weir through topics = {} of it, inline = {}",
            peer.name,
            ms(fan),
            ratio(fan_t, fan),
            ratio(fan_i, fan)
        );
    }
}
