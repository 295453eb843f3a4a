-- The audit view's project-led indexes lead with a small integer per project instead of its
-- id. A view transaction inserts each entry into every one of these indexes, and on a load
-- across many projects each insert seeks a leaf of another project from the root: with the
-- project's id (tens of bytes) in every index entry, the indexes were larger and every step of
-- the seek compared it. `audit_projects` gives each project of a generation its key, in the
-- order they first appeared; it also lists the projects in id order (its primary key) for the
-- project list. Queries look the key up and still compare the project id itself.
CREATE TABLE audit_projects (
    generation  INTEGER NOT NULL,
    project     TEXT    NOT NULL,
    project_key INTEGER NOT NULL,
    PRIMARY KEY (generation, project),
    UNIQUE (generation, project_key)
) WITHOUT ROWID;
INSERT INTO audit_projects (generation, project, project_key)
    SELECT generation, project, ROW_NUMBER() OVER (PARTITION BY generation ORDER BY project)
    FROM (SELECT DISTINCT generation, project FROM audit_entries) AS projects;
ALTER TABLE audit_entries ADD COLUMN project_key INTEGER;
UPDATE audit_entries SET project_key = (
    SELECT k.project_key FROM audit_projects k
    WHERE k.generation = audit_entries.generation AND k.project = audit_entries.project);
DROP INDEX audit_by_project;
DROP INDEX audit_by_time;
DROP INDEX audit_by_type;
DROP INDEX audit_by_actor;
DROP INDEX audit_by_principal;
DROP INDEX audit_by_expiry;
CREATE INDEX audit_by_project ON audit_entries (generation, project_key, position);
CREATE INDEX audit_by_time ON audit_entries (generation, project_key, at_ms, position);
CREATE INDEX audit_by_type ON audit_entries (generation, project_key, event_type, position);
CREATE INDEX audit_by_actor ON audit_entries (generation, project_key, actor, position);
CREATE INDEX audit_by_principal ON audit_entries (generation, project_key, principal, position);
CREATE INDEX audit_by_expiry ON audit_entries (generation, project_key, expires_at_ms)
    WHERE expires_at_ms IS NOT NULL;
