-- The audit view's reservation index leads with the reservation id instead of the project.
-- A view transaction rewrites every leaf it touches, and a project-led index has a leaf per
-- project in every transaction under load across many projects; reservation ids the ledger
-- makes are time-ordered (UUIDv7), so new entries land together at the end of this one. A
-- reservation has a handful of events, so a query checks their project row by row.
DROP INDEX audit_by_reservation;
CREATE INDEX audit_by_reservation ON audit_entries (generation, reservation_id, position);
