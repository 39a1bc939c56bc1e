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

if [[ "${1:-}" == "--print" ]]; then echo "$BIN/promtool"; exit 0; fi
if [[ -x "$BIN/promtool" && -f "$BIN/.complete" ]]; then
  echo "$BIN/promtool"
  exit 0
fi

export PATH="$PATH:/usr/local/go/bin"
export CGO_ENABLED=0
export GOFLAGS="-mod=readonly -buildvcs=false"
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
TMP="$BIN.tmp.$$"
rm -rf "$TMP"
mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT
start=$(date +%s)

echo "promtool.sh: building promtool from github.com/prometheus/prometheus $PROM_VERSION" >&2
# prometheus/common/version is what `promtool --version` prints.
ld="-s -w -X github.com/prometheus/common/version.Version=${PROM_VERSION#v}"
ld+=" -X github.com/prometheus/common/version.Branch=module"
(cd "$E2E/promtool" && go build -trimpath -ldflags "$ld" -o "$TMP/promtool" \
  github.com/prometheus/prometheus/cmd/promtool)

{
  echo "prometheus=$PROM_VERSION"
  echo "go=$(go env GOVERSION)"
  echo "build_seconds=$(( $(date +%s) - start ))"
} > "$TMP/VERSIONS"
touch "$TMP/.complete"
mkdir -p "$(dirname "$BIN")"
rm -rf "$BIN"
mv "$TMP" "$BIN"
trap - EXIT
echo "promtool.sh: done in $(( $(date +%s) - start ))s" >&2
echo "$BIN/promtool"
