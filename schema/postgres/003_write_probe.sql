-- 003_write_probe.sql - a table /health writes to while the disk is full
-- (store_probe_write): a read can't tell that space is back, a write can.
-- Each probe empties it (TRUNCATE: a new, empty file) and adds a row, so it
-- always needs a new page where the tables live. Nothing else reads it.

CREATE TABLE write_probe (
    probed_at timestamptz NOT NULL DEFAULT now()
);
