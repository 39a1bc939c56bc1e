#!/usr/bin/env bash
# The main job, on the embedded defaults, in one command:
#   - a control cluster and an execution cluster (real kube-apiserver,
#     controller-manager, scheduler, etcd, kwok built from upstream modules,
#     e2e/cluster.sh; built once into ~/.cache/clawfed),
#   - the hub on SQLite (state in ./.clawfed/), with the link, the pipeline
#     and the Agent Gateways in the control cluster (as the hub's own
#     least-privilege ServiceAccount, deploy/hub),
#   - one spoke enrolled with a bootstrap token, dialing out over mTLS and
#     applying work in the execution cluster as its own ServiceAccount
#     (deploy/spoke),
#   - a sample Agent deployed and followed until it is Active, then the
#     fleet status (and the address of the web fleet view, /ui), and one
#     request through its route's backend (the Gateway in control) answered
#     by its Harness in exec-a, across the hub's tunnel and the spoke's
#     outbound link (stand-in images: the plumbing),
#   - a real OpenClaw Agent (embedded: the OpenClaw gateway runs in exec-a,
#     openclaw from npm, e2e/openclaw.sh), its Configuration naming a model
#     API (a deterministic stand-in in exec-a: nothing here reaches the
#     internet) and its managed key, Active only after the hub's own model
#     turn, then one chat message sent by `clawfed agents chat` through
#     the hub and the spoke to the runtime, and the model's answer.
#   The test clusters' pod runner (e2e/pods) runs the images as real
#   processes in the test Pod network (e2e/podnet.sh, 198.18.0.0/15), and
#   each step's time is printed at the end.
# Ctrl-C stops the hub and the spoke (and the clusters this script started);
# `--once` does so right after printing.
set -euo pipefail
# Build output outside the repository, shared by every run on this machine.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${CLAWFED_CACHE:-$HOME/.cache/clawfed}/target}"
cd "$(dirname "${BASH_SOURCE[0]}")/.."

ONCE=0
[ "${1:-}" = "--once" ] && ONCE=1
STATE="$PWD/.clawfed"
rm -rf "$STATE"
mkdir -p "$STATE"
# Each step's wall time, printed at the end.
timings=()
step_name=""
step_start=$SECONDS
end_step() {
  [ -n "$step_name" ] && timings+=("$(printf '%5ss  %s' $((SECONDS - step_start)) "$step_name")")
  step_name=""
}
log() {
  end_step
  step_name="$*"
  step_start=$SECONDS
  printf '\n== %s\n' "$*" >&2
}

log "building clawfed"
cargo build --locked -p clawfed-hub -p clawfed-spoke -p clawfed-pods --bins >&2
BIN="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/debug"

log "Kubernetes control planes (built once, cached by version)"
e2e/build.sh >/dev/null
started=()
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [ ${#started[@]} -gt 0 ]; then
    log "stopping clusters ${started[*]}"
    e2e/cluster.sh down "${started[@]}" >&2 || true
  fi
}
trap cleanup EXIT
for c in control exec-a; do
  if ! e2e/cluster.sh status "$c" >/dev/null 2>&1; then
    started+=("$c")
  fi
done
if [ ${#started[@]} -gt 0 ]; then
  log "starting clusters ${started[*]}"
  e2e/cluster.sh up "${started[@]}" >&2
fi
kc() { e2e/cluster.sh kubectl "$@"; }

# A previous run's tenant namespace would make the spoke fail closed (two
# namespaces claiming tenant "demo"): remove leftovers of this demo only.
kc exec-a delete namespace -l clawfed.io/tenant=demo --ignore-not-found --wait=true --timeout=60s >&2 || true
kc control delete namespace -l clawfed.io/tenant=demo --ignore-not-found --wait=true --timeout=60s >&2 || true
kc control delete pv clawfed-demo-hello-gateway --ignore-not-found --wait=true --timeout=30s >&2 || true
kc exec-a delete namespace demo-model --ignore-not-found --wait=true --timeout=60s >&2 || true

log "least-privilege identities: hub in control, spoke in exec-a"
kc control apply --server-side --force-conflicts -f deploy/hub/namespace.yaml -f deploy/hub/rbac.yaml -f deploy/hub/admission.yaml >&2
kc exec-a apply --server-side --force-conflicts -f deploy/spoke/namespace.yaml -f deploy/spoke/rbac.yaml -f deploy/spoke/provider-crd.yaml -f deploy/spoke/admission.yaml >&2
# Storage for the Gateway's SQLite volume (kwok nodes mount nothing, and the
# test clusters have no provisioner) and an edge Gateway for the routes.
kc control apply --server-side --force-conflicts -f - >&2 <<'EOF'
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: { name: clawfed-demo-local }
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: Immediate
reclaimPolicy: Retain
---
apiVersion: v1
kind: Namespace
metadata: { name: clawfed-edge }
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: { name: clawfed-demo }
spec: { controllerName: clawfed.io/demo-controller }
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: edge, namespace: clawfed-edge }
spec:
  gatewayClassName: clawfed-demo
  listeners:
    - name: http
      protocol: HTTP
      port: 80
      allowedRoutes: { namespaces: { from: All } }
EOF

# A kubeconfig acting as a ServiceAccount (token from the TokenRequest API).
sa_kubeconfig() { # cluster namespace serviceaccount out
  local token server ca
  token="$(kc "$1" create token "$3" -n "$2" --duration=24h)"
  server="$(kc "$1" config view --minify -o jsonpath='{.clusters[0].cluster.server}')"
  ca="$(kc "$1" config view --minify --raw -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')"
  cat > "$4" <<EOF
apiVersion: v1
kind: Config
clusters: [{ name: c, cluster: { server: "$server", certificate-authority-data: "$ca" } }]
users: [{ name: u, user: { token: "$token" } }]
contexts: [{ name: c, context: { cluster: c, user: u, namespace: "$2" } }]
current-context: c
EOF
  chmod 600 "$4"
}
sa_kubeconfig control clawfed-system clawfed-hub "$STATE/hub-control.kubeconfig"
sa_kubeconfig exec-a clawfed-system clawfed-spoke "$STATE/spoke-exec-a.kubeconfig"

cat > "$STATE/hub.yaml" <<EOF
version: 1
database: { url: "sqlite://$STATE/clawfed.db" }
link: { addr: "127.0.0.1:18443", caDir: "$STATE/ca", heartbeatSeconds: 5 }
# Gateways reach their Harness through this ingress: the root end of the
# test Pod network, the one address the Gateway Pods can reach.
tunnel: { addr: "198.18.0.1:18444" }
# The real runtime turns ready in 10-20 s idle, a minute or more on a busy
# machine; its activation is a model turn (pipeline.activation: modelTurn).
# Stock openclaw publishes no plugin-startup status (the reference's
# runtime image wrapper does, on a private port): the activation's model
# turn is the proof here.
pipeline: { readyDeadlineSeconds: 300, pathProbe: true, startupStatus: false }
gateway:
  enabled: true
  kubeconfig: "$STATE/hub-control.kubeconfig"
  options:
    storageClass: clawfed-demo-local
    workspaceSize: 1Gi
    trustedProxyCidrs: ["10.244.0.0/16"]
    privateRouting:
      gatewayName: edge
      gatewayNamespace: clawfed-edge
      hostnameSuffix: agents.clawfed.local
log: { format: text, filter: "info,kube=warn" }
EOF

log "hub"
export CLAWFED_CONFIG="$STATE/hub.yaml"
"$BIN/clawfed-hub" token create --name demo-admin --role installation-admin > "$STATE/admin.token"
"$BIN/clawfed-hub" serve > "$STATE/hub.out" 2> "$STATE/hub.log" &
pids+=($!)
for _ in $(seq 1 100); do
  grep -q listening "$STATE/hub.out" 2>/dev/null && break
  kill -0 "${pids[0]}" 2>/dev/null || { cat "$STATE/hub.log" >&2; exit 1; }
  sleep 0.1
done
cat "$STATE/hub.out"
export CLAWFED_SERVER="$(sed -n 's/.*rest=\([^ ]*\).*/\1/p' "$STATE/hub.out")"
export CLAWFED_TOKEN="$(cat "$STATE/admin.token")"

log "spoke for exec-a (bootstrap token, CSR, mTLS)"
"$BIN/clawfed-hub" cluster token create exec-a --ttl 10m > "$STATE/exec-a.token" 2>/dev/null
"$BIN/clawfed-hub" cluster ca > "$STATE/hub-ca.pem"
"$BIN/clawfed-spoke" --kubeconfig "$STATE/spoke-exec-a.kubeconfig" \
  --hub-url https://127.0.0.1:18443 --ca-file "$STATE/hub-ca.pem" \
  --cluster-name exec-a --bootstrap-token-file "$STATE/exec-a.token" \
  --state-dir "$STATE/spoke" --applier kube --metrics-addr 127.0.0.1:19465 \
  2> "$STATE/spoke.log" &
pids+=($!)
cf() { echo "\$ clawfed $*"; "$BIN/clawfed" "$@"; }
for _ in $(seq 1 100); do
  "$BIN/clawfed" clusters get exec-a -o json 2>/dev/null | grep -q '"connectionState": "online"' && break
  sleep 0.2
done
cf clusters list

log "a sample Agent, deployed and followed until Active"
digest() { printf '%s' "$1" | sha256sum | cut -d' ' -f1; }
cf namespaces create demo --display-name "Demo tenant"
# The tenant's Gateways run in its own namespace in control,
# oce-gateways-<first 24 hex of sha256(namespace id)>, which the hub makes;
# the Gateway's volume is bound to its claim there in advance.
DEMO_ID="$("$BIN/clawfed" namespaces get demo -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')"
GW_NS="oce-gateways-$(printf '%s' "$DEMO_ID" | sha256sum | cut -c1-24)"
kc control apply --server-side --force-conflicts -f - >&2 <<EOF
apiVersion: v1
kind: PersistentVolume
metadata: { name: clawfed-demo-hello-gateway }
spec:
  capacity: { storage: 1Gi }
  accessModes: [ReadWriteOnce]
  storageClassName: clawfed-demo-local
  persistentVolumeReclaimPolicy: Retain
  hostPath: { path: /var/lib/clawfed-demo/hello-gateway }
  claimRef: { namespace: $GW_NS, name: hello-gateway-data }
EOF
# Stand-in images: the test clusters' pod runner runs them as real
# processes (a Harness that answers, a Gateway that forwards through the
# hub's tunnel).
# A dedicated Harness (its own Gateway in the control cluster; embedded
# OpenClaw would run its gateway inside the workload) keeps its workspace on
# the Agent-owned ReadWriteOnce claim `hello-workspace`: the test clusters'
# provisioner (the pod runner) gives it a hostPath volume.
cf agents create hello -n demo --harness-kind dedicated-codex \
  --image "clawfed.test/harness-standin@sha256:$(digest harness)" \
  --gateway-image "clawfed.test/gateway-standin@sha256:$(digest gateway)" \
  --cluster exec-a --cpu-request 250m --memory-limit 512Mi
cf deploy hello -n demo
cf agents get hello -n demo --wait --timeout 180
cf revisions list -a hello -n demo
cf fleet
echo
echo "Gateway and route in the control cluster:"
kc control get deployments,services,httproutes -n "$GW_NS" -o name
echo "Harness in the execution cluster:"
kc exec-a get deployments,pods -A -l clawfed.io/agent=hello -o wide
echo
echo "A request through the route's backend (Service hello-r1-gateway in control):"
echo "  Gateway (control) -> hub tunnel ingress -> spoke link -> Harness (exec-a)"
echo "\$ kubectl --context control get --raw /api/v1/namespaces/$GW_NS/services/hello-r1-gateway:18789/proxy/identity"
answer="$(kc control get --raw "/api/v1/namespaces/$GW_NS/services/hello-r1-gateway:18789/proxy/identity")"
echo "$answer"
echo "$answer" | grep -q '"agent": *"hello"' || { echo "demo: the Harness did not answer as hello" >&2; exit 1; }

log "a real OpenClaw Agent: its model API, Configuration and key; Active after a real model turn"
OPENCLAW_VERSION="$(python3 -c 'import json; print(json.load(open("e2e/openclaw/package.json"))["dependencies"]["openclaw"])')"
# The model API the runtime calls: a deterministic stand-in in exec-a (its
# answer names the message, the conversation's history and the key's last
# four characters).
kc exec-a create namespace demo-model >&2
kc exec-a apply -n demo-model -f - >&2 <<'EOF'
apiVersion: apps/v1
kind: Deployment
metadata: { name: model }
spec:
  replicas: 1
  selector: { matchLabels: { app: model } }
  template:
    metadata: { labels: { app: model } }
    spec:
      containers:
        - name: model
          image: clawfed.test/model-standin:demo
          env: [{ name: MODEL_STANDIN_MODELS, value: standin-model }]
          ports: [{ name: http, containerPort: 8000 }]
          readinessProbe: { httpGet: { path: /healthz, port: http }, periodSeconds: 1 }
EOF
kc exec-a wait -n demo-model --for=condition=Ready pod -l app=model --timeout=120s >&2
model_ip="$(kc exec-a get pod -n demo-model -l app=model -o jsonpath='{.items[0].status.podIP}')"
# The Agent's Configuration is OpenClaw's own document; clawfed adds the
# keys it owns (docs/openclaw-runtime.md) and the key as ${CLAWFED_MODEL_API_KEY}.
cat > "$STATE/assistant.json" <<EOF
{ "models": { "providers": { "standin": {
    "baseUrl": "http://$model_ip:8000/v1", "api": "openai-completions",
    "models": [{ "id": "standin-model", "name": "standin-model" }] } } },
  "agents": { "defaults": { "model": { "primary": "standin/standin-model" } } } }
EOF
cf configurations create assistant -n demo -f "$STATE/assistant.json"
cf agents create assistant -n demo --harness-kind embedded-openclaw \
  --image "clawfed.test/openclaw:$OPENCLAW_VERSION" --configuration assistant \
  --cluster exec-a --memory-limit 2Gi
echo "\$ clawfed agents credentials set assistant -n demo --kind model-api-key < (a generated key)"
printf 'sk-demo-%s' "$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')" |
  "$BIN/clawfed" agents credentials set assistant -n demo --kind model-api-key
cf deploy assistant -n demo
cf agents get assistant -n demo --wait --timeout 360

log "one chat message through the hub and the spoke to the runtime"
echo "  clawfed -> hub -> spoke link (exec-a) -> OpenClaw gateway -> model API"
chat="$(cf agents chat assistant -n demo -m "Hello from the clawfed demo" --conversation demo)"
echo "$chat"
echo "$chat" | grep -q 'model-standin answer: Hello from the clawfed demo' ||
  { echo "demo: the runtime did not answer the chat" >&2; exit 1; }
end_step

echo
echo "time per step:"
printf '%s\n' "${timings[@]}"
echo
echo "logs: $STATE/hub.log $STATE/spoke.log   token: $STATE/admin.token"
echo "web fleet view: $CLAWFED_SERVER/ui/ (sign in with the token in $STATE/admin.token)"
if [ "$ONCE" = 1 ]; then
  exit 0
fi

echo "hub at $CLAWFED_SERVER (CLAWFED_SERVER/CLAWFED_TOKEN as above); Ctrl-C stops everything"
wait "${pids[0]}"
