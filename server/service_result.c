/* service_result.c - what a request ends in and what the service calls
 * things: outcomes and their names, the lock modes' names, an item's lock
 * key; and how the results of the layers below (a store code, a lock code)
 * become outcomes. The bottom of the service: it calls none of its files. */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "server/log.h"
#include "server/service_parts.h"

const char *const service_lock_mode_names[SERVICE_LOCK_COUNT + 1] = {"redis", "none", "atomic",
                                                                     "db", NULL};

const char *const service_outcome_names[SERVICE_OUTCOME_COUNT] = {
    [SERVICE_OK] = "ok",
    [SERVICE_REPLAYED] = "replayed",
    [SERVICE_NOT_FOUND] = "item_not_found",
    [SERVICE_ORDER_NOT_FOUND] = "order_not_found",
    [SERVICE_INSUFFICIENT] = "insufficient_stock",
    [SERVICE_CONFLICT] = "request_id_conflict",
    [SERVICE_LOCK_TIMEOUT] = "lock_timeout",
    [SERVICE_LOCK_INTERRUPTED] = "lock_interrupted",
    [SERVICE_LOCK_LOST] = "lock_lost",
    [SERVICE_REDIS_DOWN] = "redis_unavailable",
    [SERVICE_STORAGE_BUSY] = "storage_busy",
    [SERVICE_STORAGE_UNAVAILABLE] = "storage_unavailable",
    [SERVICE_COMMIT_UNKNOWN] = "commit_unknown",
    [SERVICE_STORAGE_ERROR] = "storage_error",
    [SERVICE_SHUTTING_DOWN] = "shutting_down",
    [SERVICE_STORAGE_FULL] = "storage_full",
    [SERVICE_NO_MEMORY] = "out_of_memory",
    [SERVICE_RESERVATION_NOT_FOUND] = "reservation_not_found",
    [SERVICE_RESERVATION_EXPIRED] = "reservation_expired",
    [SERVICE_RESERVATION_CANCELLED] = "reservation_cancelled",
    [SERVICE_RESERVATION_CONFIRMED] = "reservation_confirmed",
    [SERVICE_BUYER_LIMIT] = "buyer_limit_reached",
    /* the metrics' label; its HTTP code is invalid_request, which a label of
     * its own keeps apart from the parser's refusals */
    [SERVICE_BUYER_REQUIRED] = "buyer_required",
};

const char *service_outcome_name(enum service_outcome o)
{
    return o < SERVICE_OUTCOME_COUNT ? service_outcome_names[o] : "storage_error";
}

const char *service_reservation_state(const store_reservation *r)
{
    return store_reservation_state_name(r->state == STORE_RES_HELD && r->lapsed
                                            ? STORE_RES_EXPIRED
                                            : r->state);
}

void service_lock_key(const char *prefix, int64_t item_id, char *buf)
{
    snprintf(buf, DLOCK_KEY_MAX + 1, "%s{%lld}", prefix, (long long)item_id);
}

int service_fail(service_result *out, enum service_outcome o, const char *fmt, ...)
{
    va_list ap;
    out->outcome = o;
    va_start(ap, fmt);
    vsnprintf(out->message, sizeof(out->message), fmt, ap);
    va_end(ap);
    return o;
}

int service_from_store_text(service_result *out, int rc, const char *detail)
{
    switch (rc) {
    case STORE_OK: return out->outcome;
    case STORE_ERR_NOT_FOUND: return service_fail(out, SERVICE_NOT_FOUND, "no item with this id");
    case STORE_ERR_STALE:
        return service_fail(out, SERVICE_LOCK_LOST,
                            "stale lock holder refused by fencing (%s); nothing deducted", detail);
    case STORE_ERR_BUSY:
        return service_fail(out, SERVICE_STORAGE_BUSY, "database busy: %s", detail);
    case STORE_ERR_UNAVAILABLE:
        return service_fail(out, SERVICE_STORAGE_UNAVAILABLE, "database unavailable: %s; "
                            "nothing written", detail);
    case STORE_ERR_IN_DOUBT:
        return service_fail(out, SERVICE_COMMIT_UNKNOWN, "%s; it may have been written: a retry "
                            "with the same requestId answers the order if it was, and GET "
                            "/items/{id} shows the stock", detail);
    case STORE_ERR_LOCK_TIMEOUT:
        return service_fail(out, SERVICE_LOCK_TIMEOUT, "%s; try again", detail);
    case STORE_ERR_FULL:
        return service_fail(out, SERVICE_STORAGE_FULL, "the database's disk is full (%s); "
                            "nothing written, and writes resume once space is freed", detail);
    case STORE_ERR_VETOED: /* only the drain check vetoes */
        return service_fail(out, SERVICE_SHUTTING_DOWN,
                            "server is shutting down; nothing deducted");
    default:
        return service_fail(out, SERVICE_STORAGE_ERROR, "storage error: %s", detail);
    }
}

int service_from_store(service_result *out, int rc, const store_conn *c)
{
    if (rc == STORE_ERR_BUYER_LIMIT || rc == STORE_ERR_BUYER_REQUIRED) {
        store_limit_info l = out->limit = store_limit_item(c);
        if (rc == STORE_ERR_BUYER_REQUIRED)
            return service_fail(out, SERVICE_BUYER_REQUIRED, "item %lld has a per-buyer limit "
                                "of %lld: field \"buyerId\" is required; nothing taken",
                                (long long)l.item_id, (long long)l.limit);
        return service_fail(out, SERVICE_BUYER_LIMIT, "buyer has %lld of item %lld and asks for "
                            "%lld more; the limit is %lld a buyer; nothing taken",
                            (long long)l.had, (long long)l.item_id, (long long)l.asked,
                            (long long)l.limit);
    }
    return rc == STORE_OK ? (int)out->outcome : service_from_store_text(out, rc, store_errstr(c));
}

int service_from_state(service_result *out, const store_reservation *r)
{
    if (r->state == STORE_RES_CONFIRMED)
        return service_fail(out, SERVICE_RESERVATION_CONFIRMED, "reservation %lld was confirmed "
                            "(order %lld)", (long long)r->id, (long long)r->order_id);
    if (r->state == STORE_RES_CANCELLED)
        return service_fail(out, SERVICE_RESERVATION_CANCELLED, "reservation %lld was cancelled",
                            (long long)r->id);
    if (r->state == STORE_RES_HELD) /* lapsed, not swept yet: still reserved (review 2.4) */
        return service_fail(out, SERVICE_RESERVATION_EXPIRED, "reservation %lld has expired; "
                            "its units come back to stock within a second", (long long)r->id);
    return service_fail(out, SERVICE_RESERVATION_EXPIRED, "reservation %lld has expired; its "
                        "units are back in stock", (long long)r->id);
}

/* A node's change of state, logged once: by whichever thread flips its
 * flag. detail: what the call that failed said (the node's own failure,
 * most often; "" when a success noted a node found down). */
static void note_node(service *s, int i, const dlock_node_info *info, const char *detail)
{
    if (!info->up && !atomic_exchange(&s->redis_node_down[i], 1)) {
        atomic_fetch_add(&s->redis_nodes_down, 1);
        log_kv(LOG_WARN, "Redis unreachable", LOG_STR("node", info->name),
               LOG_STR("detail", detail[0] ? detail : "its last call got no answer"));
    } else if (info->up && atomic_load(&s->redis_node_down[i]) &&
               atomic_exchange(&s->redis_node_down[i], 0)) {
        atomic_fetch_sub(&s->redis_nodes_down, 1);
        log_kv(LOG_INFO, "Redis reachable again", LOG_STR("node", info->name));
    }
}

/* A failure while every node answers (redirected too often, a slot's keys
 * split by a migration, an error reply): one line a second at most. */
static void note_failure(service *s, const char *detail)
{
    int64_t now = service_now_ms(), last = atomic_load(&s->redis_failed_logged_ms);
    if ((last != 0 && now - last < 1000) ||
        !atomic_compare_exchange_strong(&s->redis_failed_logged_ms, &last, now)) {
        atomic_fetch_add(&s->redis_failed_unlogged, 1);
        return;
    }
    log_kv(LOG_WARN, "Redis call failed", LOG_STR("detail", detail),
           LOG_INT("moreSinceLastLine", atomic_exchange(&s->redis_failed_unlogged, 0)));
}

void service_note_redis(service *s, int rc, const char *detail)
{
    if (detail == NULL || detail[0] == '\0')
        detail = rc == DLOCK_OK ? "" : dlock_strerror(rc);
    if (rc == DLOCK_ERR_AUTH) {
        if (!atomic_exchange(&s->redis_refused, 1))
            log_kv(LOG_ERROR, "Redis refuses our credentials; every deduction fails until the "
                   "password or ACL user is fixed", LOG_STR("detail", detail));
        return;
    }
    if (rc != DLOCK_ERR_REDIS && atomic_load(&s->redis_refused) &&
        atomic_exchange(&s->redis_refused, 0))
        log_event(LOG_INFO, "Redis takes our credentials again", NULL, 0);
    if (s->locks == NULL || (rc != DLOCK_ERR_REDIS && atomic_load(&s->redis_nodes_down) == 0))
        return; /* the common case: nothing to look at */
    int n = dlock_node_count(s->locks), down = 0;
    for (int i = 0; i < n && i < DLOCK_NODES_MAX; i++) {
        dlock_node_info info;
        dlock_node_info_read(s->locks, i, &info);
        note_node(s, i, &info, rc == DLOCK_ERR_REDIS ? detail : "");
        down += !info.up;
    }
    if (rc == DLOCK_ERR_REDIS && down == 0)
        note_failure(s, detail);
}

int service_from_lock(service *s, service_result *out, int rc, const char *key,
                      const char *detail)
{
    if (rc == DLOCK_ERR_REDIS || rc == DLOCK_ERR_AUTH)
        service_note_redis(s, rc, detail);
    switch (rc) {
    case DLOCK_ERR_TIMEOUT:
        return service_fail(out, SERVICE_LOCK_TIMEOUT, "lock %s is busy; try again", key);
    case DLOCK_ERR_INTERRUPTED:
        return service_fail(out, SERVICE_LOCK_INTERRUPTED,
                            "lock %s: work outlasted the maximum renewals; rolled back, nothing "
                            "deducted", key);
    case DLOCK_ERR_LOST:
        return service_fail(out, SERVICE_LOCK_LOST,
                            "lock %s was lost; rolled back, nothing deducted", key);
    case DLOCK_ERR_REDIS:
        return service_fail(out, SERVICE_REDIS_DOWN, "Redis unavailable: %s", detail);
    case DLOCK_ERR_AUTH: /* dlock_errstr says "Redis authentication failed: ..." */
        return service_fail(out, SERVICE_REDIS_DOWN, "%s; nothing deducted", detail);
    case DLOCK_ERR_NOMEM: /* the ask's memory, at its call */
        return service_fail(out, SERVICE_NO_MEMORY, "out of memory for the lock's wait; "
                            "nothing deducted");
    case DLOCK_ERR_CANCELLED: /* the drain withdrew the wait: its commit would be refused */
    case DLOCK_ERR_CLOSED:
        return service_fail(out, SERVICE_SHUTTING_DOWN,
                            "server is shutting down; nothing deducted");
    default:
        return service_fail(out, SERVICE_STORAGE_ERROR, "lock error: %s", detail);
    }
}

/* Whether order o has exactly r's lines (in any order). */
static int same_lines(const store_order *o, const req_order *r)
{
    if (o->nlines != r->nlines)
        return 0;
    for (int i = 0; i < r->nlines; i++) {
        int found = 0;
        for (int j = 0; j < o->nlines && !found; j++)
            found = o->lines[j].item_id == r->lines[i].item_id &&
                    o->lines[j].quantity == r->lines[i].quantity;
        if (!found)
            return 0;
    }
    return 1;
}

int service_from_order_store(service_result *out, int rc, const store_conn *c, const req_order *r)
{
    if (rc == STORE_OK)
        return out->outcome = SERVICE_OK;
    if (rc != STORE_ERR_DUPLICATE)
        return service_from_store(out, rc, c);
    if (r && same_lines(&out->order, r))
        return out->outcome = SERVICE_REPLAYED;
    return service_fail(out, SERVICE_CONFLICT,
                        "requestId \"%s\" was already used for another order",
                        r ? r->request_id : "");
}

void service_add_short(service_result *out, const req_order *r, int i, int64_t stock)
{
    out->shorts[out->nshort++] = (service_short_line){r->lines[i].item_id, stock,
                                                      r->lines[i].quantity};
}

int service_insufficient(service_result *out)
{
    return service_fail(out, SERVICE_INSUFFICIENT, "not enough stock on %d line%s; nothing "
                        "deducted", out->nshort, out->nshort == 1 ? "" : "s");
}

void service_result_clear(service_result *out)
{
    out->outcome = SERVICE_OK;
    memset(&out->order.info, 0, sizeof(out->order.info));
    out->order.nlines = 0;
    out->item.id = out->item.stock = out->item.sold = out->item.line_count = 0;
    out->item.name[0] = '\0';
    out->nshort = 0;
    out->message[0] = '\0';
    memset(&out->reservation, 0, offsetof(store_reservation, lines));
    out->limit = (store_limit_info){0, 0, 0, 0};
}

/* The index of r's line for item id, or -1. */
static int line_of(const req_order *r, int64_t id)
{
    for (int i = 0; i < r->nlines; i++)
        if (r->lines[i].item_id == id)
            return i;
    return -1;
}

void service_keep(struct order_result *res, const req_order *r, const service_result *out)
{
    res->outcome = out->outcome;
    res->order_id = out->order.info.order_id;
    res->limit = out->limit;
    res->shorts = 0;
    if (out->outcome == SERVICE_REPLAYED)
        snprintf(res->placed_by, sizeof(res->placed_by), "%s", out->order.info.instance);
    else
        snprintf(res->message, sizeof(res->message), "%s", out->message);
    if (out->outcome == SERVICE_OK || out->outcome == SERVICE_REPLAYED) {
        for (int j = 0; j < out->order.nlines; j++) { /* a replay's lines, in r's order */
            int i = line_of(r, out->order.lines[j].item_id);
            if (i >= 0) {
                res->remaining[i] = out->order.lines[j].remaining;
                res->fence[i] = out->order.lines[j].fence;
            }
        }
    }
    for (int k = 0; out->outcome == SERVICE_INSUFFICIENT && k < out->nshort; k++) {
        int i = line_of(r, out->shorts[k].item_id);
        if (i >= 0) {
            res->shorts |= 1u << i;
            res->remaining[i] = out->shorts[k].remaining;
        }
    }
}

void service_result_of(const struct order_result *res, const req_order *r,
                       service_result *out)
{
    out->outcome = res->outcome;
    out->order.info.order_id = res->order_id;
    out->limit = res->limit;
    if (res->outcome == SERVICE_REPLAYED)
        snprintf(out->order.info.instance, sizeof(out->order.info.instance), "%.*s",
                 RULE_INSTANCE_MAX, res->placed_by);
    else
        snprintf(out->message, sizeof(out->message), "%s", res->message);
    out->order.info.has_request_id = r->has_request_id;
    if (r->has_request_id)
        snprintf(out->order.info.request_id, sizeof(out->order.info.request_id), "%s",
                 r->request_id);
    int placed = res->outcome == SERVICE_OK || res->outcome == SERVICE_REPLAYED;
    out->order.nlines = placed ? r->nlines : 0;
    for (int i = 0; i < r->nlines; i++) {
        if (placed)
            out->order.lines[i] = (store_line){r->lines[i].item_id, r->lines[i].quantity,
                                               res->remaining[i], res->fence[i]};
        if (res->shorts & (1u << i))
            out->shorts[out->nshort++] = (service_short_line){r->lines[i].item_id,
                                                              res->remaining[i],
                                                              r->lines[i].quantity};
    }
}
