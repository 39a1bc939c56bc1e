-- The outbox notification carries the newest sequence written for the
-- cluster: `<schema> <cluster id> <sequence>`. The replica holding the
-- session reads the outbox only when that is past what it already sent,
-- so a put in that replica (which wakes its session in process) is not
-- read a second time when its own NOTIFY arrives.
CREATE OR REPLACE FUNCTION clawfed_notify_outbox_rows() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('clawfed_outbox',
                      current_schema() || ' ' || d.cluster_id || ' ' || d.head)
        FROM (SELECT cluster_id, max(sequence) AS head
                FROM outbox_inserted GROUP BY cluster_id) d;
    RETURN NULL;
END
$$;
