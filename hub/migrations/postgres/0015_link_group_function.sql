-- Issue 17: the link's group commit on PostgreSQL in one round trip, and
-- one outbox NOTIFY per cluster per statement instead of one per row.
--
-- clawfed_link_group(puts, acks, reports) is what the hub ran as BEGIN,
-- the lock of the put clusters' rows, the group statement and COMMIT (four
-- round trips, each a wake-up of the server and of the hub under load):
-- the same two statements in a VOLATILE function, called alone, so it is
-- its own transaction. Each statement of a VOLATILE PL/pgSQL function
-- takes a fresh snapshot (as clawfed_outbox_put of 0011 relies on), so the
-- group statement sees every put committed before the lock was granted.
-- Arguments are JSON arrays of records (`i`: the write's index in the
-- group):
--   puts    {i, c (cluster id), t (target), k (kind), g (generation), s (spec), ts}
--   acks    {i, c, q (sequence), t, g, ts}
--   reports {c, t, k, g, b (body), ts}, at most one per (c, t, k)
-- The outcome is as if the acks ran first, then the puts in index order,
-- then the reports (the rules are stated at GROUP_FN_SQL in
-- hub/src/store/group.rs). Rows: (0, i, sequence) per fresh put, (1, i, 0)
-- per ack that acked, (2, i, 0) per put to a cluster that does not exist
-- (nothing written).
CREATE FUNCTION clawfed_link_group(p_puts JSON, p_acks JSON, p_reports JSON)
RETURNS TABLE (w BIGINT, i BIGINT, v BIGINT)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    -- In id order, so two groups never deadlock on them. NO KEY UPDATE, as
    -- the counter bump takes: reports inserted meanwhile (their foreign
    -- key takes KEY SHARE) do not wait.
    PERFORM 1 FROM clusters
        WHERE id IN (SELECT x.c FROM json_to_recordset(p_puts) AS x(c TEXT))
        ORDER BY id FOR NO KEY UPDATE;
    RETURN QUERY
    WITH given AS (
        SELECT * FROM json_to_recordset(p_puts)
            AS x(i BIGINT, c TEXT, t TEXT, k TEXT, g BIGINT, s TEXT, ts BIGINT)
    ), p AS (
        SELECT given.* FROM given WHERE EXISTS (SELECT 1 FROM clusters WHERE id = given.c)
    ), a AS (
        SELECT * FROM json_to_recordset(p_acks)
            AS x(i BIGINT, c TEXT, q BIGINT, t TEXT, g BIGINT, ts BIGINT)
    ), r AS (
        SELECT * FROM json_to_recordset(p_reports)
            AS x(c TEXT, t TEXT, k TEXT, g BIGINT, b TEXT, ts BIGINT)
    ), fresh AS (
        SELECT e.*,
            ROW_NUMBER() OVER (PARTITION BY e.c ORDER BY e.i) AS n,
            ROW_NUMBER() OVER (PARTITION BY e.c, e.t ORDER BY e.i DESC) AS newest
        FROM (
            SELECT p.*,
                MAX(p.g) OVER (PARTITION BY p.c, p.t ORDER BY p.i
                    ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS earlier,
                (SELECT MAX(ob.generation) FROM outbox ob
                    WHERE ob.cluster_id = p.c AND ob.target = p.t) AS stored
            FROM p
        ) e
        WHERE (e.stored IS NULL OR e.g > e.stored) AND (e.earlier IS NULL OR e.g > e.earlier)
    ), bumped AS (
        UPDATE clusters k SET next_sequence = k.next_sequence + f.cnt
        FROM (SELECT fresh.c, COUNT(*) AS cnt FROM fresh GROUP BY fresh.c) f
        WHERE k.id = f.c
        RETURNING k.id, k.next_sequence - f.cnt AS base
    ), numbered AS (
        SELECT fresh.*, bumped.base + fresh.n AS seq
        FROM fresh JOIN bumped ON bumped.id = fresh.c
    ), acked AS (
        UPDATE outbox ob SET acked_at = a.ts FROM a
        WHERE ob.cluster_id = a.c AND ob.sequence = a.q AND ob.target = a.t
            AND ob.generation = a.g AND ob.acked_at IS NULL
        RETURNING a.i
    ), superseded AS (
        DELETE FROM outbox ob USING (SELECT DISTINCT fresh.c, fresh.t FROM fresh) f
        WHERE ob.cluster_id = f.c AND ob.target = f.t AND ob.acked_at IS NULL
            AND NOT EXISTS (SELECT 1 FROM a WHERE a.c = ob.cluster_id AND a.q = ob.sequence
                AND a.t = ob.target AND a.g = ob.generation)
    ), inserted AS (
        INSERT INTO outbox (cluster_id, sequence, target, kind, generation, spec, created_at)
        SELECT numbered.c, numbered.seq, numbered.t, numbered.k, numbered.g, numbered.s,
            numbered.ts
        FROM numbered WHERE numbered.newest = 1
    ), reported AS (
        INSERT INTO spoke_reports AS sr (cluster_id, target, kind, generation, body, received_at)
        SELECT r.c, r.t, r.k, r.g, r.b, r.ts FROM r
        ON CONFLICT (cluster_id, target, kind) DO UPDATE SET generation = excluded.generation,
            body = excluded.body, received_at = excluded.received_at
        WHERE sr.generation <= excluded.generation
    )
    SELECT 0::BIGINT, numbered.i, numbered.seq FROM numbered
    UNION ALL SELECT 1::BIGINT, acked.i, 0::BIGINT FROM acked
    UNION ALL SELECT 2::BIGINT, given.i, 0::BIGINT FROM given
        WHERE NOT EXISTS (SELECT 1 FROM clusters WHERE id = given.c);
END
$$;

-- One notification per cluster per statement: a group statement inserts
-- rows for many clusters, and a row trigger ran a PL/pgSQL call and a
-- pg_notify per row (PostgreSQL folds identical ones of a transaction, but
-- only after each was made).
CREATE FUNCTION clawfed_notify_outbox_rows() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('clawfed_outbox', current_schema() || ' ' || d.cluster_id)
        FROM (SELECT DISTINCT cluster_id FROM outbox_inserted) d;
    RETURN NULL;
END
$$;
DROP TRIGGER outbox_wake ON outbox;
CREATE TRIGGER outbox_wake AFTER INSERT ON outbox
    REFERENCING NEW TABLE AS outbox_inserted
    FOR EACH STATEMENT EXECUTE FUNCTION clawfed_notify_outbox_rows();
