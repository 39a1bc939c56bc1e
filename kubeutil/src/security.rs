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
