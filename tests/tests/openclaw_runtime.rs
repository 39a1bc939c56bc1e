//! The real OpenClaw runtime behind a test Pod: `clawfed-podrunner` runs
//! `openclaw gateway run` (from `e2e/openclaw.sh`'s install) for Pods of
//! image `clawfed.test/openclaw:<version>`, in a network namespace of its
//! own, with the Pod's env, its ConfigMap mounted read-only as the config
//! file and its claim as the state directory; a model stand-in Pod answers
//! its model turns. These tests prove the test environment can run the
//! real thing: a real model turn, the conversation and a workspace file
//! kept on the claim across a Pod replacement, and health answers that
//! only their JSON bodies tell apart from the Control UI.
//!
//! They skip when the clusters were never started (`scripts/test.sh` sets
//! `CLAWFED_REQUIRE_CLUSTERS=1`, so there they fail instead).

use std::net::SocketAddr;

use anyhow::{Context, Result, ensure};
use clawfed_tests::control_env::{delete_volume, pre_bound_dir, pre_bound_volume};
use clawfed_tests::kube_env;
use clawfed_tests::openclaw::{self, PORT};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Secret};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;

fn typed<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
    serde_json::from_value(v).expect("valid object literal")
}

/// The gateway's config: the minimum the runtime needs to start (mode,
/// port, bind, auth), its chat endpoint, the offline switches, and the
/// model stand-in as its provider with the key from the environment.
fn gateway_config(model_url: &str) -> serde_json::Value {
    json!({
        "gateway": {
            "mode": "local", "port": PORT, "bind": "lan",
            "auth": {"mode": "token"},
            "http": {"endpoints": {"chatCompletions": {"enabled": true}}}
        },
        "update": {"checkOnStart": false},
        "models": {
            "catalogRefresh": {"enabled": false},
            "providers": {"standin": {
                "baseUrl": model_url,
                "apiKey": "${CLAWFED_MODEL_API_KEY}",
                "api": "openai-completions",
                "models": [{"id": openclaw::MODEL_ID, "name": openclaw::MODEL_ID}]
            }}
        },
        "agents": {"defaults": {"model": {"primary": format!("standin/{}", openclaw::MODEL_ID)}}}
    })
}

#[tokio::test]
async fn a_real_openclaw_pod_answers_a_model_turn_and_keeps_its_state_on_its_claim() -> Result<()> {
    let Some(c) = kube_env::cluster_or_skip("exec-a").await? else {
        return Ok(());
    };
    let ns = c.create_namespace("openclaw").await?;
    let client = c.admin();
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    let pv_name = format!("oc-state-{}", &suffix[..12]);
    let result = runtime_keeps_state(&client, &ns.name, &suffix, &pv_name).await;
    // Pass or fail, the runtime (about 1.3 GB) does not outlive the test.
    ns.delete().await?;
    delete_volume(&client, &pv_name).await;
    let _ = std::fs::remove_dir_all(pre_bound_dir(&pv_name));
    result
}

async fn runtime_keeps_state(
    client: &kube::Client,
    namespace: &str,
    suffix: &str,
    pv_name: &str,
) -> Result<()> {
    let client = client.clone();
    let token = format!("gw-{}", &suffix[..16]);
    let api_key = format!("sk-standin-{}", &suffix[16..28]);
    let model_url = openclaw::deploy_model(&client, namespace).await?;

    // The state claim, on a host directory the test can read.
    let host_dir = pre_bound_dir(pv_name);
    pre_bound_volume(&client, pv_name, None, namespace, "openclaw-state").await?;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    claims
        .create(
            &PostParams::default(),
            &typed(json!({
                "metadata": {"name": "openclaw-state"},
                "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "",
                         "resources": {"requests": {"storage": "1Gi"}}}
            })),
        )
        .await?;
    Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .create(
            &PostParams::default(),
            &typed(json!({
                "metadata": {"name": "openclaw-config"},
                "data": {"openclaw.json": serde_json::to_string_pretty(&gateway_config(&model_url))?}
            })),
        )
        .await?;
    Api::<Secret>::namespaced(client.clone(), namespace)
        .create(
            &PostParams::default(),
            &typed(json!({
                "metadata": {"name": "openclaw-credentials"},
                "stringData": {"OPENCLAW_GATEWAY_TOKEN": token, "CLAWFED_MODEL_API_KEY": api_key}
            })),
        )
        .await?;
    let env = |name: &str, value: &str| json!({"name": name, "value": value});
    Api::<Deployment>::namespaced(client.clone(), namespace)
        .create(
            &PostParams::default(),
            &typed(json!({
                "metadata": {"name": "openclaw"},
                "spec": {
                    "replicas": 1,
                    "strategy": {"type": "Recreate"},
                    "selector": {"matchLabels": {"app": "openclaw"}},
                    "template": {
                        "metadata": {"labels": {"app": "openclaw"}},
                        "spec": {
                            "terminationGracePeriodSeconds": 5,
                            "containers": [{
                                "name": "openclaw",
                                "image": openclaw::image()?,
                                "ports": [{"name": "gateway", "containerPort": PORT}],
                                "env": [
                                    env("OPENCLAW_CONFIG_PATH", "/etc/openclaw/openclaw.json"),
                                    env("OPENCLAW_CONFIG_READONLY", "1"),
                                    env("OPENCLAW_STATE_DIR", "/var/lib/openclaw/state"),
                                    env("HOME", "/var/lib/openclaw/home"),
                                    env("OPENCLAW_NO_AUTO_UPDATE", "1"),
                                    env("OPENCLAW_DISABLE_BONJOUR", "1")
                                ],
                                "envFrom": [{"secretRef": {"name": "openclaw-credentials"}}],
                                "readinessProbe": {"httpGet": {"path": "/readyz", "port": "gateway"},
                                                   "periodSeconds": 2},
                                "volumeMounts": [
                                    {"name": "config", "mountPath": "/etc/openclaw", "readOnly": true},
                                    {"name": "state", "mountPath": "/var/lib/openclaw"},
                                    {"name": "tmp", "mountPath": "/tmp"}
                                ]
                            }],
                            "volumes": [
                                {"name": "config", "configMap": {"name": "openclaw-config"}},
                                {"name": "state", "persistentVolumeClaim": {"claimName": "openclaw-state"}},
                                {"name": "tmp", "emptyDir": {}}
                            ]
                        }
                    }
                }
            })),
        )
        .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let started = std::time::Instant::now();
    let first = openclaw::ready_pod(&pods, "app=openclaw", None, openclaw::START_WAIT).await?;
    let ready_after = started.elapsed();
    let addr = SocketAddr::from((openclaw::pod_ip(&first)?, PORT));
    println!("openclaw Pod Ready after {ready_after:?} at {addr}");

    // Health: JSON bodies; an unknown path is the Control UI's HTML with 200,
    // so a probe that reads only the status cannot tell them apart.
    let (status, body) = openclaw::get(addr, "/readyz").await?;
    ensure!(status == 200, "readyz: {status} {body}");
    let readyz: serde_json::Value = serde_json::from_str(&body)?;
    assert_eq!(readyz["ready"], true, "{body}");
    let (status, body) = openclaw::get(addr, "/no-such-path").await?;
    assert_eq!(status, 200);
    assert!(
        serde_json::from_str::<serde_json::Value>(&body).is_err(),
        "an unknown path answers HTML, not JSON: {}",
        &body[..body.len().min(200)]
    );

    // A real model turn: the runtime called the model stand-in with the key
    // from the Pod's Secret (the stand-in names its last four characters).
    let t0 = std::time::Instant::now();
    let answer = openclaw::chat(addr, &token, "conv-1", "hello nonce-one").await?;
    println!("first model turn in {:?}: {answer}", t0.elapsed());
    assert!(
        answer.contains("model-standin answer: hello nonce-one"),
        "{answer}"
    );
    assert!(
        answer.contains(&format!("key: {}", &api_key[api_key.len() - 4..])),
        "the managed key reached the model: {answer}"
    );
    let refused = openclaw::chat(addr, "wrong-token", "conv-1", "hi").await;
    assert!(refused.is_err(), "a wrong gateway token is refused");

    // A workspace file written by the runtime's own tool, on the claim.
    let answer = openclaw::chat(
        addr,
        &token,
        "conv-files",
        "write-file notes/kept.txt kept-across-pods",
    )
    .await?;
    println!("write-file turn: {answer}");
    let on_claim = host_dir.join("state/workspace/notes/kept.txt");
    let written = std::fs::read_to_string(&on_claim)
        .with_context(|| format!("{} after the write turn ({answer})", on_claim.display()))?;
    assert_eq!(written.trim(), "kept-across-pods");

    // Replace the Pod: the new process starts from the same claim.
    let first_uid = first.metadata.uid.clone().unwrap_or_default();
    pods.delete(
        first.metadata.name.as_deref().unwrap_or_default(),
        &DeleteParams::default(),
    )
    .await?;
    let second = openclaw::ready_pod(
        &pods,
        "app=openclaw",
        Some(&first_uid),
        openclaw::START_WAIT,
    )
    .await?;
    let addr = SocketAddr::from((openclaw::pod_ip(&second)?, PORT));
    let answer = openclaw::chat(addr, &token, "conv-1", "second turn").await?;
    println!("after the replacement: {answer}");
    assert!(
        answer.contains("history: hello nonce-one"),
        "the conversation survived the Pod: {answer}"
    );
    let answer = openclaw::chat(addr, &token, "conv-files", "read-file notes/kept.txt").await?;
    assert!(
        answer.contains("kept-across-pods"),
        "the workspace file survived the Pod: {answer}"
    );

    Ok(())
}

/// The environment variables of the official provider plugins in the
/// installed runtime's bundled catalog (`dist/official-external-provider-catalog-*.mjs`):
/// a variable of one of them in the runtime's environment makes the runtime
/// install that provider's plugin from npm at start.
fn official_provider_env_vars(
    install: &std::path::Path,
) -> Result<std::collections::BTreeSet<String>> {
    let dist = install.join("app/node_modules/openclaw/dist");
    let pattern = regex::Regex::new(r#""envVars":\s*\[([^\]]*)\]"#)?;
    let name = regex::Regex::new(r#""([A-Za-z0-9_]+)""#)?;
    let mut vars = std::collections::BTreeSet::new();
    let mut catalogs = 0;
    for entry in std::fs::read_dir(&dist).with_context(|| format!("reading {}", dist.display()))? {
        let path = entry?.path();
        let file = path
            .file_name()
            .and_then(|f| f.to_str())
            .unwrap_or_default();
        if !(file.starts_with("official-external-provider-catalog-") && file.ends_with(".mjs")) {
            continue;
        }
        catalogs += 1;
        let text = std::fs::read_to_string(&path)?;
        for list in pattern.captures_iter(&text) {
            vars.extend(name.captures_iter(&list[1]).map(|c| c[1].to_owned()));
        }
    }
    ensure!(
        catalogs > 0,
        "no official provider catalog in {}",
        dist.display()
    );
    ensure!(
        !vars.is_empty(),
        "no envVars in the provider catalog of {}",
        dist.display()
    );
    Ok(vars)
}

/// The runtime installs the official plugin of any provider whose
/// environment variable it finds set (the Meta provider claims
/// `MODEL_API_KEY`): in a cluster without the npm registry each attempt
/// waits out a minute, so the runtime turned ready two minutes late. No
/// variable of the embedded Harness' environment, as the spoke builds it
/// with every managed credential, is one of those.
#[test]
fn no_variable_of_the_harness_environment_is_a_provider_plugins() -> Result<()> {
    use clawfed_proto::work::credential::CredentialKind;
    let out =
        std::process::Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../e2e/openclaw.sh"))
            .arg("--print")
            .output()?;
    ensure!(out.status.success(), "e2e/openclaw.sh --print: {out:?}");
    let install = std::path::PathBuf::from(String::from_utf8(out.stdout)?.trim());
    if !install.join(".complete").is_file() {
        ensure!(
            std::env::var("CLAWFED_REQUIRE_CLUSTERS").as_deref() != Ok("1"),
            "the OpenClaw install {} is missing (e2e/openclaw.sh)",
            install.display()
        );
        eprintln!("skipped: no OpenClaw install at {}", install.display());
        return Ok(());
    }
    let claimed = official_provider_env_vars(&install)?;

    let (tenant, id, dp) = clawfed_tests::spoke_env::tenant_names("envcheck");
    let mut h = clawfed_tests::spoke_env::harness_work(&tenant, &id, &dp, "a1");
    h.runtime_config = Some("{}".into());
    h.credential.0 = CredentialKind::ALL
        .iter()
        .map(|k| (k.secret_key().to_owned(), "x".to_owned()))
        .collect();
    let spec = clawfed_spoke::apply::harness::pod_spec(&h);
    let names: Vec<String> = spec
        .containers
        .iter()
        .flat_map(|c| c.env.iter().flatten().map(|e| e.name.clone()))
        .collect();
    ensure!(
        names
            .iter()
            .any(|n| n == CredentialKind::ModelApiKey.secret_key()),
        "the model key is in the Harness environment: {names:?}"
    );
    let collisions: Vec<&String> = names.iter().filter(|n| claimed.contains(*n)).collect();
    assert!(
        collisions.is_empty(),
        "the Harness environment sets a provider plugin's variable: {collisions:?}"
    );
    Ok(())
}
