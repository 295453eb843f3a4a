-- The user inside the project an entry is about (SPEC rule 8: a reserve, a denial, a
-- correction or a user's limits may name one), so audits and reservation lists filter on it.
-- NULL for entries about the project alone. The audit view's code version moves with this, so
-- existing audit rows are rebuilt from the events with the column filled.
ALTER TABLE audit_entries ADD COLUMN user_id TEXT;
