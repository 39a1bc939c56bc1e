//! A network namespace joined to the host by a veth pair, for partition
//! tests: a process started in it reaches the host only over the pair, and
//! cutting the pair's namespace end drops every packet without closing a
//! connection (a half-open connection, as a real partition leaves).
//!
//! Addresses come from the RFC 2544 benchmarking range 198.18.0.0/15 only.
//! Needs root and iproute2 (`ip netns`, `ip link`). The namespace and the
//! pair are deleted when the guard drops, whatever the test's outcome.

use std::process::Command;

/// A created namespace; deleted on drop.
pub struct Netns {
    pub name: String,
    host_if: String,
    ns_if: String,
    /// The host end's address (without prefix length).
    pub host_addr: String,
    /// The namespace end's address (without prefix length).
    pub ns_addr: String,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Netns {
    /// Creates namespace `cf<tag><pid>` with a /30 veth pair: `host` on the
    /// host end, `ns` on the namespace end (both inside 198.18.0.0/15).
    pub fn create(tag: &str, host: [u8; 4], ns: [u8; 4]) -> Result<Self, String> {
        for a in [host, ns] {
            if !(a[0] == 198 && (a[1] == 18 || a[1] == 19)) {
                return Err(format!("{a:?} is outside 198.18.0.0/15"));
            }
        }
        let pid = std::process::id();
        let dotted = |a: [u8; 4]| format!("{}.{}.{}.{}", a[0], a[1], a[2], a[3]);
        let me = Self {
            name: format!("cf{tag}{pid}"),
            // Interface names are at most 15 bytes.
            host_if: format!("cf{tag}{pid}h"),
            ns_if: format!("cf{tag}{pid}n"),
            host_addr: dotted(host),
            ns_addr: dotted(ns),
        };
        if me.host_if.len() > 15 {
            return Err(format!("interface name {} too long", me.host_if));
        }
        ip(&["netns", "add", &me.name])?;
        // From here on, Drop cleans up whatever was made.
        ip(&[
            "link",
            "add",
            &me.host_if,
            "type",
            "veth",
            "peer",
            "name",
            &me.ns_if,
            "netns",
            &me.name,
        ])?;
        ip(&[
            "addr",
            "add",
            &format!("{}/30", me.host_addr),
            "dev",
            &me.host_if,
        ])?;
        ip(&["link", "set", &me.host_if, "up"])?;
        me.exec_ip(&[
            "addr",
            "add",
            &format!("{}/30", me.ns_addr),
            "dev",
            &me.ns_if,
        ])?;
        me.exec_ip(&["link", "set", &me.ns_if, "up"])?;
        // Loopback too: processes in the namespace bind local listeners.
        me.exec_ip(&["link", "set", "lo", "up"])?;
        Ok(me)
    }

    fn exec_ip(&self, args: &[&str]) -> Result<(), String> {
        let mut all = vec!["netns", "exec", &self.name, "ip"];
        all.extend_from_slice(args);
        ip(&all)
    }

    /// A command that runs `program` inside the namespace.
    pub fn command(&self, program: &std::path::Path) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name]).arg(program);
        c
    }

    /// Partitions: the namespace end goes down, so nothing crosses the
    /// pair and the host end sees no close, no reset, no error.
    pub fn cut(&self) -> Result<(), String> {
        self.exec_ip(&["link", "set", &self.ns_if, "down"])
    }

    /// Heals the partition (the namespace's address and route come back
    /// with the link).
    pub fn restore(&self) -> Result<(), String> {
        self.exec_ip(&["link", "set", &self.ns_if, "up"])
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting the host end deletes the pair; deleting the namespace
        // kills nothing by itself, so processes in it are stopped first by
        // their own guards (declared after this one, dropped before it).
        let _ = ip(&["link", "del", &self.host_if]);
        let _ = ip(&["netns", "del", &self.name]);
    }
}
