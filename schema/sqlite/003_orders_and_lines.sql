-- 003_orders_and_lines.sql - an order (what one request deducts, under its
-- requestId) has lines, one per item: the ledger. Until now every deduction
-- was one row of its own; each becomes an order with one line, under the
-- same id, so every orderId stays what it was.

CREATE TABLE orders (
    id          INTEGER PRIMARY KEY,          -- the orderId
    request_id  TEXT UNIQUE,                  -- idempotency key; NULL when not given
    instance_id TEXT NOT NULL,                -- the stockd replica that wrote it
    lock_mode   TEXT NOT NULL,                -- redis | none | atomic
    created_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);

CREATE TABLE order_lines (
    id         INTEGER PRIMARY KEY,
    order_id   INTEGER NOT NULL REFERENCES orders (id),
    item_id    INTEGER NOT NULL REFERENCES items (id),
    quantity   INTEGER NOT NULL CHECK (quantity > 0),
    remaining  INTEGER NOT NULL CHECK (remaining >= 0), -- the item's stock right after
    fence      INTEGER,                                 -- the lock's fencing token (redis)
    fence_seq  INTEGER,
    lock_token TEXT,                                    -- owner token of that lock
    UNIQUE (order_id, item_id)
);

INSERT INTO orders (id, request_id, instance_id, lock_mode, created_at)
    SELECT id, request_id, instance_id, lock_mode, created_at FROM deductions;
INSERT INTO order_lines (order_id, item_id, quantity, remaining, fence, fence_seq, lock_token)
    SELECT id, item_id, quantity, remaining, fence, fence_seq, lock_token FROM deductions
    ORDER BY id;
DROP TABLE deductions;

CREATE INDEX order_lines_by_item ON order_lines (item_id, order_id);
