#!/usr/bin/env bash
# Figures for the Kubernetes test environment (e2e/cluster.sh), on a cluster
# of its own (default exec-b; BENCH_CLUSTER=NAME to change), which it starts
# and, at the end, stops:
#   - cluster start time (e2e/cluster.sh up, binaries already built)
#   - RSS of the cluster's processes (sum of VmRSS), idle and after the run
#   - time for a 1000-replica Deployment to have 1000 Ready Pods via
#     kube-controller-manager, kube-scheduler and kwok, and to scale back to 0
# BENCH_PODS=N changes the Pod count. Every wait is bounded (BENCH_TIMEOUT s).
set -euo pipefail
E2E="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NAME="${BENCH_CLUSTER:-exec-b}"
PODS="${BENCH_PODS:-1000}"
TIMEOUT="${BENCH_TIMEOUT:-300}"
CLUSTERS="${CLAWFED_CLUSTERS_DIR:-${CLAWFED_CACHE:-$HOME/.cache/clawfed}/clusters}"
DIR="$CLUSTERS/$NAME"
kc() { "$E2E/cluster.sh" kubectl "$NAME" "$@"; }
now() { date +%s%N; }
secs() { local ms=$(( ($2 - $1) / 1000000 )); printf '%d.%03d' $((ms / 1000)) $((ms % 1000)); }
rss_mib() {
  local sum=0 f pid kb
  for f in "$DIR"/pids/*.pid; do
    pid="$(cat "$f")"
    kb="$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)"
    sum=$((sum + kb))
  done
  echo $((sum / 1024))
}
wait_ready() { # want
  local deadline=$(( $(date +%s) + TIMEOUT )) got
  while :; do
    got="$(kc -n bench get deployment bench -o jsonpath='{.status.readyReplicas}')"
    [[ "${got:-0}" == "$1" ]] && return 0
    (( $(date +%s) < deadline )) || { echo "timed out: readyReplicas=${got:-0}, want $1" >&2; return 1; }
    sleep 0.2
  done
}
wait_no_pods() {
  local deadline=$(( $(date +%s) + TIMEOUT )) n
  while :; do
    n="$(kc -n bench get pods --no-headers 2>/dev/null | wc -l)"
    (( n == 0 )) && return 0
    (( $(date +%s) < deadline )) || { echo "timed out: $n pods left" >&2; return 1; }
    sleep 0.2
  done
}

"$E2E/build.sh" > /dev/null
"$E2E/cluster.sh" down "$NAME" > /dev/null 2>&1
trap '"$E2E/cluster.sh" down "$NAME" > /dev/null 2>&1 || true' EXIT
t0=$(now); "$E2E/cluster.sh" up "$NAME" 2> /dev/null; t1=$(now)
start_s="$(secs "$t0" "$t1")"
sleep 5
rss_idle="$(rss_mib)"

kc create namespace bench > /dev/null
until kc -n bench get serviceaccount default > /dev/null 2>&1; do sleep 0.1; done
t0=$(now)
kc -n bench create deployment bench --image fake.invalid/agent:1 --replicas "$PODS" > /dev/null
wait_ready "$PODS"
t1=$(now)
ready_s="$(secs "$t0" "$t1")"
rss_loaded="$(rss_mib)"
t0=$(now)
kc -n bench scale deployment bench --replicas 0 > /dev/null
wait_no_pods
t1=$(now)
down_s="$(secs "$t0" "$t1")"

echo "k8s-env bench (cluster $NAME, $(nproc) cores, $(sed -n 's/^kubernetes=//p' "$("$E2E/build.sh" --print)/VERSIONS"))"
echo "cluster start (e2e/cluster.sh up):           ${start_s} s"
echo "RSS of the cluster's 6 processes, idle:       ${rss_idle} MiB"
echo "$PODS Pods Ready (Deployment, via kcm+scheduler+kwok): ${ready_s} s"
echo "RSS after $PODS Pods:                         ${rss_loaded} MiB"
echo "scale $PODS -> 0, all Pods gone:              ${down_s} s"
