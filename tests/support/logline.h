/* logline.h - stockd's log lines read back the way an operator's tools read
 * them: a logfmt line split into its pairs with the values unescaped, by
 * the strict rules server/log.h promises (so a line a client managed to
 * forge, or one cut inside a value, fails to parse). */
#ifndef TEST_LOGLINE_H
#define TEST_LOGLINE_H

#include <stddef.h>

#include <jansson.h>

#define TH_LOGFMT_PAIRS 64

typedef struct th_logfmt {
    int n;
    const char *key[TH_LOGFMT_PAIRS];
    const char *val[TH_LOGFMT_PAIRS]; /* unescaped; NULL for a bare - (no value) */
    char buf[8192];                   /* where keys and values live */
} th_logfmt;

/* Parses one line (without its newline). Returns 0, or -1 when it is not
 * logfmt as stockd writes it: key=value pairs separated by one space, keys
 * [A-Za-z0-9_], values bare (printable ASCII without space, '"', '=', '\')
 * or quoted with the escapes \" \\ \n \r \t \xNN only. */
int th_logfmt_parse(const char *line, th_logfmt *out);

/* How many pairs have key. */
int th_logfmt_count(const th_logfmt *l, const char *key);

/* The value of key (NULL when absent or no value); *found says which. */
const char *th_logfmt_get(const th_logfmt *l, const char *key, int *found);

/* The lines of text (a whole log) one by one: *next starts at text; each
 * call copies the next line, without its newline, into line (size bytes)
 * and returns 1, or 0 at the end. Fails the running test on a line longer
 * than size - 1. */
int th_next_line(const char **next, char *line, size_t size);

/* The lines of a log (text) whose key has value (NULL: no value) as
 * strings, counted; the first of them parsed into *first (may be NULL).
 * Fails the running test on a line that is not logfmt. */
int th_log_find(const char *text, const char *key, const char *value, th_logfmt *first);

/* The same for a log in JSON: the first matching line's object (the caller
 * json_decrefs it) or NULL, their count in *count. Fails the running test
 * on a line that is not a JSON object with string ts, level and msg. */
json_t *th_log_find_json(const char *text, const char *key, const char *value, int *count);

#endif
