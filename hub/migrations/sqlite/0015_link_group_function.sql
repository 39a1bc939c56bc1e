-- PostgreSQL's 0015 adds clawfed_link_group (a group of the link's writes
-- in one round trip) and makes the outbox NOTIFY a statement trigger.
-- SQLite runs its groups on its one writer connection in process and has
-- no NOTIFY: no schema change. This file keeps both backends' migration
-- lists the same.
SELECT 1;
