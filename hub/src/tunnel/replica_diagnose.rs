//! `agents diagnose` on any replica: the question goes down the cluster's
//! link session, which one replica holds. A replica without it asks the
//! holder on the holder's tunnel ingress (the address it publishes, the
//! certificate the link CA issued), as CONNECTs are forwarded: a `POST` of
//! [`DiagnoseAsk`] as JSON, signed with the installation's transport key
//! ([`crate::gateway::TransportKey::replica_signature`]), which only
//! replicas hold. The holder asks its spoke and answers with the spoke's
//! `DiagnoseResult` (protobuf), or with why it could not in
//! [`ERROR_HEADER`].

use std::time::Duration;

use bytes::Bytes;
use clawfed_proto::diagnostics::SPOKE_TIMEOUT_MS;
use clawfed_proto::link::v1 as pb;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use prost::Message;
use serde::{Deserialize, Serialize};

use super::forward::Forwarding;
use crate::link::LinkState;
use crate::link::diagnose::DiagnoseError;

/// The path the holder serves the question on.
pub const PATH: &str = "/_clawfed/replica/diagnose";
/// The body's signature (hex).
pub const SIGNATURE_HEADER: &str = "clawfed-replica-signature";
/// Why the holder has no answer: one of the `ERROR_*` values.
pub const ERROR_HEADER: &str = "clawfed-diagnose-error";
const ERROR_OFFLINE: &str = "offline";
const ERROR_CONGESTED: &str = "congested";
const ERROR_TIMEOUT: &str = "timeout";

/// A question is a few ids; anything longer is refused unread.
const MAX_BODY: usize = 4 * 1024;
/// Reaching the holder, beyond the spoke's own time to answer.
const REACH_TIMEOUT: Duration = Duration::from_secs(5);

/// What the asking replica wants diagnosed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiagnoseAsk {
    pub cluster_id: String,
    /// The Harness work target.
    pub target: String,
    pub revision_id: String,
    pub timeout_ms: u64,
}

/// Asks the replica whose ingress is `url` (it holds `ask.cluster_id`'s
/// session) for the spoke's diagnostics.
pub async fn ask_holder(
    link: &LinkState,
    forwarding: &Forwarding,
    url: &str,
    ask: &DiagnoseAsk,
) -> Result<pb::DiagnoseResult, DiagnoseError> {
    let unreachable = |e: &dyn std::fmt::Display| DiagnoseError::HolderUnreachable(e.to_string());
    let body = serde_json::to_vec(ask).map_err(|e| unreachable(&e))?;
    let signature = link
        .transport_key(link.store.as_ref())
        .await
        .map_err(|e| unreachable(&e))?
        .replica_signature(&body);
    let timeout = Duration::from_millis(ask.timeout_ms);
    let asked = async {
        let mut sender = forwarding.dial(url).await.map_err(|e| unreachable(&e))?;
        let request = Request::builder()
            .method(Method::POST)
            .uri(PATH)
            .header(http::header::HOST, "clawfed-replica")
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(SIGNATURE_HEADER, signature)
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| unreachable(&e))?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| unreachable(&e))?;
        let status = response.status();
        let error = response
            .headers()
            .get(ERROR_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let bytes = Limited::new(response.into_body(), 1024 * 1024)
            .collect()
            .await
            .map_err(|e| unreachable(&e))?
            .to_bytes();
        match (status, error.as_deref()) {
            (StatusCode::OK, _) => pb::DiagnoseResult::decode(bytes).map_err(|e| unreachable(&e)),
            (_, Some(ERROR_OFFLINE)) => Err(DiagnoseError::Offline),
            (_, Some(ERROR_CONGESTED)) => Err(DiagnoseError::Congested),
            (_, Some(ERROR_TIMEOUT)) => Err(DiagnoseError::Timeout(timeout)),
            _ => Err(unreachable(&format!(
                "{status}: {}",
                String::from_utf8_lossy(&bytes).trim()
            ))),
        }
    };
    tokio::time::timeout(timeout + REACH_TIMEOUT, asked)
        .await
        .map_err(|_| DiagnoseError::Timeout(timeout))?
}

/// Whether `req` is a replica's question (served by [`serve`]).
pub fn is_question<B>(req: &Request<B>) -> bool {
    req.uri().path() == PATH
}

/// Answers another replica's question with this replica's session.
pub async fn serve(link: &LinkState, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let refuse = |status: StatusCode, error: Option<&'static str>, message: String| {
        let mut resp = Response::new(Full::new(Bytes::from(message + "\n")));
        *resp.status_mut() = status;
        if let Some(error) = error {
            resp.headers_mut()
                .insert(ERROR_HEADER, http::HeaderValue::from_static(error));
        }
        resp
    };
    if req.method() != Method::POST {
        return refuse(
            StatusCode::METHOD_NOT_ALLOWED,
            None,
            format!("{PATH} takes POST"),
        );
    }
    let signature = req
        .headers()
        .get(SIGNATURE_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            return refuse(
                StatusCode::BAD_REQUEST,
                None,
                format!("unreadable body: {e}"),
            );
        }
    };
    let key = match link.transport_key(link.store.as_ref()).await {
        Ok(key) => key,
        Err(e) => {
            tracing::warn!(error = %e, "tunnel.replica_diagnose_no_key");
            return refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                None,
                "the transport key is unavailable".into(),
            );
        }
    };
    if !key.verify_replica_signature(&body, &signature) {
        return refuse(
            StatusCode::UNAUTHORIZED,
            None,
            format!("{SIGNATURE_HEADER} does not sign the body with this installation's key"),
        );
    }
    let ask: DiagnoseAsk = match serde_json::from_slice(&body) {
        Ok(ask) => ask,
        Err(e) => return refuse(StatusCode::BAD_REQUEST, None, format!("body: {e}")),
    };
    let timeout = Duration::from_millis(ask.timeout_ms.min(SPOKE_TIMEOUT_MS));
    match link
        .diagnose
        .ask(
            &link.registry,
            &ask.cluster_id,
            &ask.target,
            &ask.revision_id,
            timeout,
        )
        .await
    {
        Ok(result) => {
            let mut resp = Response::new(Full::new(Bytes::from(result.encode_to_vec())));
            resp.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/x-protobuf"),
            );
            resp
        }
        Err(e) => {
            let (status, error) = match e {
                DiagnoseError::Timeout(_) => (StatusCode::GATEWAY_TIMEOUT, ERROR_TIMEOUT),
                DiagnoseError::Congested => (StatusCode::SERVICE_UNAVAILABLE, ERROR_CONGESTED),
                // This replica no longer holds the session.
                DiagnoseError::Offline | DiagnoseError::HolderUnreachable(_) => {
                    (StatusCode::SERVICE_UNAVAILABLE, ERROR_OFFLINE)
                }
            };
            refuse(status, Some(error), e.to_string())
        }
    }
}
