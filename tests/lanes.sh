#!/usr/bin/env bash
# Runs the test binaries of the workspace but weir-core in parallel lanes (called by
# tests/run.sh, after the build; not a command of its own):
#   bash tests/lanes.sh OUTPUT
# Most end-to-end binaries wait on the stack, not on the CPU: one after the other they took
# 12 minutes of a 15-minute run. Each binary runs whole as `cargo test` would run it (its own
# tests in parallel threads, in its package's directory), its output kept in a file of its own;
# the files are appended to OUTPUT (the `cargo test` format tests/run.sh's table of times
# reads) as the binaries end. Binaries start longest first by the times of the last run
# ($WEIR_CACHE/test-times.tsv), so that the longest does not start last.
#
# Isolation: every test takes its own topic namespace, consumer group and keyspace
# (`weir_e2e::unique_name`), so binaries share the stack as the tests of one binary do. The
# binaries listed in EXCLUSIVE stop a part of the stack (broker_restart kills the broker): they
# run alone, after the lanes.
#
# Environment: WEIR_TEST_LANES (default 3), CARGO_TARGET_DIR, WEIR_CACHE (from install.sh).
# Exit code: 0 when every binary passed, else 1 (every binary runs even when one fails).
set -uo pipefail
output="$1"
lanes="${WEIR_TEST_LANES:-3}"
EXCLUSIVE=" broker_restart "
times="$WEIR_CACHE/test-times.tsv"
work="$(mktemp -d "${TMPDIR:-/tmp}/weir-lanes.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# The test executables (built already: this only lists them), with their package directory:
# "name<TAB>executable<TAB>directory" per line; a unit-test binary is named after its crate.
cargo test --workspace --exclude weir-core --locked --no-run --message-format=json 2>/dev/null |
  jq -r 'select(.reason == "compiler-artifact" and .profile.test and .executable != null)
         | [(if (.target.kind | index("lib")) then "lib-" + .target.name else .target.name end),
            .executable, (.manifest_path | sub("/Cargo.toml$"; ""))] | @tsv' >"$work/binaries"
[ -s "$work/binaries" ] || { echo "tests/lanes.sh: no test binaries listed" >&2; exit 1; }

# Longest first by the last run's times (unknown ones first of all: they may be long).
awk -F'\t' -v times="$times" '
  BEGIN { while ((getline line < times) > 0) { split(line, f, "\t"); t[f[1]] = f[2] } }
  { print (($1 in t) ? t[$1] : 1e9) "\t" $0 }' "$work/binaries" |
  sort -t$'\t' -k1,1 -rn | cut -f2- >"$work/ordered"

# One binary: its output (headed like cargo's) in $work/<name>.log, its seconds and outcome in
# $work/<name>.done, a line on stdout when it ends.
run_one() {
  local name="$1" executable="$2" directory="$3" started rc
  started=$(date +%s.%N)
  {
    echo "     Running $name ($executable)"
    (cd "$directory" && "$executable") 2>&1
  } >"$work/$name.log"
  rc=$?
  awk -v n="$name" -v s="$started" -v e="$(date +%s.%N)" -v rc="$rc" \
    'BEGIN { printf "%s\t%.1f\t%s\n", n, e - s, rc }' >"$work/$name.done"
  echo "[lanes $(date +%H:%M:%S)] $( [ "$rc" = 0 ] && echo ok || echo FAILED) $name ($(cut -f2 "$work/$name.done") s)"
}
export -f run_one
export work output

awk -F'\t' -v ex="$EXCLUSIVE" 'index(ex, " " $1 " ") == 0' "$work/ordered" >"$work/shared"
awk -F'\t' -v ex="$EXCLUSIVE" 'index(ex, " " $1 " ") != 0' "$work/ordered" >"$work/alone"

# The doc-tests are one more job of the first lane.
(
  echo "   Doc-tests (workspace but weir-core)"
  cargo test --workspace --exclude weir-core --locked --doc 2>&1
) >"$work/doc-tests.log" &
doc_pid=$!

tr '\t' '\n' <"$work/shared" | xargs -r -d '\n' -n 3 -P "$lanes" bash -c 'run_one "$@"' _
while IFS=$'\t' read -r name executable directory; do
  run_one "$name" "$executable" "$directory"
done <"$work/alone"

doc_rc=0
wait "$doc_pid" || doc_rc=$?
# The outputs, whole, in the order the binaries started.
cut -f1 "$work/shared" "$work/alone" | while read -r name; do cat "$work/$name.log"; done >>"$output"
cat "$work/doc-tests.log" >>"$output"

# Every binary listed must have run (and said how it went).
listed=$(wc -l <"$work/binaries")
ran=$(find "$work" -name '*.done' | wc -l)
if [ "$ran" != "$listed" ]; then
  echo "tests/lanes.sh: $listed test binaries listed, $ran ran" >&2
  exit 1
fi

# The times for the next run's order; failed binaries are named.
cat "$work"/*.done >"$times.new" && mv "$times.new" "$times"
failed=$(awk -F'\t' '$3 != 0 { printf "%s ", $1 }' "$work"/*.done)
for name in $failed; do
  echo "---------------- output of the failed $name" >&2
  cat "$work/$name.log" >&2
done
[ "$doc_rc" = 0 ] || failed="$failed doc-tests"
if [ -n "$failed" ]; then
  echo "tests/lanes.sh: failed: $failed" >&2
  exit 1
fi
