//! Name rules: DNS-1123 validation and the data-plane namespace name.

use sha2::{Digest, Sha256};

/// Prefix of every data-plane namespace clawfed creates.
pub const DATA_PLANE_PREFIX: &str = "oce-";
/// Hex characters of SHA-256(namespace id) in a data-plane namespace name.
pub const DATA_PLANE_HASH_LEN: usize = 15;
/// Longest Agent name: leaves room for the suffixes of the Kubernetes objects
/// made from it (`<agent>-r<revision>-gateway` must stay a DNS-1123 label).
pub const MAX_AGENT_NAME_LEN: usize = 40;

/// Why a name is not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// The name is empty.
    #[error("must not be empty")]
    Empty,
    /// The name is longer than allowed.
    #[error("must be at most {max} characters (got {len})")]
    TooLong {
        /// The limit.
        max: usize,
        /// The length given.
        len: usize,
    },
    /// The name has characters or a shape DNS-1123 does not allow.
    #[error(
        "must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character"
    )]
    InvalidCharacters,
}

/// The physical Kubernetes namespace of a tenant: `oce-` followed by the first
/// 15 hex characters of SHA-256(namespace id).
pub fn data_plane_namespace(namespace_id: &str) -> String {
    let digest = Sha256::digest(namespace_id.as_bytes());
    let hex = hex::encode(digest);
    format!("{DATA_PLANE_PREFIX}{}", &hex[..DATA_PLANE_HASH_LEN])
}

/// Default prefix of the managed Gateway runtime namespaces in the control
/// cluster (the seeds' `oce-gateways-<hash>`).
pub const GATEWAY_NAMESPACE_PREFIX: &str = "oce-gateways";
/// Hex characters of SHA-256(namespace id) in a Gateway runtime namespace name.
pub const GATEWAY_NAMESPACE_HASH_LEN: usize = 24;
/// Longest Gateway namespace prefix: `<prefix>-<24 hex>` stays a DNS-1123
/// label (63).
pub const MAX_GATEWAY_NAMESPACE_PREFIX_LEN: usize = 63 - 1 - GATEWAY_NAMESPACE_HASH_LEN;

/// A tenant's managed Gateway runtime namespace in the control cluster:
/// `<prefix>-` followed by the first 24 hex characters of
/// SHA-256(namespace id). Each tenant's dedicated Gateways live there, with
/// the tenant's quota and container defaults, apart from every other
/// tenant's (two tenants may both have an Agent `support`).
pub fn gateway_namespace(prefix: &str, namespace_id: &str) -> String {
    let hex = hex::encode(Sha256::digest(namespace_id.as_bytes()));
    format!("{prefix}-{}", &hex[..GATEWAY_NAMESPACE_HASH_LEN])
}

/// Whether `name` is a DNS-1123 subdomain (an object name such as a
/// Secret's or a StorageClass's): dot-separated labels, at most 253
/// characters.
pub fn is_dns1123_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name
            .split('.')
            .all(|part| validate_dns1123_label(part).is_ok())
}

/// Whether `s` is a label key's name or a non-empty label value as
/// Kubernetes accepts them: 1-63 alphanumerics, '-', '_' or '.', starting
/// and ending alphanumeric. The hub checks Agent specs and its drivers'
/// settings with it, so both refuse what the apiserver would.
pub fn is_label_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
}

/// Why `key` is not a Kubernetes label key (`[prefix/]name`: a DNS
/// subdomain prefix and a [label name](is_label_name)); `None` when it is.
pub fn label_key_error(key: &str) -> Option<&'static str> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if prefix.is_some_and(|p| !is_dns1123_subdomain(p)) {
        return Some("label key prefix must be a DNS subdomain");
    }
    if !is_label_name(name) {
        return Some(
            "label key name must be 1-63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric",
        );
    }
    None
}

/// Whether `cidr` is an `IP/prefix` block, IPv4 (prefix up to 32) or IPv6
/// (up to 128).
pub fn is_cidr(cidr: &str) -> bool {
    cidr.split_once('/').is_some_and(|(ip, bits)| {
        let max = match ip.parse::<std::net::IpAddr>() {
            Ok(std::net::IpAddr::V4(_)) => 32,
            Ok(std::net::IpAddr::V6(_)) => 128,
            Err(_) => return false,
        };
        bits.parse::<u8>().is_ok_and(|b| b <= max)
    })
}

/// Validates a DNS-1123 label (RFC 1123): at most 63 lower case alphanumerics
/// or '-', starting and ending with an alphanumeric.
pub fn validate_dns1123_label(name: &str) -> Result<(), NameError> {
    validate_label_with_max(name, 63)
}

/// Validates an Agent name: a DNS-1123 label of at most
/// [`MAX_AGENT_NAME_LEN`] characters.
pub fn validate_agent_name(name: &str) -> Result<(), NameError> {
    validate_label_with_max(name, MAX_AGENT_NAME_LEN)
}

fn validate_label_with_max(name: &str, max: usize) -> Result<(), NameError> {
    if name.is_empty() {
        return Err(NameError::Empty);
    }
    if name.len() > max {
        return Err(NameError::TooLong {
            max,
            len: name.len(),
        });
    }
    let bytes = name.as_bytes();
    let allowed = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-';
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    if !bytes.iter().all(|&b| allowed(b)) || !alnum(bytes[0]) || !alnum(bytes[bytes.len() - 1]) {
        return Err(NameError::InvalidCharacters);
    }
    Ok(())
}

/// True when `name` has the shape of a legacy data-plane namespace,
/// `oce-<slug>-<hash12>`. The shape alone never makes it valid: discovery must
/// also find the tenant label, namespace-id annotation and manager label.
pub fn is_legacy_data_plane_shape(name: &str) -> bool {
    let Some(rest) = name.strip_prefix(DATA_PLANE_PREFIX) else {
        return false;
    };
    let Some((slug, hash)) = rest.rsplit_once('-') else {
        return false;
    };
    validate_dns1123_label(name).is_ok()
        && !slug.is_empty()
        && hash.len() == 12
        && hash
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gateway_namespace_is_prefix_and_twenty_four_hex_of_sha256() {
        // sha256("abc") = ba7816bf8f01cfea414140de5dae2223b00361a3...
        assert_eq!(
            gateway_namespace(GATEWAY_NAMESPACE_PREFIX, "abc"),
            "oce-gateways-ba7816bf8f01cfea414140de"
        );
        let longest = "p".repeat(MAX_GATEWAY_NAMESPACE_PREFIX_LEN);
        assert_eq!(gateway_namespace(&longest, "abc").len(), 63);
        assert_ne!(
            gateway_namespace(GATEWAY_NAMESPACE_PREFIX, "a"),
            gateway_namespace(GATEWAY_NAMESPACE_PREFIX, "b")
        );
    }

    #[test]
    fn data_plane_namespace_is_prefix_and_fifteen_hex_of_sha256() {
        // sha256("abc") = ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad
        assert_eq!(data_plane_namespace("abc"), "oce-ba7816bf8f01cfe");
        let name = data_plane_namespace("0190f5a2-7c1e-7000-8000-000000000000");
        assert_eq!(name.len(), 4 + 15);
        assert!(validate_dns1123_label(&name).is_ok());
    }

    #[test]
    fn label_keys_names_and_cidrs() {
        for ok in ["app", "example.com/tier", "a_b.c-d"] {
            assert_eq!(label_key_error(ok), None, "{ok}");
        }
        assert!(label_key_error("Bad_Prefix/x").is_some_and(|e| e.contains("prefix")));
        for bad in ["", "-a", "a-", &"a".repeat(64)] {
            assert!(!is_label_name(bad), "{bad}");
            assert!(
                label_key_error(bad).is_some_and(|e| e.contains("key name")),
                "{bad}"
            );
        }
        for ok in ["10.0.0.0/8", "0.0.0.0/0", "fd00::/8", "::1/128"] {
            assert!(is_cidr(ok), "{ok}");
        }
        for bad in [
            "10.0.0.0",
            "10.0.0.0/33",
            "fd00::/129",
            "x/8",
            "10.0.0.0/-1",
        ] {
            assert!(!is_cidr(bad), "{bad}");
        }
    }

    #[test]
    fn dns1123_labels() {
        assert!(validate_dns1123_label("team-a").is_ok());
        assert!(validate_dns1123_label("a").is_ok());
        assert_eq!(validate_dns1123_label(""), Err(NameError::Empty));
        assert_eq!(
            validate_dns1123_label("Team"),
            Err(NameError::InvalidCharacters)
        );
        assert_eq!(
            validate_dns1123_label("-a"),
            Err(NameError::InvalidCharacters)
        );
        assert_eq!(
            validate_dns1123_label("a-"),
            Err(NameError::InvalidCharacters)
        );
        assert_eq!(
            validate_dns1123_label("a_b"),
            Err(NameError::InvalidCharacters)
        );
        assert!(matches!(
            validate_dns1123_label(&"a".repeat(64)),
            Err(NameError::TooLong { max: 63, len: 64 })
        ));
        assert!(matches!(
            validate_agent_name(&"a".repeat(41)),
            Err(NameError::TooLong { max: 40, .. })
        ));
    }

    #[test]
    fn legacy_shape() {
        assert!(is_legacy_data_plane_shape("oce-team-a-0123456789ab"));
        assert!(!is_legacy_data_plane_shape("oce-0123456789ab"));
        assert!(!is_legacy_data_plane_shape("oce-team-0123456789"));
        assert!(!is_legacy_data_plane_shape("oce-team-0123456789AB"));
        assert!(!is_legacy_data_plane_shape("xyz-team-0123456789ab"));
    }
}
