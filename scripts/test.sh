#!/usr/bin/env bash
# The whole test suite, on a fresh machine of this kind or a warm one:
#   1. PostgreSQL from Debian packages (installed when missing), started,
#      with a test role and database (scripts/postgres.sh);
#   2. the real Kubernetes control planes built from upstream Go modules
#      (e2e/build.sh, cached outside the repo) and started as the `control`,
#      `exec-a`, `exec-b` and the air-gapped `exec-air` clusters (e2e/cluster.sh), each with its pod
#      runner in the Pod network of e2e/podnet.sh (root, iproute2);
#   3. promtool (built from the Prometheus Go module, e2e/promtool.sh) checks
#      deploy/monitoring/alerts.yaml and runs its alert unit tests;
#   4. helm (built once from the helm.sh/helm/v3 Go module, e2e/helm.sh),
#      its path in CLAWFED_HELM for the chart tests (tests/tests/helm_charts.rs);
#   5. every Rust test in the workspace (unit, store conformance on SQLite
#      and PostgreSQL, API, worker, CLI, cluster tests);
#   6. the clusters this script started are stopped again, pass or fail.
# Exits non-zero on the first failure. Extra arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# Build output outside the repository, shared by every run on this machine.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${CLAWFED_CACHE:-$HOME/.cache/clawfed}/target}"

log() { printf '\n== %s\n' "$*" >&2; }

need() { # command package
  command -v "$1" >/dev/null 2>&1 && return
  log "installing $2"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq "$2"
}
need openssl openssl
need curl curl
need ip iproute2   # the Pod network (e2e/podnet.sh) and the partition test's namespaces
need chromium chromium            # the web fleet view's browser test (headless)
need chromedriver chromium-driver # ... driven over WebDriver
need tinyproxy tinyproxy          # the spoke's HTTP CONNECT proxy test (tests/tests/link_proxy.rs)
need buildah buildah              # the image build test (tests/tests/images.rs, deploy/images/build.sh)
need faketime faketime            # a hub replica whose clock runs ahead (tests/tests/link_process.rs)

log "PostgreSQL"
eval "$(scripts/postgres.sh env)"
export CLAWFED_TEST_DATABASE_URL

log "Kubernetes control planes (build once, cached by version)"
start=$(date +%s)
e2e/build.sh >/dev/null
log "control planes built or reused in $(( $(date +%s) - start )) s"

log "Prometheus rules: promtool (built once from the Prometheus Go module, cached by version)"
start=$(date +%s)
PROMTOOL="$(e2e/promtool.sh)"
log "promtool built or reused in $(( $(date +%s) - start )) s"
"$PROMTOOL" check rules deploy/monitoring/alerts.yaml
# Rule files in the test file are relative to it.
(cd deploy/monitoring && "$PROMTOOL" test rules alerts.test.yaml)

log "Helm: helm (built once from the helm.sh/helm/v3 Go module, cached by version)"
start=$(date +%s)
CLAWFED_HELM="$(e2e/helm.sh)"
export CLAWFED_HELM
log "helm built or reused in $(( $(date +%s) - start )) s"

CLUSTERS=(control exec-a exec-b exec-air)
started=()
cleanup() {
  if [ ${#started[@]} -gt 0 ]; then
    log "stopping clusters ${started[*]}"
    e2e/cluster.sh down "${started[@]}" || true
  fi
}
trap cleanup EXIT
for c in "${CLUSTERS[@]}"; do
  if ! e2e/cluster.sh status "$c" >/dev/null 2>&1; then
    started+=("$c")
  fi
done
if [ ${#started[@]} -gt 0 ]; then
  log "starting clusters ${started[*]}"
  e2e/cluster.sh up "${started[@]}"
fi

log "cargo build (the binaries the process tests run: cargo test builds a
package's binaries only for that package's own integration tests)"
cargo build --workspace --bins --locked

log "cargo test"
# The clusters are up: cluster tests must not skip (kube_env::cluster_or_skip).
export CLAWFED_REQUIRE_CLUSTERS=1
# --no-fail-fast: every failing test binary is reported in one run; the
# exit status is still non-zero when any failed.
cargo test --workspace --all-targets --locked --no-fail-fast "$@"
