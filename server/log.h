/* log.h - one line per event on stderr, as logfmt text (ts=... level=...
 * msg="..." key=value) or as one JSON object per line (--log-format json).
 * Fields are typed key/value pairs, so each format writes them its own way
 * and every value is escaped: a client-supplied string can never forge a
 * field or a line. Thread-safe (each line is one write()). Only main and
 * this module print. */
#ifndef LOG_H
#define LOG_H

enum log_level { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR };

/* "debug", "info", "warn", "error", then NULL: indexed by enum log_level. */
extern const char *const log_level_names[];

enum log_format { LOG_FORMAT_TEXT, LOG_FORMAT_JSON };

/* "text", "json", then NULL: indexed by enum log_format. */
extern const char *const log_format_names[];

/* The longest line, its newline included: PIPE_BUF, the most one write()
 * to a pipe keeps whole, so lines never interleave on a pipe either. A line
 * that would be longer loses list elements and then whole fields, and says
 * how many (see log_event); a value is never cut. */
#define LOG_LINE_MAX 4096

/* Sets the lowest level printed (default LOG_INFO) and the format (default
 * LOG_FORMAT_TEXT). Call before threads start. */
void log_set_level(enum log_level level);
void log_set_format(enum log_format format);

/* 1 when a line at level would be printed: lets a caller skip building the
 * fields of a line nobody will see. */
int log_enabled(enum log_level level);

enum log_type {
    LOG_T_STR,  /* s; NULL is "no value": - in text, null in JSON */
    LOG_T_INT,  /* i */
    LOG_T_MS,   /* d, a duration in ms, printed with 3 decimals */
    LOG_T_INTS, /* ints[0..n-1]: a,b,c in text, an array in JSON */
    LOG_T_STRS, /* strs[0..n-1], likewise */
};

/* One key/value pair. Keys are the caller's constants, [A-Za-z0-9_]: they
 * are written as they are. Values are escaped. */
typedef struct log_field {
    const char *key;
    enum log_type type;
    int n; /* list length */
    union {
        const char *s;
        long long i;
        double d;
        const long long *ints;
        const char *const *strs;
    } v;
} log_field;

#define LOG_STR(k, x) ((log_field){.key = (k), .type = LOG_T_STR, .v.s = (x)})
#define LOG_INT(k, x) ((log_field){.key = (k), .type = LOG_T_INT, .v.i = (long long)(x)})
#define LOG_MS(k, x) ((log_field){.key = (k), .type = LOG_T_MS, .v.d = (double)(x)})
#define LOG_INTS(k, a, len) ((log_field){.key = (k), .type = LOG_T_INTS, .n = (len), .v.ints = (a)})
#define LOG_STRS(k, a, len) ((log_field){.key = (k), .type = LOG_T_STRS, .n = (len), .v.strs = (a)})

/* Logs msg and the n fields f (f may be NULL when n is 0) as one line, if
 * level is enabled.
 *
 * Text: ts=<UTC ISO 8601, ms> level=<level> msg="<msg>" then key=value in
 * f's order. A value is written bare when it is non-empty printable ASCII
 * without space, '"', '=' or '\' and not "-"; otherwise in double quotes,
 * with '"' and '\' escaped by '\', \n \r \t as such, and any other byte
 * outside printable ASCII as \xNN. A NULL string is a bare -, so a
 * requestId "-" (quoted) and no requestId (bare) differ.
 *
 * JSON: {"ts":...,"level":...,"msg":..., then the fields as members}:
 * strings as JSON strings (bytes outside printable ASCII as \u00NN), numbers
 * as JSON numbers, lists as arrays, NULL as null.
 *
 * When the line would exceed LOG_LINE_MAX, a list keeps the elements that
 * fit and is followed by <key>Omitted=<count>, a field that does not fit is
 * left out, and the line ends with fieldsOmitted=<count>. */
void log_event(enum log_level level, const char *msg, const log_field *f, int n);

/* log_event with the fields written inline:
 * log_kv(LOG_INFO, "item created", LOG_INT("item", id), LOG_STR("instance", name)); */
#define log_kv(level, msg, ...)                                                            \
    log_event((level), (msg), (const log_field[]){__VA_ARGS__},                            \
              (int)(sizeof((const log_field[]){__VA_ARGS__}) / sizeof(log_field)))

#endif
