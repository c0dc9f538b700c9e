/* svg.h - what loadgen's HTML report draws with: text escaping for HTML and
 * SVG, "nice" axis ticks, HdrHistogram's percentile axis, short number
 * labels, and a chart (plot area, ticks, lines, bars) written as inline SVG
 * to a stream. No state beyond the chart a caller holds.
 *
 * Every coordinate written is finite: points that are not (NaN, inf) are left
 * out, since one "NaN" in an attribute is an error in every browser. */
#ifndef LG_SVG_H
#define LG_SVG_H

#include <stddef.h>
#include <stdio.h>

/* Writes s with & < > " ' as entities and control characters as spaces, so
 * it is safe in element text and in quoted attributes. NULL writes nothing. */
void lg_svg_escape(FILE *f, const char *s);

/* Ticks at a step of 1, 2 or 5 times a power of ten, at most max (>= 2) of
 * them over [*lo, *hi]; both ends move out to whole steps (*lo down, *hi up)
 * so the axis starts and ends on a tick. Writes up to cap ticks into out and
 * returns how many (0, ends untouched, when *lo >= *hi or either is not
 * finite). */
int lg_svg_ticks(double *lo, double *hi, int max, double *out, int cap);

/* HdrHistogram's percentile axis: log10(1 / (1 - p/100)) for p in [0, 100):
 * 0 at 0 %, 1 at 90 %, 2 at 99 %, 3 at 99.9 %. p >= 100 gives INFINITY. */
double lg_svg_pct_x(double p);

/* The percentile at axis position x (whole decades print exactly: "0%",
 * "90%", "99%", "99.9%", "99.99%"), into buf. */
void lg_svg_pct_label(double x, char *buf, size_t size);

/* A short label: at most 3 significant digits, k and M for thousands and
 * millions ("0", "0.25", "12.5", "980", "1.5k", "2M"). */
void lg_svg_num(double v, char *buf, size_t size);

typedef struct lg_chart {
    FILE *f;
    double w, h;               /* the viewBox */
    double left, right;        /* plot area in viewBox units, x from left to right */
    double top, bottom;        /* and y from bottom (low values) to top */
    double x0, x1, y0, y1;     /* the data range shown */
} lg_chart;

/* Opens <svg> of w x h (viewBox units; the page scales it) whose plot area
 * leaves room for tick labels, for data x in [x0, x1] and y in [y0, y1]
 * (each range non-empty). label is the chart's accessible name (escaped). */
void lg_chart_begin(lg_chart *c, FILE *f, double w, double h, double x0, double x1, double y0,
                    double y1, const char *label);

/* Data to viewBox coordinates. */
double lg_chart_x(const lg_chart *c, double x);
double lg_chart_y(const lg_chart *c, double y);

/* A vertical grid line at x with label under the axis; a horizontal one at y
 * with label left of it. Labels are escaped. */
void lg_chart_xtick(const lg_chart *c, double x, const char *label);
void lg_chart_ytick(const lg_chart *c, double y, const char *label);

/* The axis lines and their titles (x under the ticks, y above the y axis). */
void lg_chart_axes(const lg_chart *c, const char *xtitle, const char *ytitle);

/* A polyline through (xs[i], ys[i]); step holds each y until the next x (for
 * sampled values). dash is a stroke-dasharray or NULL. Non-finite points are
 * left out. */
void lg_chart_line(const lg_chart *c, const double *xs, const double *ys, int n,
                   const char *color, double width, const char *dash, int step);

/* A filled rectangle over data [x0, x1] x [ya, yb]; nothing when not finite. */
void lg_chart_rect(const lg_chart *c, double x0, double x1, double ya, double yb,
                   const char *color);

/* Text at data (x, y), anchored "start", "middle" or "end"; cls a CSS class. */
void lg_chart_text(const lg_chart *c, double x, double y, const char *anchor, const char *cls,
                   const char *text);

/* Closes the </svg>. */
void lg_chart_end(const lg_chart *c);

#endif
