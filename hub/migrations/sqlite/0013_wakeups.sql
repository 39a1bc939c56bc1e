-- PostgreSQL's 0013 adds the NOTIFY triggers that wake other hub replicas.
-- SQLite serves one hub process, which wakes itself in process
-- (hub/src/wake.rs): no schema change. This file keeps both backends'
-- migration lists the same.
SELECT 1;
