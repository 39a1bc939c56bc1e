#!/usr/bin/env bash
# Builds the clawfed container images with buildah (Debian's package; no
# daemon, vfs storage, chroot isolation) from binaries built outside the
# image, so the build needs no network and the images no shell:
#
#   clawfed-hub    /usr/local/bin/clawfed-hub and /usr/local/bin/clawfed
#   clawfed-spoke  /usr/local/bin/clawfed-spoke
#
# Usage: deploy/images/build.sh [--binaries DIR] [--out DIR]
#                               [--repository PREFIX] [--tag TAG]
#   --binaries DIR   take the binaries from DIR (e.g. $CARGO_TARGET_DIR/debug).
#                    A dynamically linked build gets the shared libraries it
#                    loads (ldd) copied in beside it, distroless-style.
#                    Default: build them static and optimized,
#                    cargo build --release --target x86_64-unknown-linux-musl.
#   --out DIR        default $CARGO_TARGET_DIR/images
#   --repository P   image name prefix, default localhost/clawfed
#   --tag TAG        default the workspace version
#
# Writes to OUT: <image>.oci.tar (OCI archives, e.g. for
# `skopeo copy oci-archive:OUT/clawfed-hub.oci.tar docker://REGISTRY/...`,
# which keeps the digest), images.txt (one `repo:tag@sha256:...` a line, read
# by `clawfed-hub bundle --images`), and buildah's storage (OUT/storage). The
# digests are printed too. Layer timestamps are the commit's time, so the same
# binaries at the same commit give the same digests.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${CLAWFED_CACHE:-$HOME/.cache/clawfed}/target}"

MUSL=x86_64-unknown-linux-musl
binaries=""
out="$CARGO_TARGET_DIR/images"
repository="localhost/clawfed"
tag=""
while [ $# -gt 0 ]; do
  case "$1" in
    --binaries) binaries="${2:?--binaries needs a directory}"; shift 2 ;;
    --out) out="${2:?--out needs a directory}"; shift 2 ;;
    --repository) repository="${2:?--repository needs a prefix}"; shift 2 ;;
    --tag) tag="${2:?--tag needs a value}"; shift 2 ;;
    *) echo "build.sh: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done

log() { printf '== %s\n' "$*" >&2; }
need() { # command package
  command -v "$1" >/dev/null 2>&1 && return
  log "installing $2"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq "$2" >/dev/null
}
need buildah buildah

version="$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)"
tag="${tag:-$version}"
revision="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
if [ "$revision" != unknown ] && [ -n "$(git status --porcelain 2>/dev/null)" ]; then
  revision="$revision-dirty"
fi
epoch="$(git log -1 --format=%ct 2>/dev/null || echo 0)"
created="$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)"

if [ -z "$binaries" ]; then
  need musl-gcc musl-tools # ring and SQLite compile C for the musl target
  if ! rustup target list --installed | grep -qx "$MUSL"; then
    rustup target add "$MUSL"
  fi
  log "cargo build --release --target $MUSL (static binaries)"
  cargo build --locked --release --target "$MUSL" -p clawfed-hub -p clawfed-spoke --bins
  binaries="$CARGO_TARGET_DIR/$MUSL/release"
fi
for b in clawfed-hub clawfed clawfed-spoke; do
  [ -x "$binaries/$b" ] || { echo "build.sh: $binaries/$b is missing (--binaries)" >&2; exit 1; }
done

mkdir -p "$out"
out="$(cd "$out" && pwd)"
bah=(buildah --root "$out/storage" --runroot "$out/run" --storage-driver vfs)

# The shared libraries a binary loads, with the dynamic loader; nothing for
# a static binary.
libs_of() {
  ldd "$1" 2>/dev/null | awk '/=> \//{print $3} /^[[:space:]]*\//{print $1}' || true
}

# stage IMAGE STATE_DIR BINARY...: context/IMAGE/{rootfs,state}
stage() {
  local image="$1" state_dir="$2"; shift 2
  local ctx="$out/context/$image"
  rm -rf "$ctx"
  mkdir -p "$ctx/rootfs/usr/local/bin" "$ctx/rootfs/etc/ssl/certs" \
    "$ctx/rootfs/dev" "$ctx/rootfs/proc" "$ctx/rootfs/$(dirname "$state_dir")" "$ctx/state"
  local b lib
  for b in "$@"; do
    install -m 0755 "$binaries/$b" "$ctx/rootfs/usr/local/bin/$b"
    for lib in $(libs_of "$binaries/$b"); do
      cp -L --parents "$lib" "$ctx/rootfs/"
    done
  done
  # Names for uid/gid 65532 (as distroless has them), for tools that look
  # the user up; the image runs by number either way.
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:%s:/sbin/nologin\n' \
    "$state_dir" >"$ctx/rootfs/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' >"$ctx/rootfs/etc/group"
  # Public roots, for TLS to services outside the cluster (e.g. a managed
  # PostgreSQL); in-cluster clients use their own CA files.
  if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
    install -m 0644 /etc/ssl/certs/ca-certificates.crt "$ctx/rootfs/etc/ssl/certs/"
  fi
  echo "$ctx"
}

: >"$out/images.txt.new"
{
  echo "# built by deploy/images/build.sh at revision $revision"
  echo "# from $binaries"
} >>"$out/images.txt.new"
for image in clawfed-hub clawfed-spoke; do
  case "$image" in
    clawfed-hub) ctx="$(stage "$image" /var/lib/clawfed clawfed-hub clawfed)" ;;
    clawfed-spoke) ctx="$(stage "$image" /var/lib/clawfed-spoke clawfed-spoke)" ;;
  esac
  ref="$repository/$image:$tag"
  log "buildah bud $ref"
  "${bah[@]}" bud --quiet --isolation chroot --timestamp "$epoch" \
    --build-arg "VERSION=$version" --build-arg "REVISION=$revision" \
    --build-arg "CREATED=$created" \
    -f "deploy/images/$image.Containerfile" -t "$ref" "$ctx" >/dev/null
  rm -f "$out/$image.oci.tar"
  "${bah[@]}" push --quiet --digestfile "$out/$image.digest" "$ref" \
    "oci-archive:$out/$image.oci.tar:$ref" >/dev/null
  digest="$(cat "$out/$image.digest")"
  echo "$ref@$digest" >>"$out/images.txt.new"
  echo "$ref@$digest"
done
mv "$out/images.txt.new" "$out/images.txt"
# Earlier builds of the same tags are dangling now; vfs keeps full copies.
"${bah[@]}" rmi --prune >/dev/null 2>&1 || true
log "images and digests: $out/images.txt"
