/* service_answer.c - an order's end: counted (its outcome, its units, the
 * hand-offs it crossed), logged, handed to its caller, freed; and what the
 * writes say about the database's space. Below the files that place orders
 * (service_order.c, service_batch.c), so that they end orders without
 * calling back up. */
#include <stdlib.h>

#include "server/log.h"
#include "server/service_parts.h"

const void *service_here(void)
{
    static _Thread_local char here;
    return &here;
}

void service_touch(struct order *o)
{
    const void *here = service_here();
    if (o->thread != here) {
        o->hops++;
        o->thread = here;
    }
}

void service_note_space(service *s, enum service_outcome o, int wrote)
{
    int64_t since = 0, now = service_now_ms();
    if (o == SERVICE_STORAGE_FULL) {
        if (atomic_compare_exchange_strong(&s->full_since_ms, &since, now > 0 ? now : 1))
            log_kv(LOG_ERROR, "database disk full: writes refused until space is freed, "
                   "reads still answered", LOG_STR("backend", store_backend_name(s->store)));
    } else if (wrote && o == SERVICE_OK && (since = atomic_exchange(&s->full_since_ms, 0))) {
        log_kv(LOG_INFO, "database takes writes again", LOG_INT("fullForMs", now - since));
    }
}

void service_order_free(struct order *o) { free(o); }

void service_answer(struct order *o)
{
    service *s = o->s;
    const req_order *r = &o->r;
    service_result out;
    service_result_clear(&out);
    service_result_of(&o->res, r, &out);
    service_touch(o);
    if (o->thread != o->door) /* the answer goes back to the thread it came in on */
        o->hops++;
    service_note_space(s, out.outcome, 1);
    int64_t units = 0;
    for (int i = 0; out.outcome == SERVICE_OK && i < r->nlines; i++)
        units += r->lines[i].quantity;
    metrics_order(s->metrics, out.outcome, r->nlines, units);
    if (out.outcome == SERVICE_BUYER_LIMIT)
        metrics_buyer_limit_refusal(s->metrics);
    metrics_handoffs(s->metrics, o->hops);
    if (o->reduce)
        metrics_reduce(s->metrics, out.outcome);
    service_log_order(s, r, &out, o->held, o->t0_us);
    o->done(&out, o->arg);
    if (o->pending == 0)
        service_order_free(o);
}
