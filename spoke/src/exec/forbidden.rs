//! The 403 window, pure: a target's work refused with 403 is held as
//! transient (retried) until that target's work of the same generation has
//! been refused for the window; any other outcome ends the run of
//! refusals. The time is passed in, so the rule is tested without a clock.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::outcome::Failure;

/// Per target: the generation and when its work was first refused with
/// 403 in the current run of refusals.
#[derive(Debug, Default)]
pub(super) struct ForbiddenRuns {
    since: HashMap<String, (i64, Instant)>,
}

impl ForbiddenRuns {
    /// `target`'s work succeeded: its run of refusals (if any) ends.
    pub(super) fn succeeded(&mut self, target: &str) {
        self.since.remove(target);
    }

    /// `target`'s work of `generation` failed with `f` at `now`: a 403
    /// within `window` of the first 403 of this run (same generation) is
    /// made transient, its reason saying so; past the window it stays
    /// final and the run ends. Any other failure ends the run.
    pub(super) fn failed(
        &mut self,
        target: &str,
        generation: i64,
        mut f: Failure,
        now: Instant,
        window: Duration,
    ) -> Failure {
        if !f.forbidden || f.transient {
            self.since.remove(target);
            return f;
        }
        let first = match self.since.get(target) {
            Some((g, at)) if *g == generation => *at,
            _ => {
                self.since.insert(target.to_owned(), (generation, now));
                now
            }
        };
        if now.duration_since(first) < window {
            f.transient = true;
            f.reason = format!(
                "{} (retrying for up to {}s: an apiserver that just restarted refuses until its authorizer has synced)",
                f.reason,
                window.as_secs()
            );
        } else {
            self.since.remove(target);
        }
        f
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn forbidden() -> Failure {
        Failure {
            reason: "forbidden".into(),
            transient: false,
            forbidden: true,
        }
    }

    const WINDOW: Duration = Duration::from_secs(30);

    #[test]
    fn a_403_is_retried_within_the_window_and_final_after_it() {
        let t0 = Instant::now();
        let mut runs = ForbiddenRuns::default();
        let f = runs.failed("ns/a", 1, forbidden(), t0, WINDOW);
        assert!(
            f.transient && f.reason.contains("retrying for up to 30s"),
            "{f:?}"
        );
        let f = runs.failed("ns/a", 1, forbidden(), t0 + WINDOW / 2, WINDOW);
        assert!(f.transient);
        let f = runs.failed("ns/a", 1, forbidden(), t0 + WINDOW, WINDOW);
        assert!(!f.transient && f.reason == "forbidden", "{f:?}");
        // The run ended: the next 403 starts a new window.
        let f = runs.failed("ns/a", 1, forbidden(), t0 + WINDOW * 2, WINDOW);
        assert!(f.transient);
    }

    #[test]
    fn a_new_generation_or_a_success_starts_over() {
        let t0 = Instant::now();
        let mut runs = ForbiddenRuns::default();
        runs.failed("ns/a", 1, forbidden(), t0, WINDOW);
        // Generation 2's first 403 comes after generation 1's window.
        let f = runs.failed("ns/a", 2, forbidden(), t0 + WINDOW * 2, WINDOW);
        assert!(f.transient);
        runs.succeeded("ns/a");
        let f = runs.failed("ns/a", 2, forbidden(), t0 + WINDOW * 4, WINDOW);
        assert!(f.transient);
        // Another target has its own run.
        let f = runs.failed("ns/b", 1, forbidden(), t0 + WINDOW * 4, WINDOW);
        assert!(f.transient);
    }

    #[test]
    fn other_failures_pass_through_and_end_the_run() {
        let t0 = Instant::now();
        let mut runs = ForbiddenRuns::default();
        runs.failed("ns/a", 1, forbidden(), t0, WINDOW);
        let other = Failure {
            reason: "invalid".into(),
            transient: false,
            forbidden: false,
        };
        let f = runs.failed("ns/a", 1, other, t0 + WINDOW / 2, WINDOW);
        assert!(!f.transient && f.reason == "invalid");
        // A 403 after the run ended opens a new window.
        let f = runs.failed("ns/a", 1, forbidden(), t0 + WINDOW * 3, WINDOW);
        assert!(f.transient);
    }
}
