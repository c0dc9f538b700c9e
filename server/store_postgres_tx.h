/* store_postgres_tx.h - the PostgreSQL backend's transactions
 * (store_postgres_tx.c), as store.h states them: store_tx_begin,
 * store_tx_savepoint, store_tx_rollback_to_savepoint, store_tx_commit (with
 * a COMMIT in doubt resolved) and store_tx_abort, on a connection of the
 * pool. For store_postgres.c, whose table they fill and whose single
 * writes they wrap. */
#ifndef STORE_POSTGRES_TX_H
#define STORE_POSTGRES_TX_H

#include "server/store_postgres_pool.h"

int pg_tx_begin(store_conn *conn);
int pg_tx_savepoint(store_conn *conn);
int pg_tx_rollback_to_savepoint(store_conn *conn);
int pg_tx_commit(store_conn *conn, const store_commit_check *check);
void pg_tx_abort(store_conn *conn);

#endif
