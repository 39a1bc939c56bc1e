//! The Helm charts `deploy/charts/clawfed-hub` and `deploy/charts/clawfed-spoke`
//! on real parts: `helm` built from the helm.sh/helm/v3 Go module
//! (`e2e/helm.sh`; its path in `CLAWFED_HELM`, which `scripts/test.sh`
//! sets), the real kube-apiservers of the `control` and `exec-a` test
//! clusters, real PostgreSQL, and the real `clawfed-hub` and
//! `clawfed-spoke` binaries.
//!
//! - `helm lint` of both charts, and the errors bad values get;
//! - the charts' RBAC and admission policy equal `deploy/hub` and
//!   `deploy/spoke` (so the plain manifests and the charts cannot drift),
//!   provider rights only with `provider: crd`, the ServiceMonitor only
//!   when enabled, the image by digest, the rendered hub config accepted by
//!   the hub's own loader;
//! - the migration Job: a pre-install/pre-upgrade hook running `clawfed-hub
//!   migrate` with the migration role's Secret, the hub's Pods only with
//!   the application role's;
//! - `helm template` applied with a server-side dry run;
//! - `helm install` of the hub chart into `control` and the spoke chart into
//!   `exec-a` (own namespaces, Pod Security `restricted` enforced there),
//!   then the hub and the spoke run OUTSIDE the clusters with ServiceAccount
//!   tokens of the charts' ServiceAccounts (TokenRequest), the hub with the
//!   chart's rendered config and the spoke with the chart's Deployment
//!   arguments, and a deploy goes to `active` with exactly those rights;
//!   `kubectl auth can-i --as` shows each needed action allowed and each
//!   forbidden one denied; `helm uninstall` removes what the charts made.
//!
//! Needs `e2e/cluster.sh up control exec-a`, `eval "$(scripts/postgres.sh
//! env)"` and `cargo build -p clawfed-hub -p clawfed-spoke --bins`. Skips
//! with a note when helm or the clusters are missing.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use clawfed_hub::auth::Role as TokenRole;
use clawfed_hub::client::{HubClient, TlsOptions};
use clawfed_hub::model::{Agent, AgentRevision, RevisionPhase};
use clawfed_tests::api::HubTestExt;
use clawfed_tests::control_env::{self, STORAGE_CLASS};
use clawfed_tests::hub::mint;
use clawfed_tests::kube_env::{self, TestCluster};
use clawfed_tests::procs::{Proc, bin};
use clawfed_tests::{db, until};
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, PersistentVolume, Secret};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use reqwest::Method;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(90);
const HELM_ENV: &str = "CLAWFED_HELM";
const DIGEST: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";

fn repo() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

fn chart(name: &str) -> PathBuf {
    repo().join("deploy/charts").join(name)
}

/// The helm binary: `CLAWFED_HELM`, else the one `e2e/helm.sh` built into
/// the cache. `None` (the test skips with a note) when neither exists,
/// unless the clusters are required (`scripts/test.sh`), then an error.
fn helm_or_skip() -> Result<Option<PathBuf>> {
    let path = match std::env::var_os(HELM_ENV) {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(script_output("e2e/helm.sh", &["--print"])?),
    };
    if path.exists() {
        return Ok(Some(path));
    }
    let note = format!(
        "helm is missing at {} (build it with `e2e/helm.sh`, which prints its path for {HELM_ENV})",
        path.display()
    );
    ensure!(
        std::env::var_os(kube_env::REQUIRE_CLUSTERS_ENV).is_none(),
        "{note}"
    );
    eprintln!("skipped: {note}");
    Ok(None)
}

fn script_output(script: &str, args: &[&str]) -> Result<String> {
    let out = Command::new("bash")
        .arg(repo().join(script))
        .args(args)
        .output()
        .with_context(|| format!("running {script}"))?;
    ensure!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?.trim().to_owned())
}

/// kubectl from the same build as the test apiservers.
fn kubectl() -> Result<PathBuf> {
    Ok(PathBuf::from(script_output("e2e/build.sh", &["--print"])?).join("kubectl"))
}

/// Runs a command; its stdout on success, an error with stderr otherwise.
fn run(cmd: &mut Command, stdin: Option<&str>) -> Result<String> {
    let what = format!("{cmd:?}");
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd.spawn().with_context(|| format!("spawning {what}"))?;
    if let Some(input) = stdin {
        use std::io::Write;
        child
            .stdin
            .take()
            .context("stdin")?
            .write_all(input.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    ensure!(
        out.status.success(),
        "{what} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?)
}

/// helm with its own config/cache/data dirs (nothing of the user's).
struct Helm {
    bin: PathBuf,
    home: tempfile::TempDir,
}

impl Helm {
    fn new(bin: PathBuf) -> Result<Self> {
        Ok(Self {
            bin,
            home: tempfile::tempdir()?,
        })
    }

    fn cmd(&self) -> Command {
        let mut c = Command::new(&self.bin);
        for (k, sub) in [
            ("HELM_CONFIG_HOME", "config"),
            ("HELM_CACHE_HOME", "cache"),
            ("HELM_DATA_HOME", "data"),
        ] {
            c.env(k, self.home.path().join(sub));
        }
        c.env_remove("KUBECONFIG");
        c
    }

    fn values_file(&self, name: &str, values: &Value) -> Result<PathBuf> {
        let path = self.home.path().join(format!("{name}.values.yaml"));
        std::fs::write(&path, serde_yaml_ng::to_string(values)?)?;
        Ok(path)
    }

    /// `helm template` of `chart` as release `release` in `namespace`.
    fn template(
        &self,
        chart_name: &str,
        release: &str,
        namespace: &str,
        values: &Value,
    ) -> Result<String> {
        let file = self.values_file(release, values)?;
        run(
            self.cmd()
                .args(["template", release])
                .arg(chart(chart_name))
                .args(["--namespace", namespace, "--values"])
                .arg(file),
            None,
        )
    }
}

/// The documents of a multi-document YAML text, as JSON values.
fn documents(text: &str) -> Result<Vec<Value>> {
    let mut out = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(text) {
        let v: Value = serde::Deserialize::deserialize(doc)?;
        if !v.is_null() {
            out.push(v);
        }
    }
    Ok(out)
}

fn of_kind<T: DeserializeOwned>(docs: &[Value], kind: &str) -> Result<Vec<T>> {
    docs.iter()
        .filter(|d| d["kind"] == kind)
        .map(|d| Ok(serde_json::from_value(d.clone())?))
        .collect()
}

fn by_name<K: kube::Resource<DynamicType = ()> + Clone>(objs: Vec<K>) -> BTreeMap<String, K> {
    objs.into_iter().map(|o| (o.name_any(), o)).collect()
}

fn plain(path: &str) -> Result<Vec<Value>> {
    documents(&std::fs::read_to_string(repo().join(path)).with_context(|| path.to_owned())?)
}

/// Values the spoke chart needs at least.
fn spoke_values() -> Value {
    json!({
        "clusterName": "exec-a",
        "hub": { "url": "https://clawfed-hub.example:8443", "caPem": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----" }
    })
}

fn hub_values() -> Value {
    json!({
        "api": { "tls": { "secretName": "clawfed-hub-api-tls" } },
        "config": { "policy": {
            "requireImmutableDigest": true,
            "defaultGatewayImage": format!("registry.invalid/openclaw-gateway@{DIGEST}")
        }}
    })
}

// ================================================================ lint

/// `helm lint --strict` passes for both charts; bad values are refused
/// naming the value.
#[tokio::test]
async fn helm_lint_passes_and_bad_values_are_named() -> Result<()> {
    let Some(bin) = helm_or_skip()? else {
        return Ok(());
    };
    let helm = Helm::new(bin)?;
    for (name, values) in [
        ("clawfed-hub", hub_values()),
        ("clawfed-spoke", spoke_values()),
    ] {
        let file = helm.values_file(name, &values)?;
        let out = run(
            helm.cmd()
                .args(["lint", "--strict"])
                .arg(chart(name))
                .arg("--values")
                .arg(file),
            None,
        )?;
        assert!(out.contains("0 chart(s) failed"), "{name}: {out}");
    }
    let refused = |chart_name: &str, values: Value, field: &str| -> Result<()> {
        let err = helm
            .template(chart_name, "bad", "clawfed-system", &values)
            .expect_err("bad values must be refused");
        let text = format!("{err:#}");
        ensure!(text.contains(field), "error names {field}: {text}");
        Ok(())
    };
    let mut v = spoke_values();
    v["hub"]["url"] = json!("");
    refused("clawfed-spoke", v, "hub.url")?;
    let mut v = spoke_values();
    v["hub"]["url"] = json!("http://hub:8443");
    refused("clawfed-spoke", v, "hub.url")?;
    let mut v = spoke_values();
    v["clusterName"] = json!("");
    refused("clawfed-spoke", v, "clusterName")?;
    let mut v = spoke_values();
    v["provider"] = json!("kata");
    refused("clawfed-spoke", v, "provider")?;
    let mut v = spoke_values();
    v["sandboxContainment"] = json!(["networking"]);
    refused("clawfed-spoke", v, "sandboxContainment")?;
    // Several hub addresses (issue 14): each is checked, one of the two
    // keys only.
    let mut v = spoke_values();
    v["hub"]["url"] = json!("");
    v["hub"]["urls"] = json!(["https://hub-0.example:8443", "hub-1.example:8443"]);
    refused("clawfed-spoke", v, "hub.urls[1]")?;
    let mut v = spoke_values();
    v["hub"]["urls"] = json!(["https://hub-0.example:8443"]);
    refused("clawfed-spoke", v, "hub.url and hub.urls")?;
    let mut v = hub_values();
    v["link"] = json!({ "advertiseUrl": "http://hub-0:8443" });
    refused("clawfed-hub", v, "link.advertiseUrl")?;
    let mut v = hub_values();
    v["image"] = json!({ "digest": "sha256:nothex" });
    refused("clawfed-hub", v, "image.digest")?;
    // The admin API serves TLS, or plain HTTP only when asked for.
    refused("clawfed-hub", json!({}), "api.tls.secretName")?;
    let mut v = hub_values();
    v["api"]["insecure"] = json!(true);
    refused("clawfed-hub", v, "api.insecure")?;
    Ok(())
}

// ============================================== chart == deploy/ manifests

fn rules_of_cluster_roles(docs: &[Value]) -> Result<BTreeMap<String, ClusterRole>> {
    Ok(by_name(of_kind::<ClusterRole>(docs, "ClusterRole")?))
}

/// Compares RBAC objects by name, ignoring labels (the chart adds Helm's).
fn same_rbac(chart_docs: &[Value], plain_docs: &[Value], what: &str) -> Result<()> {
    let strip = |m: &ObjectMeta| (m.name.clone(), m.namespace.clone());
    let (c, p) = (
        rules_of_cluster_roles(chart_docs)?,
        rules_of_cluster_roles(plain_docs)?,
    );
    ensure!(
        c.keys().collect::<Vec<_>>() == p.keys().collect::<Vec<_>>(),
        "{what}: ClusterRoles {:?} vs {:?}",
        c.keys(),
        p.keys()
    );
    for (name, role) in &c {
        let other = &p[name];
        ensure!(
            role.rules == other.rules,
            "{what}: rules of ClusterRole {name}"
        );
        ensure!(
            role.aggregation_rule == other.aggregation_rule,
            "{what}: aggregation of {name}"
        );
        // The aggregation label, which joins a role into the tenant role.
        let agg = |r: &ClusterRole| {
            r.labels()
                .get("clawfed.io/aggregate-to-spoke-tenant")
                .cloned()
        };
        ensure!(
            agg(role) == agg(other),
            "{what}: aggregation label of {name}"
        );
    }
    let roles = |d: &[Value]| -> Result<BTreeMap<String, Role>> {
        Ok(by_name(of_kind::<Role>(d, "Role")?))
    };
    let (c, p) = (roles(chart_docs)?, roles(plain_docs)?);
    ensure!(
        c.keys().collect::<Vec<_>>() == p.keys().collect::<Vec<_>>(),
        "{what}: Roles {:?} vs {:?}",
        c.keys(),
        p.keys()
    );
    for (name, role) in &c {
        ensure!(
            strip(&role.metadata) == strip(&p[name].metadata),
            "{what}: namespace of Role {name}"
        );
        ensure!(role.rules == p[name].rules, "{what}: rules of Role {name}");
    }
    let crbs = |d: &[Value]| -> Result<BTreeMap<String, ClusterRoleBinding>> {
        Ok(by_name(of_kind(d, "ClusterRoleBinding")?))
    };
    let (c, p) = (crbs(chart_docs)?, crbs(plain_docs)?);
    ensure!(
        c.keys().collect::<Vec<_>>() == p.keys().collect::<Vec<_>>(),
        "{what}: ClusterRoleBindings"
    );
    for (name, b) in &c {
        ensure!(
            b.role_ref == p[name].role_ref && b.subjects == p[name].subjects,
            "{what}: ClusterRoleBinding {name}"
        );
    }
    let rbs = |d: &[Value]| -> Result<BTreeMap<String, RoleBinding>> {
        Ok(by_name(of_kind(d, "RoleBinding")?))
    };
    let (c, p) = (rbs(chart_docs)?, rbs(plain_docs)?);
    ensure!(
        c.keys().collect::<Vec<_>>() == p.keys().collect::<Vec<_>>(),
        "{what}: RoleBindings"
    );
    for (name, b) in &c {
        ensure!(
            strip(&b.metadata) == strip(&p[name].metadata)
                && b.role_ref == p[name].role_ref
                && b.subjects == p[name].subjects,
            "{what}: RoleBinding {name}"
        );
    }
    let sas = |d: &[Value]| -> Vec<(Option<String>, Option<String>)> {
        d.iter()
            .filter(|v| v["kind"] == "ServiceAccount")
            .map(|v| {
                (
                    v["metadata"]["name"].as_str().map(str::to_owned),
                    v["metadata"]["namespace"].as_str().map(str::to_owned),
                )
            })
            .collect()
    };
    ensure!(
        sas(chart_docs) == sas(plain_docs),
        "{what}: ServiceAccounts {:?} vs {:?}",
        sas(chart_docs),
        sas(plain_docs)
    );
    Ok(())
}

/// The charts rendered as release `clawfed-hub` / `clawfed-spoke` in
/// `clawfed-system` carry exactly the RBAC (and admission policy) of
/// deploy/hub and deploy/spoke; provider rights only with `provider: crd`;
/// the ServiceMonitor only when enabled; the image by digest when one is
/// set; the Pods meet Pod Security `restricted`; the hub config is one the
/// hub's loader accepts.
#[tokio::test]
async fn charts_equal_the_plain_manifests_and_render_what_the_values_say() -> Result<()> {
    let Some(bin) = helm_or_skip()? else {
        return Ok(());
    };
    let helm = Helm::new(bin)?;

    // Hub: deploy/hub/rbac.yaml and admission.yaml.
    let hub = documents(&helm.template(
        "clawfed-hub",
        "clawfed-hub",
        "clawfed-system",
        &hub_values(),
    )?)?;
    same_rbac(&hub, &plain("deploy/hub/rbac.yaml")?, "hub")?;
    let hub_policy = |d: &[Value]| -> Result<ValidatingAdmissionPolicy> {
        of_kind::<ValidatingAdmissionPolicy>(d, "ValidatingAdmissionPolicy")?
            .into_iter()
            .next()
            .context("the hub's ValidatingAdmissionPolicy")
    };
    let (c, p) = (
        hub_policy(&hub)?,
        hub_policy(&plain("deploy/hub/admission.yaml")?)?,
    );
    assert_eq!(c.name_any(), p.name_any());
    assert_eq!(
        c.spec, p.spec,
        "the chart's admission policy is deploy/hub's"
    );

    // Spoke, default provider: deploy/spoke/rbac.yaml and nothing of the
    // CRD provider.
    let spoke = documents(&helm.template(
        "clawfed-spoke",
        "clawfed-spoke",
        "clawfed-system",
        &spoke_values(),
    )?)?;
    same_rbac(&spoke, &plain("deploy/spoke/rbac.yaml")?, "spoke")?;
    // With provider crd: rbac.yaml + provider-crd.yaml.
    let mut v = spoke_values();
    v["provider"] = json!("crd");
    v["sandboxContainment"] = json!(["networking", "filesystem", "process"]);
    let crd = documents(&helm.template("clawfed-spoke", "clawfed-spoke", "clawfed-system", &v)?)?;
    let mut both = plain("deploy/spoke/rbac.yaml")?;
    both.extend(plain("deploy/spoke/provider-crd.yaml")?);
    same_rbac(&crd, &both, "spoke provider crd")?;
    let args = container_args(&of_kind::<Deployment>(&crd, "Deployment")?[0]);
    assert!(
        args.contains(&"--sandbox-driver=crd".to_owned()),
        "{args:?}"
    );
    assert!(
        args.contains(&"--sandbox-containment=networking,filesystem,process".to_owned()),
        "{args:?}"
    );

    // The admission policy is deploy/spoke/admission.yaml's.
    let policy = |d: &[Value]| -> Result<ValidatingAdmissionPolicy> {
        of_kind::<ValidatingAdmissionPolicy>(d, "ValidatingAdmissionPolicy")?
            .into_iter()
            .next()
            .context("a ValidatingAdmissionPolicy")
    };
    let (c, p) = (
        policy(&spoke)?,
        policy(&plain("deploy/spoke/admission.yaml")?)?,
    );
    assert_eq!(c.name_any(), p.name_any());
    assert_eq!(
        c.spec, p.spec,
        "the chart's admission policy is deploy/spoke's"
    );
    // With provider crd, also provider-crd.yaml's policy on privileged parts.
    let provider_policy = |d: &[Value], name: &str| -> Result<ValidatingAdmissionPolicy> {
        of_kind::<ValidatingAdmissionPolicy>(d, "ValidatingAdmissionPolicy")?
            .into_iter()
            .find(|p| p.name_any() == name)
            .with_context(|| format!("policy {name}"))
    };
    assert_eq!(
        provider_policy(&crd, "clawfed-spoke-provider-privileged-parts")?.spec,
        provider_policy(
            &plain("deploy/spoke/provider-crd.yaml")?,
            "clawfed-provider-privileged-parts"
        )?
        .spec,
        "the chart's provider policy is deploy/spoke/provider-crd.yaml's"
    );
    ensure!(
        provider_policy(&spoke, "clawfed-spoke-provider-privileged-parts").is_err(),
        "no provider policy without provider crd"
    );

    // No metrics Service and no metrics scrape admitted by default;
    // ServiceMonitor only when enabled; the image by digest.
    let metrics_port = |d: &Value| {
        d["spec"]["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|p| p["name"] == "metrics")
    };
    let metrics_ingress = |docs: &[Value]| -> Vec<Value> {
        docs.iter()
            .filter(|d| d["kind"] == "NetworkPolicy")
            .flat_map(|np| {
                np["spec"]["ingress"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .filter(|rule| rule["ports"][0]["port"] == "metrics")
            .collect()
    };
    for (name, docs) in [("clawfed-hub", &hub), ("clawfed-spoke", &spoke)] {
        assert!(
            !docs.iter().any(|d| d["kind"] == "ServiceMonitor"),
            "{name}: no ServiceMonitor by default"
        );
        assert!(
            !docs
                .iter()
                .any(|d| d["kind"] == "Service" && metrics_port(d)),
            "{name}: no Service exposes metrics by default"
        );
        assert_eq!(
            metrics_ingress(docs),
            Vec::<Value>::new(),
            "{name}: no scrape admitted by default"
        );
        let mut v = if name == "clawfed-hub" {
            hub_values()
        } else {
            spoke_values()
        };
        let prometheus = json!([{
            "namespaceSelector": { "matchLabels": { "kubernetes.io/metadata.name": "monitoring" } },
            "podSelector": { "matchLabels": { "app": "prometheus" } }
        }]);
        v["networkPolicy"]["metricsFrom"] = prometheus.clone();
        v["metrics"] = json!({ "service": { "enabled": true } });
        let on = documents(&helm.template(name, name, "clawfed-system", &v)?)?;
        let rules = metrics_ingress(&on);
        assert_eq!(rules.len(), 1, "{name}: one metrics rule");
        assert_eq!(
            rules[0]["from"], prometheus,
            "{name}: only the selected scrapers"
        );
        let services: Vec<&Value> = on
            .iter()
            .filter(|d| d["kind"] == "Service" && metrics_port(d))
            .collect();
        assert_eq!(
            services.len(),
            1,
            "{name}: the metrics Service when asked for"
        );
        assert_eq!(
            services[0]["metadata"]["name"],
            format!("{name}-metrics"),
            "{name}"
        );
        let mut v = if name == "clawfed-hub" {
            hub_values()
        } else {
            spoke_values()
        };
        v["metrics"] = json!({ "serviceMonitor": { "enabled": true } });
        v["image"] =
            json!({ "repository": "registry.example/clawfed/x", "tag": "1.2.3", "digest": DIGEST });
        let on = documents(&helm.template(name, name, "clawfed-system", &v)?)?;
        let monitors: Vec<&Value> = on
            .iter()
            .filter(|d| d["kind"] == "ServiceMonitor")
            .collect();
        assert_eq!(monitors.len(), 1, "{name}: one ServiceMonitor when enabled");
        assert_eq!(monitors[0]["spec"]["endpoints"][0]["port"], "metrics");
        assert_eq!(
            monitors[0]["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"],
            "metrics",
            "{name}: the monitor selects the metrics Service"
        );
        assert!(
            on.iter()
                .any(|d| d["kind"] == "Service"
                    && d["metadata"]["name"] == format!("{name}-metrics")),
            "{name}: the ServiceMonitor brings its Service"
        );
        let d = &of_kind::<Deployment>(&on, "Deployment")?[0];
        let image = pod_spec(d).containers[0].image.clone();
        assert_eq!(
            image.as_deref(),
            Some(format!("registry.example/clawfed/x@{DIGEST}").as_str()),
            "{name}: the digest wins over the tag"
        );
        assert_restricted(d)?;
    }

    // Air-gapped workloads: the flags, and the pull Secret and CA bundle
    // mounted read-only from the release namespace.
    let mut v = spoke_values();
    v["workloads"] = json!({
        "registryMirrors": ["registry.example=mirror.internal:5000"],
        "pullSecret": "mirror-pull",
        "proxy": "http://198.18.9.9:3128",
        "noProxy": ["models.internal"],
        "caBundleConfigMap": "corp-ca"
    });
    let gapped =
        documents(&helm.template("clawfed-spoke", "clawfed-spoke", "clawfed-system", &v)?)?;
    let d = &of_kind::<Deployment>(&gapped, "Deployment")?[0];
    let args = container_args(d);
    for want in [
        "--registry-mirror=registry.example=mirror.internal:5000",
        "--workload-proxy=http://198.18.9.9:3128",
        "--workload-no-proxy=models.internal",
        "--image-pull-secret-file=/etc/clawfed/workload-pull/.dockerconfigjson",
        "--ca-bundle-file=/etc/clawfed/workload-ca/ca.crt",
    ] {
        assert!(args.contains(&want.to_owned()), "{want}: {args:?}");
    }
    let volumes = pod_spec(d).volumes.clone().unwrap_or_default();
    assert!(
        volumes.iter().any(
            |v| v.secret.as_ref().and_then(|s| s.secret_name.as_deref()) == Some("mirror-pull")
        )
    );
    assert!(
        volumes
            .iter()
            .any(|v| v.config_map.as_ref().map(|c| c.name.as_str()) == Some("corp-ca"))
    );
    assert!(
        !container_args(&of_kind::<Deployment>(&spoke, "Deployment")?[0])
            .iter()
            .any(|a| a.starts_with("--workload-proxy") || a.starts_with("--registry-mirror")),
        "nothing of it by default"
    );

    // A proxy for the hub: its URL in the spoke's own variable, the
    // credentials from a mounted Secret key (never in the URL), egress to
    // its port; without one the spoke dials directly whatever HTTPS_PROXY
    // says.
    let env_of = |d: &Deployment, name: &str| {
        pod_spec(d).containers[0]
            .env
            .iter()
            .flatten()
            .find(|e| e.name == name)
            .and_then(|e| e.value.clone())
    };
    // Several hub addresses, one certificate name for all (issue 14): the
    // spoke's comma list, which the link's address rule accepts.
    let mut v = spoke_values();
    v["hub"] = json!({
        "urls": ["https://198.18.0.7:8443", "https://hub-1.example:8443"],
        "serverName": "clawfed-hub-link.clawfed-system.svc",
        "caPem": spoke_values()["hub"]["caPem"].clone(),
    });
    let listed =
        documents(&helm.template("clawfed-spoke", "clawfed-spoke", "clawfed-system", &v)?)?;
    let listed = &of_kind::<Deployment>(&listed, "Deployment")?[0];
    let urls = env_of(listed, "CLAWFED_HUB_URL").context("CLAWFED_HUB_URL")?;
    assert_eq!(urls, "https://198.18.0.7:8443,https://hub-1.example:8443");
    assert_eq!(
        clawfed_proto::link::address::LinkAddress::parse_list(&urls)?.len(),
        2
    );
    assert_eq!(
        env_of(listed, "CLAWFED_HUB_SERVER_NAME").as_deref(),
        Some("clawfed-hub-link.clawfed-system.svc")
    );
    let single = &of_kind::<Deployment>(&spoke, "Deployment")?[0];
    assert_eq!(
        env_of(single, "CLAWFED_HUB_URL").as_deref(),
        Some("https://clawfed-hub.example:8443")
    );
    assert_eq!(env_of(single, "CLAWFED_HUB_SERVER_NAME"), None);

    // Several hub replicas publish each Pod's own link address for
    // balancing: POD_IP from the downward API, defined before the
    // variable Kubernetes expands it in. One replica publishes nothing.
    let mut v = hub_values();
    v["replicas"] = json!(3);
    let ha = documents(&helm.template("clawfed-hub", "clawfed-hub", "clawfed-system", &v)?)?;
    let ha = &of_kind::<Deployment>(&ha, "Deployment")?[0];
    let env = pod_spec(ha).containers[0].env.clone().unwrap_or_default();
    let at = |name: &str| env.iter().position(|e| e.name == name);
    let ip = at("POD_IP").context("POD_IP")?;
    assert_eq!(
        env[ip]
            .value_from
            .as_ref()
            .and_then(|f| f.field_ref.as_ref())
            .map(|f| f.field_path.as_str()),
        Some("status.podIP")
    );
    let advertise = at("CLAWFED_LINK_ADVERTISE_URL").context("advertised address")?;
    ensure!(ip < advertise, "POD_IP must precede its use: {env:?}");
    let url = env[advertise].value.clone().context("value")?;
    assert_eq!(url, "https://$(POD_IP):8443");
    // As Kubernetes expands it, the hub's config takes it.
    let cm = of_kind::<ConfigMap>(
        &documents(&helm.template("clawfed-hub", "clawfed-hub", "clawfed-system", &v)?)?,
        "ConfigMap",
    )?
    .into_iter()
    .find(|c| c.name_any() == "clawfed-hub")
    .context("hub ConfigMap")?;
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("hub.yaml");
    std::fs::write(
        &path,
        cm.data
            .as_ref()
            .and_then(|d| d.get("hub.yaml"))
            .context("hub.yaml")?,
    )?;
    // Each replica's own tunnel ingress, where the others forward the
    // CONNECTs for the clusters whose sessions it holds (issue 31 item 1).
    let peer = at("CLAWFED_TUNNEL_PEER_URL").context("tunnel peer address")?;
    ensure!(ip < peer, "POD_IP must precede its use: {env:?}");
    let peer_url = env[peer].value.clone().context("value")?;
    assert_eq!(peer_url, "https://$(POD_IP):8444");
    // The Pod's name, kept across container restarts (issue 31 item 14).
    let name = at("POD_NAME").context("POD_NAME")?;
    let instance = at("CLAWFED_INSTANCE_ID").context("instance id")?;
    ensure!(name < instance, "POD_NAME must precede its use: {env:?}");
    assert_eq!(env[instance].value.as_deref(), Some("$(POD_NAME)"));
    let expanded = url.replace("$(POD_IP)", "198.18.0.7");
    let expanded_peer = peer_url.replace("$(POD_IP)", "198.18.0.7");
    let env_map = [
        ("CLAWFED_LINK_ADVERTISE_URL".to_owned(), expanded.clone()),
        ("CLAWFED_TUNNEL_PEER_URL".to_owned(), expanded_peer.clone()),
    ]
    .into_iter()
    .collect();
    let config = clawfed_hub::config::Config::load(Some(&path), &env_map)?;
    assert_eq!(
        config.link.advertise_url.as_deref(),
        Some(expanded.as_str())
    );
    assert_eq!(
        config.tunnel.peer_url.as_deref(),
        Some(expanded_peer.as_str())
    );
    // The ingress certificate names the Pod's address, so a forwarding
    // replica verifies it.
    let bound: std::net::SocketAddr = "0.0.0.0:8444".parse()?;
    let tunnel = config.tunnel_config();
    assert!(
        tunnel
            .certificate_names(bound)
            .contains(&"198.18.0.7".to_owned())
    );
    assert_eq!(
        tunnel.peer_url(bound).as_deref(),
        Some(expanded_peer.as_str())
    );
    assert_eq!(config.link.balance_interval_seconds, 30);
    let one = &of_kind::<Deployment>(&hub, "Deployment")?[0];
    assert_eq!(env_of(one, "CLAWFED_LINK_ADVERTISE_URL"), None);

    let direct = &of_kind::<Deployment>(&spoke, "Deployment")?[0];
    assert_eq!(
        env_of(direct, "CLAWFED_HUB_PROXY").as_deref(),
        Some("direct")
    );
    let mut v = spoke_values();
    v["hub"]["proxy"] = json!({
        "url": "http://proxy.example:3128",
        "credentialsSecret": "hub-proxy",
        "port": 3128,
        "cidrs": ["198.18.0.0/15"],
    });
    let proxied =
        documents(&helm.template("clawfed-spoke", "clawfed-spoke", "clawfed-system", &v)?)?;
    let d = &of_kind::<Deployment>(&proxied, "Deployment")?[0];
    assert_eq!(
        env_of(d, "CLAWFED_HUB_PROXY").as_deref(),
        Some("http://proxy.example:3128")
    );
    let args = pod_spec(d).containers[0].args.clone().unwrap_or_default();
    assert!(
        args.contains(
            &"--hub-proxy-credentials-file=/etc/clawfed/hub-proxy/credentials".to_owned()
        ),
        "{args:?}"
    );
    assert!(
        pod_spec(d).volumes.iter().flatten().any(|v| v
            .secret
            .as_ref()
            .and_then(|s| s.secret_name.as_deref())
            == Some("hub-proxy")),
        "the credentials Secret is mounted"
    );
    let np = proxied
        .iter()
        .find(|d| d["kind"] == "NetworkPolicy")
        .context("spoke NetworkPolicy")?;
    assert!(
        np["spec"]["egress"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|r| r["ports"][0]["port"] == 3128
                && r["to"][0]["ipBlock"]["cidr"] == "198.18.0.0/15"),
        "egress to the proxy: {np}"
    );

    // The hub config the chart renders is one the hub accepts as is.
    let cm = of_kind::<ConfigMap>(&hub, "ConfigMap")?
        .into_iter()
        .find(|c| c.name_any() == "clawfed-hub")
        .context("hub ConfigMap")?;
    let text = cm
        .data
        .as_ref()
        .and_then(|d| d.get("hub.yaml"))
        .context("hub.yaml")?;
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("hub.yaml");
    std::fs::write(&path, text)?;
    let config = clawfed_hub::config::Config::load(Some(&path), &Default::default())
        .with_context(|| format!("the chart's hub.yaml:\n{text}"))?;
    assert_eq!(config.gateway.options.namespace, None);
    assert_eq!(config.gateway.options.namespace_prefix, "oce-gateways");
    assert_eq!(config.gateway.options.hub.namespace, "clawfed-system");
    assert!(
        config.gateway.kubeconfig.is_none(),
        "in-cluster credentials"
    );
    assert!(config.policy.require_immutable_digest);
    let rate = |per_second: u32, burst: u32| clawfed_hub::ratelimit::RequestRate {
        per_second: per_second.try_into().unwrap(),
        burst: Some(burst.try_into().unwrap()),
    };
    assert_eq!(
        config.api.rate_limit,
        clawfed_hub::ratelimit::RateLimitSettings {
            per_subject: Some(rate(50, 100)),
            per_tenant: Some(rate(100, 200)),
        },
        "the chart limits each token and each tenant"
    );
    assert_eq!(
        config.mode,
        clawfed_hub::config::InstallationMode::Production,
        "the chart installs a production hub by default"
    );
    assert!(
        config
            .link
            .server_names
            .contains(&"clawfed-hub-link.clawfed-system.svc".to_owned()),
        "{:?}",
        config.link.server_names
    );
    assert!(
        !text.contains("postgres://"),
        "no database URL in the ConfigMap"
    );
    // The admin API's certificate from the Secret, as a directory mount
    // (renewed files reach the hub), and plain HTTP only when asked for.
    let tls = &config.api.tls;
    let mounted =
        |path: &Option<PathBuf>, dir: &str| path.as_ref().is_some_and(|p| p.starts_with(dir));
    assert!(mounted(&tls.cert_file, "/etc/clawfed/api-tls"), "{tls:?}");
    assert!(mounted(&tls.key_file, "/etc/clawfed/api-tls"), "{tls:?}");
    assert!(!config.api.insecure);
    let hub_pod = pod_spec(&of_kind::<Deployment>(&hub, "Deployment")?[0]).clone();
    assert!(
        hub_pod.volumes.iter().flatten().any(|v| v
            .secret
            .as_ref()
            .and_then(|s| s.secret_name.as_deref())
            == Some("clawfed-hub-api-tls")),
        "the API certificate Secret is mounted"
    );
    assert!(
        hub_pod.containers[0]
            .volume_mounts
            .iter()
            .flatten()
            .all(|m| m.sub_path.is_none()),
        "no subPath mounts: they never see a renewed file"
    );
    let mut v = hub_values();
    v["api"] = json!({ "insecure": true });
    let plain = documents(&helm.template("clawfed-hub", "clawfed-hub", "clawfed-system", &v)?)?;
    let text = of_kind::<ConfigMap>(&plain, "ConfigMap")?
        .into_iter()
        .find(|c| c.name_any() == "clawfed-hub")
        .and_then(|c| c.data?.get("hub.yaml").cloned())
        .context("hub.yaml")?;
    std::fs::write(&path, &text)?;
    let config = clawfed_hub::config::Config::load(Some(&path), &Default::default())?;
    assert!(config.api.insecure && config.api.tls.cert_file.is_none());
    Ok(())
}

/// The schema is migrated by a hook Job before the hub's Pods start or
/// roll, with the migration role's Secret (and the application role to
/// grant); the hub's Pods get only the application role's Secret; both
/// mount PostgreSQL's CA when one is given. Off, no Job.
#[tokio::test]
async fn the_chart_migrates_with_its_own_secret_before_the_hub_starts() -> Result<()> {
    let Some(bin) = helm_or_skip()? else {
        return Ok(());
    };
    let helm = Helm::new(bin)?;
    let mut v = hub_values();
    v["database"] = json!({
        "caSecret": "pg-ca",
        "migration": { "applicationRole": "clawfed_app" }
    });
    let docs = documents(&helm.template("clawfed-hub", "clawfed-hub", "clawfed-system", &v)?)?;
    let jobs = of_kind::<Job>(&docs, "Job")?;
    ensure!(jobs.len() == 1, "one migration Job: {jobs:?}");
    let job = &jobs[0];
    ensure!(
        job.name_any() == "clawfed-hub-migrate",
        "{}",
        job.name_any()
    );
    let hooks = job.annotations().get("helm.sh/hook").cloned();
    ensure!(
        hooks.as_deref() == Some("pre-install,pre-upgrade"),
        "hooks: {hooks:?}"
    );
    let pod = job
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .context("Job pod spec")?;
    ensure!(pod.restart_policy.as_deref() == Some("Never"));
    ensure!(
        pod.automount_service_account_token == Some(false),
        "the Job needs no API access"
    );
    let c = &pod.containers[0];
    ensure!(
        c.args.as_deref() == Some(&["migrate".to_owned()][..]),
        "{:?}",
        c.args
    );
    let env = |c: &k8s_openapi::api::core::v1::Container, name: &str| {
        c.env
            .iter()
            .flatten()
            .find(|e| e.name == name)
            .cloned()
            .with_context(|| format!("env {name}"))
    };
    let secret_of = |e: k8s_openapi::api::core::v1::EnvVar| {
        e.value_from
            .and_then(|f| f.secret_key_ref)
            .map(|r| (r.name, r.key))
    };
    ensure!(
        secret_of(env(c, "CLAWFED_DATABASE_URL")?)
            == Some(("clawfed-hub-database-migration".into(), "url".into())),
        "the Job's URL is the migration role's Secret"
    );
    ensure!(
        env(c, "CLAWFED_DATABASE_APPLICATION_ROLE")?
            .value
            .as_deref()
            == Some("clawfed_app")
    );
    let mounts_ca = |c: &k8s_openapi::api::core::v1::Container| {
        c.volume_mounts
            .iter()
            .flatten()
            .any(|m| m.name == "database-ca" && m.mount_path == "/etc/clawfed/database-ca")
    };
    ensure!(mounts_ca(c), "the Job mounts PostgreSQL's CA");
    let hub = of_kind::<Deployment>(&docs, "Deployment")?
        .into_iter()
        .next()
        .context("Deployment")?;
    let hc = &pod_spec(&hub).containers[0];
    ensure!(
        secret_of(env(hc, "CLAWFED_DATABASE_URL")?)
            == Some(("clawfed-hub-database".into(), "url".into())),
        "the hub's URL is the application role's Secret"
    );
    ensure!(
        !serde_json::to_string(&hub)?.contains("clawfed-hub-database-migration"),
        "the hub's Pods never see the migration role's Secret"
    );
    ensure!(mounts_ca(hc), "the hub mounts PostgreSQL's CA");
    // The Job's Pod is not one of the hub's: Services and the
    // NetworkPolicy select by these labels.
    let selector = hub.spec.selector.match_labels.clone();
    let labels = job
        .spec
        .as_ref()
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    ensure!(
        !selector
            .iter()
            .flatten()
            .all(|(k, v)| labels.get(k) == Some(v)),
        "the hub's selector matches the Job's Pod: {labels:?}"
    );
    ensure!(
        c.security_context == hc.security_context
            && pod.security_context == pod_spec(&hub).security_context,
        "the Job's Pod is as restricted as the hub's"
    );

    v["database"]["migration"]["enabled"] = json!(false);
    let docs = documents(&helm.template("clawfed-hub", "clawfed-hub", "clawfed-system", &v)?)?;
    ensure!(of_kind::<Job>(&docs, "Job")?.is_empty(), "no Job when off");
    Ok(())
}

fn pod_spec(d: &Deployment) -> &k8s_openapi::api::core::v1::PodSpec {
    d.spec.template.spec.as_ref().expect("pod spec")
}

fn container_args(d: &Deployment) -> Vec<String> {
    pod_spec(d).containers[0].args.clone().unwrap_or_default()
}

/// The container meets Pod Security `restricted` by its own settings.
fn assert_restricted(d: &Deployment) -> Result<()> {
    let pod = pod_spec(d);
    let c = &pod.containers[0];
    let sc = c.security_context.as_ref().context("securityContext")?;
    ensure!(sc.run_as_non_root == Some(true), "runAsNonRoot");
    ensure!(
        sc.read_only_root_filesystem == Some(true),
        "readOnlyRootFilesystem"
    );
    ensure!(
        sc.allow_privilege_escalation == Some(false),
        "allowPrivilegeEscalation"
    );
    ensure!(
        sc.capabilities.as_ref().and_then(|c| c.drop.clone()) == Some(vec!["ALL".to_owned()]),
        "drop ALL"
    );
    ensure!(
        sc.seccomp_profile.as_ref().map(|s| s.type_.as_str()) == Some("RuntimeDefault"),
        "seccomp RuntimeDefault"
    );
    Ok(())
}

// =========================================================== dry run

/// Labels a namespace for Pod Security `restricted` (enforced).
async fn restricted(cluster: &TestCluster, ns: &str) -> Result<()> {
    let patch = json!({ "metadata": { "labels": {
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/enforce-version": "latest"
    }}});
    Api::<Namespace>::all(cluster.admin())
        .patch(ns, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

fn kubectl_apply_dry_run(cluster: &TestCluster, manifest: &str) -> Result<String> {
    run(
        Command::new(kubectl()?)
            .arg("--kubeconfig")
            .arg(cluster.kubeconfig_path())
            .args(["apply", "--dry-run=server", "-f", "-"]),
        Some(manifest),
    )
}

/// `helm template` of both charts, applied with `kubectl apply
/// --dry-run=server`: every object passes the real apiserver's validation
/// and admission (Pod Security `restricted` on the namespaces).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rendered_charts_pass_a_server_side_dry_run() -> Result<()> {
    let Some(bin) = helm_or_skip()? else {
        return Ok(());
    };
    let Some(control) = kube_env::cluster_or_skip("control").await? else {
        return Ok(());
    };
    let Some(exec_a) = kube_env::cluster_or_skip("exec-a").await? else {
        return Ok(());
    };
    let helm = Helm::new(bin)?;
    let hub_ns = control.create_namespace("helm-dry-hub").await?;
    let spoke_ns = exec_a.create_namespace("helm-dry-spoke").await?;
    let result = async {
        restricted(&control, &hub_ns.name).await?;
        restricted(&exec_a, &spoke_ns.name).await?;
        let release = format!("dry{}", &uuid::Uuid::new_v4().simple().to_string()[..6]);
        let hub = helm.template(
            "clawfed-hub",
            &release,
            &hub_ns.name,
            &json!({ "replicas": 2, "api": hub_values()["api"].clone() }),
        )?;
        let out = kubectl_apply_dry_run(&control, &hub)?;
        for what in [
            "deployment.apps/",
            "networkpolicy.networking.k8s.io/",
            "clusterrole.rbac.authorization.k8s.io/",
            "clusterrolebinding.rbac.authorization.k8s.io/",
            "validatingadmissionpolicy.admissionregistration.k8s.io/",
            "service/",
            "configmap/",
            "job.batch/",
        ] {
            ensure!(out.contains(what), "dry run applied a {what}: {out}");
        }
        let mut v = spoke_values();
        v["rbac"] = json!({ "aggregationLabel": format!("clawfed.io/aggregate-to-{release}") });
        v["provider"] = json!("crd");
        let spoke = helm.template("clawfed-spoke", &release, &spoke_ns.name, &v)?;
        let out = kubectl_apply_dry_run(&exec_a, &spoke)?;
        for what in [
            "clusterrole.rbac.authorization.k8s.io/",
            "validatingadmissionpolicy.admissionregistration.k8s.io/",
            "deployment.apps/",
        ] {
            ensure!(out.contains(what), "dry run applied a {what}: {out}");
        }
        // Pod Security is enforced on Pods (a Deployment only warns): the
        // charts' Pod templates as Pods pass; with an added capability
        // the same Pod is refused, so the dry run really judges them.
        // The hub's migration Job's Pod too.
        for (cluster, ns, text, kind) in [
            (&control, &hub_ns.name, &hub, "Deployment"),
            (&control, &hub_ns.name, &hub, "Job"),
            (&exec_a, &spoke_ns.name, &spoke, "Deployment"),
        ] {
            let d = documents(text)?
                .into_iter()
                .find(|d| d["kind"] == kind)
                .context(kind)?;
            let name = format!("{release}-dry-{}", kind.to_lowercase());
            let mut pod = json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": { "name": name, "namespace": ns },
                "spec": d["spec"]["template"]["spec"].clone()
            });
            // A dry run creates no ServiceAccount for a Pod to name.
            pod["spec"]["serviceAccountName"] = json!("default");
            let out = kubectl_apply_dry_run(cluster, &serde_yaml_ng::to_string(&pod)?)?;
            ensure!(out.contains("pod/"), "{out}");
            pod["spec"]["containers"][0]["securityContext"] =
                json!({ "capabilities": { "add": ["NET_ADMIN"] } });
            let err = kubectl_apply_dry_run(cluster, &serde_yaml_ng::to_string(&pod)?)
                .expect_err("a Pod with an added capability is refused");
            ensure!(
                format!("{err:#}").contains("restricted"),
                "Pod Security named: {err:#}"
            );
        }
        Ok::<_, anyhow::Error>(())
    }
    .await;
    hub_ns.delete().await?;
    spoke_ns.delete().await?;
    result
}

// ===================================================== install and run

/// What the install test made, removed at the end (also after a failure).
struct Installed {
    helm: Helm,
    control: TestCluster,
    exec_a: TestCluster,
    releases: Vec<(String, String, PathBuf)>,
    namespaces: Vec<(bool, String)>,
    pvs: Vec<(bool, String)>,
}

impl Installed {
    async fn teardown(&mut self) -> Result<()> {
        let mut errors = Vec::new();
        for (release, ns, kubeconfig) in self.releases.drain(..) {
            if let Err(e) = run(
                self.helm
                    .cmd()
                    .args([
                        "uninstall",
                        &release,
                        "--namespace",
                        &ns,
                        "--wait",
                        "--kubeconfig",
                    ])
                    .arg(&kubeconfig),
                None,
            ) {
                errors.push(format!("{e:#}"));
            }
        }
        for (control, ns) in self.namespaces.drain(..) {
            let c = if control { &self.control } else { &self.exec_a };
            match Api::<Namespace>::all(c.admin())
                .delete(&ns, &DeleteParams::background())
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => errors.push(format!("namespace {ns}: {e}")),
            }
        }
        for (control, pv) in self.pvs.drain(..) {
            let c = if control { &self.control } else { &self.exec_a };
            let _ = Api::<PersistentVolume>::all(c.admin())
                .delete(&pv, &DeleteParams::background())
                .await;
        }
        ensure!(errors.is_empty(), "teardown: {errors:?}");
        Ok(())
    }
}

/// Drops null members (Helm treats a null value as "delete this key").
fn strip_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, x| !x.is_null());
            m.values_mut().for_each(strip_nulls);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}

/// `kubectl auth can-i VERB RESOURCE [-n NS] --as SA`: true for yes.
fn can_i(cluster: &TestCluster, sa: &str, args: &[&str]) -> Result<bool> {
    let out = Command::new(kubectl()?)
        .arg("--kubeconfig")
        .arg(cluster.kubeconfig_path())
        .args(["auth", "can-i"])
        .args(args)
        .arg(format!("--as={sa}"))
        .output()?;
    let answer = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    match answer.as_str() {
        "yes" => Ok(true),
        "no" => Ok(false),
        _ => bail!(
            "kubectl auth can-i {args:?}: {answer} {}",
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

fn expect_rights(cluster: &TestCluster, sa: &str, cases: &[(bool, &[&str])]) -> Result<()> {
    let mut wrong = Vec::new();
    for (allowed, args) in cases {
        if can_i(cluster, sa, args)? != *allowed {
            wrong.push(format!(
                "{} {}",
                if *allowed {
                    "should be allowed:"
                } else {
                    "should be DENIED:"
                },
                args.join(" ")
            ));
        }
    }
    ensure!(wrong.is_empty(), "{sa} in {}: {wrong:#?}", cluster.name());
    Ok(())
}

async fn secret(
    cluster: &TestCluster,
    ns: &str,
    name: &str,
    data: &[(&str, Vec<u8>)],
) -> Result<()> {
    let s = Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(ns.to_owned()),
            ..Default::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| ((*k).to_owned(), ByteString(v.clone())))
                .collect(),
        ),
        ..Default::default()
    };
    Api::<Secret>::namespaced(cluster.admin(), ns)
        .create(&PostParams::default(), &s)
        .await?;
    Ok(())
}

/// Waits for `helm`'s Deployment to have its Pods Ready (kwok runs them;
/// Pod Security `restricted` admitted them).
async fn deployment_ready(
    cluster: &TestCluster,
    ns: &str,
    name: &str,
    replicas: i32,
) -> Result<()> {
    let api = Api::<Deployment>::namespaced(cluster.admin(), ns);
    until(WAIT, &format!("{ns}/{name} ready"), || async {
        let d = api.get(name).await?;
        let ready = d
            .status
            .as_ref()
            .and_then(|s| s.ready_replicas)
            .unwrap_or(0);
        Ok((ready == replicas).then_some(()))
    })
    .await
}

/// The charts installed with `helm install` into `control` (hub) and
/// `exec-a` (spoke); the hub and spoke processes run outside the clusters
/// with the charts' ServiceAccount tokens and the charts' own config and
/// arguments; a deploy reaches `active`; `kubectl auth can-i --as` allows
/// what they need and denies the rest; `helm uninstall` removes the
/// charts' cluster-wide objects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn installed_charts_run_the_pipeline_with_exactly_their_rights() -> Result<()> {
    let Some(bin) = helm_or_skip()? else {
        return Ok(());
    };
    let Some(_) = kube_env::cluster_or_skip("control").await? else {
        return Ok(());
    };
    let Some(exec_a) = kube_env::cluster_or_skip("exec-a").await? else {
        return Ok(());
    };
    clawfed_tests::link::init_test_logging();
    // The edge Gateway, StorageClass and CRDs the Gateway room uses.
    let control = control_env::control().await?;
    let mut installed = Installed {
        helm: Helm::new(bin)?,
        control: control.clone(),
        exec_a: exec_a.clone(),
        releases: Vec::new(),
        namespaces: Vec::new(),
        pvs: Vec::new(),
    };
    let result = install_and_run(&mut installed).await;
    let down = installed.teardown().await;
    result?;
    down
}

async fn install_and_run(it: &mut Installed) -> Result<()> {
    let (control, exec_a) = (it.control.clone(), it.exec_a.clone());
    let id = &uuid::Uuid::new_v4().simple().to_string()[..6];
    let release = format!("h{id}");
    let dir = tempfile::tempdir()?;
    let logs = dir.path().join("logs");
    std::fs::create_dir_all(&logs)?;

    // ---- hub chart into control
    let hub_ns = control.create_namespace("helm-hub").await?.name;
    it.namespaces.push((true, hub_ns.clone()));
    restricted(&control, &hub_ns).await?;
    let db = db::postgres().await;
    // One role here: the migration Job's Secret names the same URL.
    for name in ["clawfed-hub-database", "clawfed-hub-database-migration"] {
        secret(
            &control,
            &hub_ns,
            name,
            &[("url", db.url.clone().into_bytes())],
        )
        .await?;
    }
    let ca_dir = dir.path().join("ca");
    clawfed_hub::link::ca::CertificateAuthority::load_or_create(&ca_dir)?;
    let (ca_crt, ca_key) = (
        std::fs::read(ca_dir.join("ca.crt"))?,
        std::fs::read(ca_dir.join("ca.key"))?,
    );
    secret(
        &control,
        &hub_ns,
        "clawfed-hub-link-ca",
        &[("ca.crt", ca_crt.clone()), ("ca.key", ca_key)],
    )
    .await?;
    // The admin API's certificate, as cert-manager would keep it: a
    // kubernetes.io/tls Secret, signed by a CA the CLI and this test trust.
    let api_ca_key = rcgen::KeyPair::generate()?;
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let api_ca_cert = ca_params.self_signed(&api_ca_key)?;
    let api_ca = rcgen::Issuer::new(ca_params, api_ca_key);
    let api_key = rcgen::KeyPair::generate()?;
    let api_cert = rcgen::CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()])?
        .signed_by(&api_key, &api_ca)?;
    let (api_crt_file, api_key_file) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    std::fs::write(&api_crt_file, api_cert.pem())?;
    std::fs::write(&api_key_file, api_key.serialize_pem())?;
    let api_tls = Secret {
        metadata: ObjectMeta {
            name: Some("clawfed-hub-api-tls".into()),
            namespace: Some(hub_ns.clone()),
            ..Default::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(BTreeMap::from([
            (
                "tls.crt".to_owned(),
                ByteString(api_cert.pem().into_bytes()),
            ),
            (
                "tls.key".to_owned(),
                ByteString(api_key.serialize_pem().into_bytes()),
            ),
        ])),
        ..Default::default()
    };
    Api::<Secret>::namespaced(control.admin(), &hub_ns)
        .create(&PostParams::default(), &api_tls)
        .await?;
    let key: Vec<u8> = (0..32).map(|_| rand::random::<u8>()).collect();
    let key_file = dir.path().join("secrets.key");
    std::fs::write(&key_file, &key)?;
    secret(
        &control,
        &hub_ns,
        "clawfed-hub-secrets-key",
        &[("key", key)],
    )
    .await?;

    let mut gw_options = serde_json::to_value(control_env::gateway_config())?;
    strip_nulls(&mut gw_options);
    gw_options
        .as_object_mut()
        .context("gateway options")?
        .remove("namespace");
    let hub_values = json!({
        "replicas": 2,
        "image": { "digest": DIGEST },
        "api": hub_values()["api"].clone(),
        "nodeSelector": { "type": "kwok" },
        "link": { "serverNames": ["127.0.0.1", "localhost"], "heartbeatSeconds": 1 },
        "gateway": { "options": gw_options },
        "config": {
            "policy": hub_values()["config"]["policy"].clone(),
            "pipeline": { "readyDeadlineSeconds": 60, "pathProbe": false, "startupStatus": false },
            "worker": { "leaseSeconds": 2, "pollIntervalMs": 20, "backoffBaseMs": 20, "backoffCapMs": 500 }
        }
    });
    let values = it.helm.values_file("hub-install", &hub_values)?;
    let out = run(
        it.helm
            .cmd()
            .args(["install", &release])
            .arg(chart("clawfed-hub"))
            .args([
                "--namespace",
                &hub_ns,
                "--wait",
                "--timeout",
                "2m",
                "--values",
            ])
            .arg(&values)
            .arg("--kubeconfig")
            .arg(control.kubeconfig_path()),
        None,
    )?;
    it.releases.push((
        release.clone(),
        hub_ns.clone(),
        control.kubeconfig_path().to_owned(),
    ));
    ensure!(out.contains("STATUS: deployed"), "{out}");
    let hub_full = format!("{release}-clawfed-hub");
    // Pod Security `restricted` admitted both replicas' Pods.
    deployment_ready(&control, &hub_ns, &hub_full, 2).await?;

    // ---- the hub process: the chart's config, as the chart's ServiceAccount
    let hub_kubeconfig = dir.path().join("hub.kubeconfig");
    control_env::write_service_account_kubeconfig(
        &control,
        &hub_ns,
        &hub_full,
        3600,
        &hub_kubeconfig,
    )
    .await?;
    let cm = Api::<ConfigMap>::namespaced(control.admin(), &hub_ns)
        .get(&hub_full)
        .await?;
    let mut config: Value = serde_yaml_ng::from_str(
        cm.data
            .as_ref()
            .and_then(|d| d.get("hub.yaml"))
            .context("hub.yaml")?,
    )?;
    // Only what differs outside a Pod: loopback listeners, the files the
    // Pod mounts from the Secrets, the kubeconfig instead of in-cluster
    // credentials.
    // Port 0: the bound addresses are read off the "listening" line.
    config["api"]["restAddr"] = json!("127.0.0.1:0");
    config["api"]["grpcAddr"] = json!("127.0.0.1:0");
    config["api"]["metricsAddr"] = json!("127.0.0.1:0");
    config["link"]["addr"] = json!("127.0.0.1:0");
    config["link"]["caDir"] = json!(ca_dir);
    config["tunnel"]["addr"] = json!("127.0.0.1:0");
    config["secrets"]["keyFile"] = json!(key_file);
    config["api"]["tls"]["certFile"] = json!(api_crt_file);
    config["api"]["tls"]["keyFile"] = json!(api_key_file);
    config["gateway"]["kubeconfig"] = json!(hub_kubeconfig);
    let config_path = dir.path().join("hub.yaml");
    std::fs::write(&config_path, serde_yaml_ng::to_string(&config)?)?;
    let mut c = Command::new(bin("clawfed-hub")?);
    for (k, _) in std::env::vars() {
        if k.starts_with("CLAWFED_") || k == "KUBECONFIG" {
            c.env_remove(k);
        }
    }
    // As the chart's Deployment does: the URL from the environment.
    c.env("CLAWFED_DATABASE_URL", &db.url)
        .arg("--config")
        .arg(&config_path)
        .arg("serve");
    let mut hub = Proc::spawn("hub", &mut c, &logs)?;
    let listening = hub.hub_listening(Duration::from_secs(60)).await?;
    let (rest_url, link_url) = (listening.field("rest")?, listening.field("link")?);
    let root = mint(
        db.store.as_ref(),
        "root",
        None,
        TokenRole::InstallationAdmin,
    )
    .await;
    // Over TLS, trusting only the API's CA (as `clawfed --ca-file`).
    let api_ca_file = dir.path().join("api-ca.pem");
    std::fs::write(&api_ca_file, api_ca_cert.pem())?;
    let rest = HubClient::with_tls(
        &rest_url,
        Some(root),
        TlsOptions {
            ca_file: Some(api_ca_file),
            ..TlsOptions::default()
        },
    )?;

    // ---- spoke chart into exec-a
    let cluster_name = format!("exec-a-{id}");
    let spoke_ns = exec_a.create_namespace("helm-spoke").await?.name;
    it.namespaces.push((false, spoke_ns.clone()));
    restricted(&exec_a, &spoke_ns).await?;
    let created: Value = rest
        .call(
            Method::POST,
            &format!("/clusters/{cluster_name}/bootstrap-tokens"),
            Some(json!({ "reenroll": false })),
        )
        .await?;
    let bootstrap = created["token"]
        .as_str()
        .context("bootstrap token")?
        .to_owned();
    secret(
        &exec_a,
        &spoke_ns,
        "clawfed-spoke-bootstrap",
        &[("token", bootstrap.clone().into_bytes())],
    )
    .await?;
    let spoke_values = json!({
        "clusterName": cluster_name,
        "image": { "digest": DIGEST },
        "nodeSelector": { "type": "kwok" },
        "hub": { "url": link_url, "caPem": String::from_utf8(ca_crt)? },
        // Its own aggregation label: the tenant role takes in this release's
        // rules only (other spokes' roles live in the same cluster).
        "rbac": { "aggregationLabel": format!("clawfed.io/aggregate-to-{release}") }
    });
    let values = it.helm.values_file("spoke-install", &spoke_values)?;
    let out = run(
        it.helm
            .cmd()
            .args(["install", &release])
            .arg(chart("clawfed-spoke"))
            .args([
                "--namespace",
                &spoke_ns,
                "--wait",
                "--timeout",
                "2m",
                "--values",
            ])
            .arg(&values)
            .arg("--kubeconfig")
            .arg(exec_a.kubeconfig_path()),
        None,
    )?;
    it.releases.push((
        release.clone(),
        spoke_ns.clone(),
        exec_a.kubeconfig_path().to_owned(),
    ));
    ensure!(out.contains("STATUS: deployed"), "{out}");
    let spoke_full = format!("{release}-clawfed-spoke");
    deployment_ready(&exec_a, &spoke_ns, &spoke_full, 1).await?;
    let tenant_role = format!("{spoke_full}-tenant");
    // The aggregated tenant role has the base rules (the controller-manager
    // fills them in).
    until(WAIT, "tenant role aggregated", || async {
        let r = Api::<ClusterRole>::all(exec_a.admin())
            .get(&tenant_role)
            .await?;
        Ok(r.rules.is_some_and(|r| !r.is_empty()).then_some(()))
    })
    .await?;

    // ---- the spoke process: the chart's Deployment arguments and
    // environment, as the chart's ServiceAccount
    let deployment = Api::<Deployment>::namespaced(exec_a.admin(), &spoke_ns)
        .get(&spoke_full)
        .await?;
    let container = &pod_spec(&deployment).containers[0];
    let spoke_kubeconfig = dir.path().join("spoke.kubeconfig");
    control_env::write_service_account_kubeconfig(
        &exec_a,
        &spoke_ns,
        &spoke_full,
        3600,
        &spoke_kubeconfig,
    )
    .await?;
    let ca_file = dir.path().join("hub-ca.crt");
    std::fs::write(
        &ca_file,
        String::from_utf8(std::fs::read(ca_dir.join("ca.crt"))?)?,
    )?;
    let token_file = dir.path().join("bootstrap-token");
    std::fs::write(&token_file, &bootstrap)?;
    let mut c = Command::new(bin("clawfed-spoke")?);
    for (k, _) in std::env::vars() {
        if k.starts_with("CLAWFED_") || k == "KUBECONFIG" {
            c.env_remove(k);
        }
    }
    for e in container.env.iter().flatten() {
        c.env(&e.name, e.value.as_deref().context("env value")?);
    }
    for arg in container.args.iter().flatten() {
        // The Pod's mounts, as local files; metrics on loopback.
        let arg = match arg.split_once('=') {
            Some(("--ca-file", _)) => format!("--ca-file={}", ca_file.display()),
            Some(("--bootstrap-token-file", _)) => {
                format!("--bootstrap-token-file={}", token_file.display())
            }
            Some(("--metrics-addr", _)) => "--metrics-addr=127.0.0.1:0".to_owned(),
            _ => arg.clone(),
        };
        c.arg(arg);
    }
    c.arg("--kubeconfig")
        .arg(&spoke_kubeconfig)
        .args(["--backoff-max-seconds", "1"]);
    let mut spoke = Proc::spawn("spoke", &mut c, &logs)?;

    let cluster = rest
        .wait_online(&cluster_name, WAIT)
        .await
        .with_context(|| format!("spoke log:\n{}", Proc::text(&spoke.stderr)))?;
    assert_eq!(cluster.name, cluster_name);
    // The identity lives in the chart's Secret, written by the spoke.
    let identity = Api::<Secret>::namespaced(exec_a.admin(), &spoke_ns)
        .get(&format!("{spoke_full}-identity"))
        .await
        .context("the spoke's identity Secret")?;
    assert!(
        identity
            .managed_fields()
            .iter()
            .any(|f| f.manager.as_deref() == Some("clawfed-spoke")),
        "written by the spoke"
    );

    // ---- deploy → active, with exactly the charts' rights
    let tenant = format!("t{id}");
    let ns: clawfed_hub::model::Namespace = rest.create_namespace(&tenant).await?;
    it.namespaces.push((false, ns.data_plane_namespace.clone()));
    // The tenant's Gateway namespace, which the hub creates.
    let gw_ns = control_env::gateway_ns(&ns.id);
    it.namespaces.push((true, gw_ns.clone()));
    let agent: Agent = rest
        .call(
            Method::POST,
            &format!("/namespaces/{tenant}/agents"),
            Some(json!({
                "name": format!("a{id}"),
                "spec": {
                    "harnessKind": "dedicated-codex",
                    "image": format!("ghcr.io/openclaw/openclaw@{DIGEST}"),
                    "gatewayImage": format!("registry.invalid/openclaw-gateway@{DIGEST}"),
                    "placement": { "cluster": cluster_name },
                    "requirementLabels": { "example.com/pool": "general" }
                }
            })),
        )
        .await?;
    let name = agent.name.clone();
    it.pvs.push((
        true,
        control_env::pre_bound_volume(
            &control.admin(),
            &format!("helm-gw-{name}"),
            Some(STORAGE_CLASS),
            &gw_ns,
            &format!("{name}-gateway-data"),
        )
        .await?,
    ));
    let _: AgentRevision = rest
        .call(
            Method::POST,
            &format!("/namespaces/{tenant}/agents/{name}/deploy"),
            None,
        )
        .await?;
    let r1: AgentRevision = until(WAIT, "revision 1 active", || async {
        let r: AgentRevision = rest
            .call(
                Method::GET,
                &format!("/namespaces/{tenant}/agents/{name}/revisions/1"),
                None,
            )
            .await?;
        Ok(matches!(r.phase, RevisionPhase::Active | RevisionPhase::Failed).then_some(r))
    })
    .await
    .with_context(|| {
        format!(
            "hub log:\n{}\nspoke log:\n{}",
            Proc::text(&hub.stderr),
            Proc::text(&spoke.stderr)
        )
    })?;
    ensure!(
        r1.phase == RevisionPhase::Active,
        "revision 1 is {:?}: {:?}",
        r1.phase,
        r1.reason
    );
    // The Gateway in the tenant's Gateway namespace (made by the hub as
    // the chart's ServiceAccount, Pod Security restricted, the chart's
    // runtime role bound there to it), the Harness in exec-a, the spoke's
    // binding of the chart's tenant role to the chart's ServiceAccount.
    Api::<Deployment>::namespaced(control.admin(), &gw_ns)
        .get(&format!("{name}-gateway"))
        .await
        .context("Gateway Deployment in the tenant's Gateway namespace")?;
    let gw = Api::<Namespace>::all(control.admin()).get(&gw_ns).await?;
    assert_eq!(
        gw.labels()
            .get("pod-security.kubernetes.io/enforce")
            .map(String::as_str),
        Some("restricted")
    );
    let hub_binding = Api::<RoleBinding>::namespaced(control.admin(), &gw_ns)
        .get(&hub_full)
        .await?;
    assert_eq!(
        hub_binding.role_ref.name,
        format!("{hub_full}-gateway-runtime")
    );
    assert_eq!(
        hub_binding
            .subjects
            .as_ref()
            .map(|s| (s[0].name.clone(), s[0].namespace.clone())),
        Some((hub_full.clone(), Some(hub_ns.clone())))
    );
    Api::<Deployment>::namespaced(exec_a.admin(), &ns.data_plane_namespace)
        .get(&format!("{name}-r1-harness"))
        .await
        .context("Harness Deployment")?;
    let binding = Api::<RoleBinding>::namespaced(exec_a.admin(), &ns.data_plane_namespace)
        .get("clawfed-spoke")
        .await?;
    assert_eq!(binding.role_ref.name, tenant_role);
    assert_eq!(
        binding
            .subjects
            .as_ref()
            .map(|s| (s[0].name.clone(), s[0].namespace.clone())),
        Some((spoke_full.clone(), Some(spoke_ns.clone())))
    );

    // ---- kubectl auth can-i --as: needed allowed, the rest denied
    let hub_sa = format!("system:serviceaccount:{hub_ns}:{hub_full}");
    let g = gw_ns.as_str();
    let hub_runtime_bind =
        format!("clusterroles.rbac.authorization.k8s.io/{hub_full}-gateway-runtime");
    expect_rights(
        &control,
        &hub_sa,
        &[
            (true, &["create", "deployments.apps", "-n", g]),
            (
                true,
                &["patch", "httproutes.gateway.networking.k8s.io", "-n", g],
            ),
            (true, &["create", "secrets", "-n", g]),
            (true, &["get", "pods", "--subresource=proxy", "-n", g]),
            // The apiserver judges a Namespace GET in that namespace.
            (true, &["get", &format!("namespaces/{g}"), "-n", g]),
            (
                true,
                &["create", "selfsubjectaccessreviews.authorization.k8s.io"],
            ),
            // Transport Secrets are write-only for the hub.
            (false, &["get", "secrets", "-n", g]),
            (false, &["list", "secrets", "-n", g]),
            (false, &["get", "secrets", "-n", &hub_ns]),
            (false, &["get", "secrets", "-n", "kube-system"]),
            (false, &["list", "secrets", "--all-namespaces"]),
            (false, &["create", "deployments.apps", "-n", "kube-system"]),
            (false, &["create", "deployments.apps", "-n", &hub_ns]),
            // Cluster-wide, narrowed by the admission policy to the
            // tenants' Gateway namespaces (gateway.rs tests the denials).
            (true, &["create", "namespaces"]),
            (
                true,
                &["create", "rolebindings.rbac.authorization.k8s.io", "-n", g],
            ),
            (true, &["bind", &hub_runtime_bind]),
            (
                false,
                &[
                    "bind",
                    "clusterroles.rbac.authorization.k8s.io/cluster-admin",
                ],
            ),
            (false, &["get", "nodes"]),
            (false, &["create", "pods", "--subresource=exec", "-n", g]),
            (
                false,
                &["escalate", "clusterroles.rbac.authorization.k8s.io"],
            ),
            (false, &["bind", "clusterroles.rbac.authorization.k8s.io"]),
            (false, &["update", "deployments.apps", "-n", g]),
        ],
    )?;
    let spoke_sa = format!("system:serviceaccount:{spoke_ns}:{spoke_full}");
    let dp = ns.data_plane_namespace.as_str();
    let identity_secret = format!("secrets/{spoke_full}-identity");
    let tenant_bind = format!("clusterroles.rbac.authorization.k8s.io/{tenant_role}");
    expect_rights(
        &exec_a,
        &spoke_sa,
        &[
            (true, &["create", "namespaces"]),
            (true, &["watch", "namespaces"]),
            (true, &["bind", &tenant_bind]),
            (
                true,
                &["create", "rolebindings.rbac.authorization.k8s.io", "-n", dp],
            ),
            (true, &["patch", &identity_secret, "-n", &spoke_ns]),
            (true, &["get", &identity_secret, "-n", &spoke_ns]),
            // Through the binding it made in the data-plane namespace.
            (true, &["create", "deployments.apps", "-n", dp]),
            (true, &["get", "pods", "--subresource=proxy", "-n", dp]),
            (true, &["list", "endpointslices.discovery.k8s.io", "-n", dp]),
            (false, &["get", "secrets/other", "-n", &spoke_ns]),
            (false, &["list", "secrets", "-n", &spoke_ns]),
            (false, &["delete", &identity_secret, "-n", &spoke_ns]),
            (false, &["get", "secrets", "-n", "kube-system"]),
            (false, &["list", "secrets", "--all-namespaces"]),
            (false, &["create", "deployments.apps", "-n", "kube-system"]),
            // Capacity reports: Nodes and bound Pods, read only.
            (true, &["watch", "nodes"]),
            (true, &["list", "pods", "--all-namespaces"]),
            (false, &["patch", "nodes"]),
            (false, &["get", "pods", "-n", "kube-system"]),
            (false, &["delete", "pods", "-n", "kube-system"]),
            (
                false,
                &[
                    "bind",
                    "clusterroles.rbac.authorization.k8s.io/cluster-admin",
                ],
            ),
            (
                false,
                &["escalate", "clusterroles.rbac.authorization.k8s.io"],
            ),
            (
                false,
                &["create", "clusterrolebindings.rbac.authorization.k8s.io"],
            ),
            (false, &["create", "pods", "--subresource=exec", "-n", dp]),
            (
                false,
                &["create", "pods", "--subresource=portforward", "-n", dp],
            ),
            // The CRD provider's rights only with provider crd.
            (
                false,
                &["create", "customresourcedefinitions.apiextensions.k8s.io"],
            ),
            (
                false,
                &["create", "sandboxharnesses.sandbox.clawfed.io", "-n", dp],
            ),
        ],
    )?;

    spoke.terminate().await;
    hub.terminate().await;
    // ---- uninstall removes the charts' cluster-wide objects
    let releases: Vec<_> = it.releases.drain(..).collect();
    for (rel, ns, kubeconfig) in releases {
        run(
            it.helm
                .cmd()
                .args([
                    "uninstall",
                    &rel,
                    "--namespace",
                    &ns,
                    "--wait",
                    "--kubeconfig",
                ])
                .arg(&kubeconfig),
            None,
        )?;
    }
    for role in [
        spoke_full.clone(),
        tenant_role.clone(),
        format!("{tenant_role}-base"),
    ] {
        ensure!(
            Api::<ClusterRole>::all(exec_a.admin())
                .get_opt(&role)
                .await?
                .is_none(),
            "ClusterRole {role} left after uninstall"
        );
    }
    ensure!(
        Api::<ValidatingAdmissionPolicy>::all(exec_a.admin())
            .get_opt(&format!("{spoke_full}-managed-namespaces"))
            .await?
            .is_none(),
        "admission policy left after uninstall"
    );
    for role in [hub_full.clone(), format!("{hub_full}-gateway-runtime")] {
        ensure!(
            Api::<ClusterRole>::all(control.admin())
                .get_opt(&role)
                .await?
                .is_none(),
            "ClusterRole {role} left after uninstall"
        );
    }
    // The tenant's Gateway namespace is not the chart's: it holds Gateways
    // and goes at the tenant's teardown.
    ensure!(
        Api::<Namespace>::all(control.admin())
            .get_opt(&gw_ns)
            .await?
            .is_some(),
        "the tenant's Gateway namespace kept on uninstall"
    );
    Ok(())
}
