#!/usr/bin/env bash
# Real Kubernetes control planes on loopback for clawfed's cluster tests:
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok (one
# fake Node), built from upstream Go modules by e2e/build.sh, and
# clawfed-podrunner, which runs real stand-in processes behind the Pods of
# the `clawfed.test/` images in the Pod network of e2e/podnet.sh, and the
# real OpenClaw runtime (e2e/openclaw.sh, installed once into the cache) for
# Pods of `clawfed.test/openclaw:<version>`.
#
#   e2e/cluster.sh up     NAME [NAME...]   start (builds first if needed)
#   e2e/cluster.sh down   NAME [NAME...]   stop what `up` started, remove data
#   e2e/cluster.sh status [NAME...]        print state (exit 1 if a NAME is not running)
#   e2e/cluster.sh kubectl NAME ARGS...    kubectl against NAME as admin
#   e2e/cluster.sh env    NAME             print KUBECONFIG=... for NAME
#   e2e/cluster.sh restart NAME COMPONENT  kill -9 COMPONENT, start it again with the same flags (fault runs)
#
# NAME is control, exec-a, exec-b or exec-air (fixed ports, see ports()
# below). exec-air is an air-gapped execution cluster: its Pods pull only
# from the registry mirror mirror.airgap.test (the pod runner refuses any
# other image with ErrImagePull, and kwok makes none of its Pods Ready).
# Cluster dirs live under ${CLAWFED_CLUSTERS_DIR:-${CLAWFED_CACHE:-$HOME/.cache/clawfed}/clusters}/NAME:
# admin.kubeconfig, pki/, logs/<component>.log, pids/<component>.pid, etcd/.
set -euo pipefail

E2E="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${CLAWFED_CACHE:-$HOME/.cache/clawfed}"
CLUSTERS="${CLAWFED_CLUSTERS_DIR:-$CACHE/clusters}"
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok clawfed-podrunner)
SA_ISSUER="https://kubernetes.default.svc.cluster.local"
NODE_NAME="kwok-node-0"

die() { echo "cluster.sh: $*" >&2; exit 1; }
log() { echo "cluster.sh: [$NAME] $*" >&2; }

# ports NAME: sets APISERVER_PORT ETCD_PORT ETCD_PEER_PORT KCM_PORT SCHED_PORT KWOK_PORT
# and the address ranges, all inside 198.18.0.0/15 (RFC 2544, see podnet.sh):
# KWOK_CIDR (kwok's fake Pod IPs), RUNNER_CIDR (Pod IPs of stand-in Pods,
# served for real in the Pod namespace), SERVICE_CIDR and SERVICE_IP (the
# `kubernetes` Service).
ports() {
  local i
  case "$1" in
    control) i=0 ;;
    exec-a) i=1 ;;
    exec-b) i=2 ;;
    exec-air) i=3 ;;
    *) die "unknown cluster name '$1' (known: control, exec-a, exec-b, exec-air)" ;;
  esac
  APISERVER_PORT=$((16443 + i))
  ETCD_PORT=$((12379 + 10 * i))
  ETCD_PEER_PORT=$((12380 + 10 * i))
  KCM_PORT=$((17257 + 10 * i))
  SCHED_PORT=$((17259 + 10 * i))
  KWOK_PORT=$((17261 + 10 * i))
  KWOK_CIDR="198.18.$((128 + 32 * i)).0/20"
  RUNNER_CIDR="198.18.$((144 + 32 * i)).0/20"
  SERVICE_CIDR="198.19.$i.0/24"
  SERVICE_IP="198.19.$i.1"
}

# The registry mirror an air-gapped cluster's Pods pull from (only there).
AIRGAP_MIRROR_HOST="mirror.airgap.test"

setup_vars() {
  NAME="$1"
  ports "$NAME"
  MIRROR_ONLY=""
  [[ "$NAME" == exec-air ]] && MIRROR_ONLY="$AIRGAP_MIRROR_HOST"
  DIR="$CLUSTERS/$NAME"
  PKI="$DIR/pki"
  KUBECONFIG_ADMIN="$DIR/admin.kubeconfig"
  SERVER="https://127.0.0.1:$APISERVER_PORT"
}

bin_dir() {
  BIN="$("$E2E/build.sh" --print)"
  if [[ ! -f "$BIN/.complete" ]]; then
    echo "cluster.sh: binaries missing in $BIN; running e2e/build.sh (a cold build takes a while)" >&2
    BIN="$("$E2E/build.sh")"
  fi
}

# ---------------------------------------------------------------- PKI ----

ca() { # name cn
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$PKI/$1.key" 2>/dev/null
  openssl req -x509 -new -key "$PKI/$1.key" -subj "/CN=$2" -days 3650 -sha256 -out "$PKI/$1.crt" \
    -config <(printf '[req]\ndistinguished_name=dn\n[dn]\n[v3]\nbasicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign,digitalSignature\nsubjectKeyIdentifier=hash\n') \
    -extensions v3
}

leaf() { # name ca subject usage [san]
  local ext="basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=$4\nauthorityKeyIdentifier=keyid\n"
  [[ -n "${5:-}" ]] && ext+="subjectAltName=$5\n"
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$PKI/$1.key" 2>/dev/null
  openssl req -new -key "$PKI/$1.key" -subj "$3" -config <(printf '[req]\ndistinguished_name=dn\n[dn]\n') |
    openssl x509 -req -CA "$PKI/$2.crt" -CAkey "$PKI/$2.key" -set_serial "0x$(openssl rand -hex 16)" \
      -days 3650 -sha256 -extfile <(printf "$ext") -out "$PKI/$1.crt" 2>/dev/null
}

gen_pki() {
  mkdir -p "$PKI"
  ca ca "clawfed-$NAME-ca"                 # serving CA (trusted by clients)
  ca client-ca "clawfed-$NAME-client-ca"   # client CA (apiserver --client-ca-file)
  leaf apiserver ca "/CN=kube-apiserver" serverAuth \
    "IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:$SERVICE_IP"
  leaf admin client-ca "/O=system:masters/CN=clawfed-admin" clientAuth
  leaf kcm client-ca "/CN=system:kube-controller-manager" clientAuth
  leaf scheduler client-ca "/CN=system:kube-scheduler" clientAuth
  leaf kwok client-ca "/O=system:masters/CN=kwok-controller" clientAuth
  ca front-proxy-ca "clawfed-$NAME-front-proxy-ca"   # aggregation layer
  leaf front-proxy-client front-proxy-ca "/CN=front-proxy-client" clientAuth
  leaf kwok-serving ca "/CN=kwok" serverAuth "IP:127.0.0.1,DNS:localhost"
  # Service-account token signing key pair.
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$PKI/sa.key" 2>/dev/null
  openssl pkey -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub"
  chmod 600 "$PKI"/*.key
}

kubeconfig() { # file user-cert-name
  local b64="base64 -w0"
  cat > "$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: $NAME
  cluster:
    server: $SERVER
    certificate-authority-data: $($b64 < "$PKI/ca.crt")
users:
- name: $2
  user:
    client-certificate-data: $($b64 < "$PKI/$2.crt")
    client-key-data: $($b64 < "$PKI/$2.key")
contexts:
- name: $NAME
  context:
    cluster: $NAME
    user: $2
current-context: $NAME
EOF
  chmod 600 "$1"
}

# ---------------------------------------------------------- processes ----

# start COMPONENT ARGS...: runs the binary detached, pidfile + log in DIR.
start() {
  local c="$1"; shift
  start_exe "$c" "$BIN/$c" "$@"
}

# start_exe COMPONENT PATH ARGS...: like start, for a binary outside BIN.
start_exe() {
  local c="$1" exe="$2"; shift 2
  setsid "$exe" "$@" > "$DIR/logs/$c.log" 2>&1 < /dev/null &
  local pid=$!
  echo "$pid" > "$DIR/pids/$c.pid"
  # Until the forked shell has exec'd, /proc/PID/cmdline is this script's,
  # and `alive` would call the component dead (on a loaded machine this
  # window is long enough to fail a start whose log is still empty). Wait
  # for the exec, or for the process to be gone.
  local i
  for i in $(seq 1 100); do
    [[ -r "/proc/$pid/cmdline" ]] || break
    alive "$c" && break
    sleep 0.05
  done
}

# ------------------------------------------------ pod runner and stages ----

POD_BINS=(clawfed-podrunner harness-standin gateway-standin model-standin)

# build_pods: builds the runner and the stand-ins (once per `up`, before the
# clusters start side by side) and sets PODS_BIN to their directory.
build_pods() {
  local target="${CARGO_TARGET_DIR:-$CACHE/target}"
  echo "cluster.sh: building clawfed-pods (runner and stand-ins) into $target" >&2
  ( cd "$E2E/.." && CARGO_TARGET_DIR="$target" cargo build -q --locked -p clawfed-pods --bins ) ||
    die "cargo build -p clawfed-pods failed"
  PODS_BIN="$target/debug"
}

# install_runtime: the real OpenClaw runtime (installed once, cached by
# version) and sets OPENCLAW_DIR to it.
install_runtime() {
  OPENCLAW_DIR="$("$E2E/openclaw.sh")" || die "e2e/openclaw.sh failed"
}

# kwok's default stages, except that pod-ready skips Pods whose first
# container runs a stand-in image: the pod runner makes those Ready, after
# their probe passed. Selector keys are jq expressions (gojq in kwok's
# pkg/utils/expression): `NotIn ['true']` holds for `false`, and for Pods
# without containers, where the expression errors and yields nothing.
# In a mirror-only cluster the runner takes every Pod (it runs the mirror's
# images and refuses the rest): the prefix is empty, so kwok skips them all.
write_stages() {
  local prefix="clawfed.test/"
  [[ -n "$MIRROR_ONLY" ]] && prefix=""
  awk -v prefix="$prefix" '
    /^  name: pod-ready$/ { in_ready = 1 }
    in_ready && /^    matchExpressions:$/ {
      print
      print "    - key: '"'"'.spec.containers[0].image | startswith(\"" prefix "\")'"'"'"
      print "      operator: '"'"'NotIn'"'"'"
      print "      values:"
      print "      - '"'"'true'"'"'"
      in_ready = 0
      next
    }
    { print }
  ' "$BIN/kwok-stages.yaml" > "$DIR/kwok-stages.yaml"
  [[ "$(grep -c 'startswith' "$DIR/kwok-stages.yaml")" == 1 ]] ||
    die "[$NAME] could not add the stand-in exclusion to kwok's pod-ready stage ($BIN/kwok-stages.yaml changed?)"
}

# alive COMPONENT: the pidfile's process runs and is ours (its command line
# names this cluster's dir, so a reused pid is never touched).
alive() {
  local f="$DIR/pids/$1.pid" pid
  [[ -f "$f" ]] || return 1
  pid="$(cat "$f")"
  [[ -r "/proc/$pid/cmdline" ]] || return 1
  # No pipe into `grep -q`: with pipefail, grep exiting at its first match
  # can fail the pipeline by SIGPIPE-ing the writer.
  local cmdline
  cmdline="$(tr '\0' ' ' < "/proc/$pid/cmdline")" || return 1
  [[ "$cmdline" == *"$DIR/"* ]]
}

stop() {
  local c="$1" pid i
  alive "$c" || { rm -f "$DIR/pids/$c.pid"; return 0; }
  pid="$(cat "$DIR/pids/$c.pid")"
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 1 100); do
    alive "$c" || break
    sleep 0.1
  done
  if alive "$c"; then kill -KILL "$pid" 2>/dev/null || true; sleep 0.2; fi
  rm -f "$DIR/pids/$c.pid"
}

curl_admin() { # path
  curl -sS --max-time 5 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" "$SERVER$1"
}

kc() { "$BIN/kubectl" --kubeconfig "$KUBECONFIG_ADMIN" "$@"; }

# wait_for DESC TIMEOUT_S COMPONENT CMD...: polls CMD every 0.1 s; fails early
# when COMPONENT has died.
wait_for() {
  local desc="$1" timeout="$2" comp="$3"; shift 3
  local deadline=$(( $(date +%s) + timeout ))
  until "$@" >/dev/null 2>&1; do
    if [[ -n "$comp" ]] && ! alive "$comp"; then
      tail -n 30 "$DIR/logs/$comp.log" >&2 || true
      die "[$NAME] $comp exited while waiting for $desc (log: $DIR/logs/$comp.log)"
    fi
    (( $(date +%s) < deadline )) || die "[$NAME] timed out after ${timeout}s waiting for $desc (logs: $DIR/logs/)"
    sleep 0.1
  done
}

ready_ok() { [[ "$(curl_admin /readyz 2>/dev/null)" == "ok" ]]; }
etcd_ok() { curl -sf --max-time 2 "http://127.0.0.1:$ETCD_PORT/health" | grep -q '"health":"true"'; }
https_ok() { curl -skf --max-time 2 "https://127.0.0.1:$1/healthz" | grep -q ok; }

cluster_up() {
  setup_vars "$1"
  local t0; t0=$(date +%s%N)
  if [[ -d "$DIR" ]]; then
    local all=1 c
    for c in "${COMPONENTS[@]}"; do alive "$c" || all=0; done
    if (( all )) && ready_ok; then log "already running ($SERVER)"; return 0; fi
    log "stale or partial cluster dir; cleaning up first"
    cluster_down "$NAME"
    setup_vars "$1"
  fi
  mkdir -p "$DIR/logs" "$DIR/pids"
  mkdir -m 700 "$DIR/etcd"
  gen_pki
  kubeconfig "$KUBECONFIG_ADMIN" admin
  kubeconfig "$DIR/kcm.kubeconfig" kcm
  kubeconfig "$DIR/scheduler.kubeconfig" scheduler
  kubeconfig "$DIR/kwok.kubeconfig" kwok
  write_stages
  # The runner and stand-ins run from a copy, so a rebuild in the target dir
  # never changes a running cluster's binaries under it.
  mkdir -p "$DIR/bin" "$DIR/pods"
  for b in "${POD_BINS[@]}"; do cp "$PODS_BIN/$b" "$DIR/bin/$b"; done
  cat > "$DIR/ports.env" <<EOF
APISERVER=$SERVER
ETCD=http://127.0.0.1:$ETCD_PORT
ETCD_PEER=http://127.0.0.1:$ETCD_PEER_PORT
KUBE_CONTROLLER_MANAGER=https://127.0.0.1:$KCM_PORT
KUBE_SCHEDULER=https://127.0.0.1:$SCHED_PORT
KWOK=https://127.0.0.1:$KWOK_PORT
KWOK_POD_CIDR=$KWOK_CIDR
RUNNER_POD_CIDR=$RUNNER_CIDR
SERVICE_CIDR=$SERVICE_CIDR
EOF

  start etcd --name "$NAME" --data-dir "$DIR/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "$NAME=http://127.0.0.1:$ETCD_PEER_PORT" --initial-cluster-state new \
    --unsafe-no-fsync --log-level warn
  wait_for "etcd health" 20 etcd etcd_ok

  start kube-apiserver \
    --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$APISERVER_PORT" \
    --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
    --client-ca-file "$PKI/client-ca.crt" \
    --authorization-mode Node,RBAC \
    --service-account-issuer "$SA_ISSUER" \
    --service-account-key-file "$PKI/sa.pub" \
    --service-account-signing-key-file "$PKI/sa.key" \
    --api-audiences "$SA_ISSUER" \
    --service-cluster-ip-range "$SERVICE_CIDR" \
    --allow-privileged=true \
    --cert-dir "$DIR/apiserver-certs" \
    --endpoint-reconciler-type none \
    --requestheader-client-ca-file "$PKI/front-proxy-ca.crt" --requestheader-allowed-names front-proxy-client \
    --requestheader-username-headers X-Remote-User --requestheader-group-headers X-Remote-Group \
    --requestheader-extra-headers-prefix X-Remote-Extra- \
    --proxy-client-cert-file "$PKI/front-proxy-client.crt" --proxy-client-key-file "$PKI/front-proxy-client.key" \
    --profiling=false
  wait_for "kube-apiserver /readyz" 60 kube-apiserver ready_ok

  start kube-controller-manager \
    --kubeconfig "$DIR/kcm.kubeconfig" \
    --authentication-kubeconfig "$DIR/kcm.kubeconfig" --authorization-kubeconfig "$DIR/kcm.kubeconfig" \
    --authorization-always-allow-paths /healthz,/readyz,/livez,/metrics \
    --bind-address 127.0.0.1 --secure-port "$KCM_PORT" --cert-dir "$DIR/kcm-certs" \
    --leader-elect=false \
    --use-service-account-credentials=true \
    --root-ca-file "$PKI/ca.crt" \
    --service-account-private-key-file "$PKI/sa.key" \
    --cluster-signing-cert-file "$PKI/client-ca.crt" --cluster-signing-key-file "$PKI/client-ca.key" \
    --controllers '*' \
    --kube-api-qps 1000 --kube-api-burst 2000 \
    --concurrent-deployment-syncs 10 --concurrent-replicaset-syncs 10 --concurrent-gc-syncs 40 \
    --profiling=false

  cat > "$DIR/scheduler.yaml" <<EOF
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: $DIR/scheduler.kubeconfig
  qps: 1000
  burst: 2000
leaderElection:
  leaderElect: false
EOF
  start kube-scheduler --config "$DIR/scheduler.yaml" \
    --authentication-kubeconfig "$DIR/scheduler.kubeconfig" --authorization-kubeconfig "$DIR/scheduler.kubeconfig" \
    --authorization-always-allow-paths /healthz,/readyz,/livez,/metrics \
    --bind-address 127.0.0.1 --secure-port "$SCHED_PORT" --cert-dir "$DIR/scheduler-certs"

  start kwok --kubeconfig "$DIR/kwok.kubeconfig" --config "$DIR/kwok-stages.yaml" \
    --manage-all-nodes=false \
    --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
    --node-lease-duration-seconds 40 \
    --cidr "$KWOK_CIDR" --node-ip 127.0.0.1 \
    --node-port "$KWOK_PORT" --server-address "127.0.0.1:$KWOK_PORT" \
    --tls-cert-file "$PKI/kwok-serving.crt" --tls-private-key-file "$PKI/kwok-serving.key"

  # The kubelet of the stand-in Pods (it refuses to start unless podnet's
  # routes are in place).
  start_exe clawfed-podrunner "$DIR/bin/clawfed-podrunner" --kubeconfig "$DIR/kwok.kubeconfig" \
    --node "$NODE_NAME" --pod-cidr "$RUNNER_CIDR" --netns clawfed-pods --state-dir "$DIR/pods" \
    --openclaw-dir "$OPENCLAW_DIR" --volume-dir "$DIR/volumes" \
    ${MIRROR_ONLY:+--registry-mirror-only "$MIRROR_ONLY"}

  # The fake Node kwok manages (no taint: every Pod may land on it).
  kc apply -f - > /dev/null <<EOF
apiVersion: v1
kind: Node
metadata:
  name: $NODE_NAME
  annotations:
    node.alpha.kubernetes.io/ttl: "0"
    kwok.x-k8s.io/node: fake
  labels:
    kubernetes.io/arch: amd64
    kubernetes.io/hostname: $NODE_NAME
    kubernetes.io/os: linux
    kubernetes.io/role: agent
    node-role.kubernetes.io/agent: ""
    type: kwok
# A fake node: room for thousands of Harnesses at the runtime's measured
# default requests (1536Mi each), as the benches and suites deploy them.
status:
  allocatable: {cpu: "100000", memory: 64Ti, pods: "5000"}
  capacity: {cpu: "100000", memory: 64Ti, pods: "5000"}
  nodeInfo: {architecture: amd64, kubeProxyVersion: fake, kubeletVersion: fake, operatingSystem: linux}
  phase: Running
EOF
  # Gateway API CRDs (server-side apply: the CRDs are too big for the
  # last-applied annotation).
  kc apply --server-side --force-conflicts -f "$BIN/crds/" > /dev/null
  wait_for "Gateway API CRDs Established" 30 kube-apiserver \
    kc wait --for condition=Established --timeout 1s \
      crd/gatewayclasses.gateway.networking.k8s.io crd/gateways.gateway.networking.k8s.io crd/httproutes.gateway.networking.k8s.io
  wait_for "kube-controller-manager healthz" 30 kube-controller-manager https_ok "$KCM_PORT"
  wait_for "kube-scheduler healthz" 30 kube-scheduler https_ok "$SCHED_PORT"
  wait_for "default ServiceAccount (controller-manager)" 30 kube-controller-manager \
    kc -n default get serviceaccount default
  wait_for "Node $NODE_NAME Ready (kwok)" 30 kwok \
    kc wait --for condition=Ready --timeout 1s "node/$NODE_NAME"
  wait_for "clawfed-podrunner watching Pods" 30 clawfed-podrunner \
    grep -q runner.watching "$DIR/logs/clawfed-podrunner.log"
  local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  printf '%d.%03d\n' $((ms / 1000)) $((ms % 1000)) > "$DIR/start-seconds"
  log "up in $(cat "$DIR/start-seconds")s: $SERVER  KUBECONFIG=$KUBECONFIG_ADMIN"
}

cluster_down() {
  setup_vars "$1"
  [[ -d "$DIR" ]] || { log "not running"; return 0; }
  local i
  for (( i = ${#COMPONENTS[@]} - 1; i >= 0; i-- )); do stop "${COMPONENTS[$i]}"; done
  # The runner stops its stand-ins on SIGTERM; after a kill -9 of the runner
  # they are left over: kill those its pidfiles name (if they still run one
  # of this cluster's binaries, so a reused pid is never signalled).
  # The runtime renames its process title, so its executable (under the
  # openclaw install) identifies it; its worker processes share its group.
  local f pid runtime
  runtime="$("$E2E/openclaw.sh" --print)"
  for f in "$DIR"/pods/*/pid; do
    [[ -f "$f" ]] || continue
    pid="$(cat "$f")"
    if { [[ -r "/proc/$pid/cmdline" ]] && [[ "$(tr '\0' ' ' < "/proc/$pid/cmdline")" == *"$DIR/bin/"* ]]; } ||
       [[ "$(readlink "/proc/$pid/exe" 2>/dev/null)" == "$runtime/"* ]]; then
      kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    fi
  done
  # The runtime Pods' network namespaces (e2e/pods/src/sandbox.rs).
  for f in "$DIR"/pods/*/netns; do
    [[ -f "$f" ]] || continue
    ip netns del "$(cat "$f")" 2>/dev/null || true
  done
  rm -rf "$DIR"
  log "stopped and removed $DIR"
}

cluster_status() {
  setup_vars "$1"
  if [[ ! -d "$DIR" ]]; then echo "$NAME: down"; return 1; fi
  local c state ready="no" n=0
  ready_ok && ready="ok"
  for c in "${COMPONENTS[@]}"; do alive "$c" && n=$((n + 1)); done
  if (( n == ${#COMPONENTS[@]} )) && [[ "$ready" == ok ]]; then state=running; else state=degraded; fi
  echo "$NAME: $state  apiserver=$SERVER readyz=$ready kubeconfig=$KUBECONFIG_ADMIN"
  for c in "${COMPONENTS[@]}"; do
    if alive "$c"; then
      printf '  %-24s pid %-8s rss %s\n' "$c" "$(cat "$DIR/pids/$c.pid")" \
        "$(awk '/VmRSS/ {print $2" "$3}' "/proc/$(cat "$DIR/pids/$c.pid")/status")"
    else
      printf '  %-24s stopped (log: %s)\n' "$c" "$DIR/logs/$c.log"
    fi
  done
  (( n == ${#COMPONENTS[@]} )) && [[ "$ready" == ok ]]
}

cmd="${1:-}"; shift || true
case "$cmd" in
  up)
    (( $# > 0 )) || die "usage: cluster.sh up NAME [NAME...]"
    for n in "$@"; do ports "$n"; done
    bin_dir
    "$E2E/podnet.sh" up
    build_pods
    install_runtime
    if (( $# == 1 )); then cluster_up "$1"; exit; fi
    # Several clusters: start them side by side, fail if any fails.
    pids=(); for n in "$@"; do ( cluster_up "$n" ) & pids+=($!); done
    rc=0; for p in "${pids[@]}"; do wait "$p" || rc=1; done
    exit $rc ;;
  down)
    (( $# > 0 )) || die "usage: cluster.sh down NAME [NAME...]"
    for n in "$@"; do cluster_down "$n"; done ;;
  status)
    # With names: exit 1 unless every one is fully running. Without: list all.
    if (( $# == 0 )); then for n in control exec-a exec-b exec-air; do cluster_status "$n" || true; done; exit 0; fi
    rc=0; for n in "$@"; do cluster_status "$n" || rc=1; done; exit $rc ;;
  kubectl)
    (( $# > 0 )) || die "usage: cluster.sh kubectl NAME ARGS..."
    setup_vars "$1"; shift; bin_dir; kc "$@" ;;
  restart)
    # restart NAME COMPONENT: kill -9 one running component and start it
    # again with the exact command line it ran with (read from /proc), for
    # fault runs; waits for /readyz after an apiserver restart.
    (( $# == 2 )) || die "usage: cluster.sh restart NAME COMPONENT"
    setup_vars "$1"; c="$2"
    alive "$c" || die "[$NAME] $c is not running"
    pid="$(cat "$DIR/pids/$c.pid")"
    mapfile -d '' argv < "/proc/$pid/cmdline"
    kill -KILL "$pid"
    for _ in $(seq 1 100); do
      [[ -r "/proc/$pid/cmdline" && -s "/proc/$pid/cmdline" ]] || break
      sleep 0.1
    done
    echo "cluster.sh: restarted after kill -9 at $(date -u +%FT%TZ)" >> "$DIR/logs/$c.log"
    # The killed process may still hold its listening port for a moment
    # ("bind: address already in use"): a start that exits at once is
    # tried again, so a restart never leaves the component down.
    for attempt in 1 2 3 4 5 6 7 8 9 10; do
      setsid "${argv[@]}" >> "$DIR/logs/$c.log" 2>&1 < /dev/null &
      echo $! > "$DIR/pids/$c.pid"
      sleep 1
      alive "$c" && break
      echo "cluster.sh: $c exited at once (attempt $attempt), starting it again" >> "$DIR/logs/$c.log"
      (( attempt < 10 )) || die "[$NAME] $c does not start again"
    done
    if [[ "$c" == kube-apiserver ]]; then wait_for "kube-apiserver /readyz" 60 kube-apiserver ready_ok; fi ;;
  env)
    (( $# == 1 )) || die "usage: cluster.sh env NAME"
    setup_vars "$1"; echo "export KUBECONFIG=$KUBECONFIG_ADMIN" ;;
  *) sed -n '2,15p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
