// Load driver of the Restate peer (tests/benches/peers/restate.sh runs it): the scenarios of
// Weir's step benchmark, against Restate's HTTP ingress, with plain fetch.
//
//   lone        5 x steps.chain(20), one after another: per-step ms = latency / 20, p50
//   throughput  20 and 200 x steps.chain(20) submitted at once: steps/s = 20 * N / wall time,
//               per-invocation latency p50/p99
//   fanout      5 x steps.fanout(100), one at a time: latency p50/p99
//
// Before/after each scenario it reads utime+stime of the restate-server and of the Node
// service processes from /proc/<pid>/stat and reports CPU ms per step (a step = one durable
// call to steps.fib). One JSON object per line on stdout, human-readable lines on stderr.
//
// Environment (or --ingress URL --server-pid PID --service-pid PID):
//   RESTATE_INGRESS      ingress base URL, e.g. http://127.0.0.1:26003
//   RESTATE_SERVER_PID   pid of restate-server
//   RESTATE_SERVICE_PID  pid of the node service (service.mjs)
//   CLK_TCK              clock ticks per second of /proc/<pid>/stat (default 100)

import { readFileSync } from "node:fs";

const CHAIN_N = 30;
const CHAIN_COUNT = 20;
const LONE_RUNS = 5;
const THROUGHPUT_WAVES = [20, 200];
const FANOUT_WIDTH = 100;
const FANOUT_RUNS = 5;
const REQUEST_TIMEOUT_MS = 90_000;

function arg(name) {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

const ingress = (arg("--ingress") ?? process.env.RESTATE_INGRESS ?? "").replace(/\/+$/, "");
const pids = {
  restate_server: Number(arg("--server-pid") ?? process.env.RESTATE_SERVER_PID),
  service: Number(arg("--service-pid") ?? process.env.RESTATE_SERVICE_PID),
};
const clkTck = Number(process.env.CLK_TCK ?? 100);
if (!ingress || !Number.isInteger(pids.restate_server) || !Number.isInteger(pids.service)) {
  console.error("usage: RESTATE_INGRESS=URL RESTATE_SERVER_PID=PID RESTATE_SERVICE_PID=PID node bench.mjs");
  process.exit(2);
}

function fibonacci(n) {
  let a = 0;
  let b = 1;
  for (let i = 0; i < n; i++) [a, b] = [b, a + b];
  return a;
}
const CHAIN_EXPECTED = CHAIN_COUNT * fibonacci(CHAIN_N);
const FANOUT_EXPECTED = Array.from({ length: FANOUT_WIDTH }, (_, i) => fibonacci(i % 30)).reduce((a, b) => a + b, 0);

/** CPU time (ms) of a process, all threads: utime + stime of /proc/<pid>/stat. */
function cpuMs(pid) {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  // Fields after the command name (which may hold spaces), from field 3 ("state") on.
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  const utime = Number(fields[11]);
  const stime = Number(fields[12]);
  return ((utime + stime) * 1000) / clkTck;
}

function cpuSnapshot() {
  return Object.fromEntries(Object.entries(pids).map(([name, pid]) => [name, cpuMs(pid)]));
}

function cpuPerStep(before, after, steps) {
  const out = {};
  let total = 0;
  for (const name of Object.keys(before)) {
    const ms = after[name] - before[name];
    total += ms;
    out[name] = round(ms / steps, 4);
  }
  out.total = round(total / steps, 4);
  return out;
}

function round(x, digits = 3) {
  const f = 10 ** digits;
  return Math.round(x * f) / f;
}

/** Nearest-rank percentile of a list of numbers. */
function percentile(values, p) {
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.max(1, Math.ceil((p / 100) * sorted.length));
  return sorted[rank - 1];
}

async function invoke(handler, payload, expected) {
  const start = performance.now();
  const res = await fetch(`${ingress}/steps/${handler}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(payload),
    signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
  });
  const text = await res.text();
  const ms = performance.now() - start;
  if (!res.ok) throw new Error(`steps/${handler}(${JSON.stringify(payload)}): HTTP ${res.status}: ${text.slice(0, 300)}`);
  const value = JSON.parse(text);
  if (value !== expected) throw new Error(`steps/${handler}(${JSON.stringify(payload)}) = ${text}, expected ${expected}`);
  return ms;
}

const chain = () => invoke("chain", { n: CHAIN_N, count: CHAIN_COUNT }, CHAIN_EXPECTED);
const fanout = () => invoke("fanout", FANOUT_WIDTH, FANOUT_EXPECTED);

function emit(record) {
  process.stdout.write(JSON.stringify({ peer: "restate", ...record }) + "\n");
}

function cpuText(cpu) {
  return `cpu/step ${cpu.total} ms (server ${cpu.restate_server}, service ${cpu.service})`;
}

async function main() {
  // Warm-up: deployment reachable, partitions leading, one of each kind.
  await chain();
  await fanout();
  console.error(`restate: warm-up done (chain = ${CHAIN_EXPECTED}, fanout = ${FANOUT_EXPECTED})`);

  // (a) lone
  {
    const before = cpuSnapshot();
    const latencies = [];
    for (let i = 0; i < LONE_RUNS; i++) latencies.push(await chain());
    const cpu = cpuPerStep(before, cpuSnapshot(), LONE_RUNS * CHAIN_COUNT);
    const perStep = latencies.map((ms) => ms / CHAIN_COUNT);
    const record = {
      scenario: "lone",
      invocations: LONE_RUNS,
      steps_per_invocation: CHAIN_COUNT,
      per_step_ms_p50: round(percentile(perStep, 50)),
      per_step_ms: perStep.map((x) => round(x)),
      latency_ms_p50: round(percentile(latencies, 50)),
      cpu_ms_per_step: cpu,
    };
    emit(record);
    console.error(`restate lone: ${LONE_RUNS} x chain(${CHAIN_COUNT}), per step p50 ${record.per_step_ms_p50} ms, ${cpuText(cpu)}`);
  }

  // (b) throughput
  for (const n of THROUGHPUT_WAVES) {
    const before = cpuSnapshot();
    const start = performance.now();
    const latencies = await Promise.all(Array.from({ length: n }, () => chain()));
    const wallMs = performance.now() - start;
    const steps = n * CHAIN_COUNT;
    const cpu = cpuPerStep(before, cpuSnapshot(), steps);
    const record = {
      scenario: `throughput_${n}`,
      concurrent: n,
      steps_per_invocation: CHAIN_COUNT,
      wall_ms: round(wallMs),
      steps_per_s: round((steps * 1000) / wallMs, 1),
      latency_ms_p50: round(percentile(latencies, 50)),
      latency_ms_p99: round(percentile(latencies, 99)),
      cpu_ms_per_step: cpu,
    };
    emit(record);
    console.error(`restate throughput ${n}: ${record.steps_per_s} steps/s (wall ${record.wall_ms} ms), invocation p50 ${record.latency_ms_p50} ms, ${cpuText(cpu)}`);
  }

  // (c) fan-out
  {
    const before = cpuSnapshot();
    const latencies = [];
    for (let i = 0; i < FANOUT_RUNS; i++) latencies.push(await fanout());
    const cpu = cpuPerStep(before, cpuSnapshot(), FANOUT_RUNS * FANOUT_WIDTH);
    const record = {
      scenario: `fanout_${FANOUT_WIDTH}`,
      invocations: FANOUT_RUNS,
      width: FANOUT_WIDTH,
      latency_ms_p50: round(percentile(latencies, 50)),
      latency_ms_p99: round(percentile(latencies, 99)),
      latency_ms: latencies.map((x) => round(x)),
      cpu_ms_per_step: cpu,
    };
    emit(record);
    console.error(`restate fanout ${FANOUT_WIDTH}: ${FANOUT_RUNS} runs, p50 ${record.latency_ms_p50} ms, p99 ${record.latency_ms_p99} ms, ${cpuText(cpu)}`);
  }
}

main().catch((err) => {
  console.error(`restate bench: ${err.stack ?? err}`);
  process.exit(1);
});
