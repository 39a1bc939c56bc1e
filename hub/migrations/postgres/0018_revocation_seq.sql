-- Revocations are paged by a sequence, not by `revoked_at` (the revoker's
-- clock, taken before its commit): each revoking transaction takes the
-- next number from `revocation_head` under that row's lock, held until it
-- commits, so numbers become visible in order and a reader that has seen N
-- never later finds a revocation below N.
ALTER TABLE cluster_certificates ADD COLUMN revoked_seq BIGINT;
CREATE TABLE revocation_head (
    id  INTEGER PRIMARY KEY CHECK (id = 1),
    seq BIGINT NOT NULL
);
-- Revocations made before: number 1, which a starting hub loads anyway.
UPDATE cluster_certificates SET revoked_seq = 1 WHERE revoked_at IS NOT NULL;
INSERT INTO revocation_head (id, seq) VALUES (1, 1);
CREATE INDEX cluster_certificates_revoked_seq ON cluster_certificates (revoked_seq)
    WHERE revoked_seq IS NOT NULL;
