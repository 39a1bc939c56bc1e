#!/usr/bin/env bash
# Spoke benchmark: starts exec-b (unless running), runs spoke-bench (1,000
# Harness revisions by default; BENCH_REVISIONS changes it), prints the
# figures, and stops exec-b if it started it. BENCH_BIN runs another
# benchmark of one spoke the same way (e2e/bench/drift-bench.sh).
set -euo pipefail
# Build output outside the repository, shared by every run on this machine.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${CLAWFED_CACHE:-$HOME/.cache/clawfed}/target}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CLUSTER="${BENCH_CLUSTER:-exec-b}"
started=0
if ! "$ROOT/e2e/cluster.sh" status "$CLUSTER" >/dev/null 2>&1; then
  "$ROOT/e2e/cluster.sh" up "$CLUSTER"
  started=1
fi
trap '[[ $started == 1 ]] && "$ROOT/e2e/cluster.sh" down "$CLUSTER"' EXIT
cd "$ROOT"
cargo run --release -q -p clawfed-bench --bin "${BENCH_BIN:-spoke-bench}" -- --cluster "$CLUSTER" --revisions "${BENCH_REVISIONS:-1000}"
