//! Unit tests of the namespace work objects (`super`).

use super::*;

fn work() -> NamespaceWork {
    NamespaceWork {
        tenant: "team-a".into(),
        namespace_id: "id-1".into(),
        ..Default::default()
    }
}

fn obs(name: &str, tenant: Option<&str>, id: Option<&str>, managed: bool) -> NamespaceObservation {
    let mut o = NamespaceObservation {
        name: name.into(),
        ..Default::default()
    };
    if let Some(t) = tenant {
        o.labels.insert(labels::TENANT.into(), t.into());
    }
    if let Some(i) = id {
        o.annotations
            .insert(labels::NAMESPACE_ID_ANNOTATION.into(), i.into());
    }
    if managed {
        o.labels
            .insert(labels::MANAGED_BY.into(), labels::MANAGER.into());
    }
    o
}

/// A namespace made by the OpenClaw Compute Driver: its own markers.
fn openclaw_obs(name: &str, tenant: &str, id: &str) -> NamespaceObservation {
    let mut o = NamespaceObservation {
        name: name.into(),
        ..Default::default()
    };
    o.labels
        .insert(labels::openclaw::TENANT.into(), tenant.into());
    o.labels
        .insert(labels::MANAGED_BY.into(), labels::openclaw::MANAGER.into());
    o.annotations
        .insert(labels::openclaw::NAMESPACE_ID_ANNOTATION.into(), id.into());
    o
}

type Case = (
    &'static str,
    NamespaceWork,
    Vec<NamespaceObservation>,
    Result<Resolution, &'static str>,
);

#[test]
fn resolution_table() {
    let expected = data_plane_namespace("id-1");
    let legacy = "oce-team-a-0123456789ab";
    let mark = |mut o: NamespaceObservation| {
        o.labels.insert(labels::ADOPTABLE.into(), "true".into());
        o
    };
    let adopted_unmarked = {
        let mut o = obs("ops-chosen", Some("team-a"), Some("id-1"), true);
        o.labels.insert(labels::ADOPTED.into(), "true".into());
        o
    };
    let adopted_marked = mark(adopted_unmarked.clone());
    let adopt = |a: &str| NamespaceWork {
        adopt: Some(a.into()),
        ..work()
    };
    let cases: Vec<Case> = vec![
        (
            "nothing yet: create",
            work(),
            vec![],
            Ok(Resolution::Create(expected.clone())),
        ),
        (
            "expected exists with markers",
            work(),
            vec![obs(&expected, Some("team-a"), Some("id-1"), true)],
            Ok(Resolution::Existing(expected.clone())),
        ),
        (
            "legacy with all three markers",
            work(),
            vec![obs(legacy, Some("team-a"), Some("id-1"), true)],
            Ok(Resolution::Existing(legacy.into())),
        ),
        (
            "legacy without manager label",
            work(),
            vec![obs(legacy, Some("team-a"), Some("id-1"), false)],
            Err("inconsistent"),
        ),
        (
            "legacy with another id",
            work(),
            vec![obs(legacy, Some("team-a"), Some("id-2"), true)],
            Err("inconsistent"),
        ),
        (
            "legacy with only the annotation",
            work(),
            vec![obs(legacy, None, Some("id-1"), true)],
            Err("inconsistent"),
        ),
        (
            "OpenClaw driver namespace, all three of its markers, operator consent",
            work(),
            vec![mark(openclaw_obs(legacy, "team-a", "id-1"))],
            Ok(Resolution::Existing(legacy.into())),
        ),
        (
            "OpenClaw driver namespace without the operator's consent",
            work(),
            vec![openclaw_obs(legacy, "team-a", "id-1")],
            Err("not marked for adoption"),
        ),
        (
            "OpenClaw driver namespace of another id",
            work(),
            vec![mark(openclaw_obs(legacy, "team-a", "id-2"))],
            Err("inconsistent"),
        ),
        (
            "OpenClaw tenant label with clawfed's annotation and manager",
            work(),
            vec![{
                let mut o = obs(legacy, None, Some("id-1"), true);
                o.labels
                    .insert(labels::openclaw::TENANT.into(), "team-a".into());
                mark(o)
            }],
            Err("inconsistent"),
        ),
        (
            "wrong name with all markers",
            work(),
            vec![obs("oce-somethingelse", Some("team-a"), Some("id-1"), true)],
            Err("wrong name"),
        ),
        (
            "two namespaces claim the tenant",
            work(),
            vec![
                obs(&expected, Some("team-a"), Some("id-1"), true),
                obs(legacy, Some("team-a"), Some("id-1"), true),
            ],
            Err("all claim"),
        ),
        (
            "expected name taken by an unmarked namespace",
            work(),
            vec![obs(&expected, None, None, false)],
            Err("does not belong"),
        ),
        (
            "expected name taken by another tenant",
            work(),
            vec![obs(&expected, Some("team-b"), Some("id-9"), true)],
            Err("does not belong"),
        ),
        (
            "other tenants are ignored",
            work(),
            vec![obs("oce-other", Some("team-b"), Some("id-9"), true)],
            Ok(Resolution::Create(expected.clone())),
        ),
        (
            "adopt a plain operator namespace the operator marked",
            adopt("ops-chosen"),
            vec![mark(obs("ops-chosen", None, None, false))],
            Ok(Resolution::Adopt("ops-chosen".into())),
        ),
        (
            "adopt a namespace without the operator's mark",
            adopt("kube-system"),
            vec![obs("kube-system", None, None, false)],
            Err("not marked for adoption"),
        ),
        (
            "adopt a marked namespace that is not a valid adoption target",
            adopt("ops-chosen"),
            vec![mark(obs("ops-chosen", Some("team-b"), Some("id-9"), true))],
            Err("does not belong"),
        ),
        (
            "adopt a missing namespace",
            adopt("ops-chosen"),
            vec![],
            Err("does not exist"),
        ),
        (
            "adopt another tenant's namespace",
            adopt("ops-chosen"),
            vec![obs("ops-chosen", Some("team-b"), Some("id-9"), true)],
            Err("does not belong"),
        ),
        (
            "adopt while the tenant already has a namespace",
            adopt("ops-chosen"),
            vec![
                mark(obs("ops-chosen", None, None, false)),
                obs(&expected, Some("team-a"), Some("id-1"), true),
            ],
            Err("all claim"),
        ),
        (
            "previously adopted namespace is found again",
            work(),
            vec![adopted_marked.clone()],
            Ok(Resolution::Existing("ops-chosen".into())),
        ),
        (
            "re-adopt the same namespace",
            adopt("ops-chosen"),
            vec![adopted_marked],
            Ok(Resolution::Adopt("ops-chosen".into())),
        ),
        (
            "adopted namespace whose mark the operator withdrew",
            work(),
            vec![adopted_unmarked.clone()],
            Err("not marked for adoption"),
        ),
        (
            "re-adopt after the operator withdrew the mark",
            adopt("ops-chosen"),
            vec![adopted_unmarked],
            Err("not marked for adoption"),
        ),
        (
            "adopt an invalid name",
            adopt("Bad_Name"),
            vec![],
            Err("invalid tenant identity"),
        ),
        (
            "invalid tenant",
            NamespaceWork {
                tenant: "Team A".into(),
                ..work()
            },
            vec![],
            Err("invalid tenant identity"),
        ),
    ];
    for (name, w, observed, want) in cases {
        let got = resolve(&w, &observed);
        match (got, want) {
            (Ok(g), Ok(w)) => assert_eq!(g, w, "case: {name}"),
            (Err(e), Err(w)) => assert!(e.to_string().contains(w), "case: {name}: {e}"),
            (g, w) => panic!("case {name}: got {g:?}, want {w:?}"),
        }
    }
}

#[test]
fn network_policies_deny_by_default_and_open_dns_and_harness_flows() {
    let mut w = work();
    w.network.ingress_from_cidrs = vec!["10.1.0.0/16".into()];
    w.network.egress = vec![clawfed_proto::work::EgressRule {
        cidr: "203.0.113.0/24".into(),
        ports: vec![443],
    }];
    let pols = network_policies(&w, "oce-x", &SpokeConfig::default());
    let deny = pols[0].spec.as_ref().expect("spec");
    assert_eq!(deny.pod_selector, Some(LabelSelector::default()));
    assert_eq!(
        deny.policy_types.as_deref(),
        Some(&["Ingress".to_string(), "Egress".to_string()][..])
    );
    assert!(deny.ingress.is_none() && deny.egress.is_none());
    let dns = pols[1].spec.as_ref().expect("spec");
    let rule = &dns.egress.as_ref().expect("egress")[0];
    assert_eq!(rule.ports.as_ref().map(Vec::len), Some(2));
    let flows = pols[2].spec.as_ref().expect("spec");
    let ingress = flows.ingress.as_ref().expect("ingress");
    assert_eq!(ingress.len(), 2, "the spoke, then the CIDR");
    // The tunnel's last hop: the spoke's own Pods, on the Harness port.
    let spoke = &ingress[0].from.as_ref().expect("from")[0];
    assert_eq!(
        spoke
            .namespace_selector
            .as_ref()
            .and_then(|s| s.match_labels.as_ref())
            .and_then(|l| l.get("kubernetes.io/metadata.name"))
            .map(String::as_str),
        Some("clawfed-system")
    );
    assert_eq!(
        spoke
            .pod_selector
            .as_ref()
            .and_then(|s| s.match_labels.clone()),
        Some(SpokeConfig::default().pod_labels)
    );
    assert_eq!(
        ingress[0].ports.as_ref().map(|p| p[0].port.clone()),
        Some(Some(IntOrString::Int(8080)))
    );
    assert_eq!(flows.egress.as_ref().map(Vec::len), Some(1));
    // The installation's DNS target replaces the spoke's own.
    let dns_peer = |pols: &[NetworkPolicy]| {
        let rule = &pols[1]
            .spec
            .as_ref()
            .expect("spec")
            .egress
            .as_ref()
            .expect("egress")[0];
        let peer = rule.to.as_ref().expect("to")[0].clone();
        (
            peer.namespace_selector
                .and_then(|s| s.match_labels)
                .and_then(|l| l.get("kubernetes.io/metadata.name").cloned()),
            peer.pod_selector.and_then(|s| s.match_labels),
        )
    };
    assert_eq!(
        dns_peer(&pols),
        (
            Some("kube-system".to_string()),
            Some(SpokeConfig::default().dns.pod_labels)
        )
    );
    let mut custom = w.clone();
    custom.network.dns = Some(clawfed_proto::work::DnsTarget {
        namespace: "dns-system".into(),
        pod_labels: BTreeMap::from([("app".into(), "coredns".into())]),
    });
    assert_eq!(
        dns_peer(&network_policies(&custom, "oce-x", &SpokeConfig::default())),
        (
            Some("dns-system".to_string()),
            Some(BTreeMap::from([("app".to_string(), "coredns".to_string())]))
        )
    );
    w.network.ingress_from_spoke = false;
    w.network.ingress_from_cidrs.clear();
    let pols = network_policies(&w, "oce-x", &SpokeConfig::default());
    let flows = pols[2].spec.as_ref().expect("spec");
    assert_eq!(
        flows.ingress.as_ref().map(Vec::len),
        Some(0),
        "nothing admitted"
    );
}
