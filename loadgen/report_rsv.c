/* report_rsv.c - the report's part for a reserve run (--scenario reserve):
 * how the buyers' reservations ended and the item's totals before and after,
 * as text and as the JSON report's "reservations" object. Part of the report
 * module (report.h). */
#include "loadgen/report.h"

static json_t *totals_json(const lg_rsv_totals *t)
{
    return json_pack("{s:I, s:I, s:I, s:I}", "available", (json_int_t)t->available, "reserved",
                     (json_int_t)t->reserved, "sold", (json_int_t)t->sold, "returned",
                     (json_int_t)t->returned);
}

void lg_report_rsv_text(FILE *f, const lg_opts *o, const lg_run *r)
{
    const lg_rsv_summary *s = &r->rsv_sum;
    const long long *st = s->by_state;
    fprintf(f, "\nreservations: %lld buyers%s, holdMs %d, shares %d/%d/%d "
            "(confirm/cancel/lapse)%s\n", r->nrsv, o->buyer_ids ? " (cycling buyerIds)" : "",
            o->hold_ms, o->share[0], o->share[1], o->share[2],
            o->buyer_limit ? ", perBuyerLimit set" : "");
    fprintf(f, "  %lld held: %lld confirmed, %lld cancelled, %lld expired, %lld still held, "
            "%lld unread, %lld not found; refused: %lld insufficient_stock, %lld buyer_limit_reached, %lld "
            "other; %lld without an answer\n", s->reservations, st[LG_RSV_CONFIRMED],
            st[LG_RSV_CANCELLED], st[LG_RSV_EXPIRED], st[LG_RSV_HELD], st[LG_RSV_UNREAD],
            st[LG_RSV_MISSING], s->refused_stock, s->refused_limit, s->refused_other, s->unknown);
    const lg_rsv_totals *b = &r->rsv_before, *a = &r->rsv_after;
    fprintf(f, "  item %lld: available %lld -> %lld, reserved %lld -> %lld, sold %lld -> %lld, "
            "returned %lld -> %lld; sold during the run %lld of %lld%s\n", r->items[0].id,
            b->available, a->available, b->reserved, a->reserved, b->sold, a->sold, b->returned,
            a->returned, s->sold, b->available, s->sold == b->available ? " (sold out)" : "");
    fprintf(f, "  the item was read %d times; after the buyers, %.1f s waiting for the last "
            "holds to run out (+ %d ms)\n", r->stock.n, r->rsv_waited_s, LG_RESERVE_GRACE_MS);
}

json_t *lg_report_rsv_json(const lg_opts *o, const lg_run *r)
{
    const lg_rsv_summary *s = &r->rsv_sum;
    const long long *st = s->by_state;
    json_t *j = json_pack("{s:I, s:i, s:[i,i,i], s:i, s:I, s:I, s:I, s:I, s:I, s:I, s:I}",
                          "buyers", (json_int_t)r->nrsv, "holdMs", o->hold_ms, "shares",
                          o->share[0], o->share[1], o->share[2], "graceMs",
                          LG_RESERVE_GRACE_MS, "held", (json_int_t)s->reservations,
                          "confirmed", (json_int_t)st[LG_RSV_CONFIRMED], "cancelled",
                          (json_int_t)st[LG_RSV_CANCELLED], "expired",
                          (json_int_t)st[LG_RSV_EXPIRED], "stillHeld",
                          (json_int_t)st[LG_RSV_HELD], "unread", (json_int_t)st[LG_RSV_UNREAD],
                          "unknown", (json_int_t)s->unknown);
    if (j == NULL)
        return NULL;
    json_object_set_new(j, "refused", json_pack("{s:I, s:I, s:I}", "insufficientStock",
                                                (json_int_t)s->refused_stock, "buyerLimit",
                                                (json_int_t)s->refused_limit, "other",
                                                (json_int_t)s->refused_other));
    json_object_set_new(j, "notFound", json_integer(st[LG_RSV_MISSING]));
    json_object_set_new(j, "perBuyerLimit", o->buyer_limit ? json_integer(o->buyer_limit)
                                                            : json_null());
    json_object_set_new(j, "before", totals_json(&r->rsv_before));
    json_object_set_new(j, "after", totals_json(&r->rsv_after));
    json_object_set_new(j, "sold", json_integer(s->sold));
    json_object_set_new(j, "soldOut", json_boolean(s->sold == r->rsv_before.available));
    json_object_set_new(j, "lateReads", json_integer(s->late_samples));
    json_object_set_new(j, "waitedSec", json_real(r->rsv_waited_s));
    return j;
}
