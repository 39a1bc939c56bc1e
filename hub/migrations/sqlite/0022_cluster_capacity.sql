-- What a cluster's spoke last reported it can take (link.v1.CapacityReport):
-- the Ready, schedulable nodes the installation's runtime.nodeSelector
-- selects, their allocatable CPU (millicores) and memory (bytes), and that
-- minus the requests of the Pods bound to them; and when the hub received
-- it (Unix milliseconds, the hub's clock). All NULL until the spoke reports.
ALTER TABLE clusters ADD COLUMN capacity_nodes BIGINT;
ALTER TABLE clusters ADD COLUMN capacity_allocatable_cpu_millis BIGINT;
ALTER TABLE clusters ADD COLUMN capacity_allocatable_memory_bytes BIGINT;
ALTER TABLE clusters ADD COLUMN capacity_free_cpu_millis BIGINT;
ALTER TABLE clusters ADD COLUMN capacity_free_memory_bytes BIGINT;
ALTER TABLE clusters ADD COLUMN capacity_reported_at BIGINT;
