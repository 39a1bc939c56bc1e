//! Apiserver pressure: how many targets the link applies at once.
//!
//! The link applies independent targets in parallel, one generation at a
//! time per target, up to [`ApplyLimit::current`]. The limit follows the
//! apiserver's own answers, additive increase and multiplicative decrease
//! (as TCP does): each write answered without throttling adds one per
//! `limit` answers (about one step per round of applies); a
//! `429 Too Many Requests` (API Priority and Fairness rejecting the
//! spoke's flow, or max-in-flight) halves it, at most once per
//! [`CUT_INTERVAL`], so one burst of rejections counts once.
//!
//! The spoke's client ([`client`]) sees every attempt: this layer sits
//! below kube's retry, which still retries a 429 after its `Retry-After`,
//! so the work goes on while the limit keeps the next applies from piling
//! onto a saturated apiserver.

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http::{Method, Request, Response, StatusCode};
use kube::client::retry::RetryPolicy;
use kube::client::{Body, ClientBuilder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tower::buffer::BufferLayer;
use tower::retry::RetryLayer;

/// At most one halving per this long.
pub const CUT_INTERVAL: Duration = Duration::from_secs(1);

/// The number of targets applied at once (see the module docs).
#[derive(Debug)]
pub struct ApplyLimit {
    limit: AtomicUsize,
    /// Unthrottled write answers since the last step up.
    answered: AtomicUsize,
    last_cut: Mutex<Option<Instant>>,
    min: usize,
    max: usize,
    /// The limit, exported.
    gauge: Gauge,
    /// `429` answers seen.
    throttled: Counter,
}

impl Default for ApplyLimit {
    fn default() -> Self {
        Self::new(Self::START, Self::MIN, Self::MAX)
    }
}

impl ApplyLimit {
    /// The limit a spoke starts with.
    pub const START: usize = 16;
    /// Never below: a throttled apiserver still gets this many.
    pub const MIN: usize = 2;
    /// Never above: bounds the spoke's own memory and connections.
    pub const MAX: usize = 64;

    /// A limit starting at `start`, kept within `min..=max`.
    pub fn new(start: usize, min: usize, max: usize) -> Self {
        let min = min.max(1);
        let max = max.max(min);
        let start = start.clamp(min, max);
        let gauge = Gauge::default();
        gauge.set(start as i64);
        Self {
            limit: AtomicUsize::new(start),
            answered: AtomicUsize::new(0),
            last_cut: Mutex::new(None),
            min,
            max,
            gauge,
            throttled: Counter::default(),
        }
    }

    /// Exports the limit and the `429` count.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "clawfed_spoke_apply_limit",
            "Targets the spoke applies at once, set by the apiserver's throttling",
            self.gauge.clone(),
        );
        registry.register(
            "clawfed_spoke_apiserver_throttled",
            "Kubernetes API answers 429 Too Many Requests",
            self.throttled.clone(),
        );
    }

    /// Targets that may be applied at once now.
    pub fn current(&self) -> usize {
        self.limit.load(Ordering::Relaxed)
    }

    /// `429` answers seen so far.
    pub fn throttled_total(&self) -> u64 {
        self.throttled.get()
    }

    /// The apiserver answered `429`: halve (once per [`CUT_INTERVAL`]).
    pub fn on_throttled(&self) {
        self.throttled.inc();
        let mut last = self.last_cut.lock().unwrap_or_else(PoisonError::into_inner);
        if last.is_some_and(|t| t.elapsed() < CUT_INTERVAL) {
            return;
        }
        *last = Some(Instant::now());
        let cut = (self.current() / 2).max(self.min);
        self.limit.store(cut, Ordering::Relaxed);
        self.gauge.set(cut as i64);
        self.answered.store(0, Ordering::Relaxed);
        tracing::info!(limit = cut, "spoke.apply_limit.throttled");
    }

    /// A write was answered without throttling: one step up per `limit`.
    pub fn on_answered(&self) {
        let limit = self.current();
        if limit >= self.max {
            return;
        }
        if self.answered.fetch_add(1, Ordering::Relaxed) + 1 >= limit {
            self.answered.store(0, Ordering::Relaxed);
            let up = (limit + 1).min(self.max);
            if self
                .limit
                .compare_exchange(limit, up, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
            {
                self.gauge.set(up as i64);
            }
        }
    }

    fn observe(&self, method: &Method, status: StatusCode) {
        if status == StatusCode::TOO_MANY_REQUESTS {
            self.on_throttled();
        } else if *method != Method::GET && status.is_success() {
            self.on_answered();
        }
    }
}

/// The spoke's Kubernetes client: every attempt's answer feeds `limit`,
/// and kube's server-aware retry (429, 503, 504, honouring `Retry-After`)
/// sits above it.
pub fn client(
    mut config: kube::Config,
    limit: Arc<ApplyLimit>,
) -> Result<kube::Client, kube::Error> {
    config.default_retry = false;
    Ok(ClientBuilder::try_from(config)?
        .with_layer(&PressureLayer { limit })
        // The retry clones the service it retries; the stack below is not
        // `Clone`, a buffer in front of it is (kube's own client does the same).
        .with_layer(&BufferLayer::new(1024))
        .with_layer(&RetryLayer::new(RetryPolicy::server_retry()))
        .build())
}

/// Feeds every answer's status to an [`ApplyLimit`].
#[derive(Clone)]
pub struct PressureLayer {
    limit: Arc<ApplyLimit>,
}

impl PressureLayer {
    /// A layer feeding `limit`.
    pub fn new(limit: Arc<ApplyLimit>) -> Self {
        Self { limit }
    }
}

impl<S> tower::Layer<S> for PressureLayer {
    type Service = Pressure<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Pressure {
            inner,
            limit: self.limit.clone(),
        }
    }
}

/// The service of [`PressureLayer`].
#[derive(Clone)]
pub struct Pressure<S> {
    inner: S,
    limit: Arc<ApplyLimit>,
}

impl<S, B> tower::Service<Request<Body>> for Pressure<S>
where
    S: tower::Service<Request<Body>, Response = Response<B>>,
    S::Future: Send + 'static,
    S::Error: 'static,
    B: 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn std::future::Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let method = req.method().clone();
        let limit = self.limit.clone();
        let answer = self.inner.call(req);
        Box::pin(async move {
            let r = answer.await;
            if let Ok(resp) = &r {
                limit.observe(&method, resp.status());
            }
            r
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttling_halves_and_answers_grow_one_step_per_round() {
        let l = ApplyLimit::new(16, 2, 64);
        for _ in 0..15 {
            l.on_answered();
        }
        assert_eq!(l.current(), 16);
        l.on_answered();
        assert_eq!(l.current(), 17, "one step after a round of 16 answers");
        l.on_throttled();
        assert_eq!(l.current(), 8);
        l.on_throttled();
        assert_eq!(l.current(), 8, "one burst of rejections halves once");
        assert_eq!(l.throttled_total(), 2);
        for _ in 0..10_000 {
            l.on_answered();
        }
        assert_eq!(l.current(), 64, "capped at max");
    }

    #[test]
    fn never_below_the_floor() {
        let l = ApplyLimit::new(3, 2, 64);
        l.on_throttled();
        assert_eq!(l.current(), 2);
        *l.last_cut.lock().unwrap() = None;
        l.on_throttled();
        assert_eq!(l.current(), 2);
    }

    #[test]
    fn reads_do_not_grow_it() {
        let l = ApplyLimit::new(2, 1, 8);
        for _ in 0..10 {
            l.observe(&Method::GET, StatusCode::OK);
        }
        assert_eq!(l.current(), 2);
        l.observe(&Method::PATCH, StatusCode::OK);
        l.observe(&Method::PATCH, StatusCode::CREATED);
        assert_eq!(l.current(), 3);
        l.observe(&Method::GET, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(l.current(), 1);
    }
}
