-- Who was authenticated when each event was appended (a token's name or role, `anonymous`,
-- `system:...` for the server's own events). Events stored before this column existed keep
-- NULL: their principal is unknown, and nothing may guess it.
ALTER TABLE events ADD COLUMN principal TEXT;

-- The guarded append of 0005, storing the principal too. Its signature changes, so the old
-- function is dropped rather than replaced (CREATE OR REPLACE would add an overload).
DROP FUNCTION quota_append_guarded(BIGINT, BIGINT[], TEXT[], BIGINT[], UUID[], TEXT[],
                                   SMALLINT[], JSONB[], TEXT[], TEXT[], TEXT[], BIGINT[], TEXT,
                                   TEXT, BIGINT, TEXT[], BIGINT[]);

-- The usual append in one statement outside a transaction, so one round trip instead of three
-- (BEGIN with the lock, the insert, COMMIT): under the append lock, inserts the rows planned
-- from the head this node last knew only if the head, each named stream's version and the
-- absence of the event ids are as assumed, then notifies the other nodes. Returns how many rows
-- it inserted: all of them, or 0 when an assumption was wrong (nothing is written; the caller
-- reads and plans again in a transaction of its own).
CREATE FUNCTION quota_append_guarded(
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
    p_assumed_streams   TEXT[],
    p_assumed_versions  BIGINT[]
) RETURNS BIGINT LANGUAGE plpgsql AS $$
DECLARE
    inserted BIGINT;
BEGIN
    PERFORM pg_advisory_xact_lock(p_lock_key);
    -- As in the store's BEGIN: rows are only ever looked up by key (see postgres.rs).
    PERFORM set_config('enable_seqscan', 'off', true);
    IF (SELECT COALESCE(MAX(position), 0) FROM events) <> p_assumed_head
       OR EXISTS (SELECT 1 FROM UNNEST(p_assumed_streams, p_assumed_versions) AS g(s, v)
                  WHERE (SELECT MAX(version) FROM events WHERE stream = g.s) IS DISTINCT FROM g.v)
       OR EXISTS (SELECT 1 FROM UNNEST(p_event_ids) AS id JOIN events ON events.event_id = id)
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
