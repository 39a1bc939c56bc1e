//! Write-only secrets the hub holds (the managed credentials of Agents),
//! sealed at rest with AES-256-GCM (`ring::aead`).
//!
//! # Layout
//! - [`SecretValue`]: a plaintext that never shows in `Debug`/`Display`.
//! - [`Sealed`]: what is stored: the key id, a random 96-bit nonce and the
//!   ciphertext (with its tag), hex encoded.
//! - [`SecretBox`]: the installation's 32-byte key and its key id; seals
//!   and opens. Every seal binds associated data (the Agent id and the
//!   credential kind), so a ciphertext copied to another Agent or kind does
//!   not open. A value sealed under another key is a clear
//!   [`SecretsError::WrongKey`], never garbage.
//! - key sources ([`KeySource`]): a key file (created mode 0600 on first
//!   start) or a Kubernetes Secret in the control cluster.
//! - outbox sealing: the credential values of a `harness.apply` spec are
//!   sealed while the spec waits in the durable outbox and opened only
//!   when the session sends it over the mTLS link.

use std::fmt;
use std::path::{Path, PathBuf};

use clawfed_proto::work::credential::CredentialKind;
use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};
use serde::Deserialize;
use sha2::{Digest, Sha256};

/// Length of the sealing key in bytes (AES-256).
pub const KEY_LEN: usize = 32;

/// Prefix of a sealed value written into a work spec in the outbox.
const TOKEN_PREFIX: &str = "clawfed-sealed:v1:";

/// Result type of this module.
pub type Result<T, E = SecretsError> = std::result::Result<T, E>;

/// Errors of sealing, opening and key loading. No variant carries a
/// plaintext.
#[derive(Debug, thiserror::Error)]
pub enum SecretsError {
    /// The key material has the wrong length.
    #[error("secrets key from {source_name} must be exactly {KEY_LEN} bytes, found {len}")]
    KeyLength { source_name: String, len: usize },
    /// The key file could not be read.
    #[error("cannot read secrets key file {path}")]
    ReadKey {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The key file could not be created.
    #[error("cannot create secrets key file {path}")]
    WriteKey {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The key Secret could not be read from the control cluster.
    #[error("secrets.keySecret {namespace}/{name} key {key:?}: {reason}")]
    KubeSecret {
        namespace: String,
        name: String,
        key: String,
        reason: String,
    },
    /// The value was sealed under another key than the hub's.
    #[error(
        "{what} was sealed with secrets key {stored}, but the hub's key is {loaded}: the key \
         changed (secrets.keyFile / secrets.keySecret); restore that key or set the credential again"
    )]
    WrongKey {
        what: String,
        stored: String,
        loaded: String,
    },
    /// The ciphertext does not authenticate for this context: it was moved
    /// from another Agent or kind, or altered.
    #[error("{what} does not authenticate: it belongs to another Agent or kind, or was altered")]
    Rejected { what: String },
    /// A stored value is not in the sealed format.
    #[error("{what} is malformed: {reason}")]
    Malformed { what: String, reason: &'static str },
    /// The system random number generator failed.
    #[error("the system random number generator failed")]
    Random,
}

/// A secret plaintext. `Debug` and `Display` never show it; read it with
/// [`SecretValue::expose`] only where it must go.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretValue(String);

impl SecretValue {
    /// Wraps a plaintext.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The plaintext.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl fmt::Display for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// A sealed value as stored: which key sealed it, its nonce and the
/// ciphertext with the AEAD tag (both hex).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sealed {
    pub key_id: String,
    pub nonce: String,
    pub ciphertext: String,
}

impl Sealed {
    /// One string (`clawfed-sealed:v1:<key id>:<nonce>:<ciphertext>`), as
    /// it stands in a work spec in the outbox.
    pub fn to_token(&self) -> String {
        format!(
            "{TOKEN_PREFIX}{}:{}:{}",
            self.key_id, self.nonce, self.ciphertext
        )
    }

    /// Parses [`Self::to_token`]; `None` when `s` is not a sealed token.
    pub fn from_token(s: &str) -> Option<Self> {
        let mut parts = s.strip_prefix(TOKEN_PREFIX)?.splitn(3, ':');
        let (key_id, nonce, ciphertext) = (parts.next()?, parts.next()?, parts.next()?);
        Some(Self {
            key_id: key_id.to_owned(),
            nonce: nonce.to_owned(),
            ciphertext: ciphertext.to_owned(),
        })
    }
}

/// The id of a key: the first 8 hex digits of its SHA-256. Stored beside
/// each ciphertext so a key change is recognised, not decrypted as noise.
pub fn key_id_of(key: &[u8]) -> String {
    hex::encode(Sha256::digest(key))[..8].to_owned()
}

/// Associated data of an Agent's credential: the Agent id and the kind,
/// so a ciphertext cannot be moved to another Agent or kind.
fn credential_aad(agent_id: &str, kind: CredentialKind) -> Vec<u8> {
    format!("clawfed/agent-credential/v1\0{agent_id}\0{}", kind.as_str()).into_bytes()
}

/// Associated data of a credential value sealed into an outbox item: the
/// cluster, the work target and the Secret key it is projected under.
fn outbox_aad(cluster_id: &str, target: &str, secret_key: &str) -> Vec<u8> {
    format!("clawfed/outbox/v1\0{cluster_id}\0{target}\0{secret_key}").into_bytes()
}

/// Associated data of a secret the hub keeps for itself under `name` in
/// the store (the link CA key), so it cannot be swapped for another one.
fn hub_secret_aad(name: &str) -> Vec<u8> {
    format!("clawfed/hub-secret/v1\0{name}").into_bytes()
}

/// The installation's sealing key.
pub struct SecretBox {
    key: LessSafeKey,
    key_id: String,
    rng: SystemRandom,
}

impl fmt::Debug for SecretBox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecretBox")
            .field("key_id", &self.key_id)
            .finish_non_exhaustive()
    }
}

impl SecretBox {
    /// A box over `key` (exactly [`KEY_LEN`] bytes); `source_name` names
    /// where the key came from, for the error.
    pub fn from_key(key: &[u8], source_name: &str) -> Result<Self> {
        if key.len() != KEY_LEN {
            return Err(SecretsError::KeyLength {
                source_name: source_name.to_owned(),
                len: key.len(),
            });
        }
        let unbound = UnboundKey::new(&AES_256_GCM, key).map_err(|_| SecretsError::KeyLength {
            source_name: source_name.to_owned(),
            len: key.len(),
        })?;
        Ok(Self {
            key: LessSafeKey::new(unbound),
            key_id: key_id_of(key),
            rng: SystemRandom::new(),
        })
    }

    /// A box over a fresh random key (tests, first start).
    pub fn generate() -> Result<Self> {
        Self::from_key(&random_key()?, "a generated key")
    }

    /// The key id stored beside each ciphertext.
    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    fn seal(&self, aad: &[u8], plaintext: &[u8]) -> Result<Sealed> {
        let mut nonce = [0u8; NONCE_LEN];
        self.rng
            .fill(&mut nonce)
            .map_err(|_| SecretsError::Random)?;
        let mut in_out = plaintext.to_vec();
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad),
                &mut in_out,
            )
            // Only fails for inputs far beyond what the API accepts.
            .map_err(|_| SecretsError::Malformed {
                what: "value".into(),
                reason: "too large to seal",
            })?;
        Ok(Sealed {
            key_id: self.key_id.clone(),
            nonce: hex::encode(nonce),
            ciphertext: hex::encode(in_out),
        })
    }

    fn open(&self, aad: &[u8], sealed: &Sealed, what: &str) -> Result<Vec<u8>> {
        if sealed.key_id != self.key_id {
            return Err(SecretsError::WrongKey {
                what: what.to_owned(),
                stored: sealed.key_id.clone(),
                loaded: self.key_id.clone(),
            });
        }
        let malformed = |reason| SecretsError::Malformed {
            what: what.to_owned(),
            reason,
        };
        let nonce: [u8; NONCE_LEN] = hex::decode(&sealed.nonce)
            .ok()
            .and_then(|n| n.try_into().ok())
            .ok_or_else(|| malformed("the nonce is not 12 hex-encoded bytes"))?;
        let mut in_out =
            hex::decode(&sealed.ciphertext).map_err(|_| malformed("the ciphertext is not hex"))?;
        let plain = self
            .key
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad),
                &mut in_out,
            )
            .map_err(|_| SecretsError::Rejected {
                what: what.to_owned(),
            })?;
        Ok(plain.to_vec())
    }

    /// Seals Agent `agent_id`'s credential of `kind`.
    pub fn seal_credential(
        &self,
        agent_id: &str,
        kind: CredentialKind,
        value: &SecretValue,
    ) -> Result<Sealed> {
        self.seal(&credential_aad(agent_id, kind), value.expose().as_bytes())
    }

    /// Opens Agent `agent_id`'s credential of `kind`; fails when it was
    /// sealed for another Agent or kind, under another key, or altered.
    pub fn open_credential(
        &self,
        agent_id: &str,
        kind: CredentialKind,
        sealed: &Sealed,
    ) -> Result<SecretValue> {
        let what = format!("credential {kind} of agent {agent_id}");
        let plain = self.open(&credential_aad(agent_id, kind), sealed, &what)?;
        String::from_utf8(plain)
            .map(SecretValue)
            .map_err(|_| SecretsError::Malformed {
                what,
                reason: "the plaintext is not UTF-8",
            })
    }

    /// Seals a secret of the hub itself, kept under `name` in the store
    /// (every replica opens it with the shared key).
    pub fn seal_hub_secret(&self, name: &str, value: &SecretValue) -> Result<Sealed> {
        self.seal(&hub_secret_aad(name), value.expose().as_bytes())
    }

    /// Opens what [`Self::seal_hub_secret`] sealed under `name`.
    pub fn open_hub_secret(&self, name: &str, sealed: &Sealed) -> Result<SecretValue> {
        let what = format!("hub secret {name:?}");
        let plain = self.open(&hub_secret_aad(name), sealed, &what)?;
        String::from_utf8(plain)
            .map(SecretValue)
            .map_err(|_| SecretsError::Malformed {
                what,
                reason: "the plaintext is not UTF-8",
            })
    }

    /// Seals, in place, every value of the `credential` object of a
    /// `harness.apply` spec bound for `cluster_id`'s `target`, so the
    /// durable outbox never holds a credential in plaintext. Specs without
    /// credentials are left as they are.
    pub fn seal_work_credentials(
        &self,
        cluster_id: &str,
        target: &str,
        spec: &mut serde_json::Value,
    ) -> Result<()> {
        let Some(map) = spec.get_mut("credential").and_then(|c| c.as_object_mut()) else {
            return Ok(());
        };
        for (key, value) in map.iter_mut() {
            let plain = value.as_str().ok_or_else(|| SecretsError::Malformed {
                what: format!("credential {key:?} of {target}"),
                reason: "not a string",
            })?;
            let sealed = self.seal(&outbox_aad(cluster_id, target, key), plain.as_bytes())?;
            *value = serde_json::Value::String(sealed.to_token());
        }
        Ok(())
    }

    /// Opens what [`Self::seal_work_credentials`] sealed, in place, right
    /// before the spec goes over the link. A credential value that is not
    /// sealed is refused (nothing puts plaintext into the outbox).
    pub fn open_work_credentials(
        &self,
        cluster_id: &str,
        target: &str,
        spec: &mut serde_json::Value,
    ) -> Result<()> {
        let Some(map) = spec.get_mut("credential").and_then(|c| c.as_object_mut()) else {
            return Ok(());
        };
        for (key, value) in map.iter_mut() {
            let what = format!("credential {key:?} of {target} in the outbox");
            let sealed = value.as_str().and_then(Sealed::from_token).ok_or_else(|| {
                SecretsError::Malformed {
                    what: what.clone(),
                    reason: "not sealed",
                }
            })?;
            let plain = self.open(&outbox_aad(cluster_id, target, key), &sealed, &what)?;
            let plain = String::from_utf8(plain).map_err(|_| SecretsError::Malformed {
                what,
                reason: "the plaintext is not UTF-8",
            })?;
            *value = serde_json::Value::String(plain);
        }
        Ok(())
    }
}

fn random_key() -> Result<[u8; KEY_LEN]> {
    let mut key = [0u8; KEY_LEN];
    SystemRandom::new()
        .fill(&mut key)
        .map_err(|_| SecretsError::Random)?;
    Ok(key)
}

/// `secrets.keySecret`: a key of a Secret in the control cluster holding
/// the 32 key bytes.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KeySecretRef {
    pub namespace: String,
    pub name: String,
    pub key: String,
}

/// Where the sealing key comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    /// A file of exactly 32 bytes, created (mode 0600) when missing.
    File(PathBuf),
    /// A Secret in the control cluster, read with the hub's explicit
    /// Kubernetes credentials.
    KubeSecret(KeySecretRef),
}

/// The default key file: beside the link CA directory, named after it
/// (`/var/lib/clawfed/ca` -> `/var/lib/clawfed/ca.secrets.key`).
pub fn default_key_file(ca_dir: &Path) -> PathBuf {
    let name = ca_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "clawfed".into());
    ca_dir.with_file_name(format!("{name}.secrets.key"))
}

/// Loads the key file at `path`, or creates it with 32 random bytes (mode
/// 0600) when it does not exist. Concurrent first starts agree on one key:
/// the file appears complete or not at all (hard link of a finished temp
/// file), and the loser reads the winner's.
pub fn load_or_create_key_file(path: &Path) -> Result<SecretBox> {
    let read_err = |source| SecretsError::ReadKey {
        path: path.to_owned(),
        source,
    };
    let write_err = |source| SecretsError::WriteKey {
        path: path.to_owned(),
        source,
    };
    match std::fs::read(path) {
        Ok(bytes) => return SecretBox::from_key(&bytes, &path.display().to_string()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(read_err(e)),
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(write_err)?;
    }
    let key = random_key()?;
    let tmp = path.with_file_name(format!(
        ".{}.{}.tmp",
        path.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        uuid::Uuid::new_v4().simple()
    ));
    write_private(&tmp, &key).map_err(write_err)?;
    let linked = std::fs::hard_link(&tmp, path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => {
            tracing::info!(path = %path.display(), key_id = %key_id_of(&key), "secrets.key_created");
            SecretBox::from_key(&key, &path.display().to_string())
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let bytes = std::fs::read(path).map_err(read_err)?;
            SecretBox::from_key(&bytes, &path.display().to_string())
        }
        Err(e) => Err(write_err(e)),
    }
}

fn write_private(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    file.write_all(contents)?;
    file.sync_all()
}

/// Reads the key from a Secret of the control cluster with `client` (the
/// hub's explicit credentials: `gateway.kubeconfig` or in-cluster).
pub async fn load_from_kube_secret(client: kube::Client, r: &KeySecretRef) -> Result<SecretBox> {
    let fail = |reason: String| SecretsError::KubeSecret {
        namespace: r.namespace.clone(),
        name: r.name.clone(),
        key: r.key.clone(),
        reason,
    };
    let api: kube::Api<k8s_openapi::api::core::v1::Secret> =
        kube::Api::namespaced(client, &r.namespace);
    let secret = api
        .get_opt(&r.name)
        .await
        .map_err(|e| fail(format!("cannot read it: {e}")))?
        .ok_or_else(|| fail("the Secret does not exist".into()))?;
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get(&r.key))
        .map(|b| b.0.clone())
        .ok_or_else(|| fail("the Secret has no such key".into()))?;
    SecretBox::from_key(
        &bytes,
        &format!("Secret {}/{} key {:?}", r.namespace, r.name, r.key),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const AGENT: &str = "0190a0b0-0000-7000-8000-00000000000a";
    const OTHER: &str = "0190a0b0-0000-7000-8000-00000000000b";

    #[test]
    fn a_credential_opens_only_for_its_agent_kind_and_key() {
        let sb = SecretBox::generate().unwrap();
        let v = SecretValue::new("sk-live-123");
        let sealed = sb
            .seal_credential(AGENT, CredentialKind::ModelApiKey, &v)
            .unwrap();
        assert_eq!(sealed.key_id, sb.key_id());
        assert!(!sealed.ciphertext.contains(&hex::encode("sk-live-123")));
        assert_eq!(
            sb.open_credential(AGENT, CredentialKind::ModelApiKey, &sealed)
                .unwrap(),
            v
        );
        // Random nonces: the same value seals differently each time.
        let again = sb
            .seal_credential(AGENT, CredentialKind::ModelApiKey, &v)
            .unwrap();
        assert_ne!(again.nonce, sealed.nonce);
        assert_ne!(again.ciphertext, sealed.ciphertext);

        let moved = sb.open_credential(OTHER, CredentialKind::ModelApiKey, &sealed);
        assert!(
            matches!(moved, Err(SecretsError::Rejected { .. })),
            "{moved:?}"
        );
        let other_kind = sb.open_credential(AGENT, CredentialKind::ServiceAccount, &sealed);
        assert!(matches!(other_kind, Err(SecretsError::Rejected { .. })));

        let other_key = SecretBox::generate().unwrap();
        let err = other_key
            .open_credential(AGENT, CredentialKind::ModelApiKey, &sealed)
            .unwrap_err();
        assert!(matches!(err, SecretsError::WrongKey { .. }), "{err:?}");
        assert!(err.to_string().contains(sb.key_id()), "{err}");

        let mut altered = sealed.clone();
        let last = altered.ciphertext.pop().unwrap();
        altered.ciphertext.push(if last == '0' { '1' } else { '0' });
        assert!(matches!(
            sb.open_credential(AGENT, CredentialKind::ModelApiKey, &altered),
            Err(SecretsError::Rejected { .. })
        ));
    }

    #[test]
    fn secrets_never_show_in_debug_or_errors() {
        let v = SecretValue::new("sk-live-123");
        assert_eq!(format!("{v:?} {v}"), "<redacted> <redacted>");
        let sb = SecretBox::generate().unwrap();
        assert!(!format!("{sb:?}").contains("key:"), "{sb:?}");
        let sealed = sb
            .seal_credential(AGENT, CredentialKind::ModelApiKey, &v)
            .unwrap();
        let err = SecretBox::generate()
            .unwrap()
            .open_credential(AGENT, CredentialKind::ModelApiKey, &sealed)
            .unwrap_err();
        assert!(!format!("{err:?} {err}").contains("sk-live-123"));
    }

    #[test]
    fn work_specs_are_sealed_for_their_cluster_and_target() {
        let sb = SecretBox::generate().unwrap();
        let mut spec = serde_json::json!({
            "agent": "bot",
            "credential": { "CLAWFED_MODEL_API_KEY": "sk-live-123" },
        });
        let original = spec.clone();
        sb.seal_work_credentials("c1", "harness/n/bot/1", &mut spec)
            .unwrap();
        let text = spec.to_string();
        assert!(!text.contains("sk-live-123"), "{text}");
        assert!(text.contains(TOKEN_PREFIX), "{text}");
        let mut elsewhere = spec.clone();
        assert!(matches!(
            sb.open_work_credentials("c2", "harness/n/bot/1", &mut elsewhere),
            Err(SecretsError::Rejected { .. })
        ));
        sb.open_work_credentials("c1", "harness/n/bot/1", &mut spec)
            .unwrap();
        assert_eq!(spec, original);
        // Plaintext is never accepted from the outbox.
        assert!(matches!(
            sb.open_work_credentials("c1", "harness/n/bot/1", &mut spec),
            Err(SecretsError::Malformed { .. })
        ));
        // Specs without credentials pass untouched.
        let mut plain = serde_json::json!({ "tenant": "t" });
        sb.seal_work_credentials("c1", "t", &mut plain).unwrap();
        sb.open_work_credentials("c1", "t", &mut plain).unwrap();
        assert_eq!(plain, serde_json::json!({ "tenant": "t" }));
    }

    #[test]
    fn the_key_file_is_created_once_private_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let ca_dir = dir.path().join("ca");
        let path = default_key_file(&ca_dir);
        assert_eq!(path, dir.path().join("ca.secrets.key"));
        let first = load_or_create_key_file(&path).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len(), KEY_LEN);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let second = load_or_create_key_file(&path).unwrap();
        assert_eq!(first.key_id(), second.key_id());
        assert_eq!(first.key_id(), key_id_of(&bytes));
        let v = SecretValue::new("x");
        let sealed = first
            .seal_credential(AGENT, CredentialKind::ModelApiKey, &v)
            .unwrap();
        assert_eq!(
            second
                .open_credential(AGENT, CredentialKind::ModelApiKey, &sealed)
                .unwrap(),
            v
        );
        // Concurrent first starts agree on one key.
        let racy = dir.path().join("race.key");
        let ids: std::collections::HashSet<String> = (0..8)
            .map(|_| {
                let p = racy.clone();
                std::thread::spawn(move || load_or_create_key_file(&p).unwrap().key_id().to_owned())
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect();
        assert_eq!(ids.len(), 1, "{ids:?}");
        // A wrong-sized key is an error naming its source.
        let short = dir.path().join("short.key");
        std::fs::write(&short, b"too short").unwrap();
        let err = load_or_create_key_file(&short).unwrap_err();
        assert!(err.to_string().contains("short.key"), "{err}");
        assert!(err.to_string().contains("32 bytes"), "{err}");
    }
}
