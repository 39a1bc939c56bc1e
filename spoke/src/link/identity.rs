//! The spoke's link identity: a private key it generated itself and the
//! certificate the hub signed for it. Kept in a file (local runs) or in a
//! Kubernetes Secret in the spoke's own namespace (in cluster). The key
//! never leaves the execution cluster: the hub only ever sees CSRs.

use std::path::PathBuf;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, Patch, PatchParams};
use serde::{Deserialize, Serialize};

/// Errors of identity handling.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// Key or CSR generation failed.
    #[error("key generation: {0}")]
    Key(#[from] rcgen::Error),
    /// The identity file could not be read or written.
    #[error("identity file {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The stored identity is unreadable.
    #[error("stored identity is corrupt: {0}")]
    Corrupt(String),
    /// The identity Secret could not be read or written.
    #[error("identity secret: {0}")]
    Kube(#[from] kube::Error),
    /// The certificate the hub returned is unusable.
    #[error("certificate from the hub is unusable: {0}")]
    BadCertificate(String),
}

/// A key and the certificate for it.
#[derive(Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Identity {
    pub cluster_id: String,
    pub key_pem: String,
    pub cert_pem: String,
    pub not_before: DateTime<Utc>,
    pub not_after: DateTime<Utc>,
    /// When the spoke received the certificate. The hub backdates
    /// `not_before` for clock skew, so the lifetime is measured from here.
    #[serde(default = "Utc::now")]
    pub received_at: DateTime<Utc>,
}

impl std::fmt::Debug for Identity {
    // Never print the key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identity")
            .field("cluster_id", &self.cluster_id)
            .field("not_before", &self.not_before)
            .field("not_after", &self.not_after)
            .finish_non_exhaustive()
    }
}

impl Identity {
    /// Builds an identity from a freshly signed certificate.
    pub fn new(
        cluster_id: String,
        key_pem: String,
        cert_pem: String,
    ) -> Result<Self, IdentityError> {
        let (not_before, not_after) = validity(&cert_pem)?;
        Ok(Self {
            cluster_id,
            key_pem,
            cert_pem,
            not_before,
            not_after,
            received_at: Utc::now(),
        })
    }

    /// When to renew: at two thirds of the certificate's lifetime, counted
    /// from when it was received.
    pub fn renew_at(&self) -> DateTime<Utc> {
        let start = self.received_at.max(self.not_before);
        start + (self.not_after - start) * 2 / 3
    }

    /// Seconds until the certificate expires (negative when it has).
    pub fn seconds_to_expiry(&self) -> i64 {
        (self.not_after - Utc::now()).num_seconds()
    }
}

fn validity(cert_pem: &str) -> Result<(DateTime<Utc>, DateTime<Utc>), IdentityError> {
    use rustls_pki_types::pem::PemObject;
    let der = rustls_pki_types::CertificateDer::from_pem_slice(cert_pem.as_bytes())
        .map_err(|e| IdentityError::BadCertificate(e.to_string()))?;
    let (_, cert) = x509_parser::parse_x509_certificate(&der)
        .map_err(|e| IdentityError::BadCertificate(e.to_string()))?;
    let v = cert.validity();
    let from = |t: x509_parser::time::ASN1Time| {
        DateTime::from_timestamp(t.timestamp(), 0)
            .ok_or_else(|| IdentityError::BadCertificate("validity out of range".into()))
    };
    Ok((from(v.not_before)?, from(v.not_after)?))
}

/// A new key and a CSR for it (PEM). The CSR carries no names: the hub
/// decides the identity.
pub fn new_key_and_csr() -> Result<(String, String), IdentityError> {
    let key = rcgen::KeyPair::generate()?;
    let csr = rcgen::CertificateParams::new(Vec::<String>::new())?
        .serialize_request(&key)?
        .pem()?;
    Ok((key.serialize_pem(), csr))
}

/// Where the identity is kept.
#[async_trait]
pub trait IdentityStore: Send + Sync + std::fmt::Debug {
    /// The stored identity, if any.
    async fn load(&self) -> Result<Option<Identity>, IdentityError>;
    /// Stores `identity` durably, replacing the previous one.
    async fn save(&self, identity: &Identity) -> Result<(), IdentityError>;
}

/// A JSON file, mode 0600, written atomically.
#[derive(Debug, Clone)]
pub struct FileIdentityStore {
    path: PathBuf,
}

impl FileIdentityStore {
    /// `dir/identity.json`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            path: dir.into().join("identity.json"),
        }
    }
}

#[async_trait]
impl IdentityStore for FileIdentityStore {
    async fn load(&self) -> Result<Option<Identity>, IdentityError> {
        match tokio::fs::read(&self.path).await {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| IdentityError::Corrupt(e.to_string())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(IdentityError::Io {
                path: self.path.clone(),
                source,
            }),
        }
    }

    async fn save(&self, identity: &Identity) -> Result<(), IdentityError> {
        let path = self.path.clone();
        let bytes = serde_json::to_vec_pretty(identity)
            .map_err(|e| IdentityError::Corrupt(e.to_string()))?;
        tokio::task::spawn_blocking(move || write_private_atomic(&path, &bytes))
            .await
            .map_err(|e| IdentityError::Corrupt(e.to_string()))?
    }
}

fn write_private_atomic(path: &std::path::Path, bytes: &[u8]) -> Result<(), IdentityError> {
    use std::io::Write;
    let io = |source| IdentityError::Io {
        path: path.to_owned(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let tmp = path.with_extension("json.tmp");
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(&tmp).map_err(io)?;
    file.write_all(bytes).map_err(io)?;
    file.sync_all().map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

/// Kept in memory only, so it is lost with the process. For tests and for
/// load generators that run thousands of spokes in one process
/// (`link-bench`), where a file per spoke is not what is measured.
#[derive(Debug, Default)]
pub struct MemoryIdentityStore {
    identity: std::sync::Mutex<Option<Identity>>,
}

impl MemoryIdentityStore {
    /// An empty store: the link enrolls on its first start.
    pub fn new() -> Self {
        Self::default()
    }

    /// A store that already holds `identity` (enrolled before).
    pub fn with_identity(identity: Identity) -> Self {
        Self {
            identity: std::sync::Mutex::new(Some(identity)),
        }
    }

    /// What is stored now, without going through the async trait.
    pub fn current(&self) -> Option<Identity> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Identity>> {
        // Held only to copy a value in or out: a panic elsewhere cannot
        // leave it half-written.
        self.identity.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl IdentityStore for MemoryIdentityStore {
    async fn load(&self) -> Result<Option<Identity>, IdentityError> {
        Ok(self.current())
    }

    async fn save(&self, identity: &Identity) -> Result<(), IdentityError> {
        *self.lock() = Some(identity.clone());
        Ok(())
    }
}

/// A Secret in the spoke's own namespace (server-side applied).
#[derive(Clone)]
pub struct SecretIdentityStore {
    api: Api<Secret>,
    name: String,
}

impl std::fmt::Debug for SecretIdentityStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretIdentityStore")
            .field("name", &self.name)
            .finish()
    }
}

impl SecretIdentityStore {
    /// The Secret `name` in `namespace`.
    pub fn new(client: kube::Client, namespace: &str, name: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            name: name.to_owned(),
        }
    }
}

#[async_trait]
impl IdentityStore for SecretIdentityStore {
    async fn load(&self) -> Result<Option<Identity>, IdentityError> {
        let Some(secret) = self.api.get_opt(&self.name).await? else {
            return Ok(None);
        };
        let data = secret.data.unwrap_or_default();
        match data.get("identity.json") {
            Some(ByteString(bytes)) => serde_json::from_slice(bytes)
                .map(Some)
                .map_err(|e| IdentityError::Corrupt(e.to_string())),
            None => Ok(None),
        }
    }

    async fn save(&self, identity: &Identity) -> Result<(), IdentityError> {
        let bytes =
            serde_json::to_vec(identity).map_err(|e| IdentityError::Corrupt(e.to_string()))?;
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                labels: Some(
                    [(
                        clawfed_proto::labels::MANAGED_BY.to_owned(),
                        clawfed_proto::labels::MANAGER.to_owned(),
                    )]
                    .into(),
                ),
                ..Default::default()
            },
            type_: Some("Opaque".into()),
            data: Some([("identity.json".to_owned(), ByteString(bytes))].into()),
            ..Default::default()
        };
        self.api
            .patch(
                &self.name,
                &PatchParams::apply("clawfed-spoke").force(),
                &Patch::Apply(&secret),
            )
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn self_signed(cluster_id: &str) -> Identity {
        let (key_pem, _) = new_key_and_csr().unwrap();
        let key = rcgen::KeyPair::from_pem(&key_pem).unwrap();
        let cert = rcgen::CertificateParams::new(vec!["x".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        Identity::new(cluster_id.into(), key_pem, cert.pem()).unwrap()
    }

    #[tokio::test]
    async fn memory_store_starts_empty_and_keeps_the_latest_identity() {
        let store = MemoryIdentityStore::new();
        assert!(store.load().await.unwrap().is_none());
        let first = self_signed("c1");
        store.save(&first).await.unwrap();
        let loaded = store.load().await.unwrap().unwrap();
        assert_eq!(
            (loaded.cluster_id.as_str(), loaded.cert_pem.as_str()),
            ("c1", first.cert_pem.as_str())
        );
        // A renewal replaces the previous identity.
        let renewed = self_signed("c1");
        store.save(&renewed).await.unwrap();
        assert_eq!(store.current().unwrap().key_pem, renewed.key_pem);
        assert_ne!(renewed.key_pem, first.key_pem);

        let preloaded = MemoryIdentityStore::with_identity(first.clone());
        assert_eq!(
            preloaded.load().await.unwrap().unwrap().key_pem,
            first.key_pem
        );
        assert!(!format!("{preloaded:?}").contains("PRIVATE KEY"));
    }

    #[tokio::test]
    async fn file_store_round_trip_is_owner_only() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileIdentityStore::new(dir.path());
        assert!(store.load().await.unwrap().is_none());
        let id = self_signed("c1");
        store.save(&id).await.unwrap();
        let loaded = store.load().await.unwrap().unwrap();
        assert_eq!(loaded.key_pem, id.key_pem);
        assert!(loaded.renew_at() > loaded.not_before && loaded.renew_at() < loaded.not_after);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join("identity.json"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        assert!(!format!("{loaded:?}").contains("PRIVATE KEY"));
    }
}
