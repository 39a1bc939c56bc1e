//! Issue 33, part 1: placement from what spokes report, on real parts. A
//! real hub (pipeline on) and two real `clawfed-spoke` processes, one on
//! `exec-a` and one on `exec-b`, each acting as the spoke's own
//! ServiceAccount and started with `--cluster-label` flags. The hub's
//! `runtime.nodeSelector` selects a kwok Node this test adds to each
//! cluster (tainted, so no other test's Pods land there), so the capacity
//! the spokes report is this test's alone to predict: it is computed here
//! from the Nodes and Pods read through kube and must match.
//!
//! Needs `e2e/cluster.sh up exec-a exec-b` and the spoke binary
//! (`cargo build -p clawfed-spoke --bins`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use clawfed_hub::config::ComputeDriverSection;
use clawfed_hub::model::{AgentRevision, Cluster, ConnectionState, Namespace};
use clawfed_proto::capacity::{self, Resources};
use clawfed_tests::api::HARNESS_IMAGE;
use clawfed_tests::cleanup::on_own_runtime;
use clawfed_tests::hub::{Backend, TestHub};
use clawfed_tests::kube_env::{self, TestCluster};
use clawfed_tests::link::{bootstrap_token, cluster, eventually, hub_ca, hub_url};
use clawfed_tests::procs::{KubeSpoke, Proc};
use clawfed_tests::{control_env, spoke_env};
use k8s_openapi::api::core::v1::{
    Container, Namespace as KubeNamespace, Node, NodeSpec, NodeStatus, Pod, PodSpec,
    ResourceRequirements, Taint, Toleration,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(90);
/// The label (and taint) key of this test's Nodes.
const NODE_KEY: &str = "clawfed-test/placement";

/// What the test made in the clusters, removed on drop (also after a
/// failure): its Nodes, its filler Pod, the tenants' data-plane namespaces.
#[derive(Default)]
struct Made {
    /// (cluster, kind, namespace, name)
    objects: Vec<(String, &'static str, Option<String>, String)>,
}

impl Made {
    fn add(&mut self, cluster: &str, kind: &'static str, ns: Option<&str>, name: &str) {
        self.objects
            .push((cluster.into(), kind, ns.map(str::to_owned), name.into()));
    }

    async fn remove(objects: Vec<(String, &'static str, Option<String>, String)>) -> Result<()> {
        for (cluster, kind, ns, name) in objects.into_iter().rev() {
            let client = kube_env::cluster(&cluster).await?.admin();
            let dp = DeleteParams::background();
            let result = match (kind, ns) {
                ("node", _) => Api::<Node>::all(client)
                    .delete(&name, &dp)
                    .await
                    .map(|_| ()),
                ("pod", Some(ns)) => Api::<Pod>::namespaced(client, &ns)
                    .delete(&name, &DeleteParams::default().grace_period(0))
                    .await
                    .map(|_| ()),
                _ => Api::<KubeNamespace>::all(client)
                    .delete(&name, &dp)
                    .await
                    .map(|_| ()),
            };
            match result {
                Ok(()) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => eprintln!("cleanup: {cluster} {kind} {name}: {e}"),
            }
        }
        Ok(())
    }
}

impl Drop for Made {
    fn drop(&mut self) {
        let objects = std::mem::take(&mut self.objects);
        if !objects.is_empty() {
            on_own_runtime(Duration::from_secs(60), Made::remove(objects));
        }
    }
}

fn quantities(cpu: &str, memory: &str) -> BTreeMap<String, Quantity> {
    BTreeMap::from([
        ("cpu".to_owned(), Quantity(cpu.into())),
        ("memory".to_owned(), Quantity(memory.into())),
    ])
}

/// A kwok Node of `cpu` and `memory` labelled and tainted `NODE_KEY=id`,
/// Ready once kwok takes it over.
async fn add_node(c: &TestCluster, name: &str, id: &str, made: &mut Made) -> Result<()> {
    let node = Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(BTreeMap::from([
                (NODE_KEY.to_owned(), id.to_owned()),
                ("type".to_owned(), "kwok".to_owned()),
            ])),
            annotations: Some(BTreeMap::from([(
                "kwok.x-k8s.io/node".to_owned(),
                "fake".to_owned(),
            )])),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            taints: Some(vec![Taint {
                key: NODE_KEY.into(),
                value: Some(id.into()),
                effect: "NoSchedule".into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: Some(NodeStatus {
            allocatable: Some(quantities("4", "8Gi")),
            capacity: Some(quantities("4", "8Gi")),
            ..Default::default()
        }),
    };
    let nodes: Api<Node> = Api::all(c.admin());
    nodes.create(&PostParams::default(), &node).await?;
    made.add(c.name(), "node", None, name);
    kube_env::eventually(WAIT, &format!("{name} Ready"), || async {
        let n = nodes.get(name).await?;
        let ready = n
            .status
            .and_then(|s| s.conditions)
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        Ok(ready.then_some(()))
    })
    .await
}

/// A Pod bound to `node` (no scheduler) requesting `cpu` and `memory`.
async fn add_filler(
    c: &TestCluster,
    node: &str,
    id: &str,
    cpu: &str,
    memory: &str,
    made: &mut Made,
) -> Result<()> {
    let name = format!("filler-{id}");
    let pod = Pod {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some(node.into()),
            tolerations: Some(vec![Toleration {
                key: Some(NODE_KEY.into()),
                operator: Some("Exists".into()),
                ..Default::default()
            }]),
            containers: vec![Container {
                name: "filler".into(),
                image: Some("registry.invalid/filler:1".into()),
                resources: Some(ResourceRequirements {
                    requests: Some(quantities(cpu, memory)),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    };
    Api::<Pod>::namespaced(c.admin(), "default")
        .create(&PostParams::default(), &pod)
        .await?;
    made.add(c.name(), "pod", Some("default"), &name);
    Ok(())
}

/// The capacity of the Nodes labelled `NODE_KEY=id`, computed here from
/// what kube says (Ready, schedulable; allocatable less the requests of
/// the live Pods bound to each).
async fn expected_capacity(client: &Client, id: &str) -> Result<capacity::Capacity> {
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default().labels(&format!("{NODE_KEY}={id}")))
        .await?;
    let pods: Api<Pod> = Api::all(client.clone());
    let parse = |m: Option<&BTreeMap<String, Quantity>>| -> Result<Resources> {
        let get = |k: &str| m.and_then(|m| m.get(k)).map(|q| q.0.as_str());
        Ok(Resources {
            cpu_millis: get("cpu")
                .map(capacity::cpu_millis)
                .transpose()?
                .unwrap_or(0),
            memory_bytes: get("memory").map(capacity::bytes).transpose()?.unwrap_or(0),
        })
    };
    let mut out = capacity::Capacity::default();
    for node in nodes {
        let status = node.status.clone().unwrap_or_default();
        let ready = status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        let cordoned = node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true);
        if !ready || cordoned {
            continue;
        }
        let allocatable = parse(status.allocatable.as_ref())?;
        let mut used = Resources::default();
        let on_node = ListParams::default().fields(&format!("spec.nodeName={}", node.name_any()));
        for pod in pods.list(&on_node).await? {
            let phase = pod.status.as_ref().and_then(|s| s.phase.clone());
            if matches!(phase.as_deref(), Some("Succeeded" | "Failed")) {
                continue;
            }
            for c in pod.spec.iter().flat_map(|s| &s.containers) {
                used = used.plus(parse(
                    c.resources.as_ref().and_then(|r| r.requests.as_ref()),
                )?);
            }
        }
        out.nodes += 1;
        out.allocatable = out.allocatable.plus(allocatable);
        out.free = out.free.plus(allocatable.minus(used));
    }
    Ok(out)
}

/// The hub's record of `name` once it shows the capacity kube says it has.
async fn capacity_matches(hub: &TestHub, name: &str, kube: &Client, id: &str) -> Cluster {
    eventually(
        WAIT,
        &format!("{name} reports the capacity kube shows"),
        || async {
            let c = cluster(hub, name).await?;
            let want = expected_capacity(kube, id).await.ok()?;
            (c.capacity.as_ref().map(|k| k.as_capacity()) == Some(want)).then_some(c)
        },
    )
    .await
}

/// `clawfed-spoke --applier kube` on `exec` as the spoke's ServiceAccount,
/// enrolling as `name` with `labels`.
async fn spawn_spoke(
    hub: &TestHub,
    exec: &TestCluster,
    name: &str,
    labels: &[String],
    dir: &Path,
) -> Result<Proc> {
    spoke_env::install_spoke_rbac(exec).await?;
    let root: PathBuf = dir.join(name);
    std::fs::create_dir_all(&root)?;
    let kubeconfig = root.join("spoke.kubeconfig");
    control_env::write_service_account_kubeconfig(
        exec,
        spoke_env::SPOKE_NAMESPACE,
        spoke_env::SPOKE_SERVICE_ACCOUNT,
        3600,
        &kubeconfig,
    )
    .await?;
    let token = root.join("bootstrap-token");
    std::fs::write(&token, bootstrap_token(hub, name, false).await)?;
    let ca = root.join("hub-ca.pem");
    std::fs::write(&ca, hub_ca(hub))?;
    let state = root.join("state");
    let mut c = KubeSpoke {
        hub_url: &hub_url(hub),
        ca_file: &ca,
        cluster_name: name,
        state_dir: &state,
        kubeconfig: &kubeconfig,
        token_file: Some(&token),
    }
    .command()?;
    for label in labels {
        c.args(["--cluster-label", label]);
    }
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs)?;
    Proc::spawn(name, &mut c, &logs)
}

async fn post<T: serde::de::DeserializeOwned>(
    hub: &TestHub,
    path: &str,
    body: Option<serde_json::Value>,
) -> Result<T> {
    let mut req = hub.http.post(hub.url(path)).bearer_auth(&hub.root_token);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await?;
    let status = resp.status();
    let text = resp.text().await?;
    ensure!(status.is_success(), "{path}: {status} {text}");
    serde_json::from_str(&text).with_context(|| format!("{path}: {text}"))
}

/// Creates Agent `name` requesting `cpu` with `placement` and deploys it:
/// revision 1 as the deploy answered it.
async fn deploy(
    hub: &TestHub,
    tenant: &str,
    name: &str,
    cpu: &str,
    placement: serde_json::Value,
) -> Result<AgentRevision> {
    let spec = json!({
        "harnessKind": "embedded-openclaw",
        "image": HARNESS_IMAGE,
        "resources": { "cpuRequest": cpu, "memoryRequest": "256Mi" },
        "placement": placement,
    });
    let _: serde_json::Value = post(
        hub,
        &format!("/namespaces/{tenant}/agents"),
        Some(json!({ "name": name, "spec": spec })),
    )
    .await?;
    post(
        hub,
        &format!("/namespaces/{tenant}/agents/{name}/deploy"),
        None,
    )
    .await
}

/// Revision 1 of `agent` once `pred` holds for it.
async fn revision_when(
    hub: &TestHub,
    tenant: &str,
    agent: &str,
    what: &str,
    pred: impl Fn(&AgentRevision) -> bool,
) -> AgentRevision {
    eventually(WAIT, what, || async {
        let r: AgentRevision = hub
            .http
            .get(hub.url(&format!("/namespaces/{tenant}/agents/{agent}/revisions/1")))
            .bearer_auth(&hub.root_token)
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        pred(&r).then_some(r)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placement_follows_the_labels_and_capacity_spokes_report() -> Result<()> {
    clawfed_tests::link::init_test_logging();
    let exec_a = kube_env::cluster("exec-a").await?;
    let exec_b = kube_env::cluster("exec-b").await?;
    let id = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    let mut made = Made::default();
    let (node_a, node_b) = (format!("placement-{id}-a"), format!("placement-{id}-b"));
    add_node(&exec_a, &node_a, &id, &mut made).await?;
    add_node(&exec_b, &node_b, &id, &mut made).await?;

    let compute: ComputeDriverSection = serde_yaml_ng::from_str(&format!(
        "configuration:\n  runtime:\n    nodeSelector: {{ {NODE_KEY}: \"{id}\" }}\n"
    ))?;
    let mut hub = TestHub::start_with(
        Backend::Postgres,
        |c| {
            c.pipeline.enabled = true;
            c.drivers.compute = Some(compute);
        },
        clawfed_hub::worker::Handlers::builtin(),
    )
    .await;
    let dir = tempfile::tempdir()?;
    let (pl_a, pl_b) = ("pl-a", "pl-b");
    let labels = |zone: &str| vec![format!("placement-test={id}"), format!("zone={zone}")];
    let mut spoke_a = spawn_spoke(&hub, &exec_a, pl_a, &labels("a"), dir.path()).await?;
    let mut spoke_b = spawn_spoke(&hub, &exec_b, pl_b, &labels("b"), dir.path()).await?;

    // Labels: the spokes' flags, stored on the clusters.
    for (name, zone) in [(pl_a, "a"), (pl_b, "b")] {
        let c = eventually(WAIT, &format!("{name} online"), || async {
            cluster(&hub, name)
                .await
                .filter(|c| c.connection_state == ConnectionState::Online)
        })
        .await;
        assert_eq!(
            c.labels,
            BTreeMap::from([
                ("placement-test".to_owned(), id.clone()),
                ("zone".to_owned(), zone.to_owned()),
            ]),
            "{name}"
        );
    }

    // Capacity: the test Node of each cluster, as kube shows it.
    let a = capacity_matches(&hub, pl_a, &exec_a.admin(), &id).await;
    let b = capacity_matches(&hub, pl_b, &exec_b.admin(), &id).await;
    for c in [&a, &b] {
        let k = c.capacity.as_ref().expect("reported");
        assert_eq!(k.nodes, 1, "only the node the selector selects");
        assert_eq!(k.allocatable.cpu_millis, 4000);
        assert_eq!(k.free, k.allocatable, "nothing runs there yet");
    }
    // A Pod bound to exec-a's node: its report follows (a watch, not a poll
    // of the hub's making).
    add_filler(&exec_a, &node_a, &id, "3", "1Gi", &mut made).await?;
    let a = capacity_matches(&hub, pl_a, &exec_a.admin(), &id).await;
    let free_a = a.capacity.as_ref().expect("reported").free;
    assert_eq!(free_a.cpu_millis, 1000, "{free_a:?}");

    let tenant = format!("t{id}");
    let ns: Namespace = post(&hub, "/namespaces", Some(json!({ "name": tenant }))).await?;
    for c in [&exec_a, &exec_b] {
        made.add(c.name(), "namespace", None, &ns.data_plane_namespace);
    }
    let all = json!({ "placement-test": id });

    // A selector matches the labels a spoke reported.
    let r = deploy(
        &hub,
        &tenant,
        "sel",
        "100m",
        json!({ "clusterSelector": { "zone": "b" } }),
    )
    .await?;
    assert_eq!(r.resolved_cluster.as_deref(), Some(pl_b));
    // Requests that do not fit exec-a (first by name) go to exec-b.
    let r = deploy(&hub, &tenant, "big", "2", json!({ "clusterSelector": all })).await?;
    assert_eq!(
        r.resolved_cluster.as_deref(),
        Some(pl_b),
        "does not fit {pl_a}"
    );
    let r = deploy(
        &hub,
        &tenant,
        "small",
        "500m",
        json!({ "clusterSelector": all }),
    )
    .await?;
    assert_eq!(
        r.resolved_cluster.as_deref(),
        Some(pl_a),
        "first by name, fits"
    );
    // Spread: the most room left; pack: the least that fits.
    let spread = json!({ "clusterSelector": all, "spread": "spread" });
    let r = deploy(&hub, &tenant, "spread", "500m", spread).await?;
    assert_eq!(r.resolved_cluster.as_deref(), Some(pl_b));
    let pack = json!({ "clusterSelector": all, "spread": "pack" });
    let r = deploy(&hub, &tenant, "pack", "500m", pack).await?;
    assert_eq!(r.resolved_cluster.as_deref(), Some(pl_a));
    // A preference list: the first listed that fits.
    let listed = json!({ "clusters": [pl_b, pl_a] });
    let r = deploy(&hub, &tenant, "listed", "500m", listed).await?;
    assert_eq!(r.resolved_cluster.as_deref(), Some(pl_b));
    let listed = json!({ "clusters": [pl_a, pl_b] });
    let r = deploy(&hub, &tenant, "listed-big", "2", listed).await?;
    assert_eq!(r.resolved_cluster.as_deref(), Some(pl_b));

    // Nothing fits: the revision waits, naming each cluster's reason.
    let r = deploy(
        &hub,
        &tenant,
        "huge",
        "6",
        json!({ "clusterSelector": all }),
    )
    .await?;
    assert_eq!(r.resolved_cluster, None);
    let r = revision_when(&hub, &tenant, "huge", "huge says why it waits", |r| {
        r.reason
            .as_deref()
            .is_some_and(|w| w.contains("does not fit"))
    })
    .await;
    let why = r.reason.unwrap_or_default();
    assert!(why.starts_with("waiting for placement"), "{why}");
    assert!(
        why.contains(&format!(
            "{pl_a} does not fit: needs cpu 6000m, memory 256Mi, has cpu 1000m"
        )),
        "{why}"
    );
    assert!(
        why.contains(&format!("{pl_b} does not fit: needs cpu 6000m")),
        "{why}"
    );
    // A cluster whose spoke is gone is named as offline.
    spoke_b.terminate().await;
    eventually(WAIT, "pl-b offline", || async {
        cluster(&hub, pl_b)
            .await
            .filter(|c| c.connection_state == ConnectionState::Offline)
    })
    .await;
    let r = deploy(
        &hub,
        &tenant,
        "zone-b",
        "100m",
        json!({ "clusterSelector": { "zone": "b" } }),
    )
    .await?;
    assert_eq!(r.resolved_cluster, None);
    let r = revision_when(&hub, &tenant, "zone-b", "zone-b says why it waits", |r| {
        r.reason.as_deref().is_some_and(|w| w.contains("offline"))
    })
    .await;
    let why = r.reason.unwrap_or_default();
    assert!(
        why.contains(&format!(
            "no matching cluster is online and uncordoned ({pl_b} is offline)"
        )),
        "{why}"
    );

    spoke_a.terminate().await;
    hub.stop().await;
    drop(made);
    Ok(())
}
