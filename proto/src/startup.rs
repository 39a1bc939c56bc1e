//! Plugin startup status: the private result a Harness workload publishes
//! about its current start, and the pure rule the spoke applies to it
//! before a revision may be reported ready. Both the spoke and the Harness
//! stand-in use these names.
//!
//! The workload serves [`PATH`] on its Harness port; the spoke reads it for
//! the exact Ready Pod through the apiserver's Pod proxy
//! (`pods/<name>:<port>/proxy/_clawfed/startup`), so nothing else needs to
//! reach the Pod. The body is a [`StartupStatus`] (JSON, camelCase).
//!
//! Runtime instance: the Pod's uid, as the runtime sees it through the
//! downward API (`env` [`RUNTIME_INSTANCE_ENV`] from `fieldRef`
//! [`RUNTIME_INSTANCE_FIELD`], set by the spoke on the Harness container).
//! The uid, not the name: a name can come back on a new Pod, a uid never
//! does, so a status proves which Pod's runtime wrote it.
//!
//! [`validate`] accepts a status only when it belongs to the revision
//! (revision id), to the exact Pod observed (runtime instance), names only
//! admitted selections, accounts for every admitted selection exactly once
//! (successful, or warned with a closed code), and uses only the codes of
//! [`WarningCode`]. Anything else (missing, malformed, foreign) is a
//! [`StartupError`] with the reason, never a ready verdict.

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Serialize};

/// The Pod-private path of the startup status.
pub const PATH: &str = "/_clawfed/startup";
/// Env of the Harness container: the admitted plugin selection ids (a JSON
/// array of strings).
pub const SELECTIONS_ENV: &str = "CLAWFED_PLUGIN_SELECTIONS";
/// Env of the Harness container: the AgentRevision id.
pub const REVISION_ID_ENV: &str = "CLAWFED_REVISION_ID";
/// Env of the Harness container: the runtime instance (downward API).
pub const RUNTIME_INSTANCE_ENV: &str = "CLAWFED_RUNTIME_INSTANCE";
/// The downward-API field the runtime instance comes from.
pub const RUNTIME_INSTANCE_FIELD: &str = "metadata.uid";
/// The largest status body the spoke reads; a longer one is malformed.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// The closed set of warning codes, each for a selection the runtime
/// disabled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum WarningCode {
    /// The plugin could not be installed.
    PluginInstallFailed,
    /// The plugin needs authorization the runtime does not have.
    PluginAuthRequired,
}

impl WarningCode {
    /// Every code.
    pub const ALL: [WarningCode; 2] = [
        WarningCode::PluginInstallFailed,
        WarningCode::PluginAuthRequired,
    ];

    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            WarningCode::PluginInstallFailed => "PLUGIN_INSTALL_FAILED",
            WarningCode::PluginAuthRequired => "PLUGIN_AUTH_REQUIRED",
        }
    }

    /// Parses the wire spelling (exact, case-sensitive).
    pub fn parse(s: &str) -> Option<WarningCode> {
        WarningCode::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

impl fmt::Display for WarningCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One warned selection as published (the code is checked by [`validate`],
/// so an unknown code is reported by name rather than as malformed JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PublishedWarning {
    /// The selection id.
    pub selection: String,
    /// One of [`WarningCode`].
    pub code: String,
}

/// The body the workload serves at [`PATH`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StartupStatus {
    /// The AgentRevision id the runtime was started for.
    pub revision_id: String,
    /// The runtime instance: the Pod uid (see the module docs).
    pub runtime_instance: String,
    /// Selections enabled by this start.
    #[serde(default)]
    pub successful: Vec<String>,
    /// Selections this start disabled, each with its code.
    #[serde(default)]
    pub warnings: Vec<PublishedWarning>,
}

/// A validated warning.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Warning {
    /// The selection id.
    pub selection: String,
    /// Why it is disabled.
    pub code: WarningCode,
}

/// A status that may establish readiness.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Accepted {
    /// Enabled selections, sorted.
    pub successful: Vec<String>,
    /// Disabled selections, sorted by selection.
    pub warnings: Vec<Warning>,
}

/// What the spoke expects of the status of one Pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected<'a> {
    /// The revision's id.
    pub revision_id: &'a str,
    /// The uid of the Pod the readiness contract found Ready.
    pub runtime_instance: &'a str,
    /// The revision's admitted selections.
    pub admitted: &'a [String],
}

/// Why a startup status cannot establish readiness. Each message is the
/// reason reported to the hub.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StartupError {
    /// The workload serves no status (404, or an empty body).
    #[error("startup status missing")]
    Missing,
    /// The status could not be read (transport, timeout, HTTP error).
    #[error("startup status unreadable: {0}")]
    Unreadable(String),
    /// The body is not a status (not JSON, wrong shape, too large).
    #[error("startup status malformed: {0}")]
    Malformed(String),
    /// The status belongs to another revision.
    #[error("startup status is for revision {got:?}, not {want:?}")]
    ForeignRevision {
        /// What the status says.
        got: String,
        /// The revision observed.
        want: String,
    },
    /// The status was written by another runtime instance (another Pod, or
    /// a stale result).
    #[error("startup status is for runtime instance {got:?}, not the observed pod {want:?}")]
    ForeignInstance {
        /// What the status says.
        got: String,
        /// The observed Pod's uid.
        want: String,
    },
    /// A selection the revision did not admit.
    #[error("startup status names selection {0:?}, which the revision did not admit")]
    UnknownSelection(String),
    /// A selection listed twice (or both successful and warned).
    #[error("startup status lists selection {0:?} more than once")]
    DuplicateSelection(String),
    /// An admitted selection neither successful nor warned.
    #[error("startup status does not account for admitted selection {0:?}")]
    UnaccountedSelection(String),
    /// A warning code outside the closed set.
    #[error("startup status warns selection {selection:?} with unknown code {code:?}")]
    UnknownCode {
        /// The selection.
        selection: String,
        /// The code given.
        code: String,
    },
}

/// Parses and validates a status body (see [`validate`]). An empty body is
/// [`StartupError::Missing`].
pub fn parse(body: &[u8], expected: &Expected<'_>) -> Result<Accepted, StartupError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(StartupError::Missing);
    }
    if body.len() > MAX_BODY_BYTES {
        return Err(StartupError::Malformed(format!(
            "body larger than {MAX_BODY_BYTES} bytes"
        )));
    }
    let status: StartupStatus =
        serde_json::from_slice(body).map_err(|e| StartupError::Malformed(e.to_string()))?;
    validate(&status, expected)
}

/// The rule: ownership, startup identity, selection keys and closed codes.
pub fn validate(status: &StartupStatus, expected: &Expected<'_>) -> Result<Accepted, StartupError> {
    if status.revision_id != expected.revision_id {
        return Err(StartupError::ForeignRevision {
            got: status.revision_id.clone(),
            want: expected.revision_id.to_owned(),
        });
    }
    if expected.runtime_instance.is_empty() || status.runtime_instance != expected.runtime_instance
    {
        return Err(StartupError::ForeignInstance {
            got: status.runtime_instance.clone(),
            want: expected.runtime_instance.to_owned(),
        });
    }
    let admitted: BTreeSet<&str> = expected.admitted.iter().map(String::as_str).collect();
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    let mut note = |selection: &str| -> Result<(), StartupError> {
        if !admitted.contains(selection) {
            return Err(StartupError::UnknownSelection(selection.to_owned()));
        }
        if !seen.insert(admitted.get(selection).copied().unwrap_or_default()) {
            return Err(StartupError::DuplicateSelection(selection.to_owned()));
        }
        Ok(())
    };
    for s in &status.successful {
        note(s)?;
    }
    let mut warnings = Vec::with_capacity(status.warnings.len());
    for w in &status.warnings {
        note(&w.selection)?;
        let code = WarningCode::parse(&w.code).ok_or_else(|| StartupError::UnknownCode {
            selection: w.selection.clone(),
            code: w.code.clone(),
        })?;
        warnings.push(Warning {
            selection: w.selection.clone(),
            code,
        });
    }
    if let Some(missing) = admitted.iter().find(|a| !seen.contains(**a)) {
        return Err(StartupError::UnaccountedSelection((*missing).to_owned()));
    }
    let mut successful = status.successful.clone();
    successful.sort();
    warnings.sort();
    Ok(Accepted {
        successful,
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admitted() -> Vec<String> {
        vec!["alpha".into(), "beta".into()]
    }

    fn status(successful: &[&str], warnings: &[(&str, &str)]) -> StartupStatus {
        StartupStatus {
            revision_id: "rev-1".into(),
            runtime_instance: "uid-1".into(),
            successful: successful.iter().map(|s| s.to_string()).collect(),
            warnings: warnings
                .iter()
                .map(|(s, c)| PublishedWarning {
                    selection: s.to_string(),
                    code: c.to_string(),
                })
                .collect(),
        }
    }

    fn check(s: &StartupStatus) -> Result<Accepted, StartupError> {
        let admitted = admitted();
        validate(
            s,
            &Expected {
                revision_id: "rev-1",
                runtime_instance: "uid-1",
                admitted: &admitted,
            },
        )
    }

    #[test]
    fn every_selection_successful_or_warned_with_a_closed_code_is_accepted() {
        let ok = check(&status(&["beta", "alpha"], &[])).expect("all successful");
        assert_eq!(ok.successful, ["alpha", "beta"]);
        assert!(ok.warnings.is_empty());
        let warned = check(&status(&["alpha"], &[("beta", "PLUGIN_AUTH_REQUIRED")]))
            .expect("a disabled selection is a warning, not a failure");
        assert_eq!(
            warned.warnings,
            [Warning {
                selection: "beta".into(),
                code: WarningCode::PluginAuthRequired
            }]
        );
        let both = check(&status(
            &[],
            &[
                ("beta", "PLUGIN_INSTALL_FAILED"),
                ("alpha", "PLUGIN_AUTH_REQUIRED"),
            ],
        ))
        .expect("every selection disabled is still a valid status");
        assert_eq!(both.warnings[0].selection, "alpha");
    }

    #[test]
    fn no_admitted_selections_need_an_empty_but_owned_status() {
        let none: Vec<String> = Vec::new();
        let e = Expected {
            revision_id: "rev-1",
            runtime_instance: "uid-1",
            admitted: &none,
        };
        assert_eq!(
            validate(&status(&[], &[]), &e).expect("ok"),
            Accepted::default()
        );
        assert_eq!(
            validate(&status(&["alpha"], &[]), &e),
            Err(StartupError::UnknownSelection("alpha".into()))
        );
    }

    #[test]
    fn foreign_revision_or_runtime_instance_is_refused() {
        let mut s = status(&["alpha", "beta"], &[]);
        s.revision_id = "rev-0".into();
        assert!(matches!(
            check(&s),
            Err(StartupError::ForeignRevision { .. })
        ));
        let mut s = status(&["alpha", "beta"], &[]);
        s.runtime_instance = "uid-of-the-previous-pod".into();
        let err = check(&s).expect_err("stale instance");
        assert!(matches!(err, StartupError::ForeignInstance { .. }));
        assert!(err.to_string().contains("uid-1"), "{err}");
        // An observation without a uid can never match.
        let admitted = admitted();
        let blank = Expected {
            revision_id: "rev-1",
            runtime_instance: "",
            admitted: &admitted,
        };
        let mut s = status(&["alpha", "beta"], &[]);
        s.runtime_instance = String::new();
        assert!(matches!(
            validate(&s, &blank),
            Err(StartupError::ForeignInstance { .. })
        ));
    }

    #[test]
    fn selection_keys_must_match_the_admitted_set_exactly() {
        assert_eq!(
            check(&status(&["alpha", "beta", "gamma"], &[])),
            Err(StartupError::UnknownSelection("gamma".into()))
        );
        assert_eq!(
            check(&status(&["alpha"], &[("gamma", "PLUGIN_AUTH_REQUIRED")])),
            Err(StartupError::UnknownSelection("gamma".into()))
        );
        assert_eq!(
            check(&status(&["alpha", "alpha", "beta"], &[])),
            Err(StartupError::DuplicateSelection("alpha".into()))
        );
        assert_eq!(
            check(&status(
                &["alpha", "beta"],
                &[("beta", "PLUGIN_AUTH_REQUIRED")]
            )),
            Err(StartupError::DuplicateSelection("beta".into()))
        );
        assert_eq!(
            check(&status(&["alpha"], &[])),
            Err(StartupError::UnaccountedSelection("beta".into()))
        );
    }

    #[test]
    fn codes_are_a_closed_set() {
        for code in ["PLUGIN_EXPLODED", "plugin_auth_required", ""] {
            assert_eq!(
                check(&status(&["alpha"], &[("beta", code)])),
                Err(StartupError::UnknownCode {
                    selection: "beta".into(),
                    code: code.into()
                }),
                "{code:?}"
            );
        }
        for c in WarningCode::ALL {
            assert_eq!(WarningCode::parse(c.as_str()), Some(c));
        }
    }

    #[test]
    fn missing_and_malformed_bodies_are_errors_with_a_reason() {
        let admitted = admitted();
        let e = Expected {
            revision_id: "rev-1",
            runtime_instance: "uid-1",
            admitted: &admitted,
        };
        assert_eq!(parse(b"", &e), Err(StartupError::Missing));
        assert_eq!(parse(b" \n", &e), Err(StartupError::Missing));
        for bad in [
            &br#"{"revisionId":"rev-1""#[..],
            b"ready",
            br#"{"status":"ready","plugins":[]}"#,
            br#"{"revisionId":"rev-1","runtimeInstance":"uid-1","successful":"alpha"}"#,
        ] {
            assert!(
                matches!(parse(bad, &e), Err(StartupError::Malformed(_))),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        let huge = vec![b' '; MAX_BODY_BYTES + 1];
        let mut huge_json = huge.clone();
        huge_json[0] = b'{';
        assert!(matches!(
            parse(&huge_json, &e),
            Err(StartupError::Malformed(_))
        ));
        let good = serde_json::to_vec(&status(&["alpha", "beta"], &[])).unwrap();
        assert!(parse(&good, &e).is_ok());
    }
}
