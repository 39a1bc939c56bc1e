//! Each revision's Gateway transport credential, derived instead of minted.
//!
//! `token = hex(HMAC-SHA256(key, "clawfed gateway transport v1" 0x00 revision id))`.
//! The key is 32 random bytes that the first hub to need it creates and
//! keeps in the store (`hub_secrets`), sealed with the installation's
//! secrets key like the link CA's key, so every pipeline pass and every hub
//! replica derives the same token: the transport Secret of a revision never
//! changes, and another revision gets another token. Whoever reads the
//! database or a backup without the secrets key cannot mint a credential.
//! A key a hub stored before sealing (64 hex characters) is sealed in place
//! the first time a hub loads it; the key itself stays, so no deployed
//! Gateway's token changes. The store keeps only
//! SHA-256(token) per revision, which is all a tunnel ingress needs to
//! authenticate the Gateway; the token itself lives only in the Secret.

use std::fmt;
use std::sync::Arc;

use sha2::{Digest, Sha256};

use super::Transport;
use crate::secrets::{Sealed, SecretBox, SecretValue, SecretsError};
use crate::store::{Store, StoreError};

/// Name of the key in the store's hub secrets.
pub const KEY_NAME: &str = "gateway-transport-key";
/// Domain separation: what the key derives for each purpose.
const CONTEXT: &[u8] = b"clawfed gateway transport v1\0";
const RUNTIME_CONTEXT: &[u8] = b"clawfed openclaw gateway token v1\0";
const REPLICA_CONTEXT: &[u8] = b"clawfed replica request v1\0";
const APP_SERVER_CONTEXT: &[u8] = b"clawfed codex app-server token v1\0";

/// Why the transport key cannot be loaded.
#[derive(Debug, thiserror::Error)]
pub enum TransportKeyError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The sealed key does not open with this hub's secrets key (another
    /// installation's key, or the secrets key was replaced).
    #[error("hub secret {KEY_NAME}: {0}")]
    Secrets(#[from] SecretsError),
    /// The stored record is neither sealed nor a plaintext key.
    #[error("hub secret {KEY_NAME} is neither sealed nor 32 hex-encoded bytes")]
    Corrupt,
}

/// The hub's key for transport tokens.
#[derive(Clone)]
pub struct TransportKey(ring::hmac::Key);

impl fmt::Debug for TransportKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TransportKey(<redacted>)")
    }
}

impl TransportKey {
    /// A key from its bytes.
    pub fn from_bytes(bytes: &[u8; 32]) -> Self {
        Self(ring::hmac::Key::new(ring::hmac::HMAC_SHA256, bytes))
    }

    /// The installation's key from `store`, opened with `secrets`; created
    /// (sealed) on first use, and sealed in place when an earlier hub stored
    /// it in plaintext.
    pub async fn load_or_create(
        store: &dyn Store,
        secrets: &SecretBox,
    ) -> Result<Self, TransportKeyError> {
        let seal = |hex: String| {
            secrets
                .seal_hub_secret(KEY_NAME, &SecretValue::new(hex))
                .map(|s| s.to_token())
        };
        let candidate = seal(hex::encode(rand::random::<[u8; 32]>()))?;
        let stored = store.hub_secret(KEY_NAME, &candidate).await?;
        if let Some(sealed) = Sealed::from_token(&stored) {
            let hex = secrets.open_hub_secret(KEY_NAME, &sealed)?;
            return Ok(Self::from_bytes(&key_bytes(hex.expose())?));
        }
        // Stored in plaintext by a hub before sealing: the same key, sealed
        // now. A replica sealing it meanwhile wins; its record holds this
        // same key.
        let bytes = key_bytes(&stored)?;
        if store
            .replace_hub_secret(KEY_NAME, &stored, &seal(stored.clone())?)
            .await?
        {
            tracing::info!(name = KEY_NAME, "gateway.transport_key_sealed");
        }
        Ok(Self::from_bytes(&bytes))
    }

    /// The transport token of `revision_id` (64 hex characters).
    pub fn token(&self, revision_id: &str) -> String {
        self.derive(CONTEXT, revision_id)
    }

    /// The OpenClaw gateway token of `revision_id`'s Harness (its
    /// `OPENCLAW_GATEWAY_TOKEN`; 64 hex characters): the hub sends it with
    /// its own requests to that runtime. Another context than
    /// [`Self::token`], so neither reveals the other.
    pub fn runtime_token(&self, revision_id: &str) -> String {
        self.derive(RUNTIME_CONTEXT, revision_id)
    }

    /// The capability token of `agent_id`'s Codex app-servers (64 hex
    /// characters): its Gateway presents it, its Harness checks it. One per
    /// Agent, not per revision: the Codex plugin binds a conversation to its
    /// Codex thread by the app-server's identity, token included, so a new
    /// token on a redeploy would start every conversation over. Which
    /// revision's Harness a Gateway reaches is the transport credential's
    /// to say, and that one is per revision.
    pub fn app_server_token(&self, agent_id: &str) -> String {
        self.derive(APP_SERVER_CONTEXT, agent_id)
    }

    /// Whether `token` is [`Self::app_server_token`] of `agent_id`;
    /// compared in constant time.
    pub fn verify_app_server_token(&self, agent_id: &str, token: &str) -> bool {
        let Ok(tag) = hex::decode(token) else {
            return false;
        };
        let mut signed = APP_SERVER_CONTEXT.to_vec();
        signed.extend_from_slice(agent_id.as_bytes());
        ring::hmac::verify(&self.0, &signed, &tag).is_ok()
    }

    /// The signature of a request one hub replica sends another (`body`,
    /// whole): only a holder of the key, a replica, can make it.
    pub fn replica_signature(&self, body: &[u8]) -> String {
        self.derive_bytes(REPLICA_CONTEXT, body)
    }

    /// Whether `signature` (hex) is [`Self::replica_signature`] of `body`;
    /// compared in constant time.
    pub fn verify_replica_signature(&self, body: &[u8], signature: &str) -> bool {
        let Ok(tag) = hex::decode(signature) else {
            return false;
        };
        let mut signed = REPLICA_CONTEXT.to_vec();
        signed.extend_from_slice(body);
        ring::hmac::verify(&self.0, &signed, &tag).is_ok()
    }

    fn derive(&self, context: &[u8], revision_id: &str) -> String {
        self.derive_bytes(context, revision_id.as_bytes())
    }

    fn derive_bytes(&self, context: &[u8], data: &[u8]) -> String {
        let mut ctx = ring::hmac::Context::with_key(&self.0);
        ctx.update(context);
        ctx.update(data);
        hex::encode(ctx.sign().as_ref())
    }
}

fn key_bytes(hex: &str) -> Result<[u8; 32], TransportKeyError> {
    hex::decode(hex)
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or(TransportKeyError::Corrupt)
}

/// SHA-256 of a token, hex: what the store keeps instead of the token.
pub fn token_hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// Derives revisions' transport material and records each token's hash.
#[derive(Clone)]
pub struct TransportCredentials {
    key: TransportKey,
    store: Arc<dyn Store>,
}

impl fmt::Debug for TransportCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TransportCredentials")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl TransportCredentials {
    /// Loads (or creates) the key from `store`, where hashes go too,
    /// opened (or sealed) with `secrets`.
    pub async fn load(
        store: Arc<dyn Store>,
        secrets: &SecretBox,
    ) -> Result<Self, TransportKeyError> {
        let key = TransportKey::load_or_create(store.as_ref(), secrets).await?;
        Ok(Self { key, store })
    }

    /// The runtime tokens of `revision_id`'s Gateway: its own gateway token
    /// and, when its Harness is a Codex app-server, the Agent's
    /// (`app_server_of`) capability token.
    pub fn runtime_tokens(
        &self,
        revision_id: &str,
        app_server_of: Option<&str>,
    ) -> (String, Option<String>) {
        (
            self.key.runtime_token(revision_id),
            app_server_of.map(|agent_id| self.key.app_server_token(agent_id)),
        )
    }

    /// The transport material of `revision_id`. Its hash is recorded first,
    /// so no Gateway ever holds a token the hub could not authenticate.
    pub async fn for_revision(&self, revision_id: &str) -> Result<Transport, StoreError> {
        let token = self.key.token(revision_id);
        self.store
            .set_transport_token_hash(revision_id, &token_hash(&token))
            .await?;
        Ok(Transport {
            gateway_token: token,
            tls: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn app_server_tokens_are_per_agent_and_verified_in_constant_time() {
        let key = TransportKey::from_bytes(&[7; 32]);
        let t = key.app_server_token("agent-1");
        assert_eq!(t.len(), 64);
        assert!(key.verify_app_server_token("agent-1", &t));
        assert!(
            !key.verify_app_server_token("agent-2", &t),
            "another Agent's"
        );
        assert!(!key.verify_app_server_token("agent-1", "not hex"));
        assert_ne!(t, key.runtime_token("agent-1"), "another context");
        assert_ne!(t, key.token("agent-1"));
    }

    #[test]
    fn one_token_per_revision_and_key() {
        let key = TransportKey::from_bytes(&[7; 32]);
        let t1 = key.token("rev-1");
        assert_eq!(t1, key.token("rev-1"), "stable");
        assert_eq!(t1.len(), 64);
        assert_ne!(t1, key.token("rev-2"), "another revision");
        assert_ne!(t1, TransportKey::from_bytes(&[8; 32]).token("rev-1"));
        // HMAC-SHA256 with the context prefix, not a bare hash of the id.
        let plain = ring::hmac::sign(
            &ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &[7; 32]),
            b"clawfed gateway transport v1\0rev-1",
        );
        assert_eq!(t1, hex::encode(plain.as_ref()));
        assert_eq!(token_hash(&t1), hex::encode(Sha256::digest(t1.as_bytes())));
        assert!(!format!("{key:?}").contains(&t1));
    }

    #[test]
    fn a_replica_signature_covers_its_body_and_needs_the_key() {
        let key = TransportKey::from_bytes(&[7; 32]);
        let signature = key.replica_signature(b"{\"a\":1}");
        assert!(key.verify_replica_signature(b"{\"a\":1}", &signature));
        assert!(!key.verify_replica_signature(b"{\"a\":2}", &signature));
        assert!(
            !TransportKey::from_bytes(&[8; 32]).verify_replica_signature(b"{\"a\":1}", &signature)
        );
        assert!(!key.verify_replica_signature(b"{\"a\":1}", "not hex"));
        // Not any token the key derives for a Gateway or a runtime.
        assert_ne!(signature, key.token("{\"a\":1}"));
        assert_ne!(signature, key.runtime_token("{\"a\":1}"));
    }
}
