/* promtext.h - checks of Prometheus's text exposition format (a /metrics
 * answer) that `promtool check metrics` leaves out: Debian's promtool 2.42
 * lints names and HELP texts, but accepts a sample without TYPE, a family
 * whose lines are split, a series twice, and histograms whose buckets shrink,
 * lack +Inf, _sum or _count. Test helpers; they print nothing. */
#ifndef TEST_PROMTEXT_H
#define TEST_PROMTEXT_H

#include <stddef.h>

/* Checks text (NUL-terminated): every sample belongs to the family whose
 * HELP and TYPE lines came right before it (its lines together, declared
 * once), no series appears twice, a counter's name ends in _total, and each
 * series of a histogram has buckets in rising order of le, cumulative,
 * ending with le="+Inf", then _sum and a _count equal to the +Inf bucket.
 * Returns the number of problems; one line per problem ("line N: ...") goes
 * to why, as many as fit (why is always NUL-terminated). */
int th_promtext_problems(const char *text, char *why, size_t size);

/* Whether text declares family name (its HELP and TYPE lines) and has a
 * sample of it (name, or name_bucket/_sum/_count for a histogram). */
int th_promtext_has_family(const char *text, const char *name);

#endif
