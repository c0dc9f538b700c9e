/* hist.h - a log-linear latency histogram (HdrHistogram's layout, fixed
 * precision): exact below 256, then 128 linear sub-buckets per power of two,
 * so any recorded value is reported within 1/128 (< 0.8 %). Values are plain
 * integers; loadgen records microseconds. Histograms of equal layout merge
 * bucket by bucket, which is how per-thread latencies are combined after join.
 *
 * Thread safety: none. One histogram per thread; merge after the threads end. */
#ifndef HIST_H
#define HIST_H

#include <stdint.h>

#define HIST_MAX_VALUE ((UINT64_C(1) << 40) - 1) /* larger values are clamped (~12.7 days in us) */

typedef struct hist hist;

/* A new empty histogram owned by the caller (hist_free), or NULL when out of memory. */
hist *hist_new(void);

/* Frees h; NULL is a no-op. */
void hist_free(hist *h);

/* Empties h. */
void hist_reset(hist *h);

/* Counts one value (values above HIST_MAX_VALUE count as HIST_MAX_VALUE). */
void hist_record(hist *h, uint64_t value);

/* Adds every count of src into dst; src is unchanged. */
void hist_merge(hist *dst, const hist *src);

uint64_t hist_count(const hist *h);
uint64_t hist_min(const hist *h); /* exact; 0 when empty */
uint64_t hist_max(const hist *h); /* exact; 0 when empty */
double hist_mean(const hist *h);  /* exact (from a running sum); 0 when empty */

/* The value at percentile p (0..100): the smallest recorded bucket such that at
 * least p % of the values are at or below it, reported as the highest value that
 * bucket holds, clamped to [min, max]. p <= 0 gives min, p >= 100 gives max;
 * an empty histogram gives 0. */
uint64_t hist_percentile(const hist *h, double p);

#endif
