//! Image registry mirrors: an air-gapped cluster pulls `registry.example/x`
//! as `mirror.internal:5000/x`, tag or digest kept. Used by the spoke for
//! Harness Pods and by the hub for Gateway Pods. Pure.

use serde::{Deserialize, Serialize};

/// `from` (a registry host, optionally with a path) is pulled from `to`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistryMirror {
    pub from: String,
    pub to: String,
}

impl std::str::FromStr for RegistryMirror {
    type Err = String;

    /// `FROM=TO`, e.g. `registry.example=mirror.internal:5000/mirror`.
    fn from_str(s: &str) -> Result<Self, String> {
        let (from, to) = s
            .split_once('=')
            .ok_or_else(|| format!("{s:?}: expected FROM=TO (registry hosts)"))?;
        let ok = |r: &str| {
            !r.is_empty()
                && !r.ends_with('/')
                && !r.contains("://")
                && r.chars().all(|c| c.is_ascii_graphic() && c != '@')
        };
        if !ok(from) || !ok(to) {
            return Err(format!(
                "{s:?}: FROM and TO are registry hosts (with an optional path), no scheme, no trailing /"
            ));
        }
        Ok(RegistryMirror {
            from: from.to_owned(),
            to: to.to_owned(),
        })
    }
}

/// `image` as a cluster with `mirrors` pulls it: the first mirror whose
/// `from` is its registry (or a path prefix of it) replaces that part; the
/// rest, tag or digest included, is kept.
pub fn mirrored(mirrors: &[RegistryMirror], image: &str) -> String {
    for m in mirrors {
        if let Some(rest) = image.strip_prefix(&m.from)
            && rest.starts_with('/')
        {
            return format!("{}{rest}", m.to);
        }
    }
    image.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mirror_replaces_the_registry_and_keeps_the_digest() {
        let e: Vec<RegistryMirror> = vec![
            "registry.example=mirror.internal:5000/mirror"
                .parse()
                .unwrap(),
            "ghcr.io/openclaw=mirror.internal:5000/openclaw"
                .parse()
                .unwrap(),
        ];
        let digest = format!("@sha256:{}", "a".repeat(64));
        assert_eq!(
            mirrored(&e, &format!("registry.example/openclaw-codex{digest}")),
            format!("mirror.internal:5000/mirror/openclaw-codex{digest}")
        );
        assert_eq!(
            mirrored(&e, "ghcr.io/openclaw/openclaw:1.2"),
            "mirror.internal:5000/openclaw/openclaw:1.2"
        );
        // Only whole registry (or path) components match.
        assert_eq!(
            mirrored(&e, "registry.example.org/x:1"),
            "registry.example.org/x:1"
        );
        assert_eq!(
            mirrored(&e, "ghcr.io/openclawx/y:1"),
            "ghcr.io/openclawx/y:1"
        );
        assert_eq!(mirrored(&[], "a/b:1"), "a/b:1");
        for bad in [
            "registry.example",
            "=x",
            "x=",
            "https://a=b",
            "a/=b",
            "a=b@c",
        ] {
            assert!(bad.parse::<RegistryMirror>().is_err(), "{bad}");
        }
    }
}
