-- The spoke link: bootstrap tokens, certificates, revocation, the durable
-- per-cluster outbox and the reports spokes send back.

ALTER TABLE clusters ADD COLUMN next_sequence BIGINT NOT NULL DEFAULT 0;
ALTER TABLE clusters ADD COLUMN revoked_at BIGINT;

CREATE TABLE bootstrap_tokens (
    id           TEXT PRIMARY KEY,
    cluster_name TEXT NOT NULL,
    token_hash   TEXT NOT NULL UNIQUE,
    -- An admin decided this token may re-enroll an existing cluster name.
    reenroll     BIGINT NOT NULL,
    created_by   TEXT NOT NULL,
    created_at   BIGINT NOT NULL,
    expires_at   BIGINT NOT NULL,
    used_at      BIGINT
);

CREATE TABLE cluster_certificates (
    serial     TEXT PRIMARY KEY,
    cluster_id TEXT NOT NULL REFERENCES clusters (id),
    issued_at  BIGINT NOT NULL,
    not_after  BIGINT NOT NULL,
    revoked_at BIGINT
);
CREATE INDEX cluster_certificates_cluster ON cluster_certificates (cluster_id);

CREATE TABLE outbox (
    cluster_id TEXT NOT NULL REFERENCES clusters (id),
    sequence   BIGINT NOT NULL,
    target     TEXT NOT NULL,
    kind       TEXT NOT NULL,
    generation BIGINT NOT NULL,
    spec       TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    acked_at   BIGINT,
    PRIMARY KEY (cluster_id, sequence)
);
CREATE INDEX outbox_unacked ON outbox (cluster_id, sequence) WHERE acked_at IS NULL;
CREATE INDEX outbox_target ON outbox (cluster_id, target, generation);

CREATE TABLE spoke_reports (
    cluster_id  TEXT NOT NULL REFERENCES clusters (id),
    target      TEXT NOT NULL,
    kind        TEXT NOT NULL,
    generation  BIGINT NOT NULL,
    body        TEXT NOT NULL,
    received_at BIGINT NOT NULL,
    PRIMARY KEY (cluster_id, target, kind)
);
