/* sale.c - a flash sale's records merged into one report: every process's
 * buyers summed into the sale's counts and histograms and into the records
 * the verdict matches to the ledger, and the process_* series read from a
 * replica's /metrics. */
#include "loadgen/sale.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loadgen/err.h"
#include "loadgen/verdict.h"

int lg_sale_init(lg_sale *s, int ntargets)
{
    memset(s, 0, sizeof(*s));
    s->ntargets = ntargets;
    for (int t = 0; t < LG_MAX_TARGETS; t++)
        s->peaks[t] = (lg_sale_peak){-1, -1, -1, 0, 0};
    s->fire = hist_new();
    s->health = hist_new();
    return s->fire && s->health ? LG_OK : LG_ERR_NOMEM;
}

void lg_sale_free(lg_sale *s)
{
    hist_free(s->fire);
    hist_free(s->health);
    s->fire = s->health = NULL;
}

void lg_sale_src(int g, struct sockaddr_in *sa)
{
    memset(sa, 0, sizeof(*sa));
    sa->sin_family = AF_INET;
    uint32_t x = 1 + (uint32_t)g / (254 * 256), y = ((uint32_t)g / 254) % 256;
    uint32_t z = 1 + (uint32_t)g % 254;
    sa->sin_addr.s_addr = htonl((127u << 24) | (x << 16) | (y << 8) | z);
}

int lg_sale_target(int g, int ntargets)
{
    return g % ntargets;
}

int lg_sale_result_init(lg_result *res, const char *run_id, int ntargets, int nbatch)
{
    memset(res, 0, sizeof(*res));
    snprintf(res->run_id, sizeof(res->run_id), "%s", run_id);
    res->ntargets = ntargets;
    res->nbatch = nbatch;
    res->targets = calloc((size_t)ntargets, sizeof(*res->targets));
    res->batches = calloc((size_t)nbatch, sizeof(*res->batches));
    int rc = res->targets && res->batches ? lg_tally_init(&res->total) : LG_ERR_NOMEM;
    for (int t = 0; rc == LG_OK && t < ntargets; t++)
        rc = lg_tally_init(&res->targets[t]);
    return rc;
}

/* What the verdict takes a buyer's request to have come to: without an
 * answer it is undetermined, never ok (a part that never fired is zeroes). */
static int outcome_of(const lg_buyer *by)
{
    return by->fate == LG_BUYER_ANSWERED ? by->outcome : LG_OUT_TRANSPORT;
}

/* The part's records and lines: one line of item 0 per buyer. */
static int part_batch(lg_batch *b, const lg_buyer *buyers, int n, int qty)
{
    b->recs = calloc((size_t)(n ? n : 1), sizeof(*b->recs));
    b->lines = calloc((size_t)(n ? n : 1), sizeof(*b->lines));
    if (b->recs == NULL || b->lines == NULL)
        return LG_ERR_NOMEM;
    for (int i = 0; i < n; i++) {
        int answered = buyers[i].fate == LG_BUYER_ANSWERED;
        b->recs[i] = (lg_rec){.first = (uint32_t)i, .nlines = 1,
                              .outcome = (uint8_t)outcome_of(&buyers[i])};
        b->lines[i] = (lg_line){.remaining = answered ? buyers[i].remaining : -1,
                                .quantity = qty, .item = 0};
    }
    b->nrecs = b->nlines = (size_t)n;
    return LG_OK;
}

/* Books each buyer into the sale's counts and the targets' tallies. */
static void part_count(lg_sale *s, lg_result *res, const lg_sale_part *part,
                       const lg_buyer *buyers, hist *fire)
{
    for (int i = 0; i < part->n; i++) {
        const lg_buyer *by = &buyers[i];
        s->fates[by->fate <= LG_BUYER_ANSWERED ? by->fate : LG_BUYER_NOT_FIRED]++;
        if (by->fate == LG_BUYER_ANSWERED) {
            hist_record(fire, by->latency_us);
            s->status[by->status < LG_SALE_STATUS_MAX ? by->status : 0]++;
        }
        int t = lg_sale_target(part->first + i, res->ntargets);
        int64_t t_ns = (int64_t)by->latency_us * 1000;
        lg_tally_record(&res->targets[t], outcome_of(by), by->latency_us, t_ns);
        lg_tally_record(&res->total, outcome_of(by), by->latency_us, t_ns);
    }
}

/* The run's clock starts at the earliest fire and ends at the last answer. */
static void part_span(lg_result *res, const lg_sale_part *part)
{
    if (part->fire_ns == 0)
        return;
    int64_t last = res->start_ns ? res->start_ns + (int64_t)(res->elapsed_s * 1e9) : 0;
    if (res->start_ns == 0 || part->fire_ns < res->start_ns)
        res->start_ns = part->fire_ns;
    if (part->last_ns > last)
        last = part->last_ns;
    res->elapsed_s = last > res->start_ns ? (double)(last - res->start_ns) / 1e9 : 0;
}

int lg_sale_merge(lg_sale *s, lg_result *res, int b, const lg_sale_part *part,
                  const lg_buyer *buyers, int qty)
{
    hist *fire = hist_new();
    int rc = fire ? part_batch(&res->batches[b], buyers, part->n, qty) : LG_ERR_NOMEM;
    if (rc == LG_OK) {
        part_count(s, res, part, buyers, fire);
        hist_merge(s->fire, fire);
        part_span(res, part);
    }
    hist_free(fire);
    if (part->error[0] && !s->error[0])
        snprintf(s->error, sizeof(s->error), "%s", part->error);
    return rc;
}

uint64_t lg_sale_unanswered(const lg_sale *s)
{
    uint64_t n = 0;
    for (int f = 0; f < LG_BUYER_ANSWERED; f++)
        n += s->fates[f];
    return n;
}

int lg_sale_metric(const char *text, const char *name, double *v)
{
    size_t len = strlen(name);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncmp(p, name, len) != 0 || p[len] != ' ')
            continue;
        char *end;
        double d = strtod(p + len + 1, &end);
        if (end == p + len + 1)
            return 0;
        *v = d;
        return 1;
    }
    return 0;
}

static void raise_to(long long *peak, const char *text, const char *name)
{
    double v;
    if (lg_sale_metric(text, name, &v) && (long long)v > *peak)
        *peak = (long long)v;
}

void lg_sale_peak_from(lg_sale *s, int t, const char *text)
{
    lg_sale_peak *p = &s->peaks[t];
    raise_to(&p->threads, text, "process_threads");
    raise_to(&p->rss_bytes, text, "process_resident_memory_bytes");
    raise_to(&p->open_fds, text, "process_open_fds");
}
