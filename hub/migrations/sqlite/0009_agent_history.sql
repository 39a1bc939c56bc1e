-- Deleting an Agent keeps its revision history (and audit): the row stays,
-- marked deleted, and keeps its name in its tenant; every live query
-- filters on deleted_at IS NULL.
ALTER TABLE agents ADD COLUMN deleted_at BIGINT;
