//! `api.rateLimit` on a real in-process hub, over REST and gRPC, on SQLite
//! and PostgreSQL: a tenant over its limit is refused 429 with
//! `Retry-After` (gRPC RESOURCE_EXHAUSTED with `retry-after` metadata)
//! while another tenant is served; the caller's bucket, and the tenant's
//! for a credential seen before, refuse before the token is even looked
//! up; a refused write writes nothing; the refusals are counted in
//! `/metrics`.
//!
//! Buckets refill with real time, so each check is one that timing cannot
//! turn around: a full bucket admits (a fresh tenant, a wait of
//! `Retry-After`), and a flood meets a refusal within a bounded number of
//! requests (the bucket holds a few and refills at one a second).

use std::num::NonZeroU32;

use clawfed_hub::auth::Role;
use clawfed_hub::ratelimit::{RateLimitSettings, RequestRate};
use clawfed_hub::worker::Handlers;
use clawfed_proto::admin::v1 as pb;
use clawfed_tests::hub::{Backend, TestHub, authed};
use serde_json::{Value, json};

clawfed_tests::on_both_backends!(
    a_tenant_over_its_limit_is_refused_and_another_is_served,
    the_callers_limit_applies_before_its_token_is_read,
);

/// Enough requests for a bucket of `burst` refilled at 1/s to run dry,
/// however slowly they are answered (each takes far less than a second).
const FLOOD: usize = 40;

fn rate(per_second: u32, burst: u32) -> Option<RequestRate> {
    Some(RequestRate {
        per_second: NonZeroU32::new(per_second).unwrap(),
        burst: NonZeroU32::new(burst),
    })
}

async fn hub_with(backend: Backend, limits: RateLimitSettings) -> TestHub {
    TestHub::start_with(backend, |c| c.api.rate_limit = limits, Handlers::builtin()).await
}

/// POSTs a Configuration named `name` into `ns` as `token`.
async fn create_configuration(
    hub: &TestHub,
    token: &str,
    ns: &str,
    name: &str,
) -> reqwest::Response {
    hub.http
        .post(hub.url(&format!("/namespaces/{ns}/configurations")))
        .bearer_auth(token)
        .json(&json!({ "name": name, "data": {} }))
        .send()
        .await
        .expect("send")
}

async fn list_configurations(hub: &TestHub, token: &str, ns: &str) -> reqwest::Response {
    hub.http
        .get(hub.url(&format!("/namespaces/{ns}/configurations")))
        .bearer_auth(token)
        .send()
        .await
        .expect("send")
}

/// The `Retry-After` seconds and the JSON body of a 429.
async fn refusal(response: reqwest::Response) -> (u64, Value) {
    assert_eq!(response.status(), 429);
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .expect("Retry-After in whole seconds");
    (retry_after, response.json().await.expect("json"))
}

async fn a_tenant_over_its_limit_is_refused_and_another_is_served(backend: Backend) {
    // Tenants share a bucket of 3; each token alone may do far more.
    let hub = hub_with(
        backend,
        RateLimitSettings {
            per_subject: rate(1000, 1000),
            per_tenant: rate(1, 3),
        },
    )
    .await;
    for ns in ["a", "b"] {
        hub.post_ok("/namespaces", json!({ "name": ns })).await;
    }
    let a1 = hub.token("a-deployer", Some("a"), Role::Deployer).await;
    let a2 = hub.token("a-automation", Some("a"), Role::Deployer).await;
    let b = hub.token("b-deployer", Some("b"), Role::Deployer).await;

    // Tenant a floods with writes until its bucket refuses one.
    let mut created = 0;
    let mut refused = None;
    for i in 0..FLOOD {
        let response = create_configuration(&hub, &a1, "a", &format!("c{i}")).await;
        if response.status() == 429 {
            refused = Some(refusal(response).await);
            break;
        }
        assert_eq!(response.status(), 201, "{}", response.text().await.unwrap());
        created += 1;
    }
    let (retry_after, body) = refused.expect("tenant a was never refused");
    assert!(created >= 3, "the burst of 3 was admitted, got {created}");
    assert_eq!(body["error"]["code"], "resource_exhausted");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("api.rateLimit.perTenant (1 requests/s, burst 3)")
            && message.contains("tenant \"a\""),
        "{message}"
    );
    assert!((1..=2).contains(&retry_after), "Retry-After {retry_after}");

    // Tenant b's bucket is its own: full, so it is served at once.
    let served = list_configurations(&hub, &b, "b").await;
    assert_eq!(served.status(), 200);

    // Another token of tenant a shares a's bucket: a flood from it is
    // refused as well, and by the tenant's limit (its own is far away).
    let mut refused_a2 = None;
    for _ in 0..FLOOD {
        let response = list_configurations(&hub, &a2, "a").await;
        if response.status() == 429 {
            refused_a2 = Some(refusal(response).await.1);
            break;
        }
        assert_eq!(response.status(), 200);
    }
    let body = refused_a2.expect("a's second token was never refused");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("perTenant"),
        "{body}"
    );

    // gRPC answers the same refusal as RESOURCE_EXHAUSTED with the wait.
    let mut grpc = hub.grpc().await;
    let mut status = None;
    for _ in 0..FLOOD {
        let call = grpc
            .list_configurations(authed(
                &a1,
                pb::ListConfigurationsRequest {
                    namespace: "a".into(),
                },
            ))
            .await;
        if let Err(s) = call {
            status = Some(s);
            break;
        }
    }
    let status = status.expect("gRPC was never refused");
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    assert!(status.message().contains("perTenant"), "{status:?}");
    let wait = status
        .metadata()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .expect("retry-after metadata");
    assert!(wait >= 1);

    // A refused write wrote nothing: a holds exactly what was created.
    // (Read as root: installation admins are not in a tenant's bucket.)
    let listed = hub.get_root_json("/namespaces/a/configurations").await;
    assert_eq!(
        listed["items"].as_array().map(Vec::len),
        Some(created),
        "{listed}"
    );

    // After the wait it names, tenant a is served again.
    tokio::time::sleep(std::time::Duration::from_secs(wait)).await;
    assert_eq!(list_configurations(&hub, &a1, "a").await.status(), 200);

    // A credential seen before has its tenant's bucket checked before its
    // token is read: revoked now, a flood of it meets 429s (the store
    // would answer 401 "revoked" to any request that reached it).
    hub.store()
        .revoke_token("a-automation", chrono::Utc::now())
        .await
        .unwrap();
    let mut statuses = Vec::new();
    for _ in 0..FLOOD {
        let status = list_configurations(&hub, &a2, "a").await.status().as_u16();
        statuses.push(status);
        if status == 429 {
            break;
        }
    }
    assert_eq!(statuses.last(), Some(&429), "{statuses:?}");
    assert!(
        statuses.iter().all(|s| [401, 429].contains(s)),
        "{statuses:?}"
    );

    let metrics = hub.scrape_metrics().await;
    let tenant_refusals = metrics
        .lines()
        .find_map(|l| l.strip_prefix("occ_api_rate_limited_total{scope=\"tenant\"} "))
        .and_then(|v| v.parse::<u64>().ok())
        .expect("occ_api_rate_limited_total for tenant in /metrics");
    assert!(tenant_refusals >= 3, "{tenant_refusals}");
}

async fn the_callers_limit_applies_before_its_token_is_read(backend: Backend) {
    let hub = hub_with(
        backend,
        RateLimitSettings {
            per_subject: rate(1, 2),
            per_tenant: None,
        },
    )
    .await;
    // An unknown token is answered 401 while its bucket admits it; past
    // its burst it is refused 429, which only a check made before the
    // store is asked can answer (the store would say "unknown token").
    let mut statuses = Vec::new();
    for _ in 0..FLOOD {
        let response = list_configurations(&hub, "cfd_not-a-token", "a").await;
        statuses.push(response.status().as_u16());
        if response.status() == 429 {
            break;
        }
    }
    assert_eq!(statuses.last(), Some(&429), "{statuses:?}");
    assert!(
        statuses[..statuses.len() - 1].iter().all(|s| *s == 401) && statuses.len() >= 3,
        "{statuses:?}"
    );

    // Each caller has its own bucket: a valid token is still served, and
    // the root token too (installation admins have a caller's bucket).
    hub.post_ok("/namespaces", json!({ "name": "a" })).await;
    let viewer = hub.token("viewer", Some("a"), Role::Viewer).await;
    assert_eq!(list_configurations(&hub, &viewer, "a").await.status(), 200);

    let metrics = hub.scrape_metrics().await;
    assert!(
        metrics.contains("occ_api_rate_limited_total{scope=\"subject\"} "),
        "{metrics}"
    );
}
