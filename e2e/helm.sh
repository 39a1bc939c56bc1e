#!/usr/bin/env bash
# Builds the helm CLI (lint, template and install of deploy/charts in the
# cluster tests) from the upstream helm.sh/helm/v3 Go module through the module
# proxy, like e2e/build.sh builds the Kubernetes binaries and e2e/promtool.sh
# builds promtool. The version comes from the committed e2e/helm/go.mod; the
# binary goes to a cache outside the repo keyed by that version and is reused
# when present.
#
#   e2e/helm.sh          build (or reuse) and print the helm path
#   e2e/helm.sh --print  print the helm path without building
set -euo pipefail

E2E="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${CLAWFED_CACHE:-$HOME/.cache/clawfed}"
modver() { awk -v m="$1" '$1 == m { print $2 }' "$E2E/helm/go.mod"; }
HELM_VERSION="$(modver helm.sh/helm/v3)"
# Bump when the recipe below changes in a way that changes the binary.
RECIPE=1
BIN="$CACHE/helm/helm-${HELM_VERSION}_r${RECIPE}"

# shellcheck source=e2e/gocache.sh
source "$E2E/gocache.sh"
gocache_reuse "${1:-}" "$BIN/helm"

export PATH="$PATH:/usr/local/go/bin"
gocache_start

echo "helm.sh: building helm from helm.sh/helm/v3 $HELM_VERSION" >&2
# The same variables helm's Makefile sets: `helm version` reports the release,
# and the default Kubernetes version helm assumes (lint, template without a
# cluster) follows the client-go it was built with (major + 1 as upstream does).
client_go="$(modver k8s.io/client-go)"
kv="${client_go#v}"; kmajor="$(( ${kv%%.*} + 1 ))"; krest="${kv#*.}"; kminor="${krest%%.*}"
ld="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
ld+=" -X helm.sh/helm/v3/internal/version.metadata= -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
  ld+=" -X $pkg.k8sVersionMajor=$kmajor -X $pkg.k8sVersionMinor=$kminor"
done
(cd "$E2E/helm" && go build -trimpath -ldflags "$ld" -o "$TMP/helm" helm.sh/helm/v3/cmd/helm)

{
  echo "helm=$HELM_VERSION"
  echo "client-go=$client_go"
} > "$TMP/VERSIONS"
gocache_finish
echo "helm.sh: done in $(( $(date +%s) - start ))s" >&2
echo "$BIN/helm"
