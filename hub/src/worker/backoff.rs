//! Retry delays for durable work: exponential with full jitter.
//!
//! The delay is persisted as the item's next `run_at`, so it is computed
//! here as a pure function of the attempt number rather than by a retry
//! loop around a future (which is what backon is for).

use std::time::Duration;

/// Exponential backoff with full jitter: a uniformly random delay in
/// `[0, min(cap, base * 2^(attempt-1))]`, so retries of many items spread
/// out instead of arriving together.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    pub base: Duration,
    pub cap: Duration,
}

impl Backoff {
    /// The ceiling of the delay after `attempt` (1-based) failed attempts.
    pub fn ceiling(&self, attempt: u32) -> Duration {
        let exp = attempt.saturating_sub(1).min(31);
        self.base.saturating_mul(1u32 << exp).min(self.cap)
    }

    /// A jittered delay, with `unit` drawn uniformly from [0, 1].
    pub fn delay(&self, attempt: u32, unit: f64) -> Duration {
        self.ceiling(attempt).mul_f64(unit.clamp(0.0, 1.0))
    }

    /// A jittered delay drawn from the thread RNG.
    pub fn random_delay(&self, attempt: u32) -> Duration {
        self.delay(attempt, rand::random::<f64>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_exponentially_up_to_the_cap() {
        let b = Backoff {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(60),
        };
        assert_eq!(b.ceiling(1), Duration::from_secs(1));
        assert_eq!(b.ceiling(2), Duration::from_secs(2));
        assert_eq!(b.ceiling(5), Duration::from_secs(16));
        assert_eq!(b.ceiling(7), Duration::from_secs(60));
        assert_eq!(b.ceiling(1000), Duration::from_secs(60));
    }

    #[test]
    fn full_jitter_spans_zero_to_ceiling() {
        let b = Backoff {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(60),
        };
        assert_eq!(b.delay(3, 0.0), Duration::ZERO);
        assert_eq!(b.delay(3, 1.0), Duration::from_secs(4));
        assert_eq!(b.delay(3, 0.5), Duration::from_secs(2));
        for _ in 0..100 {
            assert!(b.random_delay(4) <= Duration::from_secs(8));
        }
    }
}
