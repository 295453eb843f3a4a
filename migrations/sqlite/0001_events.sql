-- The ledger: every event of every stream. Positions are assigned by the single writer inside
-- its transaction, so position order is commit order.
CREATE TABLE events (
    position        INTEGER PRIMARY KEY,
    stream          TEXT    NOT NULL,
    version         INTEGER NOT NULL,
    event_id        BLOB    NOT NULL UNIQUE,
    event_type      TEXT    NOT NULL,
    schema_version  INTEGER NOT NULL,
    data            TEXT    NOT NULL,
    actor           TEXT,
    request_id      TEXT,
    correlation_id  TEXT,
    recorded_at_ms  INTEGER NOT NULL,
    UNIQUE (stream, version)
);
