-- Cordon and drain of an execution cluster. cordoned_at: when new
-- placements there stopped (NULL: schedulable). The drain_* columns keep
-- the latest drain: started, its parallelism and requester, and when it
-- ended (NULL while it runs). moved_from on a revision: the cluster a
-- drain moved the Agent away from (NULL for every other revision).
ALTER TABLE clusters ADD COLUMN cordoned_at BIGINT;
ALTER TABLE clusters ADD COLUMN drain_started_at BIGINT;
ALTER TABLE clusters ADD COLUMN drain_finished_at BIGINT;
ALTER TABLE clusters ADD COLUMN drain_parallelism BIGINT;
ALTER TABLE clusters ADD COLUMN drain_requested_by TEXT;
ALTER TABLE agent_revisions ADD COLUMN moved_from TEXT;
