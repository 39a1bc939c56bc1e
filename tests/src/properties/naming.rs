//! The data-plane namespace name rule (`clawfed_proto::naming`) and the
//! spoke's namespace resolution (`clawfed_spoke::apply::namespace::resolve`).
//!
//! - Name rule: for any namespace id, `data_plane_namespace` is
//!   deterministic, `oce-` plus the first 15 lowercase hex characters of
//!   SHA-256(id) (computed here independently), a valid DNS-1123 label, and
//!   never of the legacy shape (the two rules cannot claim one name).
//!   `validate_dns1123_label` accepts exactly the RFC 1123 labels.
//! - Resolution: for any set of observed namespaces (small pools of names
//!   and markers, so claims, partial markers, other tenants, OpenClaw
//!   markers, adoption marks and name collisions are common), the result
//!   never uses a namespace with an incomplete marker set, never resolves
//!   while two namespaces claim the tenant, creates only the expected name
//!   when nothing claims it and nothing holds the name, adopts only a
//!   marked namespace, and does not depend on the order of observation.

use std::collections::BTreeMap;

use clawfed_proto::labels;
use clawfed_proto::naming::{
    DATA_PLANE_HASH_LEN, DATA_PLANE_PREFIX, data_plane_namespace, is_legacy_data_plane_shape,
    validate_dns1123_label,
};
use clawfed_proto::work::NamespaceWork;
use clawfed_spoke::apply::namespace::{NamespaceError, NamespaceObservation, Resolution, resolve};
use proptest::prelude::*;
use proptest::test_runner::{TestCaseError, TestRunner};
use sha2::{Digest, Sha256};

use super::{Property, report};

/// The name rule and DNS-1123 validation.
pub const NAME_RULE: Property = Property {
    name: "naming_rule",
    suite_cases: 512,
    run: run_name_rule,
};

/// Namespace resolution.
pub const RESOLVE: Property = Property {
    name: "naming_resolve",
    suite_cases: 512,
    run: |runner| run_resolve(runner, resolve),
};

/// The resolution rule under test (the real one, or a broken copy).
pub type ResolveFn =
    fn(&NamespaceWork, &[NamespaceObservation]) -> Result<Resolution, NamespaceError>;

fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    let inner = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-';
    let edge = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && b.len() <= 63
        && b.iter().all(inner)
        && b.first().is_some_and(edge)
        && b.last().is_some_and(edge)
}

fn name_input() -> impl Strategy<Value = (String, String)> {
    // Ids: anything (the rule hashes bytes); labels: near-valid shapes
    // and arbitrary strings, so both answers of the validator occur.
    let label = prop_oneof![
        "[a-z0-9]([-a-z0-9]{0,70}[a-z0-9])?",
        "[-a-zA-Z0-9_.]{0,8}",
        any::<String>(),
    ];
    (any::<String>(), label)
}

fn run_name_rule(runner: &mut TestRunner) -> Result<(), String> {
    report(runner.run(&name_input(), |(id, label)| {
        let name = data_plane_namespace(&id);
        prop_assert_eq!(&name, &data_plane_namespace(&id), "not deterministic");
        let hex = hex::encode(Sha256::digest(id.as_bytes()));
        prop_assert_eq!(
            &name,
            &format!("{DATA_PLANE_PREFIX}{}", &hex[..DATA_PLANE_HASH_LEN])
        );
        prop_assert_eq!(name.len(), 4 + 15);
        prop_assert!(
            name[4..]
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        );
        prop_assert!(
            validate_dns1123_label(&name).is_ok(),
            "{} not DNS-valid",
            name
        );
        prop_assert!(!is_legacy_data_plane_shape(&name), "{} looks legacy", name);
        prop_assert_eq!(
            validate_dns1123_label(&label).is_ok(),
            is_dns_label(&label),
            "validator disagrees with RFC 1123 on {:?}",
            label
        );
        if is_legacy_data_plane_shape(&label) {
            prop_assert!(is_dns_label(&label) && label.starts_with(DATA_PLANE_PREFIX));
        }
        Ok(())
    }))
}

/// One generated resolution input.
#[derive(Debug, Clone)]
pub struct ResolveCase {
    pub work: NamespaceWork,
    pub observed: Vec<NamespaceObservation>,
    /// A permutation of `observed` (as indices).
    pub order: Vec<usize>,
}

const TENANT: &str = "team-a";
const ID: &str = "0190f5a2-7c1e-7000-8000-00000000000a";
const OTHER_TENANT: &str = "team-b";
const OTHER_ID: &str = "0190f5a2-7c1e-7000-8000-00000000000b";
const LEGACY: &str = "oce-team-a-0123456789ab";
const ADOPT: &str = "payments-prod";

fn name_pool() -> Vec<String> {
    vec![
        data_plane_namespace(ID),
        LEGACY.to_owned(),
        ADOPT.to_owned(),
        "custom-ns".to_owned(),
        data_plane_namespace(OTHER_ID),
    ]
}

/// Which marker set a key/value comes from.
#[derive(Debug, Clone, Copy)]
enum Owner {
    Absent,
    Ours,
    Theirs,
}

fn owner() -> impl Strategy<Value = Owner> + Clone {
    prop_oneof![2 => Just(Owner::Absent), 4 => Just(Owner::Ours), 1 => Just(Owner::Theirs)]
}

fn observation(name: String) -> impl Strategy<Value = NamespaceObservation> {
    // Per marker set (clawfed's, OpenClaw's): tenant label, id annotation;
    // then the manager label, the adoption labels.
    let set = (owner(), owner());
    let manager = prop_oneof![
        Just(None),
        Just(Some(labels::MANAGER)),
        Just(Some(labels::openclaw::MANAGER)),
        Just(Some("helm")),
    ];
    let adoptable = prop_oneof![Just(None), Just(Some("true")), Just(Some("false"))];
    let adopted = prop_oneof![Just(false), Just(true)];
    (set.clone(), set, manager, adoptable, adopted).prop_map(
        move |(ours, theirs, manager, adoptable, adopted)| {
            let mut l = BTreeMap::new();
            let mut a = BTreeMap::new();
            let sets = [
                (labels::TENANT, labels::NAMESPACE_ID_ANNOTATION, ours),
                (
                    labels::openclaw::TENANT,
                    labels::openclaw::NAMESPACE_ID_ANNOTATION,
                    theirs,
                ),
            ];
            for (tenant_key, id_key, (t, i)) in sets {
                match t {
                    Owner::Absent => {}
                    Owner::Ours => {
                        l.insert(tenant_key.to_owned(), TENANT.to_owned());
                    }
                    Owner::Theirs => {
                        l.insert(tenant_key.to_owned(), OTHER_TENANT.to_owned());
                    }
                }
                match i {
                    Owner::Absent => {}
                    Owner::Ours => {
                        a.insert(id_key.to_owned(), ID.to_owned());
                    }
                    Owner::Theirs => {
                        a.insert(id_key.to_owned(), OTHER_ID.to_owned());
                    }
                }
            }
            if let Some(m) = manager {
                l.insert(labels::MANAGED_BY.to_owned(), m.to_owned());
            }
            if let Some(v) = adoptable {
                l.insert(labels::ADOPTABLE.to_owned(), v.to_owned());
            }
            if adopted {
                l.insert(labels::ADOPTED.to_owned(), "true".to_owned());
            }
            NamespaceObservation {
                name: name.clone(),
                labels: l,
                annotations: a,
            }
        },
    )
}

/// Any resolution input: a tenant (sometimes invalid), an optional adopt
/// name, and a subset of the name pool observed with random markers.
pub fn resolve_case() -> impl Strategy<Value = ResolveCase> {
    let tenant = prop_oneof![12 => Just(TENANT.to_owned()), 1 => Just("Team_A".to_owned())];
    let id = prop_oneof![12 => Just(ID.to_owned()), 1 => Just(String::new())];
    let adopt = prop_oneof![
        4 => Just(None),
        2 => Just(Some(ADOPT.to_owned())),
        1 => Just(Some("custom-ns".to_owned())),
        1 => Just(Some("Not_Valid".to_owned())),
    ];
    let names = proptest::sample::subsequence(name_pool(), 0..=5);
    (tenant, id, adopt, names)
        .prop_flat_map(|(tenant, namespace_id, adopt, names)| {
            let n = names.len();
            let observed: Vec<_> = names.into_iter().map(observation).collect();
            let work = NamespaceWork {
                tenant,
                namespace_id,
                adopt,
                ..NamespaceWork::default()
            };
            (
                Just(work),
                observed,
                Just((0..n).collect::<Vec<_>>()).prop_shuffle(),
            )
        })
        .prop_map(|(work, observed, order)| ResolveCase {
            work,
            observed,
            order,
        })
}

/// The markers of tenant `TENANT` / `ID` are complete on `o`: one marker
/// set (clawfed's or OpenClaw's) with tenant label, id annotation and the
/// set's manager.
fn complete(o: &NamespaceObservation) -> bool {
    let set = |tenant_key: &str, id_key: &str, manager: &str| {
        o.labels.get(tenant_key).map(String::as_str) == Some(TENANT)
            && o.annotations.get(id_key).map(String::as_str) == Some(ID)
            && o.labels.get(labels::MANAGED_BY).map(String::as_str) == Some(manager)
    };
    set(
        labels::TENANT,
        labels::NAMESPACE_ID_ANNOTATION,
        labels::MANAGER,
    ) || set(
        labels::openclaw::TENANT,
        labels::openclaw::NAMESPACE_ID_ANNOTATION,
        labels::openclaw::MANAGER,
    )
}

/// `o` carries any marker of tenant `TENANT` or id `ID`.
fn claims(o: &NamespaceObservation) -> bool {
    [labels::TENANT, labels::openclaw::TENANT]
        .iter()
        .any(|k| o.labels.get(*k).map(String::as_str) == Some(TENANT))
        || [
            labels::NAMESPACE_ID_ANNOTATION,
            labels::openclaw::NAMESPACE_ID_ANNOTATION,
        ]
        .iter()
        .any(|k| o.annotations.get(*k).map(String::as_str) == Some(ID))
}

fn adoptable(o: &NamespaceObservation) -> bool {
    o.labels.get(labels::ADOPTABLE).map(String::as_str) == Some("true")
}

/// The property for one input.
pub fn check_resolve(rule: ResolveFn, c: &ResolveCase) -> Result<(), TestCaseError> {
    let got = rule(&c.work, &c.observed);
    let permuted: Vec<NamespaceObservation> =
        c.order.iter().map(|&i| c.observed[i].clone()).collect();
    let again = rule(&c.work, &permuted);
    match (&got, &again) {
        (Ok(a), Ok(b)) => prop_assert_eq!(a, b, "order of observation changed the result"),
        (Err(_), Err(_)) => {}
        _ => prop_assert!(
            false,
            "order of observation changed the outcome: {got:?} vs {again:?}"
        ),
    }
    let Ok(resolution) = got else {
        return Ok(());
    };
    let valid_identity = validate_dns1123_label(&c.work.tenant).is_ok()
        && !c.work.namespace_id.is_empty()
        && c.work
            .adopt
            .as_deref()
            .is_none_or(|a| validate_dns1123_label(a).is_ok());
    prop_assert!(
        valid_identity,
        "resolved an invalid identity: {resolution:?}"
    );
    let claiming: Vec<&NamespaceObservation> = c.observed.iter().filter(|o| claims(o)).collect();
    for o in &claiming {
        prop_assert!(
            complete(o),
            "resolved ({resolution:?}) while {} claims the tenant with an incomplete marker set",
            o.name
        );
    }
    prop_assert!(
        claiming.len() <= 1,
        "resolved ({resolution:?}) while {} namespaces claim the tenant",
        claiming.len()
    );
    let expected = data_plane_namespace(ID);
    match &resolution {
        Resolution::Create(name) => {
            prop_assert_eq!(name, &expected);
            prop_assert!(claiming.is_empty(), "created beside a claiming namespace");
            prop_assert!(
                c.observed.iter().all(|o| o.name != *name),
                "create over an existing namespace {}",
                name
            );
            prop_assert!(c.work.adopt.is_none());
        }
        Resolution::Existing(name) => {
            prop_assert!(c.work.adopt.is_none());
            let o = claiming.first().filter(|o| &o.name == name);
            prop_assert!(
                o.is_some(),
                "existing {} is not the claiming namespace",
                name
            );
            let o = o.unwrap_or(&claiming[0]);
            let clawfed_name = *name == expected || is_legacy_data_plane_shape(name);
            if !clawfed_name {
                prop_assert!(adoptable(o), "{} used without the adoption mark", name);
            }
            // Taking over an OpenClaw installation's namespace needs the
            // operator's consent too.
            if o.made_by_openclaw(TENANT, ID) {
                prop_assert!(adoptable(o), "OpenClaw's {} taken without the mark", name);
            }
        }
        Resolution::Adopt(name) => {
            prop_assert_eq!(Some(name.as_str()), c.work.adopt.as_deref());
            let o = c.observed.iter().find(|o| &o.name == name);
            prop_assert!(o.is_some(), "adopted a namespace that was not observed");
            let o = o.unwrap_or(&c.observed[0]);
            prop_assert!(adoptable(o), "adopted {} without the mark", name);
            prop_assert!(
                claiming.iter().all(|other| other.name == *name),
                "adopted {} while another namespace claims the tenant",
                name
            );
        }
    }
    Ok(())
}

/// Runs the resolution property against `rule`.
pub fn run_resolve(runner: &mut TestRunner, rule: ResolveFn) -> Result<(), String> {
    report(runner.run(&resolve_case(), |c| check_resolve(rule, &c)))
}

/// A deliberately broken copy of resolution: the first namespace carrying
/// the tenant label is used, markers unchecked. The property must reject it.
pub fn broken_trusts_the_tenant_label(
    work: &NamespaceWork,
    observed: &[NamespaceObservation],
) -> Result<Resolution, NamespaceError> {
    if work.adopt.is_none()
        && let Some(o) = observed
            .iter()
            .find(|o| o.labels.get(labels::TENANT) == Some(&work.tenant))
    {
        return Ok(Resolution::Existing(o.name.clone()));
    }
    resolve(work, observed)
}
