/* err.h - error codes and the error record every loadgen module fills in:
 * a negative LG_ERR_* code plus a human-readable message, like hiredis's
 * err/errstr pair, so main can print one clear line and pick the exit status. */
#ifndef LG_ERR_H
#define LG_ERR_H

enum lg_code {
    LG_OK = 0,
    LG_ERR_USAGE = -1,     /* bad flag, value or combination: exit status 2 */
    LG_ERR_SETUP = -2,     /* a target refused or garbled a set-up or verdict call */
    LG_ERR_TRANSPORT = -3, /* a target could not be reached */
    LG_ERR_NOMEM = -4,     /* out of memory */
    LG_ERR_SYS = -5,       /* a system call failed (threads, epoll, files) */
    LG_ERR_LATER = -6,     /* a target answered 503 with Retry-After: worth asking again */
};

#define LG_ERR_MSG_MAX 512

typedef struct lg_err {
    int code;                 /* LG_OK until something failed */
    char msg[LG_ERR_MSG_MAX]; /* "" or what failed and why */
} lg_err;

/* Records code and a printf-style message in err (err may be NULL) and returns
 * code, so callers can write `return lg_errf(err, LG_ERR_USAGE, "...")`. */
int lg_errf(lg_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Clears err to LG_OK / "". NULL is a no-op. */
void lg_err_clear(lg_err *err);

#endif
