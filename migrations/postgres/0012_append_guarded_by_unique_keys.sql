-- The guarded append of 0006 with cheaper checks, under a name of its own: a node still running
-- the previous binary keeps calling quota_append_guarded, which stays as it was.
--
-- What 0006 checks by reading, the table's unique keys check as the rows go in: a position
-- after the assumed head that another append took (PRIMARY KEY), a version after a stream's
-- assumed one that is taken (UNIQUE (stream, version)), an event id already stored (UNIQUE
-- event_id). Any of those aborts the statement with a unique violation (SQLSTATE 23505), so
-- nothing is written, and the caller reads and plans again in a transaction of its own, as it
-- does when this returns 0. What the keys cannot see is read here, one index probe each:
--   - the head itself (the table holds no position beyond it);
--   - p_existing: (stream, version) pairs that must be stored, one per stream the batch assumes
--     is at a version: without it, an append to a stream assumed further on than it is would
--     leave a gap in the stream's versions;
--   - p_free: (stream, version) pairs that must not be stored, for the streams the batch names
--     but writes no row to, whose next version no insert would try.
-- A probe for one (stream, version) costs about a third of 0006's MAX(version) per stream,
-- an index-only scan backward (measured: docs/BENCHMARKS.md, 2026-12-06).
--
-- Returns how many rows it inserted: all of them, or 0 when the head or a probe is not as
-- assumed (nothing is written).
CREATE FUNCTION quota_append_keyed(
    p_lock_key          BIGINT,
    p_positions         BIGINT[],
    p_streams           TEXT[],
    p_versions          BIGINT[],
    p_event_ids         UUID[],
    p_event_types       TEXT[],
    p_schema_versions   SMALLINT[],
    p_data              JSONB[],
    p_actors            TEXT[],
    p_request_ids       TEXT[],
    p_correlation_ids   TEXT[],
    p_recorded_at_ms    BIGINT[],
    p_principals        TEXT[],
    p_notify_channel    TEXT,
    p_notify_payload    TEXT,
    p_assumed_head      BIGINT,
    p_existing_streams  TEXT[],
    p_existing_versions BIGINT[],
    p_free_streams      TEXT[],
    p_free_versions     BIGINT[]
) RETURNS BIGINT LANGUAGE plpgsql AS $$
DECLARE
    inserted BIGINT;
BEGIN
    PERFORM pg_advisory_xact_lock(p_lock_key);
    -- As in the store's BEGIN: rows are only ever looked up by key (see postgres.rs).
    PERFORM set_config('enable_seqscan', 'off', true);
    IF (SELECT COALESCE(MAX(position), 0) FROM events) <> p_assumed_head
       OR EXISTS (SELECT 1 FROM UNNEST(p_existing_streams, p_existing_versions) AS g(s, v)
                  WHERE NOT EXISTS (SELECT 1 FROM events WHERE stream = g.s AND version = g.v))
       OR EXISTS (SELECT 1 FROM UNNEST(p_free_streams, p_free_versions) AS g(s, v)
                  JOIN events ON events.stream = g.s AND events.version = g.v)
    THEN
        RETURN 0;
    END IF;
    INSERT INTO events (position, stream, version, event_id, event_type, schema_version, data,
                        actor, request_id, correlation_id, recorded_at_ms, principal)
    SELECT * FROM UNNEST(p_positions, p_streams, p_versions, p_event_ids, p_event_types,
                         p_schema_versions, p_data, p_actors, p_request_ids, p_correlation_ids,
                         p_recorded_at_ms, p_principals);
    GET DIAGNOSTICS inserted = ROW_COUNT;
    IF inserted > 0 THEN
        PERFORM pg_notify(p_notify_channel, p_notify_payload);
    END IF;
    RETURN inserted;
END
$$;
