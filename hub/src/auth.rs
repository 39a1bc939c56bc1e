//! API tokens, roles and the permission rules. Pure: no I/O.
//!
//! A token is 32 random bytes, shown once at creation; the store keeps only
//! its SHA-256. A slow password hash is not needed: the secret is random
//! and high-entropy, not chosen by a person.

use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use utoipa::ToSchema;

/// Prefix that makes clawfed tokens recognisable (and scannable for leaks).
pub const TOKEN_PREFIX: &str = "cfd_";

/// Token id of [`Principal::system`]; no stored token has it.
const SYSTEM_TOKEN_ID: &str = "system";

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// Everything, in every namespace; the only role without a namespace.
    InstallationAdmin,
    /// Everything inside one namespace, including its audit log.
    Admin,
    /// Read, edit drafts, deploy and stop inside one namespace.
    Deployer,
    /// Read inside one namespace.
    Viewer,
}

impl Role {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InstallationAdmin => "installation-admin",
            Self::Admin => "admin",
            Self::Deployer => "deployer",
            Self::Viewer => "viewer",
        }
    }

    /// Parses the wire spelling.
    pub fn parse(s: &str) -> Option<Self> {
        [
            Self::InstallationAdmin,
            Self::Admin,
            Self::Deployer,
            Self::Viewer,
        ]
        .into_iter()
        .find(|r| r.as_str() == s)
    }
}

/// Operations the permission rules distinguish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Read tenant objects.
    Read,
    /// Create, update or delete Agent drafts and Configurations.
    EditDraft,
    /// Deploy, roll back or stop.
    Deploy,
    /// Read the audit log.
    ReadAudit,
    /// Delete a namespace.
    DeleteNamespace,
    /// Installation-wide: create namespaces, read every tenant, manage clusters.
    Installation,
}

/// The caller of an API request (or the origin of a work item).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub token_id: String,
    pub token_name: String,
    pub role: Role,
    /// The namespace a tenant token is scoped to (name); `None` for
    /// installation admins.
    pub namespace: Option<String>,
}

impl Principal {
    /// The hub's own operator commands (`clawfed-hub cluster …`), which
    /// act with installation-admin rights and are audited as `system:<name>`.
    pub fn system(name: &str) -> Self {
        Self {
            token_id: SYSTEM_TOKEN_ID.to_owned(),
            token_name: name.to_owned(),
            role: Role::InstallationAdmin,
            namespace: None,
        }
    }

    /// The hub's own operator commands ([`Principal::system`]): no API
    /// token stands behind them.
    pub fn is_system(&self) -> bool {
        self.token_id == SYSTEM_TOKEN_ID
    }

    /// How audit events name this caller.
    pub fn actor(&self) -> String {
        if self.is_system() {
            format!("system:{}", self.token_name)
        } else {
            format!("token:{}", self.token_name)
        }
    }

    /// True when the principal may see every namespace.
    pub fn is_installation_admin(&self) -> bool {
        self.role == Role::InstallationAdmin
    }

    /// Whether this principal may perform `action` on `namespace`
    /// (`None` for installation-wide objects).
    pub fn permits(&self, action: Action, namespace: Option<&str>) -> Decision {
        if self.role == Role::InstallationAdmin {
            return Decision::Allow;
        }
        let Some(scope) = self.namespace.as_deref() else {
            return Decision::Deny("token has no namespace scope".into());
        };
        match namespace {
            Some(ns) if ns == scope => {}
            Some(_) => return Decision::Deny(format!("token is scoped to namespace {scope:?}")),
            None if action == Action::Read => return Decision::Allow,
            None => return Decision::Deny("requires an installation-admin token".into()),
        }
        let allowed = match action {
            Action::Read => true,
            Action::EditDraft | Action::Deploy => matches!(self.role, Role::Admin | Role::Deployer),
            Action::ReadAudit | Action::DeleteNamespace => self.role == Role::Admin,
            Action::Installation => false,
        };
        if allowed {
            Decision::Allow
        } else {
            Decision::Deny(format!(
                "role {} may not {}",
                self.role.as_str(),
                action_verb(action)
            ))
        }
    }
}

fn action_verb(action: Action) -> &'static str {
    match action {
        Action::Read => "read",
        Action::EditDraft => "edit agents or configurations",
        Action::Deploy => "deploy or stop",
        Action::ReadAudit => "read the audit log",
        Action::DeleteNamespace => "delete the namespace",
        Action::Installation => "manage the installation",
    }
}

/// The result of a permission check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow,
    /// Denied, with the reason shown to the caller.
    Deny(String),
}

/// A freshly minted token: the secret (shown once) and its hash (stored).
#[derive(Debug)]
pub struct MintedToken {
    pub secret: String,
    pub hash: String,
}

/// Mints a new random bearer token.
pub fn mint_token() -> MintedToken {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    let secret = format!("{TOKEN_PREFIX}{}", hex::encode(bytes));
    let hash = hash_token(&secret);
    MintedToken { secret, hash }
}

/// The stored form of a token secret.
pub fn hash_token(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// Why a verified client certificate names no API token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientCertError {
    /// The certificate could not be parsed.
    #[error("client certificate is malformed")]
    Malformed,
    /// Its subject has no (UTF-8) common name.
    #[error("client certificate has no subject CN naming an API token")]
    NoCommonName,
}

/// The API token a client certificate authenticates as: its subject CN
/// names a token (`clawfed-hub token create --name <CN>`), whose role,
/// namespace scope, expiry and revocation then apply exactly as to its
/// bearer secret. The certificate is already verified against
/// `api.tls.clientCaFile` by the TLS handshake; this only reads the name.
pub fn client_cert_token_name(leaf: &[u8]) -> Result<String, ClientCertError> {
    let (_, cert) =
        x509_parser::parse_x509_certificate(leaf).map_err(|_| ClientCertError::Malformed)?;
    cert.subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .map(str::trim)
        .filter(|cn| !cn.is_empty())
        .map(str::to_owned)
        .ok_or(ClientCertError::NoCommonName)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn principal(role: Role, ns: Option<&str>) -> Principal {
        Principal {
            token_id: "t".into(),
            token_name: "t".into(),
            role,
            namespace: ns.map(str::to_owned),
        }
    }

    #[test]
    fn roles_inside_their_namespace() {
        let viewer = principal(Role::Viewer, Some("a"));
        let deployer = principal(Role::Deployer, Some("a"));
        let admin = principal(Role::Admin, Some("a"));
        assert_eq!(viewer.permits(Action::Read, Some("a")), Decision::Allow);
        assert!(matches!(
            viewer.permits(Action::Deploy, Some("a")),
            Decision::Deny(_)
        ));
        assert_eq!(deployer.permits(Action::Deploy, Some("a")), Decision::Allow);
        assert!(matches!(
            deployer.permits(Action::ReadAudit, Some("a")),
            Decision::Deny(_)
        ));
        assert_eq!(admin.permits(Action::ReadAudit, Some("a")), Decision::Allow);
        assert!(matches!(
            admin.permits(Action::Installation, None),
            Decision::Deny(_)
        ));
    }

    #[test]
    fn tenant_tokens_never_reach_another_namespace() {
        let admin = principal(Role::Admin, Some("a"));
        for action in [Action::Read, Action::EditDraft, Action::Deploy] {
            assert!(matches!(
                admin.permits(action, Some("b")),
                Decision::Deny(_)
            ));
        }
        let root = principal(Role::InstallationAdmin, None);
        assert_eq!(root.permits(Action::Deploy, Some("b")), Decision::Allow);
    }

    #[test]
    fn a_client_certificate_names_its_token_by_cn() {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "ignored");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "ci-deployer");
        let cert = params.self_signed(&key).unwrap();
        assert_eq!(
            client_cert_token_name(cert.der()).as_deref(),
            Ok("ci-deployer")
        );

        let mut params = rcgen::CertificateParams::new(vec!["x.example".into()]).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        let cert = params.self_signed(&key).unwrap();
        assert_eq!(
            client_cert_token_name(cert.der()),
            Err(ClientCertError::NoCommonName)
        );
        assert_eq!(
            client_cert_token_name(b"not a certificate"),
            Err(ClientCertError::Malformed)
        );
    }

    #[test]
    fn tokens_are_random_and_hashed() {
        let a = mint_token();
        let b = mint_token();
        assert_ne!(a.secret, b.secret);
        assert!(a.secret.starts_with(TOKEN_PREFIX));
        assert_eq!(a.hash, hash_token(&a.secret));
        assert_eq!(a.hash.len(), 64);
        assert!(!a.hash.contains(&a.secret[TOKEN_PREFIX.len()..]));
    }
}
