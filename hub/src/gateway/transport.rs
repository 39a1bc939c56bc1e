//! Each revision's Gateway transport credential, derived instead of minted.
//!
//! `token = hex(HMAC-SHA256(key, "clawfed gateway transport v1" 0x00 revision id))`.
//! The key is 32 random bytes that the first hub to need it creates and
//! keeps in the store (`hub_secrets`), so every pipeline pass and every hub
//! replica derives the same token: the transport Secret of a revision never
//! changes, and another revision gets another token. The store keeps only
//! SHA-256(token) per revision, which is all a tunnel ingress needs to
//! authenticate the Gateway; the token itself lives only in the Secret.

use std::fmt;
use std::sync::Arc;

use sha2::{Digest, Sha256};

use super::Transport;
use crate::store::{Store, StoreError};

/// Name of the key in the store's hub secrets.
pub const KEY_NAME: &str = "gateway-transport-key";
/// Domain separation: what the key derives for each purpose.
const CONTEXT: &[u8] = b"clawfed gateway transport v1\0";
const RUNTIME_CONTEXT: &[u8] = b"clawfed openclaw gateway token v1\0";

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

    /// The installation's key from `store`, created on first use.
    pub async fn load_or_create(store: &dyn Store) -> Result<Self, StoreError> {
        let candidate: [u8; 32] = rand::random();
        let stored = store.hub_secret(KEY_NAME, &hex::encode(candidate)).await?;
        let bytes: [u8; 32] = hex::decode(&stored)
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| StoreError::Corrupt {
                what: "hub secret",
                detail: format!("{KEY_NAME} is not 32 hex-encoded bytes"),
            })?;
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

    fn derive(&self, context: &[u8], revision_id: &str) -> String {
        let mut ctx = ring::hmac::Context::with_key(&self.0);
        ctx.update(context);
        ctx.update(revision_id.as_bytes());
        hex::encode(ctx.sign().as_ref())
    }
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
    /// Loads (or creates) the key from `store`, where hashes go too.
    pub async fn load(store: Arc<dyn Store>) -> Result<Self, StoreError> {
        let key = TransportKey::load_or_create(store.as_ref()).await?;
        Ok(Self { key, store })
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
}
