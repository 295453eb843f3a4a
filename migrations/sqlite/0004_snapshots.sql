-- The latest snapshot of each stream's folded state (see StreamAppend::snapshot): written in
-- the transaction of the append it describes, so it always describes stored events. A cache:
-- deleting rows here loses nothing, the project is folded from its events instead.
CREATE TABLE snapshots (
    stream   TEXT    PRIMARY KEY,
    version  INTEGER NOT NULL,
    format   INTEGER NOT NULL,
    data     TEXT    NOT NULL
);
