//! The data path contract: how a Gateway asks the hub's tunnel ingress for a
//! connection to its revision's Harness, and the reasons a tunnel is
//! refused. Both sides (and the Gateway stand-in) use these.
//!
//! A Gateway connects to the ingress and sends
//! `CONNECT <authority> HTTP/1.1` with `Proxy-Authorization: Bearer <token>`
//! (its revision's transport credential). `<authority>` must be
//! [`harness_authority`] of that same revision; then the hub asks the
//! cluster's spoke (TunnelOpen on the link) to connect the Harness, and
//! answers `200` once the spoke has, or a 4xx/5xx whose body is
//! `<reason>: <message>`.

/// The Harness path the hub requests through the Gateway before it
/// activates a revision (the data path probe); any 2xx answer passes.
pub const PROBE_PATH: &str = "/healthz";
/// The tunnel ingress' path for a client that cannot send `CONNECT` (the
/// Codex plugin's WebSocket to its app-server):
/// `<HARNESS_UPGRADE_PATH>/<tenant>/<agent>` with `Authorization: Bearer
/// <the Agent's app-server token>` is passed on, with the path `/` and the
/// same `Authorization`, to the Agent's newest serving Harness, and an
/// upgrade it answers (`101`) carries the connection's bytes from then on.
pub const HARNESS_UPGRADE_PATH: &str = "/_clawfed/harness";

/// `HARNESS_UPGRADE_PATH/<tenant>/<agent>`.
pub fn harness_upgrade_path(tenant: &str, agent: &str) -> String {
    format!("{HARNESS_UPGRADE_PATH}/{tenant}/{agent}")
}

/// The tenant and Agent of a [`harness_upgrade_path`], if `path` is one.
pub fn parse_harness_upgrade_path(path: &str) -> Option<(&str, &str)> {
    let rest = path.strip_prefix(HARNESS_UPGRADE_PATH)?.strip_prefix('/')?;
    let (tenant, agent) = rest.split_once('/')?;
    (!tenant.is_empty() && !agent.is_empty() && !agent.contains('/')).then_some((tenant, agent))
}

/// The HTTP/2 receive window of one tunneled connection's stream, on both
/// sides (the most either side buffers for a peer that stopped reading).
pub const STREAM_WINDOW: u32 = 256 * 1024;

/// The HTTP/2 connection window that lets `max_streams` tunnels stall
/// (each holding a full stream window) without stopping the others: the
/// windows are credit, spent only by data a reader has not taken, so the
/// memory this allows is bounded by the tunnel limits.
pub fn connection_window(max_streams: usize) -> u32 {
    let want = (max_streams as u64 + 1) * u64::from(STREAM_WINDOW);
    // HTTP/2's largest window (RFC 9113 6.9.1).
    want.min((1u64 << 31) - 1) as u32
}

/// Largest `data` frame either side sends (bytes).
pub const MAX_FRAME: usize = 64 * 1024;

/// The header the refusal reason is repeated in, so a client can act on it
/// without parsing the body.
pub const REASON_HEADER: &str = "clawfed-tunnel-reason";

/// Set by a hub replica that forwards a Gateway's CONNECT to the replica
/// holding the cluster's session (its value: the forwarding replica). A
/// forwarded CONNECT is never forwarded again.
pub const FORWARDED_HEADER: &str = "clawfed-tunnel-forwarded-by";

/// The authority (`host:port`) a Gateway names in CONNECT for the Harness
/// of `agent` revision `revision` in physical namespace `namespace`: the
/// host of [`crate::work::harness::service_url`].
pub fn harness_authority(agent: &str, revision: i64, namespace: &str, port: i32) -> String {
    format!(
        "{}.{namespace}.svc:{port}",
        crate::work::harness::object_name(agent, revision)
    )
}

/// Why a tunnel was refused or ended. The same words travel in
/// `TunnelAccept.reason`, the ingress' `clawfed-tunnel-reason` header and
/// the `clawfed_tunnel_failures_total{reason}` metric.
pub mod reason {
    /// No or malformed `Proxy-Authorization`, or an unknown credential.
    pub const UNAUTHENTICATED: &str = "unauthenticated";
    /// The credential is valid, but not for the authority asked for.
    pub const FORBIDDEN_TARGET: &str = "forbidden-target";
    /// The revision's Harness is not (or no longer) meant to run.
    pub const REVISION_NOT_SERVING: &str = "revision-not-serving";
    /// Not a CONNECT request, or a malformed one.
    pub const BAD_REQUEST: &str = "bad-request";
    /// The revision's execution cluster has no live link session.
    pub const CLUSTER_OFFLINE: &str = "cluster-offline";
    /// The revision's or the cluster's connection limit is reached.
    pub const LIMIT: &str = "limit";
    /// The spoke did not open the tunnel in time.
    pub const SPOKE_TIMEOUT: &str = "spoke-timeout";
    /// The spoke does not manage a Harness for this target and revision.
    pub const NOT_MANAGED: &str = "not-managed";
    /// The Harness Service has no Ready endpoint.
    pub const NO_READY_ENDPOINT: &str = "no-ready-endpoint";
    /// Connecting to the Harness endpoint failed or timed out.
    pub const DIAL_FAILED: &str = "dial-failed";
    /// The spoke's own tunnel limit is reached.
    pub const SPOKE_LIMIT: &str = "spoke-limit";
    /// The spoke could not read the cluster (apiserver unavailable).
    pub const SPOKE_ERROR: &str = "spoke-error";
    /// The hub is shutting down.
    pub const SHUTTING_DOWN: &str = "shutting-down";
    /// The hub could not read its store (retry later).
    pub const HUB_UNAVAILABLE: &str = "hub-unavailable";

    /// Every reason, for metrics and tests.
    pub const ALL: [&str; 14] = [
        UNAUTHENTICATED,
        FORBIDDEN_TARGET,
        REVISION_NOT_SERVING,
        BAD_REQUEST,
        CLUSTER_OFFLINE,
        LIMIT,
        SPOKE_TIMEOUT,
        NOT_MANAGED,
        NO_READY_ENDPOINT,
        DIAL_FAILED,
        SPOKE_LIMIT,
        SPOKE_ERROR,
        SHUTTING_DOWN,
        HUB_UNAVAILABLE,
    ];
}

/// The HTTP status the ingress answers a refusal `reason` with.
pub fn refusal_status(reason: &str) -> u16 {
    match reason {
        reason::UNAUTHENTICATED => 407,
        reason::FORBIDDEN_TARGET | reason::REVISION_NOT_SERVING => 403,
        reason::BAD_REQUEST => 400,
        reason::LIMIT | reason::SPOKE_LIMIT => 429,
        reason::SPOKE_TIMEOUT => 504,
        reason::CLUSTER_OFFLINE
        | reason::SHUTTING_DOWN
        | reason::NO_READY_ENDPOINT
        | reason::HUB_UNAVAILABLE => 503,
        _ => 502,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upgrade_paths_name_tenant_and_agent() {
        let p = harness_upgrade_path("team", "a1");
        assert_eq!(p, "/_clawfed/harness/team/a1");
        assert_eq!(parse_harness_upgrade_path(&p), Some(("team", "a1")));
        for bad in [
            "/_clawfed/harness",
            "/_clawfed/harness/",
            "/_clawfed/harness/team",
            "/_clawfed/harness/team/",
            "/_clawfed/harness//a1",
            "/_clawfed/harness/team/a1/x",
            "/_clawfed/harnessx/team/a1",
        ] {
            assert_eq!(parse_harness_upgrade_path(bad), None, "{bad}");
        }
    }

    #[test]
    fn authority_is_the_service_url_host() {
        let url = crate::work::harness::service_url("bot", 3, "oce-x", 8080);
        assert_eq!(
            url,
            format!("http://{}", harness_authority("bot", 3, "oce-x", 8080))
        );
    }

    #[test]
    fn every_reason_has_a_client_or_gateway_error_status() {
        for r in reason::ALL {
            let s = refusal_status(r);
            assert!((400..600).contains(&s), "{r}: {s}");
        }
        assert_eq!(refusal_status(reason::UNAUTHENTICATED), 407);
        assert_eq!(refusal_status(reason::FORBIDDEN_TARGET), 403);
    }
}
