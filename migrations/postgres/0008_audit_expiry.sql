-- A reservation's request entry carries its expiry and, for a counted reserve, the count
-- granted, so the reservation list
-- (`GET /v1/projects/{p}/reservations`) can show every reservation, released ones included,
-- from the audit view alone. NULL for every other entry. The audit view's code version moves
-- with this, so existing audit rows are rebuilt from the events with the column filled.
ALTER TABLE audit_entries ADD COLUMN expires_at_ms BIGINT;
ALTER TABLE audit_entries ADD COLUMN granted_count BIGINT;
