-- The audit log as a resumable stream (issue 36, part 4). `seq` is the
-- stream's cursor. A write does not take it: ids follow insert order, and
-- on PostgreSQL a transaction can commit after a later one, so a reader
-- that went past id N could later find a committed id below N. Instead the
-- hub stamps committed rows with the next numbers of audit_head, under
-- that row's lock, in one transaction: numbers are given in the order rows
-- became visible, so a reader that saw N never later finds one below N.
-- Rows written before this migration keep their id as their cursor.
ALTER TABLE audit_events ADD COLUMN seq BIGINT;
UPDATE audit_events SET seq = id;
CREATE UNIQUE INDEX audit_events_seq ON audit_events (seq);
CREATE INDEX audit_events_unsequenced ON audit_events (id) WHERE seq IS NULL;
-- A tenant's stream reads its own rows from its cursor on.
CREATE INDEX audit_events_namespace_seq ON audit_events (namespace, seq);
CREATE TABLE audit_head (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    seq BIGINT NOT NULL
);
INSERT INTO audit_head (id, seq) SELECT 1, COALESCE(MAX(id), 0) FROM audit_events;
