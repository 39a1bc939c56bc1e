//! Failover with fencing: the one rule both sides derive their periods
//! from.
//!
//! An Agent with `failover.afterSeconds = F` runs under an execution lease
//! its spoke renews over the link. The spoke asks for a renewal in a
//! heartbeat (`Heartbeat.renew_sequence`); the hub records the time it
//! received it, on the database's clock, and only then answers
//! (`Heartbeat.renewed_sequence`). The spoke's lease runs [`Periods::fence_after`]
//! from the moment it *sent* the newest answered renewal, on its own
//! monotonic clock; once it lapses the spoke stops (fences) the Harness
//! itself. The hub re-places the Agent only [`Periods::replace_after`] after
//! the renewal it *recorded*. The send happens before the receipt, and the
//! receipt before the record, so the spoke has fenced before the hub moves,
//! whatever the offset between their clocks: each side measures a duration
//! from an event of its own. The margin between the two periods covers what
//! durations cannot: the fenced Pods' termination
//! ([`FENCE_GRACE`]), the fence's own writes, and clock rate drift.

use std::time::Duration;

/// The shortest `failover.afterSeconds`: a few heartbeats, so one slow
/// renewal does not fence a healthy cluster.
pub const MIN_AFTER_SECONDS: u32 = 10;
/// The longest `failover.afterSeconds` (a day).
pub const MAX_AFTER_SECONDS: u32 = 86_400;

/// The grace period the spoke deletes a fenced Harness's Pods with: the
/// runtime gets SIGTERM at once and is killed after this.
pub const FENCE_GRACE: Duration = Duration::from_secs(5);

/// Time for the fence's own writes (its record, the workload's deletion)
/// to reach the apiserver and the kubelet to act on them.
pub const FENCE_SETTLE: Duration = Duration::from_secs(5);

/// Clock rate drift allowed between the spoke's monotonic clock and the
/// database's, in parts per thousand of F (20 ‰: far above any real
/// oscillator's, which drift by parts per million).
pub const RATE_ALLOWANCE_PER_MILLE: u32 = 20;

/// How long a spoke restarted without a renewed lease keeps a
/// failover-enabled Harness running before it fences it, when that is
/// shorter than F: it cannot know how long it was down, so it does not
/// count on the lease it had.
pub const RESTART_GRACE: Duration = Duration::from_secs(10);

/// The periods of one `failover.afterSeconds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Periods {
    /// The spoke fences this long after sending the newest renewal the hub
    /// answered.
    pub fence_after: Duration,
    /// The hub re-places this long after the newest renewal it recorded.
    pub replace_after: Duration,
}

/// The periods for `after_seconds` (clamped into
/// [`MIN_AFTER_SECONDS`]..=[`MAX_AFTER_SECONDS`]).
pub fn periods(after_seconds: u32) -> Periods {
    let f = after_seconds.clamp(MIN_AFTER_SECONDS, MAX_AFTER_SECONDS);
    let fence_after = Duration::from_secs(u64::from(f));
    let drift = fence_after * RATE_ALLOWANCE_PER_MILLE / 1000;
    Periods {
        fence_after,
        replace_after: fence_after + FENCE_GRACE + FENCE_SETTLE + drift,
    }
}

/// Why `after_seconds` is not a valid `failover.afterSeconds`.
pub fn check_after_seconds(after_seconds: u32) -> Result<(), String> {
    if (MIN_AFTER_SECONDS..=MAX_AFTER_SECONDS).contains(&after_seconds) {
        Ok(())
    } else {
        Err(format!(
            "{after_seconds} is outside {MIN_AFTER_SECONDS}..={MAX_AFTER_SECONDS}"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hub_waits_past_the_fence_and_its_termination_for_every_period() {
        for f in [
            0,
            1,
            MIN_AFTER_SECONDS,
            30,
            600,
            MAX_AFTER_SECONDS,
            u32::MAX,
        ] {
            let p = periods(f);
            assert!(p.fence_after >= Duration::from_secs(u64::from(MIN_AFTER_SECONDS)));
            // The margin covers the fenced Pods' grace and the fence's
            // writes, plus the drift allowance that grows with F.
            let margin = p.replace_after - p.fence_after;
            assert!(margin >= FENCE_GRACE + FENCE_SETTLE, "{f}: {margin:?}");
            assert!(margin >= p.fence_after / 50, "{f}: {margin:?}");
        }
        assert_eq!(periods(10).replace_after, Duration::from_millis(20_200));
    }

    #[test]
    fn after_seconds_is_bounded() {
        assert!(check_after_seconds(9).is_err());
        assert!(check_after_seconds(10).is_ok());
        assert!(check_after_seconds(86_400).is_ok());
        assert!(
            check_after_seconds(86_401)
                .unwrap_err()
                .contains("10..=86400")
        );
    }
}
