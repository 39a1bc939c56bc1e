#!/usr/bin/env bash
# Pipeline benchmark (issue 6): starts exec-a and exec-b (and control, for
# the Gateways, unless --gateways off) unless running, runs pipeline-bench
# (release) with the given arguments (defaults: 50 Agents one at a time, 200
# at once, Gateways on), prints the figures, and stops only the clusters it
# started. Exit status is the bench's.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CLUSTERS=(exec-a exec-b)
NEEDED=(control "${CLUSTERS[@]}")
prev=""
for a in "$@"; do
  if [[ "$a" == "--gateways=off" || ( "$prev" == "--gateways" && "$a" == "off" ) ]]; then
    NEEDED=("${CLUSTERS[@]}")
  fi
  prev="$a"
done
started=()
cleanup() {
  if ((${#started[@]})); then
    "$ROOT/e2e/cluster.sh" down "${started[@]}" || true
  fi
}
trap cleanup EXIT
for c in "${NEEDED[@]}"; do
  if ! "$ROOT/e2e/cluster.sh" status "$c" >/dev/null 2>&1; then
    "$ROOT/e2e/cluster.sh" up "$c"
    started+=("$c")
  fi
done
cd "$ROOT"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${CLAWFED_CACHE:-$HOME/.cache/clawfed}/target}"
cargo build --release -q -p clawfed-bench --bin pipeline-bench
"$CARGO_TARGET_DIR/release/pipeline-bench" --clusters "$(IFS=,; echo "${CLUSTERS[*]}")" "$@"
