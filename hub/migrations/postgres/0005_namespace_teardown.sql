-- Why a namespace is in its state (e.g. the provider cleanup that failed
-- and kept its infrastructure).
ALTER TABLE namespaces ADD COLUMN state_reason TEXT;
