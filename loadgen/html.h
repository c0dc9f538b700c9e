/* html.h - loadgen's report as one self-contained HTML page: the verdict on
 * top, throughput and errors over the run, HdrHistogram's percentile plot,
 * the hot item's stock over time, outcomes per target; for compare the lock
 * modes side by side in each chart. Inline SVG and CSS only: no script, no
 * font, nothing fetched from anywhere. It is drawn from the JSON document
 * --json writes (report.h), so the page and the file never disagree; every
 * string from it is escaped. */
#ifndef LG_HTML_H
#define LG_HTML_H

#include <stdio.h>

#include <jansson.h>

/* Writes the page for doc: one run (lg_report_json), a compare
 * (lg_report_compare_json), or {"error": text} (a page that says what
 * failed). Returns 0, or -1 when the stream reported a write error.
 * Reads doc only. */
int lg_html_write(FILE *f, const json_t *doc);

#endif
