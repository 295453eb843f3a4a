-- The read side, in a SQLite file of its own: usage and audit views, projected from the
-- events. Every view row carries the generation it belongs to, so a rebuild can fill a fresh
-- generation beside the live one and switch to it in one transaction; readers always use the
-- active generation.

-- The id of the event file (its `store_identity`) these views were built from.
CREATE TABLE views_source (
    store_id  TEXT NOT NULL
);

-- One row per view: which generation readers use, and the code version that built it.
CREATE TABLE projection_state (
    name               TEXT    PRIMARY KEY,
    active_generation  INTEGER NOT NULL,
    code_version       INTEGER NOT NULL
);

-- The global position each generation of each view has applied, written in the same
-- transaction as the rows, so a crash never loses or repeats an event.
CREATE TABLE projection_checkpoints (
    name        TEXT    NOT NULL,
    generation  INTEGER NOT NULL,
    position    INTEGER NOT NULL,
    PRIMARY KEY (name, generation)
);

-- Usage view: committed usage per project and resource.
CREATE TABLE usage_in_use (
    generation  INTEGER NOT NULL,
    project     TEXT    NOT NULL,
    resource    TEXT    NOT NULL,
    in_use      INTEGER NOT NULL,
    PRIMARY KEY (generation, project, resource)
) WITHOUT ROWID;

-- Usage view: limits; project overrides, and the defaults under the project '$defaults'.
CREATE TABLE usage_limits (
    generation   INTEGER NOT NULL,
    project      TEXT    NOT NULL,
    resource     TEXT    NOT NULL,
    limit_value  INTEGER NOT NULL,
    PRIMARY KEY (generation, project, resource)
) WITHOUT ROWID;

-- Usage view: reservations that still matter: held ones (they count as reserved until their
-- expiry) and committed ones (a later release frees their deltas). Released ones are deleted.
CREATE TABLE usage_reservations (
    generation      INTEGER NOT NULL,
    project         TEXT    NOT NULL,
    reservation_id  TEXT    NOT NULL,
    held            INTEGER NOT NULL,
    expires_at_ms   INTEGER NOT NULL,
    deltas          TEXT    NOT NULL,
    PRIMARY KEY (generation, project, reservation_id)
) WITHOUT ROWID;
CREATE INDEX usage_reservations_held ON usage_reservations (generation, project, expires_at_ms)
    WHERE held = 1;

-- Audit view: one row per event.
CREATE TABLE audit_entries (
    generation      INTEGER NOT NULL,
    position        INTEGER NOT NULL,
    project         TEXT    NOT NULL,
    version         INTEGER NOT NULL,
    at_ms           INTEGER NOT NULL,
    event_type      TEXT    NOT NULL,
    reservation_id  TEXT,
    deltas          TEXT,
    actor           TEXT,
    request_id      TEXT,
    reason          TEXT,
    usage_after     TEXT    NOT NULL,
    PRIMARY KEY (generation, position)
) WITHOUT ROWID;
CREATE INDEX audit_by_project ON audit_entries (generation, project, position);
CREATE INDEX audit_by_time ON audit_entries (generation, project, at_ms, position);
CREATE INDEX audit_by_type ON audit_entries (generation, project, event_type, position);
CREATE INDEX audit_by_reservation ON audit_entries (generation, project, reservation_id, position);
CREATE INDEX audit_by_actor ON audit_entries (generation, project, actor, position);
