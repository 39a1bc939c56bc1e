//! Placement as a pure decision: which enrolled cluster takes a revision,
//! from what the clusters' spokes reported (state, labels, capabilities,
//! capacity), or why none does, cluster by cluster. No I/O: the deploy
//! (`service/revisions.rs`) and the pipeline's Place step gather the
//! clusters and the revision's request and act on the outcome.
//!
//! Each cluster is judged on its own by [`why_not`] (one reason, the first
//! that applies); [`choose_cluster`] orders the clusters nothing rules out
//! by the placement's rule (pinned, preference list, spread, pack, or name)
//! and [`unplaced_reason`] says why each of the others was left out.

use std::collections::BTreeMap;
use std::fmt;

use clawfed_proto::capability::Needs;
use clawfed_proto::capacity::Resources;

use crate::model::{Cluster, ConnectionState, Placement as Spec, Spread};

/// What a revision asks of the cluster it is placed on.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub placement: &'a Spec,
    /// What its spoke must advertise ([`super::needs`]).
    pub needs: Needs,
    /// What its Harness requests of a node
    /// (`worker::rollout::spec::harness_demand`).
    pub demand: Resources,
}

impl<'a> Request<'a> {
    /// A request for `placement` that needs nothing of the driver and
    /// requests nothing (placement by name and label alone).
    pub fn anywhere(placement: &'a Spec) -> Self {
        Self {
            placement,
            needs: Needs::default(),
            demand: Resources::default(),
        }
    }
}

/// Why one cluster does not take the revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// The placement pins another cluster.
    NotPinned,
    /// The placement lists its clusters, and not this one.
    NotListed,
    /// It lacks (or has another value for) these selector labels.
    Labels(BTreeMap<String, String>),
    /// Cordoned (`clusters cordon`, or a drain): it takes no new revision.
    Cordoned,
    /// Not online (pending: never connected; offline; revoked).
    State(ConnectionState),
    /// Its spoke does not advertise what the revision needs (final: no
    /// report changes it while the spoke stays as it is).
    Capability(String),
    /// Its free capacity is less than the revision requests.
    DoesNotFit { needs: Resources, free: Resources },
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::NotPinned => f.write_str("not the pinned cluster"),
            Reason::NotListed => f.write_str("not in the preference list"),
            Reason::Labels(missing) => {
                let pairs: Vec<String> = missing.iter().map(|(k, v)| format!("{k}={v}")).collect();
                write!(f, "does not carry the labels {}", pairs.join(","))
            }
            Reason::Cordoned => f.write_str("is cordoned"),
            Reason::State(ConnectionState::Pending) => f.write_str("has not connected yet"),
            Reason::State(state) => write!(f, "is {}", state.as_str()),
            Reason::Capability(why) => f.write_str(why),
            Reason::DoesNotFit { needs, free } => {
                write!(f, "does not fit: needs {needs}, has {free} free")
            }
        }
    }
}

/// Why `cluster` does not take a revision asking `req`, or `None` when it
/// can. The first reason that applies, in this order: pinned / listed,
/// labels, cordoned, connection state, capability, fit.
///
/// A pinned cluster need not be online (the operator chose it; its work
/// waits in the outbox, as it always has). A cluster that has not reported
/// its capacity (a spoke of an older version, or the file ledger, never
/// does) is taken as fitting: refusing it would strand every Agent of an
/// installation whose spokes predate capacity reports; spread and pack
/// rank it after the clusters known to fit.
pub fn why_not(cluster: &Cluster, req: &Request<'_>) -> Option<Reason> {
    let p = req.placement;
    let pinned = p.cluster.as_deref();
    if pinned.is_some_and(|name| name != cluster.name) {
        return Some(Reason::NotPinned);
    }
    if !p.clusters.is_empty() && !p.clusters.contains(&cluster.name) {
        return Some(Reason::NotListed);
    }
    let missing: BTreeMap<String, String> = p
        .cluster_selector
        .iter()
        .filter(|(k, v)| cluster.labels.get(*k) != Some(*v))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if !missing.is_empty() {
        return Some(Reason::Labels(missing));
    }
    if cluster.cordoned() {
        return Some(Reason::Cordoned);
    }
    if pinned.is_none() && cluster.connection_state != ConnectionState::Online {
        return Some(Reason::State(cluster.connection_state));
    }
    if let Some(why) = super::cannot_serve(cluster, req.needs) {
        return Some(Reason::Capability(why));
    }
    if let Some(c) = &cluster.capacity {
        let free: Resources = c.free.into();
        if !req.demand.fits_in(free) {
            return Some(Reason::DoesNotFit {
                needs: req.demand,
                free,
            });
        }
    }
    None
}

/// The outcome of placement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement<'a> {
    /// The cluster the placement's rule picks among those that can take it.
    Chosen(&'a Cluster),
    /// Every cluster the placement names or selects that is online cannot
    /// serve the revision (its spoke lacks a capability): why.
    Refused(String),
    /// No cluster can take it now; waiting may change that.
    Unavailable,
}

/// Placement: among the clusters [`why_not`] leaves, the first in the
/// placement's order: the pinned one; the preference list's order; with a
/// selector and `spread`, the most free capacity left after placing
/// (`pack`: the least), clusters that reported none last; otherwise the
/// order given (by name, from the store). The deploy and the pipeline both
/// place with this.
pub fn choose_cluster<'a>(clusters: &'a [Cluster], req: &Request<'_>) -> Placement<'a> {
    let mut fits: Vec<&Cluster> = Vec::new();
    let mut refusals = Vec::new();
    let mut waiting = false;
    for c in clusters {
        match why_not(c, req) {
            None => fits.push(c),
            Some(Reason::Capability(why)) => refusals.push(why),
            // Only clusters the placement names or selects could change
            // their mind by waiting.
            Some(Reason::State(_) | Reason::Cordoned | Reason::DoesNotFit { .. }) => waiting = true,
            Some(_) => {}
        }
    }
    let p = req.placement;
    if !p.clusters.is_empty() {
        fits.sort_by_key(|c| p.clusters.iter().position(|n| *n == c.name));
    } else if let Some(spread) = p.spread {
        // Stable: equal scores keep the store's name order.
        fits.sort_by(|a, b| {
            let (sa, sb) = (room_after(a, req.demand), room_after(b, req.demand));
            // Unknown capacity last, whichever the direction.
            match (sa, sb) {
                (Some(x), Some(y)) => match spread {
                    Spread::Spread => y.total_cmp(&x),
                    Spread::Pack => x.total_cmp(&y),
                },
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (None, None) => std::cmp::Ordering::Equal,
            }
        });
    }
    if let Some(c) = fits.first() {
        return Placement::Chosen(c);
    }
    if !refusals.is_empty() && !waiting {
        return Placement::Refused(refusals.join("; "));
    }
    Placement::Unavailable
}

/// The share of `c`'s allocatable that stays free once `demand` is placed
/// there: the scarcer of CPU and memory (0 to 1). `None` without a report.
fn room_after(c: &Cluster, demand: Resources) -> Option<f64> {
    let k = c.capacity.as_ref()?;
    let share = |free: i64, need: i64, total: i64| {
        if total <= 0 {
            0.0
        } else {
            (free - need) as f64 / total as f64
        }
    };
    Some(
        share(
            k.free.cpu_millis,
            demand.cpu_millis,
            k.allocatable.cpu_millis,
        )
        .min(share(
            k.free.memory_bytes,
            demand.memory_bytes,
            k.allocatable.memory_bytes,
        )),
    )
}

/// How every reason of a revision still waiting for a cluster begins
/// ([`unplaced_reason`]).
pub const WAITING_FOR_PLACEMENT: &str = "waiting for placement";

/// Why no cluster takes a revision asking `req` (for
/// [`Placement::Unavailable`]), so the revision says so instead of an
/// unexplained `pending`: none enrolled, none carrying the selector's
/// labels, or each cluster the placement names or selects with its own
/// reason (offline, revoked, not connected yet, a capability it lacks,
/// does not fit: needs X, has Y).
pub fn unplaced_reason(clusters: &[Cluster], req: &Request<'_>) -> String {
    if clusters.is_empty() {
        return format!("{WAITING_FOR_PLACEMENT}: no execution cluster is enrolled");
    }
    let p = req.placement;
    // The clusters the placement names (pinned, listed) or may select.
    let considered: Vec<(&Cluster, Reason)> = clusters
        .iter()
        .filter_map(|c| why_not(c, req).map(|r| (c, r)))
        .filter(|(_, r)| !matches!(r, Reason::NotPinned | Reason::NotListed))
        .collect();
    if considered.is_empty() {
        return match (&p.cluster, p.clusters.is_empty()) {
            (Some(name), _) => {
                format!("{WAITING_FOR_PLACEMENT}: the pinned cluster {name} is not enrolled")
            }
            (None, false) => format!(
                "{WAITING_FOR_PLACEMENT}: none of the preferred clusters {} is enrolled",
                p.clusters.join(", ")
            ),
            (None, true) => format!("{WAITING_FOR_PLACEMENT}: no cluster can take the revision"),
        };
    }
    if considered
        .iter()
        .all(|(_, r)| matches!(r, Reason::Labels(_)))
    {
        let wanted: Vec<String> = p
            .cluster_selector
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        return format!(
            "{WAITING_FOR_PLACEMENT}: none of the {} enrolled clusters carries the labels {}",
            considered.len(),
            wanted.join(",")
        );
    }
    let matching: Vec<&(&Cluster, Reason)> = considered
        .iter()
        .filter(|(_, r)| !matches!(r, Reason::Labels(_)))
        .collect();
    // Only connection states and cordons keep the matching clusters out:
    // name those alone; otherwise every cluster with its reason. (A fit
    // reason has commas of its own: `; ` between those.)
    let offline = matching
        .iter()
        .all(|(_, r)| matches!(r, Reason::State(_) | Reason::Cordoned));
    let (what, named, sep) = match offline {
        true => (
            "no matching cluster is online and uncordoned",
            matching,
            ", ",
        ),
        false => (
            "no cluster can take the revision",
            considered.iter().collect(),
            "; ",
        ),
    };
    let each: Vec<String> = named
        .iter()
        .map(|(c, r)| match r {
            // cannot_serve's text names the cluster itself.
            Reason::Capability(why) => why.clone(),
            r => format!("{} {r}", c.name),
        })
        .collect();
    format!("{WAITING_FOR_PLACEMENT}: {what} ({})", each.join(sep))
}

#[cfg(test)]
mod tests;
