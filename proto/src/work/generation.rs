//! Generations of a Harness revision's target. A revision's Harness only
//! moves forward (applied, then stopped, then retired), so its lifecycle
//! step is its generation: a later step supersedes an earlier one still
//! queued, and a result for a later step answers an earlier one too.

/// `harness.apply`.
pub const HARNESS_APPLY: i64 = 1;
/// `harness.stop`.
pub const HARNESS_STOP: i64 = 2;
/// `harness.retire`.
pub const HARNESS_RETIRE: i64 = 3;
/// `harness.retire` sent because the Agent was deleted
/// ([`super::RevisionWork::agent_deleted`]): newer than a plain
/// retirement, so a revision retired before still gets its Agent's
/// storage removed.
pub const AGENT_DELETE: i64 = 4;
/// `namespace.ensure` (the namespace's desired state does not change
/// after provisioning; a teardown is sent with a newer generation).
pub const NAMESPACE_ENSURE: i64 = 1;
