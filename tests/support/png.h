/* png.h - reads a PNG far enough to judge a screenshot: its size from IHDR
 * and its pixels (8-bit RGB or RGBA, not interlaced, as Chromium writes them),
 * inflated with zlib and unfiltered. Test helper only. */
#ifndef TEST_PNG_H
#define TEST_PNG_H

#include <stddef.h>

typedef struct th_png {
    int width, height; /* from IHDR */
    unsigned char *rgb; /* width * height * 3 bytes, row by row (alpha dropped) */
} th_png;

/* Reads path into *out. 0, or -1 with why (size bytes) saying what is wrong:
 * not a PNG, a format this reader does not take, a bad zlib stream. */
int th_png_read(const char *path, th_png *out, char *why, size_t size);

void th_png_free(th_png *p);

/* How many distinct colours the pixels have. */
size_t th_png_colors(const th_png *p);

/* The share (0..1) of pixels within tolerance of rgb (0xRRGGBB) in each channel. */
double th_png_share(const th_png *p, unsigned rgb, int tolerance);

#endif
