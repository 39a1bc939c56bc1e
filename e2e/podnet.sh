#!/usr/bin/env bash
# The test clusters' Pod network: one network namespace that holds every
# stand-in process, joined to the root namespace by a veth pair, with
# addresses from the RFC 2544 benchmarking range 198.18.0.0/15 only.
#
#   e2e/podnet.sh up      create (idempotent: fills in whatever is missing)
#   e2e/podnet.sh down    remove the namespace, the pair and the routes
#   e2e/podnet.sh check   exit 1 with the reason unless the routes below hold
#
# Layout (see e2e/README.md, "Pod network"):
#   root ns   cfpods0 198.18.0.1/30
#             blackhole 198.18.0.0/15           nothing in the range leaves the machine
#             198.18.128.0/17 via 198.18.0.2    the Pod range goes into the namespace
#   clawfed-pods ns
#             cfpods1 198.18.0.2/30, lo up
#             local 198.18.128.0/17 dev lo      any Pod address may be bound, no
#                                               per-Pod address management
#             no default route: Pods reach only 198.18.0.1 (the root end,
#             where the hub's tunnel ingress listens) and each other.
#             ip_forward=1, rp_filter=0: the real runtime's Pods have a
#             network namespace each (cfp-*), joined to this one by a veth
#             (e2e/pods/src/sandbox.rs); this namespace forwards for them.
# Needs root and iproute2.
set -euo pipefail

NS=clawfed-pods
HOST_IF=cfpods0
NS_IF=cfpods1
HOST_ADDR=198.18.0.1
NS_ADDR=198.18.0.2
RANGE=198.18.0.0/15
POD_RANGE=198.18.128.0/17

die() { echo "podnet.sh: $*" >&2; exit 1; }
nsip() { ip -n "$NS" "$@"; }

up() {
  command -v ip >/dev/null || die "iproute2 (ip) is missing: apt-get install -y iproute2"
  ip netns list | grep -qw "^$NS" || ip netns add "$NS"
  if ! ip link show "$HOST_IF" >/dev/null 2>&1; then
    ip link add "$HOST_IF" type veth peer name "$NS_IF" netns "$NS"
  fi
  ip addr replace "$HOST_ADDR/30" dev "$HOST_IF"
  ip link set "$HOST_IF" up
  nsip addr replace "$NS_ADDR/30" dev "$NS_IF"
  nsip link set "$NS_IF" up
  nsip link set lo up
  # `local` routes go to the local table: every address of the Pod range is
  # this namespace's own, so a stand-in binds its Pod IP without an `ip addr`.
  nsip route replace local "$POD_RANGE" dev lo
  ip netns exec "$NS" sysctl -qw net.ipv4.ip_forward=1 net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0
  ip route replace blackhole "$RANGE"
  ip route replace "$POD_RANGE" via "$NS_ADDR" dev "$HOST_IF"
  check
}

down() {
  # The runtime Pods' own namespaces hang off this one.
  local n
  for n in $(ip netns list | awk '/^cfp-/ {print $1}'); do ip netns del "$n" 2>/dev/null || true; done
  ip route del "$POD_RANGE" via "$NS_ADDR" dev "$HOST_IF" 2>/dev/null || true
  ip route del blackhole "$RANGE" 2>/dev/null || true
  ip link del "$HOST_IF" 2>/dev/null || true
  if ip netns list | grep -qw "^$NS"; then ip netns del "$NS"; fi
}

check() {
  # The same rule clawfed-podrunner checks before it starts anything.
  ip route show type blackhole "$RANGE" | grep -q . ||
    die "no 'blackhole $RANGE' route in the root namespace: nothing may dial the test range before it exists (run e2e/podnet.sh up)"
  ip route show "$POD_RANGE" | grep -q "via $NS_ADDR dev $HOST_IF" ||
    die "no '$POD_RANGE via $NS_ADDR dev $HOST_IF' route in the root namespace (run e2e/podnet.sh up)"
  ip netns list | grep -qw "^$NS" || die "network namespace $NS is missing (run e2e/podnet.sh up)"
  if nsip route show default | grep -q .; then
    die "namespace $NS has a default route; Pods must reach only $HOST_ADDR"
  fi
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  check) check ;;
  *) sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
