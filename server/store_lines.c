/* store_lines.c - what both backends' reservations and returns do alike with
 * a write's lines (store_lines.h): backend-neutral, so it is written once,
 * beneath both, calling nothing. */
#include <string.h>

#include "server/store_lines.h"

void store_lines_by_item(const int64_t *items, int n, int *idx)
{
    for (int i = 0; i < n; i++) { /* insertion: 32 lines at most */
        int j = i;
        for (; j > 0 && items[idx[j - 1]] > items[i]; j--)
            idx[j] = idx[j - 1];
        idx[j] = i;
    }
}

void store_line_order(const store_line *lines, int n, int *idx)
{
    int64_t items[RULE_ORDER_LINES_MAX];
    for (int i = 0; i < n; i++)
        items[i] = lines[i].item_id;
    store_lines_by_item(items, n, idx);
}

void store_res_line_order(const store_reservation *res, int *idx)
{
    int64_t items[RULE_ORDER_LINES_MAX];
    for (int i = 0; i < res->nlines; i++)
        items[i] = res->lines[i].item_id;
    store_lines_by_item(items, res->nlines, idx);
}

store_fence store_fence_for(const int64_t *items, const store_fence *f, int n, int64_t item)
{
    for (int k = 0; f && k < n; k++)
        if (items[k] == item)
            return f[k];
    return (store_fence){0, 0};
}

store_fence store_order_fence(const store_new_order *o, int64_t item)
{
    for (int i = 0; i < o->nlines; i++)
        if (o->lines[i].item_id == item)
            return o->lines[i].fence;
    return (store_fence){0, 0};
}

const store_fence *store_fence_or_null(const store_fence *f)
{
    return f && f->fence > 0 ? f : NULL;
}

static int index_of(const int64_t *items, int n, int64_t item)
{
    for (int i = 0; i < n; i++)
        if (items[i] == item)
            return i;
    return -1;
}

/* Adds the distinct items of one reservation (group[0..ng)) to items
 * when they all fit within items_max: 1, else 0 (nothing added). */
static int cover(const int64_t *group, int ng, int64_t *items, int items_max, int *n)
{
    int add = 0;
    for (int k = 0; k < ng; k++)
        add += index_of(items, *n, group[k]) < 0 && index_of(group, k, group[k]) < 0;
    if (*n + add > items_max)
        return 0;
    for (int k = 0; k < ng; k++)
        if (index_of(items, *n, group[k]) < 0)
            items[(*n)++] = group[k];
    return 1;
}

void store_due_start(store_due *d, int64_t *items, int items_max, int *n, int *due)
{
    memset(d, 0, sizeof(*d));
    d->items = items, d->items_max = items_max, d->n = n, d->due = due;
    *n = *due = 0;
}

void store_due_row(store_due *d, int64_t reservation, int64_t item)
{
    if (reservation != d->cur && d->ng > 0)
        store_due_end(d);
    d->cur = reservation;
    if (d->ng < RULE_ORDER_LINES_MAX)
        d->group[d->ng++] = item;
}

void store_due_end(store_due *d)
{
    if (d->ng > 0)
        *d->due += cover(d->group, d->ng, d->items, d->items_max, d->n);
    d->ng = 0;
}

const char *const store_state_names[4] = {
    [STORE_RES_HELD] = "held", [STORE_RES_CONFIRMED] = "confirmed",
    [STORE_RES_CANCELLED] = "cancelled", [STORE_RES_EXPIRED] = "expired",
};

enum store_reservation_state store_state_of(const char *name)
{
    for (int s = STORE_RES_CONFIRMED; s <= STORE_RES_EXPIRED; s++)
        if (strcmp(name, store_state_names[s]) == 0)
            return (enum store_reservation_state)s;
    return STORE_RES_HELD;
}

const char *store_not_held(const store_reservation *r)
{
    return r->lapsed ? "held past its expiry" : store_state_names[r->state];
}
