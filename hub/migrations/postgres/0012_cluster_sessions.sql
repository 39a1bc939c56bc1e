-- Hub replicas (issue 14): the live link session of each cluster, owned by
-- one hub replica. `epoch` is the fencing token: every new session bumps
-- it, so a replica whose session was superseded (on any replica) can no
-- longer mark the cluster offline, and notices on its next renewal. The
-- owner renews `lease_expires_at` (unix ms) for all its sessions in one
-- statement; once it lapses (the owner died) any replica marks the
-- cluster offline. The row is kept when a session ends (lease set to 0)
-- so the epoch stays monotonic per cluster.
CREATE TABLE cluster_sessions (
    cluster_id       TEXT PRIMARY KEY REFERENCES clusters (id),
    replica_id       TEXT NOT NULL,
    epoch            BIGINT NOT NULL,
    lease_expires_at BIGINT NOT NULL
);
CREATE INDEX cluster_sessions_replica ON cluster_sessions (replica_id);
