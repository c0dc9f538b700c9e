/* log.h - one line per event on stderr: ts=... level=... msg="..." key=value.
 * Thread-safe (each line is one write). Only main and this module print. */
#ifndef LOG_H
#define LOG_H

enum log_level { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR };

/* "debug", "info", "warn", "error", then NULL: indexed by enum log_level. */
extern const char *const log_level_names[];

/* Sets the lowest level printed (default LOG_INFO). Call before threads start. */
void log_set_level(enum log_level level);

/* Logs msg (quoted) followed by fields, a printf-style string of key=value
 * pairs (may be NULL). Lines longer than 1 KiB are truncated. */
void log_event(enum log_level level, const char *msg, const char *fields, ...)
    __attribute__((format(printf, 3, 4)));

#endif
