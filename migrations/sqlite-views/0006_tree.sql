-- The hierarchy (SPEC rule 11) on the read side.
--
-- Each project's parent, from its `ParentSet` events (a project without a parent has no row), so
-- the project list filters on `?parent=` and answers each project's parent, and a subtree's
-- audit finds the descendants. Part of the audit view: its rows carry the audit view's
-- generation and are written in the same transactions as its entries.
CREATE TABLE project_parents (
    generation  INTEGER NOT NULL,
    project     TEXT    NOT NULL,
    parent      TEXT    NOT NULL,
    PRIMARY KEY (generation, project)
) WITHOUT ROWID;
CREATE INDEX project_children ON project_parents (generation, parent, project);
-- Audit entries of the hierarchy's events: a `ParentSet` names the new parent (NULL when the
-- parent was removed); the `Descendant*` entries of an ancestor name the descendant they are
-- about. NULL for every other entry. The audit view's code version moves with this, so
-- existing audit rows are rebuilt from the events with the columns filled.
ALTER TABLE audit_entries ADD COLUMN parent TEXT;
ALTER TABLE audit_entries ADD COLUMN descendant TEXT;
