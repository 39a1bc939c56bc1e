//! Diagnostics: the private endpoint a runtime Pod (Harness or Gateway)
//! serves, and the bounds every reader applies before a check leaves the
//! cluster it was read in.
//!
//! A workload serves [`PATH`] on its port; the spoke (Harness) or the hub
//! (Gateway) reads it through the apiserver's Pod proxy. The body is
//! [`DiagnosticsBody`] (JSON). [`bound`] keeps at most [`MAX_CHECKS`]
//! generic checks, each a short name of `[a-z0-9._-]`, a status of the
//! closed set [`CheckStatus`] and a short single-line detail: the shape has
//! no room for credential values, logs or message text. A Pod that is
//! missing or does not answer is a check with status `unknown`
//! ([`unknown`]); diagnostics never change a deployment's status.

use serde::{Deserialize, Serialize};

/// The Pod-private path of the diagnostics.
pub const PATH: &str = "/_clawfed/diagnostics";
/// Checks kept of one Pod's answer.
pub const MAX_CHECKS: usize = 16;
/// Longest check name (characters).
pub const MAX_NAME: usize = 48;
/// Longest detail (characters); longer details are cut.
pub const MAX_DETAIL: usize = 160;
/// The largest body a reader reads.
pub const MAX_BODY_BYTES: usize = 32 * 1024;
/// How long a reader waits for a Pod's answer.
pub const READ_TIMEOUT_MS: u64 = 5_000;
/// How long the hub waits for a spoke's answer (the spoke's own read is
/// bounded by [`READ_TIMEOUT_MS`]).
pub const SPOKE_TIMEOUT_MS: u64 = 10_000;

/// The closed set of check statuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CheckStatus {
    /// The check passed.
    Ok,
    /// Degraded but working.
    Warn,
    /// The check failed.
    Fail,
    /// Not known: the Pod is missing, unreachable, or said something else.
    Unknown,
}

impl CheckStatus {
    /// Every status.
    pub const ALL: [CheckStatus; 4] = [
        CheckStatus::Ok,
        CheckStatus::Warn,
        CheckStatus::Fail,
        CheckStatus::Unknown,
    ];

    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            CheckStatus::Ok => "ok",
            CheckStatus::Warn => "warn",
            CheckStatus::Fail => "fail",
            CheckStatus::Unknown => "unknown",
        }
    }

    /// Parses the wire spelling; anything else is `None`.
    pub fn parse(s: &str) -> Option<CheckStatus> {
        CheckStatus::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

/// One check as a workload publishes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PublishedCheck {
    /// Short generic name, e.g. `plugins`.
    pub name: String,
    /// `ok`, `warn`, `fail` or `unknown`.
    pub status: String,
    /// Short detail.
    #[serde(default)]
    pub detail: String,
}

/// The body a workload serves at [`PATH`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct DiagnosticsBody {
    /// The checks.
    pub checks: Vec<PublishedCheck>,
}

/// A bounded check, safe to pass on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Check {
    /// Name (`[a-z0-9._-]`, at most [`MAX_NAME`]).
    pub name: String,
    /// Status.
    pub status: CheckStatus,
    /// Single line, at most [`MAX_DETAIL`] characters.
    pub detail: String,
}

/// A check with status `unknown`, for a Pod that is missing or did not
/// answer (`detail` is bounded like any other).
pub fn unknown(name: &str, detail: &str) -> Check {
    Check {
        name: clean_name(name).unwrap_or_else(|| "diagnostics".into()),
        status: CheckStatus::Unknown,
        detail: clean_detail(detail),
    }
}

fn clean_name(name: &str) -> Option<String> {
    let ok = !name.is_empty()
        && name.chars().count() <= MAX_NAME
        && name.chars().all(|c| {
            c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '_' || c == '-'
        });
    ok.then(|| name.to_owned())
}

/// One line of printable text, cut at [`MAX_DETAIL`] characters.
pub fn clean_detail(detail: &str) -> String {
    let line: String = detail
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let line = line.trim();
    if line.chars().count() <= MAX_DETAIL {
        return line.to_owned();
    }
    let mut cut: String = line.chars().take(MAX_DETAIL - 1).collect();
    cut.push('…');
    cut
}

/// Parses a workload's answer and bounds it: at most [`MAX_CHECKS`]
/// checks; a check with an invalid name is dropped, one with a status
/// outside the closed set becomes `unknown`; details are cut. A body that
/// is not [`DiagnosticsBody`] is one `unknown` check saying so.
pub fn bound(body: &[u8]) -> Vec<Check> {
    if body.len() > MAX_BODY_BYTES {
        return vec![unknown(
            "diagnostics",
            &format!("answer larger than {MAX_BODY_BYTES} bytes"),
        )];
    }
    let Ok(parsed) = serde_json::from_slice::<DiagnosticsBody>(body) else {
        return vec![unknown(
            "diagnostics",
            "answer is not a diagnostics document",
        )];
    };
    parsed
        .checks
        .into_iter()
        .filter_map(|c| {
            let name = clean_name(&c.name)?;
            let (status, detail) = match CheckStatus::parse(&c.status) {
                Some(s) => (s, clean_detail(&c.detail)),
                None => (
                    CheckStatus::Unknown,
                    "status outside ok|warn|fail|unknown".into(),
                ),
            };
            Some(Check {
                name,
                status,
                detail,
            })
        })
        .take(MAX_CHECKS)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_checks_keep_the_closed_shape() {
        let body = serde_json::json!({ "checks": [
            { "name": "plugins", "status": "warn", "detail": "1 of 2 disabled" },
            { "name": "model", "status": "ok" },
            { "name": "Bad Name", "status": "ok", "detail": "dropped" },
            { "name": "odd", "status": "exploded", "detail": "secret-looking text" },
            { "name": "long", "status": "fail", "detail": format!("line1\nline2 {}", "x".repeat(500)) },
        ]});
        let checks = bound(&serde_json::to_vec(&body).unwrap());
        let names: Vec<&str> = checks.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["plugins", "model", "odd", "long"]);
        assert_eq!(checks[0].status, CheckStatus::Warn);
        assert_eq!(checks[2].status, CheckStatus::Unknown);
        assert!(
            !checks[2].detail.contains("secret"),
            "an unknown status does not pass its detail on"
        );
        assert!(checks[3].detail.chars().count() <= MAX_DETAIL);
        assert!(!checks[3].detail.contains('\n'));
    }

    #[test]
    fn too_many_checks_are_cut_and_garbage_is_unknown() {
        let many: Vec<_> = (0..100)
            .map(|i| serde_json::json!({ "name": format!("c{i}"), "status": "ok" }))
            .collect();
        let checks = bound(&serde_json::to_vec(&serde_json::json!({ "checks": many })).unwrap());
        assert_eq!(checks.len(), MAX_CHECKS);
        let garbage = bound(b"<html>hello</html>");
        assert_eq!(garbage.len(), 1);
        assert_eq!(garbage[0].status, CheckStatus::Unknown);
        let huge = bound(&vec![b' '; MAX_BODY_BYTES + 1]);
        assert_eq!(huge[0].status, CheckStatus::Unknown);
        assert_eq!(unknown("Not Valid", "x").name, "diagnostics");
        for s in CheckStatus::ALL {
            assert_eq!(CheckStatus::parse(s.as_str()), Some(s));
        }
    }
}
