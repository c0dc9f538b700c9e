/* err.c - the lock library's error reporting: codes, their static texts, and
 * the calling thread's last failure in detail. */
#include "lock/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "lock/internal.h"

static _Thread_local char errbuf[256];
static _Thread_local int errcode;

int dlock__fail(int code, const char *fmt, ...)
{
    va_list ap;
    errcode = code;
    va_start(ap, fmt);
    vsnprintf(errbuf, sizeof(errbuf), fmt, ap);
    va_end(ap);
    return code;
}

const char *dlock_errstr(void) { return errbuf; }

int dlock__redis_failure(void)
{
    return errcode == DLOCK_ERR_AUTH ? DLOCK_ERR_AUTH : DLOCK_ERR_REDIS;
}

void dlock__req_note(dlock_req *req, int rc)
{
    int own = rc != DLOCK_OK && rc == errcode && rc != DLOCK_ERR_CLOSED &&
              rc != DLOCK_ERR_CANCELLED;
    const char *why = rc == DLOCK_OK ? "" : own ? errbuf : dlock_strerror(rc);
    size_t n = strnlen(why, sizeof(req->err) - 1); /* a longer text is cut short */
    memcpy(req->err, why, n);
    req->err[n] = '\0';
    req->rc = rc;
}

const char *dlock_strerror(int code)
{
    switch (code) {
    case DLOCK_OK: return "ok";
    case DLOCK_ERR_TIMEOUT: return "lock wait timed out";
    case DLOCK_ERR_REDIS: return "Redis unavailable";
    case DLOCK_ERR_LOST: return "lock lost";
    case DLOCK_ERR_INTERRUPTED: return "lock holder interrupted after max renewals";
    case DLOCK_ERR_INVALID: return "invalid argument";
    case DLOCK_ERR_NOMEM: return "out of memory";
    case DLOCK_ERR_AUTH: return "Redis authentication failed";
    case DLOCK_ERR_CLOSED: return "lock client closed while waiting";
    case DLOCK_ERR_CANCELLED: return "the asynchronous call was withdrawn (dlock_cancel)";
    default: return "unknown lock error";
    }
}
