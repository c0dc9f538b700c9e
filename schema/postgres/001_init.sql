-- 001_init.sql - items and the ledger (orders and their lines), as SQLite's
-- schema stands after its own 003: the same columns and rules, in
-- PostgreSQL's types. items.stock is what is left; the lines are the source
-- of truth for what was sold.

CREATE TABLE items (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name       text   NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    stock      bigint NOT NULL CHECK (stock >= 0),
    -- fencing token (fence, fence_seq) of the newest lock holder that claimed
    -- this row; a holder with an older token lost its lease and can't write
    fence      bigint  NOT NULL DEFAULT 0,
    fence_seq  integer NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE orders (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, -- the orderId
    request_id  text UNIQUE,          -- idempotency key; NULL when not given
    instance_id text NOT NULL,        -- the stockd replica that wrote it
    lock_mode   text NOT NULL,        -- redis | none | atomic | db
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE order_lines (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    order_id   bigint NOT NULL REFERENCES orders (id),
    item_id    bigint NOT NULL REFERENCES items (id),
    quantity   bigint NOT NULL CHECK (quantity > 0),
    remaining  bigint NOT NULL CHECK (remaining >= 0), -- the item's stock right after
    fence      bigint,                                 -- the lock's fencing token (redis)
    fence_seq  integer,
    lock_token text,                                   -- owner token of that lock
    UNIQUE (order_id, item_id)
);

CREATE INDEX order_lines_by_item ON order_lines (item_id, order_id);
