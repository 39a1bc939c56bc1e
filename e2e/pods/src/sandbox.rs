//! The Pod sandbox of the real runtime: its own network namespace holding
//! only its Pod IP, and its volumes bind-mounted at their mount paths, as a
//! kubelet and a container runtime would give them.
//!
//! Stand-ins share the Pod network namespace and bind their Pod IP; the real
//! OpenClaw gateway binds `0.0.0.0` (`gateway.bind: lan`) and `127.0.0.1`
//! on its port, so two of them need a namespace each:
//!
//! ```text
//! clawfed-pods ns                               cfp-<uid12> ns
//!   cfv<uid12> ◄──────── veth ────────►           eth0 <pod IP>/32, lo up
//!   <pod IP>/32 dev cfv<uid12> table local        198.18.0.2 dev eth0 (link)
//!   (beats `local 198.18.128.0/17 dev lo`)        198.18.0.0/15 via 198.18.0.2
//!   ip_forward=1, rp_filter=0
//! ```
//!
//! The Pod reaches exactly what a stand-in reaches: other Pods, and
//! 198.18.0.1 in the root namespace; nothing else (no default route).
//!
//! Volumes: the process starts under `sh -c` inside the mount namespace
//! `ip netns exec` makes for it, which binds each volume's directory at its
//! mount path (read-only where the mount says so) and then execs the
//! runtime. The mounts are private to the process; the mount points are
//! created on the host as empty directories.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::{Api, Client};
use tokio::process::Command;

/// The Pod network namespace's own address: the gateway of every sandbox.
pub const PODS_NS_ADDR: &str = "198.18.0.2";
/// The test range: everything a sandbox may reach goes through the Pod
/// network namespace.
pub const TEST_RANGE: &str = "198.18.0.0/15";

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An `ip` command failed.
    #[error("`ip {args}` failed: {stderr}")]
    Ip { args: String, stderr: String },
    /// `ip` could not be run.
    #[error("running `ip {args}`")]
    IpSpawn {
        args: String,
        #[source]
        source: std::io::Error,
    },
    /// A volume the runtime cannot get.
    #[error("{field}: {reason}")]
    Volume { field: String, reason: String },
    /// A mount path the shell prelude cannot carry.
    #[error("{field}: path {path:?} must be absolute, without '..', quotes or newlines")]
    BadPath { field: String, path: String },
    /// Reading a claim or volume failed.
    #[error("reading {what}")]
    Fetch {
        what: String,
        #[source]
        source: Box<kube::Error>,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The sandbox's names, from the Pod uid (12 hex digits keep the veth name
/// within the 15 characters Linux allows).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    /// The network namespace: `cfp-<uid12>`.
    pub netns: String,
    /// The veth end in the Pod network namespace: `cfv<uid12>`.
    pub veth: String,
}

pub fn names(uid: &str) -> Names {
    let short: String = uid
        .chars()
        .filter(char::is_ascii_hexdigit)
        .take(12)
        .collect::<String>()
        .to_ascii_lowercase();
    Names {
        netns: format!("cfp-{short}"),
        veth: format!("cfv{short}"),
    }
}

async fn ip(ip_cmd: &Path, args: &[&str]) -> Result<()> {
    let joined = args.join(" ");
    let out = Command::new(ip_cmd)
        .args(args)
        .output()
        .await
        .map_err(|source| Error::IpSpawn {
            args: joined.clone(),
            source,
        })?;
    if out.status.success() {
        return Ok(());
    }
    Err(Error::Ip {
        args: joined,
        stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
    })
}

/// Creates the sandbox's network namespace with `pod_ip`, replacing one a
/// stopped runner left behind.
pub async fn setup_network(
    ip_cmd: &Path,
    pods_netns: &str,
    uid: &str,
    pod_ip: Ipv4Addr,
) -> Result<Names> {
    let n = names(uid);
    teardown_network(ip_cmd, uid).await;
    let pod_ip = pod_ip.to_string();
    let host_addr = format!("{pod_ip}/32");
    // Forwarding between the sandboxes and the root end; reverse-path
    // filtering would drop a sandbox's packets arriving on its veth.
    for sysctl in [
        "net.ipv4.ip_forward=1",
        "net.ipv4.conf.all.rp_filter=0",
        "net.ipv4.conf.default.rp_filter=0",
    ] {
        ip(
            ip_cmd,
            &["netns", "exec", pods_netns, "sysctl", "-qw", sysctl],
        )
        .await?;
    }
    ip(ip_cmd, &["netns", "add", &n.netns]).await?;
    let steps: [&[&str]; 8] = [
        &[
            "-n", pods_netns, "link", "add", &n.veth, "type", "veth", "peer", "name", "eth0",
            "netns", &n.netns,
        ],
        &["-n", pods_netns, "link", "set", &n.veth, "up"],
        &["-n", &n.netns, "link", "set", "lo", "up"],
        &["-n", &n.netns, "link", "set", "eth0", "up"],
        &["-n", &n.netns, "addr", "add", &host_addr, "dev", "eth0"],
        &[
            "-n",
            &n.netns,
            "route",
            "add",
            PODS_NS_ADDR,
            "dev",
            "eth0",
            "scope",
            "link",
        ],
        &[
            "-n",
            &n.netns,
            "route",
            "add",
            TEST_RANGE,
            "via",
            PODS_NS_ADDR,
            "dev",
            "eth0",
        ],
        // The local table: longer than the namespace's `local /17`, so the
        // Pod IP leaves through the veth instead of being delivered to lo.
        &[
            "-n", pods_netns, "route", "replace", &host_addr, "dev", &n.veth, "table", "local",
        ],
    ];
    for args in steps {
        if let Err(e) = ip(ip_cmd, args).await {
            teardown_network(ip_cmd, uid).await;
            return Err(e);
        }
    }
    Ok(n)
}

/// Removes the sandbox's network namespace (its veth and route go with
/// it). Absent is fine.
pub async fn teardown_network(ip_cmd: &Path, uid: &str) {
    let n = names(uid);
    let _ = ip(ip_cmd, &["netns", "del", &n.netns]).await;
}

/// One bind mount of a volume at its mount path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindMount {
    pub source: PathBuf,
    pub target: PathBuf,
    pub read_only: bool,
}

/// Where each volume of the first container comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VolumeSource {
    /// Secret and ConfigMap files, written under the container root at the
    /// mount path by [`crate::env::volume_files`].
    Files,
    /// An emptyDir: a directory of the Pod's state, kept across restarts of
    /// the container, removed with the Pod.
    EmptyDir,
    /// A claim: the host directory of its bound volume.
    Claim(String),
}

/// The volume kind of each mount of the first container, in mount order.
/// Other kinds (projected tokens, ...) are not given to the runtime.
pub fn mount_sources(pod: &Pod) -> Result<Vec<(usize, VolumeSource)>> {
    let spec = pod.spec.as_ref();
    let volumes = spec.and_then(|s| s.volumes.as_ref());
    let Some(c) = spec.and_then(|s| s.containers.first()) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for (i, m) in c.volume_mounts.iter().flatten().enumerate() {
        let field = format!("spec.containers[0].volumeMounts[{i}]");
        if m.sub_path.as_deref().is_some_and(|s| !s.is_empty()) {
            return Err(Error::Volume {
                field: format!("{field}.subPath"),
                reason: "not supported by the pod runner".into(),
            });
        }
        let Some(v) = volumes.into_iter().flatten().find(|v| v.name == m.name) else {
            return Err(Error::Volume {
                field: format!("{field}.name"),
                reason: format!("no volume named {:?}", m.name),
            });
        };
        let source = if v.secret.is_some() || v.config_map.is_some() {
            VolumeSource::Files
        } else if v.empty_dir.is_some() {
            VolumeSource::EmptyDir
        } else if let Some(pvc) = &v.persistent_volume_claim {
            VolumeSource::Claim(pvc.claim_name.clone())
        } else {
            continue;
        };
        out.push((i, source));
    }
    Ok(out)
}

/// The host directory of claim `namespace/name`: the `hostPath` of the
/// PersistentVolume it is bound to (created when missing, as
/// `DirectoryOrCreate`). An unbound claim is an error the caller retries.
pub async fn claim_dir(client: &Client, namespace: &str, name: &str) -> Result<PathBuf> {
    let fetch = |what: String| {
        move |e: kube::Error| Error::Fetch {
            what,
            source: Box::new(e),
        }
    };
    let claim = Api::<PersistentVolumeClaim>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .map_err(fetch(format!("PersistentVolumeClaim {namespace}/{name}")))?;
    let field = format!("persistentVolumeClaim {namespace}/{name}");
    let Some(claim) = claim else {
        return Err(Error::Volume {
            field,
            reason: "not found".into(),
        });
    };
    let bound = claim.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
    let volume = claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.clone())
        .filter(|_| bound);
    let Some(volume) = volume else {
        return Err(Error::Volume {
            field,
            reason: "not bound to a volume yet".into(),
        });
    };
    let pv = Api::<PersistentVolume>::all(client.clone())
        .get(&volume)
        .await
        .map_err(fetch(format!("PersistentVolume {volume}")))?;
    let path = pv
        .spec
        .and_then(|s| s.host_path)
        .map(|h| PathBuf::from(h.path))
        .filter(|p| p.is_absolute());
    let Some(path) = path else {
        return Err(Error::Volume {
            field: format!("PersistentVolume {volume}"),
            reason: "the pod runner mounts only hostPath volumes".into(),
        });
    };
    std::fs::create_dir_all(&path).map_err(|e| Error::Volume {
        field: format!("PersistentVolume {volume} hostPath {}", path.display()),
        reason: e.to_string(),
    })?;
    Ok(path)
}

fn checked(field: &str, path: &Path) -> Result<String> {
    let s = path.to_string_lossy();
    let bad = !path.is_absolute()
        || s.contains(['\'', '\n', '\0'])
        || path
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir));
    if bad {
        return Err(Error::BadPath {
            field: field.to_string(),
            path: s.into_owned(),
        });
    }
    Ok(s.into_owned())
}

/// The shell run before the runtime: create each mount point, bind the
/// volume there, remount read-only where asked, then `exec "$@"`.
pub fn prelude(mounts: &[BindMount]) -> Result<String> {
    let mut script = String::from("set -e\n");
    for (i, m) in mounts.iter().enumerate() {
        let field = format!("mount {i}");
        let src = checked(&field, &m.source)?;
        let dst = checked(&field, &m.target)?;
        script.push_str(&format!("mkdir -p '{dst}'\nmount --bind '{src}' '{dst}'\n"));
        if m.read_only {
            script.push_str(&format!("mount -o remount,bind,ro '{dst}'\n"));
        }
    }
    script.push_str("exec \"$@\"\n");
    Ok(script)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_fit_linux_interface_names() {
        let n = names("3f2a9c1e-77b0-4e5d-9a61-0c2b8e4f1a2b");
        assert_eq!(n.netns, "cfp-3f2a9c1e77b0");
        assert_eq!(n.veth, "cfv3f2a9c1e77b0");
        assert!(n.veth.len() <= 15);
    }

    #[test]
    fn mounts_map_to_their_volume_kinds() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "uid": "u"},
            "spec": {
                "containers": [{"name": "c", "image": "clawfed.test/openclaw:1", "volumeMounts": [
                    {"name": "config", "mountPath": "/etc/openclaw", "readOnly": true},
                    {"name": "state", "mountPath": "/var/lib/openclaw"},
                    {"name": "tmp", "mountPath": "/tmp"},
                    {"name": "token", "mountPath": "/var/run/secrets/x"}
                ]}],
                "volumes": [
                    {"name": "config", "configMap": {"name": "cm"}},
                    {"name": "state", "persistentVolumeClaim": {"claimName": "a-workspace"}},
                    {"name": "tmp", "emptyDir": {}},
                    {"name": "token", "projected": {"sources": []}}
                ]
            }
        }))
        .unwrap();
        assert_eq!(
            mount_sources(&pod).unwrap(),
            vec![
                (0, VolumeSource::Files),
                (1, VolumeSource::Claim("a-workspace".into())),
                (2, VolumeSource::EmptyDir),
            ]
        );
    }

    #[test]
    fn the_prelude_binds_then_execs_and_refuses_odd_paths() {
        let script = prelude(&[
            BindMount {
                source: "/state/root/etc/openclaw".into(),
                target: "/etc/openclaw".into(),
                read_only: true,
            },
            BindMount {
                source: "/claims/a".into(),
                target: "/var/lib/openclaw".into(),
                read_only: false,
            },
        ])
        .unwrap();
        assert_eq!(
            script,
            "set -e\nmkdir -p '/etc/openclaw'\nmount --bind '/state/root/etc/openclaw' '/etc/openclaw'\n\
             mount -o remount,bind,ro '/etc/openclaw'\nmkdir -p '/var/lib/openclaw'\n\
             mount --bind '/claims/a' '/var/lib/openclaw'\nexec \"$@\"\n"
        );
        for bad in ["relative", "/a/../b", "/it's"] {
            assert!(
                prelude(&[BindMount {
                    source: "/s".into(),
                    target: bad.into(),
                    read_only: false
                }])
                .is_err(),
                "{bad}"
            );
        }
    }
}
