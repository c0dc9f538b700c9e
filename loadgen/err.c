/* err.c - fills the error record (code + message) that loadgen modules hand
 * back to main, which alone decides what to print and how to exit. */
#include "loadgen/err.h"

#include <stdarg.h>
#include <stdio.h>

int lg_errf(lg_err *err, int code, const char *fmt, ...)
{
    if (err == NULL)
        return code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    va_end(ap);
    err->code = code;
    return code;
}

void lg_err_clear(lg_err *err)
{
    if (err == NULL)
        return;
    err->code = LG_OK;
    err->msg[0] = '\0';
}
