/* api.h - the few blocking calls loadgen makes outside the load: create an
 * item, read an item with its ledger rows, probe a path. Each names the URL
 * and what was wrong in err when the server is unreachable or answers
 * something unexpected.
 *
 * Thread safety: every call is independent (its own connection and loop). */
#ifndef LG_API_H
#define LG_API_H

#include <stddef.h>

#include "loadgen/err.h"
#include "loadgen/verdict.h"

/* One answer of lg_api_call. */
typedef struct lg_answer_full {
    long status;            /* 0 on a transport error */
    char *body;             /* NUL-terminated; free with lg_answer_full_free */
    size_t len;
    char retry_after[16];   /* the Retry-After header, "" when absent */
    char content_type[64];  /* the Content-Type header */
} lg_answer_full;

/* One blocking exchange: method ("GET", "POST", ...) on url with body (may
 * be NULL, sent as JSON). Returns 0 with *out filled (any status), or
 * LG_ERR_TRANSPORT / LG_ERR_NOMEM / LG_ERR_SYS with out->status 0. Times out after 60 s
 * (5 s to connect).
 * The tests' harness uses it too. */
int lg_api_call(const char *method, const char *url, const char *body, lg_answer_full *out,
                lg_err *err);

/* The same, with the whole exchange (connecting included) bounded by
 * timeout_ms when it is above 0: for probes that must not wait on a replica
 * that hangs. A time-out is LG_ERR_TRANSPORT. */
int lg_api_call_within(const char *method, const char *url, const char *body, int timeout_ms,
                       lg_answer_full *out, lg_err *err);

/* The same with extra header lines (headers: NULL, "" or "Name: value\r\n"
 * lines) and a body of any type: json 1 sends it as application/json, json 0
 * leaves its Content-Type to headers. */
int lg_api_call_with(const char *method, const char *url, const char *headers, int json,
                     const char *body, int timeout_ms, lg_answer_full *out, lg_err *err);
void lg_answer_full_free(lg_answer_full *a);

typedef struct lg_item_state {
    long long id, stock, sold, order_count;
    long long reserved, returned; /* units held by reservations, given back by cancelled
                                     orders; -1 when the server does not say (before issue 33) */
} lg_item_state;

/* An item's ledger rows, newest first, read over one or more pages; owns
 * their strings. */
typedef struct lg_ledger lg_ledger;

/* POST base/items {"name":name,"stock":stock} (with "perBuyerLimit":limit when
 * limit > 0); *id gets the new item's id. Returns 0, LG_ERR_TRANSPORT
 * (unreachable) or LG_ERR_SETUP (not a 201 with an integer id). */
int lg_api_create_item(const char *base, const char *name, long long stock, long long limit,
                       long long *id, lg_err *err);

/* GET base/items/{id}. Fills *st; when ledger is not NULL, *ledger gets the
 * newest rows ledger rows (up to that many; stockd answers them in pages,
 * which this follows by ?after=) and the caller frees it with lg_ledger_free.
 * rows >= 1. timeout_ms > 0 bounds each page's exchange, connecting included
 * (a sampler that must not wait on a hung replica); 0 is lg_api_call's
 * default. Returns 0, LG_ERR_TRANSPORT (also on a timeout), LG_ERR_LATER (a
 * 503 with Retry-After: ask again), or LG_ERR_SETUP (404, or fields missing). */
int lg_api_get_item(const char *base, long long id, long long rows, int timeout_ms,
                    lg_item_state *st, lg_ledger **ledger, lg_err *err);

/* GET base/path; *status gets the HTTP status. 0 or LG_ERR_TRANSPORT. */
int lg_api_probe(const char *base, const char *path, long *status, lg_err *err);

/* The rows (valid until lg_ledger_free) and their number. */
const lg_ledger_row *lg_ledger_rows(const lg_ledger *l, size_t *n);

void lg_ledger_free(lg_ledger *l);

#endif
