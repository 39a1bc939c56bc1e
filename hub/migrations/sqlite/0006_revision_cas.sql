-- Pipeline passes: a revision is updated by compare-and-swap on its version,
-- and one pass per Agent runs at a time, across every hub process on this
-- database, under a short lease on the Agent row (the version is the fence
-- when a lease runs out under a slow pass).
ALTER TABLE agent_revisions ADD COLUMN version BIGINT NOT NULL DEFAULT 1;
ALTER TABLE agents ADD COLUMN pass_holder TEXT;
ALTER TABLE agents ADD COLUMN pass_expires_at BIGINT;
-- The API token that deployed the revision: every later pipeline pass
-- re-checks it before an infrastructure effect.
ALTER TABLE agent_revisions ADD COLUMN requested_by TEXT;
