-- 005_write_probe.sql - one row that /health rewrites while the disk is full
-- (store_probe_write): a read can't tell that space is back, a write can.
-- Nothing else reads it.

CREATE TABLE write_probe (
    id     INTEGER PRIMARY KEY CHECK (id = 1),
    writes INTEGER NOT NULL DEFAULT 0, -- probes that committed
    pad    BLOB                        -- rewritten by each probe: the space a write needs
);

INSERT INTO write_probe (id) VALUES (1);
