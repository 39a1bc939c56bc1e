//! Unit and property tests of placement: each rule on hand-made clusters,
//! then invariants over many generated fleets.

use super::*;
use crate::model::{ClusterCapacity, ResourceAmounts};
use clawfed_proto::capability as cap;

fn cluster(name: &str, state: ConnectionState, pool: &str) -> Cluster {
    Cluster {
        labels: [("pool".to_owned(), pool.to_owned())].into(),
        ..Cluster::fixture(name, state)
    }
}

fn res(cpu_millis: i64, memory_bytes: i64) -> Resources {
    Resources {
        cpu_millis,
        memory_bytes,
    }
}

/// `c` having reported `free` of `allocatable`.
fn with_capacity(mut c: Cluster, allocatable: Resources, free: Resources) -> Cluster {
    c.capacity = Some(ClusterCapacity {
        nodes: 1,
        allocatable: ResourceAmounts::from(allocatable),
        free: ResourceAmounts::from(free),
        reported_at: chrono::DateTime::UNIX_EPOCH,
    });
    c
}

fn selector(pool: &str) -> Spec {
    Spec {
        cluster_selector: [("pool".to_owned(), pool.to_owned())].into(),
        ..Default::default()
    }
}

fn chosen<'a>(p: Placement<'a>) -> Option<&'a str> {
    match p {
        Placement::Chosen(c) => Some(c.name.as_str()),
        _ => None,
    }
}

#[test]
fn the_first_online_cluster_matching_every_label_by_default() {
    let clusters = vec![
        cluster("a", ConnectionState::Offline, "gpu"),
        cluster("b", ConnectionState::Online, "cpu"),
        cluster("c", ConnectionState::Online, "gpu"),
    ];
    let gpu = selector("gpu");
    assert_eq!(
        choose_cluster(&clusters, &Request::anywhere(&gpu)),
        Placement::Chosen(&clusters[2])
    );
    let any = Spec::default();
    assert_eq!(
        choose_cluster(&clusters, &Request::anywhere(&any)),
        Placement::Chosen(&clusters[1])
    );
    let tpu = selector("tpu");
    assert_eq!(
        choose_cluster(&clusters, &Request::anywhere(&tpu)),
        Placement::Unavailable
    );

    // Why nothing was chosen, in each case.
    assert_eq!(
        unplaced_reason(&[], &Request::anywhere(&gpu)),
        "waiting for placement: no execution cluster is enrolled"
    );
    let why = unplaced_reason(&clusters, &Request::anywhere(&tpu));
    assert!(
        why.contains("none of the 3 enrolled clusters carries the labels pool=tpu"),
        "{why}"
    );
    let mut offline = clusters.clone();
    offline[2].connection_state = ConnectionState::Revoked;
    offline[1].labels = gpu.cluster_selector.clone();
    offline[1].connection_state = ConnectionState::Pending;
    let why = unplaced_reason(&offline, &Request::anywhere(&gpu));
    assert!(
        why.contains(
            "no matching cluster is online and uncordoned (a is offline, b has not connected yet, c is revoked)"
        ),
        "{why}"
    );
}

/// Issue 33: a cordoned cluster takes no new revision, and the reason a
/// revision waits names it.
#[test]
fn placement_passes_over_a_cordoned_cluster_and_says_so() {
    let mut a = cluster("a", ConnectionState::Online, "x");
    a.cordoned_at = Some(chrono::DateTime::UNIX_EPOCH);
    let clusters = vec![a, cluster("b", ConnectionState::Online, "x")];
    let any = Spec::default();
    assert_eq!(
        choose_cluster(&clusters, &Request::anywhere(&any)),
        Placement::Chosen(&clusters[1])
    );
    let only_cordoned = &clusters[..1];
    assert_eq!(
        choose_cluster(only_cordoned, &Request::anywhere(&any)),
        Placement::Unavailable
    );
    let why = unplaced_reason(only_cordoned, &Request::anywhere(&any));
    assert!(why.contains("(a is cordoned)"), "{why}");
    // Listed first, or pinned: still passed over.
    let listed = Spec {
        clusters: vec!["a".into(), "b".into()],
        ..Default::default()
    };
    assert_eq!(
        choose_cluster(&clusters, &Request::anywhere(&listed)),
        Placement::Chosen(&clusters[1])
    );
    let pinned = Spec {
        cluster: Some("a".into()),
        ..Default::default()
    };
    assert_eq!(
        why_not(&clusters[0], &Request::anywhere(&pinned)),
        Some(Reason::Cordoned)
    );
}

/// Issue 12: a cluster whose spoke cannot serve the revision is not
/// chosen, and the refusal names the cluster and what it lacks.
#[test]
fn a_cluster_without_the_capabilities_the_revision_needs_is_refused() {
    let with = |name: &str, capabilities: &[&str]| {
        let mut c = cluster(name, ConnectionState::Online, "x");
        c.capabilities = capabilities.iter().map(|c| c.to_string()).collect();
        c
    };
    let native = Needs {
        provisioning_driver: true,
        containment: true,
    };
    let plain = with("plain", &["sandbox-driver:deployment"]);
    let half = with(
        "half",
        &[
            "sandbox-driver:crd",
            cap::SANDBOX_PROVISIONS,
            cap::CONTAINMENT_NETWORKING,
        ],
    );
    let mut all = vec!["sandbox-driver:crd", cap::SANDBOX_PROVISIONS];
    all.extend(cap::ALL_CONTAINMENT);
    let full = with("full", &all);
    let any = Spec::default();
    let req = |needs| Request {
        placement: &any,
        needs,
        demand: Resources::default(),
    };
    let provider = Needs {
        provisioning_driver: true,
        containment: false,
    };
    assert_eq!(
        choose_cluster(std::slice::from_ref(&plain), &req(provider)),
        Placement::Refused(
            "cluster plain cannot serve the revision: its spoke does not advertise \
             sandbox-provisions"
                .into()
        )
    );
    let clusters = vec![plain.clone(), half.clone()];
    match choose_cluster(&clusters, &req(native)) {
        Placement::Refused(why) => {
            let half = why
                .split("; ")
                .find(|w| w.starts_with("cluster half"))
                .unwrap_or_else(|| panic!("{why}"));
            assert!(half.contains(cap::CONTAINMENT_PROCESS), "{half}");
            assert!(!half.contains("networking"), "{half}");
            assert!(why.contains("cluster plain"), "{why}");
        }
        other => panic!("{other:?}"),
    }
    // A cluster that may still come online keeps the revision waiting
    // instead of failing it.
    let mut later = vec![plain.clone(), half.clone()];
    later.push(cluster("soon", ConnectionState::Offline, "x"));
    assert_eq!(choose_cluster(&later, &req(native)), Placement::Unavailable);
    let clusters = vec![plain, half, full];
    assert_eq!(
        choose_cluster(&clusters, &req(native)),
        Placement::Chosen(&clusters[2])
    );
    // Ordinary revisions need nothing of the driver.
    assert_eq!(
        choose_cluster(&clusters, &req(Needs::default())),
        Placement::Chosen(&clusters[0])
    );
}

#[test]
fn a_revision_is_placed_only_where_its_requests_fit() {
    let big = res(4000, 8 << 30);
    let a = with_capacity(
        cluster("a", ConnectionState::Online, "x"),
        big,
        res(200, 8 << 30),
    );
    let b = with_capacity(
        cluster("b", ConnectionState::Online, "x"),
        big,
        res(3000, 1 << 30),
    );
    let any = Spec::default();
    let req = |demand| Request {
        placement: &any,
        needs: Needs::default(),
        demand,
    };
    let clusters = vec![a.clone(), b.clone()];
    assert_eq!(
        chosen(choose_cluster(&clusters, &req(res(500, 512 << 20)))),
        Some("b")
    );
    assert_eq!(
        chosen(choose_cluster(&clusters, &req(res(100, 4 << 30)))),
        Some("a")
    );
    let none = req(res(500, 2 << 30));
    assert_eq!(choose_cluster(&clusters, &none), Placement::Unavailable);
    let why = unplaced_reason(&clusters, &none);
    assert!(why.starts_with(WAITING_FOR_PLACEMENT), "{why}");
    assert!(
        why.contains("a does not fit: needs cpu 500m, memory 2Gi, has cpu 200m, memory 8Gi free"),
        "{why}"
    );
    assert!(
        why.contains("b does not fit: needs cpu 500m, memory 2Gi, has cpu 3000m, memory 1Gi free"),
        "{why}"
    );
    // A cluster that never reported is taken as fitting.
    let unknown = cluster("c", ConnectionState::Online, "x");
    let clusters = vec![a, b, unknown];
    assert_eq!(chosen(choose_cluster(&clusters, &none)), Some("c"));
}

#[test]
fn a_preference_list_takes_the_first_listed_cluster_that_fits() {
    let total = res(1000, 1 << 30);
    let a = with_capacity(
        cluster("a", ConnectionState::Online, "x"),
        total,
        res(100, 1 << 30),
    );
    let b = with_capacity(cluster("b", ConnectionState::Online, "x"), total, total);
    let c = with_capacity(cluster("c", ConnectionState::Online, "x"), total, total);
    let d = cluster("d", ConnectionState::Offline, "x");
    let clusters = vec![a, b, c, d];
    let listed = |names: &[&str]| Spec {
        clusters: names.iter().map(|n| n.to_string()).collect(),
        ..Default::default()
    };
    let req = |p| Request {
        placement: p,
        needs: Needs::default(),
        demand: res(500, 1 << 20),
    };
    let order = listed(&["c", "b"]);
    assert_eq!(chosen(choose_cluster(&clusters, &req(&order))), Some("c"));
    let order = listed(&["d", "a", "b", "c"]);
    assert_eq!(
        chosen(choose_cluster(&clusters, &req(&order))),
        Some("b"),
        "d is offline, a too full"
    );
    let order = listed(&["d", "a"]);
    assert_eq!(
        choose_cluster(&clusters, &req(&order)),
        Placement::Unavailable
    );
    let why = unplaced_reason(&clusters, &req(&order));
    assert!(why.contains("d is offline"), "{why}");
    assert!(why.contains("a does not fit"), "{why}");
    assert!(!why.contains("b "), "only the listed clusters: {why}");
    let order = listed(&["x", "y"]);
    assert_eq!(
        unplaced_reason(&clusters, &req(&order)),
        "waiting for placement: none of the preferred clusters x, y is enrolled"
    );
    // The reason of a cluster left out names the list.
    let order = listed(&["c"]);
    assert_eq!(why_not(&clusters[1], &req(&order)), Some(Reason::NotListed));
}

#[test]
fn a_pinned_cluster_need_not_be_online_but_must_fit() {
    let total = res(1000, 1 << 30);
    let a = with_capacity(cluster("a", ConnectionState::Offline, "x"), total, total);
    let pinned = Spec {
        cluster: Some("a".into()),
        ..Default::default()
    };
    let req = |demand| Request {
        placement: &pinned,
        needs: Needs::default(),
        demand,
    };
    let b = cluster("b", ConnectionState::Online, "x");
    let clusters = vec![a, b];
    assert_eq!(
        chosen(choose_cluster(&clusters, &req(res(500, 0)))),
        Some("a")
    );
    assert_eq!(
        choose_cluster(&clusters, &req(res(5000, 0))),
        Placement::Unavailable
    );
    let why = unplaced_reason(&clusters, &req(res(5000, 0)));
    assert!(why.contains("a does not fit: needs cpu 5000m"), "{why}");
    assert!(!why.contains("b "), "{why}");
    assert_eq!(
        why_not(&clusters[1], &req(res(1, 1))),
        Some(Reason::NotPinned)
    );
    let gone = Spec {
        cluster: Some("z".into()),
        ..Default::default()
    };
    assert_eq!(
        unplaced_reason(&clusters, &Request::anywhere(&gone)),
        "waiting for placement: the pinned cluster z is not enrolled"
    );
}

#[test]
fn spread_takes_the_most_room_and_pack_the_least_that_fits() {
    let total = res(4000, 8 << 30);
    let fleet = vec![
        with_capacity(
            cluster("a", ConnectionState::Online, "x"),
            total,
            res(1000, 8 << 30),
        ),
        with_capacity(
            cluster("b", ConnectionState::Online, "x"),
            total,
            res(3000, 6 << 30),
        ),
        with_capacity(
            cluster("c", ConnectionState::Online, "x"),
            total,
            res(600, 8 << 30),
        ),
        // Never reported: after the known ones either way.
        cluster("d", ConnectionState::Online, "x"),
        with_capacity(cluster("e", ConnectionState::Online, "y"), total, total),
    ];
    let rule = |spread| Spec {
        spread: Some(spread),
        ..selector("x")
    };
    let req = |p| Request {
        placement: p,
        needs: Needs::default(),
        demand: res(500, 1 << 30),
    };
    // After placing: a keeps 500/4000 cpu, b 2500/4000 and 5/8 memory, c
    // 100/4000; the scarcer share decides.
    let spread = rule(Spread::Spread);
    assert_eq!(chosen(choose_cluster(&fleet, &req(&spread))), Some("b"));
    let pack = rule(Spread::Pack);
    assert_eq!(chosen(choose_cluster(&fleet, &req(&pack))), Some("c"));
    // Only d is left when nothing known fits.
    let huge = Request {
        placement: &pack,
        needs: Needs::default(),
        demand: res(3500, 1),
    };
    assert_eq!(chosen(choose_cluster(&fleet, &huge)), Some("d"));
    // Without a rule: the first by name that fits.
    let plain = selector("x");
    assert_eq!(chosen(choose_cluster(&fleet, &req(&plain))), Some("a"));
}

/// A small deterministic generator (xorshift), so the property runs are
/// the same every time.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn fleet(g: &mut Gen) -> Vec<Cluster> {
    let states = [
        ConnectionState::Online,
        ConnectionState::Online,
        ConnectionState::Offline,
        ConnectionState::Pending,
        ConnectionState::Revoked,
    ];
    (0..g.below(6))
        .map(|i| {
            let state = states[g.below(states.len() as u64) as usize];
            let pool = if g.below(3) == 0 { "y" } else { "x" };
            let c = cluster(&format!("c{i}"), state, pool);
            match g.below(4) {
                0 => c,
                _ => {
                    let total = res(
                        1000 * (1 + g.below(8) as i64),
                        (1 + g.below(8) as i64) << 30,
                    );
                    let free = res(
                        g.below(total.cpu_millis as u64 + 1) as i64,
                        g.below(total.memory_bytes as u64 + 1) as i64,
                    );
                    with_capacity(c, total, free)
                }
            }
        })
        .collect()
}

/// Over many fleets and placements: the chosen cluster is one nothing rules
/// out, and no better one (by the rule) was passed over; when none is
/// chosen, every cluster has its reason, and the unplaced reason names
/// every cluster the placement names or selects.
#[test]
fn placement_invariants_hold_over_generated_fleets() {
    let mut g = Gen(0x9e37_79b9_7f4a_7c15);
    let (mut placed, mut waiting) = (0, 0);
    for _ in 0..3000 {
        let clusters = fleet(&mut g);
        let names: Vec<String> = clusters.iter().map(|c| c.name.clone()).collect();
        let mut spec = match g.below(4) {
            0 => Spec::default(),
            1 => selector("x"),
            2 => Spec {
                clusters: names.iter().rev().step_by(2).cloned().collect(),
                ..Default::default()
            },
            _ => Spec {
                cluster: names.first().cloned().or(Some("gone".into())),
                ..Default::default()
            },
        };
        spec.spread = match g.below(3) {
            0 => None,
            1 => Some(Spread::Spread),
            _ => Some(Spread::Pack),
        };
        let req = Request {
            placement: &spec,
            needs: Needs::default(),
            demand: res(g.below(3000) as i64, (g.below(4) as i64) << 30),
        };
        let fits: Vec<&Cluster> = clusters
            .iter()
            .filter(|c| why_not(c, &req).is_none())
            .collect();
        match choose_cluster(&clusters, &req) {
            Placement::Chosen(c) => {
                placed += 1;
                assert!(why_not(c, &req).is_none(), "{c:?}");
                if let (Some(i), false) = (
                    spec.clusters.iter().position(|n| *n == c.name),
                    spec.clusters.is_empty(),
                ) {
                    assert!(
                        fits.iter()
                            .all(|f| spec.clusters.iter().position(|n| *n == f.name) >= Some(i)),
                        "an earlier listed cluster fits"
                    );
                }
                if spec.clusters.is_empty()
                    && let (Some(rule), Some(room)) = (spec.spread, room_after(c, req.demand))
                {
                    for f in &fits {
                        if let Some(other) = room_after(f, req.demand) {
                            match rule {
                                Spread::Spread => assert!(other <= room, "{f:?} has more room"),
                                Spread::Pack => assert!(other >= room, "{f:?} has less room"),
                            }
                        }
                    }
                }
            }
            Placement::Refused(_) => panic!("nothing needs a capability here"),
            Placement::Unavailable => {
                waiting += 1;
                assert!(fits.is_empty(), "{fits:?} fit but none was chosen");
                let why = unplaced_reason(&clusters, &req);
                assert!(why.starts_with(WAITING_FOR_PLACEMENT), "{why}");
                for c in &clusters {
                    let r = why_not(c, &req).expect("a reason");
                    // Every cluster the placement names or selects, with
                    // its reason (label mismatches too, unless only
                    // connection states keep the matching ones out).
                    let named =
                        !matches!(r, Reason::NotPinned | Reason::NotListed | Reason::Labels(_));
                    let all_labels = clusters.iter().all(|c| {
                        matches!(
                            why_not(c, &req),
                            Some(Reason::Labels(_) | Reason::NotPinned | Reason::NotListed)
                        )
                    });
                    if named && !all_labels {
                        assert!(
                            why.contains(&format!("{} {r}", c.name)),
                            "{why} lacks {c:?}"
                        );
                    }
                }
            }
        }
    }
    assert!(
        placed > 500 && waiting > 500,
        "{placed} placed, {waiting} waiting"
    );
}
