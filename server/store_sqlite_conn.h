/* store_sqlite_conn.h - one connection to the SQLite file
 * (store_sqlite_conn.c): its statements by id, their rows, errors as store
 * codes, the migrations. For the SQLite backend (store_sqlite.c) alone; a
 * connection is used by one thread at a time. */
#ifndef STORE_SQLITE_CONN_H
#define STORE_SQLITE_CONN_H

#include <sqlite3.h>

#include "server/store_backend.h"

/* The statements, by id. */
enum stmt_id {
    ST_BEGIN, ST_COMMIT, ST_ROLLBACK, ST_SAVEPOINT, ST_RELEASE, ST_ROLLBACK_TO, ST_PING,
    ST_ITEM_INSERT, ST_ITEM_BY_REQUEST, ST_ITEM_GET, ST_ITEM_LIST,
    ST_SET_STOCK, ST_SET_STOCK_FENCED, ST_STOCK_READ, ST_ROW_FENCE, ST_STOCK_CLAIM,
    ST_STOCK_WRITE_CLAIMED,
    ST_STOCK_TAKE, ST_ORDER_INSERT, ST_LINE_INSERT, ST_ORDER_BY_REQUEST, ST_ORDER_GET,
    ST_LINES_OF_ORDER, ST_LINES_OF_ITEM, ST_PROBE,
    /* per-buyer limits (store_sqlite_order.c) */
    ST_SET_LIMIT, ST_LIMIT_OF, ST_BUYER_COUNT, ST_BUYER_UNCOUNT, ST_BUYER_HAD,
    /* reservations and returns (store_sqlite_reserve.c) */
    ST_ITEM_STATE, ST_RESERVE_TAKE, ST_UNRESERVE, ST_CONFIRM_TAKE, ST_RETURN_ADD,
    ST_RES_INSERT, ST_RES_LINE_INSERT, ST_RES_BY_REQUEST, ST_RES_GET, ST_RES_LINES, ST_RES_END,
    ST_RES_EXTEND, ST_RES_DUE, ST_RES_PICK, ST_RES_EXPIRE, ST_HELD_COUNT,
    ST_RETURN_INSERT, ST_RETURNS_OF_ORDER,
    ST_COUNT
};

/* Each statement's SQL, by id: also the text of its failures. */
extern const char *const sq_stmt_sql[ST_COUNT];

typedef struct sqlite_conn {
    struct store_conn base;
    sqlite3 *db;
    sqlite3_stmt *stmt[ST_COUNT]; /* prepared on first use */
    int savepoint;                /* the open transaction has one */
    int in_tx;                    /* a transaction was begun and not ended by us... */
    int tx_rc;                    /* ...and the failure that made SQLite roll it back */
    char err[256], tx_err[256];   /* tx_err: that failure's text */
} sqlite_conn;

/* Opens the file cfg->db (created if missing) with the pragmas (WAL,
 * synchronous as cfg->sync_full says, foreign keys) and cfg's busy
 * timeout, as a connection of backend be: the connection, or NULL with err
 * filled. */
sqlite_conn *sq_conn_open(const store_config *cfg, const store_backend *be, char *err,
                          size_t errlen);

/* Finalizes the cached statements and closes c. */
void sq_conn_close(sqlite_conn *c);

/* Applies the schema files newer than the file's user_version, in one
 * transaction: STORE_OK, or the failure with err filled. */
int sq_migrate(sqlite_conn *c, char *err, size_t errlen);

/* Records SQLite's last error on c as "what: message" and returns its
 * store code; a failure that rolled the open transaction back is kept as
 * that transaction's answer (sq_tx_open). */
int sq_fail(sqlite_conn *c, const char *what);

/* Statement id, prepared on first use, reset and unbound; NULL (with c->err)
 * when it can't be prepared. */
sqlite3_stmt *sq_stmt(sqlite_conn *c, enum stmt_id id);

/* Runs statement id, which returns no row: STORE_OK or the failure.
 * ST_BEGIN and ST_COMMIT mark the transaction open and ended. */
int sq_run(sqlite_conn *c, enum stmt_id id);

/* Steps st, a bound query of at most one row: STORE_OK with the row there to
 * read (reset st after), STORE_ERR_NOT_FOUND, or the failure. */
int sq_first_row(sqlite_conn *c, sqlite3_stmt *st, const char *what);

/* Ends the open transaction, if any, by ROLLBACK. */
void sq_rollback(sqlite_conn *c);

/* STORE_OK inside a transaction; else what ended it, with c->err saying so. */
int sq_tx_open(sqlite_conn *c);

/* Column col of st's row as text into dst ("" for NULL). */
void sq_copy_text(char *dst, size_t size, sqlite3_stmt *st, int col);

/* A row of ITEM_SELECT; ORDER_COLS and LINE_COLS from column col on. */
#define ORDER_NCOLS 8 /* ORDER_COLS' columns: a line's follow them */
void sq_read_item(sqlite3_stmt *st, store_item *it);
void sq_read_order_info(sqlite3_stmt *st, int col, store_order_info *o);
void sq_read_line(sqlite3_stmt *st, int col, store_line *l);

#endif
