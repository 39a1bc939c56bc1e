-- PostgreSQL's 0011 adds clawfed_outbox_put, the outbox put in one round
-- trip. SQLite runs the same steps in the hub's group commit
-- (hub/src/store/group.rs) on its one writer connection: no schema change.
-- This file keeps both backends' migration lists the same.
SELECT 1;
