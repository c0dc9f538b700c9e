/* log.c - one line per event on stderr: ts=... level=... msg="..." key=value. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static enum log_level min_level = LOG_INFO; /* set once at start-up, read-only after */
const char *const log_level_names[] = {"debug", "info", "warn", "error", NULL};

void log_set_level(enum log_level level) { min_level = level; }

void log_event(enum log_level level, const char *msg, const char *fields, ...)
{
    if (level < min_level)
        return;
    char line[1024];
    struct timeval tv;
    struct tm tm;
    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    size_t n = strftime(line, sizeof(line), "ts=%Y-%m-%dT%H:%M:%S", &tm);
    n += (size_t)snprintf(line + n, sizeof(line) - n, ".%03dZ level=%s msg=\"%s\"",
                          (int)(tv.tv_usec / 1000), log_level_names[level], msg);
    if (fields && n < sizeof(line) - 2) {
        line[n++] = ' ';
        va_list ap;
        va_start(ap, fields);
        int m = vsnprintf(line + n, sizeof(line) - n, fields, ap);
        va_end(ap);
        n += m > 0 ? (size_t)m : 0;
    }
    if (n > sizeof(line) - 2)
        n = sizeof(line) - 2;
    line[n++] = '\n';
    ssize_t ignored = write(STDERR_FILENO, line, n); /* one write: lines never interleave */
    (void)ignored;
}
