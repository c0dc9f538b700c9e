/* html_chart.h - the report's charts, each a <figure> with inline SVG drawn
 * from runs of the JSON report (one run, or one per lock mode for compare),
 * and the few JSON readers they share with html.c. Part of the html module;
 * html.h is its public face. */
#ifndef LG_HTML_CHART_H
#define LG_HTML_CHART_H

#include <stdio.h>

#include <jansson.h>

#define LG_HTML_RUNS_MAX 16 /* runs drawn in one chart (compare groups) */

/* One run as the charts see it: its JSON object, a label ("" for a single
 * run) and the colour of its lines. */
typedef struct lg_html_run {
    const json_t *run;
    const char *label;
    const char *color;
} lg_html_run;

/* The colour of run i with this label: redis, none and atomic keep theirs
 * in every chart; others take the palette in turn. */
const char *lg_html_color(int i, const char *label);

/* Answers per second over the run: by outcome, stacked (one run), or one
 * line per run. */
void lg_html_throughput(FILE *f, const lg_html_run *runs, int n);

/* HdrHistogram's percentile plot: latency against 1/(1-p) on a log scale. */
void lg_html_latency(FILE *f, const lg_html_run *runs, int n);

/* The sampled stock of each run's first item, with initial stock - sold. */
void lg_html_stock(FILE *f, const lg_html_run *runs, int n);

/* The history check's reads against their band over time (the run's
 * "history.series"); says so when no check ran. */
void lg_html_history(FILE *f, const json_t *run);

/* A reserve run's item (its "stock" samples with "reserved"): available,
 * reserved and sold over time, one line each. */
void lg_html_held(FILE *f, const json_t *run);

/* Outcomes per target (per mode and target for compare), as stacked bars. */
void lg_html_outcomes(FILE *f, const lg_html_run *runs, int n);

/* Writes s escaped (lg_svg_escape) with every "http://" and "https://" left
 * out: target URLs show as host:port, and the page holds no URL scheme at
 * all, so nothing in it can point anywhere. At most 1023 bytes of s. */
void lg_html_text(FILE *f, const char *s);

/* The member at a dotted path ("latencyUs.all"), or NULL. */
const json_t *lg_json_at(const json_t *o, const char *path);

/* The number at path (integer or real), 0 when missing or not a number. */
double lg_json_num(const json_t *o, const char *path);

/* The string at path, "" when missing or not a string. */
const char *lg_json_str(const json_t *o, const char *path);

/* What each fault's commands did, as a section of the page (none without):
 * html_fault.c. */
void lg_html_faults(FILE *f, const json_t *run);

#endif
