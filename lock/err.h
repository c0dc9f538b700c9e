/* err.h - the lock library's error reporting: a code returned, and the
 * details in a per-thread buffer that dlock_errstr() reads (dlock_base.h). */
#ifndef DLOCK_ERR_H
#define DLOCK_ERR_H

/* Sets the calling thread's error text (printf-style) and code; returns code. */
int dlock__fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* After a Redis call failed: DLOCK_ERR_AUTH when the calling thread's last
 * failure was one of credentials (nothing ran), else DLOCK_ERR_REDIS. */
int dlock__redis_failure(void);

/* Ends req's account of a call that ended with rc (req->rc and req->err),
 * on the thread that saw it end: "" for DLOCK_OK; the thread's last failure
 * when it was of rc's code; else rc's own words. */
struct dlock_req;
void dlock__req_note(struct dlock_req *req, int rc);

#endif
