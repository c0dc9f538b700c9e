/* fields.h - a request's raw header block read two ways, for the framing
 * check's differential test and fuzz target: as libmicrohttpd 0.9.75 splits
 * it into the fields stockd's check is handed (and how it then frames the
 * body), and as a lenient proxy reads it (RFC 9112's tolerances: blanks
 * trimmed, folds and lists joined, a bare CR taken for a line's end). Pure;
 * the fuzz target links this file alone with server/request.c. */
#ifndef TEST_FIELDS_H
#define TEST_FIELDS_H

#include <stddef.h>

#define TH_FIELDS_MAX 32
#define TH_FIELD_NAME_MAX 128
#define TH_FIELD_VALUE_MAX 256

typedef struct th_field {
    char name[TH_FIELD_NAME_MAX];
    char value[TH_FIELD_VALUE_MAX];
    int folded; /* a line starting with a blank was glued to its name */
} th_field;

/* How a reader frames the body. */
enum th_body { TH_BODY_NONE, TH_BODY_LENGTH, TH_BODY_CHUNKED, TH_BODY_TO_CLOSE, TH_BODY_REFUSED };

typedef struct th_framing {
    enum th_body body;
    unsigned long long length; /* TH_BODY_LENGTH */
} th_framing;

/* Splits block (the header lines after the request line, up to and without
 * the empty line; len bytes, NULs allowed) as libmicrohttpd 0.9.75 does:
 * lines end at CRLF or a bare LF; a name ends at the line's first colon, the
 * value starts after the blanks that follow it and keeps its trailing ones;
 * a NUL ends a name or value; a line that starts with a blank (obs-fold) is
 * glued, its blanks skipped, to the previous field's name. Returns the number
 * of fields put in out (at most TH_FIELDS_MAX), -1 when libmicrohttpd refuses
 * the block itself (a line without a colon: its own 400), or -2 when it does
 * not fit out. */
int th_fields_split(const char *block, size_t len, th_field *out);

/* The framing check's code (REQ_OK, REQ_ERR_FRAMING, REQ_ERR_CODING) on the
 * fields; its message in err. */
int th_fields_check(const th_field *f, int n, int http10, char *err, size_t errlen);

/* How libmicrohttpd 0.9.75 frames the body of those fields: by the first
 * Transfer-Encoding (chunked when it is "chunked" in any case, else to the
 * connection's end), else by the first Content-Length (refused, with its own
 * 400 or 413, unless digits alone that fit 64 bits), else none. */
th_framing th_fields_mhd(const th_field *f, int n);

/* How a lenient proxy frames the same raw block: lines end at CRLF, LF or a
 * bare CR; a folded line joins the previous value; names are trimmed of
 * blanks before the colon; Transfer-Encoding lists of all fields joined,
 * empty elements dropped (chunked when it ends with chunked, else refused),
 * overriding Content-Length; Content-Length's list of equal values taken
 * as one. */
th_framing th_fields_proxy(const char *block, size_t len);

#endif
