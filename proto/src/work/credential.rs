//! The managed credentials of an Agent and the keys they are projected
//! under in the Harness credential Secret (`<agent>-r<N>-credentials`,
//! which the Harness Pod reads with `envFrom`). The hub holds the values
//! write-only and encrypted; the spoke writes them only into that Secret.

use crate::kinds::HarnessKind;
use std::fmt;

/// Key of the model API key in the Harness Secret (and so the Harness
/// container's environment variable). Prefixed: the OpenClaw runtime
/// installs the plugin of any official provider whose variable it finds
/// set (`MODEL_API_KEY` is the Meta provider's), from npm, at start.
pub const MODEL_API_KEY: &str = "CLAWFED_MODEL_API_KEY";
/// Key of the service-account credential (dedicated Codex only).
pub const SERVICE_ACCOUNT_CREDENTIAL: &str = "SERVICE_ACCOUNT_CREDENTIAL";

/// The kinds of managed credential an Agent can hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CredentialKind {
    /// `model-api-key`: the model provider's API key.
    ModelApiKey,
    /// `service-account`: a service-account credential, accepted for
    /// dedicated Codex Agents only.
    ServiceAccount,
}

impl CredentialKind {
    /// Every kind.
    pub const ALL: [CredentialKind; 2] =
        [CredentialKind::ModelApiKey, CredentialKind::ServiceAccount];

    /// The wire spelling (API paths, JSON, CLI `--kind`).
    pub fn as_str(self) -> &'static str {
        match self {
            CredentialKind::ModelApiKey => "model-api-key",
            CredentialKind::ServiceAccount => "service-account",
        }
    }

    /// Parses the wire spelling.
    pub fn parse(s: &str) -> Option<CredentialKind> {
        CredentialKind::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// The key the value is projected under in the Harness Secret.
    pub fn secret_key(self) -> &'static str {
        match self {
            CredentialKind::ModelApiKey => MODEL_API_KEY,
            CredentialKind::ServiceAccount => SERVICE_ACCOUNT_CREDENTIAL,
        }
    }

    /// Whether a Harness of `harness_kind` may hold this kind.
    pub fn allowed_for(self, harness_kind: HarnessKind) -> bool {
        match self {
            CredentialKind::ModelApiKey => true,
            CredentialKind::ServiceAccount => harness_kind == HarnessKind::DedicatedCodex,
        }
    }

    /// The kinds as a human list, for error messages.
    pub fn expected() -> String {
        CredentialKind::ALL.map(CredentialKind::as_str).join(", ")
    }
}

impl fmt::Display for CredentialKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
