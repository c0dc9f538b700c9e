-- 006_reservations.sql - units that come back (issue 33): a reservation
-- holds units for a buyer until expires_at_ms and then has one fate
-- (confirmed into an order, cancelled, or expired by the sweep); a cancelled
-- order's units come back as returns, new ledger entries that name it (the
-- ledger stays append-only); an item may cap what one buyer holds and buys.
-- items.stock stays what is available now. reserved and returned are kept on
-- the item's row in the statements that move units, as sold is, so that
-- reading an item costs the same whatever its history:
--   stock + reserved + sold - returned == created stock + every stock set.
-- Whether a reservation lapsed is decided by the server's clock
-- (clock_timestamp()) in the UPDATE that changes its state: a confirm and
-- the expiry on two replicas meet on the reservation's row lock, and the
-- second re-checks the row the first left, so they can't both win. As
-- SQLite's 007. What the upgrade costs on a database with history: the new
-- columns are catalog changes (no default to write: PostgreSQL 11+ keeps a
-- constant default in the catalog), and the new tables start empty; but the
-- CHECKs on items' new columns scan items once (small), and the unique index
-- orders_by_reservation is built by a scan of the whole orders ledger,
-- holding off writes to orders while it runs (docs/operations.md, "Schema").
-- orders.reservation_id's foreign key is added NOT VALID: the column is all
-- NULL, so there is nothing to check, and it is enforced for every new row.

ALTER TABLE items ADD COLUMN reserved bigint NOT NULL DEFAULT 0 CHECK (reserved >= 0),
                  ADD COLUMN returned bigint NOT NULL DEFAULT 0 CHECK (returned >= 0),
                  -- units one buyer may hold and buy; NULL: no limit
                  ADD COLUMN per_buyer_limit bigint CHECK (per_buyer_limit > 0);

CREATE TABLE reservations (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, -- the reservationId
    request_id    text UNIQUE,       -- idempotency key, its own namespace; NULL: none
    buyer_id      text,              -- NULL when none came
    instance_id   text   NOT NULL,   -- the stockd replica that made it
    state         text   NOT NULL DEFAULT 'held'
                  CHECK (state IN ('held', 'confirmed', 'cancelled', 'expired')),
    hold_ms       bigint NOT NULL CHECK (hold_ms > 0), -- the last hold asked (made, extended)
    expires_at_ms bigint NOT NULL,   -- Unix ms by the server's clock
    created_at    timestamptz NOT NULL DEFAULT now(),
    ended_at      timestamptz        -- when it left held
);

-- what the sweep looks for: the held ones, the earliest expiry first
CREATE INDEX reservations_held_by_expiry ON reservations (expires_at_ms) WHERE state = 'held';

CREATE TABLE reservation_lines (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    reservation_id bigint NOT NULL REFERENCES reservations (id),
    item_id        bigint NOT NULL REFERENCES items (id),
    quantity       bigint NOT NULL CHECK (quantity > 0),
    available      bigint NOT NULL CHECK (available >= 0), -- the item's stock right after
    fence          bigint,                                 -- the claim's token (redis)
    fence_seq      integer,
    UNIQUE (reservation_id, item_id)
);

-- who ordered (counted against limits), and the reservation a confirm made it from
ALTER TABLE orders ADD COLUMN buyer_id text,
                   ADD COLUMN reservation_id bigint,
                   -- no scan of the ledger for a column that is all NULL
                   ADD CONSTRAINT orders_reservation_id_fkey FOREIGN KEY (reservation_id)
                       REFERENCES reservations (id) NOT VALID;
CREATE UNIQUE INDEX orders_by_reservation ON orders (reservation_id)
    WHERE reservation_id IS NOT NULL;

-- a cancelled order's units back, one entry per line, once
CREATE TABLE returns (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    order_id    bigint NOT NULL REFERENCES orders (id),
    item_id     bigint NOT NULL REFERENCES items (id),
    quantity    bigint NOT NULL CHECK (quantity > 0),
    remaining   bigint NOT NULL CHECK (remaining >= 0), -- the item's stock right after
    request_id  text,                                   -- the cancel's, NULL when none
    instance_id text   NOT NULL,
    fence       bigint,
    fence_seq   integer,
    lock_token  text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (order_id, item_id)
);

-- what each buyer holds and bought of an item: held reservations and orders
-- count, cancelled and expired ones and cancelled orders don't. Counted
-- whenever a buyer is named (a limit set later sees what came before) and
-- checked against the item's limit in the upsert that counts: its row
-- lock (or the unique index, for a buyer's first units) orders two
-- replicas counting for the same buyer, the second re-checking the first's.
CREATE TABLE buyer_units (
    item_id  bigint NOT NULL REFERENCES items (id),
    buyer_id text   NOT NULL,
    units    bigint NOT NULL CHECK (units >= 0),
    PRIMARY KEY (item_id, buyer_id)
);
