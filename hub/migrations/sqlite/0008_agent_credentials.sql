-- Managed credentials of Agents (model API key, service-account
-- credential): write-only, sealed with AES-256-GCM under the hub's secrets
-- key, with the Agent id and kind as associated data. `key_id` names the
-- key that sealed a row; `nonce` and `ciphertext` are hex. No plaintext is
-- ever stored.
CREATE TABLE agent_credentials (
    agent_id   TEXT NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
    kind       TEXT NOT NULL,
    key_id     TEXT NOT NULL,
    nonce      TEXT NOT NULL,
    ciphertext TEXT NOT NULL,
    -- Bumped by every set: a counter, never derived from the value.
    version    BIGINT NOT NULL,
    set_at     BIGINT NOT NULL,
    PRIMARY KEY (agent_id, kind)
);

-- What a deploy froze into a revision: a copy of the Agent's sealed
-- credentials at that moment (still sealed; the associated data names the
-- Agent, so the copy opens for its own Agent only). A later set does not
-- change a revision.
CREATE TABLE revision_credentials (
    revision_id TEXT NOT NULL REFERENCES agent_revisions (id) ON DELETE CASCADE,
    kind        TEXT NOT NULL,
    key_id      TEXT NOT NULL,
    nonce       TEXT NOT NULL,
    ciphertext  TEXT NOT NULL,
    version     BIGINT NOT NULL,
    set_at      BIGINT NOT NULL,
    PRIMARY KEY (revision_id, kind)
);
