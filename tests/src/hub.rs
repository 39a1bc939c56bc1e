//! An in-process hub on `127.0.0.1:0` over a test store, with tokens and
//! REST/gRPC clients for it.

use std::net::SocketAddr;
use std::sync::Arc;

use clawfed_hub::auth::{self, Role};
use clawfed_hub::config::Config;
use clawfed_hub::gateway::{Gateways, TransportCredentials};
use clawfed_hub::server::{self, Hub};
use clawfed_hub::store::{NewToken, Store};
use clawfed_hub::worker::Handlers;
use clawfed_hub::worker::rollout::GatewayRuntime;
use clawfed_proto::admin::v1::admin_service_client::AdminServiceClient;

use crate::db::TestDb;

/// A running hub for a test.
pub struct TestHub {
    pub hub: Option<Hub>,
    pub db: TestDb,
    pub rest: String,
    pub grpc_addr: SocketAddr,
    pub metrics: String,
    /// An installation-admin token.
    pub root_token: String,
    pub http: reqwest::Client,
    /// The secrets key the hub seals with (shared by hubs on one database).
    pub secrets: Arc<clawfed_hub::secrets::SecretBox>,
    /// The link CA's export directory [`test_config`] made; removed on drop.
    ca_dir: std::path::PathBuf,
}

impl Drop for TestHub {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.ca_dir);
    }
}

/// Which store a test hub runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// A config listening on ephemeral loopback ports, with a fast worker.
pub fn test_config(db_url: &str) -> Config {
    let mut config = Config::default();
    config.database.url = db_url.to_owned();
    config.api.rest_addr = "127.0.0.1:0".parse().unwrap();
    config.api.grpc_addr = "127.0.0.1:0".parse().unwrap();
    config.api.metrics_addr = "127.0.0.1:0".parse().unwrap();
    config.worker.poll_interval_ms = 20;
    config.worker.lease_seconds = 2;
    config.worker.backoff_base_ms = 20;
    config.worker.backoff_cap_ms = 200;
    config.worker.max_attempts = 3;
    config.link.addr = "127.0.0.1:0".parse().unwrap();
    config.link.ca_dir = std::env::temp_dir().join(format!("clawfed-ca-{}", uuid::Uuid::new_v4()));
    // Hubs on one database share the secrets key, as replicas and restarts
    // must: the link CA in the store is sealed with it (issue 14).
    config.secrets.key_file = Some(crate::db::secrets_key_file(db_url));
    config.link.heartbeat_seconds = 1;
    config.tunnel.addr = "127.0.0.1:0".parse().unwrap();
    // Pipeline tests whose Gateway and Harness images are not stand-ins
    // (kwok marks them Ready, nothing runs) cannot pass a data path probe;
    // the data path tests turn it on.
    config.pipeline.path_probe = false;
    // Nor can kwok Pods without a process publish a plugin startup status;
    // the tests that run the Harness stand-in turn it on.
    config.pipeline.startup_status = false;
    // API and link tests drive the store and outbox themselves; pipeline
    // tests turn it on.
    config.pipeline.enabled = false;
    config
}

impl TestHub {
    /// Starts a hub with the built-in work handlers.
    pub async fn start(backend: Backend) -> Self {
        Self::start_with(backend, |_| {}, Handlers::builtin()).await
    }

    /// Starts a hub after `adjust` edits its config, with `handlers`.
    pub async fn start_with(
        backend: Backend,
        adjust: impl FnOnce(&mut Config),
        handlers: Handlers,
    ) -> Self {
        Self::start_with_gateways(backend, adjust, handlers, None).await
    }

    /// As [`Self::start_with`], with Gateways for the pipeline; like the
    /// hub's own, they derive transport tokens with the key in this store.
    pub async fn start_with_gateways(
        backend: Backend,
        adjust: impl FnOnce(&mut Config),
        handlers: Handlers,
        gateways: Option<Gateways>,
    ) -> Self {
        Self::start_with_gateway_runtime(backend, adjust, handlers, gateways, |g| g).await
    }

    /// As [`Self::start_with_gateways`], with the Gateways wrapped by
    /// `wrap` (a test runtime that delays or observes the real one).
    pub async fn start_with_gateway_runtime(
        backend: Backend,
        adjust: impl FnOnce(&mut Config),
        handlers: Handlers,
        gateways: Option<Gateways>,
        wrap: impl FnOnce(Arc<dyn GatewayRuntime>) -> Arc<dyn GatewayRuntime>,
    ) -> Self {
        let db = crate::db::open(backend).await;
        let mut config = test_config(&db.url);
        adjust(&mut config);
        let secrets = Arc::new(
            server::load_secrets_key(&config)
                .await
                .expect("secrets key"),
        );
        let gateways: Option<Arc<dyn GatewayRuntime>> = match gateways {
            Some(g) => {
                let credentials = TransportCredentials::load(db.dyn_store(), &secrets)
                    .await
                    .expect("transport key");
                Some(wrap(Arc::new(g.with_transport(credentials))))
            }
            None => None,
        };
        let hub = server::start_with_parts(&config, db.dyn_store(), handlers, gateways)
            .await
            .expect("start hub");
        let ca_dir = config.link.ca_dir.clone();
        let root_token = mint(db.store.as_ref(), "root", None, Role::InstallationAdmin).await;
        let _ = rustls::crypto::ring::default_provider().install_default();
        Self {
            rest: format!("http://{}", hub.rest_addr),
            grpc_addr: hub.grpc_addr,
            metrics: format!("http://{}", hub.metrics_addr),
            hub: Some(hub),
            db,
            root_token,
            http: reqwest::Client::new(),
            secrets,
            ca_dir,
        }
    }

    /// The hub's store.
    pub fn store(&self) -> Arc<dyn Store> {
        self.db.dyn_store()
    }

    /// Creates a token and returns its secret.
    pub async fn token(&self, name: &str, namespace: Option<&str>, role: Role) -> String {
        mint(self.db.store.as_ref(), name, namespace, role).await
    }

    /// `{rest}/api/v1{path}`.
    /// The hub's `/metrics` text.
    pub async fn scrape_metrics(&self) -> String {
        self.http
            .get(format!("{}/metrics", self.metrics))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// A request to `path` as root: what the helpers below send.
    fn root_request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, self.url(path))
            .bearer_auth(&self.root_token)
    }

    /// GETs `path` as root and returns the JSON answer.
    pub async fn get_root_json(&self, path: &str) -> serde_json::Value {
        let response = self.root_request(reqwest::Method::GET, path).send().await;
        response.expect("send").json().await.expect("json")
    }

    /// POSTs to `path` as root without a body (actions such as revoke).
    pub async fn post_root(&self, path: &str) -> reqwest::Response {
        let request = self.root_request(reqwest::Method::POST, path);
        request.send().await.expect("send")
    }

    /// POSTs `body` to `path` as root.
    pub async fn post_root_json(&self, path: &str, body: &serde_json::Value) -> reqwest::Response {
        let request = self.root_request(reqwest::Method::POST, path).json(body);
        request.send().await.expect("send")
    }

    /// [`Self::post_root_json`] that must succeed: the JSON answer, or the
    /// test fails naming the path, the status and the hub's body.
    pub async fn post_ok(&self, path: &str, body: serde_json::Value) -> serde_json::Value {
        let response = self.post_root_json(path, &body).await;
        let status = response.status();
        let text = response.text().await.expect("body");
        assert!(status.is_success(), "{path}: {status} {text}");
        serde_json::from_str(&text).expect("json")
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}/api/v1{path}", self.rest)
    }

    /// A gRPC admin client.
    pub async fn grpc(&self) -> AdminServiceClient<tonic::transport::Channel> {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", self.grpc_addr))
            .expect("endpoint")
            .connect()
            .await
            .expect("connect gRPC");
        AdminServiceClient::new(channel)
    }

    /// Stops the hub, draining every task.
    pub async fn stop(&mut self) {
        if let Some(hub) = self.hub.take() {
            hub.stop().await;
        }
    }
}

/// `msg` with `authorization: Bearer <token>` metadata: how every gRPC
/// test call authenticates.
pub fn authed<T>(token: &str, msg: T) -> tonic::Request<T> {
    let mut req = tonic::Request::new(msg);
    req.metadata_mut().insert(
        "authorization",
        format!("Bearer {token}").parse().expect("metadata value"),
    );
    req
}

/// A new token of `role` named `name` in `store`: its secret.
pub async fn mint(store: &dyn Store, name: &str, namespace: Option<&str>, role: Role) -> String {
    let minted = auth::mint_token();
    store
        .create_token(&NewToken {
            name: name.to_owned(),
            namespace: namespace.map(str::to_owned),
            role,
            hash: minted.hash,
            expires_at: None,
        })
        .await
        .expect("create token");
    minted.secret
}
