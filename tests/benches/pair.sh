#!/usr/bin/env bash
# Interleaved before/after runs of the stack bench (docs/benchmarks.md): pairs FIRST..LAST,
# the odd pairs after first, so that neither side always runs on a warmer stack.
#
#   bash tests/benches/pair.sh PAIR_DIR FIRST LAST
#
# PAIR_DIR/before and PAIR_DIR/after each hold `stack` (the bench executable,
# target/release/deps/stack-*) and `weir` (that side's target/release/weir, which the bench
# starts from beside itself). Each run's output goes to PAIR_DIR/run-<pair>-<side>.log, and
# PAIR_DIR/runs.log records the order, the load average at each start and the exit codes.
# Start the bench stack first (docs/benchmarks.md names its ports) and build the examples.
set -euo pipefail
dir=${1:?pair directory}; first=${2:?first pair}; last=${3:?last pair}
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/.."
eval "$(bash ../docker/local/stack.sh env)"
for i in $(seq "$first" "$last"); do
  if (( i % 2 == 1 )); then order="after before"; else order="before after"; fi
  for side in $order; do
    echo "== pair $i $side load $(cut -d' ' -f1 /proc/loadavg)" >> "$dir/runs.log"
    rc=0
    "$dir/$side/stack" --bench > "$dir/run-$i-$side.log" 2>&1 || rc=$?
    echo "rc $rc" >> "$dir/runs.log"
  done
done
