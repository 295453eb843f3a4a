-- Each stream gets a number, and the events are found by (stream number, version) instead of
-- (stream name, version). Why: the events file's pages are 1 KiB, and an entry of the old key
-- held the whole name (`project-…`, about 40 bytes), so a leaf held about 25 entries and a
-- commit over many projects split or rebalanced a leaf for about one insert in three. An entry
-- of the new key is about 14 bytes. The name stays in each event row (reads return it); the
-- writer adds a stream's row here in the transaction of the stream's first event (version 0),
-- so a stream is listed here exactly when it has events.
CREATE TABLE streams (
    stream_key  INTEGER PRIMARY KEY,
    stream      TEXT    NOT NULL UNIQUE
);
INSERT INTO streams (stream) SELECT DISTINCT stream FROM events ORDER BY stream;

-- SQLite cannot drop a table constraint, so the events table is made anew without the old key
-- and its rows copied in position order (the procedure of SQLite's ALTER TABLE page; this
-- file has no trigger or view that names the table).
ALTER TABLE events RENAME TO events_keyed_by_name;
CREATE TABLE events (
    position        INTEGER PRIMARY KEY,
    stream          TEXT    NOT NULL,
    stream_key      INTEGER NOT NULL,
    version         INTEGER NOT NULL,
    event_id        BLOB    NOT NULL UNIQUE,
    event_type      TEXT    NOT NULL,
    schema_version  INTEGER NOT NULL,
    data            TEXT    NOT NULL,
    actor           TEXT,
    request_id      TEXT,
    correlation_id  TEXT,
    recorded_at_ms  INTEGER NOT NULL,
    principal       TEXT
);
INSERT INTO events (position, stream, stream_key, version, event_id, event_type, schema_version,
                    data, actor, request_id, correlation_id, recorded_at_ms, principal)
    SELECT e.position, e.stream, s.stream_key, e.version, e.event_id, e.event_type,
           e.schema_version, e.data, e.actor, e.request_id, e.correlation_id, e.recorded_at_ms,
           e.principal
      FROM events_keyed_by_name AS e JOIN streams AS s ON s.stream = e.stream
     ORDER BY e.position;
DROP TABLE events_keyed_by_name;
CREATE UNIQUE INDEX events_by_stream_key ON events (stream_key, version);
