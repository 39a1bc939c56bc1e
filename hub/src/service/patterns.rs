//! The checks of [`super::validate`] as JSON Schema patterns, for the
//! served OpenAPI document: one rule, two spellings, kept equal by the
//! tests below (each pattern against its check on the same strings). Each
//! is valid in both ECMA-262 and Rust `regex` syntax.

/// A DNS-1123 label, with `maxLength` 63 ([`super::validate::dns_label`]).
pub const DNS_LABEL: &str = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";

/// A Kubernetes label key, `[prefix/]name`: a prefix of DNS labels and a
/// name of at most 63 characters. The prefix's total of 253 characters is
/// the one limit left to the server.
pub const LABEL_KEY: &str = "^([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$";

/// A Kubernetes label value: empty, or at most 63 characters.
pub const LABEL_VALUE: &str = "^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$";

/// A resource quantity as clawfed accepts it ([`clawfed_kube::quantity::check`]).
pub const QUANTITY: &str = "^[0-9]+(\\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?$";

/// An image reference: no whitespace or control characters, and a digest,
/// when present, `sha256:<64 hex>`; `maxLength` 512.
pub const IMAGE: &str = "^([^\\x00-\\x20\\x7F@]+|[^\\x00-\\x20\\x7F@]*@sha256:[0-9a-fA-F]{64})$";

/// [`IMAGE`], or empty (the installation's default agent image, when it
/// has one; the document adds `minLength` 1 when it has none).
pub const IMAGE_OR_EMPTY: &str =
    "^([^\\x00-\\x20\\x7F@]*|[^\\x00-\\x20\\x7F@]*@sha256:[0-9a-fA-F]{64})$";

/// Longest image reference, in characters.
pub const IMAGE_MAX: usize = 512;

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::service::validate;

    /// Every string of up to `len` characters over `alphabet`, and `extra`.
    fn corpus(alphabet: &[&str], len: usize, extra: &[String]) -> Vec<String> {
        let mut all = vec![String::new()];
        let mut last = vec![String::new()];
        for _ in 0..len {
            last = last
                .iter()
                .flat_map(|s| alphabet.iter().map(move |c| format!("{s}{c}")))
                .collect();
            all.extend(last.iter().cloned());
        }
        all.extend(extra.iter().cloned());
        all
    }

    fn agree(
        pattern: &str,
        max_chars: Option<usize>,
        check: impl Fn(&str) -> bool,
        strings: &[String],
    ) {
        let re = regex::Regex::new(pattern).unwrap();
        for s in strings {
            let by_schema = re.is_match(s) && max_chars.is_none_or(|m| s.chars().count() <= m);
            assert_eq!(by_schema, check(s), "{pattern} on {s:?}");
        }
    }

    fn long(c: char, n: usize) -> String {
        std::iter::repeat_n(c, n).collect()
    }

    #[test]
    fn dns_label_agrees_with_its_check() {
        let extra = [
            long('a', 63),
            long('a', 64),
            "a-b".into(),
            "-a".into(),
            "A".into(),
        ];
        let strings = corpus(&["a", "0", "-", "A", ".", "é"], 3, &extra);
        agree(
            DNS_LABEL,
            Some(63),
            |s| validate::dns_label("f", s).is_ok(),
            &strings,
        );
    }

    #[test]
    fn label_keys_and_values_agree_with_their_checks() {
        let spec = |key: &str, value: &str| {
            let mut spec = crate::model::AgentSpec {
                harness_kind: crate::model::HarnessKind::EmbeddedOpenclaw,
                execution_mode: crate::model::ExecutionMode::Ordinary,
                image: "img:1".into(),
                gateway_image: None,
                configuration: None,
                resources: Default::default(),
                requirement_labels: BTreeMap::new(),
                placement: Default::default(),
                plugins: vec![],
                channels: vec![],
                failover: None,
            };
            spec.requirement_labels.insert(key.into(), value.into());
            validate::agent_spec(&spec, false).is_ok()
        };
        let extra = [
            long('a', 63),
            long('a', 64),
            format!("{}/x", long('a', 63)),
            format!("{}/x", long('a', 64)),
            "example.com/gpu".into(),
            "a.b/c_d.e".into(),
            "/x".into(),
            "a//b".into(),
            "a/b/c".into(),
        ];
        let strings = corpus(&["a", "Z", "0", "-", "_", ".", "/"], 3, &extra);
        // Reserved prefixes are refused for another reason than syntax.
        let strings: Vec<String> = strings
            .into_iter()
            .filter(|k| !clawfed_proto::labels::is_reserved(k))
            .collect();
        agree(LABEL_KEY, None, |k| spec(k, "v"), &strings);
        agree(LABEL_VALUE, None, |v| spec("k", v), &strings);
    }

    #[test]
    fn quantity_agrees_with_its_check() {
        let extra = [
            "500m".into(),
            "1.5Gi".into(),
            "1KiKi".into(),
            "Mi".into(),
            ".5".into(),
            "1.".into(),
            "1e3".into(),
            "+1".into(),
        ];
        let strings = corpus(&["1", "0", ".", "m", "Ki", "Mi", "E", "i", "e"], 3, &extra);
        agree(
            QUANTITY,
            None,
            |q| clawfed_kube::quantity::check(q).is_ok(),
            &strings,
        );
    }

    #[test]
    fn image_references_agree_with_their_check() {
        let digest = format!("sha256:{}", "ab".repeat(32));
        let extra = [
            format!("img@{digest}"),
            format!("@{digest}"),
            format!("img@{digest}x"),
            format!("a@b@{digest}"),
            "img@sha256:abc".into(),
            "img:1 ".into(),
            "img\t1".into(),
            "ïmg".into(),
            long('a', 512),
            long('a', 513),
            long('é', 512),
        ];
        let strings = corpus(&["a", ":", "/", "@", " ", "\u{7f}", "é"], 3, &extra);
        let check = |s: &str| validate::image("f", s).is_ok();
        agree(IMAGE, Some(IMAGE_MAX), check, &strings);
        agree(
            IMAGE_OR_EMPTY,
            Some(IMAGE_MAX),
            |s| s.is_empty() || check(s),
            &strings,
        );
    }
}
