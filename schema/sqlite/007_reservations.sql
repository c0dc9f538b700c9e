-- 007_reservations.sql - units that come back (issue 33): a reservation
-- holds units for a buyer until expires_at_ms and then has one fate
-- (confirmed into an order, cancelled, or expired by the sweep); a cancelled
-- order's units come back as returns, new ledger entries that name it (the
-- ledger stays append-only); an item may cap what one buyer holds and buys.
-- items.stock stays what is available now. reserved and returned are kept on
-- the item's row in the statements that move units, as sold is, so that
-- reading an item costs the same however long its history:
--   stock + reserved + sold - returned == created stock + every stock set.
-- Whether a reservation lapsed is decided by the database's clock in the
-- statement that changes its state, so a confirm and the expiry can't both
-- win. As PostgreSQL's 006.

ALTER TABLE items ADD COLUMN reserved INTEGER NOT NULL DEFAULT 0 CHECK (reserved >= 0);
ALTER TABLE items ADD COLUMN returned INTEGER NOT NULL DEFAULT 0 CHECK (returned >= 0);
-- units one buyer may hold and buy; NULL: no limit
ALTER TABLE items ADD COLUMN per_buyer_limit INTEGER CHECK (per_buyer_limit > 0);

CREATE TABLE reservations (
    id            INTEGER PRIMARY KEY,      -- the reservationId
    request_id    TEXT UNIQUE,              -- idempotency key, its own namespace; NULL: none
    buyer_id      TEXT,                     -- NULL when none came
    instance_id   TEXT    NOT NULL,         -- the stockd replica that made it
    state         TEXT    NOT NULL DEFAULT 'held'
                  CHECK (state IN ('held', 'confirmed', 'cancelled', 'expired')),
    hold_ms       INTEGER NOT NULL CHECK (hold_ms > 0), -- the last hold asked (made, extended)
    expires_at_ms INTEGER NOT NULL,         -- Unix ms by the database's clock
    created_at    TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    ended_at      TEXT                      -- when it left held
);

-- what the sweep looks for: the held ones, the earliest expiry first
CREATE INDEX reservations_held_by_expiry ON reservations (expires_at_ms) WHERE state = 'held';

CREATE TABLE reservation_lines (
    id             INTEGER PRIMARY KEY,
    reservation_id INTEGER NOT NULL REFERENCES reservations (id),
    item_id        INTEGER NOT NULL REFERENCES items (id),
    quantity       INTEGER NOT NULL CHECK (quantity > 0),
    available      INTEGER NOT NULL CHECK (available >= 0), -- the item's stock right after
    fence          INTEGER,                                 -- the claim's token (redis)
    fence_seq      INTEGER,
    UNIQUE (reservation_id, item_id)
);

-- who ordered (counted against limits), and the reservation a confirm made it from
ALTER TABLE orders ADD COLUMN buyer_id TEXT;
ALTER TABLE orders ADD COLUMN reservation_id INTEGER REFERENCES reservations (id);
CREATE UNIQUE INDEX orders_by_reservation ON orders (reservation_id)
    WHERE reservation_id IS NOT NULL;

-- a cancelled order's units back, one entry per line, once
CREATE TABLE returns (
    id          INTEGER PRIMARY KEY,
    order_id    INTEGER NOT NULL REFERENCES orders (id),
    item_id     INTEGER NOT NULL REFERENCES items (id),
    quantity    INTEGER NOT NULL CHECK (quantity > 0),
    remaining   INTEGER NOT NULL CHECK (remaining >= 0), -- the item's stock right after
    request_id  TEXT,                                    -- the cancel's, NULL when none
    instance_id TEXT    NOT NULL,
    fence       INTEGER,
    fence_seq   INTEGER,
    lock_token  TEXT,
    created_at  TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    UNIQUE (order_id, item_id)
);

-- what each buyer holds and bought of an item: held reservations and orders
-- count, cancelled and expired ones and cancelled orders don't. Counted
-- whenever a buyer is named (a limit set later sees what came before) and
-- checked, against the item's limit, in the statement that counts.
CREATE TABLE buyer_units (
    item_id  INTEGER NOT NULL REFERENCES items (id),
    buyer_id TEXT    NOT NULL,
    units    INTEGER NOT NULL CHECK (units >= 0),
    PRIMARY KEY (item_id, buyer_id)
) WITHOUT ROWID;
