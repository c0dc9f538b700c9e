/* evloop.c - a thin layer over epoll, level-triggered: a socket stays reported
 * while it has unread data, so a handler may read once and return. */
#include "loadgen/evloop.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#define MAX_EVENTS 256

struct lg_evloop {
    int epfd;
    int no_pwait2; /* kernel without epoll_pwait2: fall back to ms timeouts */
};

int64_t lg_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int lg_evloop_new(lg_evloop **out, lg_err *err)
{
    *out = NULL;
    lg_evloop *l = calloc(1, sizeof(*l));
    if (l == NULL)
        return lg_errf(err, LG_ERR_NOMEM, "out of memory");
    l->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (l->epfd < 0) {
        int e = errno;
        free(l);
        return lg_errf(err, LG_ERR_SYS, "epoll_create1: %s", strerror(e));
    }
    *out = l;
    return LG_OK;
}

void lg_evloop_free(lg_evloop *l)
{
    if (l == NULL)
        return;
    close(l->epfd);
    free(l);
}

int lg_evloop_watch(lg_evloop *l, int fd, unsigned old, unsigned events, void *tag)
{
    if (events == 0)
        return old ? epoll_ctl(l->epfd, EPOLL_CTL_DEL, fd, NULL) : 0;
    struct epoll_event ev = {.events = 0, .data.ptr = tag};
    if (events & LG_EV_READ)
        ev.events |= EPOLLIN;
    if (events & LG_EV_WRITE)
        ev.events |= EPOLLOUT;
    return epoll_ctl(l->epfd, old ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &ev);
}

int lg_evloop_wait(lg_evloop *l, int64_t wake, lg_event *out, int max)
{
    struct epoll_event ev[MAX_EVENTS];
    int64_t d = wake - lg_now_ns();
    if (d < 0)
        d = 0;
    if (max > MAX_EVENTS)
        max = MAX_EVENTS;
    int n = -1;
    if (!l->no_pwait2) {
        /* ns precision: open-loop sends must not drift by a rounded-up millisecond */
        struct timespec ts = {d / 1000000000LL, d % 1000000000LL};
        n = epoll_pwait2(l->epfd, ev, max, &ts, NULL);
        if (n < 0 && errno == ENOSYS)
            l->no_pwait2 = 1;
    }
    if (l->no_pwait2)
        n = epoll_wait(l->epfd, ev, max, (int)((d + 999999) / 1000000));
    for (int i = 0; i < n; i++) {
        out[i].tag = ev[i].data.ptr;
        out[i].events = 0;
        if (ev[i].events & EPOLLIN)
            out[i].events |= LG_EV_READ;
        if (ev[i].events & EPOLLOUT)
            out[i].events |= LG_EV_WRITE;
        if (ev[i].events & (EPOLLERR | EPOLLHUP))
            out[i].events |= LG_EV_ERROR;
    }
    return n < 0 ? 0 : n;
}
