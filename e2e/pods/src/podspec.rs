//! What the runner reads from a Pod: whether it is a stand-in Pod, which
//! program runs it (a stand-in binary or the real OpenClaw runtime), its
//! listen port, readiness probe and grace period. Pure.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// Images under this prefix are the project's stand-ins; kwok's stages skip
/// them and the runner runs them.
pub const STANDIN_PREFIX: &str = "clawfed.test/";
/// The image of the real OpenClaw runtime: `clawfed.test/openclaw:<version>`
/// runs `openclaw` of that version from `e2e/openclaw.sh`'s install.
pub const OPENCLAW_IMAGE: &str = "clawfed.test/openclaw";
/// The runtime's arguments when the container gives none (its image's
/// default command).
pub const OPENCLAW_DEFAULT_ARGS: [&str; 2] = ["gateway", "run"];
/// The image of the Codex CLI: `clawfed.test/codex:<version>` runs `codex`
/// of that version (the `@openai/codex` the OpenClaw install carries).
pub const CODEX_IMAGE: &str = "clawfed.test/codex";
/// Its arguments when the container gives none.
pub const CODEX_DEFAULT_ARGS: [&str; 1] = ["app-server"];

/// Probe timing: every 200 ms until the first success, then every
/// `periodSeconds`, at most this often apart.
pub const FAST_PROBE: Duration = Duration::from_millis(200);
pub const MAX_PROBE_PERIOD: Duration = Duration::from_secs(2);
/// A probe attempt's own timeout is capped too (default 1 s, as Kubernetes).
pub const MAX_PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// Grace between SIGTERM and SIGKILL, capped so tests never wait long.
pub const MAX_GRACE: Duration = Duration::from_secs(5);

/// Errors of this module: a stand-in Pod the runner cannot run as written.
/// Each names the field at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// `spec.containers` is empty.
    #[error("spec.containers is empty")]
    NoContainer,
    /// The cluster pulls only from its registry mirror, and the image is
    /// not there (an air-gapped cluster reaches no other registry).
    #[error(
        "spec.containers[0].image {image:?}: this cluster pulls only from its registry mirror {mirror}/ (air-gapped: no other registry is reachable)"
    )]
    NotFromMirror { image: String, mirror: String },
    /// The image names no known stand-in binary.
    #[error(
        "spec.containers[0].image {0:?}: not a stand-in image (want clawfed.test/<name>-standin[:tag|@digest], clawfed.test/openclaw:<version> or clawfed.test/codex:<version>)"
    )]
    NotAStandin(String),
    /// A runtime image without its version tag.
    #[error("spec.containers[0].image {0:?}: the runtime image needs its version as the tag")]
    NoRuntimeVersion(String),
    /// `command` on a runtime container: the image's entrypoint is fixed.
    #[error(
        "spec.containers[0].command: the runtime image runs its program (openclaw or codex); give its arguments in args"
    )]
    RuntimeCommand,
    /// The first container has no port to listen on.
    #[error("spec.containers[0].ports: a stand-in needs a containerPort to listen on")]
    NoPort,
    /// A port number outside 1..=65535.
    #[error("{field}: port {value} is outside 1..=65535")]
    BadPort { field: String, value: i32 },
    /// A named probe port that the container does not declare.
    #[error("{field}: no containerPort named {name:?}")]
    UnknownPortName { field: String, name: String },
    /// A probe kind the runner does not implement.
    #[error("spec.containers[0].readinessProbe: only httpGet (HTTP) and tcpSocket are supported")]
    UnsupportedProbe,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Which registry the cluster's Pods pull from: any (the stand-in images
/// are taken as they are), or only a mirror (an air-gapped cluster): then
/// every Pod is the runner's, an image under `<mirror>/` runs as the image
/// after it, and any other image is refused as unpullable (kwok's stages
/// make no Pod Ready in such a cluster; see e2e/cluster.sh).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Registry {
    mirror: Option<String>,
}

impl Registry {
    /// Pods pull only from `mirror` (a registry host, e.g.
    /// `mirror.airgap.test`).
    pub fn mirror_only(mirror: &str) -> Self {
        Self {
            mirror: Some(mirror.trim_end_matches('/').to_owned()),
        }
    }

    /// Whether the runner runs (or refuses) this Pod rather than kwok.
    pub fn runs(&self, pod: &Pod) -> bool {
        match &self.mirror {
            Some(_) => first_container(pod).is_some(),
            None => is_standin(pod),
        }
    }

    /// The image as pulled: the mirror's prefix removed; refused when the
    /// cluster is mirror-only and the image is not from the mirror.
    pub fn pulled(&self, image: &str) -> Result<String> {
        let Some(mirror) = &self.mirror else {
            return Ok(image.to_owned());
        };
        image
            .strip_prefix(mirror.as_str())
            .and_then(|rest| rest.strip_prefix('/'))
            .map(str::to_owned)
            .ok_or_else(|| Error::NotFromMirror {
                image: image.to_owned(),
                mirror: mirror.clone(),
            })
    }
}

/// True for Pods whose first container runs a stand-in image.
pub fn is_standin(pod: &Pod) -> bool {
    first_container(pod).is_some_and(|c| {
        c.image
            .as_deref()
            .is_some_and(|i| i.starts_with(STANDIN_PREFIX))
    })
}

pub fn first_container(pod: &Pod) -> Option<&Container> {
    pod.spec.as_ref().and_then(|s| s.containers.first())
}

/// `clawfed.test/harness-standin@sha256:...` or `...:tag` ->
/// `harness-standin`. Only `<lowercase>-standin` names map to a binary, so
/// an image can never name the runner itself or a path.
pub fn binary_name(image: &str) -> Result<String> {
    let not = || Error::NotAStandin(image.to_string());
    let rest = image.strip_prefix(STANDIN_PREFIX).ok_or_else(not)?;
    let name = rest.split(['@', ':']).next().unwrap_or_default();
    let valid = name.ends_with("-standin")
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !valid {
        return Err(not());
    }
    Ok(name.to_string())
}

/// The program behind a Pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Program {
    /// A stand-in binary of the runner's stand-in dir.
    Standin { binary: String },
    /// The real OpenClaw runtime of this version, with these arguments.
    OpenClaw { version: String, args: Vec<String> },
    /// The Codex CLI of this version, with these arguments.
    Codex { version: String, args: Vec<String> },
}

impl Program {
    /// True for the real runtimes (run in a sandbox of their own).
    pub fn is_runtime(&self) -> bool {
        !matches!(self, Program::Standin { .. })
    }
}

/// The program an image names: `clawfed.test/openclaw:<version>` is the
/// real runtime (arguments from `args`, else `gateway run`),
/// `clawfed.test/codex:<version>` the Codex CLI (else `app-server`); any
/// other `clawfed.test/<name>-standin` is that stand-in binary.
pub fn program(c: &Container) -> Result<Program> {
    let image = c.image.clone().unwrap_or_default();
    let (rest, defaults, codex) = if let Some(rest) = image.strip_prefix(OPENCLAW_IMAGE) {
        (rest, &OPENCLAW_DEFAULT_ARGS[..], false)
    } else if let Some(rest) = image.strip_prefix(CODEX_IMAGE) {
        (rest, &CODEX_DEFAULT_ARGS[..], true)
    } else {
        return Ok(Program::Standin {
            binary: binary_name(&image)?,
        });
    };
    // `clawfed.test/openclawx:1` is some other image, not this one.
    if !(rest.is_empty() || rest.starts_with([':', '@'])) {
        return Err(Error::NotAStandin(image));
    }
    // `:<version>`, optionally pinned too (`:<version>@sha256:<hex>`).
    let version = rest
        .strip_prefix(':')
        .map(|v| v.split_once('@').map_or(v, |(tag, _)| tag))
        .filter(|v| !v.is_empty() && !v.contains(['@', '/']))
        .ok_or_else(|| Error::NoRuntimeVersion(image.clone()))?
        .to_string();
    if c.command.as_ref().is_some_and(|c| !c.is_empty()) {
        return Err(Error::RuntimeCommand);
    }
    let args = match &c.args {
        Some(a) if !a.is_empty() => a.clone(),
        _ => defaults.iter().map(|a| a.to_string()).collect(),
    };
    Ok(if codex {
        Program::Codex { version, args }
    } else {
        Program::OpenClaw { version, args }
    })
}

/// What to check for readiness.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeTarget {
    Http { port: u16, path: String },
    Tcp { port: u16 },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbePlan {
    pub target: ProbeTarget,
    /// Between probes once the first one passed.
    pub period: Duration,
    pub timeout: Duration,
    /// Consecutive failures that turn a Ready container unready.
    pub failure_threshold: u32,
}

/// Everything the runner needs from a stand-in Pod's spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunPlan {
    pub container: String,
    pub image: String,
    pub program: Program,
    pub port: u16,
    pub probe: ProbePlan,
    pub grace: Duration,
}

/// The plan for `pod`, its image pulled from `registry`.
pub fn run_plan(pod: &Pod, registry: &Registry) -> Result<RunPlan> {
    let c = first_container(pod).ok_or(Error::NoContainer)?;
    let image = c.image.clone().unwrap_or_default();
    let pulled = Container {
        image: Some(registry.pulled(&image)?),
        ..c.clone()
    };
    let program = program(&pulled)?;
    let first = c.ports.iter().flatten().next().ok_or(Error::NoPort)?;
    let port = port_number(
        "spec.containers[0].ports[0].containerPort",
        first.container_port,
    )?;
    let probe = probe_plan(c, port)?;
    let grace = pod
        .spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds)
        .map(|s| Duration::from_secs(s.max(0).unsigned_abs()))
        .unwrap_or(MAX_GRACE)
        .min(MAX_GRACE);
    Ok(RunPlan {
        container: c.name.clone(),
        image,
        program,
        port,
        probe,
        grace,
    })
}

fn port_number(field: &str, value: i32) -> Result<u16> {
    u16::try_from(value)
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| Error::BadPort {
            field: field.to_string(),
            value,
        })
}

fn resolve_port(c: &Container, field: &str, port: &IntOrString) -> Result<u16> {
    match port {
        IntOrString::Int(n) => port_number(field, *n),
        IntOrString::String(name) => {
            if let Ok(n) = name.parse::<i32>() {
                return port_number(field, n);
            }
            let p = c
                .ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some(name.as_str()))
                .ok_or_else(|| Error::UnknownPortName {
                    field: field.to_string(),
                    name: name.clone(),
                })?;
            port_number(field, p.container_port)
        }
    }
}

fn secs(v: Option<i32>, default: u64, cap: Duration) -> Duration {
    let s = v.map(|s| s.max(1).unsigned_abs().into()).unwrap_or(default);
    Duration::from_secs(s).min(cap)
}

/// The container's readinessProbe; with none, a TCP connect to the listen
/// port (a stand-in is ready once it accepts connections).
fn probe_plan(c: &Container, listen_port: u16) -> Result<ProbePlan> {
    let Some(p) = &c.readiness_probe else {
        return Ok(ProbePlan {
            target: ProbeTarget::Tcp { port: listen_port },
            period: MAX_PROBE_PERIOD,
            timeout: Duration::from_secs(1),
            failure_threshold: 3,
        });
    };
    Ok(ProbePlan {
        target: probe_target(c, p)?,
        period: secs(p.period_seconds, 10, MAX_PROBE_PERIOD),
        timeout: secs(p.timeout_seconds, 1, MAX_PROBE_TIMEOUT),
        failure_threshold: p.failure_threshold.map_or(3, |n| n.max(1).unsigned_abs()),
    })
}

fn probe_target(c: &Container, p: &Probe) -> Result<ProbeTarget> {
    if let Some(h) = &p.http_get {
        if h.scheme.as_deref().is_some_and(|s| s != "HTTP") {
            return Err(Error::UnsupportedProbe);
        }
        let port = resolve_port(c, "spec.containers[0].readinessProbe.httpGet.port", &h.port)?;
        let path = h.path.clone().filter(|p| !p.is_empty());
        return Ok(ProbeTarget::Http {
            port,
            path: path.unwrap_or_else(|| "/".to_string()),
        });
    }
    if let Some(t) = &p.tcp_socket {
        let port = resolve_port(
            c,
            "spec.containers[0].readinessProbe.tcpSocket.port",
            &t.port,
        )?;
        return Ok(ProbeTarget::Tcp { port });
    }
    Err(Error::UnsupportedProbe)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(container: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "uid": "u1"},
            "spec": {"containers": [container]}
        }))
        .unwrap()
    }

    #[test]
    fn image_maps_to_its_standin_binary_only() {
        assert_eq!(
            binary_name(&format!(
                "clawfed.test/harness-standin@sha256:{}",
                "a".repeat(64)
            ))
            .unwrap(),
            "harness-standin"
        );
        assert_eq!(
            binary_name("clawfed.test/gateway-standin:latest").unwrap(),
            "gateway-standin"
        );
        assert_eq!(
            binary_name("clawfed.test/harness-standin").unwrap(),
            "harness-standin"
        );
        for bad in [
            "clawfed.test/clawfed-podrunner:1",
            "clawfed.test/../bin/sh-standin",
            "clawfed.test/",
            "registry.example/harness-standin:1",
        ] {
            assert!(
                matches!(binary_name(bad), Err(Error::NotAStandin(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn only_first_container_image_decides() {
        assert!(is_standin(&pod(
            json!({"name": "c", "image": "clawfed.test/harness-standin:test"})
        )));
        assert!(!is_standin(&pod(
            json!({"name": "c", "image": "registry.example/x:1"})
        )));
    }

    #[test]
    fn a_mirror_only_cluster_runs_mirrored_images_and_refuses_the_rest() {
        let mirror = Registry::mirror_only("mirror.airgap.test");
        let c = |image: &str| {
            pod(json!({"name": "c", "image": image,
                       "ports": [{"containerPort": 8080}]}))
        };
        let mirrored = c("mirror.airgap.test/clawfed.test/harness-standin@sha256:ab");
        assert!(mirror.runs(&mirrored));
        let plan = run_plan(&mirrored, &mirror).unwrap();
        assert_eq!(
            plan.program,
            Program::Standin {
                binary: "harness-standin".into()
            }
        );
        assert_eq!(
            plan.image, "mirror.airgap.test/clawfed.test/harness-standin@sha256:ab",
            "the status names the image as written"
        );
        // Not from the mirror: refused (not run, not left to kwok).
        for image in [
            "clawfed.test/harness-standin:x",
            "registry.example/app:1",
            "mirror.airgap.test.evil/clawfed.test/harness-standin:x",
        ] {
            let p = c(image);
            assert!(mirror.runs(&p), "{image}");
            assert!(
                matches!(run_plan(&p, &mirror), Err(Error::NotFromMirror { .. })),
                "{image}"
            );
        }
        // Without a mirror, a mirrored name is no stand-in.
        assert!(!Registry::default().runs(&mirrored));
        assert!(Registry::default().runs(&c("clawfed.test/harness-standin:x")));
    }

    #[test]
    fn plan_reads_port_probe_and_grace() {
        let mut p = pod(json!({
            "name": "harness", "image": "clawfed.test/harness-standin:test",
            "ports": [{"name": "http", "containerPort": 8080}],
            "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"},
                               "periodSeconds": 30, "failureThreshold": 2}
        }));
        p.spec.as_mut().unwrap().termination_grace_period_seconds = Some(30);
        let plan = run_plan(&p, &Registry::default()).unwrap();
        assert_eq!(
            plan.program,
            Program::Standin {
                binary: "harness-standin".into()
            }
        );
        assert_eq!(plan.port, 8080);
        assert_eq!(
            plan.probe.target,
            ProbeTarget::Http {
                port: 8080,
                path: "/healthz".into()
            }
        );
        assert_eq!(plan.probe.period, MAX_PROBE_PERIOD);
        assert_eq!(plan.probe.failure_threshold, 2);
        assert_eq!(plan.grace, MAX_GRACE);
    }

    #[test]
    fn the_runtime_image_runs_openclaw_of_its_version() {
        let c = |v: serde_json::Value| -> Container { serde_json::from_value(v).unwrap() };
        assert_eq!(
            program(&c(
                json!({"name": "c", "image": "clawfed.test/openclaw:2026.9.6"})
            ))
            .unwrap(),
            Program::OpenClaw {
                version: "2026.9.6".into(),
                args: vec!["gateway".into(), "run".into()]
            }
        );
        assert_eq!(
            program(&c(
                json!({"name": "c", "image": "clawfed.test/openclaw:1", "args": ["gateway", "run", "--verbose"]})
            ))
            .unwrap(),
            Program::OpenClaw {
                version: "1".into(),
                args: vec!["gateway".into(), "run".into(), "--verbose".into()]
            }
        );
        assert_eq!(
            program(&c(
                json!({"name": "c", "image": "clawfed.test/codex:0.154.0", "args": ["app-server", "--listen", "ws://0.0.0.0:8080"]})
            ))
            .unwrap(),
            Program::Codex {
                version: "0.154.0".into(),
                args: vec!["app-server".into(), "--listen".into(), "ws://0.0.0.0:8080".into()]
            }
        );
        let pinned = format!("clawfed.test/openclaw:2026.9.6@sha256:{}", "ab".repeat(32));
        assert_eq!(
            program(&c(json!({"name": "c", "image": pinned}))).unwrap(),
            Program::OpenClaw {
                version: "2026.9.6".into(),
                args: vec!["gateway".into(), "run".into()]
            },
            "a digest beside the version tag"
        );
        assert_eq!(
            program(&c(json!({"name": "c", "image": "clawfed.test/codex:1"}))).unwrap(),
            Program::Codex {
                version: "1".into(),
                args: vec!["app-server".into()]
            }
        );
        for (image, want) in [
            ("clawfed.test/codex", "needs its version"),
            ("clawfed.test/codexx:1", "not a stand-in image"),
            ("clawfed.test/openclaw", "needs its version"),
            ("clawfed.test/openclaw:", "needs its version"),
            ("clawfed.test/openclaw@sha256:ab", "needs its version"),
            ("clawfed.test/openclawx:1", "not a stand-in image"),
        ] {
            let e = program(&c(json!({"name": "c", "image": image}))).unwrap_err();
            assert!(e.to_string().contains(want), "{image}: {e}");
        }
        let e = program(&c(
            json!({"name": "c", "image": "clawfed.test/openclaw:1", "command": ["sh"]}),
        ))
        .unwrap_err();
        assert_eq!(e, Error::RuntimeCommand);
    }

    #[test]
    fn no_probe_means_tcp_on_the_listen_port() {
        let p = pod(
            json!({"name": "c", "image": "clawfed.test/harness-standin:test",
                           "ports": [{"containerPort": 9000}]}),
        );
        assert_eq!(
            run_plan(&p, &Registry::default()).unwrap().probe.target,
            ProbeTarget::Tcp { port: 9000 }
        );
    }

    #[test]
    fn bad_specs_name_the_field() {
        let no_port = pod(json!({"name": "c", "image": "clawfed.test/harness-standin:test"}));
        assert_eq!(run_plan(&no_port, &Registry::default()), Err(Error::NoPort));
        let unknown = pod(
            json!({"name": "c", "image": "clawfed.test/harness-standin:test",
            "ports": [{"containerPort": 8080}],
            "readinessProbe": {"tcpSocket": {"port": "admin"}}}),
        );
        let e = run_plan(&unknown, &Registry::default()).unwrap_err();
        assert!(
            e.to_string()
                .contains("readinessProbe.tcpSocket.port: no containerPort named \"admin\""),
            "{e}"
        );
        let exec = pod(
            json!({"name": "c", "image": "clawfed.test/harness-standin:test",
            "ports": [{"containerPort": 8080}],
            "readinessProbe": {"exec": {"command": ["true"]}}}),
        );
        assert_eq!(
            run_plan(&exec, &Registry::default()),
            Err(Error::UnsupportedProbe)
        );
    }
}
