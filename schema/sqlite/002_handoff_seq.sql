-- 002_handoff_seq.sql - fencing tokens become (fence, seq) pairs.
-- A lease handed from holder to holder inside one stockd keeps its fence; the
-- hand-off number tells its holders apart, so every holder of a key still
-- carries a token greater than all before it: (fence, seq) in row-value order.

ALTER TABLE items ADD COLUMN fence_seq INTEGER NOT NULL DEFAULT 0;
ALTER TABLE deductions ADD COLUMN fence_seq INTEGER;
