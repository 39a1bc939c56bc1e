//! deploy/monitoring against real processes: the Grafana dashboard parses,
//! and every metric name its panels and the alerting rules (and the rules'
//! unit tests) use is one a real hub's or a real `clawfed-spoke` binary's
//! `/metrics` exports; the store-backed gauges the alerts rest on
//! (clusters online, certificate expiry, failed work, revision staleness and
//! phase deadlines, process CPU and memory) carry true values on both
//! backends.
//!
//! The spoke binary is taken from this target dir
//! (`cargo build -p clawfed-spoke --bins`; scripts/test.sh builds it).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use chrono::Utc;
use clawfed_hub::model::{
    AgentSpec, ExecutionMode, HarnessKind, Placement, Resources, RevisionPhase,
};
use clawfed_hub::store::{Effects, NewAgent, NewAudit, NewNamespace, NewRevision, NewWork, Store};
use clawfed_tests::hub::{Backend, TestHub};
use clawfed_tests::link::{bootstrap_token, eventually, hub_ca, hub_url, start_spoke};
use clawfed_tests::procs::{Proc, bin};

const CLUSTER: &str = "exec-a";

fn monitoring_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/monitoring")
}

async fn scrape(http: &reqwest::Client, base: &str) -> Option<String> {
    let r = http.get(format!("{base}/metrics")).send().await.ok()?;
    if !r.status().is_success() {
        return None;
    }
    r.text().await.ok()
}

/// Sample names a scrape can hold: every `# TYPE` family with the suffixes
/// its type gets in the text format, and every sample line's name.
fn exported_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split_whitespace();
            let (Some(name), Some(kind)) = (parts.next(), parts.next()) else {
                continue;
            };
            match kind {
                "counter" => {
                    names.insert(format!("{name}_total"));
                }
                "histogram" => {
                    for suffix in ["_bucket", "_sum", "_count"] {
                        names.insert(format!("{name}{suffix}"));
                    }
                }
                _ => {
                    names.insert(name.to_owned());
                }
            }
        } else if !line.starts_with('#') && !line.is_empty() {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            names.insert(line[..end].to_owned());
        }
    }
    names
}

/// The value of the sample `series` (name and labels exactly as printed).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// Every PromQL expression of the dashboard (panel targets, and template
/// queries), found by walking the JSON.
fn dashboard_exprs(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("expr" | "definition", serde_json::Value::String(s)) => out.push(s.clone()),
                    _ => dashboard_exprs(v, out),
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|v| dashboard_exprs(v, out)),
        _ => {}
    }
}

/// Metric names in PromQL text: clawfed's own prefixes and the process
/// collector's (`job`, `instance` and `up` come from Prometheus itself).
fn metric_names(expr: &str) -> BTreeSet<String> {
    let re = regex::Regex::new(r"\b(?:occ|clawfed|process)_[a-zA-Z0-9_]+").unwrap();
    re.find_iter(expr).map(|m| m.as_str().to_owned()).collect()
}

/// Where each metric name is used: the dashboard, the rules and the rule
/// tests' input series.
fn referenced_names() -> BTreeMap<String, BTreeSet<&'static str>> {
    let dir = monitoring_dir();
    let mut used: BTreeMap<String, BTreeSet<&'static str>> = BTreeMap::new();

    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("clawfed-fleet.json")).unwrap())
            .expect("clawfed-fleet.json is JSON");
    let panels = dashboard["panels"].as_array().expect("dashboard panels");
    for p in panels.iter().filter(|p| p["type"] != "row") {
        let targets = p["targets"].as_array();
        assert!(
            targets.is_some_and(|t| !t.is_empty()
                && t.iter()
                    .all(|t| t["expr"].as_str().is_some_and(|e| !e.is_empty()))),
            "panel {:?} has no query",
            p["title"]
        );
    }
    let mut exprs = Vec::new();
    dashboard_exprs(&dashboard, &mut exprs);
    for e in &exprs {
        for n in metric_names(e) {
            used.entry(n).or_default().insert("clawfed-fleet.json");
        }
    }

    let rules: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(dir.join("alerts.yaml")).unwrap())
            .expect("alerts.yaml is YAML");
    let mut alerts = 0;
    for group in rules["groups"].as_sequence().expect("rule groups") {
        for rule in group["rules"].as_sequence().expect("rules") {
            alerts += 1;
            let expr = rule["expr"].as_str().expect("rule expr");
            for n in metric_names(expr) {
                used.entry(n).or_default().insert("alerts.yaml");
            }
        }
    }
    assert!(alerts >= 7, "alerts.yaml has {alerts} rules");

    let tests: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(dir.join("alerts.test.yaml")).unwrap())
            .expect("alerts.test.yaml is YAML");
    for test in tests["tests"].as_sequence().expect("rule tests") {
        for s in test["input_series"].as_sequence().expect("input series") {
            for n in metric_names(s["series"].as_str().expect("series")) {
                used.entry(n).or_default().insert("alerts.test.yaml");
            }
        }
    }
    used
}

/// The dashboard and the rules name only metrics a real hub and a real
/// spoke process export.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_and_rules_use_only_exported_metrics() {
    let used = referenced_names();
    assert!(used.len() >= 20, "too few metric names found: {used:?}");

    let hub = TestHub::start(Backend::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ca.pem"), hub_ca(&hub)).unwrap();
    std::fs::write(
        dir.path().join("token"),
        bootstrap_token(&hub, CLUSTER, false).await,
    )
    .unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    let mut spoke = Proc::spawn(
        "spoke",
        Command::new(bin("clawfed-spoke").unwrap())
            .args(["--hub-url", &hub_url(&hub)])
            .arg("--ca-file")
            .arg(dir.path().join("ca.pem"))
            .args(["--cluster-name", CLUSTER])
            .arg("--bootstrap-token-file")
            .arg(dir.path().join("token"))
            .arg("--state-dir")
            .arg(&state)
            .args(["--applier", "ledger"])
            .args(["--metrics-addr", "127.0.0.1:0"]),
        dir.path(),
    )
    .unwrap();
    // The address the spoke bound, from the line it prints.
    let spoke_metrics = spoke
        .spoke_listening(Duration::from_secs(30))
        .await
        .unwrap()
        .field("metrics")
        .unwrap();
    let spoke_metrics = spoke_metrics
        .strip_suffix("/metrics")
        .unwrap_or(&spoke_metrics)
        .to_owned();
    // A pending revision, so the per-phase staleness series exists.
    pending_revision(hub.store().as_ref()).await;

    // Families with no series are left out of a scrape, and some series
    // appear only once the link is up and polled: collect the names every
    // scrape shows until each one used is seen, or time is up.
    let mut exported = BTreeSet::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let missing = loop {
        if let Some(text) = scrape(&hub.http, &hub.metrics).await {
            exported.extend(exported_names(&text));
        }
        if let Some(text) = scrape(&hub.http, &spoke_metrics).await {
            exported.extend(exported_names(&text));
        }
        let missing: Vec<String> = used
            .iter()
            .filter(|(n, _)| !exported.contains(*n))
            .map(|(n, files)| format!("{n} (in {files:?})"))
            .collect();
        if missing.is_empty() || tokio::time::Instant::now() > deadline {
            break missing;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        missing.is_empty(),
        "metric names no clawfed binary exports: {missing:#?}\nexported: {exported:#?}"
    );
    // Both processes were really scraped.
    for name in [
        "occ_link_connected_spokes",
        "clawfed_spoke_link_connected",
        "process_cpu_seconds_total",
    ] {
        assert!(exported.contains(name), "{name} not exported: {exported:?}");
    }
    spoke.terminate().await;
}

fn spec() -> AgentSpec {
    AgentSpec {
        harness_kind: HarnessKind::DedicatedOpenclaw,
        execution_mode: ExecutionMode::Ordinary,
        image: "img:1".into(),
        gateway_image: None,
        configuration: None,
        resources: Resources::default(),
        requirement_labels: BTreeMap::new(),
        placement: Placement::default(),
        plugins: vec![],
        channels: vec![],
        failover: None,
    }
}

fn fx(action: &str) -> Effects {
    Effects::audit(NewAudit {
        actor: "token:test".into(),
        action: action.into(),
        namespace: Some("team".into()),
        target: "t".into(),
        result: "ok".into(),
        detail: None,
    })
}

/// A pending revision of a new Agent `team/bot`, written to the store the
/// way another hub replica would.
async fn pending_revision(s: &dyn Store) {
    let id = uuid::Uuid::now_v7().to_string();
    s.create_namespace(
        &NewNamespace {
            id: id.clone(),
            name: "team".into(),
            display_name: "team".into(),
            data_plane_namespace: clawfed_proto::naming::data_plane_namespace(&id),
            adopted: false,
        },
        &fx("namespace.create"),
    )
    .await
    .unwrap();
    s.create_agent(
        &NewAgent {
            namespace: "team".into(),
            name: "bot".into(),
            spec: spec(),
        },
        &fx("agent.create"),
    )
    .await
    .unwrap();
    s.deploy(
        &NewRevision {
            id: uuid::Uuid::now_v7().to_string(),
            namespace: "team".into(),
            agent: "bot".into(),
            agent_version: 1,
            spec: spec(),
            configuration: serde_json::json!({}),
            images: vec![],
            resolved_cluster: None,
            rolled_back_from: None,
            moved: None,
            idempotency: None,
            requested_by: None,
        },
        &fx("agent.deploy"),
    )
    .await
    .unwrap();
}

/// The gauges the alerts rest on follow the store and the link.
async fn fleet_gauges_follow_the_store_and_the_link(backend: Backend) {
    let hub = TestHub::start_with(
        backend,
        |c| {
            c.pipeline.phase_deadline_seconds = 123;
            c.pipeline.ready_deadline_seconds = 456;
        },
        clawfed_hub::worker::Handlers::builtin(),
    )
    .await;
    let store = hub.store();
    let dir = tempfile::tempdir().unwrap();
    let token = bootstrap_token(&hub, CLUSTER, false).await;
    let spoke = start_spoke(&hub, CLUSTER, Some(token), dir.path());
    let online = format!("occ_cluster_online{{cluster=\"{CLUSTER}\"}}");
    let not_after =
        format!("occ_link_certificate_not_after_timestamp_seconds{{cluster=\"{CLUSTER}\"}}");
    let text = eventually(Duration::from_secs(30), "cluster online", || async {
        let text = scrape(&hub.http, &hub.metrics).await?;
        (sample(&text, &online) == Some(1.0)).then_some(text)
    })
    .await;
    let expires = sample(&text, &not_after).expect("certificate expiry of the session");
    let now = Utc::now().timestamp() as f64;
    assert!(
        expires > now + 3600.0 && expires < now + 400.0 * 86400.0,
        "not after {expires}, now {now}"
    );
    for (phase, seconds) in [
        ("pending", 123.0),
        ("provisioning", 123.0),
        ("preparing", 123.0),
        ("waiting-ready", 456.0),
    ] {
        let series = format!("occ_revision_phase_deadline_seconds{{phase=\"{phase}\"}}");
        assert_eq!(sample(&text, &series), Some(seconds), "{series}");
    }
    assert!(sample(&text, "process_cpu_seconds_total").is_some_and(|v| v > 0.0));
    assert!(sample(&text, "process_resident_memory_bytes").is_some_and(|v| v > 1e6));
    assert_eq!(sample(&text, "occ_work_failed"), Some(0.0));
    assert!(!text.contains("occ_revision_oldest_update_age_seconds{"));

    // A work item nothing handles: the hub's worker fails it on its only
    // attempt.
    store
        .enqueue_work(&[NewWork {
            kind: "monitoring.no-such-kind".into(),
            namespace_id: None,
            target: "t".into(),
            payload: serde_json::json!({}),
            requested_by: None,
            max_attempts: 1,
            run_at: Utc::now(),
            coalesce: false,
        }])
        .await
        .unwrap();
    eventually(Duration::from_secs(30), "failed work counted", || async {
        let text = scrape(&hub.http, &hub.metrics).await?;
        (sample(&text, "occ_work_failed") == Some(1.0)).then_some(())
    })
    .await;

    // A revision waiting for placement (this hub runs no pipeline).
    pending_revision(store.as_ref()).await;
    let pending = RevisionPhase::Pending.as_str();
    let text = eventually(
        Duration::from_secs(30),
        "pending revision counted",
        || async {
            let text = scrape(&hub.http, &hub.metrics).await?;
            (sample(&text, &format!("occ_revisions{{phase=\"{pending}\"}}")) == Some(1.0))
                .then_some(text)
        },
    )
    .await;
    let age = sample(
        &text,
        &format!("occ_revision_oldest_update_age_seconds{{phase=\"{pending}\"}}"),
    )
    .expect("staleness of the pending revision");
    assert!((0.0..60.0).contains(&age), "{age}");

    // The spoke goes away: offline, and its certificate no longer alerts.
    let _ = spoke.stop().await;
    let text = eventually(Duration::from_secs(30), "cluster offline", || async {
        let text = scrape(&hub.http, &hub.metrics).await?;
        (sample(&text, &online) == Some(0.0)).then_some(text)
    })
    .await;
    assert_eq!(sample(&text, &not_after), None, "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_gauges_follow_the_store_and_the_link_sqlite() {
    fleet_gauges_follow_the_store_and_the_link(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_gauges_follow_the_store_and_the_link_postgres() {
    fleet_gauges_follow_the_store_and_the_link(Backend::Postgres).await;
}
