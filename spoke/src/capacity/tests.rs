use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, Node, NodeCondition, NodeSpec, NodeStatus, Pod, PodSpec, PodStatus,
    ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::*;

fn quantities(cpu: &str, memory: &str) -> BTreeMap<String, Quantity> {
    BTreeMap::from([
        ("cpu".to_owned(), Quantity(cpu.into())),
        ("memory".to_owned(), Quantity(memory.into())),
    ])
}

fn node(name: &str, pool: &str, ready: bool, cordoned: bool) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(BTreeMap::from([("pool".into(), pool.into())])),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            unschedulable: Some(cordoned),
            ..Default::default()
        }),
        status: Some(NodeStatus {
            allocatable: Some(quantities("4", "8Gi")),
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: if ready { "True" } else { "False" }.into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    }
}

fn container(cpu: &str, memory: &str) -> Container {
    Container {
        name: "c".into(),
        resources: Some(ResourceRequirements {
            requests: Some(quantities(cpu, memory)),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn pod(node: &str, phase: &str, containers: Vec<Container>, init: Vec<Container>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some("p".into()),
            namespace: Some("ns".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some(node.into()),
            containers,
            init_containers: Some(init),
            ..Default::default()
        }),
        status: Some(PodStatus {
            phase: Some(phase.into()),
            ..Default::default()
        }),
    }
}

fn res(cpu_millis: i64, memory_bytes: i64) -> Resources {
    Resources {
        cpu_millis,
        memory_bytes,
    }
}

#[test]
fn a_pod_requests_its_containers_or_its_largest_init_container() {
    let p = pod(
        "n1",
        "Running",
        vec![container("100m", "64Mi"), container("200m", "64Mi")],
        vec![container("1", "16Mi")],
    );
    let f = PodFacts::of(&p).unwrap();
    assert_eq!(f.node, "n1");
    assert_eq!(f.requests, res(1000, 128 << 20));
    let mut sidecar = container("50m", "32Mi");
    sidecar.restart_policy = Some("Always".into());
    let p = pod(
        "n1",
        "Pending",
        vec![container("100m", "64Mi")],
        vec![sidecar],
    );
    assert_eq!(PodFacts::of(&p).unwrap().requests, res(150, 96 << 20));
    assert_eq!(PodFacts::of(&pod("n1", "Succeeded", vec![], vec![])), None);
    assert_eq!(PodFacts::of(&pod("", "Pending", vec![], vec![])), None);
}

#[test]
fn capacity_counts_the_selected_ready_schedulable_nodes_less_their_pods() {
    let mut t = Tally::default();
    for (name, pool, ready, cordoned) in [
        ("a1", "agents", true, false),
        ("a2", "agents", true, false),
        ("a3", "agents", false, false),
        ("a4", "agents", true, true),
        ("g1", "gateways", true, false),
    ] {
        t.nodes.insert(
            name.into(),
            NodeFacts::of(&node(name, pool, ready, cordoned)),
        );
    }
    let bound = |node: &str, cpu, mem| PodFacts {
        node: node.into(),
        requests: res(cpu, mem),
    };
    t.pods.insert("ns/x".into(), bound("a1", 1500, 1 << 30));
    // Over-commits a2: it has nothing free, and takes nothing from a1.
    t.pods.insert("ns/y".into(), bound("a2", 5000, 1 << 30));
    t.pods.insert("ns/z".into(), bound("g1", 1000, 1 << 30));
    t.pods.insert("ns/w".into(), bound("a3", 1000, 1 << 30));
    let agents = BTreeMap::from([("pool".to_owned(), "agents".to_owned())]);
    let c = t.capacity(&agents);
    assert_eq!(c.nodes, 2);
    assert_eq!(c.allocatable, res(8000, 16 << 30));
    assert_eq!(c.free, res(2500, 14 << 30));
    let all = t.capacity(&BTreeMap::new());
    assert_eq!(all.nodes, 3, "a3 is not Ready, a4 is cordoned");
    assert_eq!(all.free, res(5500, 21 << 30));
}

#[test]
fn a_relist_replaces_what_the_last_list_saw() {
    let mut map = HashMap::new();
    let mut relist = Relist::new();
    let facts = |n: &Node| Some((n.name_any(), NodeFacts::of(n)));
    let key = |n: &Node| n.name_any();
    assert!(relist.apply(
        &mut map,
        watcher::Event::Apply(node("old", "p", true, false)),
        facts,
        key
    ));
    relist.apply(&mut map, watcher::Event::Init, facts, key);
    relist.apply(
        &mut map,
        watcher::Event::InitApply(node("new", "p", true, false)),
        facts,
        key,
    );
    assert!(map.contains_key("old"), "kept until the list is done");
    assert!(!relist.synced);
    assert!(relist.apply(&mut map, watcher::Event::InitDone, facts, key));
    assert!(relist.synced);
    assert_eq!(map.keys().collect::<Vec<_>>(), vec!["new"]);
    assert!(relist.apply(
        &mut map,
        watcher::Event::Delete(node("new", "p", true, false)),
        facts,
        key
    ));
    assert!(map.is_empty());
}
