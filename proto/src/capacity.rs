//! What a spoke reports about its cluster for placement, and the rules
//! both sides apply to it: the cluster labels a spoke may report (Hello),
//! Kubernetes resource quantities as numbers (the spoke sums node
//! allocatable and Pod requests; the hub turns a revision's requests into
//! the same units), and the capacity a cluster reported (CapacityReport).

use std::collections::BTreeMap;

use crate::naming;

/// CPU in millicores and memory in bytes: what a Pod requests or a set of
/// nodes has.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Resources {
    pub cpu_millis: i64,
    pub memory_bytes: i64,
}

impl Resources {
    /// `self` with `other` added (saturating: sums of quantities never wrap).
    pub fn plus(self, other: Resources) -> Resources {
        Resources {
            cpu_millis: self.cpu_millis.saturating_add(other.cpu_millis),
            memory_bytes: self.memory_bytes.saturating_add(other.memory_bytes),
        }
    }

    /// `self` less `other`, never below zero (an over-committed node has
    /// nothing free, not a negative amount).
    pub fn minus(self, other: Resources) -> Resources {
        Resources {
            cpu_millis: (self.cpu_millis - other.cpu_millis).max(0),
            memory_bytes: (self.memory_bytes - other.memory_bytes).max(0),
        }
    }

    /// Every dimension of `self` is at most `other`'s.
    pub fn fits_in(self, other: Resources) -> bool {
        self.cpu_millis <= other.cpu_millis && self.memory_bytes <= other.memory_bytes
    }

    /// From the `cpu` and `memory` entries of a Kubernetes resource list
    /// (an absent entry is zero; other resources are not placed on).
    pub fn from_list<'a>(
        mut get: impl FnMut(&str) -> Option<&'a str>,
    ) -> Result<Resources, QuantityError> {
        Ok(Resources {
            cpu_millis: get("cpu").map(cpu_millis).transpose()?.unwrap_or(0),
            memory_bytes: get("memory").map(bytes).transpose()?.unwrap_or(0),
        })
    }
}

impl std::fmt::Display for Resources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "cpu {}m, memory {}",
            self.cpu_millis,
            human_bytes(self.memory_bytes)
        )
    }
}

/// `bytes` in the largest binary unit that keeps it readable (`1.5Gi`).
pub fn human_bytes(bytes: i64) -> String {
    const UNITS: [&str; 5] = ["Ki", "Mi", "Gi", "Ti", "Pi"];
    let mut value = bytes as f64;
    let mut unit = "";
    for u in UNITS {
        if value.abs() < 1024.0 {
            break;
        }
        value /= 1024.0;
        unit = u;
    }
    if unit.is_empty() {
        format!("{bytes}")
    } else {
        let s = format!("{value:.1}");
        format!("{}{unit}", s.strip_suffix(".0").unwrap_or(&s))
    }
}

/// What a cluster reported it can take (`link.v1.CapacityReport`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Capacity {
    /// Ready, schedulable nodes the installation's node selector selects.
    pub nodes: u32,
    /// Their allocatable CPU and memory.
    pub allocatable: Resources,
    /// Allocatable minus the requests of the non-terminated Pods bound to
    /// them.
    pub free: Resources,
}

impl From<&crate::link::v1::CapacityReport> for Capacity {
    fn from(r: &crate::link::v1::CapacityReport) -> Self {
        Capacity {
            nodes: r.nodes,
            allocatable: Resources {
                cpu_millis: r.allocatable_cpu_millis,
                memory_bytes: r.allocatable_memory_bytes,
            },
            free: Resources {
                cpu_millis: r.free_cpu_millis,
                memory_bytes: r.free_memory_bytes,
            },
        }
    }
}

impl From<Capacity> for crate::link::v1::CapacityReport {
    fn from(c: Capacity) -> Self {
        crate::link::v1::CapacityReport {
            nodes: c.nodes,
            allocatable_cpu_millis: c.allocatable.cpu_millis,
            allocatable_memory_bytes: c.allocatable.memory_bytes,
            free_cpu_millis: c.free.cpu_millis,
            free_memory_bytes: c.free.memory_bytes,
        }
    }
}

/// A quantity that is not a Kubernetes quantity (or too large).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a Kubernetes quantity")]
pub struct QuantityError(pub String);

/// A CPU quantity (`500m`, `2`, `0.25`) in millicores, rounded up.
pub fn cpu_millis(q: &str) -> Result<i64, QuantityError> {
    scaled(q, 1000)
}

/// A memory quantity (`64Mi`, `1G`, `1e9`) in bytes, rounded up.
pub fn bytes(q: &str) -> Result<i64, QuantityError> {
    scaled(q, 1)
}

/// `q` × `unit`, rounded up, as the apiserver reads quantities: a decimal
/// number, then a binary (`Ki`..`Ei`) or decimal (`n`, `u`, `m`, `k`,
/// `M`..`E`) suffix or a decimal exponent (`e3`).
fn scaled(q: &str, unit: i128) -> Result<i64, QuantityError> {
    let err = || QuantityError(q.to_owned());
    let t = q.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(t.len());
    let (number, suffix) = t.split_at(split);
    let (negative, number) = match number.strip_prefix('-') {
        Some(n) => (true, n),
        None => (false, number.strip_prefix('+').unwrap_or(number)),
    };
    let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
    if (whole.is_empty() && frac.is_empty())
        || !whole
            .bytes()
            .chain(frac.bytes())
            .all(|b| b.is_ascii_digit())
        || whole.len() + frac.len() > 30
    {
        return Err(err());
    }
    // numerator / 10^scale, times the suffix's num / den.
    let mut num: i128 = format!("{whole}{frac}").parse().map_err(|_| err())?;
    let mut den: i128 = 10i128.pow(frac.len() as u32);
    let pow = |base: i128, exp: u32| base.checked_pow(exp).ok_or_else(err);
    let (mul, div): (i128, i128) = match suffix {
        "" => (1, 1),
        "Ki" => (1 << 10, 1),
        "Mi" => (1 << 20, 1),
        "Gi" => (1 << 30, 1),
        "Ti" => (1 << 40, 1),
        "Pi" => (1 << 50, 1),
        "Ei" => (1 << 60, 1),
        "n" => (1, 1_000_000_000),
        "u" => (1, 1_000_000),
        "m" => (1, 1000),
        "k" => (1000, 1),
        "M" => (pow(10, 6)?, 1),
        "G" => (pow(10, 9)?, 1),
        "T" => (pow(10, 12)?, 1),
        "P" => (pow(10, 15)?, 1),
        "E" => (pow(10, 18)?, 1),
        exp => {
            let e = exp.strip_prefix(['e', 'E']).ok_or_else(err)?;
            let n: i32 = e.parse().map_err(|_| err())?;
            if n.abs() > 18 {
                return Err(err());
            }
            match n >= 0 {
                true => (pow(10, n as u32)?, 1),
                false => (1, pow(10, n.unsigned_abs())?),
            }
        }
    };
    num = num
        .checked_mul(mul)
        .and_then(|n| n.checked_mul(unit))
        .ok_or_else(err)?;
    den = den.checked_mul(div).ok_or_else(err)?;
    let value = (num + den - 1) / den;
    let value = if negative { -value } else { value };
    i64::try_from(value).map_err(|_| err())
}

/// Why `labels` (a spoke's `--cluster-label` pairs, or a Hello's labels)
/// cannot be a cluster's labels: the first bad key or value, named.
/// Values may be empty, as in Kubernetes.
pub fn check_labels(labels: &BTreeMap<String, String>) -> Result<(), String> {
    for (k, v) in labels {
        if let Some(why) = naming::label_key_error(k) {
            return Err(format!("cluster label {k:?}: {why}"));
        }
        if !(v.is_empty() || naming::is_label_name(v)) {
            return Err(format!(
                "cluster label {k}={v:?}: a value must be 1-63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric"
            ));
        }
    }
    Ok(())
}

/// Parses one `key=value` cluster label (the spoke's `--cluster-label`).
pub fn parse_label(pair: &str) -> Result<(String, String), String> {
    let (k, v) = pair
        .split_once('=')
        .ok_or_else(|| format!("{pair:?} is not key=value"))?;
    let one = BTreeMap::from([(k.to_owned(), v.to_owned())]);
    check_labels(&one)?;
    Ok((k.to_owned(), v.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_read_as_the_apiserver_reads_them() {
        assert_eq!(cpu_millis("500m"), Ok(500));
        assert_eq!(cpu_millis("2"), Ok(2000));
        assert_eq!(cpu_millis("0.25"), Ok(250));
        assert_eq!(cpu_millis("1500u"), Ok(2), "rounded up");
        assert_eq!(cpu_millis("100n"), Ok(1));
        assert_eq!(bytes("64Mi"), Ok(64 << 20));
        assert_eq!(bytes("1G"), Ok(1_000_000_000));
        assert_eq!(bytes("1e3"), Ok(1000));
        assert_eq!(bytes("1.5Gi"), Ok(3 << 29));
        assert_eq!(bytes("32Gi"), Ok(32 << 30));
        assert_eq!(bytes("110"), Ok(110));
        for bad in ["", "Mi", "1x", "1.2.3", "abc", "1e99", "99999999999Ei"] {
            assert!(bytes(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn resources_add_subtract_and_compare() {
        let a = Resources {
            cpu_millis: 1000,
            memory_bytes: 100,
        };
        let b = Resources {
            cpu_millis: 400,
            memory_bytes: 150,
        };
        assert_eq!(
            a.minus(b),
            Resources {
                cpu_millis: 600,
                memory_bytes: 0
            }
        );
        assert_eq!(a.plus(b).cpu_millis, 1400);
        assert!(!b.fits_in(a), "memory does not fit");
        assert!(a.minus(b).fits_in(a));
        let list = BTreeMap::from([("cpu", "250m"), ("memory", "1Ki"), ("pods", "110")]);
        assert_eq!(
            Resources::from_list(|k| list.get(k).copied()),
            Ok(Resources {
                cpu_millis: 250,
                memory_bytes: 1024
            })
        );
        assert_eq!(human_bytes(3 << 29), "1.5Gi");
        assert_eq!(human_bytes(512), "512");
    }

    #[test]
    fn cluster_labels_are_kubernetes_labels() {
        assert_eq!(
            parse_label("topology.kubernetes.io/region=eu-1"),
            Ok(("topology.kubernetes.io/region".into(), "eu-1".into()))
        );
        assert_eq!(parse_label("gpu="), Ok(("gpu".into(), String::new())));
        assert!(parse_label("novalue").unwrap_err().contains("key=value"));
        assert!(parse_label("-bad=x").unwrap_err().contains("\"-bad\""));
        assert!(parse_label("ok=bad value").unwrap_err().contains("ok="));
    }

    #[test]
    fn a_report_round_trips() {
        let c = Capacity {
            nodes: 3,
            allocatable: Resources {
                cpu_millis: 3000,
                memory_bytes: 3 << 30,
            },
            free: Resources {
                cpu_millis: 100,
                memory_bytes: 1 << 20,
            },
        };
        let report = crate::link::v1::CapacityReport::from(c);
        assert_eq!(Capacity::from(&report), c);
    }
}
