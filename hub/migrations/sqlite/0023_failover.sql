-- Failover with fencing (clawfed_proto::failover). lease_renewed_at: when
-- the hub recorded the newest execution lease renewal of the cluster's
-- spoke (database clock, ms); the hub moves a failover-enabled Agent away
-- only the fence period plus a margin after it. fenced_targets: the Harness
-- work targets the spoke reports it fenced (JSON array; NULL: none).
-- failover_after_seconds on a revision: its spec's failover.afterSeconds
-- (NULL: no failover), so the scan needs no JSON.
ALTER TABLE clusters ADD COLUMN lease_renewed_at BIGINT;
ALTER TABLE clusters ADD COLUMN fenced_targets TEXT;
ALTER TABLE agent_revisions ADD COLUMN failover_after_seconds BIGINT;
CREATE INDEX agent_revisions_failover ON agent_revisions (resolved_cluster)
    WHERE failover_after_seconds IS NOT NULL AND phase = 'active';
