//! Work targets (the hub chooses them; the spoke only records them).

use std::fmt;

/// Target of namespace work: `namespace/<namespace id>`.
pub fn namespace(namespace_id: &str) -> String {
    Target::Namespace {
        namespace_id: namespace_id.to_owned(),
    }
    .to_string()
}

/// Target of Harness work: `harness/<namespace id>/<agent>/<revision>`.
pub fn harness(namespace_id: &str, agent: &str, revision: i64) -> String {
    Target::Harness {
        namespace_id: namespace_id.to_owned(),
        agent: agent.to_owned(),
        revision,
    }
    .to_string()
}

/// A parsed work target.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Target {
    /// The tenant's data-plane namespace in one cluster.
    Namespace { namespace_id: String },
    /// One Harness revision of an Agent.
    Harness {
        namespace_id: String,
        agent: String,
        revision: i64,
    },
}

/// A string that is not a work target.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid work target {0:?}: want namespace/<id> or harness/<id>/<agent>/<revision>")]
pub struct InvalidTarget(pub String);

impl Target {
    /// The tenant (namespace id) the target belongs to.
    pub fn namespace_id(&self) -> &str {
        match self {
            Target::Namespace { namespace_id } | Target::Harness { namespace_id, .. } => {
                namespace_id
            }
        }
    }
}

impl std::str::FromStr for Target {
    type Err = InvalidTarget;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || InvalidTarget(s.to_owned());
        let parts: Vec<&str> = s.split('/').collect();
        match parts.as_slice() {
            ["namespace", id] if !id.is_empty() => Ok(Target::Namespace {
                namespace_id: (*id).to_owned(),
            }),
            ["harness", id, agent, revision] if !id.is_empty() && !agent.is_empty() => {
                Ok(Target::Harness {
                    namespace_id: (*id).to_owned(),
                    agent: (*agent).to_owned(),
                    revision: revision.parse().map_err(|_| bad())?,
                })
            }
            _ => Err(bad()),
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Namespace { namespace_id } => write!(f, "namespace/{namespace_id}"),
            Target::Harness {
                namespace_id,
                agent,
                revision,
            } => write!(f, "harness/{namespace_id}/{agent}/{revision}"),
        }
    }
}
