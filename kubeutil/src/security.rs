//! The hardened security context of every clawfed workload (Harness and
//! Gateway): non-root, RuntimeDefault seccomp, all capabilities dropped, no
//! privilege escalation, not privileged, read-only root filesystem. One
//! definition, so the two workloads cannot drift apart.

use k8s_openapi::api::core::v1::{
    Capabilities, PodSecurityContext, SeccompProfile, SecurityContext,
};

/// The container runtime's default seccomp profile.
pub fn runtime_default_seccomp() -> SeccompProfile {
    SeccompProfile {
        type_: "RuntimeDefault".into(),
        localhost_profile: None,
    }
}

/// A Localhost seccomp profile at `path`, relative to the kubelet's seccomp
/// root (check it with [`check_localhost_profile`] first).
pub fn localhost_seccomp(path: &str) -> SeccompProfile {
    SeccompProfile {
        type_: "Localhost".into(),
        localhost_profile: Some(path.to_string()),
    }
}

/// A Localhost profile path the kubelet can resolve and nobody can steer
/// out of its seccomp root.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path:?} is not a relative seccomp profile path ({reason})")]
pub struct ProfilePathError {
    /// The path given.
    pub path: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// Accepts `profiles/codex.json`-like paths: relative, no `..` or empty
/// components, no whitespace or control characters, at most 255 bytes.
pub fn check_localhost_profile(path: &str) -> Result<(), ProfilePathError> {
    let bad = |reason| {
        Err(ProfilePathError {
            path: path.to_string(),
            reason,
        })
    };
    if path.is_empty() || path.len() > 255 {
        return bad("must be 1 to 255 bytes");
    }
    if path.starts_with('/') {
        return bad("must be relative to the kubelet's seccomp root");
    }
    if path.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return bad("must not contain whitespace");
    }
    if path
        .split('/')
        .any(|part| part.is_empty() || part == ".." || part == ".")
    {
        return bad("must not contain empty, '.' or '..' components");
    }
    Ok(())
}

/// The Pod-level context: non-root as `uid` (user, group and fsGroup, so a
/// mounted volume is writable by it), RuntimeDefault seccomp.
pub fn hardened_pod(uid: i64) -> PodSecurityContext {
    PodSecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(uid),
        run_as_group: Some(uid),
        fs_group: Some(uid),
        seccomp_profile: Some(runtime_default_seccomp()),
        ..Default::default()
    }
}

/// The container-level context: non-root, no privilege escalation, not
/// privileged, read-only root filesystem, every capability dropped,
/// RuntimeDefault seccomp.
pub fn hardened_container() -> SecurityContext {
    SecurityContext {
        run_as_non_root: Some(true),
        allow_privilege_escalation: Some(false),
        privileged: Some(false),
        read_only_root_filesystem: Some(true),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            add: None,
        }),
        seccomp_profile: Some(runtime_default_seccomp()),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_context_is_non_root_with_runtime_default_seccomp() {
        let p = hardened_pod(65532);
        assert_eq!(p.run_as_non_root, Some(true));
        assert_eq!(
            (p.run_as_user, p.run_as_group, p.fs_group),
            (Some(65532), Some(65532), Some(65532))
        );
        assert_eq!(
            p.seccomp_profile.map(|s| s.type_).as_deref(),
            Some("RuntimeDefault")
        );
        assert_eq!(p.sysctls, None);
    }

    #[test]
    fn localhost_profiles_must_stay_under_the_seccomp_root() {
        assert_eq!(check_localhost_profile("profiles/codex.json"), Ok(()));
        assert_eq!(check_localhost_profile("codex.json"), Ok(()));
        for bad in [
            "",
            "/etc/seccomp/codex.json",
            "../codex.json",
            "profiles/../../x",
            "profiles//x",
            "./x",
            "a b",
        ] {
            assert!(check_localhost_profile(bad).is_err(), "{bad}");
        }
        let p = localhost_seccomp("profiles/codex.json");
        assert_eq!(p.type_, "Localhost");
        assert_eq!(p.localhost_profile.as_deref(), Some("profiles/codex.json"));
    }

    #[test]
    fn container_context_drops_everything() {
        let c = hardened_container();
        assert_eq!(c.run_as_non_root, Some(true));
        assert_eq!(c.allow_privilege_escalation, Some(false));
        assert_eq!(c.privileged, Some(false));
        assert_eq!(c.read_only_root_filesystem, Some(true));
        let caps = c.capabilities.expect("capabilities");
        assert_eq!(caps.drop, Some(vec!["ALL".to_string()]));
        assert_eq!(caps.add, None);
        assert_eq!(
            c.seccomp_profile.map(|s| s.type_).as_deref(),
            Some("RuntimeDefault")
        );
    }
}
