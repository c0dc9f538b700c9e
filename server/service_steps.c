/* service_steps.c - the steps of a deduction that an order placed alone
 * (service_order.c) and group commit (service_batch.c) share: the order as
 * written, a retry's first answer, the tokens a lock holds and their raise
 * past a row's, the drain's commit check and the test-only fault point.
 * Below both; calls only service_log.c and service_result.c of the service. */
#include <signal.h>
#include <string.h>

#include "server/log.h"
#include "server/service_parts.h"

/* Asked by the store inside a write's transaction, once it holds the write
 * lock: a wait for it (up to --busy-timeout-ms) may have outlasted the drain
 * deadline, after which the answer could not be sent. */
int service_commits_allowed(void *arg)
{
    service *s = arg;
    return !atomic_load(&s->commits_refused);
}

/* The test-only fault (--test-stop-before-write): the process stops itself
 * once, after the holder's last check and before its write, the window no
 * lease check can cover. */
void service_fault_point(service *s)
{
    if (s->cfg.stop_before_write && atomic_exchange(&s->stopped_once, 1) == 0) {
        log_event(LOG_WARN, "test fault: stopping before the write", NULL, 0);
        raise(SIGSTOP);
    }
}

store_fence service_token_of(const service *s, dlock_handle *h, const char *key)
{
    store_fence f = {0, 0};
    for (int i = 0; h && s->cfg.fencing && i < dlock_key_count(h); i++)
        if (strcmp(dlock_key_at(h, i), key) == 0)
            f.fence = dlock_fence_at(h, i), f.seq = dlock_handoff_seq_at(h, i);
    return f;
}

int service_raise_fence(service *s, dlock_handle *h, const char *key, store_fence row)
{
    int i = 0, n = dlock_key_count(h);
    while (i < n && strcmp(dlock_key_at(h, i), key) != 0)
        i++;
    if (i == n || !s->cfg.fencing) /* no token of h was refused: callers never ask so */
        return DLOCK_ERR_INVALID;
    int64_t was = dlock_fence_at(h, i);
    int rc = dlock_fence_raise_at(h, i, row.fence);
    service_log_fence_raise(s, key, row, was, dlock_fence_at(h, i), rc);
    return rc;
}

store_new_order service_new_order(const service *s, const req_order *r, dlock_handle *h)
{
    store_new_order o = {
        .request_id = r->has_request_id ? r->request_id : NULL, .instance = s->cfg.instance_id,
        .lock_mode = service_lock_mode_names[s->cfg.lock_mode],
        .lock_token = h ? dlock_token(h) : NULL, .nlines = r->nlines};
    for (int i = 0; i < r->nlines; i++)
        o.lines[i] = (store_line){r->lines[i].item_id, r->lines[i].quantity, 0, {0, 0}};
    return o;
}

int service_replayed(store_conn *c, const req_order *r, service_result *out)
{
    if (!r->has_request_id)
        return STORE_ERR_NOT_FOUND;
    int rc = store_order_by_request(c, r->request_id, &out->order);
    return rc == STORE_OK ? STORE_ERR_DUPLICATE : rc;
}
