/* store_postgres_sql.h - the PostgreSQL backend's statements
 * (store_postgres_sql.c): one table, by id, that its sessions prepare, and
 * the columns their rows carry. For the backend's operations
 * (store_postgres.c), its ledger (store_postgres_order.c) and its
 * reservations (store_postgres_reserve.c). */
#ifndef STORE_POSTGRES_SQL_H
#define STORE_POSTGRES_SQL_H

#include "server/store_postgres_session.h"

enum stmt_id {
    ST_PING, ST_ITEM_INSERT, ST_ITEM_BY_REQUEST, ST_ITEM_GET, ST_ITEM_LIST,
    ST_SET_STOCK, ST_SET_STOCK_FENCED, ST_STOCK_READ, ST_ROW_FENCE, ST_STOCK_CLAIM,
    ST_STOCK_WRITE_CLAIMED,
    ST_STOCK_TAKE, ST_STOCK_LOCK, ST_ORDER_INSERT, ST_LINE_INSERT, ST_ORDER_BY_REQUEST,
    ST_ORDER_GET, ST_LINES_OF_ORDER, ST_LINES_OF_ITEM,
    /* per-buyer limits (store_postgres_order.c) */
    ST_SET_LIMIT, ST_LIMITS_OF, ST_BUYER_COUNT, ST_BUYER_UNCOUNT, ST_BUYER_HAD,
    /* reservations and returns (store_postgres_reserve.c) */
    ST_ITEM_STATE, ST_RESERVE_TAKE, ST_UNRESERVE, ST_CONFIRM_TAKE, ST_RETURN_ADD,
    ST_RES_INSERT, ST_RES_LINE_INSERT, ST_RES_BY_REQUEST, ST_RES_GET, ST_RES_LINES, ST_RES_END,
    ST_RES_EXTEND, ST_RES_DUE, ST_RES_PICK, ST_RES_EXPIRE, ST_HELD_COUNT,
    ST_ORDER_LOCK, ST_RETURN_INSERT, ST_RETURNS_OF_ORDER,
    ST_COUNT
};
_Static_assert(ST_COUNT <= PG_STMTS_MAX, "a session prepares PG_STMTS_MAX statements at most");

extern const struct pg_stmt pg_stmts[ST_COUNT];

#define ORDER_NCOLS 8 /* ORDER_COLS' columns: a line's follow them */

/* A row of ITEM_SELECT; ORDER_COLS, LINE_COLS and RES_COLS from column col on. */
void pg_read_item(const PGresult *r, int row, store_item *it);
void pg_read_order_info(const PGresult *r, int row, int col, store_order_info *o);
void pg_read_line(const PGresult *r, int row, int col, store_line *l);
void pg_read_reservation(const PGresult *r, int row, int col, store_reservation *res);

#endif
