//! The hub's secrets key (what seals Agent credentials at rest) from a
//! Secret of the real control cluster (issue 12 item 1): read with the
//! hub's explicit credentials (`gateway.kubeconfig`, here its own
//! ServiceAccount allowed to `get` that one Secret and nothing else), used
//! for every credential the hub seals; a missing, unreadable or wrong-sized
//! key stops the hub from starting, naming `secrets.keySecret`.
//!
//! Needs the `control` cluster (`e2e/cluster.sh up control`); skipped when
//! it was never started.

use std::collections::BTreeMap;

use anyhow::Result;
use clawfed_hub::secrets::{KeySecretRef, SecretBox, key_id_of};
use clawfed_hub::server;
use clawfed_hub::worker::Handlers;
use clawfed_proto::work::credential::CredentialKind;
use clawfed_tests::control_env::{self, HUB_NS, HUB_SA};
use clawfed_tests::hub::{Backend, TestHub, test_config};
use clawfed_tests::{db, kube_env};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_secrets_key_is_read_from_a_control_cluster_secret() -> Result<()> {
    if kube_env::cluster_or_skip("control").await?.is_none() {
        return Ok(());
    }
    let control = control_env::control().await?;
    let ns = control.create_namespace("secrets-key").await?;
    let result = run(&control, &ns.name).await;
    ns.delete().await?;
    result
}

async fn run(control: &kube_env::TestCluster, ns: &str) -> Result<()> {
    let admin = control.admin();
    let key: Vec<u8> = [uuid::Uuid::new_v4(), uuid::Uuid::new_v4()]
        .iter()
        .flat_map(|u| u.as_bytes().to_vec())
        .collect();
    assert_eq!(key.len(), 32);
    let secret: Secret = serde_json::from_value(json!({
        "metadata": { "name": "hub-key", "namespace": ns },
    }))?;
    let secret = Secret {
        data: Some(BTreeMap::from([
            ("key".to_owned(), ByteString(key.clone())),
            ("short".to_owned(), ByteString(b"too short".to_vec())),
        ])),
        ..secret
    };
    Api::<Secret>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &secret)
        .await?;
    // The hub may get this one Secret, nothing more.
    let role: Role = serde_json::from_value(json!({
        "metadata": { "name": "clawfed-hub-secrets-key", "namespace": ns },
        "rules": [{ "apiGroups": [""], "resources": ["secrets"], "verbs": ["get"],
                    "resourceNames": ["hub-key"] }]
    }))?;
    Api::<Role>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &role)
        .await?;
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": { "name": "clawfed-hub-secrets-key", "namespace": ns },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                     "name": "clawfed-hub-secrets-key" },
        "subjects": [{ "kind": "ServiceAccount", "name": HUB_SA, "namespace": HUB_NS }]
    }))?;
    Api::<RoleBinding>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &binding)
        .await?;
    let dir = tempfile::tempdir()?;
    let kubeconfig = dir.path().join("hub.kubeconfig");
    control_env::write_service_account_kubeconfig(control, HUB_NS, HUB_SA, 600, &kubeconfig)
        .await?;
    let key_ref = |name: &str, key: &str| KeySecretRef {
        namespace: ns.to_owned(),
        name: name.to_owned(),
        key: key.to_owned(),
    };

    // RBAC is eventually consistent: the first start may race the binding.
    let mut hub = None;
    for _ in 0..50 {
        let db = db::sqlite().await;
        let mut config = test_config(&db.url);
        config.gateway.kubeconfig = Some(kubeconfig.clone());
        // The test config names a key file; the Secret replaces it.
        config.secrets.key_file = None;
        config.secrets.key_secret = Some(key_ref("hub-key", "key"));
        match server::start_with_parts(&config, db.dyn_store(), Handlers::builtin(), None).await {
            Ok(h) => {
                h.stop().await;
                hub = Some(());
                break;
            }
            Err(e) if e.to_string().contains("forbidden") => {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
    anyhow::ensure!(hub.is_some(), "the hub never got its key Secret");

    // Credentials are sealed with exactly that key.
    let mut hub = TestHub::start_with(
        Backend::Sqlite,
        |c| {
            c.gateway.kubeconfig = Some(kubeconfig.clone());
            c.secrets.key_file = None;
            c.secrets.key_secret = Some(key_ref("hub-key", "key"));
        },
        Handlers::builtin(),
    )
    .await;
    let http = &hub.http;
    let post = |path: &str, body: serde_json::Value| {
        http.post(hub.url(path))
            .bearer_auth(&hub.root_token)
            .json(&body)
    };
    post("/namespaces", json!({ "name": "team-a" }))
        .send()
        .await?
        .error_for_status()?;
    post(
        "/namespaces/team-a/agents",
        json!({ "name": "bot", "spec": { "harnessKind": "embedded-openclaw", "image": "img:1" } }),
    )
    .send()
    .await?
    .error_for_status()?;
    http.put(hub.url("/namespaces/team-a/agents/bot/credentials/model-api-key"))
        .bearer_auth(&hub.root_token)
        .json(&json!({ "value": "sk-sealed-with-the-secret-key" }))
        .send()
        .await?
        .error_for_status()?;
    let store = hub.store();
    let agent = store.get_agent("team-a", "bot").await?;
    let stored = store.list_agent_credentials(&agent.id).await?;
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].sealed.key_id, key_id_of(&key));
    let opened = SecretBox::from_key(&key, "test")?.open_credential(
        &agent.id,
        CredentialKind::ModelApiKey,
        &stored[0].sealed,
    )?;
    assert_eq!(opened.expose(), "sk-sealed-with-the-secret-key");
    hub.stop().await;

    // Without a usable key the hub does not start, and says why.
    for (name, key, want) in [
        ("absent", "key", "absent"),
        ("hub-key", "nope", "no such key"),
        ("hub-key", "short", "32 bytes"),
    ] {
        let db = db::sqlite().await;
        let mut config = test_config(&db.url);
        config.gateway.kubeconfig = Some(kubeconfig.clone());
        // The test config names a key file; the Secret replaces it.
        config.secrets.key_file = None;
        config.secrets.key_secret = Some(key_ref(name, key));
        let err = server::start_with_parts(&config, db.dyn_store(), Handlers::builtin(), None)
            .await
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains(want), "{name}/{key}: {err:?}");
        assert!(
            err.contains("secrets.keySecret") || err.contains(&format!("Secret {ns}/hub-key")),
            "{name}/{key}: {err:?}"
        );
    }
    Ok(())
}
