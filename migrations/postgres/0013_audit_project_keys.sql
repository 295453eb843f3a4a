-- The audit view's project-led indexes lead with a small integer per project instead of its
-- id. A view transaction inserts each entry into every one of these indexes, and on a load
-- across many projects each insert seeks a leaf of another project from the root: with the
-- project's id (tens of bytes) in every index entry, the indexes were larger and every step of
-- the seek compared it. `audit_projects` gives each project of a generation its key, in the
-- order they first appeared; it also lists the projects in id order (its primary key) for the
-- project list. Queries look the key up and still compare the project id itself.
CREATE TABLE audit_projects (
    generation  BIGINT NOT NULL,
    project     TEXT   NOT NULL,
    project_key BIGINT NOT NULL,
    PRIMARY KEY (generation, project),
    UNIQUE (generation, project_key)
);
INSERT INTO audit_projects (generation, project, project_key)
    SELECT generation, project, ROW_NUMBER() OVER (PARTITION BY generation ORDER BY project)
    FROM (SELECT DISTINCT generation, project FROM audit_entries) AS projects;
ALTER TABLE audit_entries ADD COLUMN project_key BIGINT;
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
-- As on SQLite (sqlite-views/0002): a reservation's entries are found by its id, which the
-- ledger makes time-ordered, so new entries land at the end of this index.
DROP INDEX audit_by_reservation;
CREATE INDEX audit_by_reservation ON audit_entries (generation, reservation_id, position);
-- A node still running the previous binary inserts entries without a key; this gives them one,
-- so its entries are found like the others. The current binary always gives one.
CREATE FUNCTION audit_entries_project_key() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO audit_projects (generation, project, project_key)
        SELECT NEW.generation, NEW.project, COALESCE(MAX(project_key), 0) + 1
        FROM audit_projects WHERE generation = NEW.generation
        ON CONFLICT (generation, project) DO NOTHING;
    SELECT project_key INTO NEW.project_key FROM audit_projects
        WHERE generation = NEW.generation AND project = NEW.project;
    RETURN NEW;
END
$$;
CREATE TRIGGER audit_entries_project_key BEFORE INSERT ON audit_entries
    FOR EACH ROW WHEN (NEW.project_key IS NULL) EXECUTE FUNCTION audit_entries_project_key();
