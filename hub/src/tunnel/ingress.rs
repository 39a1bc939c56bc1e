//! The listener Gateways dial: HTTP/1.1 `CONNECT <harness authority>` with
//! `Proxy-Authorization: Bearer <transport credential>`. A Gateway gets a
//! `200` only once the spoke has connected its Harness; every refusal is a
//! 4xx/5xx with the reason in the `clawfed-tunnel-reason` header and
//! `<reason>: <message>` as the body, and is logged with the agent,
//! revision and cluster (never the credential or a payload).
//!
//! A client that cannot send `CONNECT` (the OpenClaw Codex plugin's
//! WebSocket to its app-server) sends its request to
//! `HARNESS_UPGRADE_PATH/<tenant>/<agent>` instead, with `Authorization:
//! Bearer <the Agent's app-server token>`: it is passed on, as `/` and with
//! that same header (the app-server checks it too), to the Agent's newest
//! serving Harness, and when the Harness answers `101 Switching Protocols`
//! both connections carry bytes from then on, as a CONNECT tunnel does.
//! The token is per Agent, not per revision, because the plugin keys
//! conversations by its connection settings.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clawfed_proto::tunnel::{
    FORWARDED_HEADER, REASON_HEADER, parse_harness_upgrade_path, reason, refusal_status,
};
use clawfed_tunnel::{Counters, pump};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::Refusal;
use super::broker::{Broker, Opened};
use super::forward::Forwarding;
use super::metrics::DirectionLabel;
use super::route::{Route, Routes, route_span};
use crate::link::LinkState;
use crate::link::tls::ingress_server_config;

/// How long a Gateway may take to send its CONNECT request head.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the ingress could not start.
#[derive(Debug, thiserror::Error)]
pub enum IngressError {
    #[error("tunnel ingress cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("tunnel ingress TLS: {0}")]
    Tls(#[from] crate::link::tls::TlsError),
}

/// The running ingress.
#[derive(Debug, Clone)]
pub struct IngressHandle {
    pub addr: SocketAddr,
    /// What Gateways are told to use as their tunnel proxy
    /// (`https://` when the ingress speaks TLS).
    pub url: String,
    /// The CA Gateways verify the ingress with (TLS only).
    pub ca_pem: Option<String>,
    /// Where the other replicas reach this ingress (`TunnelConfig::peer_url`).
    pub peer_url: Option<String>,
}

struct Ingress {
    routes: Routes,
    broker: Arc<Broker>,
    /// Answers other replicas' questions (`replica_diagnose.rs`).
    link: Arc<LinkState>,
    shutdown: CancellationToken,
}

/// Serves the ingress on `listener` (bound by the caller, at the
/// configured address) until `shutdown`.
pub async fn start(
    listener: TcpListener,
    routes: Routes,
    link: Arc<LinkState>,
    replica_id: String,
    shutdown: CancellationToken,
    tasks: &mut JoinSet<()>,
) -> Result<IngressHandle, IngressError> {
    let broker = link.tunnels.clone();
    let config = broker.config().clone();
    let bind = |source| IngressError::Bind {
        addr: config.addr,
        source,
    };
    let addr = listener.local_addr().map_err(bind)?;
    // The certificate names the bound address, so it is issued after the
    // bind (an ephemeral port or a wildcard address is then known).
    let ca = Some(link.ca.clone()).filter(|_| config.tls);
    let tls = match &ca {
        Some(ca) => {
            let server = ingress_server_config(ca, &config.certificate_names(addr))?;
            Some((Arc::new(server), ca.ca_pem().to_owned()))
        }
        None => None,
    };
    let scheme = if tls.is_some() { "https" } else { "http" };
    let url = config
        .advertise_url
        .clone()
        .unwrap_or_else(|| format!("{scheme}://{addr}"));
    // CONNECTs (and the hub's own requests) for clusters whose session
    // another replica holds go there.
    broker.set_forwarding(Arc::new(Forwarding::new(
        routes.store(),
        replica_id,
        config.route_ttl,
        ca.as_ref().map(|ca| ca.ca_der()),
    )?));
    let ingress = Arc::new(Ingress {
        routes,
        broker,
        link,
        shutdown: shutdown.clone(),
    });
    tracing::info!(%addr, %url, tls = tls.is_some(), "tunnel.listening");
    let ca_pem = tls.as_ref().map(|(_, ca)| ca.clone());
    let acceptor = tls.map(|(server, _)| tokio_rustls::TlsAcceptor::from(server));
    tasks.spawn(
        accept_loop(listener, acceptor, ingress)
            .instrument(tracing::info_span!("tunnel.accept", %addr)),
    );
    Ok(IngressHandle {
        addr,
        url,
        ca_pem,
        peer_url: config.peer_url(addr),
    })
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
    ingress: Arc<Ingress>,
) {
    loop {
        let (stream, peer) = tokio::select! {
            _ = ingress.shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors and the like: back off briefly.
                    tracing::warn!(error = %e, "tunnel.accept_failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let ingress = ingress.clone();
        let acceptor = acceptor.clone();
        tokio::spawn(
            async move {
                match acceptor {
                    None => serve_connection(stream, ingress, peer).await,
                    Some(acceptor) => {
                        match tokio::time::timeout(HEADER_TIMEOUT, acceptor.accept(stream)).await {
                            Ok(Ok(tls)) => serve_connection(tls, ingress, peer).await,
                            Ok(Err(e)) => {
                                tracing::debug!(%peer, error = %e, "tunnel.tls_handshake_failed")
                            }
                            Err(_) => tracing::debug!(%peer, "tunnel.tls_handshake_timeout"),
                        }
                    }
                }
            }
            .instrument(tracing::info_span!("tunnel.conn", %peer)),
        );
    }
    tracing::info!("tunnel.stopped");
}

/// Relays a forwarded tunnel: the Gateway's connection (once hyper hands
/// it over) and the holder replica's, both ways until either ends.
async fn relay(req: Request<Incoming>, route: Route, upstream: hyper::upgrade::Upgraded) {
    let gateway = match hyper::upgrade::on(req).await {
        Ok(u) => u,
        Err(e) => {
            tracing::debug!(agent = %route.agent, error = %e, "tunnel.upgrade_failed");
            return;
        }
    };
    let moved =
        tokio::io::copy_bidirectional(&mut TokioIo::new(gateway), &mut TokioIo::new(upstream))
            .await;
    tracing::debug!(agent = %route.agent, cluster = %route.cluster_name, moved = ?moved, "tunnel.forward_closed");
}

/// Serves one Gateway connection (plain or TLS): its CONNECT request, then
/// the tunneled bytes.
async fn serve_connection<IO>(io: IO, ingress: Arc<Ingress>, peer: SocketAddr)
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let service = hyper::service::service_fn(move |req| {
        let ingress = ingress.clone();
        async move { Ok::<_, Infallible>(ingress.handle(req, peer).await) }
    });
    let served = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .serve_connection(TokioIo::new(io), service)
        .with_upgrades()
        .await;
    if let Err(e) = served {
        tracing::debug!(%peer, error = %e, "tunnel.connection_error");
    }
}

fn refuse(r: &Refusal) -> Response<Full<Bytes>> {
    let status = StatusCode::from_u16(refusal_status(r.reason)).unwrap_or(StatusCode::BAD_GATEWAY);
    let mut resp = Response::new(Full::new(Bytes::from(format!("{r}\n"))));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(REASON_HEADER, http::HeaderValue::from_static(r.reason));
    resp
}

/// The bearer token of `Proxy-Authorization`.
fn bearer(req: &Request<Incoming>) -> Option<&str> {
    bearer_of(req, http::header::PROXY_AUTHORIZATION)
}

/// The bearer token of header `name`.
fn bearer_of(req: &Request<Incoming>, name: http::header::HeaderName) -> Option<&str> {
    let value = req.headers().get(name)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

impl Ingress {
    async fn handle(
        self: Arc<Self>,
        req: Request<Incoming>,
        peer: SocketAddr,
    ) -> Response<Full<Bytes>> {
        if super::replica_diagnose::is_question(&req) {
            return super::replica_diagnose::serve(&self.link, req).await;
        }
        let opened = if req.method() != Method::CONNECT
            && let Some((tenant, agent)) = parse_harness_upgrade_path(req.uri().path())
        {
            let (tenant, agent) = (tenant.to_owned(), agent.to_owned());
            self.clone().pass_on(req, &tenant, &agent).await
        } else {
            self.clone()
                .open(req)
                .await
                .map(|()| Response::new(Full::new(Bytes::new())))
        };
        match opened {
            Ok(response) => response,
            Err((r, route)) => {
                self.broker.metrics().failed(r.reason);
                match route {
                    Some(route) => tracing::warn!(
                        %peer,
                        tenant = %route.tenant,
                        agent = %route.agent,
                        revision = route.revision,
                        cluster = %route.cluster_name,
                        reason = r.reason,
                        message = %r.message,
                        "tunnel.refused"
                    ),
                    None => {
                        tracing::warn!(%peer, reason = r.reason, message = %r.message, "tunnel.refused")
                    }
                }
                refuse(&r)
            }
        }
    }

    /// Authorizes and opens the tunnel; on success the connection's bytes
    /// are pumped by a task once hyper hands the connection over.
    async fn open(self: Arc<Self>, req: Request<Incoming>) -> Result<(), (Refusal, Option<Route>)> {
        if req.method() != Method::CONNECT {
            return Err((
                Refusal::new(
                    reason::BAD_REQUEST,
                    "only CONNECT <harness authority> is served here (the Gateway's tunnel proxy)",
                ),
                None,
            ));
        }
        let Some(authority) = req.uri().authority().map(|a| a.as_str().to_owned()) else {
            return Err((
                Refusal::new(reason::BAD_REQUEST, "CONNECT needs a host:port authority"),
                None,
            ));
        };
        let Some(token) = bearer(&req) else {
            return Err((
                Refusal::new(
                    reason::UNAUTHENTICATED,
                    "Proxy-Authorization: Bearer <transport credential> is required",
                ),
                None,
            ));
        };
        let route = self
            .routes
            .resolve(token, &authority)
            .await
            .map_err(|r| (r, None))?;
        // Held by another replica: forwarded there, once.
        if !req.headers().contains_key(FORWARDED_HEADER)
            && let Some(upstream) = self.broker.through_holder(&route, token).await
        {
            let upstream = upstream.map_err(|r| (r, Some(route.clone())))?;
            let span = route_span!("tunnel.relay", route);
            tokio::spawn(relay(req, route, upstream).instrument(span));
            return Ok(());
        }
        let opened = self
            .broker
            .open(&route)
            .await
            .map_err(|r| (r, Some(route.clone())))?;
        let span = route_span!("tunnel.pump", route);
        tokio::spawn(self.serve(req, route, opened).instrument(span));
        Ok(())
    }

    /// A request at `HARNESS_UPGRADE_PATH/<tenant>/<agent>`: authorized by
    /// the Agent's app-server token, then sent to the Agent's newest
    /// serving Harness as `/` (its `Authorization` kept: the app-server
    /// checks the same token). An upgrade the Harness accepts joins the two
    /// connections; any other answer is passed back whole (at most 1 MiB).
    async fn pass_on(
        self: Arc<Self>,
        mut req: Request<Incoming>,
        tenant: &str,
        agent: &str,
    ) -> Result<Response<Full<Bytes>>, (Refusal, Option<Route>)> {
        let unauthenticated = || {
            (
                Refusal::new(
                    reason::UNAUTHENTICATED,
                    "Authorization: Bearer <the Agent's app-server token> is required",
                ),
                None,
            )
        };
        let token = bearer_of(&req, http::header::AUTHORIZATION)
            .ok_or_else(unauthenticated)?
            .to_owned();
        let key = self
            .link
            .transport_key(self.routes.store().as_ref())
            .await
            .map_err(|e| {
                (
                    Refusal::new(reason::HUB_UNAVAILABLE, format!("the transport key: {e}")),
                    None,
                )
            })?;
        // The token first: nothing about the Agent is told without it.
        let route = self
            .routes
            .resolve_agent(tenant, agent, |id| key.verify_app_server_token(id, &token))
            .await
            .map_err(|r| (r, None))?;
        // Another replica's ingress, if it holds the session, admits the
        // revision's transport credential.
        let token = key.token(&route.revision_id);
        let failed = |why: String| (Refusal::new(reason::SPOKE_ERROR, why), Some(route.clone()));
        let (io, local) = super::harness_stream::open(&self.broker, &route, &token)
            .await
            .map_err(|r| (r, Some(route.clone())))?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
            .await
            .map_err(|e| failed(format!("HTTP to the Harness: {e}")))?;
        let connection = tokio::spawn(conn.with_upgrades().in_current_span());
        let downstream = hyper::upgrade::on(&mut req);
        let (mut parts, body) = req.into_parts();
        parts.uri = match parts.uri.query() {
            Some(q) => format!("/?{q}")
                .parse()
                .unwrap_or_else(|_| http::Uri::from_static("/")),
            None => http::Uri::from_static("/"),
        };
        parts.headers.remove(http::header::PROXY_AUTHORIZATION);
        if let Ok(host) = http::HeaderValue::from_str(&route.authority) {
            parts.headers.insert(http::header::HOST, host);
        }
        let mut answer = sender
            .send_request(Request::from_parts(parts, body))
            .await
            .map_err(|e| failed(format!("the Harness did not answer: {e}")))?;
        let status = answer.status();
        let headers = answer.headers().clone();
        if status != StatusCode::SWITCHING_PROTOCOLS {
            let body = http_body_util::Limited::new(answer.into_body(), 1 << 20)
                .collect()
                .await
                .map(|b| b.to_bytes())
                .map_err(|e| failed(format!("reading the Harness' answer: {e}")))?;
            let mut resp = Response::new(Full::new(body));
            *resp.status_mut() = status;
            *resp.headers_mut() = headers;
            return Ok(resp);
        }
        let upstream = hyper::upgrade::on(&mut answer);
        let metrics = self.broker.metrics().clone();
        let started = Instant::now();
        let span = route_span!("tunnel.upgrade", route);
        tokio::spawn(
            async move {
                let (down, up) = match tokio::try_join!(downstream, upstream) {
                    Ok(both) => both,
                    Err(e) => {
                        tracing::debug!(agent = %route.agent, error = %e, "tunnel.upgrade_failed");
                        return;
                    }
                };
                metrics.open.inc();
                let moved =
                    tokio::io::copy_bidirectional(&mut TokioIo::new(down), &mut TokioIo::new(up))
                        .await;
                metrics.open.dec();
                drop((local, connection));
                tracing::info!(
                    tenant = %route.tenant,
                    agent = %route.agent,
                    revision = route.revision,
                    cluster = %route.cluster_name,
                    moved = ?moved.as_ref().ok(),
                    duration_ms = started.elapsed().as_millis() as u64,
                    result = if moved.is_ok() { "ok" } else { "error" },
                    "tunnel.upgrade_closed"
                );
            }
            .instrument(span),
        );
        let mut resp = Response::new(Full::new(Bytes::new()));
        *resp.status_mut() = status;
        *resp.headers_mut() = headers;
        Ok(resp)
    }

    async fn serve(self: Arc<Self>, req: Request<Incoming>, route: Route, opened: Opened) {
        let started = Instant::now();
        let upgraded = match hyper::upgrade::on(req).await {
            Ok(u) => u,
            Err(e) => {
                tracing::debug!(agent = %route.agent, error = %e, "tunnel.upgrade_failed");
                return;
            }
        };
        let Opened {
            inbound,
            outbound,
            revoked,
            slot,
        } = opened;
        let metrics = self.broker.metrics().clone();
        metrics.open.inc();
        let cancel = self.shutdown.child_token();
        // A revocation of the cluster ends the tunnel (a shutdown of this
        // replica does, as `cancel` is its child); a balancing move or a
        // replaced session does not.
        let watcher = tokio::spawn({
            let cancel = cancel.clone();
            async move {
                revoked.cancelled().await;
                cancel.cancel();
            }
            .in_current_span()
        });
        let counters = Arc::new(Counters::default());
        let result = pump(
            TokioIo::new(upgraded),
            inbound,
            outbound.clone(),
            self.broker.config().idle_timeout,
            cancel,
            counters.clone(),
        )
        .await;
        watcher.abort();
        if let Err(e) = &result {
            // Tell the spoke why, so it closes the Harness side at once.
            let _ = outbound
                .send(Err(tonic::Status::aborted(format!("tunnel ended: {e}"))))
                .await;
            metrics.failed(e.label());
        }
        drop(slot);
        metrics.open.dec();
        let moved = counters.moved();
        metrics
            .bytes
            .get_or_create(&DirectionLabel {
                direction: "to-harness",
            })
            .inc_by(moved.to_stream);
        metrics
            .bytes
            .get_or_create(&DirectionLabel {
                direction: "to-gateway",
            })
            .inc_by(moved.to_socket);
        tracing::info!(
            tenant = %route.tenant,
            agent = %route.agent,
            revision = route.revision,
            cluster = %route.cluster_name,
            to_harness = moved.to_stream,
            to_gateway = moved.to_socket,
            duration_ms = started.elapsed().as_millis() as u64,
            result = result.as_ref().map_or_else(|e| e.label(), |_| "ok"),
            "tunnel.closed"
        );
    }
}
