-- Hub replicas (issue 14): each live replica publishes the link address
-- spokes reach it at (empty: it takes no redirects) and how many sessions
-- it holds, renewed with its session leases. Replicas with more than their
-- share redirect the excess to less loaded ones (GoAway.redirect_url); a
-- replica shutting down names the least loaded others. A row whose
-- heartbeat (unix ms) is older than a lease is a dead replica's: ignored,
-- and removed by the next replica that publishes.
CREATE TABLE hub_replicas (
    replica_id    TEXT PRIMARY KEY,
    advertise_url TEXT NOT NULL,
    sessions      BIGINT NOT NULL,
    heartbeat_at  BIGINT NOT NULL
);
