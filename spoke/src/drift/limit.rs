//! Per-object repair budget (pure; time is passed in).
//!
//! Each object has a token bucket: a few repairs at once, then one per
//! refill interval. An object that drifts again with an empty bucket is
//! *contested* (another controller is fighting the spoke): it is reported,
//! and looked at again only after an exponentially growing backoff, with at
//! most one repair per look, so a fight costs a bounded number of writes
//! instead of a loop (the burst, then one per doubling backoff: 11 in a
//! 5-minute fight with the default budget). The fight ends only when the
//! object stays as desired until its bucket is full again.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

use tokio::time::Instant;

/// Budget settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Repairs allowed back to back.
    pub burst: u32,
    /// One more repair per this interval.
    pub refill: Duration,
    /// First backoff of a contested object; doubles per strike.
    pub backoff: Duration,
    /// Longest backoff.
    pub max_backoff: Duration,
}

impl Default for Budget {
    fn default() -> Self {
        // A fight is another writer undoing a repair within moments, again
        // and again; unrelated drifts of one object seconds apart are not.
        // Five at once, then one per 5 s, tells them apart: a controller
        // reverting at its own pace empties the bucket in well under a
        // second, while random drift at 100/s over 1,000 revisions (about
        // 2 per Deployment in 30 s) almost never does.
        Budget {
            burst: 5,
            refill: Duration::from_secs(5),
            backoff: Duration::from_secs(2),
            max_backoff: Duration::from_secs(300),
        }
    }
}

/// What to do with a drifted object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Repair it now.
    Repair,
    /// Out of budget: do not write; look again after `retry_after`.
    /// `first` is true when the object just became contested.
    Contested {
        /// When to look again.
        retry_after: Duration,
        /// The first strike of this fight (report it).
        first: bool,
    },
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
    strikes: u32,
}

/// The budgets of every object that drifted recently.
#[derive(Debug)]
pub struct Limiter<K> {
    budget: Budget,
    buckets: HashMap<K, Bucket>,
}

impl<K: Hash + Eq + Clone> Limiter<K> {
    /// A limiter with `budget`.
    pub fn new(budget: Budget) -> Self {
        Limiter {
            budget,
            buckets: HashMap::new(),
        }
    }

    fn refilled(&self, b: Bucket, now: Instant) -> Bucket {
        let per = self.budget.refill.as_secs_f64().max(1e-3);
        let gained = now.saturating_duration_since(b.at).as_secs_f64() / per;
        Bucket {
            tokens: (b.tokens + gained).min(f64::from(self.budget.burst)),
            at: now,
            strikes: b.strikes,
        }
    }

    /// Decides for `key`, drifted at `now`.
    pub fn admit(&mut self, key: &K, now: Instant) -> Verdict {
        let full = Bucket {
            tokens: f64::from(self.budget.burst),
            at: now,
            strikes: 0,
        };
        let b = self.refilled(*self.buckets.get(key).unwrap_or(&full), now);
        let (b, verdict) = if b.tokens >= 1.0 {
            // A contested object gets one repair per look, not the tokens
            // saved up during its backoff: the fighter would undo each.
            let tokens = if b.strikes > 0 { 0.0 } else { b.tokens - 1.0 };
            (Bucket { tokens, ..b }, Verdict::Repair)
        } else {
            let strikes = b.strikes + 1;
            let factor = 2u32.saturating_pow(strikes - 1);
            let retry_after = self
                .budget
                .backoff
                .saturating_mul(factor)
                .min(self.budget.max_backoff);
            (
                Bucket { strikes, ..b },
                Verdict::Contested {
                    retry_after,
                    first: strikes == 1,
                },
            )
        };
        self.buckets.insert(key.clone(), b);
        verdict
    }

    /// `key` was seen in its desired state at `now`. The fight (if any) is
    /// over only once the bucket has refilled, i.e. the object stayed as
    /// desired for `burst` refill intervals: then it is forgotten, so
    /// memory holds only recent drift. Until then the strikes stay, or a
    /// fighter that reverts every repair would reset the backoff with the
    /// repair's own watch event and cost one write per refill forever.
    pub fn settled(&mut self, key: &K, now: Instant) {
        let Some(b) = self.buckets.get(key).copied() else {
            return;
        };
        let b = self.refilled(b, now);
        if b.tokens >= f64::from(self.budget.burst) {
            self.buckets.remove(key);
        } else {
            self.buckets.insert(key.clone(), b);
        }
    }

    /// Whether `key` is contested right now.
    pub fn contested(&self, key: &K) -> bool {
        self.buckets.get(key).is_some_and(|b| b.strikes > 0)
    }

    /// Objects with a budget entry.
    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    /// True when no object has an entry.
    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_contested_with_growing_backoff_then_refill() {
        let b = Budget::default();
        let mut l = Limiter::new(b);
        let now = Instant::now();
        for _ in 0..b.burst {
            assert_eq!(l.admit(&"d", now), Verdict::Repair);
        }
        assert_eq!(
            l.admit(&"d", now),
            Verdict::Contested {
                retry_after: Duration::from_secs(2),
                first: true
            }
        );
        assert!(l.contested(&"d"));
        assert_eq!(
            l.admit(&"d", now),
            Verdict::Contested {
                retry_after: Duration::from_secs(4),
                first: false
            }
        );
        // Another object has its own budget.
        assert_eq!(l.admit(&"s", now), Verdict::Repair);
        // One refill interval later: one more repair.
        let later = now + b.refill;
        assert_eq!(l.admit(&"d", later), Verdict::Repair);
        assert!(matches!(l.admit(&"d", later), Verdict::Contested { .. }));
        // Settled and refilled: forgotten.
        l.settled(&"d", later + b.refill * b.burst);
        assert!(!l.contested(&"d"));
        l.settled(&"s", later + b.refill * b.burst);
        assert!(l.is_empty());
    }

    /// A controller that reverts every repair at once, for 5 minutes, with
    /// the default budget: the repair's own watch event (`settled`) does not
    /// end the fight, so the backoff keeps growing and the fight costs a
    /// handful of writes (the burst, then one per doubling backoff), not one
    /// per refill interval.
    #[test]
    fn a_five_minute_fight_costs_a_small_bounded_number_of_writes() {
        let b = Budget::default();
        let mut l = Limiter::new(b);
        let start = Instant::now();
        let end = start + Duration::from_secs(300);
        let (mut at, mut writes) = (start, 0);
        while at <= end {
            match l.admit(&"d", at) {
                Verdict::Repair => {
                    writes += 1;
                    // The repair's own event, then the fighter reverts.
                    l.settled(&"d", at + Duration::from_millis(10));
                    at += Duration::from_millis(50);
                }
                Verdict::Contested { retry_after, .. } => at += retry_after,
            }
        }
        assert!(writes <= b.burst + 8, "{writes} writes in a 5-minute fight");
        assert!(l.contested(&"d"), "still contested while it fights");
        // The fight ends: once the object stays as desired until the
        // bucket is full again, it is forgotten.
        l.settled(&"d", end + b.refill * b.burst);
        assert!(!l.contested(&"d") && l.is_empty());
    }

    #[test]
    fn backoff_is_capped() {
        let mut l = Limiter::new(Budget {
            burst: 1,
            ..Budget::default()
        });
        let now = Instant::now();
        assert_eq!(l.admit(&1, now), Verdict::Repair);
        let mut last = Duration::ZERO;
        for _ in 0..40 {
            if let Verdict::Contested { retry_after, .. } = l.admit(&1, now) {
                last = retry_after;
            }
        }
        assert_eq!(last, Duration::from_secs(300));
    }
}
