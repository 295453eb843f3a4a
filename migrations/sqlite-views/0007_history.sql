-- A usage history (`GET /v1/projects/{p}/usage/history`) is read from the audit view. Between
-- two entries a hold stops counting at its expiry whether or not an event records it, so a
-- point finds the holds that expired since the entry before it by their expiry: this index,
-- over the reservations' request entries only (the only ones with an expiry).
CREATE INDEX audit_by_expiry ON audit_entries (generation, project, expires_at_ms)
    WHERE expires_at_ms IS NOT NULL;
