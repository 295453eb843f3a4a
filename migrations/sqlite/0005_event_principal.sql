-- Who was authenticated when each event was appended (a token's name or role, `anonymous`,
-- `system:...` for the server's own events). Events stored before this column existed keep
-- NULL: their principal is unknown, and nothing may guess it.
ALTER TABLE events ADD COLUMN principal TEXT;
