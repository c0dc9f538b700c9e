/* verdict.c - the checker: compares what the service says it holds (stock,
 * sold, ledger rows) with what it told this run's requests, and names every
 * broken invariant with its size. */
#include "loadgen/verdict.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loadgen/err.h"

static const char *const finding_names[LG_FINDING_COUNT] = {
    "oversold", "lost_updates", "stock_leak", "unacknowledged_deductions",
    "unrecorded_acknowledgements", "false_refusals", "undetermined",
};

const char *lg_finding_name(int kind)
{
    return kind >= 0 && kind < LG_FINDING_COUNT ? finding_names[kind] : "unknown";
}

void lg_item_check_init(lg_item_check *c, long long id)
{
    memset(c, 0, sizeof(*c));
    c->id = id;
    c->min_ok_remaining = -1;
    c->min_409_remaining = -1;
}

static void tally_one(lg_item_check *c, const lg_rec *r)
{
    if (r->outcome == LG_OUT_OK) {
        c->acked_qty += r->quantity;
        c->acked_n++;
        if (c->min_ok_remaining < 0 || r->remaining < c->min_ok_remaining)
            c->min_ok_remaining = r->remaining;
    } else if (LG_OUT_UNDETERMINED(r->outcome)) {
        c->undetermined_qty += r->quantity;
        c->undetermined_n++;
    } else {
        c->refused_n++;
    }
    if (r->outcome == LG_OUT_INSUFFICIENT && r->remaining >= 0) {
        if (r->remaining >= r->quantity)
            c->bad_409++;
        if (c->min_409_remaining < 0 || r->remaining < c->min_409_remaining)
            c->min_409_remaining = r->remaining;
    }
}

static int cmp_ll(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

/* Under mutual exclusion every deduction leaves a distinct remaining stock
 * (stock strictly falls), so a value reported twice means two holders worked
 * from the same stale read: a lost update seen from the client side alone. */
static void count_dup_remaining(lg_item_check *c, long long *vals, size_t n)
{
    if (n < 2)
        return;
    qsort(vals, n, sizeof(*vals), cmp_ll);
    for (size_t i = 1; i < n; i++)
        if (vals[i] == vals[i - 1])
            c->dup_remaining++;
}

int lg_verdict_answers(lg_item_check *items, int nitems, lg_rec *const *recs,
                       const size_t *nrecs, int nbatch)
{
    for (int b = 0; b < nbatch; b++)
        for (size_t i = 0; i < nrecs[b]; i++)
            if (recs[b][i].item >= 0 && recs[b][i].item < nitems)
                tally_one(&items[recs[b][i].item], &recs[b][i]);

    long long **vals = calloc((size_t)nitems, sizeof(*vals));
    size_t *fill = calloc((size_t)nitems, sizeof(*fill));
    int rc = vals && fill ? LG_OK : LG_ERR_NOMEM;
    for (int k = 0; rc == LG_OK && k < nitems; k++)
        if (items[k].acked_n > 0 &&
            (vals[k] = malloc((size_t)items[k].acked_n * sizeof(long long))) == NULL)
            rc = LG_ERR_NOMEM;
    for (int b = 0; rc == LG_OK && b < nbatch; b++)
        for (size_t i = 0; i < nrecs[b]; i++) {
            const lg_rec *r = &recs[b][i];
            if (r->outcome == LG_OUT_OK && r->item >= 0 && r->item < nitems)
                vals[r->item][fill[r->item]++] = r->remaining;
        }
    for (int k = 0; rc == LG_OK && k < nitems; k++)
        count_dup_remaining(&items[k], vals[k], fill[k]);
    for (int k = 0; vals && k < nitems; k++)
        free(vals[k]);
    free(vals);
    free(fill);
    return rc;
}

/* Classifies one ledger row against the record of its requestId. */
static void ledger_row(lg_item_check *c, int item, const lg_ledger_row *row, lg_rec *r)
{
    if (r == NULL || r->item != item || r->quantity != row->quantity) {
        c->foreign_rows++;
        c->foreign_rows_qty += row->quantity;
        return;
    }
    if (r->seen > 0) {
        c->dup_rows++;
        c->dup_rows_qty += row->quantity;
    } else if (r->outcome == LG_OUT_OK) {
        c->matched_qty += row->quantity;
    } else if (LG_OUT_UNDETERMINED(r->outcome)) {
        c->undetermined_rows++;
        c->undetermined_rows_qty += row->quantity;
    } else {
        c->refused_rows_by[r->outcome]++;
        c->refused_rows_qty += row->quantity;
    }
    if (r->seen < UINT8_MAX)
        r->seen++;
}

void lg_verdict_ledger(lg_item_check *c, int item, const lg_ledger_row *rows, size_t n,
                       lg_rec_lookup lookup, void *arg)
{
    c->ledger_checked = 1;
    c->rows = (long long)n;
    for (size_t i = 0; i < n; i++) {
        lg_rec *r = rows[i].request_id ? lookup(arg, rows[i].request_id) : NULL;
        ledger_row(c, item, &rows[i], r);
    }
}

void lg_verdict_missing(lg_item_check *items, int nitems, lg_rec *const *recs,
                        const size_t *nrecs, int nbatch)
{
    for (int b = 0; b < nbatch; b++)
        for (size_t i = 0; i < nrecs[b]; i++) {
            const lg_rec *r = &recs[b][i];
            if (r->outcome != LG_OUT_OK || r->seen || r->item < 0 || r->item >= nitems ||
                !items[r->item].ledger_checked)
                continue;
            items[r->item].missing_n++;
            items[r->item].missing_qty += r->quantity;
        }
}

static long long max3(long long a, long long b, long long c)
{
    long long m = a > b ? a : b;
    return m > c ? m : c;
}

/* Appends a finding when there is room; returns the new count. */
__attribute__((format(printf, 6, 7))) static int add(lg_finding *out, int n, int max, int kind,
                                                      long long amount, const char *fmt, ...)
{
    if (n >= max)
        return n;
    out[n].kind = kind;
    out[n].violation = kind != LG_N_UNDETERMINED;
    out[n].amount = amount;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out[n].text, sizeof(out[n].text), fmt, ap);
    va_end(ap);
    return n + 1;
}

/* Invariants on the stock itself: never below zero, never more sold than there
 * was, and stock + sold constant. */
static int judge_stock(const lg_item_check *c, lg_finding *out, int n, int max)
{
    long long sold = c->sold1 - c->sold0;
    long long over = max3(-c->stock1, sold - c->stock0, c->acked_qty - c->stock0);
    if (over > 0)
        n = add(out, n, max, LG_V_OVERSOLD, over,
                "item %lld: oversold by %lld: initial stock %lld, final stock %lld, "
                "sold %lld, acknowledged %lld",
                c->id, over, c->stock0, c->stock1, sold, c->acked_qty);
    long long drift = c->stock1 + sold - c->stock0;
    /* stock never rises during a run: a 200 that saw less than what is left now
     * was overwritten by a stale write */
    int raised = c->min_ok_remaining >= 0 && c->stock1 > c->min_ok_remaining;
    long long lost = drift > 0 ? drift : c->dup_remaining > 0 ? c->dup_remaining : 1;
    if (drift > 0 || c->dup_remaining > 0 || raised)
        n = add(out, n, max, LG_V_LOST_UPDATES, lost,
                "item %lld: lost updates %lld: stock %lld + sold %lld = %lld vs initial %lld; "
                "%lld answers repeated a remaining stock another answer reported; lowest "
                "remaining acknowledged %lld vs final stock %lld",
                c->id, lost, c->stock1, sold, c->stock1 + sold, c->stock0, c->dup_remaining,
                c->min_ok_remaining, c->stock1);
    else if (drift < 0)
        n = add(out, n, max, LG_V_STOCK_LEAK, -drift,
                "item %lld: stock leak %lld: stock %lld + sold %lld = %lld is below the "
                "initial %lld (stock fell with no ledger row)",
                c->id, -drift, c->stock1, sold, c->stock1 + sold, c->stock0);
    return n;
}

/* Names the error answers whose requests still left a ledger row. */
static void refused_text(const lg_item_check *c, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int o = 0; o < LG_OUT_COUNT && used < size; o++)
        if (c->refused_rows_by[o] > 0)
            used += (size_t)snprintf(buf + used, size - used, "%s%lld answered %s",
                                     used ? ", " : "", c->refused_rows_by[o],
                                     lg_outcome_name(o));
}

/* Ledger rows against 200 answers, row by row when the ledger was read. */
static int judge_ledger(const lg_item_check *c, lg_finding *out, int n, int max)
{
    long long unacked = c->refused_rows_qty + c->foreign_rows_qty + c->dup_rows_qty;
    char refused[160];
    refused_text(c, refused, sizeof(refused));
    if (unacked > 0)
        n = add(out, n, max, LG_V_UNACKED, unacked,
                "item %lld: unacknowledged deductions %lld units: ledger rows of requests "
                "that got an error (%s), %lld duplicate rows for one requestId, %lld rows "
                "from no request of this run",
                c->id, unacked, refused[0] ? refused : "none", c->dup_rows, c->foreign_rows);
    if (c->missing_qty > 0)
        n = add(out, n, max, LG_V_UNRECORDED, c->missing_qty,
                "item %lld: %lld acknowledged units (%lld answers of 200) have no ledger row",
                c->id, c->missing_qty, c->missing_n);
    if (c->undetermined_rows_qty > 0)
        n = add(out, n, max, LG_N_UNDETERMINED, c->undetermined_rows_qty,
                "item %lld: note: %lld units were deducted for %lld requests whose answer "
                "was lost (transport error or malformed answer); not a violation, --retry "
                "settles them",
                c->id, c->undetermined_rows_qty, c->undetermined_rows);
    return n;
}

/* Without the rows: sold must equal acknowledged, up to the undetermined requests. */
static int judge_totals(const lg_item_check *c, lg_finding *out, int n, int max)
{
    long long diff = (c->sold1 - c->sold0) - c->acked_qty;
    if (diff > c->undetermined_qty)
        n = add(out, n, max, LG_V_UNACKED, diff - c->undetermined_qty,
                "item %lld: unacknowledged deductions %lld units: sold %lld, acknowledged "
                "%lld, at most %lld undetermined",
                c->id, diff - c->undetermined_qty, c->sold1 - c->sold0, c->acked_qty,
                c->undetermined_qty);
    else if (diff > 0)
        n = add(out, n, max, LG_N_UNDETERMINED, diff,
                "item %lld: note: up to %lld units may be deductions whose answer was lost "
                "(%lld requests undetermined); not a violation, --retry settles them",
                c->id, diff, c->undetermined_n);
    if (diff < 0)
        n = add(out, n, max, LG_V_UNRECORDED, -diff,
                "item %lld: %lld acknowledged units are missing from sold (sold %lld, "
                "acknowledged %lld)",
                c->id, -diff, c->sold1 - c->sold0, c->acked_qty);
    return n;
}

/* A refusal is false when it contradicts itself (remaining >= requested) or
 * when the stock later stood higher than it claimed: stock never rises in a run. */
static int judge_refusals(const lg_item_check *c, lg_finding *out, int n, int max)
{
    long long above = c->min_409_remaining >= 0 && c->stock1 > c->min_409_remaining;
    char tail[120] = "";
    if (above)
        snprintf(tail, sizeof(tail), "; one claimed %lld remaining, below the final stock %lld",
                 c->min_409_remaining, c->stock1);
    if (c->bad_409 > 0 || above)
        n = add(out, n, max, LG_V_FALSE_REFUSAL, c->bad_409 + above,
                "item %lld: false refusals: %lld insufficient_stock answers reported "
                "remaining >= requested%s",
                c->id, c->bad_409, tail);
    return n;
}

int lg_verdict_judge(const lg_item_check *c, lg_finding *out, int max, int *violations)
{
    int n = judge_stock(c, out, 0, max);
    n = c->ledger_checked ? judge_ledger(c, out, n, max) : judge_totals(c, out, n, max);
    n = judge_refusals(c, out, n, max);
    if (violations) {
        *violations = 0;
        for (int i = 0; i < n; i++)
            *violations += out[i].violation;
    }
    return n;
}
