//! When the link tries again (pure: no I/O, no clock; the caller draws
//! the jitter `unit` uniformly from [0, 1)).
//!
//! Three cases, three rules:
//! - **A welcomed session ended** (its replica died, the connection
//!   broke): the first attempt comes after a delay drawn from [0, spread].
//!   Every spoke of a dead replica loses its session at the same instant;
//!   the spread turns that instant into a window (the thundering-herd
//!   protection) that is short and bounded, so a failover takes about the
//!   window, not the backoff cap. A hub that restarts quickly, even right
//!   after a Welcome, gets its spokes back within the window; a hub that
//!   must shed spokes says so with a GoAway and a retry-after.
//! - **An attempt failed** (dial, TLS, Hello): with several hub addresses
//!   the next one is tried after a short pause drawn from [0, min] until
//!   every address failed once in this round; only a whole round of
//!   failures grows the exponential delay (full jitter under
//!   min * 2^rounds, at most max). A replica that is gone costs one quick
//!   attempt, not a delay of tens of seconds.
//! - **A GoAway**: the hub's retry-after, honoured, plus a share of the
//!   spread (the hub jitters in whole seconds; this spreads each second).

use std::time::Duration;

/// The default spread of the first attempt after a lost session.
pub const DEFAULT_SPREAD: Duration = Duration::from_secs(1);

/// The reconnect state of one link.
#[derive(Debug, Clone)]
pub struct Reconnect {
    min: Duration,
    max: Duration,
    spread: Duration,
    addresses: usize,
    /// Attempts failed in the current round over the addresses.
    failed_in_round: usize,
    /// Whole rounds failed since the last Welcome.
    rounds: u32,
}

impl Reconnect {
    /// Backoff from `min` to `max` over `addresses` hub addresses; the
    /// first attempt after a lost session within `spread` (at most `max`).
    pub fn new(min: Duration, max: Duration, spread: Duration, addresses: usize) -> Self {
        Self {
            min,
            max: max.max(min),
            spread: spread.min(max.max(min)),
            addresses: addresses.max(1),
            failed_in_round: 0,
            rounds: 0,
        }
    }

    /// A session was welcomed: the hub is back, the next failure starts
    /// from the shortest delay.
    pub fn welcomed(&mut self) {
        self.failed_in_round = 0;
        self.rounds = 0;
    }

    /// The welcomed session ended: the wait before the first attempt.
    pub fn after_lost_session(&mut self, unit: f64) -> Duration {
        self.welcomed();
        self.spread.mul_f64(clamp_unit(unit))
    }

    /// An attempt failed: the wait before the next (which goes to the next
    /// address).
    pub fn after_failed_attempt(&mut self, unit: f64) -> Duration {
        self.failed_in_round += 1;
        if self.failed_in_round < self.addresses {
            return self.min.mul_f64(clamp_unit(unit));
        }
        self.failed_in_round = 0;
        let cap = self
            .min
            .saturating_mul(2u32.saturating_pow(self.rounds.min(31)))
            .min(self.max);
        self.rounds = self.rounds.saturating_add(1);
        cap.mul_f64(clamp_unit(unit))
    }

    /// The hub said go away, come back after `retry_after`.
    pub fn after_go_away(&mut self, retry_after: Duration, unit: f64) -> Duration {
        self.failed_in_round = 0;
        retry_after + self.spread.mul_f64(clamp_unit(unit))
    }
}

fn clamp_unit(unit: f64) -> f64 {
    if unit.is_finite() {
        unit.clamp(0.0, 1.0)
    } else {
        1.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Duration = Duration::from_millis(200);
    const MAX: Duration = Duration::from_secs(30);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_lost_session_comes_back_within_the_spread_whatever_came_before() {
        let mut r = Reconnect::new(MIN, MAX, DEFAULT_SPREAD, 1);
        // Many failures grew the backoff...
        for _ in 0..20 {
            r.after_failed_attempt(0.5);
        }
        r.welcomed();
        // ...a Welcome and a loss later, the first attempt is inside the
        // spread: never the cap.
        assert_eq!(r.after_lost_session(0.0), Duration::ZERO);
        assert_eq!(r.after_lost_session(0.5), ms(500));
        assert_eq!(r.after_lost_session(1.0), DEFAULT_SPREAD);
        assert_eq!(r.after_lost_session(f64::NAN), DEFAULT_SPREAD);
    }

    #[test]
    fn the_spread_keeps_spokes_apart() {
        // The thundering-herd protection: 1,000 spokes losing their
        // replica at one instant draw their first attempts over the whole
        // window, not at one point.
        let mut r = Reconnect::new(MIN, MAX, DEFAULT_SPREAD, 1);
        let mut per_100ms = [0u32; 10];
        for i in 0..1000 {
            let unit = (i as f64 + 0.5) / 1000.0;
            let wait = r.after_lost_session(unit);
            assert!(wait <= DEFAULT_SPREAD);
            per_100ms[(wait.as_millis() / 100).min(9) as usize] += 1;
        }
        assert!(per_100ms.iter().all(|n| *n == 100), "{per_100ms:?}");
    }

    #[test]
    fn quick_restarts_of_the_hub_never_grow_the_wait_after_a_lost_session() {
        // The hub restarts again right after each Welcome (one address):
        // a couple of failed dials per outage, then back; each loss after
        // a Welcome starts inside the spread, not at a grown backoff.
        let mut r = Reconnect::new(MIN, MAX, DEFAULT_SPREAD, 1);
        for _ in 0..6 {
            assert!(r.after_lost_session(1.0) <= DEFAULT_SPREAD);
            assert_eq!(r.after_failed_attempt(1.0), MIN);
            assert_eq!(r.after_failed_attempt(1.0), ms(400));
            r.welcomed();
        }
    }

    #[test]
    fn the_spread_is_bounded_by_the_cap() {
        let mut r = Reconnect::new(MIN, ms(500), Duration::from_secs(5), 1);
        assert_eq!(r.after_lost_session(1.0), ms(500));
    }

    #[test]
    fn with_one_address_each_failure_doubles_the_cap() {
        let mut r = Reconnect::new(MIN, MAX, DEFAULT_SPREAD, 1);
        let caps: Vec<Duration> = (0..10).map(|_| r.after_failed_attempt(1.0)).collect();
        assert_eq!(
            caps[..5],
            [ms(200), ms(400), ms(800), ms(1600), ms(3200)],
            "{caps:?}"
        );
        assert_eq!(caps[9], MAX);
        // Full jitter: anywhere under the cap.
        assert_eq!(r.after_failed_attempt(0.0), Duration::ZERO);
        assert_eq!(r.after_failed_attempt(0.25), MAX / 4);
    }

    #[test]
    fn a_dead_replica_costs_one_short_attempt_not_a_longer_backoff() {
        // Three addresses, one of them gone: each failure on the way round
        // moves on after at most `min`; only a whole failed round grows.
        let mut r = Reconnect::new(MIN, MAX, DEFAULT_SPREAD, 3);
        assert_eq!(r.after_failed_attempt(1.0), MIN, "next address");
        assert_eq!(r.after_failed_attempt(1.0), MIN, "the third");
        assert_eq!(r.after_failed_attempt(1.0), MIN, "round 1 failed: the cap");
        assert_eq!(r.after_failed_attempt(1.0), MIN);
        assert_eq!(r.after_failed_attempt(1.0), MIN);
        assert_eq!(r.after_failed_attempt(1.0), ms(400), "round 2 failed");
        // Ten rounds of everything failing still stop at the cap.
        for _ in 0..30 {
            assert!(r.after_failed_attempt(1.0) <= MAX);
        }
        assert_eq!(r.after_failed_attempt(1.0), MIN, "within a round");
        // Back: a Welcome resets the rounds.
        r.welcomed();
        r.after_failed_attempt(1.0);
        r.after_failed_attempt(1.0);
        assert_eq!(r.after_failed_attempt(1.0), MIN);
    }

    #[test]
    fn a_go_away_waits_at_least_the_retry_after() {
        let mut r = Reconnect::new(MIN, MAX, DEFAULT_SPREAD, 2);
        let after = Duration::from_secs(3);
        assert_eq!(r.after_go_away(after, 0.0), after);
        assert_eq!(r.after_go_away(after, 0.5), after + ms(500));
        assert_eq!(r.after_go_away(Duration::ZERO, 1.0), DEFAULT_SPREAD);
    }
}
