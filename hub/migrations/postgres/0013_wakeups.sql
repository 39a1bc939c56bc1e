-- Issue 14: wake-ups across hub replicas. These triggers NOTIFY whatever
-- process (replica, CLI) wrote; PostgreSQL delivers on commit, and folds
-- identical notifications of one transaction into one. Each replica holds
-- one LISTEN connection (hub/src/wake/pg.rs, which names the channels).
-- Channels are per database while hubs (and tests) may live in separate
-- schemas of one database: every payload starts with the writer's schema.

-- Work a worker may claim: queued, or put back to pending.
CREATE FUNCTION clawfed_notify_work() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('clawfed_work', current_schema());
    RETURN NULL;
END
$$;
CREATE TRIGGER work_items_wake AFTER INSERT OR UPDATE OF state, run_at ON work_items
    FOR EACH ROW WHEN (NEW.state = 'pending') EXECUTE FUNCTION clawfed_notify_work();

-- An outbox item to send: the replica holding the cluster's session wakes it.
CREATE FUNCTION clawfed_notify_outbox() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('clawfed_outbox', current_schema() || ' ' || NEW.cluster_id);
    RETURN NULL;
END
$$;
CREATE TRIGGER outbox_wake AFTER INSERT ON outbox
    FOR EACH ROW EXECUTE FUNCTION clawfed_notify_outbox();
CREATE TRIGGER outbox_resend_wake AFTER UPDATE OF acked_at ON outbox
    FOR EACH ROW WHEN (NEW.acked_at IS NULL) EXECUTE FUNCTION clawfed_notify_outbox();

-- A revocation: every replica adds the serials to its deny-list and the
-- one holding the cluster's stream closes it.
CREATE FUNCTION clawfed_notify_revoked() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('clawfed_revoked', current_schema() || ' ' || NEW.cluster_id);
    RETURN NULL;
END
$$;
CREATE TRIGGER cluster_certificates_revoked_wake AFTER UPDATE OF revoked_at ON cluster_certificates
    FOR EACH ROW WHEN (NEW.revoked_at IS NOT NULL AND OLD.revoked_at IS NULL)
    EXECUTE FUNCTION clawfed_notify_revoked();

-- Watch events: other replicas' watch feeds read them at once.
CREATE FUNCTION clawfed_notify_events() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('clawfed_events', current_schema());
    RETURN NULL;
END
$$;
CREATE TRIGGER watch_events_wake AFTER INSERT ON watch_events
    FOR EACH ROW EXECUTE FUNCTION clawfed_notify_events();
