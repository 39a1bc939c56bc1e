//! API requests run to completion even when their client goes away.
//!
//! hyper drops a request's future when the client disconnects or times
//! out. A store call dropped mid-protocol leaves its pooled PostgreSQL
//! connection in a state sqlx cannot always recover (its connections are
//! not cancel-safe), and under a burst of client timeouts, as after a
//! database restart, such connections held the hub's whole pool. Each
//! request's handler therefore runs in its own task: the caller may stop
//! waiting, the work and its database calls finish either way (a retried
//! request then finds the result, by its idempotency key where it has
//! one).

use std::task::{Context, Poll};

use futures::future::BoxFuture;
use tower::{Layer, Service};
use tracing::Instrument;

/// Runs each request of the wrapped service in a task of its own.
#[derive(Debug, Clone, Copy, Default)]
pub struct RunToCompletionLayer;

impl<S> Layer<S> for RunToCompletionLayer {
    type Service = RunToCompletion<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RunToCompletion { inner }
    }
}

/// See [`RunToCompletionLayer`].
#[derive(Debug, Clone)]
pub struct RunToCompletion<S> {
    inner: S,
}

impl<S, R> Service<R> for RunToCompletion<S>
where
    S: Service<R>,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: R) -> Self::Future {
        // The handler keeps the request's span.
        let running = tokio::spawn(self.inner.call(req).in_current_span());
        Box::pin(async move {
            match running.await {
                Ok(answer) => answer,
                // A handler's panic stays a panic of the request, as without
                // this layer.
                Err(e) => match e.try_into_panic() {
                    Ok(panic) => std::panic::resume_unwind(panic),
                    // Cancelled only when the runtime shuts down.
                    Err(_) => std::future::pending().await,
                },
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    #[tokio::test]
    async fn a_dropped_request_still_finishes_its_work() {
        let finished = Arc::new(AtomicBool::new(false));
        let done = finished.clone();
        let slow = tower::service_fn(move |(): ()| {
            let done = done.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                done.store(true, Ordering::SeqCst);
                Ok::<_, std::convert::Infallible>(())
            }
        });
        let mut svc = RunToCompletionLayer.layer(slow);
        // The client gives up after 5 ms.
        let gave_up = tokio::time::timeout(Duration::from_millis(5), svc.call(())).await;
        assert!(gave_up.is_err());
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !finished.load(Ordering::SeqCst) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the work never finished"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
