//! The kinds both sides name: which Harness runs an Agent and who owns its
//! workload. The hub's API, its store and the work it sends use these
//! spellings; the spoke reads them off the work.
//!
//! `HarnessWork.harness_kind` stays a string on the wire, so a spoke
//! labels a kind a newer hub introduced instead of refusing the work.

use serde::{Deserialize, Serialize};

/// Which Harness runs the Agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "kebab-case")]
pub enum HarnessKind {
    EmbeddedOpenclaw,
    DedicatedOpenclaw,
    DedicatedCodex,
}

impl HarnessKind {
    /// The wire spelling, as in JSON and gRPC.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::EmbeddedOpenclaw => "embedded-openclaw",
            Self::DedicatedOpenclaw => "dedicated-openclaw",
            Self::DedicatedCodex => "dedicated-codex",
        }
    }

    /// Parses the wire spelling.
    pub fn parse(s: &str) -> Option<Self> {
        [
            Self::EmbeddedOpenclaw,
            Self::DedicatedOpenclaw,
            Self::DedicatedCodex,
        ]
        .into_iter()
        .find(|k| k.as_str() == s)
    }

    /// Whether a new revision replaces its predecessors exclusively (each
    /// stopped and confirmed before the new Harness starts). Every kind
    /// does: each keeps its state on the Agent-owned ReadWriteOnce claim,
    /// which one runtime at a time may mount (for embedded OpenClaw this is
    /// the seed's Recreate rollout of the Agent's gateway; for dedicated
    /// ones its exclusive preparation contract).
    pub fn replaces_exclusively(self) -> bool {
        true
    }

    /// Dedicated Harnesses own RWO workspace storage, so a replacement stops
    /// its predecessor before it starts.
    pub fn is_dedicated(self) -> bool {
        !matches!(self, Self::EmbeddedOpenclaw)
    }

    /// Dedicated runtimes get a separate Gateway in the control cluster;
    /// embedded OpenClaw runs its gateway inside the data-plane workload.
    pub fn has_control_gateway(self) -> bool {
        self.is_dedicated()
    }

    /// The Harness is the OpenClaw runtime: it gets the Agent's
    /// Configuration as its config file and answers model turns.
    pub fn is_openclaw(self) -> bool {
        matches!(self, Self::EmbeddedOpenclaw | Self::DedicatedOpenclaw)
    }
}

/// Who owns the Harness workload in the execution cluster.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "kebab-case")]
pub enum ExecutionMode {
    /// An ordinary Deployment applied by the spoke.
    #[default]
    Ordinary,
    /// A SandboxDriver provider owns the Harness.
    Provider,
}

impl ExecutionMode {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ordinary => "ordinary",
            Self::Provider => "provider",
        }
    }

    /// Parses the wire spelling.
    pub fn parse(s: &str) -> Option<Self> {
        [Self::Ordinary, Self::Provider]
            .into_iter()
            .find(|k| k.as_str() == s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wire_spellings_round_trip() {
        for k in [
            HarnessKind::EmbeddedOpenclaw,
            HarnessKind::DedicatedOpenclaw,
            HarnessKind::DedicatedCodex,
        ] {
            assert_eq!(HarnessKind::parse(k.as_str()), Some(k));
            assert_eq!(
                serde_json::to_value(k).unwrap(),
                serde_json::json!(k.as_str())
            );
        }
        for m in [ExecutionMode::Ordinary, ExecutionMode::Provider] {
            assert_eq!(ExecutionMode::parse(m.as_str()), Some(m));
            assert_eq!(
                serde_json::to_value(m).unwrap(),
                serde_json::json!(m.as_str())
            );
        }
        assert_eq!(HarnessKind::parse("openclaw-native"), None);
    }
}
