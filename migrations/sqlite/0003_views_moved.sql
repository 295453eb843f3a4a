-- The views moved to a file of their own beside this one (`<this file>-views`), with their own
-- writer, so view transactions never hold up the ledger's group commits. Their tables here are
-- dropped; the views file is built from the events when the service starts.
DROP TABLE IF EXISTS audit_entries;
DROP TABLE IF EXISTS usage_reservations;
DROP TABLE IF EXISTS usage_limits;
DROP TABLE IF EXISTS usage_in_use;
DROP TABLE IF EXISTS projection_checkpoints;
DROP TABLE IF EXISTS projection_state;

-- The identity of this event log, one row made when the file is created. The views file
-- records the id it was built from, so it is never applied to another log's events (a file
-- replaced, or restored from a backup).
CREATE TABLE store_identity (
    id  TEXT NOT NULL
);
INSERT INTO store_identity (id) VALUES (lower(hex(randomblob(16))));
