#!/usr/bin/env bash
# The main job on the embedded defaults: builds clawfed, starts the hub on
# SQLite (state in ./.clawfed/), creates an installation-admin token, a
# namespace and an Agent, deploys it, prints the fleet and keeps the hub
# serving until Ctrl-C. `--once` stops the hub after printing.
#
# The execution side (spoke, Kubernetes clusters, Gateway) arrives with the
# link, spoke-execution and pipeline issues; until then the deployed revision
# stays `pending` in the hub.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

ONCE=0
[ "${1:-}" = "--once" ] && ONCE=1

echo "== building clawfed" >&2
cargo build --locked -p clawfed-hub --bins >&2
BIN="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/debug"

STATE=.clawfed
mkdir -p "$STATE"
export CLAWFED_DATABASE_URL="sqlite://$STATE/clawfed.db"
export CLAWFED_LOG_FORMAT=text

TOKEN_FILE="$STATE/admin.token"
if [ ! -s "$TOKEN_FILE" ]; then
  "$BIN/clawfed-hub" token create --name "demo-admin-$(date +%s)" --role installation-admin > "$TOKEN_FILE"
fi
export CLAWFED_TOKEN="$(cat "$TOKEN_FILE")"

"$BIN/clawfed-hub" serve > "$STATE/hub.out" 2> "$STATE/hub.log" &
HUB_PID=$!
stop_hub() { kill -TERM "$HUB_PID" 2>/dev/null && wait "$HUB_PID" 2>/dev/null || true; }
trap stop_hub EXIT

for _ in $(seq 1 100); do
  grep -q listening "$STATE/hub.out" 2>/dev/null && break
  kill -0 "$HUB_PID" 2>/dev/null || { cat "$STATE/hub.log" >&2; exit 1; }
  sleep 0.1
done
cat "$STATE/hub.out"
export CLAWFED_SERVER="$(sed -n 's/.*rest=\([^ ]*\).*/\1/p' "$STATE/hub.out")"

cf() { echo "\$ clawfed $*"; "$BIN/clawfed" "$@"; }
"$BIN/clawfed" namespaces get demo >/dev/null 2>&1 || cf namespaces create demo --display-name "Demo tenant"
"$BIN/clawfed" agents get hello -n demo >/dev/null 2>&1 || \
  cf agents create hello -n demo --harness-kind embedded-openclaw \
    --image "ghcr.io/openclaw/openclaw@sha256:$(printf 'demo' | sha256sum | cut -d' ' -f1)" \
    --memory-limit 512Mi --cpu-request 250m
cf deploy hello -n demo
sleep 1
cf namespaces list
cf revisions list -a hello -n demo
cf fleet
echo
echo "hub log: $STATE/hub.log   token: $TOKEN_FILE   (clawfed reads CLAWFED_SERVER and CLAWFED_TOKEN)"
if [ "$ONCE" = 1 ]; then
  exit 0
fi
echo "hub serving at $CLAWFED_SERVER; Ctrl-C stops it"
wait "$HUB_PID"
