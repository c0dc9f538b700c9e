-- 002_item_totals.sql - an item carries what its ledger adds up to: sold (the
-- sum of its lines' quantities) and line_count (its lines, one per order), so
-- that reading an item costs the same at ten orders and at ten million; as
-- SQLite's 004. A trigger adds each line to its item in the statement that
-- writes the line, so the totals commit or roll back with it whatever wrote
-- it: every lock mode, group commit, a stockd of the previous version still
-- running during an upgrade. The lines stay the source of truth; the ledger
-- is append-only (nothing updates or deletes a line).

ALTER TABLE items ADD COLUMN sold bigint NOT NULL DEFAULT 0 CHECK (sold >= 0),
                  ADD COLUMN line_count bigint NOT NULL DEFAULT 0 CHECK (line_count >= 0);

-- the ledger so far, in one pass; ALTER TABLE holds items exclusively until
-- the migration commits, so no line is written between this and the trigger
UPDATE items SET sold = t.sold, line_count = t.lines
    FROM (SELECT item_id, SUM(quantity) AS sold, COUNT(*) AS lines FROM order_lines
          GROUP BY item_id) AS t
    WHERE items.id = t.item_id;

CREATE FUNCTION order_lines_add_to_item() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE items SET sold = sold + NEW.quantity, line_count = line_count + 1
        WHERE id = NEW.item_id;
    RETURN NULL;
END
$$;

CREATE TRIGGER order_lines_add_to_item AFTER INSERT ON order_lines
    FOR EACH ROW EXECUTE FUNCTION order_lines_add_to_item();
