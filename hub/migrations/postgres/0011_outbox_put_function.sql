-- Issue 17: an outbox put in one round trip. The hub used to run it as a
-- transaction of six round trips (BEGIN, bump, newest, delete, insert,
-- COMMIT); under load each held a pooled connection "idle in transaction"
-- between them, and the link's writes queued for connections. The body is
-- the same steps in the same order (see `LinkWrite::Put` in
-- hub/src/store/group.rs, which SQLite still runs): each statement of a
-- volatile PL/pgSQL function takes a fresh snapshot, so the newest-generation
-- check runs under the cluster row's lock and sees every put committed
-- before it, as in the transaction.
CREATE FUNCTION clawfed_outbox_put(
    p_cluster_id TEXT,
    p_target     TEXT,
    p_kind       TEXT,
    p_generation BIGINT,
    p_spec       TEXT,
    p_created_at BIGINT
) RETURNS BIGINT
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    seq    BIGINT;
    newest BIGINT;
BEGIN
    -- Bumping the counter first takes the cluster row's lock until commit:
    -- puts to one cluster serialise and sequences are dense and increasing.
    UPDATE clusters SET next_sequence = next_sequence + 1
        WHERE id = p_cluster_id RETURNING next_sequence INTO seq;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'cluster % not found', p_cluster_id USING ERRCODE = 'no_data_found';
    END IF;
    SELECT MAX(generation) INTO newest FROM outbox
        WHERE cluster_id = p_cluster_id AND target = p_target;
    IF newest IS NOT NULL AND newest >= p_generation THEN
        -- Already holds this generation or a newer one: undo the bump.
        UPDATE clusters SET next_sequence = next_sequence - 1 WHERE id = p_cluster_id;
        RETURN NULL;
    END IF;
    DELETE FROM outbox
        WHERE cluster_id = p_cluster_id AND target = p_target AND acked_at IS NULL;
    INSERT INTO outbox (cluster_id, sequence, target, kind, generation, spec, created_at, acked_at)
        VALUES (p_cluster_id, seq, p_target, p_kind, p_generation, p_spec, p_created_at, NULL);
    RETURN seq;
END
$$;
