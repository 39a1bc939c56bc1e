//! Addresses: the runner's Pod CIDR, the IP allocator, and the route check
//! that must hold before anything dials the test range.
//!
//! Everything here is pure except [`check_routes`], which reads
//! `ip -j route` once.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

use serde::Deserialize;

/// The whole benchmarking range (RFC 2544): the blackhole route covers it.
pub const TEST_RANGE: Cidr = Cidr {
    base: Ipv4Addr::new(198, 18, 0, 0),
    prefix: 15,
};
/// The Pod part of it, routed into the Pod namespace; every Pod CIDR lies
/// inside.
pub const POD_RANGE: Cidr = Cidr {
    base: Ipv4Addr::new(198, 18, 128, 0),
    prefix: 17,
};
/// The namespace end of the veth pair (the via-route's gateway).
pub const NS_GATEWAY: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
/// The root end of the veth pair.
pub const HOST_IF: &str = "cfpods0";

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `--pod-cidr` is not `a.b.c.d/n`.
    #[error("pod-cidr {value:?} is not an IPv4 CIDR (a.b.c.d/n): {reason}")]
    BadCidr { value: String, reason: &'static str },
    /// The CIDR lies (partly) outside the routed Pod range.
    #[error(
        "pod-cidr {0} is not inside {POD_RANGE}: only that range is routed into the Pod namespace"
    )]
    OutsidePodRange(Cidr),
    /// Every address of the CIDR is taken.
    #[error("pod-cidr {0} has no free address left")]
    Exhausted(Cidr),
    /// `ip -j route` could not run.
    #[error("running `ip -j route`")]
    RouteCommand(#[source] std::io::Error),
    /// `ip -j route` failed or printed something that is not its JSON.
    #[error("`ip -j route` gave no usable output: {0}")]
    RouteOutput(String),
    /// The routes that keep the test range on this machine are missing.
    #[error("{0} (run e2e/podnet.sh up)")]
    RoutesMissing(String),
}

type Result<T, E = Error> = std::result::Result<T, E>;

/// An IPv4 network, base address masked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    base: Ipv4Addr,
    prefix: u8,
}

impl Cidr {
    fn mask(prefix: u8) -> u32 {
        if prefix == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(prefix))
        }
    }

    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        u32::from(ip) & Self::mask(self.prefix) == u32::from(self.base)
    }

    /// True if every address of `other` is in `self`.
    pub fn covers(&self, other: &Cidr) -> bool {
        other.prefix >= self.prefix && self.contains(other.base)
    }

    pub fn size(&self) -> u32 {
        1u32 << (32 - u32::from(self.prefix))
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.base, self.prefix)
    }
}

impl FromStr for Cidr {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let bad = |reason| Error::BadCidr {
            value: s.to_string(),
            reason,
        };
        let (ip, prefix) = s.split_once('/').ok_or_else(|| bad("no /prefix"))?;
        let ip: Ipv4Addr = ip.parse().map_err(|_| bad("bad address"))?;
        let prefix: u8 = prefix.parse().map_err(|_| bad("bad prefix length"))?;
        if prefix > 32 {
            return Err(bad("prefix length above 32"));
        }
        if u32::from(ip) & !Self::mask(prefix) != 0 {
            return Err(bad("host bits set"));
        }
        Ok(Cidr { base: ip, prefix })
    }
}

/// A Pod CIDR the runner may hand out: inside [`POD_RANGE`].
pub fn pod_cidr(s: &str) -> Result<Cidr> {
    let c: Cidr = s.parse()?;
    if !POD_RANGE.covers(&c) {
        return Err(Error::OutsidePodRange(c));
    }
    Ok(c)
}

/// Hands out Pod IPs of one CIDR, one per Pod uid. The network and
/// broadcast addresses are never given; a released address is reused only
/// after the rest of the range has been offered (so a late packet for a gone
/// Pod rarely meets its successor).
#[derive(Debug)]
pub struct Allocator {
    cidr: Cidr,
    by_uid: HashMap<String, Ipv4Addr>,
    by_ip: BTreeMap<Ipv4Addr, String>,
    next: u32,
}

impl Allocator {
    pub fn new(cidr: Cidr) -> Self {
        Self {
            cidr,
            by_uid: HashMap::new(),
            by_ip: BTreeMap::new(),
            next: 1,
        }
    }

    pub fn get(&self, uid: &str) -> Option<Ipv4Addr> {
        self.by_uid.get(uid).copied()
    }

    /// Keeps `ip` for `uid` (a Pod that already had it before a restart).
    /// False if `ip` is outside the CIDR or held by another Pod.
    pub fn reserve(&mut self, uid: &str, ip: Ipv4Addr) -> bool {
        if !self.cidr.contains(ip) || !self.usable(ip) {
            return false;
        }
        match self.by_ip.get(&ip) {
            Some(owner) => owner == uid,
            None => {
                if let Some(old) = self.by_uid.insert(uid.to_string(), ip) {
                    self.by_ip.remove(&old);
                }
                self.by_ip.insert(ip, uid.to_string());
                true
            }
        }
    }

    /// The address of `uid`, allocating one if it has none.
    pub fn allocate(&mut self, uid: &str) -> Result<Ipv4Addr> {
        if let Some(ip) = self.get(uid) {
            return Ok(ip);
        }
        let size = self.cidr.size();
        for _ in 0..size {
            let offset = self.next % size;
            self.next = self.next.wrapping_add(1);
            let ip = Ipv4Addr::from(u32::from(self.cidr.base) + offset);
            if self.usable(ip) && !self.by_ip.contains_key(&ip) {
                self.by_uid.insert(uid.to_string(), ip);
                self.by_ip.insert(ip, uid.to_string());
                return Ok(ip);
            }
        }
        Err(Error::Exhausted(self.cidr))
    }

    pub fn release(&mut self, uid: &str) {
        if let Some(ip) = self.by_uid.remove(uid) {
            self.by_ip.remove(&ip);
        }
    }

    fn usable(&self, ip: Ipv4Addr) -> bool {
        let offset = u32::from(ip) - u32::from(self.cidr.base);
        self.cidr.size() < 4 || (offset != 0 && offset != self.cidr.size() - 1)
    }
}

#[derive(Debug, Deserialize)]
struct Route {
    #[serde(rename = "type")]
    kind: Option<String>,
    dst: Option<String>,
    gateway: Option<String>,
    dev: Option<String>,
}

/// What `e2e/podnet.sh check` checks, on the JSON of `ip -j route`: the
/// blackhole for the whole test range and the via-route of the Pod range
/// into the namespace.
pub fn routes_ok(ip_j_route: &str) -> Result<()> {
    let routes: Vec<Route> = serde_json::from_str(ip_j_route)
        .map_err(|e| Error::RouteOutput(format!("not JSON: {e}")))?;
    let range = TEST_RANGE.to_string();
    let pods = POD_RANGE.to_string();
    let gateway = NS_GATEWAY.to_string();
    if !routes
        .iter()
        .any(|r| r.kind.as_deref() == Some("blackhole") && r.dst.as_deref() == Some(&range))
    {
        return Err(Error::RoutesMissing(format!(
            "no `blackhole {range}` route in the root namespace, so an address of the test range could leave the machine"
        )));
    }
    if !routes.iter().any(|r| {
        r.kind.is_none()
            && r.dst.as_deref() == Some(&pods)
            && r.gateway.as_deref() == Some(&gateway)
            && r.dev.as_deref() == Some(HOST_IF)
    }) {
        return Err(Error::RoutesMissing(format!(
            "no `{pods} via {gateway} dev {HOST_IF}` route in the root namespace"
        )));
    }
    Ok(())
}

/// Runs `ip -j route` (the main table of the root namespace) and checks it.
pub fn check_routes(ip: &std::path::Path) -> Result<()> {
    let out = std::process::Command::new(ip)
        .args(["-j", "route"])
        .output()
        .map_err(Error::RouteCommand)?;
    if !out.status.success() {
        return Err(Error::RouteOutput(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ));
    }
    routes_ok(&String::from_utf8_lossy(&out.stdout))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_cidr_must_be_inside_the_routed_range() {
        assert!(pod_cidr("198.18.176.0/20").is_ok());
        assert!(matches!(
            pod_cidr("198.18.0.0/20"),
            Err(Error::OutsidePodRange(_))
        ));
        assert!(matches!(
            pod_cidr("10.64.0.0/16"),
            Err(Error::OutsidePodRange(_))
        ));
        assert!(matches!(
            pod_cidr("198.18.0.0/15"),
            Err(Error::OutsidePodRange(_))
        ));
        assert!(matches!(
            pod_cidr("198.18.176.1/20"),
            Err(Error::BadCidr { .. })
        ));
        assert!(matches!(
            pod_cidr("198.18.176.0"),
            Err(Error::BadCidr { .. })
        ));
    }

    #[test]
    fn allocator_skips_network_and_broadcast_and_keeps_reservations() {
        let mut a = Allocator::new("198.18.144.0/30".parse().unwrap());
        assert!(a.reserve("old", Ipv4Addr::new(198, 18, 144, 1)));
        assert!(!a.reserve("other", Ipv4Addr::new(198, 18, 144, 1)));
        assert!(!a.reserve("x", Ipv4Addr::new(198, 18, 144, 0)));
        assert!(!a.reserve("x", Ipv4Addr::new(198, 18, 160, 1)));
        assert_eq!(a.allocate("new").unwrap(), Ipv4Addr::new(198, 18, 144, 2));
        assert_eq!(a.allocate("new").unwrap(), Ipv4Addr::new(198, 18, 144, 2));
        assert!(matches!(a.allocate("third"), Err(Error::Exhausted(_))));
        a.release("old");
        assert_eq!(a.allocate("third").unwrap(), Ipv4Addr::new(198, 18, 144, 1));
    }

    #[test]
    fn allocator_does_not_reuse_a_released_address_at_once() {
        let mut a = Allocator::new("198.18.144.0/20".parse().unwrap());
        let first = a.allocate("a").unwrap();
        a.release("a");
        assert_ne!(a.allocate("b").unwrap(), first);
    }

    #[test]
    fn route_check_wants_blackhole_and_via_route() {
        let good = r#"[{"dst":"default","gateway":"192.0.2.1","dev":"eth0","flags":[]},
            {"dst":"198.18.0.0/30","dev":"cfpods0","protocol":"kernel","scope":"link","prefsrc":"198.18.0.1","flags":[]},
            {"type":"blackhole","dst":"198.18.0.0/15","flags":[]},
            {"dst":"198.18.128.0/17","gateway":"198.18.0.2","dev":"cfpods0","flags":[]}]"#;
        routes_ok(good).unwrap();
        let no_blackhole =
            r#"[{"dst":"198.18.128.0/17","gateway":"198.18.0.2","dev":"cfpods0","flags":[]}]"#;
        let e = routes_ok(no_blackhole).unwrap_err().to_string();
        assert!(e.contains("blackhole 198.18.0.0/15"), "{e}");
        let no_via = r#"[{"type":"blackhole","dst":"198.18.0.0/15","flags":[]},
            {"dst":"198.18.128.0/17","gateway":"198.18.0.2","dev":"eth0","flags":[]}]"#;
        let e = routes_ok(no_via).unwrap_err().to_string();
        assert!(e.contains("via 198.18.0.2 dev cfpods0"), "{e}");
        assert!(matches!(routes_ok("garbage"), Err(Error::RouteOutput(_))));
    }
}
