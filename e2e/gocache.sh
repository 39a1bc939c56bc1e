# Sourced by e2e/build.sh, e2e/helm.sh and e2e/promtool.sh: a tool built from
# Go modules into "$BIN.tmp.<pid>" and moved to the cache entry "$BIN" only
# when complete, so an interrupted build never leaves a half entry behind.

# gocache_reuse ARG OUT: prints OUT and exits when ARG is --print, or when the
# cache entry "$BIN" is complete (OUT being the path callers want).
gocache_reuse() {
  if [[ "$1" == "--print" ]]; then echo "$2"; exit 0; fi
  if [[ -x "$2" && -f "$BIN/.complete" ]]; then
    echo "$2"
    exit 0
  fi
}

# gocache_start: the reproducible Go build settings, an empty "$TMP" removed
# on exit, and "$start" for the build time.
gocache_start() {
  export CGO_ENABLED=0
  export GOFLAGS="-mod=readonly -buildvcs=false"
  export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
  TMP="$BIN.tmp.$$"
  rm -rf "$TMP"
  mkdir -p "$TMP"
  trap 'rm -rf "$TMP"' EXIT
  start=$(date +%s)
}

# gocache_finish: ends "$TMP/VERSIONS" (the caller wrote the tool versions)
# with the Go version and build time, and moves "$TMP" to "$BIN".
gocache_finish() {
  {
    echo "go=$(go env GOVERSION)"
    echo "build_seconds=$(( $(date +%s) - start ))"
  } >> "$TMP/VERSIONS"
  touch "$TMP/.complete"
  mkdir -p "$(dirname "$BIN")"
  rm -rf "$BIN"
  mv "$TMP" "$BIN"
  trap - EXIT
}
