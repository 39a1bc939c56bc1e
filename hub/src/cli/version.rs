//! `clawfed-hub version`: what an operator checks before and after an
//! upgrade. This binary's version and link contract, the database schema
//! beside this binary's migrations, and the spoke versions connected.

use std::cmp::Ordering;

use crate::model::{Cluster, ConnectionState};
use crate::store::SchemaStatus;

/// The report's lines. `clusters` is `None` when the schema does not match
/// this binary (its rows are not read then). Pure.
pub fn report(status: &SchemaStatus, clusters: Option<&[Cluster]>) -> String {
    let mut out = format!(
        "clawfed-hub {}\nlink contract: {}\ndatabase: {status}\n",
        env!("CARGO_PKG_VERSION"),
        clawfed_proto::link::CONTRACT
    );
    let Some(clusters) = clusters else {
        out.push_str("spokes: not read (the schema does not match this clawfed-hub)\n");
        return out;
    };
    // Revoked clusters never connect again; pending ones never did.
    let enrolled: Vec<&Cluster> = clusters
        .iter()
        .filter(|c| {
            matches!(
                c.connection_state,
                ConnectionState::Online | ConnectionState::Offline
            )
        })
        .collect();
    let versions: Vec<&str> = enrolled
        .iter()
        .map(|c| c.version.as_str())
        .filter(|v| !v.is_empty())
        .collect();
    match (
        versions.iter().copied().min_by(|a, b| compare(a, b)),
        versions.iter().copied().max_by(|a, b| compare(a, b)),
    ) {
        (Some(oldest), Some(newest)) => out.push_str(&format!(
            "spokes: {} enrolled; oldest {oldest}, newest {newest}\n",
            enrolled.len()
        )),
        _ => out.push_str(&format!(
            "spokes: {} enrolled; none has reported a version\n",
            enrolled.len()
        )),
    }
    for c in enrolled {
        let version = if c.version.is_empty() {
            "-"
        } else {
            &c.version
        };
        out.push_str(&format!(
            "  {} {version} {}\n",
            c.name,
            c.connection_state.as_str()
        ));
    }
    out
}

/// Orders release versions by their numeric parts (`0.10.0` after `0.9.1`);
/// text that is not one sorts by its characters, after every release.
fn compare(a: &str, b: &str) -> Ordering {
    fn parts(v: &str) -> Option<Vec<u64>> {
        let core = v.split(['-', '+']).next()?;
        core.split('.').map(|p| p.parse().ok()).collect()
    }
    match (parts(a), parts(b)) {
        (Some(x), Some(y)) => x.cmp(&y),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => a.cmp(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MigrationInfo;

    fn cluster(name: &str, version: &str, state: ConnectionState) -> Cluster {
        Cluster {
            version: version.into(),
            ..Cluster::fixture(name, state)
        }
    }

    fn current() -> SchemaStatus {
        SchemaStatus {
            binary: 23,
            database: 23,
            pending: Ok(vec![]),
        }
    }

    #[test]
    fn versions_order_by_their_numbers() {
        assert_eq!(compare("0.10.0", "0.9.1"), Ordering::Greater);
        assert_eq!(compare("1.2.3-rc1", "1.2.3"), Ordering::Equal);
        assert_eq!(compare("dev", "9.9.9"), Ordering::Greater);
    }

    #[test]
    fn reports_the_schema_and_the_range_of_enrolled_spokes() {
        let clusters = [
            cluster("exec-a", "0.10.0", ConnectionState::Online),
            cluster("exec-b", "0.9.1", ConnectionState::Offline),
            cluster("gone", "0.1.0", ConnectionState::Revoked),
            cluster("new", "", ConnectionState::Pending),
        ];
        let out = report(&current(), Some(&clusters));
        assert!(out.contains("link contract: clawfed.link.v1"), "{out}");
        assert!(
            out.contains("schema at 0023, this clawfed-hub's at 0023: current"),
            "{out}"
        );
        assert!(
            out.contains("spokes: 2 enrolled; oldest 0.9.1, newest 0.10.0"),
            "{out}"
        );
        assert!(out.contains("  exec-b 0.9.1 offline"), "{out}");
        assert!(!out.contains("gone") && !out.contains("new "), "{out}");
    }

    #[test]
    fn a_pending_schema_names_the_migrations_and_reads_no_spokes() {
        let status = SchemaStatus {
            binary: 23,
            database: 21,
            pending: Ok(vec![
                MigrationInfo {
                    version: 22,
                    description: "capacity".into(),
                },
                MigrationInfo {
                    version: 23,
                    description: "failover".into(),
                },
            ]),
        };
        assert!(!status.current());
        let out = report(&status, None);
        assert!(
            out.contains("schema at 0021, this clawfed-hub's at 0023: 2 migration(s) pending (0022 capacity, 0023 failover); run `clawfed-hub migrate`"),
            "{out}"
        );
        assert!(out.contains("spokes: not read"), "{out}");
    }
}
