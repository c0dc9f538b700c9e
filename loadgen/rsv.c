/* rsv.c - the verdict of a reserve run: the item's totals, each
 * reservation's one fate, the lapsed units back on time, the per-buyer
 * limit. Bounds are taken on loadgen's own clock from when it sent and heard,
 * so the server's clock never has to agree with it. */
#include "loadgen/rsv.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "loadgen/answer.h"

static const char *const state_names[] = {"unread", "held", "confirmed", "cancelled",
                                          "expired", "missing", "other"};

int lg_rsv_state_of(const char *name)
{
    for (int i = LG_RSV_HELD; i < LG_RSV_MISSING; i++)
        if (strcmp(name, state_names[i]) == 0)
            return i;
    return LG_RSV_STATE_OTHER;
}

const char *lg_rsv_state_name(int state)
{
    return state >= 0 && state <= LG_RSV_STATE_OTHER ? state_names[state] : "other";
}

long long lg_rsv_parse_time(const char *s)
{
    struct tm tm;
    memset(&tm, 0, sizeof(tm));
    int used = 0;
    if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
               &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &used) != 6 || used != 19)
        return -1;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    long long ms = 0;
    const char *p = s + used;
    if (*p == '.') {
        int digits = 0;
        for (p++; *p >= '0' && *p <= '9'; p++, digits++)
            if (digits < 3)
                ms = ms * 10 + (*p - '0');
        if (digits == 0)
            return -1;
        for (; digits < 3; digits++)
            ms *= 10;
    }
    long long off = 0;
    int hh, mm;
    if ((p[0] == '+' || p[0] == '-') && sscanf(p + 1, "%2d:%2d", &hh, &mm) == 2 && !p[6])
        off = (p[0] == '+' ? 1 : -1) * (hh * 3600LL + mm * 60LL);
    else if (strcmp(p, "Z") != 0)
        return -1;
    time_t t = timegm(&tm);
    return t == (time_t)-1 ? -1 : ((long long)t - off) * 1000 + ms;
}

int64_t lg_rsv_release_by(const lg_rsv *r, int hold_ms, int grace_ms)
{
    if (r->reserve != LG_STEP_OK)
        return r->reserve == LG_STEP_UNKNOWN ? INT64_MAX : r->sent_ns;
    if (r->step == LG_STEP_OK)
        return r->step_ns;
    return r->held_ns + ((int64_t)hold_ms + grace_ms) * 1000000;
}

typedef struct judge {
    lg_finding *out;
    int max, n, violations;
} judge;

static void add(judge *j, int kind, int violation, long long amount, const char *fmt, ...)
{
    if (j->n == j->max)
        return;
    lg_finding *f = &j->out[j->n++];
    f->kind = kind;
    f->violation = violation;
    f->amount = amount;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->text, sizeof(f->text), fmt, ap);
    va_end(ap);
    j->violations += violation;
}

static long long total(const lg_rsv_totals *t)
{
    return t->available + t->reserved + t->sold - t->returned;
}

/* The invariant after the run, and at every sample that reported every total. */
static void check_invariant(const lg_rsv_in *in, judge *j)
{
    long long want = total(&in->before), got = total(&in->after);
    if (in->after.reserved < 0 || in->after.returned < 0)
        add(j, LG_V_INVARIANT, 1, 0, "reservations: GET /items/{id} names no reserved or "
            "returned: the invariant cannot be checked (a stockd before reservations?)");
    else if (got != want)
        add(j, LG_V_INVARIANT, 1, got - want, "reservations: available + reserved + sold - "
            "returned is %lld after the run, %lld before (%+lld units)", got, want, got - want);
    const lg_samples *s = in->samples;
    long long bad = 0, first = 0;
    double at = 0;
    for (int i = 0; s && i < s->n; i++) {
        const lg_sample *x = &s->s[i];
        if (x->reserved < 0 || x->returned < 0)
            continue;
        long long v = x->stock + x->reserved + x->sold - x->returned;
        if (v != want && bad++ == 0)
            first = v, at = x->t_s;
    }
    if (bad)
        add(j, LG_V_INVARIANT, 1, bad, "reservations: %lld reads of the item while the run went "
            "broke the invariant; the first, at %.3f s, summed to %lld, not %lld", bad, at,
            first, want);
}

static void check_oversold(const lg_rsv_in *in, const lg_rsv_summary *sum, judge *j)
{
    const lg_rsv_totals *a = &in->after;
    long long initial = in->before.available;
    if (a->available < 0 || a->reserved < 0 || sum->sold > initial)
        add(j, LG_V_OVERSOLD, 1, sum->sold > initial ? sum->sold - initial : 0,
            "reservations: oversold: available %lld, reserved %lld, sold %lld of the %lld "
            "there were", a->available, a->reserved, sum->sold, initial);
}

/* The fate a reservation must read as, or -1 when any end state will do. */
static int fate_due(const lg_rsv *r)
{
    if (r->step == LG_STEP_OK)
        return r->plan == LG_RSV_CONFIRM ? LG_RSV_CONFIRMED : LG_RSV_CANCELLED;
    if (r->step == LG_STEP_REFUSED) /* e.g. confirm too late: whatever it met, it says */
        return strcmp(r->code, "reservation_expired") == 0 ? LG_RSV_EXPIRED
               : strcmp(r->code, "reservation_cancelled") == 0 ? LG_RSV_CANCELLED
               : strcmp(r->code, "reservation_confirmed") == 0 ? LG_RSV_CONFIRMED : -1;
    if (r->plan == LG_RSV_LAPSE)
        return LG_RSV_EXPIRED; /* nobody asked for anything else */
    return -1;
}

static int cmp_id(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

/* Two requests answered with one reservationId: one reservation, two fates. */
static long long duplicate_ids(const lg_rsv_in *in)
{
    long long *ids = malloc((in->n ? in->n : 1) * sizeof(*ids)), dups = 0;
    size_t k = 0;
    if (ids == NULL)
        return -1;
    for (size_t i = 0; i < in->n; i++)
        if (in->r[i].id > 0)
            ids[k++] = in->r[i].id;
    qsort(ids, k, sizeof(*ids), cmp_id);
    for (size_t i = 1; i < k; i++)
        dups += ids[i] == ids[i - 1];
    free(ids);
    return dups;
}

static int check_fates(const lg_rsv_in *in, lg_rsv_summary *sum, judge *j)
{
    long long wrong = 0, unread = 0, unknown = 0;
    size_t example = 0;
    int want_example = -1;
    for (size_t i = 0; i < in->n; i++) {
        const lg_rsv *r = &in->r[i];
        if (r->id <= 0)
            continue;
        int due = fate_due(r);
        if (r->state == LG_RSV_UNREAD || (in->stopped && r->state == LG_RSV_HELD))
            unread++;
        else if (r->state == LG_RSV_HELD || r->state >= LG_RSV_MISSING ||
                 (due >= 0 && r->state != due)) {
            if (wrong++ == 0)
                example = i, want_example = due;
        } else if (due < 0)
            unknown++;
    }
    long long dups = duplicate_ids(in);
    if (dups < 0)
        return -1;
    if (wrong) {
        const lg_rsv *r = &in->r[example];
        add(j, LG_V_FATES, 1, wrong, "reservations: %lld read back in the wrong state, e.g. "
            "reservation %lld (planned %s) reads %s, due %s", wrong, r->id,
            r->plan == LG_RSV_CONFIRM ? "confirm" : r->plan == LG_RSV_CANCEL ? "cancel" : "lapse",
            lg_rsv_state_name(r->state),
            want_example < 0 ? "confirmed, cancelled or expired" : lg_rsv_state_name(want_example));
    }
    if (dups)
        add(j, LG_V_FATES, 1, dups, "reservations: %lld reservationIds were answered to two "
            "different requests", dups);
    if (sum->sold != sum->confirmed_units)
        add(j, LG_V_FATES, 1, sum->sold - sum->confirmed_units, "reservations: %lld units "
            "sold during the run, but the reservations that read confirmed hold %lld",
            sum->sold, sum->confirmed_units);
    if (unread || unknown)
        add(j, LG_N_RESERVE, 0, unread + unknown, "reservations: %lld could not be read back "
            "or were still held when the run was stopped, and %lld lost a confirm's or "
            "cancel's answer (either end is theirs)", unread, unknown);
    return 0;
}

/* At a sample's read, between t0 and t1, no more units can be reserved than
 * those of reservations that may have been made by t1 and not yet released
 * at t0 (lg_rsv_release_by). */
static void check_returns(const lg_rsv_in *in, lg_rsv_summary *sum, judge *j)
{
    const lg_samples *s = in->samples;
    for (int i = 0; s && i < s->n; i++) {
        const lg_sample *x = &s->s[i];
        if (x->reserved < 0)
            continue;
        int64_t t0 = (int64_t)(x->t0_s * 1e9), t1 = (int64_t)(x->t1_s * 1e9);
        long long could = in->before.reserved;
        for (size_t k = 0; k < in->n; k++) {
            const lg_rsv *r = &in->r[k];
            if ((r->reserve == LG_STEP_OK || r->reserve == LG_STEP_UNKNOWN) && r->sent_ns <= t1 &&
                lg_rsv_release_by(r, in->hold_ms, in->grace_ms) >= t0)
                could += r->quantity;
        }
        if (x->reserved > could) {
            sum->late_samples++;
            if (x->reserved - could > sum->worst_excess)
                sum->worst_excess = x->reserved - could, sum->worst_late_s = x->t_s;
        }
    }
    if (sum->late_samples)
        add(j, LG_V_LATE_RETURN, 1, sum->worst_excess, "reservations: %lld reads found more "
            "units reserved than could still be held; at %.3f s %lld too many: lapsed units "
            "not back within holdMs %d + %d ms", sum->late_samples, sum->worst_late_s,
            sum->worst_excess, in->hold_ms, in->grace_ms);
}

/* Units a buyer holds or bought at the end: confirmed ones, and any still held. */
static int check_limit(const lg_rsv_in *in, lg_rsv_summary *sum, judge *j)
{
    if (in->limit <= 0 || in->nbuyers <= 0)
        return 0;
    long long *units = calloc((size_t)in->nbuyers, sizeof(*units)), worst = 0;
    if (units == NULL)
        return -1;
    int who = -1;
    for (size_t i = 0; i < in->n; i++) {
        const lg_rsv *r = &in->r[i];
        if (r->buyer >= 0 && r->buyer < in->nbuyers &&
            (r->state == LG_RSV_CONFIRMED || r->state == LG_RSV_HELD))
            units[r->buyer] += r->quantity;
    }
    for (int b = 0; b < in->nbuyers; b++)
        if (units[b] > in->limit) {
            sum->over_limit_buyers++;
            if (units[b] > worst)
                worst = units[b], who = b;
        }
    free(units);
    if (sum->over_limit_buyers)
        add(j, LG_V_BUYER_LIMIT, 1, sum->over_limit_buyers, "reservations: %lld buyers over "
            "perBuyerLimit %lld; buyer %d has %lld units", sum->over_limit_buyers, in->limit,
            who, worst);
    return 0;
}

static void summarize(const lg_rsv_in *in, lg_rsv_summary *sum)
{
    memset(sum, 0, sizeof(*sum));
    for (size_t i = 0; i < in->n; i++) {
        const lg_rsv *r = &in->r[i];
        if (r->id > 0) {
            sum->reservations++;
            sum->by_state[r->state <= LG_RSV_STATE_OTHER ? r->state : LG_RSV_STATE_OTHER]++;
        }
        if (r->state == LG_RSV_CONFIRMED)
            sum->confirmed_units += r->quantity;
        if (r->state == LG_RSV_EXPIRED)
            sum->lapsed_units += r->quantity;
        if (r->reserve == LG_STEP_UNKNOWN)
            sum->unknown++;
        else if (r->reserve == LG_STEP_REFUSED && r->outcome == LG_OUT_INSUFFICIENT)
            sum->refused_stock++;
        else if (r->reserve == LG_STEP_REFUSED && strcmp(r->code, "buyer_limit_reached") == 0)
            sum->refused_limit++;
        else if (r->reserve == LG_STEP_REFUSED)
            sum->refused_other++;
    }
    sum->sold = (in->after.sold - in->after.returned) - (in->before.sold - in->before.returned);
}

int lg_rsv_judge(const lg_rsv_in *in, lg_finding *out, int max, int *violations,
                 lg_rsv_summary *sum)
{
    judge j = {out, max, 0, 0};
    summarize(in, sum);
    check_invariant(in, &j);
    check_oversold(in, sum, &j);
    if (check_fates(in, sum, &j) != 0)
        return -1;
    check_returns(in, sum, &j);
    if (check_limit(in, sum, &j) != 0)
        return -1;
    *violations = j.violations;
    return j.n;
}
