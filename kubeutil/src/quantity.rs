//! Kubernetes resource quantities (`500m`, `2`, `1.5Gi`): the rule the hub
//! checks specs with, and the map into k8s-openapi quantities that every
//! object builder uses.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// Suffixes accepted: binary (`Ki`..`Ei`), then milli and decimal (`m`,
/// `k`..`E`). Two-letter ones first, so `Mi` is not read as `M`.
const SUFFIXES: [&str; 13] = [
    "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "m", "k", "M", "G", "T", "P", "E",
];

/// A value that is not a quantity clawfed accepts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{value:?} is not a Kubernetes quantity (e.g. 500m, 1, 512Mi)")]
pub struct QuantityError {
    /// The value given.
    pub value: String,
}

/// Checks `value`: digits, an optional fraction (`1.5`) and an optional
/// suffix from [`SUFFIXES`]. Deliberately narrower than the apiserver's
/// grammar (no sign, exponent or leading `.`): a spec must be plain.
pub fn check(value: &str) -> Result<(), QuantityError> {
    let number = SUFFIXES
        .iter()
        .find_map(|s| value.strip_suffix(s))
        .unwrap_or(value);
    let (int, frac) = number.split_once('.').unwrap_or((number, "0"));
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if digits(int) && digits(frac) {
        Ok(())
    } else {
        Err(QuantityError {
            value: value.to_string(),
        })
    }
}

/// A memory quantity in bytes (`2Gi`, `1536Mi`, `2G`, `1000000`), for the
/// quantities [`check`] accepts; `None` for a milli or fractional value, or
/// one that overflows.
pub fn bytes(value: &str) -> Option<u64> {
    check(value).ok()?;
    let (number, factor): (&str, u64) = [
        ("Ki", 1 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("Ti", 1 << 40),
        ("Pi", 1 << 50),
        ("Ei", 1 << 60),
        ("k", 1_000),
        ("M", 1_000_000),
        ("G", 1_000_000_000),
        ("T", 1_000_000_000_000),
        ("P", 1_000_000_000_000_000),
        ("E", 1_000_000_000_000_000_000),
    ]
    .into_iter()
    .find_map(|(s, f)| value.strip_suffix(s).map(|n| (n, f)))
    .unwrap_or((value, 1));
    number.parse::<u64>().ok()?.checked_mul(factor)
}

/// `resource -> value` as k8s-openapi quantities; `None` for an empty map,
/// so the field is left out of the object instead of written empty.
pub fn quantities(m: &BTreeMap<String, String>) -> Option<BTreeMap<String, Quantity>> {
    (!m.is_empty()).then(|| {
        m.iter()
            .map(|(k, v)| (k.clone(), Quantity(v.clone())))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_in_bytes() {
        assert_eq!(bytes("2Gi"), Some(2 << 30));
        assert_eq!(bytes("1536Mi"), Some(1536 << 20));
        assert_eq!(bytes("2G"), Some(2_000_000_000));
        assert_eq!(bytes("1000"), Some(1000));
        for none in ["500m", "1.5Gi", "x", "99999999Ei"] {
            assert_eq!(bytes(none), None, "{none}");
        }
    }

    #[test]
    fn accepted_values() {
        for ok in [
            "1", "0", "500m", "1.5Gi", "512Mi", "2k", "10Ei", "3E", "0.25", "100M",
        ] {
            assert_eq!(check(ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn refused_values() {
        for bad in [
            "", "m", "Gi", "1.", ".5", "abc", "1.5Gb", "-1", "+1", "1e3", "1 Gi", "1.2.3", "1mi",
            "1KiB",
        ] {
            let err = check(bad).expect_err(bad);
            assert_eq!(err.value, bad);
            assert!(err.to_string().contains("is not a Kubernetes quantity"));
        }
    }

    #[test]
    fn empty_map_is_left_out() {
        assert_eq!(quantities(&BTreeMap::new()), None);
        let m = BTreeMap::from([
            ("cpu".to_string(), "500m".to_string()),
            ("memory".to_string(), "1Gi".to_string()),
        ]);
        let q = quantities(&m).expect("some");
        assert_eq!(q.get("cpu"), Some(&Quantity("500m".into())));
        assert_eq!(q.get("memory"), Some(&Quantity("1Gi".into())));
        assert_eq!(q.len(), 2);
    }
}
