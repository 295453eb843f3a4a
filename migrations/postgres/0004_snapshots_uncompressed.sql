-- Snapshots are written inside the append transaction, under the append lock. A project with a
-- long history has a snapshot of megabytes, and compressing it (TOAST's default) held every
-- other append back for as long; stored out of line but uncompressed it is one plain write.
ALTER TABLE snapshots ALTER COLUMN data SET STORAGE EXTERNAL;
