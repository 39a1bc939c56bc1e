//! API request rate limits: one token bucket per caller and one per tenant,
//! so that one tenant's automation cannot starve another's.
//!
//! Both buckets are checked before any database work: the caller's keyed
//! by what the request presents (its bearer token's hash, or its client
//! certificate's name), the tenant's by the namespace that credential is
//! scoped to, remembered from its first request (a token's namespace never
//! changes), so all of a tenant's tokens share one bucket. A credential's
//! first request charges its tenant right after the token is read.
//! Installation-admin tokens are limited by their own bucket only. A
//! refused request is answered 429 with `Retry-After`.
//!
//! The buckets are GCRA (governor), equivalent to a token bucket of
//! `burst` requests refilled at `perSecond`. Time comes from the clock the
//! limiter is built with, so the decisions are tested with a clock the test
//! advances.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use governor::clock::{Clock, MonotonicClock};
use governor::middleware::NoOpMiddleware;
use governor::state::keyed::DefaultKeyedStateStore;
use governor::{Quota, RateLimiter};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use serde::Deserialize;

/// `api.rateLimit`: the request rates the APIs (REST, gRPC, the web view's
/// calls and watches) admit. Each limit is off unless set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
// Every field is optional: a partial section keeps the other defaults.
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct RateLimitSettings {
    /// Each API token (or client certificate) on its own.
    pub per_subject: Option<RequestRate>,
    /// All the tokens scoped to one tenant (namespace) together.
    pub per_tenant: Option<RequestRate>,
}

/// A sustained rate and the burst admitted above it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RequestRate {
    /// Requests per second, sustained.
    pub per_second: NonZeroU32,
    /// Requests admitted at once after an idle spell (the bucket's size);
    /// `perSecond` when unset.
    #[serde(default)]
    pub burst: Option<NonZeroU32>,
}

impl RequestRate {
    fn quota(self) -> Quota {
        Quota::per_second(self.per_second).allow_burst(self.burst.unwrap_or(self.per_second))
    }

    fn describe(self) -> String {
        format!(
            "{} requests/s, burst {}",
            self.per_second,
            self.burst.unwrap_or(self.per_second)
        )
    }
}

/// Whose bucket refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    /// The caller's own (`api.rateLimit.perSubject`).
    Subject,
    /// The caller's tenant's (`api.rateLimit.perTenant`).
    Tenant,
}

impl Scope {
    /// The metric label and the setting's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Subject => "subject",
            Self::Tenant => "tenant",
        }
    }
}

/// A refused request: whose limit, what it is, and when to try again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limited {
    pub scope: Scope,
    /// The limit, as configured.
    pub limit: String,
    /// The tenant whose bucket is empty (`Scope::Tenant`).
    pub tenant: Option<String>,
    /// When the bucket admits the next request.
    pub retry_after: Duration,
}

impl std::fmt::Display for Limited {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let setting = match self.scope {
            Scope::Subject => "perSubject",
            Scope::Tenant => "perTenant",
        };
        write!(
            f,
            "rate limit api.rateLimit.{setting} ({}) exceeded ",
            self.limit
        )?;
        match &self.tenant {
            Some(t) => write!(f, "by tenant {t:?}")?,
            None => f.write_str("by this caller")?,
        }
        write!(f, "; retry after {} s", self.retry_after_secs())
    }
}

impl std::error::Error for Limited {}

impl Limited {
    /// Whole seconds to wait, rounded up (`Retry-After` has no fractions).
    pub fn retry_after_secs(&self) -> u64 {
        self.retry_after.as_secs() + u64::from(self.retry_after.subsec_nanos() > 0)
    }
}

type Buckets<C> =
    RateLimiter<String, DefaultKeyedStateStore<String>, C, NoOpMiddleware<<C as Clock>::Instant>>;

/// How many admissions pass between sweeps of idle buckets.
const SWEEP_EVERY: u64 = 4096;

/// Credentials whose tenant is remembered; past it the memory starts over
/// (each credential's next request reads its tenant again).
const TENANTS_REMEMBERED: usize = 65_536;

/// What [`RateLimits::admit_presented`] charged: whether the tenant's
/// bucket is still to be charged once the credential's tenant is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "charge the tenant with RateLimits::admit_resolved"]
pub struct Admission {
    tenant_charged: bool,
}

/// The API's rate limiter.
pub struct RateLimits<C: Clock = MonotonicClock> {
    subject: Option<(RequestRate, Buckets<C>)>,
    tenant: Option<(RequestRate, Buckets<C>)>,
    clock: C,
    refused: Family<ScopeLabel, Counter>,
    admissions: AtomicU64,
    /// The tenant each credential seen is scoped to (`None`: an
    /// installation admin), so later requests charge it before the store
    /// is read.
    tenants: Mutex<HashMap<String, Option<String>>>,
}

impl<C: Clock> std::fmt::Debug for RateLimits<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimits")
            .field("per_subject", &self.subject.as_ref().map(|(r, _)| r))
            .field("per_tenant", &self.tenant.as_ref().map(|(r, _)| r))
            .finish()
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ScopeLabel {
    scope: &'static str,
}

impl RateLimits<MonotonicClock> {
    /// Limits as `settings` say, on the system's monotonic clock.
    pub fn new(settings: RateLimitSettings) -> Self {
        Self::with_clock(settings, MonotonicClock)
    }
}

impl Default for RateLimits<MonotonicClock> {
    /// No limits.
    fn default() -> Self {
        Self::new(RateLimitSettings::default())
    }
}

impl<C: Clock + Clone> RateLimits<C> {
    /// Limits as `settings` say, on `clock`.
    pub fn with_clock(settings: RateLimitSettings, clock: C) -> Self {
        let buckets = |rate: RequestRate| {
            (
                rate,
                RateLimiter::dashmap_with_clock(rate.quota(), clock.clone()),
            )
        };
        Self {
            subject: settings.per_subject.map(buckets),
            tenant: settings.per_tenant.map(buckets),
            clock,
            refused: Family::default(),
            admissions: AtomicU64::new(0),
            tenants: Mutex::default(),
        }
    }

    /// Registers `occ_api_rate_limited_total{scope}`, the requests refused.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "occ_api_rate_limited",
            "API requests refused with 429 by api.rateLimit, by the bucket that was empty (subject or tenant)",
            self.refused.clone(),
        );
    }

    /// Admits one request by what its credential presents (`subject`: a
    /// token's hash, `cert:<name>`), before any database work: the
    /// caller's bucket, and its tenant's when the credential was seen
    /// before. Then [`Self::admit_resolved`] once the token is read.
    pub fn admit_presented(&self, subject: &str) -> Result<Admission, Limited> {
        self.admit(Scope::Subject, self.subject.as_ref(), subject)?;
        if self.tenant.is_none() {
            return Ok(Admission {
                tenant_charged: true,
            });
        }
        let known = self.lock_tenants().get(subject).cloned();
        match known {
            Some(tenant) => {
                if let Some(tenant) = tenant {
                    self.admit(Scope::Tenant, self.tenant.as_ref(), &tenant)?;
                }
                Ok(Admission {
                    tenant_charged: true,
                })
            }
            None => Ok(Admission {
                tenant_charged: false,
            }),
        }
    }

    /// Charges the tenant the credential `subject` turned out to be scoped
    /// to (`None`: an installation admin), unless [`Self::admit_presented`]
    /// already did, and remembers it for the credential's next requests.
    pub fn admit_resolved(
        &self,
        subject: &str,
        tenant: Option<&str>,
        admission: Admission,
    ) -> Result<(), Limited> {
        if admission.tenant_charged {
            return Ok(());
        }
        {
            let mut tenants = self.lock_tenants();
            if tenants.len() >= TENANTS_REMEMBERED {
                tenants.clear();
            }
            tenants.insert(subject.to_owned(), tenant.map(str::to_owned));
        }
        match tenant {
            Some(tenant) => self.admit(Scope::Tenant, self.tenant.as_ref(), tenant),
            None => Ok(()),
        }
    }

    fn lock_tenants(&self) -> std::sync::MutexGuard<'_, HashMap<String, Option<String>>> {
        // A panic while holding it leaves a map that is still whole.
        self.tenants.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn admit(
        &self,
        scope: Scope,
        buckets: Option<&(RequestRate, Buckets<C>)>,
        key: &str,
    ) -> Result<(), Limited> {
        let Some((rate, buckets)) = buckets else {
            return Ok(());
        };
        self.sweep_now_and_then();
        // Keys are owned by the map; a lookup needs an owned key too.
        match buckets.check_key(&key.to_owned()) {
            Ok(()) => Ok(()),
            Err(not_until) => {
                self.refused
                    .get_or_create(&ScopeLabel {
                        scope: scope.as_str(),
                    })
                    .inc();
                Err(Limited {
                    scope,
                    limit: rate.describe(),
                    tenant: (scope == Scope::Tenant).then(|| key.to_owned()),
                    retry_after: not_until.wait_time_from(self.clock.now()),
                })
            }
        }
    }

    /// Forgets buckets that are full again (indistinguishable from new),
    /// so callers that came once cost no memory for ever.
    fn sweep_now_and_then(&self) {
        if self.admissions.fetch_add(1, Ordering::Relaxed) % SWEEP_EVERY != SWEEP_EVERY - 1 {
            return;
        }
        for (_, buckets) in self.subject.iter().chain(self.tenant.iter()) {
            buckets.retain_recent();
            buckets.shrink_to_fit();
        }
    }

    /// Buckets held now (both scopes), for tests of the sweep.
    pub fn buckets_held(&self) -> usize {
        self.subject
            .iter()
            .chain(self.tenant.iter())
            .map(|(_, b)| b.len())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use governor::clock::FakeRelativeClock;

    use super::*;

    fn rate(per_second: u32, burst: u32) -> Option<RequestRate> {
        Some(RequestRate {
            per_second: NonZeroU32::new(per_second).unwrap(),
            burst: NonZeroU32::new(burst),
        })
    }

    fn limits(
        subject: Option<RequestRate>,
        tenant: Option<RequestRate>,
    ) -> (RateLimits<FakeRelativeClock>, FakeRelativeClock) {
        let clock = FakeRelativeClock::default();
        let settings = RateLimitSettings {
            per_subject: subject,
            per_tenant: tenant,
        };
        (RateLimits::with_clock(settings, clock.clone()), clock)
    }

    /// One request of credential `subject`, scoped to `tenant`, through
    /// both steps as the service makes it.
    fn request(
        l: &RateLimits<FakeRelativeClock>,
        subject: &str,
        tenant: Option<&str>,
    ) -> Result<(), Limited> {
        let admission = l.admit_presented(subject)?;
        l.admit_resolved(subject, tenant, admission)
    }

    #[test]
    fn a_burst_then_the_sustained_rate() {
        let (l, clock) = limits(rate(10, 3), None);
        for _ in 0..3 {
            assert_eq!(request(&l, "a", None), Ok(()));
        }
        let refused = request(&l, "a", None).unwrap_err();
        assert_eq!(refused.scope, Scope::Subject);
        // One request's worth of refill at 10/s.
        assert_eq!(refused.retry_after, Duration::from_millis(100));
        assert_eq!(refused.retry_after_secs(), 1);
        assert!(
            refused
                .to_string()
                .contains("api.rateLimit.perSubject (10 requests/s, burst 3)"),
            "{refused}"
        );
        clock.advance(Duration::from_millis(100));
        assert_eq!(request(&l, "a", None), Ok(()));
        assert!(request(&l, "a", None).is_err());
    }

    #[test]
    fn callers_and_tenants_have_buckets_of_their_own() {
        let (l, _clock) = limits(rate(1, 1), None);
        assert_eq!(request(&l, "a", None), Ok(()));
        assert!(request(&l, "a", None).is_err());
        assert_eq!(request(&l, "b", None), Ok(()), "b is not a's bucket");

        let (l, _clock) = limits(None, rate(1, 2));
        assert_eq!(request(&l, "a1", Some("t1")), Ok(()));
        assert_eq!(request(&l, "a2", Some("t1")), Ok(()));
        let refused = request(&l, "a3", Some("t1")).unwrap_err();
        assert_eq!(refused.scope, Scope::Tenant);
        assert_eq!(refused.tenant.as_deref(), Some("t1"));
        assert!(refused.to_string().contains("perTenant"), "{refused}");
        assert!(refused.to_string().contains("\"t1\""), "{refused}");
        assert_eq!(
            request(&l, "b1", Some("t2")),
            Ok(()),
            "t2 is not t1's bucket"
        );
        // Installation admins have no tenant's bucket.
        for _ in 0..10 {
            assert_eq!(request(&l, "root", None), Ok(()));
        }
    }

    #[test]
    fn a_known_credentials_tenant_is_charged_before_its_token_is_read() {
        let (l, _clock) = limits(None, rate(1, 2));
        assert_eq!(request(&l, "a1", Some("t1")), Ok(()));
        // Its second request: the tenant is charged at presentation.
        let admission = l.admit_presented("a1").unwrap();
        assert!(admission.tenant_charged);
        assert_eq!(l.admit_resolved("a1", Some("t1"), admission), Ok(()));
        // The bucket is empty: the next is refused before any lookup.
        let refused = l.admit_presented("a1").unwrap_err();
        assert_eq!(refused.scope, Scope::Tenant);
        // A credential seen for the first time is charged once resolved.
        let admission = l.admit_presented("a2").unwrap();
        assert!(!admission.tenant_charged);
        assert_eq!(
            l.admit_resolved("a2", Some("t1"), admission)
                .unwrap_err()
                .scope,
            Scope::Tenant
        );
    }

    #[test]
    fn no_setting_no_limit() {
        let (l, _clock) = limits(None, None);
        for _ in 0..10_000 {
            assert_eq!(request(&l, "a", Some("t")), Ok(()));
        }
        assert_eq!(l.buckets_held(), 0);
        assert!(l.lock_tenants().is_empty(), "nothing remembered");
    }

    #[test]
    fn the_burst_defaults_to_the_rate() {
        let (l, _clock) = limits(rate(5, 0), None);
        for _ in 0..5 {
            assert_eq!(request(&l, "a", None), Ok(()));
        }
        assert!(request(&l, "a", None).is_err());
    }

    #[test]
    fn buckets_of_callers_gone_quiet_are_forgotten() {
        let (l, clock) = limits(rate(100, 1), None);
        for i in 0..1000 {
            let _ = request(&l, &format!("caller-{i}"), None);
        }
        assert_eq!(l.buckets_held(), 1000);
        clock.advance(Duration::from_secs(1));
        // Enough admissions of one caller to reach the next sweep.
        for _ in 0..SWEEP_EVERY {
            let _ = request(&l, "busy", None);
            clock.advance(Duration::from_millis(10));
        }
        assert!(l.buckets_held() <= 1, "held {}", l.buckets_held());
    }

    #[test]
    fn refusals_are_counted_by_scope() {
        let (l, _clock) = limits(rate(1, 1), rate(1, 1));
        let mut registry = Registry::default();
        l.register(&mut registry);
        let _ = request(&l, "a", None);
        let _ = request(&l, "a", None);
        let _ = request(&l, "t1", Some("t"));
        let _ = request(&l, "t2", Some("t"));
        let _ = request(&l, "t3", Some("t"));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains("occ_api_rate_limited_total{scope=\"subject\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("occ_api_rate_limited_total{scope=\"tenant\"} 2"),
            "{text}"
        );
    }

    #[test]
    fn settings_parse_and_zero_is_refused() {
        let s: RateLimitSettings =
            serde_yaml_ng::from_str("perSubject: { perSecond: 20, burst: 40 }\n").unwrap();
        assert_eq!(s.per_subject, rate(20, 40));
        assert_eq!(s.per_tenant, None);
        let err = serde_yaml_ng::from_str::<RateLimitSettings>("perTenant: { perSecond: 0 }\n")
            .unwrap_err();
        assert!(err.to_string().contains("nonzero"), "{err}");
    }
}
