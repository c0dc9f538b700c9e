-- 006_item_request_ids.sql - POST /items takes an idempotency key, as orders
-- do: an item keeps the requestId it was created under (NULL when none came;
-- its own namespace, apart from the orders') and the stock it was created
-- with, so that a retry of a creation whose answer was lost finds the item
-- instead of making a second one, and a reuse of the key for another item is
-- told from a retry. As PostgreSQL's 004.

ALTER TABLE items ADD COLUMN request_id TEXT;
ALTER TABLE items ADD COLUMN created_stock INTEGER;
CREATE UNIQUE INDEX items_by_request_id ON items (request_id);
