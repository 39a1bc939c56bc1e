//! The hub's REST API as one typed client: used by the `clawfed` CLI, the
//! tests and the benches, so every caller speaks to the hub one way.
//!
//! # Layout
//! - `error.rs`: why a request failed (the API's error body, no answer, TLS).
//! - `tls.rs`: the CA to trust and the client certificate for https://.
//! - `events.rs`: the watch API's Server-Sent Events reader.

mod error;
pub mod events;
mod tls;

use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::model::{Agent, AgentRevision, BootstrapTokenCreated, Cluster, DeployRequest, List};
pub use error::ClientError;
use error::api_error;
use events::EventReader;
pub use tls::TlsOptions;

/// What a request to the hub gives.
pub type ClientResult<T> = Result<T, ClientError>;

/// Default `clawfed deploy --retries`: with [`deploy_backoff`] the attempts
/// span at least 23 s, enough for a hub restart.
pub const DEPLOY_RETRIES: usize = 6;

/// Delays between deploy attempts: 0.5 s doubling up to 8 s, each
/// lengthened by a random jitter of up to itself, so many clients retrying
/// after one hub restart do not arrive together.
fn deploy_backoff(retries: usize) -> backon::ExponentialBuilder {
    backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(500))
        .with_max_delay(Duration::from_secs(8))
        .with_factor(2.0)
        .with_jitter()
        .with_max_times(retries)
}

/// A REST client of the hub.
#[derive(Debug, Clone)]
pub struct HubClient {
    http: reqwest::Client,
    /// For event streams: no overall timeout (they last), a connect one.
    watch_http: reqwest::Client,
    server: String,
    token: Option<String>,
    tls: TlsOptions,
    /// Overrides the 30 s bound of each request ([`Self::with_request_timeout`]).
    request_timeout: Option<Duration>,
}

impl HubClient {
    /// A client of the hub at `server` (e.g. `http://127.0.0.1:8080`).
    pub fn new(server: &str, token: Option<String>) -> ClientResult<Self> {
        Self::with_tls(server, token, TlsOptions::default())
    }

    /// A client of the hub at `server` with TLS `tls` (for https://).
    pub fn with_tls(server: &str, token: Option<String>, tls: TlsOptions) -> ClientResult<Self> {
        // One crypto provider for the process (ring); ignore "already set".
        let _ = rustls::crypto::ring::default_provider().install_default();
        let server = server.trim_end_matches('/').to_owned();
        let http = tls.client(
            &server,
            reqwest::Client::builder().timeout(Duration::from_secs(30)),
        )?;
        let watch_http = tls.client(
            &server,
            reqwest::Client::builder().connect_timeout(Duration::from_secs(10)),
        )?;
        Ok(Self {
            http,
            watch_http,
            server,
            token,
            tls,
            request_timeout: None,
        })
    }

    /// The error of a request that got no answer: TLS named as such.
    fn unreachable(&self, source: reqwest::Error) -> ClientError {
        match self.tls.failure(&source) {
            Some(reason) => ClientError::Tls {
                server: self.server.clone(),
                reason,
            },
            None => ClientError::Unreachable {
                server: self.server.clone(),
                source,
            },
        }
    }

    /// Sends `req` with this client's token and request timeout: the
    /// status, headers and body, whatever the status.
    async fn answer(
        &self,
        req: reqwest::RequestBuilder,
    ) -> ClientResult<(
        reqwest::StatusCode,
        reqwest::header::HeaderMap,
        bytes::Bytes,
    )> {
        let req = match &self.token {
            Some(t) => req.bearer_auth(t),
            None => req,
        };
        let req = match self.request_timeout {
            Some(t) => req.timeout(t),
            None => req,
        };
        let response = req.send().await.map_err(|e| self.unreachable(e))?;
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = response
            .bytes()
            .await
            .map_err(|source| ClientError::Unreachable {
                server: self.server.clone(),
                source,
            })?;
        Ok((status, headers, bytes))
    }

    /// Sends `req`: its answer decoded, or the API's error.
    async fn send<T: DeserializeOwned>(&self, req: reqwest::RequestBuilder) -> ClientResult<T> {
        let (status, _, bytes) = self.answer(req).await?;
        if !status.is_success() {
            return Err(api_error(status, &bytes));
        }
        let bytes = if bytes.is_empty() {
            &b"null"[..]
        } else {
            &bytes[..]
        };
        serde_json::from_slice(bytes)
            .map_err(|e| ClientError::Other(format!("unexpected response from the hub: {e}")))
    }

    /// `method path` with an optional JSON body and `Idempotency-Key`:
    /// the status and the body's text whatever the status, for callers
    /// that judge the answer themselves (an expected 409, a retry on 5xx).
    pub async fn exchange(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&serde_json::Value>,
        idempotency_key: Option<&str>,
    ) -> ClientResult<(reqwest::StatusCode, String)> {
        let mut req = self.http.request(method, self.url(path));
        if let Some(b) = body {
            req = req.json(b);
        }
        if let Some(k) = idempotency_key {
            req = req.header("Idempotency-Key", k);
        }
        let (status, _, bytes) = self.answer(req).await?;
        Ok((status, String::from_utf8_lossy(&bytes).into_owned()))
    }

    /// `method` on `path` from the server's root (`/api/v1/...`,
    /// `/openapi.json`) with a raw body (sent as JSON) and extra headers,
    /// for probing the API's edges (malformed bodies, oversized ones,
    /// idempotency keys): the status, headers and body text, whatever the
    /// status.
    pub async fn raw(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Vec<u8>>,
        headers: &[(&str, &str)],
    ) -> ClientResult<(reqwest::StatusCode, reqwest::header::HeaderMap, String)> {
        let mut req = self.http.request(method, format!("{}{path}", self.server));
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        if let Some(body) = body {
            req = req.header("content-type", "application/json").body(body);
        }
        let (status, headers, bytes) = self.answer(req).await?;
        Ok((
            status,
            headers,
            String::from_utf8_lossy(&bytes).into_owned(),
        ))
    }

    /// `method path` with an optional JSON body: the answer decoded, or the
    /// API's error.
    pub async fn call<T: DeserializeOwned>(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> ClientResult<T> {
        let mut req = self.http.request(method, self.url(path));
        if let Some(b) = &body {
            req = req.json(b);
        }
        self.send(req).await
    }

    /// The hub this client talks to (`http://host:port`, no trailing `/`).
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The bearer token this client sends, if any.
    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    /// This client towards another replica of the hub at `server` (same
    /// token and TLS).
    pub fn at(&self, server: &str) -> Self {
        Self {
            server: server.trim_end_matches('/').to_owned(),
            ..self.clone()
        }
    }

    /// This client with another bearer token.
    pub fn with_token(&self, token: &str) -> Self {
        Self {
            token: Some(token.to_owned()),
            ..self.clone()
        }
    }

    /// This client with each request (not event streams) bounded by
    /// `timeout` instead of the default 30 s.
    pub fn with_request_timeout(&self, timeout: Duration) -> Self {
        Self {
            request_timeout: Some(timeout),
            ..self.clone()
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}/api/v1{path}", self.server)
    }

    /// GET a resource.
    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> ClientResult<T> {
        self.send(self.http.get(self.url(path))).await
    }

    /// POST a JSON body.
    pub async fn post<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> ClientResult<T> {
        self.send(self.http.post(self.url(path)).json(body)).await
    }

    /// PUT a JSON body.
    pub async fn put<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> ClientResult<T> {
        self.send(self.http.put(self.url(path)).json(body)).await
    }

    /// DELETE a resource.
    pub async fn delete(&self, path: &str) -> ClientResult<()> {
        self.send::<serde_json::Value>(self.http.delete(self.url(path)))
            .await
            .map(|_| ())
    }

    /// Agent `agent` of tenant `ns`.
    pub async fn agent(&self, ns: &str, agent: &str) -> ClientResult<Agent> {
        self.get(&format!("/namespaces/{ns}/agents/{agent}")).await
    }

    /// Revision `n` of Agent `agent`.
    pub async fn revision(&self, ns: &str, agent: &str, n: i64) -> ClientResult<AgentRevision> {
        self.get(&format!("/namespaces/{ns}/agents/{agent}/revisions/{n}"))
            .await
    }

    /// Every revision of Agent `agent`.
    pub async fn revisions(&self, ns: &str, agent: &str) -> ClientResult<Vec<AgentRevision>> {
        self.get::<List<AgentRevision>>(&format!("/namespaces/{ns}/agents/{agent}/revisions"))
            .await
            .map(|page| page.items)
    }

    /// Deploys Agent `agent`'s current spec (no body, no idempotency key).
    pub async fn deploy_current(&self, ns: &str, agent: &str) -> ClientResult<AgentRevision> {
        self.call(
            reqwest::Method::POST,
            &format!("/namespaces/{ns}/agents/{agent}/deploy"),
            None,
        )
        .await
    }

    /// Execution cluster `name` as the hub sees it.
    pub async fn cluster(&self, name: &str) -> ClientResult<Cluster> {
        self.get(&format!("/clusters/{name}")).await
    }

    /// A one-time bootstrap token enrolling cluster `name` (not a re-enrolment).
    pub async fn bootstrap_token(&self, name: &str) -> ClientResult<String> {
        let created: BootstrapTokenCreated = self
            .post(
                &format!("/clusters/{name}/bootstrap-tokens"),
                &serde_json::json!({ "reenroll": false }),
            )
            .await?;
        Ok(created.token)
    }

    /// Opens the watch stream after `cursor` (see `GET /api/v1/watch`).
    pub async fn watch(&self, cursor: Option<i64>, follow: bool) -> ClientResult<EventReader> {
        let mut query = vec![format!("follow={follow}")];
        if let Some(c) = cursor {
            query.push(format!("cursor={c}"));
        }
        self.open_stream(&format!("/watch?{}", query.join("&")))
            .await
    }

    /// Opens the audit stream (read it with [`EventReader::next_audit`]):
    /// the events after `cursor` (`None`: from now on), of `namespace`
    /// (`None`: every one the token may read).
    pub async fn stream_audit(
        &self,
        namespace: Option<&str>,
        cursor: Option<i64>,
        follow: bool,
    ) -> ClientResult<EventReader> {
        let mut query = vec![format!("follow={follow}")];
        if let Some(c) = cursor {
            query.push(format!("cursor={c}"));
        }
        if let Some(ns) = namespace {
            query.push(format!("namespace={ns}"));
        }
        self.open_stream(&format!("/audit/stream?{}", query.join("&")))
            .await
    }

    /// GETs a `text/event-stream` at `path_and_query`.
    async fn open_stream(&self, path_and_query: &str) -> ClientResult<EventReader> {
        let mut req = self
            .watch_http
            .get(self.url(path_and_query))
            .header("accept", "text/event-stream");
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        let response = req.send().await.map_err(|e| self.unreachable(e))?;
        let status = response.status();
        if !status.is_success() {
            let bytes = response.bytes().await.unwrap_or_default();
            return Err(api_error(status, &bytes));
        }
        Ok(EventReader::new(response))
    }

    /// Deploys with an idempotency key, once.
    pub async fn deploy(
        &self,
        ns: &str,
        agent: &str,
        req: &DeployRequest,
        key: &str,
    ) -> ClientResult<AgentRevision> {
        let path = format!("/namespaces/{ns}/agents/{agent}/deploy");
        self.send(
            self.http
                .post(self.url(&path))
                .header("Idempotency-Key", key)
                .json(req),
        )
        .await
    }

    /// Deploys with `key`, retrying up to `retries` times while the hub
    /// gives no answer. Every attempt carries the same key, so the hub makes
    /// at most one revision however many of them reached it.
    pub async fn deploy_with_retries(
        &self,
        ns: &str,
        agent: &str,
        req: &DeployRequest,
        key: &str,
        retries: usize,
    ) -> ClientResult<AgentRevision> {
        use backon::Retryable;
        let mut attempts = 0;
        let result = (|| {
            attempts += 1;
            self.deploy(ns, agent, req, key)
        })
        .retry(deploy_backoff(retries))
        .sleep(tokio::time::sleep)
        .when(ClientError::is_retryable)
        .notify(|err, delay| {
            eprintln!(
                "deploy: {err}; retrying in {:.1}s with the same Idempotency-Key",
                delay.as_secs_f64()
            );
        })
        .await;
        match result {
            Err(last) if last.is_retryable() => Err(ClientError::GaveUp {
                key: key.to_owned(),
                attempts,
                last: Box::new(last),
            }),
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_is_bounded() {
        use backon::BackoffBuilder;
        let delays: Vec<Duration> = deploy_backoff(DEPLOY_RETRIES).build().collect();
        assert_eq!(delays.len(), DEPLOY_RETRIES);
        let total: Duration = delays.iter().sum();
        // Jitter only lengthens a delay, by at most the delay itself.
        assert!(total >= Duration::from_millis(23_500), "{total:?}");
        assert!(
            delays.iter().all(|d| *d <= Duration::from_secs(16)),
            "{delays:?}"
        );
    }
}
