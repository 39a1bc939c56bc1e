//! How the CLI prints: aligned tables for people, JSON or YAML for scripts.

use serde::Serialize;

use crate::model::{
    Agent, AgentRevision, AuditEvent, Cluster, Configuration, CredentialMeta, FleetSummary,
    Namespace, WorkItem,
};

/// Output format chosen with `-o`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Json,
    Yaml,
}

/// A value the CLI can show as table rows.
pub trait Tabular {
    /// Column headers.
    fn headers() -> &'static [&'static str];
    /// The row of this value.
    fn row(&self) -> Vec<String>;
}

fn opt<T: ToString>(v: &Option<T>) -> String {
    v.as_ref()
        .map_or_else(|| "-".to_owned(), ToString::to_string)
}

fn ago(t: chrono::DateTime<chrono::Utc>) -> String {
    let secs = (chrono::Utc::now() - t).num_seconds().max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

impl Tabular for Namespace {
    fn headers() -> &'static [&'static str] {
        &[
            "NAME",
            "STATE",
            "DATA-PLANE NAMESPACE",
            "ADOPTED",
            "CLUSTERS",
            "AGE",
        ]
    }
    fn row(&self) -> Vec<String> {
        let clusters = self
            .clusters
            .iter()
            .map(|c| format!("{}={}", c.cluster, c.state.as_str()))
            .collect::<Vec<_>>()
            .join(",");
        vec![
            self.name.clone(),
            self.state.as_str().into(),
            self.data_plane_namespace.clone(),
            self.adopted.to_string(),
            if clusters.is_empty() {
                "-".into()
            } else {
                clusters
            },
            ago(self.created_at),
        ]
    }
}

impl Tabular for crate::quota::QuotaItem {
    fn headers() -> &'static [&'static str] {
        &["QUOTA", "USED", "LIMIT"]
    }
    fn row(&self) -> Vec<String> {
        vec![self.name.clone(), self.used.to_string(), opt(&self.limit)]
    }
}

impl Tabular for Configuration {
    fn headers() -> &'static [&'static str] {
        &["NAME", "VERSION", "AGE"]
    }
    fn row(&self) -> Vec<String> {
        vec![
            self.name.clone(),
            self.version.to_string(),
            ago(self.created_at),
        ]
    }
}

impl Tabular for CredentialMeta {
    fn headers() -> &'static [&'static str] {
        &["KIND", "VERSION", "SET"]
    }
    fn row(&self) -> Vec<String> {
        vec![
            self.kind.clone(),
            self.version.to_string(),
            ago(self.set_at),
        ]
    }
}

impl Tabular for Agent {
    fn headers() -> &'static [&'static str] {
        &[
            "NAME", "HARNESS", "DESIRED", "ACTIVE", "LATEST", "VERSION", "AGE",
        ]
    }
    fn row(&self) -> Vec<String> {
        vec![
            self.name.clone(),
            self.spec.harness_kind.as_str().into(),
            self.desired_state.as_str().into(),
            opt(&self.active_revision),
            opt(&self.latest_revision),
            self.version.to_string(),
            ago(self.created_at),
        ]
    }
}

impl Tabular for AgentRevision {
    fn headers() -> &'static [&'static str] {
        &[
            "AGENT",
            "REVISION",
            "PHASE",
            "CLUSTER",
            "IMAGE",
            "REASON",
            "AGE",
            "STARTUP WARNINGS",
            "DRIFT",
        ]
    }
    fn row(&self) -> Vec<String> {
        vec![
            self.agent.clone(),
            self.number.to_string(),
            self.phase.as_str().into(),
            placed_on(self),
            self.spec.image.clone(),
            opt(&self.reason),
            ago(self.created_at),
            startup_warnings(self.readiness.as_ref()).unwrap_or_else(|| "-".into()),
            drift(self.drift.as_ref()),
        ]
    }
}

/// Where a revision runs; for one moved off a cluster (drain or
/// failover), from where and what became of its workspace: claims do not
/// move between clusters.
fn placed_on(r: &AgentRevision) -> String {
    let cluster = opt(&r.resolved_cluster);
    match &r.moved_from {
        Some(from) if r.resolved_cluster.as_ref() == Some(from) => {
            format!("{cluster} (moved back, workspace kept)")
        }
        Some(from) if r.resolved_cluster.is_some() => {
            format!("{cluster} (moved from {from}, fresh workspace)")
        }
        Some(from) => format!("- (moving from {from})"),
        None => cluster,
    }
}

/// A revision's drift as `N repaired[, contested], last <age> ago: <reason>`,
/// `-` when none was reported.
pub fn drift(d: Option<&crate::link::report::DriftReport>) -> String {
    let Some(d) = d else {
        return "-".into();
    };
    let contested = if d.contested > 0 { ", contested" } else { "" };
    let resent = if d.resends > 0 {
        format!(", {} resent by the hub", d.resends)
    } else {
        String::new()
    };
    let when = d.last_drift_at.map(ago).unwrap_or_else(|| "-".into());
    format!(
        "{} repaired{contested}{resent}, last {when}: {}",
        d.repairs, d.last_reason
    )
}

/// The plugin startup warnings of a readiness report, as
/// `selection:CODE, ...`; `None` when there are none.
pub fn startup_warnings(r: Option<&crate::link::report::ReadinessReport>) -> Option<String> {
    let warnings = &r?.startup_warnings;
    (!warnings.is_empty()).then(|| {
        warnings
            .iter()
            .map(|w| format!("{}:{}", w.selection, w.code))
            .collect::<Vec<_>>()
            .join(", ")
    })
}

impl Tabular for crate::model::ChatAnswer {
    fn headers() -> &'static [&'static str] {
        &["AGENT", "REVISION", "CONVERSATION", "MS", "ANSWER"]
    }
    fn row(&self) -> Vec<String> {
        vec![
            self.agent.clone(),
            self.revision.to_string(),
            self.conversation.clone(),
            self.elapsed_ms.to_string(),
            self.answer.clone(),
        ]
    }
}

impl Tabular for crate::model::Diagnosis {
    fn headers() -> &'static [&'static str] {
        &["COMPONENT", "POD", "CHECK", "STATUS", "DETAIL"]
    }
    fn row(&self) -> Vec<String> {
        // One row per check: see `diagnosis_rows`; a single-row view would
        // hide all but one.
        Vec::new()
    }
}

/// The checks of a diagnosis as table rows, Harness first.
pub fn diagnosis_rows(d: &crate::model::Diagnosis) -> Vec<Vec<String>> {
    [("harness", &d.harness), ("gateway", &d.gateway)]
        .into_iter()
        .flat_map(|(component, c)| {
            c.checks.iter().map(move |k| {
                vec![
                    component.to_owned(),
                    opt(&c.pod),
                    k.name.clone(),
                    k.status.clone(),
                    if k.detail.is_empty() {
                        "-".to_owned()
                    } else {
                        k.detail.clone()
                    },
                ]
            })
        })
        .collect()
}

impl Tabular for Cluster {
    fn headers() -> &'static [&'static str] {
        &["NAME", "STATE", "VERSION", "FREE", "OUTBOX", "LAST SEEN"]
    }
    fn row(&self) -> Vec<String> {
        vec![
            self.name.clone(),
            scheduling_state(self),
            self.version.clone(),
            capacity(self, |c| c.free),
            self.outbox_depth
                .map_or_else(|| "-".into(), |d| d.to_string()),
            self.last_seen
                .map_or_else(|| "-".into(), |t| format!("{} ago", ago(t))),
        ]
    }
}

/// One side of a cluster's reported capacity (`cpu 500m, memory 1Gi`),
/// `-` until its spoke reports.
fn capacity(
    c: &Cluster,
    side: impl Fn(&crate::model::ClusterCapacity) -> crate::model::ResourceAmounts,
) -> String {
    c.capacity.as_ref().map_or_else(
        || "-".into(),
        |k| clawfed_proto::capacity::Resources::from(side(k)).to_string(),
    )
}

/// A cluster's connection state, with `,cordoned` or `,draining` when
/// it takes no new revisions.
fn scheduling_state(c: &Cluster) -> String {
    let state = c.connection_state.as_str();
    match (c.draining(), c.cordoned()) {
        (true, _) => format!("{state},draining"),
        (false, true) => format!("{state},cordoned"),
        _ => state.into(),
    }
}

/// A cluster as `clusters get` shows it: what its spoke said of itself
/// and when its certificate expires.
#[derive(Debug, Serialize)]
#[serde(transparent)]
pub struct ClusterDetail(pub Cluster);

impl Tabular for ClusterDetail {
    fn headers() -> &'static [&'static str] {
        &[
            "NAME",
            "STATE",
            "VERSION",
            "PROVIDER",
            "CAPABILITIES",
            "CERTIFICATE EXPIRES",
            "LAST SEEN",
            "OUTBOX",
            "LABELS",
            "NODES",
            "ALLOCATABLE",
            "FREE",
        ]
    }
    fn row(&self) -> Vec<String> {
        let c = &self.0;
        vec![
            c.name.clone(),
            scheduling_state(c),
            if c.version.is_empty() {
                "-".into()
            } else {
                c.version.clone()
            },
            opt(&c.provider),
            if c.capabilities.is_empty() {
                "-".into()
            } else {
                c.capabilities.join(",")
            },
            expiry(c.certificate_expires_at, chrono::Utc::now()),
            c.last_seen
                .map_or_else(|| "-".into(), |t| format!("{} ago", ago(t))),
            c.outbox_depth.map_or_else(|| "-".into(), |d| d.to_string()),
            if c.labels.is_empty() {
                "-".into()
            } else {
                let pairs: Vec<String> = c.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
                pairs.join(",")
            },
            c.capacity
                .as_ref()
                .map_or_else(|| "-".into(), |k| k.nodes.to_string()),
            capacity(c, |k| k.allocatable),
            capacity(c, |k| k.free),
        ]
    }
}

/// A cluster's drain as `clusters drain` shows it: a line for the drain,
/// then a row per Agent (JSON and YAML: the cluster as REST answers it).
pub fn print_drain(format: Format, c: &Cluster) -> anyhow::Result<String> {
    if format != Format::Table {
        return print_one(format, c);
    }
    let Some(d) = &c.drain else {
        return Ok(format!("cluster {}: never drained\n", c.name));
    };
    let state = if d.finished_at.is_some() {
        "finished"
    } else {
        "draining"
    };
    let mut out = format!(
        "cluster {}: {state} (parallelism {})",
        c.name, d.parallelism
    );
    let agents = match &d.progress {
        Some(p) => {
            out.push_str(&format!(
                ": waiting {}, moving {}, moved {}, blocked {}, failed {}\n",
                p.waiting, p.moving, p.moved, p.blocked, p.failed
            ));
            p.agents.as_slice()
        }
        None => {
            out.push('\n');
            &[]
        }
    };
    let rows: Vec<Vec<String>> = agents
        .iter()
        .map(|a| {
            vec![
                a.namespace.clone(),
                a.agent.clone(),
                a.state.as_str().into(),
                opt(&a.from_revision),
                opt(&a.to_revision),
                opt(&a.to_cluster),
                a.workspace
                    .map_or_else(|| "-".into(), |w| w.as_str().into()),
                opt(&a.reason),
            ]
        })
        .collect();
    if !rows.is_empty() {
        out.push_str(&table(
            &[
                "NAMESPACE",
                "AGENT",
                "STATE",
                "FROM",
                "TO",
                "CLUSTER",
                "WORKSPACE",
                "REASON",
            ],
            &rows,
        ));
    }
    Ok(out)
}

/// A certificate expiry as a time and how far it is from `now`.
fn expiry(at: Option<chrono::DateTime<chrono::Utc>>, now: chrono::DateTime<chrono::Utc>) -> String {
    let Some(at) = at else {
        return "-".into();
    };
    let span = |secs: i64| match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    };
    let secs = (at - now).num_seconds();
    let when = at.format("%Y-%m-%dT%H:%M:%SZ");
    if secs >= 0 {
        format!("{when} (in {})", span(secs))
    } else {
        format!("{when} (EXPIRED {} ago)", span(-secs))
    }
}

impl Tabular for AuditEvent {
    fn headers() -> &'static [&'static str] {
        &[
            "TIME",
            "ACTOR",
            "ACTION",
            "NAMESPACE",
            "TARGET",
            "RESULT",
            "DETAIL",
        ]
    }
    fn row(&self) -> Vec<String> {
        vec![
            self.at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            self.actor.clone(),
            self.action.clone(),
            opt(&self.namespace),
            self.target.clone(),
            self.result.clone(),
            opt(&self.detail),
        ]
    }
}

impl Tabular for WorkItem {
    fn headers() -> &'static [&'static str] {
        &["ID", "KIND", "NAMESPACE", "STATE", "ATTEMPTS", "LAST ERROR"]
    }
    fn row(&self) -> Vec<String> {
        vec![
            self.id.clone(),
            self.kind.clone(),
            opt(&self.namespace),
            self.state.as_str().into(),
            format!("{}/{}", self.attempts, self.max_attempts),
            opt(&self.last_error),
        ]
    }
}

impl Tabular for FleetSummary {
    fn headers() -> &'static [&'static str] {
        &[
            "NAMESPACES",
            "AGENTS",
            "DESIRED RUNNING",
            "RUNNING",
            "NOT RUNNING",
            "STOPPED",
            "CLUSTERS",
            "ONLINE",
            "WORK PENDING",
            "WORK FAILED",
            "REVISIONS",
        ]
    }
    fn row(&self) -> Vec<String> {
        let phases = self
            .revisions_by_phase
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",");
        vec![
            self.namespaces.to_string(),
            self.agents.to_string(),
            self.agents_desired_running.to_string(),
            self.agents_running.to_string(),
            self.agents_not_running.to_string(),
            self.agents_stopped.to_string(),
            self.clusters.to_string(),
            self.clusters_online.to_string(),
            self.work_pending.to_string(),
            self.work_failed.to_string(),
            if phases.is_empty() {
                "-".into()
            } else {
                phases
            },
        ]
    }
}

/// Renders rows as a left-aligned table.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(padded.join("  ").trim_end());
        out.push('\n');
    };
    line(headers.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
    out
}

/// Prints a list in the chosen format.
pub fn print_list<T: Tabular + Serialize>(format: Format, items: &[T]) -> anyhow::Result<String> {
    Ok(match format {
        Format::Table => table(
            T::headers(),
            &items.iter().map(Tabular::row).collect::<Vec<_>>(),
        ),
        Format::Json => format!(
            "{}\n",
            serde_json::to_string_pretty(&serde_json::json!({ "items": items }))?
        ),
        Format::Yaml => serde_yaml_ng::to_string(&serde_json::json!({ "items": items }))?,
    })
}

/// Prints one object in the chosen format.
pub fn print_one<T: Tabular + Serialize>(format: Format, item: &T) -> anyhow::Result<String> {
    Ok(match format {
        Format::Table => table(T::headers(), &[item.row()]),
        Format::Json => format!("{}\n", serde_json::to_string_pretty(item)?),
        Format::Yaml => serde_yaml_ng::to_string(item)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 13: a revision's drift, as the spoke reported it, in one cell.
    #[test]
    fn drift_cell_names_count_contest_and_reason() {
        use clawfed_proto::link::v1 as pb;
        assert_eq!(drift(None), "-");
        let d = crate::link::report::DriftReport::from(pb::DriftReport {
            repairs: 3,
            contested: 1,
            last_drift_unix_millis: chrono::Utc::now().timestamp_millis(),
            last_reason: "Deployment ns/h: value of spec.replicas changed (field manager fighter)"
                .into(),
            ..Default::default()
        });
        assert!(d.last_drift_at.is_some());
        let cell = drift(Some(&d));
        assert!(cell.starts_with("3 repaired, contested, last "), "{cell}");
        assert!(cell.ends_with("(field manager fighter)"), "{cell}");
    }

    #[test]
    fn certificate_expiry_cell_says_when_and_how_far() {
        let now = chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        assert_eq!(expiry(None, now), "-");
        let soon = now + chrono::Duration::hours(30);
        assert_eq!(expiry(Some(soon), now), "2027-01-16T14:00:00Z (in 30h)");
        let week = now + chrono::Duration::days(7);
        assert!(expiry(Some(week), now).ends_with("(in 7d)"));
        let gone = now - chrono::Duration::minutes(5);
        assert_eq!(
            expiry(Some(gone), now),
            "2027-01-15T07:55:00Z (EXPIRED 5m ago)"
        );
    }

    #[test]
    fn tables_align_columns() {
        let out = table(
            &["NAME", "STATE"],
            &[
                vec!["a".into(), "active".into()],
                vec!["longer".into(), "-".into()],
            ],
        );
        assert_eq!(out, "NAME    STATE\na       active\nlonger  -\n");
    }
}
