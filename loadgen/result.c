/* result.c - merging and freeing what a load run measured, and finding the
 * record behind one of the run's requestIds when the ledger names it. */
#include "loadgen/result.h"

#include <stdlib.h>
#include <string.h>

#include "loadgen/err.h"

int lg_tally_init(lg_tally *t)
{
    memset(t, 0, sizeof(*t));
    t->all = hist_new();
    t->ok = hist_new();
    int rc = lg_series_init(&t->series);
    return t->all && t->ok && rc == LG_OK ? LG_OK : LG_ERR_NOMEM;
}

void lg_tally_record(lg_tally *t, int outcome, uint64_t latency_us, int64_t t_ns)
{
    t->counts[outcome]++;
    lg_series_add(&t->series, t_ns, outcome);
    if (outcome == LG_OUT_TRANSPORT)
        return;
    hist_record(t->all, latency_us);
    if (outcome == LG_OUT_OK)
        hist_record(t->ok, latency_us);
}

void lg_tally_merge(lg_tally *dst, const lg_tally *src)
{
    for (int o = 0; o < LG_OUT_COUNT; o++)
        dst->counts[o] += src->counts[o];
    dst->retries += src->retries;
    hist_merge(dst->all, src->all);
    hist_merge(dst->ok, src->ok);
    lg_series_merge(&dst->series, &src->series);
}

void lg_tally_free(lg_tally *t)
{
    hist_free(t->all);
    hist_free(t->ok);
    lg_series_free(&t->series);
}

void lg_result_free(lg_result *res)
{
    for (int t = 0; res->targets && t < res->ntargets; t++)
        lg_tally_free(&res->targets[t]);
    free(res->targets);
    lg_tally_free(&res->total);
    for (int b = 0; res->batches && b < res->nbatch; b++) {
        free(res->batches[b].recs);
        free(res->batches[b].lines);
        free(res->batches[b].sent_ns);
        free(res->batches[b].done_ns);
    }
    free(res->batches);
    memset(res, 0, sizeof(*res));
}

lg_rec *lg_result_find(const lg_result *res, const char *request_id, lg_line **lines)
{
    size_t plen = strlen(res->run_id);
    if (plen == 0 || strncmp(request_id, res->run_id, plen) != 0 || request_id[plen] != '-')
        return NULL;
    const char *p = request_id + plen + 1;
    char *end;
    if (*p < '0' || *p > '9')
        return NULL;
    unsigned long b = strtoul(p, &end, 10);
    if (*end != '-' || end[1] < '0' || end[1] > '9' || b >= (unsigned long)res->nbatch)
        return NULL;
    unsigned long long seq = strtoull(end + 1, &end, 10);
    const lg_batch *batch = &res->batches[b];
    if (*end != '\0' || seq >= batch->nrecs)
        return NULL;
    if (lines)
        *lines = lg_rec_lines(batch, &batch->recs[seq]);
    return &batch->recs[seq];
}

uint64_t lg_tally_requests(const lg_tally *t)
{
    uint64_t n = 0;
    for (int o = 0; o < LG_OUT_COUNT; o++)
        n += t->counts[o];
    return n;
}
