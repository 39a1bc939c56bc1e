-- PostgreSQL's 0016 adds the newest sequence to the outbox NOTIFY. SQLite
-- has no NOTIFY: no schema change. This file keeps both backends'
-- migration lists the same.
SELECT 1;
