-- Secrets the hub derives credentials from: created once by the first hub
-- to need one, and shared by every hub replica on this database.
CREATE TABLE hub_secrets (
    name       TEXT PRIMARY KEY,
    value      TEXT NOT NULL,
    created_at BIGINT NOT NULL
);

-- SHA-256 of each revision's Gateway transport token (never the token): a
-- tunnel ingress authenticates a Gateway by it.
CREATE TABLE gateway_transport (
    revision_id TEXT PRIMARY KEY REFERENCES agent_revisions (id) ON DELETE CASCADE,
    token_hash  TEXT NOT NULL UNIQUE,
    created_at  BIGINT NOT NULL
);
