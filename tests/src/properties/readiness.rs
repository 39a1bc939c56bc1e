//! The readiness verdict (`clawfed_proto::readiness`) over any Pod list.
//!
//! Inputs are drawn from small pools so the interesting collisions happen
//! often: Pods in and out of the query's namespace, carrying all, all but
//! one, or a changed one of the required labels, deleting or not, with
//! valid, invalid or duplicate conditions; queries with valid and invalid
//! identities and consistent or contradictory requirement labels; lists
//! that are complete or say more results remain; cancelled or not.
//!
//! The check states the contract independently of the implementation:
//! - cancelled, an invalid query identity, an empty or contradictory
//!   requirement, an incomplete list, a Pod without name or namespace, or
//!   any listed Pod (candidate or not: the seed's rule) with an invalid or
//!   duplicate condition is an error (one that names a defect actually
//!   present), never a verdict;
//! - otherwise the verdict counts exactly the live candidates (in the
//!   namespace, not deleting, carrying every required label) and the Ready
//!   ones, and is ready only when both counts are one, naming that Pod.

use std::collections::{BTreeMap, BTreeSet};

use clawfed_proto::labels;
use clawfed_proto::readiness::{
    ConditionObservation, HARNESS_ROLE, PodListObservation, PodObservation, PodStatusObservation,
    ReadinessError, ReadinessQuery, Verdict, evaluate, required_labels,
};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{TestCaseError, TestRunner};

use super::{Property, report};

/// The rule under test (the real one, or a deliberately broken copy).
pub type EvaluateFn =
    fn(&ReadinessQuery, &PodListObservation, bool) -> Result<Verdict, ReadinessError>;

/// The verdict against the independent statement of the contract.
pub const VERDICT: Property = Property {
    name: "readiness_verdict",
    suite_cases: 512,
    run: |runner| run_verdict(runner, evaluate),
};

/// `required_labels`: complete, order-independent, errors on bad input.
pub const REQUIRED_LABELS: Property = Property {
    name: "readiness_required_labels",
    suite_cases: 256,
    run: run_required_labels,
};

/// One generated observation.
#[derive(Debug, Clone)]
pub struct Case {
    pub query: ReadinessQuery,
    pub list: PodListObservation,
    pub cancelled: bool,
}

const NAMESPACES: [&str; 2] = ["oce-abc", "oce-def"];
const REQUIREMENT_KEYS: [&str; 4] = ["sandbox.io/class", "tier", labels::AGENT, labels::REVISION];
const VALUES: [&str; 5] = ["gvisor", "runc", "a1", "3", "x"];

fn pick(pool: &'static [&'static str]) -> impl Strategy<Value = String> + Clone {
    proptest::sample::select(pool).prop_map(str::to_owned)
}

fn query() -> impl Strategy<Value = ReadinessQuery> {
    let namespace = prop_oneof![8 => pick(&NAMESPACES), 1 => pick(&["", "Bad_NS", "-x"])];
    let agent = prop_oneof![8 => pick(&["a1", "a2"]), 1 => Just(String::new())];
    let revision = prop_oneof![8 => pick(&["3", "4"]), 1 => pick(&["", "r3", "3a"])];
    let role = prop_oneof![8 => Just(HARNESS_ROLE.to_owned()), 1 => pick(&["gateway", ""])];
    // Mostly requirement keys of their own; sometimes one that repeats a
    // selector key (consistent or contradictory) or an empty one.
    let requirement = (
        prop_oneof![
            12 => pick(&REQUIREMENT_KEYS[..2]),
            2 => pick(&REQUIREMENT_KEYS[2..]),
            1 => Just(String::new()),
        ],
        pick(&VALUES),
    );
    (namespace, agent, revision, role, vec(requirement, 0..3)).prop_map(
        |(namespace, agent, revision, role, requirement_labels)| ReadinessQuery {
            namespace,
            agent,
            revision,
            role,
            requirement_labels,
        },
    )
}

/// Every label the query asks for, in order (later pairs overwrite, so a
/// contradictory query still yields a plausible candidate).
fn wanted_labels(q: &ReadinessQuery) -> Vec<(String, String)> {
    let mut wanted = vec![
        (labels::AGENT.to_owned(), q.agent.clone()),
        (labels::REVISION.to_owned(), q.revision.clone()),
        (labels::WORKLOAD_ROLE.to_owned(), q.role.clone()),
    ];
    wanted.extend(q.requirement_labels.iter().cloned());
    wanted
}

fn condition() -> impl Strategy<Value = ConditionObservation> {
    let type_ = prop_oneof![
        6 => pick(&["Ready", "PodScheduled", "ContainersReady"]),
        1 => Just(String::new()),
    ];
    let status = prop_oneof![
        8 => pick(&["True", "False", "Unknown"]),
        1 => pick(&["yes", "", "true"]),
    ];
    (type_, status).prop_map(|(type_, status)| ConditionObservation { type_, status })
}

/// Mostly well-formed conditions (each type once, a valid status), else
/// any list (empty types, unknown statuses, duplicates).
fn conditions() -> impl Strategy<Value = Vec<ConditionObservation>> {
    let well_formed = (
        proptest::option::of(pick(&["True", "False", "Unknown"])),
        proptest::option::of(pick(&["True", "False"])),
    )
        .prop_map(|(ready, scheduled)| {
            let mut cs = Vec::new();
            if let Some(status) = scheduled {
                cs.push(ConditionObservation {
                    type_: "PodScheduled".into(),
                    status,
                });
            }
            if let Some(status) = ready {
                cs.push(ConditionObservation {
                    type_: "Ready".into(),
                    status,
                });
            }
            cs
        });
    prop_oneof![6 => well_formed, 1 => vec(condition(), 0..4)]
}

fn status() -> impl Strategy<Value = Option<PodStatusObservation>> {
    let conditions = prop_oneof![8 => conditions().prop_map(Some), 1 => Just(None)];
    prop_oneof![
        8 => conditions.prop_map(|conditions| Some(PodStatusObservation { conditions })),
        1 => Just(None),
    ]
}

/// How a Pod's labels relate to the query.
#[derive(Debug, Clone, Copy)]
enum Shape {
    /// Carries every wanted label.
    All,
    /// Lacks the wanted label at this index (modulo).
    Drop(usize),
    /// Carries the wanted label at this index with another value.
    Change(usize),
}

fn pod(
    query_namespace: String,
    wanted: Vec<(String, String)>,
    index: usize,
) -> impl Strategy<Value = PodObservation> {
    let namespace = prop_oneof![
        16 => Just(Some(query_namespace)),
        4 => pick(&NAMESPACES).prop_map(Some),
        1 => Just(Some(String::new())),
        1 => Just(None),
    ];
    let name = prop_oneof![
        40 => Just(Some(format!("p{index}"))),
        1 => Just(Some(String::new())),
        1 => Just(None),
    ];
    let shape = prop_oneof![
        4 => Just(Shape::All),
        1 => any::<usize>().prop_map(Shape::Drop),
        1 => any::<usize>().prop_map(Shape::Change),
    ];
    let extra = proptest::option::of((pick(&["team", "tier"]), pick(&VALUES)));
    let deleting = prop_oneof![5 => Just(false), 1 => Just(true)];
    (namespace, name, shape, extra, deleting, status()).prop_map(
        move |(namespace, name, shape, extra, deleting, status)| {
            let mut labels = BTreeMap::new();
            if let Some((k, v)) = extra {
                labels.insert(k, v);
            }
            for (k, v) in &wanted {
                labels.insert(k.clone(), v.clone());
            }
            match shape {
                Shape::All => {}
                Shape::Drop(i) => {
                    labels.remove(&wanted[i % wanted.len()].0);
                }
                Shape::Change(i) => {
                    let (k, v) = &wanted[i % wanted.len()];
                    labels.insert(k.clone(), format!("{v}-other"));
                }
            }
            PodObservation {
                namespace,
                name,
                labels,
                deleting,
                status,
            }
        },
    )
}

/// Any observation (query, Pod list, cancellation).
pub fn case() -> impl Strategy<Value = Case> {
    (query(), 0usize..6).prop_flat_map(|(query, n)| {
        let wanted = wanted_labels(&query);
        let pods: Vec<_> = (0..n)
            .map(|i| pod(query.namespace.clone(), wanted.clone(), i))
            .collect();
        let continue_token = prop_oneof![
            12 => Just(None),
            1 => Just(Some(String::new())),
            1 => Just(Some("more".to_owned())),
        ];
        let remaining = prop_oneof![12 => Just(None), 1 => Just(Some(0i64)), 1 => Just(Some(3i64))];
        let cancelled = prop_oneof![8 => Just(false), 1 => Just(true)];
        (Just(query), pods, continue_token, remaining, cancelled).prop_map(
            |(query, items, continue_token, remaining_item_count, cancelled)| Case {
                query,
                list: PodListObservation {
                    items,
                    continue_token,
                    remaining_item_count,
                },
                cancelled,
            },
        )
    })
}

/// Which kinds of error the contract allows for this observation (several
/// defects may be present; any of them may be the one reported).
fn allowed_errors(c: &Case) -> Vec<&'static str> {
    let q = &c.query;
    let mut allowed = Vec::new();
    if c.cancelled {
        allowed.push("cancelled");
    }
    let dns_label = |s: &str| {
        !s.is_empty()
            && s.len() <= 63
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !s.starts_with('-')
            && !s.ends_with('-')
    };
    let identity_ok = dns_label(&q.namespace)
        && !q.agent.is_empty()
        && !q.revision.is_empty()
        && q.revision.bytes().all(|b| b.is_ascii_digit())
        && !q.role.is_empty();
    if !identity_ok {
        allowed.push("invalid-query");
    }
    if q.requirement_labels.iter().any(|(k, _)| k.is_empty()) {
        allowed.push("empty-key");
    }
    let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
    let mut contradictory = false;
    for (k, v) in wanted_labels(q).iter().filter(|(k, _)| !k.is_empty()) {
        if let Some(prev) = seen.insert(k, v)
            && prev != v
        {
            contradictory = true;
        }
    }
    if contradictory {
        allowed.push("contradictory");
    }
    if c.list
        .continue_token
        .as_deref()
        .is_some_and(|t| !t.is_empty())
        || c.list.remaining_item_count.is_some_and(|n| n > 0)
    {
        allowed.push("incomplete");
    }
    let identity = |p: &PodObservation| {
        p.name.as_deref().is_some_and(|n| !n.is_empty())
            && p.namespace.as_deref().is_some_and(|n| !n.is_empty())
    };
    if c.list.items.iter().any(|p| !identity(p)) {
        allowed.push("pod-identity");
    }
    for p in &c.list.items {
        let conditions = p
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .map_or(&[][..], Vec::as_slice);
        if conditions.iter().any(|c| {
            c.type_.is_empty() || !["True", "False", "Unknown"].contains(&c.status.as_str())
        }) {
            allowed.push("condition");
        }
        let types: BTreeSet<&str> = conditions.iter().map(|c| c.type_.as_str()).collect();
        if types.len() != conditions.len() {
            allowed.push("duplicate-condition");
        }
    }
    allowed
}

/// Live Pods in the query's namespace carrying every required label.
fn candidates(c: &Case) -> impl Iterator<Item = &PodObservation> {
    let wanted: BTreeMap<String, String> = wanted_labels(&c.query).into_iter().collect();
    c.list.items.iter().filter(move |p| {
        p.namespace.as_deref() == Some(c.query.namespace.as_str())
            && !p.deleting
            && wanted.iter().all(|(k, v)| p.labels.get(k) == Some(v))
    })
}

fn reports_ready(p: &PodObservation) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn error_kind(e: &ReadinessError) -> &'static str {
    match e {
        ReadinessError::InvalidQuery(_) => "invalid-query",
        ReadinessError::ContradictoryRequirement { .. } => "contradictory",
        ReadinessError::EmptyRequirementKey => "empty-key",
        ReadinessError::InvalidPodIdentity => "pod-identity",
        ReadinessError::InvalidCondition { .. } => "condition",
        ReadinessError::DuplicateCondition { .. } => "duplicate-condition",
        ReadinessError::IncompleteList => "incomplete",
        ReadinessError::Cancelled => "cancelled",
    }
}

/// The property for one observation.
pub fn check_verdict(rule: EvaluateFn, c: &Case) -> Result<(), TestCaseError> {
    let got = rule(&c.query, &c.list, c.cancelled);
    let allowed = allowed_errors(c);
    let verdict = match got {
        Err(e) => {
            let kind = error_kind(&e);
            prop_assert!(
                allowed.contains(&kind),
                "error {kind} ({e}) names no defect of the input; defects: {allowed:?}"
            );
            return Ok(());
        }
        Ok(v) => v,
    };
    prop_assert!(
        allowed.is_empty(),
        "malformed input {allowed:?} got a verdict: {verdict:?}"
    );
    let live: Vec<&PodObservation> = candidates(c).collect();
    let ready: Vec<&PodObservation> = live.iter().copied().filter(|p| reports_ready(p)).collect();
    prop_assert_eq!(verdict.live_candidates as usize, live.len());
    prop_assert_eq!(verdict.ready_candidates as usize, ready.len());
    let should_be_ready = live.len() == 1 && ready.len() == 1;
    prop_assert_eq!(
        verdict.ready,
        should_be_ready,
        "ready only with exactly one live Ready candidate: {:?}",
        verdict
    );
    if verdict.ready {
        prop_assert_eq!(verdict.pod.as_deref(), ready[0].name.as_deref());
        prop_assert!(verdict.not_ready.is_none());
    } else {
        prop_assert!(verdict.pod.is_none() && verdict.not_ready.is_some());
    }
    Ok(())
}

/// Runs the verdict property against `rule`.
pub fn run_verdict(runner: &mut TestRunner, rule: EvaluateFn) -> Result<(), String> {
    report(runner.run(&case(), |c| check_verdict(rule, &c)))
}

fn run_required_labels(runner: &mut TestRunner) -> Result<(), String> {
    report(runner.run(&query(), |q| {
        let got = required_labels(&q);
        let mut reversed = q.clone();
        reversed.requirement_labels.reverse();
        let again = required_labels(&reversed);
        prop_assert_eq!(
            got.is_ok(),
            again.is_ok(),
            "the order of requirement labels changed the outcome"
        );
        let case = Case {
            query: q.clone(),
            list: PodListObservation::default(),
            cancelled: false,
        };
        let defects = allowed_errors(&case);
        match got {
            Err(e) => prop_assert!(defects.contains(&error_kind(&e)), "{e}: {defects:?}"),
            Ok(map) => {
                prop_assert!(defects.is_empty(), "accepted {defects:?}");
                prop_assert_eq!(Ok(map.clone()), again);
                let wanted: BTreeMap<String, String> = wanted_labels(&q).into_iter().collect();
                prop_assert_eq!(map, wanted);
            }
        }
        Ok(())
    }))
}

/// A deliberately broken copy of the rule: ready when any live candidate
/// is Ready (label uniqueness ignored). The property must reject it.
pub fn broken_ignores_uniqueness(
    q: &ReadinessQuery,
    list: &PodListObservation,
    cancelled: bool,
) -> Result<Verdict, ReadinessError> {
    evaluate(q, list, cancelled).map(|mut v| {
        if v.ready_candidates >= 1 {
            v.ready = true;
            v.not_ready = None;
        }
        v
    })
}

/// A deliberately broken copy of the rule: a list that says more results
/// remain is judged on the page at hand. The property must reject it.
pub fn broken_ignores_incomplete_list(
    q: &ReadinessQuery,
    list: &PodListObservation,
    cancelled: bool,
) -> Result<Verdict, ReadinessError> {
    let page = PodListObservation {
        continue_token: None,
        remaining_item_count: None,
        ..list.clone()
    };
    evaluate(q, &page, cancelled)
}
