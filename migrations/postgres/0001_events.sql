-- The ledger: every event of every stream. Appends take a transaction-scoped advisory lock
-- before they assign positions, so positions are assigned and committed in one order and a
-- reader following "position > last seen" can never skip an event that commits late.
CREATE TABLE events (
    position        BIGINT   PRIMARY KEY,
    stream          TEXT     NOT NULL,
    version         BIGINT   NOT NULL,
    event_id        UUID     NOT NULL UNIQUE,
    event_type      TEXT     NOT NULL,
    schema_version  SMALLINT NOT NULL,
    data            JSONB    NOT NULL,
    actor           TEXT,
    request_id      TEXT,
    correlation_id  TEXT,
    recorded_at_ms  BIGINT   NOT NULL,
    UNIQUE (stream, version)
);
