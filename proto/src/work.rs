//! Typed work specs carried in `clawfed.link.v1.Work.spec` (JSON, camelCase,
//! unknown fields rejected), one struct per [`WorkKind`]. Pure: no I/O.
//!
//! Work is level-based: each spec is the full desired state of its target, so
//! applying the same generation twice is harmless.
//!
//! The specs themselves are in `namespace_work` and `harness_work`; work
//! targets, generations, and the names and paths hub and spoke share are
//! the submodules below.

pub mod codex;
pub mod credential;
pub mod generation;
pub mod harness;
mod harness_work;
mod namespace_work;
pub mod runtime;
pub mod target;

use std::fmt;

pub use self::harness_work::{
    AppServer, DigestError, ExecutionMode, HarnessWork, Predecessor, Resources, RevisionWork,
    SecretData, ServicePrincipal, Toleration, Workspace, check_image_digest,
};
pub use self::namespace_work::{
    ContainerDefaults, DnsTarget, EgressRule, HarnessNetwork, NamespaceDeleteWork, NamespaceWork,
};

/// `Work.kind` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WorkKind {
    /// Ensure the tenant's data-plane namespace ([`NamespaceWork`]).
    NamespaceEnsure,
    /// Tear the tenant's data-plane namespace down ([`NamespaceDeleteWork`]).
    NamespaceDelete,
    /// Apply one Harness revision ([`HarnessWork`]).
    HarnessApply,
    /// Stop one Harness revision, keeping PVC and credential Secret
    /// ([`RevisionWork`]).
    HarnessStop,
    /// Retire one Harness revision: the destructive cleanup of its own
    /// objects; the Agent-owned workspace claim goes only when the Agent was
    /// deleted ([`RevisionWork`]).
    HarnessRetire,
}

impl WorkKind {
    /// Every kind.
    pub const ALL: [WorkKind; 5] = [
        WorkKind::NamespaceEnsure,
        WorkKind::NamespaceDelete,
        WorkKind::HarnessApply,
        WorkKind::HarnessStop,
        WorkKind::HarnessRetire,
    ];

    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkKind::NamespaceEnsure => "namespace.ensure",
            WorkKind::NamespaceDelete => "namespace.delete",
            WorkKind::HarnessApply => "harness.apply",
            WorkKind::HarnessStop => "harness.stop",
            WorkKind::HarnessRetire => "harness.retire",
        }
    }

    /// Parses the wire string.
    pub fn parse(s: &str) -> Option<WorkKind> {
        WorkKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

impl fmt::Display for WorkKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A decoded work spec.
#[derive(Debug, Clone, PartialEq)]
pub enum WorkSpec {
    /// `namespace.ensure`.
    NamespaceEnsure(NamespaceWork),
    /// `namespace.delete`.
    NamespaceDelete(NamespaceDeleteWork),
    /// `harness.apply`.
    HarnessApply(Box<HarnessWork>),
    /// `harness.stop`.
    HarnessStop(RevisionWork),
    /// `harness.retire`.
    HarnessRetire(RevisionWork),
}

/// Why a work spec cannot be decoded.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// `Work.kind` is not one of [`WorkKind`].
    #[error("unknown work kind {0:?}")]
    UnknownKind(String),
    /// The JSON does not match the kind's spec.
    #[error("invalid {kind} spec: {source}")]
    Json {
        /// The kind.
        kind: WorkKind,
        /// The decoding error.
        #[source]
        source: serde_json::Error,
    },
}

impl WorkSpec {
    /// Decodes `spec` as the spec of `kind`.
    pub fn decode(kind: &str, spec: &[u8]) -> Result<WorkSpec, SpecError> {
        let k = WorkKind::parse(kind).ok_or_else(|| SpecError::UnknownKind(kind.to_string()))?;
        let err = |source| SpecError::Json { kind: k, source };
        Ok(match k {
            WorkKind::NamespaceEnsure => {
                WorkSpec::NamespaceEnsure(serde_json::from_slice(spec).map_err(err)?)
            }
            WorkKind::NamespaceDelete => {
                WorkSpec::NamespaceDelete(serde_json::from_slice(spec).map_err(err)?)
            }
            WorkKind::HarnessApply => {
                WorkSpec::HarnessApply(Box::new(serde_json::from_slice(spec).map_err(err)?))
            }
            WorkKind::HarnessStop => {
                WorkSpec::HarnessStop(serde_json::from_slice(spec).map_err(err)?)
            }
            WorkKind::HarnessRetire => {
                WorkSpec::HarnessRetire(serde_json::from_slice(spec).map_err(err)?)
            }
        })
    }

    /// The kind.
    pub fn kind(&self) -> WorkKind {
        match self {
            WorkSpec::NamespaceEnsure(_) => WorkKind::NamespaceEnsure,
            WorkSpec::NamespaceDelete(_) => WorkKind::NamespaceDelete,
            WorkSpec::HarnessApply(_) => WorkKind::HarnessApply,
            WorkSpec::HarnessStop(_) => WorkKind::HarnessStop,
            WorkSpec::HarnessRetire(_) => WorkKind::HarnessRetire,
        }
    }

    /// Encodes the spec as the JSON carried in `Work.spec`.
    pub fn encode(&self) -> Vec<u8> {
        let r = match self {
            WorkSpec::NamespaceEnsure(s) => serde_json::to_vec(s),
            WorkSpec::NamespaceDelete(s) => serde_json::to_vec(s),
            WorkSpec::HarnessApply(s) => serde_json::to_vec(s),
            WorkSpec::HarnessStop(s) | WorkSpec::HarnessRetire(s) => serde_json::to_vec(s),
        };
        // These types serialize infallibly (string keys, no custom impls that fail).
        r.unwrap_or_default()
    }
}

fn default_harness_port() -> i32 {
    harness::DEFAULT_PORT
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_round_trip_and_reject_garbage() {
        use target::Target;
        for t in [target::namespace("ns-1"), target::harness("ns-1", "a1", 3)] {
            assert_eq!(t.parse::<Target>().unwrap().to_string(), t);
        }
        assert_eq!(
            "harness/ns-1/a1/3".parse::<Target>().unwrap(),
            Target::Harness {
                namespace_id: "ns-1".into(),
                agent: "a1".into(),
                revision: 3
            }
        );
        for bad in [
            "",
            "namespace/",
            "harness/ns/a1",
            "harness/ns/a1/x",
            "pod/x",
            "harness/ns/a1/1/2",
        ] {
            assert!(bad.parse::<Target>().is_err(), "{bad}");
        }
        assert_eq!(
            harness::service_url("a1", 3, "oce-x", 8080),
            "http://a1-r3-harness.oce-x.svc:8080"
        );
    }

    #[test]
    fn kinds_round_trip() {
        for k in WorkKind::ALL {
            assert_eq!(WorkKind::parse(k.as_str()), Some(k));
        }
        assert_eq!(WorkKind::parse("harness.delete"), None);
    }

    #[test]
    fn harness_spec_decodes_camel_case_with_defaults() {
        let json = br#"{
            "tenant": "team-a", "namespaceId": "ns-1", "dataPlaneNamespace": "oce-x",
            "agent": "a1", "revision": 2, "revisionId": "rev-2",
            "image": "reg.example/agent@sha256:0000000000000000000000000000000000000000000000000000000000000000",
            "requireDigest": true,
            "requirementLabels": {"sandbox.io/class": "gvisor"},
            "credential": {"CLAWFED_MODEL_API_KEY": "s3cret"},
            "execution": "provider",
            "predecessors": [{"revision": 1, "revisionId": "rev-1"}]
        }"#;
        let WorkSpec::HarnessApply(h) = WorkSpec::decode("harness.apply", json).expect("decodes")
        else {
            panic!("kind")
        };
        assert_eq!(h.port, 8080);
        assert_eq!(h.execution, ExecutionMode::Provider);
        assert_eq!(h.predecessors[0].execution, ExecutionMode::Ordinary);
        assert!(
            !format!("{h:?}").contains("s3cret"),
            "secret redacted in Debug"
        );
        let again = WorkSpec::decode("harness.apply", &WorkSpec::HarnessApply(h.clone()).encode())
            .expect("round trip");
        assert_eq!(again, WorkSpec::HarnessApply(h));
    }

    #[test]
    fn unknown_fields_and_kinds_are_rejected() {
        let err = WorkSpec::decode(
            "namespace.ensure",
            br#"{"tenant":"t","namespaceId":"i","surprise":1}"#,
        )
        .expect_err("unknown field");
        assert!(err.to_string().contains("surprise"), "{err}");
        assert!(matches!(
            WorkSpec::decode("nope", b"{}"),
            Err(SpecError::UnknownKind(_))
        ));
    }

    #[test]
    fn credential_kinds_round_trip_and_map_to_secret_keys() {
        use credential::{CredentialKind, MODEL_API_KEY, SERVICE_ACCOUNT_CREDENTIAL};
        for k in CredentialKind::ALL {
            assert_eq!(CredentialKind::parse(k.as_str()), Some(k));
        }
        assert_eq!(CredentialKind::parse("password"), None);
        assert_eq!(CredentialKind::ModelApiKey.secret_key(), MODEL_API_KEY);
        assert_eq!(MODEL_API_KEY, "CLAWFED_MODEL_API_KEY");
        assert_eq!(
            CredentialKind::ServiceAccount.secret_key(),
            SERVICE_ACCOUNT_CREDENTIAL
        );
        use crate::kinds::HarnessKind;
        assert!(CredentialKind::ServiceAccount.allowed_for(HarnessKind::DedicatedCodex));
        assert!(!CredentialKind::ServiceAccount.allowed_for(HarnessKind::DedicatedOpenclaw));
        assert!(CredentialKind::ModelApiKey.allowed_for(HarnessKind::EmbeddedOpenclaw));
    }

    #[test]
    fn digests() {
        let hex = "a".repeat(64);
        assert!(check_image_digest(&format!("reg/agent@sha256:{hex}")).is_ok());
        assert!(check_image_digest("reg/agent:1.0").is_err());
        assert!(check_image_digest(&format!("@sha256:{hex}")).is_err());
        assert!(check_image_digest(&format!("reg/agent@sha256:{}", "A".repeat(64))).is_err());
        assert!(check_image_digest("reg/agent@sha256:abc").is_err());
    }
}
