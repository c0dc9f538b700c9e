/* notify.c - sd_notify's messages to the service manager (notify.h): one
 * state and a status line each, sent only when NOTIFY_SOCKET is set. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <systemd/sd-daemon.h>

#include "server/notify.h"

/* A status line longer than this is cut: systemctl shows one line. */
#define NOTIFY_STATUS_MAX 512

int notify_wanted(void)
{
    const char *s = getenv("NOTIFY_SOCKET");
    return s != NULL && s[0] != '\0';
}

/* head (the state's assignments, each ending in a newline) and STATUS=text:
 * the message's fields are lines, so no byte of the text may end one. */
static int send_message(const char *head, const char *fmt, va_list ap)
{
    if (!notify_wanted())
        return 0;
    char text[NOTIFY_STATUS_MAX];
    vsnprintf(text, sizeof(text), fmt, ap);
    for (char *p = text; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            *p = ' ';
    int rc = sd_notifyf(0, "%sSTATUS=%s", head, text);
    return rc > 0 ? 1 : rc;
}

int notify_status(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = send_message("", fmt, ap);
    va_end(ap);
    return rc;
}

int notify_ready(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = send_message("READY=1\n", fmt, ap);
    va_end(ap);
    return rc;
}

int notify_reloading(const char *fmt, ...)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    char head[64];
    snprintf(head, sizeof(head), "RELOADING=1\nMONOTONIC_USEC=%lld\n",
             (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000);
    va_list ap;
    va_start(ap, fmt);
    int rc = send_message(head, fmt, ap);
    va_end(ap);
    return rc;
}

int notify_stopping(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = send_message("STOPPING=1\n", fmt, ap);
    va_end(ap);
    return rc;
}
