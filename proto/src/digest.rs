//! The applied-state digest both sides compute: the spoke over the durable
//! records of what it applied, the hub over the work each cluster acked.
//! Equal digests mean the spoke holds exactly the acked generations; a
//! mismatch names the buckets of targets that differ, so the hub resends
//! only those.
//!
//! Rules (one place, both sides):
//! - an entry is `(target, kind, generation)`, the latest applied per target;
//! - a deleted namespace leaves nothing behind: its `namespace.delete` entry
//!   and every entry of the same namespace id are left out;
//! - targets fall into [`BUCKETS`] buckets by a hash of the target; each
//!   bucket's digest is a hash over its sorted `target=generation` lines.
//!
//! On the wire (`Heartbeat.applied_digest`): `v2:` then the buckets as
//! 16 hex characters each. A spoke that computes it advertises
//! [`CAPABILITY`]; the hub compares only for those.

use std::collections::{BTreeMap, HashSet};

use sha2::{Digest, Sha256};

use crate::work::WorkKind;
use crate::work::target::Target;

/// Capability of a spoke whose heartbeat carries this digest.
pub const CAPABILITY: &str = "applied-digest:v2";
/// Number of buckets.
pub const BUCKETS: usize = 32;
const PREFIX: &str = "v2:";

/// The digest: one value per bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppliedDigest(pub [u64; BUCKETS]);

/// The bucket of `target`.
pub fn bucket(target: &str) -> usize {
    let h = Sha256::digest(target.as_bytes());
    usize::from(h[0]) % BUCKETS
}

/// The entries that count: the latest per target, without deleted
/// namespaces and what was in them.
pub fn counted<'a, I>(entries: I) -> BTreeMap<&'a str, i64>
where
    I: IntoIterator<Item = (&'a str, &'a str, i64)>,
{
    let entries: Vec<_> = entries.into_iter().collect();
    let deleted: HashSet<String> = entries
        .iter()
        .filter(|(_, kind, _)| *kind == WorkKind::NamespaceDelete.as_str())
        .filter_map(|(t, _, _)| t.parse::<Target>().ok())
        .map(|t| t.namespace_id().to_string())
        .collect();
    let mut out = BTreeMap::new();
    for (target, _, generation) in entries {
        let gone = target
            .parse::<Target>()
            .is_ok_and(|t| deleted.contains(t.namespace_id()));
        if gone {
            continue;
        }
        let g = out.entry(target).or_insert(generation);
        *g = (*g).max(generation);
    }
    out
}

impl AppliedDigest {
    /// The digest of `entries` (see the module rules).
    pub fn compute<'a, I>(entries: I) -> Self
    where
        I: IntoIterator<Item = (&'a str, &'a str, i64)>,
    {
        let mut hashers: Vec<Sha256> = (0..BUCKETS).map(|_| Sha256::new()).collect();
        for (target, generation) in counted(entries) {
            let h = &mut hashers[bucket(target)];
            h.update(target.as_bytes());
            h.update(b"=");
            h.update(generation.to_string().as_bytes());
            h.update(b"\n");
        }
        let mut out = [0u64; BUCKETS];
        for (o, h) in out.iter_mut().zip(hashers) {
            let d = h.finalize();
            let mut b = [0u8; 8];
            b.copy_from_slice(&d[..8]);
            *o = u64::from_be_bytes(b);
        }
        AppliedDigest(out)
    }

    /// The wire form.
    pub fn to_wire(&self) -> String {
        let mut s = String::with_capacity(PREFIX.len() + BUCKETS * 16);
        s.push_str(PREFIX);
        for b in self.0 {
            s.push_str(&format!("{b:016x}"));
        }
        s
    }

    /// Parses the wire form; `None` for anything else (an older spoke's
    /// digest, or none).
    pub fn parse(s: &str) -> Option<Self> {
        let hex = s.strip_prefix(PREFIX)?;
        if hex.len() != BUCKETS * 16 || !hex.is_ascii() {
            return None;
        }
        let mut out = [0u64; BUCKETS];
        for (i, o) in out.iter_mut().enumerate() {
            *o = u64::from_str_radix(&hex[i * 16..(i + 1) * 16], 16).ok()?;
        }
        Some(AppliedDigest(out))
    }

    /// The buckets where `self` and `other` differ.
    pub fn differing(&self, other: &AppliedDigest) -> Vec<usize> {
        (0..BUCKETS).filter(|i| self.0[*i] != other.0[*i]).collect()
    }
}

/// The first form of `Heartbeat.applied_digest`, before [`CAPABILITY`]:
/// the first 16 bytes of SHA-256 over the sorted `target=generation\n`
/// lines, in hex. A spoke with no record of its applied work sends it; the
/// hub compares only [`AppliedDigest`]s, so it is informational.
pub fn legacy<'a, I>(entries: I) -> String
where
    I: IntoIterator<Item = (&'a str, i64)>,
{
    let sorted: BTreeMap<&str, i64> = entries.into_iter().collect();
    let mut h = Sha256::new();
    for (t, g) in sorted {
        h.update(t.as_bytes());
        h.update(b"=");
        h.update(g.to_string().as_bytes());
        h.update(b"\n");
    }
    hex::encode(&h.finalize()[..16])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_free_round_trips_and_names_the_differing_bucket() {
        let a = AppliedDigest::compute([
            ("namespace/n1", "namespace.ensure", 1),
            ("harness/n1/a/1", "harness.apply", 2),
        ]);
        let b = AppliedDigest::compute([
            ("harness/n1/a/1", "harness.apply", 2),
            ("namespace/n1", "namespace.ensure", 1),
        ]);
        assert_eq!(a, b);
        assert_eq!(AppliedDigest::parse(&a.to_wire()), Some(a));
        assert_eq!(AppliedDigest::parse("0123abcd"), None);
        let c = AppliedDigest::compute([
            ("namespace/n1", "namespace.ensure", 1),
            ("harness/n1/a/1", "harness.apply", 3),
        ]);
        assert_eq!(a.differing(&c), vec![bucket("harness/n1/a/1")]);
        // The kind does not count, only target and generation.
        let d = AppliedDigest::compute([
            ("namespace/n1", "namespace.ensure", 1),
            ("harness/n1/a/1", "harness.stop", 2),
        ]);
        assert_eq!(a, d);
    }

    #[test]
    fn a_deleted_namespace_leaves_nothing() {
        let none = AppliedDigest::compute([]);
        let gone = AppliedDigest::compute([
            ("namespace/n1", "namespace.delete", 3),
            ("harness/n1/a/1", "harness.retire", 4),
        ]);
        assert_eq!(gone, none);
        let other = AppliedDigest::compute([
            ("namespace/n1", "namespace.delete", 3),
            ("namespace/n2", "namespace.ensure", 1),
        ]);
        assert_eq!(other, AppliedDigest::compute([("namespace/n2", "x", 1)]));
    }

    #[test]
    fn the_legacy_digest_ignores_order() {
        let a = legacy([("x", 1), ("y", 2)]);
        assert_eq!(a, legacy([("y", 2), ("x", 1)]));
        assert_ne!(a, legacy([("y", 3), ("x", 1)]));
        assert_eq!(a.len(), 32);
    }
}
