#!/usr/bin/env bash
# Builds promtool (Prometheus rule checks and alert unit tests, used on
# deploy/monitoring) from the upstream Prometheus Go module through the module
# proxy, like e2e/build.sh builds the Kubernetes binaries. The version comes
# from the committed e2e/promtool/go.mod; the binary goes to a cache outside
# the repo keyed by that version and is reused when present.
#
#   e2e/promtool.sh          build (or reuse) and print the promtool path
#   e2e/promtool.sh --print  print the promtool path without building
set -euo pipefail

E2E="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${CLAWFED_CACHE:-$HOME/.cache/clawfed}"
PROM_VERSION="$(awk '$1 == "github.com/prometheus/prometheus" { print $2 }' "$E2E/promtool/go.mod")"
# Bump when the recipe below changes in a way that changes the binary.
RECIPE=1
BIN="$CACHE/promtool/prometheus-${PROM_VERSION}_r${RECIPE}"

# shellcheck source=e2e/gocache.sh
source "$E2E/gocache.sh"
gocache_reuse "${1:-}" "$BIN/promtool"

export PATH="$PATH:/usr/local/go/bin"
gocache_start

echo "promtool.sh: building promtool from github.com/prometheus/prometheus $PROM_VERSION" >&2
# prometheus/common/version is what `promtool --version` prints.
ld="-s -w -X github.com/prometheus/common/version.Version=${PROM_VERSION#v}"
ld+=" -X github.com/prometheus/common/version.Branch=module"
(cd "$E2E/promtool" && go build -trimpath -ldflags "$ld" -o "$TMP/promtool" \
  github.com/prometheus/prometheus/cmd/promtool)

{
  echo "prometheus=$PROM_VERSION"
} > "$TMP/VERSIONS"
gocache_finish
echo "promtool.sh: done in $(( $(date +%s) - start ))s" >&2
echo "$BIN/promtool"
