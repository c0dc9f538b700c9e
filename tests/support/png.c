/* png.c - just enough of PNG for screenshot checks: chunks, IHDR, the IDAT
 * stream inflated in one go (the size is known from IHDR), and the five row
 * filters undone. */
#include "tests/support/png.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static unsigned char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    unsigned char *buf = NULL;
    long n = -1;
    if (f && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = malloc((size_t)n)) && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    if (f)
        fclose(f);
    *len = buf ? (size_t)n : 0;
    return buf;
}

static int paeth(int a, int b, int c)
{
    int p = a + b - c, pa = abs(p - a), pb = abs(p - b), pc = abs(p - c);
    return pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
}

/* Undoes each row's filter in place; raw rows are 1 + stride bytes. */
static int unfilter(unsigned char *raw, int h, size_t stride, int bpp)
{
    for (int y = 0; y < h; y++) {
        unsigned char *row = raw + (size_t)y * (stride + 1), type = row[0], *px = row + 1;
        const unsigned char *up = y ? px - (stride + 1) : NULL;
        for (size_t i = 0; i < stride; i++) {
            int a = i >= (size_t)bpp ? px[i - bpp] : 0, b = up ? up[i] : 0;
            int c = up && i >= (size_t)bpp ? up[i - bpp] : 0;
            int add = type == 0 ? 0 : type == 1 ? a : type == 2 ? b : type == 3 ? (a + b) / 2
                    : type == 4 ? paeth(a, b, c) : -1;
            if (add < 0)
                return -1;
            px[i] = (unsigned char)(px[i] + add);
        }
    }
    return 0;
}

/* Concatenates the IDAT chunks after IHDR was read into w, h, bpp. */
static int chunks(const unsigned char *d, size_t len, int *w, int *h, int *bpp,
                  unsigned char **idat, size_t *idat_len, char *why, size_t size)
{
    for (size_t off = 8; off + 12 <= len;) {
        uint32_t n = be32(d + off);
        const unsigned char *type = d + off + 4, *data = d + off + 8;
        if (n > len - off - 12)
            return snprintf(why, size, "chunk past the end of the file"), -1;
        if (memcmp(type, "IHDR", 4) == 0) {
            *w = (int)be32(data), *h = (int)be32(data + 4);
            if (data[8] != 8 || (data[9] != 2 && data[9] != 6) || data[12] != 0)
                return snprintf(why, size, "not 8-bit RGB(A) without interlace"), -1;
            *bpp = data[9] == 6 ? 4 : 3;
        } else if (memcmp(type, "IDAT", 4) == 0) {
            unsigned char *grown = realloc(*idat, *idat_len + n);
            if (grown == NULL)
                return snprintf(why, size, "out of memory"), -1;
            memcpy(grown + *idat_len, data, n);
            *idat = grown, *idat_len += n;
        }
        off += 12 + n;
    }
    return 0;
}

int th_png_read(const char *path, th_png *out, char *why, size_t size)
{
    memset(out, 0, sizeof(*out));
    size_t len, idat_len = 0;
    unsigned char *d = slurp(path, &len), *idat = NULL, *raw = NULL;
    int w = 0, h = 0, bpp = 0, rc = -1;
    if (d == NULL || len < 8 || memcmp(d, "\x89PNG\r\n\x1a\n", 8) != 0)
        snprintf(why, size, "%s: not a PNG file", path);
    else if (chunks(d, len, &w, &h, &bpp, &idat, &idat_len, why, size) == 0 && w > 0 && h > 0) {
        size_t stride = (size_t)w * (size_t)bpp;
        uLongf raw_len = (uLongf)((stride + 1) * (size_t)h);
        raw = malloc(raw_len);
        out->rgb = malloc((size_t)w * (size_t)h * 3);
        if (!raw || !out->rgb || uncompress(raw, &raw_len, idat, idat_len) != Z_OK ||
            raw_len != (stride + 1) * (size_t)h || unfilter(raw, h, stride, bpp) != 0)
            snprintf(why, size, "%s: the image data does not inflate to %dx%d pixels", path, w,
                     h);
        else {
            for (size_t i = 0; i < (size_t)w * (size_t)h; i++)
                memcpy(out->rgb + i * 3, raw + (i / (size_t)w) * (stride + 1) + 1 +
                                             (i % (size_t)w) * (size_t)bpp, 3);
            out->width = w, out->height = h, rc = 0;
        }
    }
    free(d);
    free(idat);
    free(raw);
    if (rc != 0)
        th_png_free(out);
    return rc;
}

void th_png_free(th_png *p)
{
    free(p->rgb);
    p->rgb = NULL;
}

size_t th_png_colors(const th_png *p)
{
    unsigned char *seen = calloc(1u << 21, 1); /* one bit per 24-bit colour */
    size_t n = 0;
    for (size_t i = 0; seen && i < (size_t)p->width * (size_t)p->height; i++) {
        const unsigned char *c = p->rgb + i * 3;
        uint32_t v = (uint32_t)c[0] << 16 | (uint32_t)c[1] << 8 | c[2];
        if (!(seen[v >> 3] & (1u << (v & 7)))) {
            seen[v >> 3] |= (unsigned char)(1u << (v & 7));
            n++;
        }
    }
    free(seen);
    return n;
}

double th_png_share(const th_png *p, unsigned rgb, int tolerance)
{
    size_t n = (size_t)p->width * (size_t)p->height, hits = 0;
    for (size_t i = 0; i < n; i++) {
        const unsigned char *c = p->rgb + i * 3;
        hits += abs(c[0] - (int)(rgb >> 16 & 0xff)) <= tolerance &&
                abs(c[1] - (int)(rgb >> 8 & 0xff)) <= tolerance &&
                abs(c[2] - (int)(rgb & 0xff)) <= tolerance;
    }
    return n ? (double)hits / (double)n : 0;
}
