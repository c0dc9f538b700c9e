/* store_lines.h - what both backends' reservations and returns do alike with
 * a write's lines, whatever the database (store_lines.c): the order in which
 * they touch item rows, the fence of an item's claim, and which lapsed
 * reservations one sweep pass can cover. Only the backends include it. */
#ifndef STORE_LINES_H
#define STORE_LINES_H

#include "server/store.h"

/* idx[0..n): the indices of items[0..n) by item id. Every write of several
 * item rows touches them in this order, so that two writes over the same
 * items never wait for each other in a circle (PostgreSQL would break it
 * by failing one with a deadlock); the answer keeps the lines' own order. */
void store_lines_by_item(const int64_t *items, int n, int *idx);

/* The same for a write's lines and a reservation's. */
void store_line_order(const store_line *lines, int n, int *idx);
void store_res_line_order(const store_reservation *res, int *idx);

/* The fence of item's claim: the one of items[k] == item in f[0..n), or
 * (0, 0) (unfenced) when f is NULL or item is not among items. Matched by
 * item, never by position: the caller's lines and the store's may come in
 * different orders. */
store_fence store_fence_for(const int64_t *items, const store_fence *f, int n, int64_t item);

/* The fence o gives item's line (a confirm's), (0, 0) when none. */
store_fence store_order_fence(const store_new_order *o, int64_t item);

/* f as the item writes take it: NULL when unfenced (NULL, or no token). */
const store_fence *store_fence_or_null(const store_fence *f);

/* store_reservations_due's grouping of its rows (reservation, item), read
 * in reservation order: each reservation whose distinct items all fit
 * within items_max, with those already taken, adds them to items[0..*n)
 * and counts in *due; one that does not fit adds nothing. */
typedef struct store_due {
    int64_t *items;
    int items_max, *n, *due;
    int64_t group[RULE_ORDER_LINES_MAX], cur;
    int ng;
} store_due;
void store_due_start(store_due *d, int64_t *items, int items_max, int *n, int *due);
void store_due_row(store_due *d, int64_t reservation, int64_t item);
void store_due_end(store_due *d); /* after the last row */

/* The state names the databases store, by enum store_reservation_state. */
extern const char *const store_state_names[4];

/* The state a stored name is (held for a name it does not know). */
enum store_reservation_state store_state_of(const char *name);

/* What a reservation that is not held is, for an error's text: "confirmed",
 * "cancelled", "expired" (lapsed counts as expired). */
const char *store_not_held(const store_reservation *r);

#endif
