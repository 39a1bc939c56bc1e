-- Desired state, work queue, audit and tokens. Times are unix milliseconds
-- (BIGINT) so both backends store and compare them the same way; JSON
-- documents are TEXT written and read by the hub's typed models.

CREATE TABLE namespaces (
    id                   TEXT PRIMARY KEY,
    name                 TEXT NOT NULL UNIQUE,
    display_name         TEXT NOT NULL,
    data_plane_namespace TEXT NOT NULL UNIQUE,
    adopted              BIGINT NOT NULL,
    state                TEXT NOT NULL,
    provisioned_at       BIGINT,
    version              BIGINT NOT NULL,
    created_at           BIGINT NOT NULL,
    updated_at           BIGINT NOT NULL
);

CREATE TABLE configurations (
    id           TEXT PRIMARY KEY,
    namespace_id TEXT NOT NULL REFERENCES namespaces (id),
    name         TEXT NOT NULL,
    data         TEXT NOT NULL,
    version      BIGINT NOT NULL,
    created_at   BIGINT NOT NULL,
    updated_at   BIGINT NOT NULL,
    UNIQUE (namespace_id, name)
);

CREATE TABLE agents (
    id              TEXT PRIMARY KEY,
    namespace_id    TEXT NOT NULL REFERENCES namespaces (id),
    name            TEXT NOT NULL,
    spec            TEXT NOT NULL,
    desired_state   TEXT NOT NULL,
    active_revision BIGINT,
    latest_revision BIGINT,
    version         BIGINT NOT NULL,
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL,
    UNIQUE (namespace_id, name)
);

CREATE TABLE agent_revisions (
    id               TEXT PRIMARY KEY,
    agent_id         TEXT NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
    number           BIGINT NOT NULL,
    spec             TEXT NOT NULL,
    configuration    TEXT NOT NULL,
    images           TEXT NOT NULL,
    resolved_cluster TEXT,
    phase            TEXT NOT NULL,
    reason           TEXT,
    rolled_back_from BIGINT,
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL,
    UNIQUE (agent_id, number)
);

CREATE TABLE idempotency_keys (
    namespace_id TEXT NOT NULL REFERENCES namespaces (id) ON DELETE CASCADE,
    key          TEXT NOT NULL,
    fingerprint  TEXT NOT NULL,
    revision_id  TEXT NOT NULL REFERENCES agent_revisions (id) ON DELETE CASCADE,
    created_at   BIGINT NOT NULL,
    PRIMARY KEY (namespace_id, key)
);

CREATE TABLE clusters (
    id                  TEXT PRIMARY KEY,
    name                TEXT NOT NULL UNIQUE,
    labels              TEXT NOT NULL,
    capabilities        TEXT NOT NULL,
    certificate_serials TEXT NOT NULL,
    connection_state    TEXT NOT NULL,
    last_seen           BIGINT,
    version             TEXT NOT NULL,
    created_at          BIGINT NOT NULL
);

CREATE TABLE work_items (
    id               TEXT PRIMARY KEY,
    kind             TEXT NOT NULL,
    -- Tenant name, kept with the item so listings and audits outlive renames.
    namespace        TEXT,
    namespace_id     TEXT,
    target           TEXT NOT NULL,
    payload          TEXT NOT NULL,
    requested_by     TEXT,
    state            TEXT NOT NULL,
    attempts         BIGINT NOT NULL,
    max_attempts     BIGINT NOT NULL,
    run_at           BIGINT NOT NULL,
    lease_owner      TEXT,
    lease_expires_at BIGINT,
    last_error       TEXT,
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL,
    completed_at     BIGINT
);
-- The claim scans due pending items in order; expiry recovery scans claims.
CREATE INDEX work_items_pending ON work_items (run_at, id) WHERE state = 'pending';
CREATE INDEX work_items_claimed ON work_items (lease_expires_at) WHERE state = 'claimed';
CREATE INDEX work_items_namespace ON work_items (namespace, created_at);

CREATE TABLE audit_events (
    id        INTEGER PRIMARY KEY AUTOINCREMENT,
    at        BIGINT NOT NULL,
    actor     TEXT NOT NULL,
    action    TEXT NOT NULL,
    namespace TEXT,
    target    TEXT NOT NULL,
    result    TEXT NOT NULL,
    detail    TEXT
);
CREATE INDEX audit_events_namespace ON audit_events (namespace, id);

CREATE TABLE api_tokens (
    id           TEXT PRIMARY KEY,
    name         TEXT NOT NULL UNIQUE,
    namespace_id TEXT REFERENCES namespaces (id) ON DELETE CASCADE,
    role         TEXT NOT NULL,
    token_hash   TEXT NOT NULL UNIQUE,
    created_at   BIGINT NOT NULL,
    expires_at   BIGINT,
    revoked_at   BIGINT
);
