/* store_postgres_sql.c - the PostgreSQL backend's statements, in one table
 * by id (the pool's sessions prepare each on first use), and the columns
 * their rows carry. Data and column readers only: it calls nothing of the
 * backend. */
#include "server/store_lines.h"
#include "server/store_postgres_sql.h"

#include <string.h>

#define TS(col) "to_char(" col " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"
/* The server's clock in Unix ms: the one clock reservations lapse by.
 * clock_timestamp(), not now(): a transaction's start is no time to judge
 * a lapse by when it waited for a row lock since */
#define NOW_MS "(extract(epoch FROM clock_timestamp()) * 1000)::bigint"
/* sold and line_count are kept on the row by a trigger (schema 002), reserved
 * and returned by the statements that move units (006): a read costs the
 * same however long the item's ledger is */
#define ITEM_COLS "id, name, stock, sold, line_count, reserved, returned, " \
                  "COALESCE(per_buyer_limit, 0)"
#define ITEM_SELECT "SELECT " ITEM_COLS " FROM items "
/* ORDER_NCOLS of them */
#define ORDER_COLS "o.id, o.request_id, o.instance_id, o.lock_mode, " TS("o.created_at") ", " \
                   "o.buyer_id, COALESCE(o.reservation_id, 0), " \
                   "EXISTS (SELECT 1 FROM returns rt WHERE rt.order_id = o.id)"
#define LINE_COLS "l.item_id, l.quantity, l.remaining, COALESCE(l.fence, 0), " \
                  "COALESCE(l.fence_seq, 0)"
/* A write of an item's row bound (id, quantity, fence, seq): with a fence
 * ($3 not NULL) only while the row still carries it, our claim standing */
#define FENCED "($3::bigint IS NULL OR (fence = $3 AND fence_seq = $4))"
#define RES_COLS "r.id, r.request_id, r.buyer_id, r.state, " \
                 "r.state = 'held' AND r.expires_at_ms <= " NOW_MS ", r.expires_at_ms, " \
                 "COALESCE((SELECT o.id FROM orders o WHERE o.reservation_id = r.id), 0), " \
                 "r.instance_id, " TS("r.created_at") ", r.hold_ms"
/* held and not lapsed, by the server's clock as the row is (re)checked */
#define HELD "r.state = 'held' AND r.expires_at_ms > " NOW_MS
/* an array of ids, sent as text ('{1,2}') */
#define IDS(n) "$" #n "::text::bigint[]"

const struct pg_stmt pg_stmts[ST_COUNT] = {
    [ST_PING] = {"ping", "SELECT 1", ""},
    /* the row as written comes back with the INSERT, inside its transaction:
     * nothing is left to read once COMMIT has answered. A requestId already
     * there (or being written, which this waits for) adds nothing, no row */
    [ST_ITEM_INSERT] = {"insert item",
        "INSERT INTO items (name, stock, request_id, created_stock, per_buyer_limit) "
        "VALUES ($1, $2, $3, $2, NULLIF($4, 0)) "
        "ON CONFLICT (request_id) DO NOTHING RETURNING " ITEM_COLS, "titi"},
    /* the item as the creation under this requestId made it */
    [ST_ITEM_BY_REQUEST] = {"find item request id",
        "SELECT id, name, created_stock, 0, 0, 0, 0, COALESCE(per_buyer_limit, 0) FROM items "
        "WHERE request_id = $1", "t"},
    [ST_ITEM_GET] = {"read item", ITEM_SELECT "WHERE id = $1", "i"},
    [ST_ITEM_LIST] = {"list items", ITEM_SELECT "WHERE id > $1 ORDER BY id LIMIT $2", "ii"},
    [ST_SET_STOCK] = {"set stock",
        "UPDATE items SET stock = $2, updated_at = now() WHERE id = $1", "iiii"},
    [ST_SET_STOCK_FENCED] = {"set stock",
        "UPDATE items SET stock = $2, fence = $3, fence_seq = $4, updated_at = now() "
        "WHERE id = $1 AND (fence, fence_seq) < ($3, $4)", "iiii"},
    [ST_STOCK_READ] = {"read stock", "SELECT stock FROM items WHERE id = $1", "i"},
    [ST_ROW_FENCE] = {"read the row's token",
        "SELECT fence, fence_seq FROM items WHERE id = $1", "i"},
    [ST_STOCK_CLAIM] = {"claim row",
        "UPDATE items SET fence = $3, fence_seq = $4 "
        "WHERE id = $1 AND (fence, fence_seq) < ($3, $4) RETURNING stock", "iiii"},
    [ST_STOCK_WRITE_CLAIMED] = {"write stock",
        "UPDATE items SET stock = $2, updated_at = now() "
        "WHERE id = $1 AND fence = $3 AND fence_seq = $4", "iiii"},
    [ST_STOCK_TAKE] = {"take stock",
        "UPDATE items SET stock = stock - $2, updated_at = now() "
        "WHERE id = $1 AND stock >= $2 RETURNING stock", "ii"},
    [ST_STOCK_LOCK] = {"lock row", "SELECT stock FROM items WHERE id = $1 FOR UPDATE", "i"},
    /* a requestId already there (or being written by another transaction,
     * which this one then waits for) adds nothing and returns no row; nor
     * does an order with no buyer ($4) of an item ($6) with a per-buyer
     * limit: checked in the statement that writes it, not one more round
     * trip per line. A confirm's order ($5) was counted when reserved */
    [ST_ORDER_INSERT] = {"insert order",
        "INSERT INTO orders (request_id, instance_id, lock_mode, buyer_id, reservation_id) "
        "SELECT $1, $2, $3, $4, $5 WHERE $4 IS NOT NULL OR $5 IS NOT NULL OR NOT EXISTS "
        "(SELECT 1 FROM items WHERE id = ANY (" IDS(6) ") AND per_buyer_limit IS NOT NULL) "
        "ON CONFLICT (request_id) DO NOTHING RETURNING id, " TS("created_at"), "ttttit"},
    [ST_LINE_INSERT] = {"insert order line",
        "INSERT INTO order_lines (order_id, item_id, quantity, remaining, fence, fence_seq, "
        "lock_token) VALUES ($1, $2, $3, $4, $5, $6, $7)", "iiiiiit"},
    [ST_ORDER_BY_REQUEST] = {"find request id",
        "SELECT " ORDER_COLS " FROM orders o WHERE o.request_id = $1", "t"},
    [ST_ORDER_GET] = {"read order", "SELECT " ORDER_COLS " FROM orders o WHERE o.id = $1", "i"},
    [ST_LINES_OF_ORDER] = {"read order lines",
        "SELECT " LINE_COLS " FROM order_lines l WHERE l.order_id = $1 ORDER BY l.id", "i"},
    [ST_LINES_OF_ITEM] = {"list lines",
        "SELECT " ORDER_COLS ", " LINE_COLS " FROM order_lines l "
        "JOIN orders o ON o.id = l.order_id WHERE l.item_id = $1 AND l.order_id < $2 "
        "ORDER BY l.order_id DESC LIMIT $3", "iii"},
    [ST_SET_LIMIT] = {"set the buyer limit",
        "UPDATE items SET per_buyer_limit = NULLIF($2, 0), updated_at = now() WHERE id = $1",
        "ii"},
    /* the first of the items (in their order) that has a limit */
    [ST_LIMITS_OF] = {"read the buyer limits",
        "SELECT id, per_buyer_limit FROM items WHERE id = ANY (" IDS(1) ") AND "
        "per_buyer_limit IS NOT NULL ORDER BY array_position(" IDS(1) ", id) LIMIT 1", "t"},
    /* (item, buyer, units, limit: 0 none, -1 the item's): counted only while
     * the buyer stays within the limit; no row when it would not */
    [ST_BUYER_COUNT] = {"count the buyer's units",
        "WITH lim AS (SELECT CASE WHEN $4 >= 0 THEN $4 ELSE COALESCE((SELECT per_buyer_limit "
        "FROM items WHERE id = $1), 0) END AS l) "
        "INSERT INTO buyer_units AS b (item_id, buyer_id, units) SELECT $1, $2, $3 FROM lim "
        "WHERE l = 0 OR $3 <= l ON CONFLICT (item_id, buyer_id) DO UPDATE "
        "SET units = b.units + EXCLUDED.units WHERE (SELECT l FROM lim) = 0 OR "
        "b.units + EXCLUDED.units <= (SELECT l FROM lim) RETURNING units", "itii"},
    [ST_BUYER_UNCOUNT] = {"uncount the buyer's units",
        "UPDATE buyer_units SET units = GREATEST(units - $3, 0) "
        "WHERE item_id = $1 AND buyer_id = $2", "iti"},
    [ST_BUYER_HAD] = {"read the buyer's units",
        "SELECT units FROM buyer_units WHERE item_id = $1 AND buyer_id = $2", "it"},
    [ST_ITEM_STATE] = {"read the item's stock and token",
        "SELECT stock, fence, fence_seq FROM items WHERE id = $1", "i"},
    [ST_RESERVE_TAKE] = {"reserve stock",
        "UPDATE items SET stock = stock - $2, reserved = reserved + $2, updated_at = now() "
        "WHERE id = $1 AND stock >= $2 AND " FENCED
        " RETURNING stock, COALESCE(per_buyer_limit, 0)", "iiii"},
    [ST_UNRESERVE] = {"give reserved stock back",
        "UPDATE items SET stock = stock + $2, reserved = reserved - $2, updated_at = now() "
        "WHERE id = $1 AND " FENCED " RETURNING stock", "iiii"},
    [ST_CONFIRM_TAKE] = {"sell reserved stock",
        "UPDATE items SET reserved = reserved - $2, updated_at = now() "
        "WHERE id = $1 AND " FENCED " RETURNING stock", "iiii"},
    [ST_RETURN_ADD] = {"return stock",
        "UPDATE items SET stock = stock + $2, returned = returned + $2, updated_at = now() "
        "WHERE id = $1 AND " FENCED " RETURNING stock", "iiii"},
    /* a requestId already there (or being written) adds nothing, no row */
    [ST_RES_INSERT] = {"insert reservation",
        "INSERT INTO reservations AS r (request_id, buyer_id, instance_id, hold_ms, "
        "expires_at_ms) VALUES ($1, $2, $3, $4, " NOW_MS " + $4) "
        "ON CONFLICT (request_id) DO NOTHING RETURNING " RES_COLS, "ttti"},
    [ST_RES_LINE_INSERT] = {"insert reservation line",
        "INSERT INTO reservation_lines (reservation_id, item_id, quantity, available, fence, "
        "fence_seq) VALUES ($1, $2, $3, $4, $5, $6)", "iiiiii"},
    [ST_RES_BY_REQUEST] = {"find reservation request id",
        "SELECT " RES_COLS " FROM reservations r WHERE r.request_id = $1", "t"},
    [ST_RES_GET] = {"read reservation", "SELECT " RES_COLS " FROM reservations r WHERE r.id = $1",
        "i"},
    [ST_RES_LINES] = {"read reservation lines",
        "SELECT l.item_id, l.quantity, i.stock FROM reservation_lines l "
        "JOIN items i ON i.id = l.item_id WHERE l.reservation_id = $1 ORDER BY l.id", "i"},
    /* the one decision of a confirm or a cancel: held, not lapsed, as the
     * row stands once any other transaction's change to it committed */
    [ST_RES_END] = {"end reservation",
        "UPDATE reservations r SET state = $2, ended_at = now() WHERE r.id = $1 AND " HELD
        " RETURNING " RES_COLS, "it"},
    [ST_RES_EXTEND] = {"extend reservation",
        "UPDATE reservations r SET expires_at_ms = " NOW_MS " + $2, hold_ms = $2 "
        "WHERE r.id = $1 AND " HELD " RETURNING " RES_COLS, "ii"},
    [ST_RES_DUE] = {"find lapsed reservations",
        "SELECT r.id, l.item_id FROM (SELECT id, expires_at_ms FROM reservations "
        "WHERE state = 'held' AND expires_at_ms <= " NOW_MS " ORDER BY expires_at_ms, id "
        "LIMIT $1) r JOIN reservation_lines l ON l.reservation_id = r.id "
        "ORDER BY r.expires_at_ms, r.id, l.id", "i"},
    /* the sweep's pass, in one round trip however many it gives back: up
     * to $1 lapsed ones whose every item is among $2 (those another
     * transaction holds - a confirm, a cancel, another sweep - skipped, not
     * waited for), expired by the condition re-checked on each row, their
     * units back to stock (fenced: each item's row only while it carries
     * the claim's ($3, $4), NULL unfenced) and out of their buyers' counts.
     * Answers the items that had units to give back and those written
     * (fewer: a fence refused, and the caller rolls back), and how late
     * each was. The items' rows are locked first, in id order (lk, which
     * pick waits for), as every other write of several items takes them:
     * a pass never waits in a circle with a reservation or an order */
    [ST_RES_EXPIRE] = {"expire reservations",
        "WITH lk AS (SELECT i.id FROM items i WHERE i.id = ANY (" IDS(2) ") ORDER BY i.id "
        "FOR UPDATE), "
        "pick AS (SELECT r.id FROM reservations r WHERE (SELECT count(*) FROM lk) >= 0 AND "
        "r.state = 'held' AND "
        "r.expires_at_ms <= " NOW_MS " AND NOT EXISTS (SELECT 1 FROM reservation_lines l "
        "WHERE l.reservation_id = r.id AND l.item_id <> ALL (" IDS(2) ")) "
        "ORDER BY r.expires_at_ms, r.id LIMIT $1 FOR UPDATE OF r SKIP LOCKED), "
        "gone AS (UPDATE reservations r SET state = 'expired', ended_at = now() FROM pick "
        "WHERE r.id = pick.id AND r.state = 'held' AND r.expires_at_ms <= " NOW_MS
        " RETURNING r.id, r.buyer_id, " NOW_MS " - r.expires_at_ms AS lag), "
        "lines AS (SELECT l.item_id, sum(l.quantity) AS q FROM gone g JOIN reservation_lines l "
        "ON l.reservation_id = g.id GROUP BY l.item_id), "
        "f AS (SELECT * FROM unnest(" IDS(2) ", " IDS(3) ", " IDS(4) ") AS f(item_id, fence, "
        "seq)), "
        "back AS (UPDATE items i SET stock = i.stock + lines.q, reserved = i.reserved - lines.q, "
        "updated_at = now() FROM lines JOIN f USING (item_id) WHERE i.id = lines.item_id AND "
        "(f.fence IS NULL OR (i.fence = f.fence AND i.fence_seq = f.seq)) RETURNING i.id), "
        "uncount AS (UPDATE buyer_units b SET units = GREATEST(b.units - v.q, 0) FROM "
        "(SELECT l.item_id, g.buyer_id, sum(l.quantity) AS q FROM gone g JOIN "
        "reservation_lines l ON l.reservation_id = g.id WHERE g.buyer_id IS NOT NULL "
        "GROUP BY 1, 2) v WHERE b.item_id = v.item_id AND b.buyer_id = v.buyer_id RETURNING 1) "
        "SELECT (SELECT count(*) FROM lines), (SELECT count(*) FROM back), "
        "(SELECT count(*) FROM uncount), COALESCE((SELECT array_agg(lag) FROM gone), '{}')",
        "ittt"},
    [ST_HELD_COUNT] = {"count held reservations",
        "SELECT count(*) FROM reservations WHERE state = 'held'", ""},
    /* cancels of one order, one at a time: the next reads what the last wrote */
    [ST_ORDER_LOCK] = {"lock order", "SELECT id FROM orders WHERE id = $1 FOR UPDATE", "i"},
    [ST_RETURN_INSERT] = {"insert return",
        "INSERT INTO returns (order_id, item_id, quantity, remaining, request_id, instance_id, "
        "fence, fence_seq, lock_token) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        "iiiittiit"},
    [ST_RETURNS_OF_ORDER] = {"read returns",
        "SELECT item_id, remaining FROM returns WHERE order_id = $1", "i"},
};

static int col_bool(const PGresult *r, int row, int col)
{
    return strcmp(PQgetvalue(r, row, col), "t") == 0;
}

void pg_read_item(const PGresult *r, int row, store_item *it)
{
    it->id = col_int(r, row, 0);
    col_text(it->name, sizeof(it->name), r, row, 1);
    it->stock = col_int(r, row, 2);
    it->sold = col_int(r, row, 3);
    it->line_count = col_int(r, row, 4);
    it->reserved = col_int(r, row, 5);
    it->returned = col_int(r, row, 6);
    it->per_buyer_limit = col_int(r, row, 7);
}

void pg_read_order_info(const PGresult *r, int row, int col, store_order_info *o)
{
    o->order_id = col_int(r, row, col);
    o->has_request_id = !PQgetisnull(r, row, col + 1);
    col_text(o->request_id, sizeof(o->request_id), r, row, col + 1);
    col_text(o->instance, sizeof(o->instance), r, row, col + 2);
    col_text(o->lock_mode, sizeof(o->lock_mode), r, row, col + 3);
    col_text(o->created_at, sizeof(o->created_at), r, row, col + 4);
    o->has_buyer_id = !PQgetisnull(r, row, col + 5);
    col_text(o->buyer_id, sizeof(o->buyer_id), r, row, col + 5);
    o->reservation_id = col_int(r, row, col + 6);
    o->cancelled = col_bool(r, row, col + 7);
}

void pg_read_line(const PGresult *r, int row, int col, store_line *l)
{
    l->item_id = col_int(r, row, col);
    l->quantity = col_int(r, row, col + 1);
    l->remaining = col_int(r, row, col + 2);
    l->fence.fence = col_int(r, row, col + 3);
    l->fence.seq = (int)col_int(r, row, col + 4);
}

void pg_read_reservation(const PGresult *r, int row, int col, store_reservation *res)
{
    const char *state = PQgetvalue(r, row, col + 3);
    res->id = col_int(r, row, col);
    res->has_request_id = !PQgetisnull(r, row, col + 1);
    col_text(res->request_id, sizeof(res->request_id), r, row, col + 1);
    res->has_buyer_id = !PQgetisnull(r, row, col + 2);
    col_text(res->buyer_id, sizeof(res->buyer_id), r, row, col + 2);
    res->state = store_state_of(state);
    res->lapsed = col_bool(r, row, col + 4);
    res->expires_at_ms = col_int(r, row, col + 5);
    res->order_id = col_int(r, row, col + 6);
    col_text(res->instance, sizeof(res->instance), r, row, col + 7);
    col_text(res->created_at, sizeof(res->created_at), r, row, col + 8);
    res->hold_ms = col_int(r, row, col + 9);
}
