//! The Harness readiness contract (DESIGN.md, "Harness readiness contract") as
//! a pure function over an observed Pod list.
//!
//! A Harness is ready when exactly one live Pod in the resolved namespace
//! carries the Agent, revision and workload-role labels of the active Service
//! selector, carries every supplied Harness requirement label, and reports
//! `Ready=True`. Malformed or incomplete observations are errors, not
//! verdicts. The spoke converts k8s-openapi Pods into [`PodObservation`]s, so
//! this module knows nothing of Kubernetes clients.

use std::collections::BTreeMap;

use crate::labels;
use crate::naming::validate_dns1123_label;

/// Workload-role label value of a Harness.
pub const HARNESS_ROLE: &str = "harness";

/// What is being asked: which Pods are the Harness of one revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadinessQuery {
    /// The resolved (physical) namespace.
    pub namespace: String,
    /// The Agent name (value of [`labels::AGENT`]).
    pub agent: String,
    /// The revision number (value of [`labels::REVISION`]).
    pub revision: String,
    /// The workload role (value of [`labels::WORKLOAD_ROLE`]), normally
    /// [`HARNESS_ROLE`].
    pub role: String,
    /// Harness requirement labels, as supplied (a list, so a key given twice
    /// with different values is detected as contradictory).
    pub requirement_labels: Vec<(String, String)>,
}

/// One observed condition of a Pod.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConditionObservation {
    /// `type`, e.g. `Ready`.
    pub type_: String,
    /// `status`: `True`, `False` or `Unknown`.
    pub status: String,
}

/// The part of a Pod status the contract reads.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodStatusObservation {
    /// `status.conditions`; `None` when absent.
    pub conditions: Option<Vec<ConditionObservation>>,
}

/// One observed Pod.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodObservation {
    /// `metadata.namespace`.
    pub namespace: Option<String>,
    /// `metadata.name`.
    pub name: Option<String>,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// `status`; `None` when absent.
    pub status: Option<PodStatusObservation>,
}

/// An observed Pod list.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodListObservation {
    /// The Pods.
    pub items: Vec<PodObservation>,
    /// `metadata.continue` of the list: more results remain when non-empty.
    pub continue_token: Option<String>,
    /// `metadata.remainingItemCount`: more results remain when above zero.
    pub remaining_item_count: Option<i64>,
}

/// Why a Harness is not ready (the verdict's `reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotReady {
    /// No live Pod carries the labels.
    NoCandidate,
    /// More than one live Pod carries the labels (label uniqueness violated).
    NotUnique,
    /// The one candidate does not report `Ready=True` (or has no status or
    /// conditions).
    CandidateNotReady,
}

impl NotReady {
    /// A stable lowercase reason string for reports.
    pub fn as_str(self) -> &'static str {
        match self {
            NotReady::NoCandidate => "no live candidate",
            NotReady::NotUnique => "several live candidates",
            NotReady::CandidateNotReady => "candidate not ready",
        }
    }
}

/// The verdict of one observation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// True only when exactly one live candidate reports `Ready=True`.
    pub ready: bool,
    /// How many live Pods carry the labels (label uniqueness).
    pub live_candidates: u32,
    /// How many of them report `Ready=True`.
    pub ready_candidates: u32,
    /// The ready candidate's name, when ready.
    pub pod: Option<String>,
    /// Why not ready; `None` when ready.
    pub not_ready: Option<NotReady>,
}

impl Verdict {
    /// A stable lowercase reason string (`ready` when ready).
    pub fn reason(&self) -> &'static str {
        self.not_ready.map_or("ready", NotReady::as_str)
    }
}

/// A malformed or incomplete observation: an error, never a verdict.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadinessError {
    /// The query names an invalid namespace, Agent, revision or role.
    #[error("invalid query identity: {0}")]
    InvalidQuery(&'static str),
    /// A requirement label key is given twice with different values, or
    /// contradicts the Agent, revision or role label.
    #[error("contradictory requirement label {key}")]
    ContradictoryRequirement {
        /// The label key.
        key: String,
    },
    /// A requirement label has an empty key.
    #[error("requirement label with an empty key")]
    EmptyRequirementKey,
    /// A Pod has no name or namespace.
    #[error("pod with invalid identity (missing name or namespace)")]
    InvalidPodIdentity,
    /// A candidate Pod has a condition with an empty type or an unknown status.
    #[error("pod {pod} has an invalid condition (type {type_:?}, status {status:?})")]
    InvalidCondition {
        /// The Pod.
        pod: String,
        /// The condition type.
        type_: String,
        /// The condition status.
        status: String,
    },
    /// A candidate Pod lists the same condition type twice.
    #[error("pod {pod} has duplicate condition type {type_}")]
    DuplicateCondition {
        /// The Pod.
        pod: String,
        /// The condition type.
        type_: String,
    },
    /// The list says more results remain (continue token or remaining count).
    #[error("incomplete pod list: more results remain")]
    IncompleteList,
    /// The observation was cancelled.
    #[error("observation cancelled")]
    Cancelled,
}

/// The selector labels plus requirement labels every candidate must carry,
/// checked for contradictions.
pub fn required_labels(query: &ReadinessQuery) -> Result<BTreeMap<String, String>, ReadinessError> {
    validate_dns1123_label(&query.namespace)
        .map_err(|_| ReadinessError::InvalidQuery("namespace"))?;
    if query.agent.is_empty() {
        return Err(ReadinessError::InvalidQuery("agent"));
    }
    if query.revision.is_empty() || !query.revision.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ReadinessError::InvalidQuery("revision"));
    }
    if query.role.is_empty() {
        return Err(ReadinessError::InvalidQuery("role"));
    }
    let mut required = BTreeMap::from([
        (labels::AGENT.to_string(), query.agent.clone()),
        (labels::REVISION.to_string(), query.revision.clone()),
        (labels::WORKLOAD_ROLE.to_string(), query.role.clone()),
    ]);
    for (key, value) in &query.requirement_labels {
        if key.is_empty() {
            return Err(ReadinessError::EmptyRequirementKey);
        }
        match required.get(key) {
            Some(existing) if existing != value => {
                return Err(ReadinessError::ContradictoryRequirement { key: key.clone() });
            }
            Some(_) => {}
            None => {
                required.insert(key.clone(), value.clone());
            }
        }
    }
    Ok(required)
}

/// Evaluates the contract. `cancelled` is the state of the observation's
/// cancellation signal: a cancelled observation never yields ready.
pub fn evaluate(
    query: &ReadinessQuery,
    list: &PodListObservation,
    cancelled: bool,
) -> Result<Verdict, ReadinessError> {
    if cancelled {
        return Err(ReadinessError::Cancelled);
    }
    let required = required_labels(query)?;
    if list
        .continue_token
        .as_deref()
        .is_some_and(|t| !t.is_empty())
        || list.remaining_item_count.is_some_and(|n| n > 0)
    {
        return Err(ReadinessError::IncompleteList);
    }
    let mut live = 0u32;
    let mut ready = 0u32;
    let mut ready_pod = None;
    for pod in &list.items {
        let (Some(name), Some(namespace)) = (pod.name.as_deref(), pod.namespace.as_deref()) else {
            return Err(ReadinessError::InvalidPodIdentity);
        };
        if name.is_empty() || namespace.is_empty() {
            return Err(ReadinessError::InvalidPodIdentity);
        }
        // Every listed Pod's conditions are checked, candidate or not: a
        // malformed observation is an error wherever it shows (seed rule).
        let pod_is_ready = pod_ready(name, pod)?;
        if namespace != query.namespace || pod.deleting {
            continue;
        }
        let carries = required
            .iter()
            .all(|(k, v)| pod.labels.get(k).is_some_and(|have| have == v));
        if !carries {
            continue;
        }
        live += 1;
        if pod_is_ready {
            ready += 1;
            ready_pod = Some(name.to_string());
        }
    }
    let not_ready = match (live, ready) {
        (0, _) => Some(NotReady::NoCandidate),
        (1, 1) => None,
        (1, _) => Some(NotReady::CandidateNotReady),
        _ => Some(NotReady::NotUnique),
    };
    Ok(Verdict {
        ready: not_ready.is_none(),
        live_candidates: live,
        ready_candidates: ready,
        pod: if not_ready.is_none() { ready_pod } else { None },
        not_ready,
    })
}

/// `Ready=True` on a listed Pod, validating its conditions.
fn pod_ready(name: &str, pod: &PodObservation) -> Result<bool, ReadinessError> {
    let Some(conditions) = pod.status.as_ref().and_then(|s| s.conditions.as_ref()) else {
        return Ok(false);
    };
    let mut seen = std::collections::BTreeSet::new();
    let mut ready = false;
    for c in conditions {
        let valid_status = matches!(c.status.as_str(), "True" | "False" | "Unknown");
        if c.type_.is_empty() || !valid_status {
            return Err(ReadinessError::InvalidCondition {
                pod: name.to_string(),
                type_: c.type_.clone(),
                status: c.status.clone(),
            });
        }
        if !seen.insert(c.type_.as_str()) {
            return Err(ReadinessError::DuplicateCondition {
                pod: name.to_string(),
                type_: c.type_.clone(),
            });
        }
        if c.type_ == "Ready" {
            ready = c.status == "True";
        }
    }
    Ok(ready)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query() -> ReadinessQuery {
        ReadinessQuery {
            namespace: "oce-abc".into(),
            agent: "a1".into(),
            revision: "3".into(),
            role: HARNESS_ROLE.into(),
            requirement_labels: vec![("sandbox.io/class".into(), "gvisor".into())],
        }
    }

    fn cond(t: &str, s: &str) -> ConditionObservation {
        ConditionObservation {
            type_: t.into(),
            status: s.into(),
        }
    }

    /// A candidate Pod of `query()`; `ready` sets its Ready condition.
    fn pod(name: &str, ready: bool) -> PodObservation {
        PodObservation {
            namespace: Some("oce-abc".into()),
            name: Some(name.into()),
            labels: BTreeMap::from([
                (labels::AGENT.into(), "a1".into()),
                (labels::REVISION.into(), "3".into()),
                (labels::WORKLOAD_ROLE.into(), HARNESS_ROLE.into()),
                ("sandbox.io/class".into(), "gvisor".into()),
            ]),
            deleting: false,
            status: Some(PodStatusObservation {
                conditions: Some(vec![
                    cond("PodScheduled", "True"),
                    cond("Ready", if ready { "True" } else { "False" }),
                ]),
            }),
        }
    }

    fn list(items: Vec<PodObservation>) -> PodListObservation {
        PodListObservation {
            items,
            ..Default::default()
        }
    }

    fn with(mut p: PodObservation, f: impl FnOnce(&mut PodObservation)) -> PodObservation {
        f(&mut p);
        p
    }

    type Expect = Result<(bool, u32, Option<NotReady>), ReadinessError>;

    fn ok(ready: bool, live: u32, why: Option<NotReady>) -> Expect {
        Ok((ready, live, why))
    }

    #[test]
    fn contract_table() {
        use NotReady::*;
        let q = query();
        let cases: Vec<(&str, ReadinessQuery, PodListObservation, bool, Expect)> = vec![
            (
                "zero pods",
                q.clone(),
                list(vec![]),
                false,
                ok(false, 0, Some(NoCandidate)),
            ),
            (
                "one ready",
                q.clone(),
                list(vec![pod("p1", true)]),
                false,
                ok(true, 1, None),
            ),
            (
                "one unready",
                q.clone(),
                list(vec![pod("p1", false)]),
                false,
                ok(false, 1, Some(CandidateNotReady)),
            ),
            (
                "two live, one ready",
                q.clone(),
                list(vec![pod("p1", true), pod("p2", false)]),
                false,
                ok(false, 2, Some(NotUnique)),
            ),
            (
                "two live, both ready",
                q.clone(),
                list(vec![pod("p1", true), pod("p2", true)]),
                false,
                ok(false, 2, Some(NotUnique)),
            ),
            (
                "deletion timestamp excluded",
                q.clone(),
                list(vec![
                    pod("p1", true),
                    with(pod("old", true), |p| p.deleting = true),
                ]),
                false,
                ok(true, 1, None),
            ),
            (
                "only a deleting pod",
                q.clone(),
                list(vec![with(pod("old", true), |p| p.deleting = true)]),
                false,
                ok(false, 0, Some(NoCandidate)),
            ),
            (
                "other namespace ignored",
                q.clone(),
                list(vec![
                    pod("p1", true),
                    with(pod("x", true), |p| p.namespace = Some("oce-other".into())),
                ]),
                false,
                ok(true, 1, None),
            ),
            (
                "other agent ignored",
                q.clone(),
                list(vec![
                    pod("p1", true),
                    with(pod("x", true), |p| {
                        p.labels.insert(labels::AGENT.into(), "a2".into());
                    }),
                ]),
                false,
                ok(true, 1, None),
            ),
            (
                "other revision ignored",
                q.clone(),
                list(vec![
                    pod("p1", true),
                    with(pod("x", true), |p| {
                        p.labels.insert(labels::REVISION.into(), "2".into());
                    }),
                ]),
                false,
                ok(true, 1, None),
            ),
            (
                "other role ignored",
                q.clone(),
                list(vec![
                    pod("p1", true),
                    with(pod("x", true), |p| {
                        p.labels
                            .insert(labels::WORKLOAD_ROLE.into(), "gateway".into());
                    }),
                ]),
                false,
                ok(true, 1, None),
            ),
            (
                "missing requirement label is no candidate",
                q.clone(),
                list(vec![with(pod("p1", true), |p| {
                    p.labels.remove("sandbox.io/class");
                })]),
                false,
                ok(false, 0, Some(NoCandidate)),
            ),
            (
                "wrong requirement label value is no candidate",
                q.clone(),
                list(vec![with(pod("p1", true), |p| {
                    p.labels.insert("sandbox.io/class".into(), "runc".into());
                })]),
                false,
                ok(false, 0, Some(NoCandidate)),
            ),
            (
                "contradictory requirement labels",
                ReadinessQuery {
                    requirement_labels: vec![
                        ("sandbox.io/class".into(), "gvisor".into()),
                        ("sandbox.io/class".into(), "runc".into()),
                    ],
                    ..q.clone()
                },
                list(vec![pod("p1", true)]),
                false,
                Err(ReadinessError::ContradictoryRequirement {
                    key: "sandbox.io/class".into(),
                }),
            ),
            (
                "requirement contradicting the selector",
                ReadinessQuery {
                    requirement_labels: vec![(labels::AGENT.into(), "a2".into())],
                    ..q.clone()
                },
                list(vec![pod("p1", true)]),
                false,
                Err(ReadinessError::ContradictoryRequirement {
                    key: labels::AGENT.into(),
                }),
            ),
            (
                "requirement repeated with the same value is fine",
                ReadinessQuery {
                    requirement_labels: vec![
                        ("sandbox.io/class".into(), "gvisor".into()),
                        ("sandbox.io/class".into(), "gvisor".into()),
                    ],
                    ..q.clone()
                },
                list(vec![pod("p1", true)]),
                false,
                ok(true, 1, None),
            ),
            (
                "empty requirement key",
                ReadinessQuery {
                    requirement_labels: vec![(String::new(), "x".into())],
                    ..q.clone()
                },
                list(vec![]),
                false,
                Err(ReadinessError::EmptyRequirementKey),
            ),
            (
                "duplicate condition types",
                q.clone(),
                list(vec![with(pod("p1", true), |p| {
                    if let Some(s) = p.status.as_mut() {
                        s.conditions
                            .get_or_insert_with(Vec::new)
                            .push(cond("Ready", "True"));
                    }
                })]),
                false,
                Err(ReadinessError::DuplicateCondition {
                    pod: "p1".into(),
                    type_: "Ready".into(),
                }),
            ),
            (
                "invalid condition status",
                q.clone(),
                list(vec![with(pod("p1", true), |p| {
                    p.status = Some(PodStatusObservation {
                        conditions: Some(vec![cond("Ready", "yes")]),
                    })
                })]),
                false,
                Err(ReadinessError::InvalidCondition {
                    pod: "p1".into(),
                    type_: "Ready".into(),
                    status: "yes".into(),
                }),
            ),
            (
                "empty condition type",
                q.clone(),
                list(vec![with(pod("p1", true), |p| {
                    p.status = Some(PodStatusObservation {
                        conditions: Some(vec![cond("", "True")]),
                    })
                })]),
                false,
                Err(ReadinessError::InvalidCondition {
                    pod: "p1".into(),
                    type_: String::new(),
                    status: "True".into(),
                }),
            ),
            (
                "pod without a name",
                q.clone(),
                list(vec![with(pod("p1", true), |p| p.name = None)]),
                false,
                Err(ReadinessError::InvalidPodIdentity),
            ),
            (
                "pod without a namespace",
                q.clone(),
                list(vec![with(pod("p1", true), |p| p.namespace = None)]),
                false,
                Err(ReadinessError::InvalidPodIdentity),
            ),
            (
                "query with an invalid namespace",
                ReadinessQuery {
                    namespace: "Not_A_Label".into(),
                    ..q.clone()
                },
                list(vec![]),
                false,
                Err(ReadinessError::InvalidQuery("namespace")),
            ),
            (
                "query with an empty agent",
                ReadinessQuery {
                    agent: String::new(),
                    ..q.clone()
                },
                list(vec![]),
                false,
                Err(ReadinessError::InvalidQuery("agent")),
            ),
            (
                "query with a non-numeric revision",
                ReadinessQuery {
                    revision: "r3".into(),
                    ..q.clone()
                },
                list(vec![]),
                false,
                Err(ReadinessError::InvalidQuery("revision")),
            ),
            (
                "query with an empty role",
                ReadinessQuery {
                    role: String::new(),
                    ..q.clone()
                },
                list(vec![]),
                false,
                Err(ReadinessError::InvalidQuery("role")),
            ),
            (
                "list with a continue token",
                q.clone(),
                PodListObservation {
                    continue_token: Some("abc".into()),
                    ..list(vec![pod("p1", true)])
                },
                false,
                Err(ReadinessError::IncompleteList),
            ),
            (
                "list with a remaining count",
                q.clone(),
                PodListObservation {
                    remaining_item_count: Some(4),
                    ..list(vec![pod("p1", true)])
                },
                false,
                Err(ReadinessError::IncompleteList),
            ),
            (
                "empty continue token and zero remaining are complete",
                q.clone(),
                PodListObservation {
                    continue_token: Some(String::new()),
                    remaining_item_count: Some(0),
                    ..list(vec![pod("p1", true)])
                },
                false,
                ok(true, 1, None),
            ),
            (
                "missing status",
                q.clone(),
                list(vec![with(pod("p1", true), |p| p.status = None)]),
                false,
                ok(false, 1, Some(CandidateNotReady)),
            ),
            (
                "missing conditions",
                q.clone(),
                list(vec![with(pod("p1", true), |p| {
                    p.status = Some(PodStatusObservation { conditions: None })
                })]),
                false,
                ok(false, 1, Some(CandidateNotReady)),
            ),
            (
                "no Ready condition",
                q.clone(),
                list(vec![with(pod("p1", true), |p| {
                    p.status = Some(PodStatusObservation {
                        conditions: Some(vec![cond("PodScheduled", "True")]),
                    })
                })]),
                false,
                ok(false, 1, Some(CandidateNotReady)),
            ),
            (
                "Ready=Unknown",
                q.clone(),
                list(vec![with(pod("p1", true), |p| {
                    p.status = Some(PodStatusObservation {
                        conditions: Some(vec![cond("Ready", "Unknown")]),
                    })
                })]),
                false,
                ok(false, 1, Some(CandidateNotReady)),
            ),
            (
                "cancelled never yields ready",
                q.clone(),
                list(vec![pod("p1", true)]),
                true,
                Err(ReadinessError::Cancelled),
            ),
        ];
        for (name, q, l, cancelled, want) in cases {
            let got =
                evaluate(&q, &l, cancelled).map(|v| (v.ready, v.live_candidates, v.not_ready));
            assert_eq!(got, want, "case: {name}");
        }
    }

    #[test]
    fn ready_verdict_names_the_pod_and_counts() {
        let v = evaluate(&query(), &list(vec![pod("p1", true)]), false).expect("verdict");
        assert_eq!(v.pod.as_deref(), Some("p1"));
        assert_eq!((v.live_candidates, v.ready_candidates), (1, 1));
        assert_eq!(v.reason(), "ready");
        let v = evaluate(
            &query(),
            &list(vec![pod("p1", true), pod("p2", true)]),
            false,
        )
        .expect("verdict");
        assert_eq!((v.live_candidates, v.ready_candidates), (2, 2));
        assert_eq!(v.pod, None);
        assert_eq!(v.reason(), "several live candidates");
    }

    #[test]
    fn malformed_conditions_of_any_listed_pod_are_an_observation_error() {
        let bad_status = |p: &mut PodObservation| {
            p.status = Some(PodStatusObservation {
                conditions: Some(vec![cond("Ready", "maybe")]),
            });
        };
        let duplicate = |p: &mut PodObservation| {
            p.status = Some(PodStatusObservation {
                conditions: Some(vec![cond("Ready", "True"), cond("Ready", "False")]),
            });
        };
        let others = [
            with(pod("other-agent", true), |p| {
                p.labels.insert(labels::AGENT.into(), "a2".into());
                bad_status(p);
            }),
            with(pod("other-ns", true), |p| {
                p.namespace = Some("oce-other".into());
                duplicate(p);
            }),
            with(pod("leaving", true), |p| {
                p.deleting = true;
                bad_status(p);
            }),
        ];
        for other in others {
            let name = other.name.clone();
            let got = evaluate(&query(), &list(vec![pod("p1", true), other]), false);
            assert!(
                matches!(
                    got,
                    Err(ReadinessError::InvalidCondition { .. }
                        | ReadinessError::DuplicateCondition { .. })
                ),
                "{name:?}: {got:?}"
            );
        }
    }
}
