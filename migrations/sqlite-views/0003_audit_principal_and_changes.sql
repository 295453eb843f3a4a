-- Audit entries carry the event's principal (who was authenticated; NULL for events stored
-- before principals were recorded), and limits entries what they changed: the effective
-- limits of the resources named, before and after, as `{resource: limit}` JSON, and for
-- LimitsSet whether `force` was used. The audit view's code version moves with this, so
-- existing audit rows are rebuilt from the events with the new columns filled.
ALTER TABLE audit_entries ADD COLUMN principal TEXT;
ALTER TABLE audit_entries ADD COLUMN before_values TEXT;
ALTER TABLE audit_entries ADD COLUMN after_values TEXT;
ALTER TABLE audit_entries ADD COLUMN forced INTEGER;
CREATE INDEX audit_by_principal ON audit_entries (generation, project, principal, position);
