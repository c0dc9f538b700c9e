-- 005_tx_marker.sql - a row each transaction that may be left in doubt writes
-- (store_postgres_tx.c): a COMMIT whose answer was lost is resolved by looking
-- for it, on whichever server is the primary by then. A transaction id can't
-- tell: one that never reached flushed WAL is handed out again after crash
-- recovery or on a promoted standby. One row per transaction (group commit
-- writes many orders in one), keyed by when it was written, so that the old
-- ones are deleted, a few at a time by later transactions, from the index's
-- oldest end: the table holds the last minutes' transactions, no more.

CREATE TABLE tx_marker (
    written_at timestamptz NOT NULL DEFAULT now(),
    token      uuid        NOT NULL DEFAULT gen_random_uuid(),
    PRIMARY KEY (written_at, token)
);
