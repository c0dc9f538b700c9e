/* series.h - final outcomes counted over the run's time, for throughput and
 * errors per second. Buckets start LG_SERIES_BASE_MS wide and double (merging
 * pairs) whenever the run outgrows LG_SERIES_MAX of them, so a series has a
 * fixed size however long the run. Like the histograms: one per thread and
 * target, merged after join.
 *
 * Thread safety: none. */
#ifndef LG_SERIES_H
#define LG_SERIES_H

#include <stddef.h>
#include <stdint.h>

#include "loadgen/answer.h"

#define LG_SERIES_BASE_MS 1
#define LG_SERIES_MAX 512

typedef struct lg_series {
    int64_t width_ns; /* bucket width: LG_SERIES_BASE_MS << k */
    size_t n;         /* buckets up to the last one counted in */
    uint32_t (*counts)[LG_OUT_COUNT]; /* [LG_SERIES_MAX] */
} lg_series;

/* An empty series of LG_SERIES_MAX buckets. 0 or LG_ERR_NOMEM (s is then
 * empty and safe to free). */
int lg_series_init(lg_series *s);

void lg_series_free(lg_series *s);

/* Counts one outcome at t_ns after the run's start (negative counts as 0). */
void lg_series_add(lg_series *s, int64_t t_ns, int outcome);

/* Adds src into dst, widening dst's buckets to src's when they are wider. */
void lg_series_merge(lg_series *dst, const lg_series *src);

/* How many buckets of `factor` stored ones make at most max (max >= 1): the
 * smallest power of two that does. */
size_t lg_series_factor(const lg_series *s, size_t max);

/* The count of outcome in the i-th group of factor stored buckets. */
uint64_t lg_series_count(const lg_series *s, size_t i, size_t factor, int outcome);

#endif
