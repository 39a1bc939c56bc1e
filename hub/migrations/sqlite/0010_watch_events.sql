-- The watch API's durable, bounded, ordered event log (issue 15).
-- `seq` is the cursor. It is taken from the one row of watch_head inside
-- the writing transaction: the row lock is held until commit, so events
-- commit in sequence order and a rolled-back transaction leaves no gap. A
-- reader that saw event N therefore never later finds an event below N.
CREATE TABLE watch_head (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    seq BIGINT NOT NULL
);
INSERT INTO watch_head (id, seq) VALUES (1, 0);

CREATE TABLE watch_events (
    seq BIGINT PRIMARY KEY,
    at BIGINT NOT NULL,
    kind TEXT NOT NULL,
    -- The tenant the event belongs to (NULL: a cluster event). The id
    -- scopes tenants (a namespace re-created under an old name does not
    -- see the old one's events); the name is what clients are shown.
    namespace_id TEXT,
    namespace TEXT,
    -- The cluster the event is about or happened on, if any.
    cluster TEXT,
    body TEXT NOT NULL
);
