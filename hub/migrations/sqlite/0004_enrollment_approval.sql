-- Optional manual approval of enrollments: a token created with
-- require_approval enrolls only after `clawfed-hub cluster approve NAME`.
ALTER TABLE bootstrap_tokens ADD COLUMN require_approval BIGINT NOT NULL DEFAULT 0;
ALTER TABLE bootstrap_tokens ADD COLUMN pending_since BIGINT;
ALTER TABLE bootstrap_tokens ADD COLUMN approved_at BIGINT;
