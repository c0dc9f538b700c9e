-- 001_init.sql - items and the deductions ledger.
-- items.stock is what is left; the ledger is the source of truth for what was sold.

CREATE TABLE items (
    id         INTEGER PRIMARY KEY,
    name       TEXT    NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    stock      INTEGER NOT NULL CHECK (stock >= 0),
    -- fencing token of the newest lock holder that claimed this row (its read
    -- sets it); a holder with an older token lost its lease and can't write
    fence      INTEGER NOT NULL DEFAULT 0,
    created_at TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    updated_at TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);

CREATE TABLE deductions (
    id          INTEGER PRIMARY KEY,                -- the orderId
    item_id     INTEGER NOT NULL REFERENCES items (id),
    quantity    INTEGER NOT NULL CHECK (quantity > 0),
    remaining   INTEGER NOT NULL CHECK (remaining >= 0), -- stock right after; replayed answers
    request_id  TEXT UNIQUE,                        -- idempotency key; NULL when not given
    instance_id TEXT    NOT NULL,                   -- the stockd replica that wrote it
    lock_mode   TEXT    NOT NULL,                   -- redis | none | atomic
    fence       INTEGER,                            -- fencing token of the lock held (redis)
    lock_token  TEXT,                               -- owner token of that lock
    created_at  TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);

CREATE INDEX deductions_by_item ON deductions (item_id, id);
