//! Spreading spoke sessions over hub replicas (pure: no I/O).
//!
//! Every replica with an advertised link address publishes it and its
//! session count (`hub_replicas`). The rule a platform engineer expects:
//! when a replica joins, the busier ones move their excess sessions to it.
//! Each replica, on its own jittered tick, compares what it holds with its
//! share, `ceil(total / live replicas)`; above `share + slack` it redirects
//! the excess (at most `max_moves` per tick: no stampede) to the replicas
//! below their share, the least loaded first. Each replica only sheds down
//! to its share, so replicas acting at once on the same view do not
//! overshoot by more than a tick's moves, and the next tick corrects it.
//!
//! A replica shutting down hands every session to the others the same way
//! (least loaded first, no cap), so its spokes do not all land on one.

use std::time::Duration;

/// Balancing settings of a replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BalanceConfig {
    /// How often a replica compares its load with its share (jittered by
    /// a quarter either way, so replicas do not act in step).
    pub interval: Duration,
    /// Sessions a replica may hold above its share before it moves any.
    pub slack: usize,
    /// Sessions moved per tick at most.
    pub max_moves: usize,
}

impl Default for BalanceConfig {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(30),
            slack: 2,
            max_moves: 10,
        }
    }
}

impl BalanceConfig {
    /// The wait before the next tick: `interval` scaled by `0.75 + unit/2`
    /// for `unit` in [0, 1).
    pub fn jittered(&self, unit: f64) -> Duration {
        self.interval.mul_f64(0.75 + unit.clamp(0.0, 1.0) / 2.0)
    }
}

/// A replica's load as published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaLoad {
    pub replica_id: String,
    /// Empty: it takes no redirects.
    pub advertise_url: String,
    pub sessions: usize,
}

/// Where `me`, holding `mine` sessions, should move sessions now: one
/// target address per session to move (empty: nothing to move). `live`
/// is every live replica as published (`me` among them or not; `mine`
/// is taken over its published count). `rotate` breaks ties between
/// equally loaded targets (pass something random, so replicas acting at
/// once pick different ones).
pub fn plan_moves(
    me: &str,
    mine: usize,
    live: &[ReplicaLoad],
    config: &BalanceConfig,
    rotate: usize,
) -> Vec<String> {
    let others: Vec<&ReplicaLoad> = live.iter().filter(|r| r.replica_id != me).collect();
    let total: usize = mine + others.iter().map(|r| r.sessions).sum::<usize>();
    let replicas = others.len() + 1;
    let share = total.div_ceil(replicas);
    if mine <= share + config.slack {
        return Vec::new();
    }
    let excess = (mine - share).min(config.max_moves);
    fill(&others, excess, Some(share), rotate)
}

/// Where a replica shutting down sends its `sessions`: spread over the
/// others that take redirects, each to the least loaded at the time.
/// Fewer (or none) when no other replica advertises an address; those
/// sessions get no redirect and use their own address lists.
pub fn plan_handoff(me: &str, sessions: usize, live: &[ReplicaLoad], rotate: usize) -> Vec<String> {
    let others: Vec<&ReplicaLoad> = live.iter().filter(|r| r.replica_id != me).collect();
    fill(&others, sessions, None, rotate)
}

/// Assigns `n` sessions one at a time to the candidate (with an address)
/// holding the fewest, never above `cap`.
fn fill(candidates: &[&ReplicaLoad], n: usize, cap: Option<usize>, rotate: usize) -> Vec<String> {
    let mut loads: Vec<(&str, usize)> = candidates
        .iter()
        .filter(|r| !r.advertise_url.is_empty())
        .map(|r| (r.advertise_url.as_str(), r.sessions))
        .collect();
    if loads.is_empty() {
        return Vec::new();
    }
    let len = loads.len();
    loads.rotate_left(rotate % len);
    let mut planned = Vec::with_capacity(n);
    for _ in 0..n {
        // The first of the least loaded (after the rotation).
        let Some((i, _)) = loads
            .iter()
            .enumerate()
            .filter(|(_, (_, load))| cap.is_none_or(|c| *load < c))
            .min_by_key(|(i, (_, load))| (*load, *i))
        else {
            break;
        };
        loads[i].1 += 1;
        planned.push(loads[i].0.to_owned());
    }
    planned
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replica(id: &str, url: &str, sessions: usize) -> ReplicaLoad {
        ReplicaLoad {
            replica_id: id.into(),
            advertise_url: url.into(),
            sessions,
        }
    }

    fn config(slack: usize, max_moves: usize) -> BalanceConfig {
        BalanceConfig {
            interval: Duration::from_secs(1),
            slack,
            max_moves,
        }
    }

    fn count(plan: &[String], url: &str) -> usize {
        plan.iter().filter(|u| *u == url).count()
    }

    #[test]
    fn a_joining_replica_gets_the_excess_of_the_busy_ones() {
        // A and B hold 3 each; C joined with none: share ceil(6/3) = 2.
        let live = [
            replica("a", "https://a:1", 3),
            replica("b", "https://b:1", 3),
            replica("c", "https://c:1", 0),
        ];
        for me in ["a", "b"] {
            let plan = plan_moves(me, 3, &live, &config(0, 10), 0);
            assert_eq!(plan, ["https://c:1"], "{me} moves one to c");
        }
        // C itself moves nothing.
        assert!(plan_moves("c", 0, &live, &config(0, 10), 0).is_empty());
    }

    #[test]
    fn within_share_plus_slack_nothing_moves() {
        let live = [
            replica("a", "https://a:1", 5),
            replica("b", "https://b:1", 3),
        ];
        // Share 4: a is one over.
        assert!(plan_moves("a", 5, &live, &config(1, 10), 0).is_empty());
        assert_eq!(plan_moves("a", 5, &live, &config(0, 10), 0).len(), 1);
        // Balanced: nothing, with no slack either.
        let even = [
            replica("a", "https://a:1", 4),
            replica("b", "https://b:1", 4),
        ];
        assert!(plan_moves("a", 4, &even, &config(0, 10), 0).is_empty());
    }

    #[test]
    fn moves_per_tick_are_bounded() {
        let live = [
            replica("a", "https://a:1", 100),
            replica("b", "https://b:1", 0),
        ];
        let plan = plan_moves("a", 100, &live, &config(2, 10), 0);
        assert_eq!(plan.len(), 10);
        assert_eq!(count(&plan, "https://b:1"), 10);
    }

    #[test]
    fn targets_fill_least_loaded_first_and_stop_at_their_share() {
        // Total 30 over 3: share 10. a sheds 10, b takes 8, c takes 2.
        let live = [
            replica("a", "https://a:1", 20),
            replica("b", "https://b:1", 2),
            replica("c", "https://c:1", 8),
        ];
        let plan = plan_moves("a", 20, &live, &config(0, 50), 0);
        assert_eq!(plan.len(), 10);
        assert_eq!(count(&plan, "https://b:1"), 8);
        assert_eq!(count(&plan, "https://c:1"), 2);
    }

    #[test]
    fn replicas_without_an_address_count_but_take_nothing() {
        // d holds sessions and counts toward the share, but is no target.
        let live = [
            replica("a", "https://a:1", 9),
            replica("b", "https://b:1", 0),
            replica("d", "", 0),
        ];
        let plan = plan_moves("a", 9, &live, &config(0, 50), 0);
        assert_eq!(plan, ["https://b:1"; 3]);
        let nobody = [replica("a", "https://a:1", 9), replica("d", "", 0)];
        assert!(plan_moves("a", 9, &nobody, &config(0, 50), 0).is_empty());
    }

    #[test]
    fn my_own_count_is_the_fresh_one() {
        // Published 9 earlier, holds 3 now: nothing to move.
        let live = [
            replica("a", "https://a:1", 9),
            replica("b", "https://b:1", 3),
        ];
        assert!(plan_moves("a", 3, &live, &config(0, 10), 0).is_empty());
        // Not published yet: counted anyway.
        let without_me = [replica("b", "https://b:1", 0)];
        assert_eq!(plan_moves("a", 4, &without_me, &config(0, 10), 0).len(), 2);
    }

    #[test]
    fn ties_are_broken_by_the_rotation() {
        let live = [
            replica("a", "https://a:1", 4),
            replica("b", "https://b:1", 0),
            replica("c", "https://c:1", 0),
        ];
        // Share 2 (4 over 3 rounds up); a moves 2 either way, the first
        // to whichever the rotation puts first.
        let first = |rotate| plan_moves("a", 4, &live, &config(0, 1), rotate)[0].clone();
        assert_ne!(first(0), first(1));
    }

    #[test]
    fn a_handoff_spreads_over_the_others_least_loaded_first() {
        let live = [
            replica("a", "https://a:1", 6),
            replica("b", "https://b:1", 1),
            replica("c", "https://c:1", 3),
            replica("d", "", 0),
        ];
        let plan = plan_handoff("a", 6, &live, 0);
        assert_eq!(plan.len(), 6);
        // b is filled up to c's level first, then they alternate.
        assert_eq!(count(&plan, "https://b:1"), 4);
        assert_eq!(count(&plan, "https://c:1"), 2);
        assert!(plan_handoff("a", 6, &[replica("a", "https://a:1", 6)], 0).is_empty());
    }

    #[test]
    fn ticks_are_jittered_around_the_interval() {
        let c = BalanceConfig {
            interval: Duration::from_secs(40),
            ..BalanceConfig::default()
        };
        assert_eq!(c.jittered(0.0), Duration::from_secs(30));
        assert_eq!(c.jittered(0.5), Duration::from_secs(40));
        assert_eq!(c.jittered(1.0), Duration::from_secs(50));
    }
}
