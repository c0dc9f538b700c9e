/* evloop.c - a libcurl multi handle on epoll: libcurl tells us which sockets
 * and which timeout to watch (socket and timer callbacks), we wait on epoll and
 * hand every event back through curl_multi_socket_action. */
#include "loadgen/evloop.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#define MAX_EVENTS 256

struct lg_evloop {
    CURLM *multi;
    int epfd;
    int no_pwait2;    /* kernel without epoll_pwait2: fall back to ms timeouts */
    int64_t timer_ns; /* libcurl's requested timeout, -1 when none */
};

int64_t lg_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int on_socket(CURL *e, curl_socket_t fd, int what, void *userp, void *socketp)
{
    (void)e;
    lg_evloop *l = userp;
    if (what == CURL_POLL_REMOVE) {
        epoll_ctl(l->epfd, EPOLL_CTL_DEL, fd, NULL); /* EBADF when already closed: fine */
        return 0;
    }
    struct epoll_event ev = {.events = 0, .data.fd = fd};
    if (what & CURL_POLL_IN)
        ev.events |= EPOLLIN;
    if (what & CURL_POLL_OUT)
        ev.events |= EPOLLOUT;
    if (socketp == NULL || epoll_ctl(l->epfd, EPOLL_CTL_MOD, fd, &ev) != 0) {
        if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, fd, &ev) != 0 && errno == EEXIST)
            epoll_ctl(l->epfd, EPOLL_CTL_MOD, fd, &ev);
        curl_multi_assign(l->multi, fd, l); /* any non-NULL marks "registered" */
    }
    return 0;
}

static int on_timer(CURLM *m, long timeout_ms, void *userp)
{
    (void)m;
    lg_evloop *l = userp;
    l->timer_ns = timeout_ms < 0 ? -1 : lg_now_ns() + (int64_t)timeout_ms * 1000000LL;
    return 0;
}

int lg_evloop_new(int max_conns, lg_evloop **out, lg_err *err)
{
    *out = NULL;
    lg_evloop *l = calloc(1, sizeof(*l));
    if (l == NULL)
        return lg_errf(err, LG_ERR_NOMEM, "out of memory");
    l->timer_ns = -1;
    l->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (l->epfd < 0) {
        free(l);
        return lg_errf(err, LG_ERR_SYS, "epoll_create1: %s", strerror(errno));
    }
    l->multi = curl_multi_init();
    if (l->multi == NULL) {
        close(l->epfd);
        free(l);
        return lg_errf(err, LG_ERR_NOMEM, "curl_multi_init failed");
    }
    curl_multi_setopt(l->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
    curl_multi_setopt(l->multi, CURLMOPT_SOCKETDATA, l);
    curl_multi_setopt(l->multi, CURLMOPT_TIMERFUNCTION, on_timer);
    curl_multi_setopt(l->multi, CURLMOPT_TIMERDATA, l);
    curl_multi_setopt(l->multi, CURLMOPT_MAXCONNECTS, (long)max_conns);
    *out = l;
    return LG_OK;
}

void lg_evloop_free(lg_evloop *l)
{
    if (l == NULL)
        return;
    curl_multi_cleanup(l->multi);
    close(l->epfd);
    free(l);
}

int lg_evloop_add(lg_evloop *l, CURL *e)
{
    return curl_multi_add_handle(l->multi, e) == CURLM_OK ? LG_OK : LG_ERR_NOMEM;
}

void lg_evloop_remove(lg_evloop *l, CURL *e)
{
    curl_multi_remove_handle(l->multi, e);
}

int lg_evloop_timers(lg_evloop *l, int64_t now)
{
    if (l->timer_ns < 0 || l->timer_ns > now)
        return 0;
    int running;
    l->timer_ns = -1; /* libcurl sets a new one from inside the call when it needs one */
    curl_multi_socket_action(l->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    return 1;
}

int64_t lg_evloop_deadline(const lg_evloop *l, int64_t wake)
{
    return l->timer_ns >= 0 && l->timer_ns < wake ? l->timer_ns : wake;
}

void lg_evloop_wait(lg_evloop *l, int64_t wake)
{
    struct epoll_event ev[MAX_EVENTS];
    int64_t d = wake - lg_now_ns();
    if (d < 0)
        d = 0;
    int n = -1;
    if (!l->no_pwait2) {
        /* ns precision: open-loop sends must not drift by a rounded-up millisecond */
        struct timespec ts = {d / 1000000000LL, d % 1000000000LL};
        n = epoll_pwait2(l->epfd, ev, MAX_EVENTS, &ts, NULL);
        if (n < 0 && errno == ENOSYS)
            l->no_pwait2 = 1;
    }
    if (l->no_pwait2)
        n = epoll_wait(l->epfd, ev, MAX_EVENTS, (int)((d + 999999) / 1000000));
    int running;
    for (int i = 0; i < n; i++) {
        int flags = 0;
        if (ev[i].events & EPOLLIN)
            flags |= CURL_CSELECT_IN;
        if (ev[i].events & EPOLLOUT)
            flags |= CURL_CSELECT_OUT;
        if (ev[i].events & (EPOLLERR | EPOLLHUP))
            flags |= CURL_CSELECT_ERR;
        curl_multi_socket_action(l->multi, ev[i].data.fd, flags, &running);
    }
}

int lg_evloop_done(lg_evloop *l, CURL **e, CURLcode *result)
{
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(l->multi, &left)) != NULL)
        if (m->msg == CURLMSG_DONE) {
            *e = m->easy_handle;
            *result = m->data.result;
            return 1;
        }
    return 0;
}
