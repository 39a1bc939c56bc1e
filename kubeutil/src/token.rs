//! The service principal credential of a workload: a projected,
//! audience-bound ServiceAccount token, mounted read-only. The Pod keeps
//! `automountServiceAccountToken: false`, so this token (for the audience
//! the installation names) is the only one it ever sees. Pure.

use k8s_openapi::api::core::v1::{
    ProjectedVolumeSource, ServiceAccountTokenProjection, Volume, VolumeMount, VolumeProjection,
};

/// Name of the projected volume in the Pod.
pub const VOLUME: &str = "service-principal";
/// The shortest lifetime the apiserver accepts for a projected token.
pub const MIN_EXPIRATION_SECONDS: i64 = 600;
/// The longest lifetime clawfed asks for (the kubelet rotates well before).
pub const MAX_EXPIRATION_SECONDS: i64 = 86_400;

/// A token lifetime out of range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0} is not between {MIN_EXPIRATION_SECONDS} and {MAX_EXPIRATION_SECONDS} seconds")]
pub struct ExpirationError(pub i64);

/// Checks a token lifetime against what the apiserver accepts.
pub fn check_expiration(seconds: i64) -> Result<(), ExpirationError> {
    if (MIN_EXPIRATION_SECONDS..=MAX_EXPIRATION_SECONDS).contains(&seconds) {
        Ok(())
    } else {
        Err(ExpirationError(seconds))
    }
}

/// The projected volume: one token for `audience`, valid `seconds`, in the
/// file `file`, readable by the Pod's fsGroup only (0440).
pub fn volume(audience: &str, seconds: i64, file: &str) -> Volume {
    Volume {
        name: VOLUME.into(),
        projected: Some(ProjectedVolumeSource {
            default_mode: Some(0o440),
            sources: Some(vec![VolumeProjection {
                service_account_token: Some(ServiceAccountTokenProjection {
                    audience: Some(audience.to_string()),
                    expiration_seconds: Some(seconds),
                    path: file.to_string(),
                    ..Default::default()
                }),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The read-only mount of [`volume`] at `dir`.
pub fn mount(dir: &str) -> VolumeMount {
    VolumeMount {
        name: VOLUME.into(),
        mount_path: dir.to_string(),
        read_only: Some(true),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_audience_bound_token_mounted_read_only() {
        let v = volume("openclaw.example", 900, "token");
        let p = v.projected.expect("projected");
        let sources = p.sources.expect("sources");
        assert_eq!(sources.len(), 1);
        let t = sources[0].service_account_token.clone().expect("token");
        assert_eq!(t.audience.as_deref(), Some("openclaw.example"));
        assert_eq!(t.expiration_seconds, Some(900));
        assert_eq!(t.path, "token");
        assert_eq!(mount("/x").read_only, Some(true));
        assert!(check_expiration(900).is_ok());
        assert!(check_expiration(599).is_err());
        assert!(check_expiration(86_401).is_err());
    }
}
