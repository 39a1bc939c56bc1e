#!/usr/bin/env bash
# Builds the real Kubernetes control plane used by clawfed's cluster tests from
# upstream Go modules (no release downloads): kube-apiserver,
# kube-controller-manager, kube-scheduler, kubectl (e2e/k8s), etcd (e2e/etcd)
# and kwok (e2e/kwok), plus the Gateway API standard-channel CRDs read from the
# sigs.k8s.io/gateway-api module. Output goes to a cache directory outside the
# repo, keyed by versions, and is skipped when already present.
#
#   e2e/build.sh          build (or reuse) and print the bin directory
#   e2e/build.sh --print  print the bin directory without building
set -euo pipefail

E2E="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${CLAWFED_CACHE:-$HOME/.cache/clawfed}"
GATEWAY_API_VERSION="${GATEWAY_API_VERSION:-v1.7.0}"
GATEWAY_API_GO="${GATEWAY_API_GO:-go1.27.4}"

# Versions come from the committed go.mod files, so the key follows them.
modver() { # dir module
  awk -v m="$2" '$1 == m || ($1 == "require" && $2 == m) { v = ($1 == "require") ? $3 : $2 } END { print v }' "$E2E/$1/go.mod"
}
K8S_VERSION="$(modver k8s k8s.io/kubernetes)"
ETCD_VERSION="$(modver etcd go.etcd.io/etcd/server/v3)"
KWOK_VERSION="$(modver kwok sigs.k8s.io/kwok)"
# Bump when the recipe below changes in a way that changes the binaries.
RECIPE=1
KEY="k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}_gwapi-${GATEWAY_API_VERSION}_r${RECIPE}"
BIN="$CACHE/k8s-bin/$KEY"

# shellcheck source=e2e/gocache.sh
source "$E2E/gocache.sh"
gocache_reuse "${1:-}" "$BIN"

gocache_start
mkdir -p "$TMP/crds"
log() { echo "build.sh: $*" >&2; }

# Kubernetes: set the same version variables hack/lib/version.sh sets, so
# `--version` and /version report the real release.
ver="${K8S_VERSION#v}"
major="${ver%%.*}"; rest="${ver#*.}"; minor="${rest%%.*}"
build_date="$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"Time": *"\([^"]*\)".*/\1/p')"
ld="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ld+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
  ld+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$build_date"
done
log "building Kubernetes $K8S_VERSION (kube-apiserver, kube-controller-manager, kube-scheduler, kubectl)"
(cd "$E2E/k8s" && go build -trimpath -ldflags "$ld" -o "$TMP/" \
  k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler \
  k8s.io/kubernetes/cmd/kubectl)

log "building etcd $ETCD_VERSION"
(cd "$E2E/etcd" && go build -trimpath \
  -ldflags "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=$ETCD_VERSION" -o "$TMP/etcd" .)

log "building kwok $KWOK_VERSION"
(cd "$E2E/kwok" && go build -trimpath \
  -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION#v}" -o "$TMP/kwok" sigs.k8s.io/kwok/cmd/kwok)

# The kwok binary runs no stages unless given some; use the same defaults
# kwokctl uses (node-initialize, node-heartbeat-with-lease, pod-ready,
# pod-complete, pod-delete), read from the kwok module in the cache.
log "assembling kwok default stages"
kwokdir="$(cd "$E2E/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)"
for f in node/fast/node-initialize node/heartbeat-with-lease/node-heartbeat-with-lease \
         pod/fast/pod-ready pod/fast/pod-complete pod/fast/pod-delete; do
  echo "---"
  cat "$kwokdir/kustomize/stage/$f.yaml"
done > "$TMP/kwok-stages.yaml"

log "copying Gateway API $GATEWAY_API_VERSION standard CRDs from the module cache"
# gateway-api v1.7's go.mod says go >= 1.27; only its YAML is read, but the go
# command still checks the directive, so fetch that toolchain (a module on the
# Go proxy) just for this download.
gw="$(GOTOOLCHAIN="$GATEWAY_API_GO" go mod download -json "sigs.k8s.io/gateway-api@$GATEWAY_API_VERSION" | sed -n 's/.*"Dir": *"\([^"]*\)".*/\1/p')"
for k in gatewayclasses gateways httproutes; do
  cp "$gw/config/crd/standard/gateway.networking.k8s.io_$k.yaml" "$TMP/crds/"
done

{
  echo "kubernetes=$K8S_VERSION"
  echo "etcd=$ETCD_VERSION"
  echo "kwok=$KWOK_VERSION"
  echo "gateway-api=$GATEWAY_API_VERSION"
} > "$TMP/VERSIONS"
gocache_finish
log "done in $(( $(date +%s) - start ))s"
echo "$BIN"
