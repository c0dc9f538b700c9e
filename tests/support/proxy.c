/* proxy.c - a loopback TCP proxy for fault tests: it can hold one client
 * chunk (a Redis command) for a while, as a slow network would, and still
 * deliver it after the client gave up; stall every byte both ways, as a
 * network that drops packets would; or close a connection right after a
 * chosen answer (a COMMIT's) has passed. See tests/support/harness.h. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tests/support/harness.h"

#define MAX_CONNS 256
#define TICK_MS 20
#define DRAIN_MS 3000 /* after the client left: how long upstream may still answer */

struct th_proxy {
    int listen_fd, port, upstream;
    pthread_t acceptor;
    pthread_mutex_t mu; /* guards the fields below */
    char needle[64];
    int delay_ms, armed, delayed, stop;
    char cut_needle[64]; /* th_proxy_cut_after: armed while cut_armed */
    int cut_armed, cuts;
    int stalled, accepted;
    pthread_t threads[MAX_CONNS];
    int nthreads;
};

struct conn {
    th_proxy *p;
    int client, up;
    char *held; /* client bytes not yet forwarded */
    size_t nheld;
    int64_t hold_until;
};

static int listen_loopback(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fd, 64) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

static int stopping(th_proxy *p)
{
    pthread_mutex_lock(&p->mu);
    int stop = p->stop;
    pthread_mutex_unlock(&p->mu);
    return stop;
}

static int stalled(th_proxy *p)
{
    pthread_mutex_lock(&p->mu);
    int stall = p->stalled;
    pthread_mutex_unlock(&p->mu);
    return stall;
}

/* A chunk from the client: held when it carries the armed needle, or when
 * bytes before it are held (order is kept). */
static void from_client(struct conn *c, const char *data, size_t len)
{
    th_proxy *p = c->p;
    pthread_mutex_lock(&p->mu);
    if (p->armed && memmem(data, len, p->needle, strlen(p->needle))) {
        p->armed = 0;
        p->delayed++;
        c->hold_until = th_now_ms() + p->delay_ms;
    }
    pthread_mutex_unlock(&p->mu);
    char *grown = realloc(c->held, c->nheld + len);
    if (grown == NULL)
        return;
    c->held = grown;
    memcpy(c->held + c->nheld, data, len);
    c->nheld += len;
}

/* Whether the connection closes after this upstream chunk: it carries the
 * armed cut needle (disarmed then: one connection is cut). */
static int cut_here(th_proxy *p, const char *data, size_t len)
{
    pthread_mutex_lock(&p->mu);
    int cut = p->cut_armed && memmem(data, len, p->cut_needle, strlen(p->cut_needle)) != NULL;
    if (cut) {
        p->cut_armed = 0;
        p->cuts++;
    }
    pthread_mutex_unlock(&p->mu);
    return cut;
}

static void *relay(void *arg)
{
    struct conn *c = arg;
    char buf[16384];
    int client_open = 1;
    int64_t give_up = 0;
    while (!stopping(c->p)) {
        int64_t now = th_now_ms();
        int stall = stalled(c->p); /* nothing passes either way */
        if (c->nheld && now >= c->hold_until && !stall) {
            th_send_all(c->up, c->held, c->nheld);
            c->nheld = 0;
        }
        if (!client_open && c->nheld == 0 && give_up == 0) {
            shutdown(c->up, SHUT_WR); /* the held command went out; let it be answered */
            give_up = now + DRAIN_MS;
        }
        if (give_up && now >= give_up)
            break;
        struct pollfd fds[2] = {{client_open ? c->client : -1, POLLIN, 0},
                                {stall ? -1 : c->up, POLLIN, 0}};
        if (poll(fds, 2, TICK_MS) < 0 && errno != EINTR)
            break;
        if (fds[0].revents) {
            ssize_t n = recv(c->client, buf, sizeof(buf), 0);
            if (n > 0)
                from_client(c, buf, (size_t)n);
            else
                client_open = 0;
        }
        if (fds[1].revents) {
            ssize_t n = recv(c->up, buf, sizeof(buf), 0);
            if (n <= 0)
                break;
            int cut = cut_here(c->p, buf, (size_t)n); /* counted before anyone sees it */
            if (client_open)
                th_send_all(c->client, buf, (size_t)n);
            if (cut)
                break; /* both ends closed below, the answer delivered */
        }
    }
    close(c->client);
    close(c->up);
    free(c->held);
    free(c);
    return NULL;
}

static void *accept_loop(void *arg)
{
    th_proxy *p = arg;
    while (!stopping(p)) {
        struct pollfd pfd = {p->listen_fd, POLLIN, 0};
        if (poll(&pfd, 1, TICK_MS) <= 0)
            continue;
        int client = accept4(p->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        pthread_mutex_lock(&p->mu);
        int upstream = p->upstream;
        pthread_mutex_unlock(&p->mu);
        int up = client >= 0 ? th_connect(upstream) : -1;
        struct conn *c = up >= 0 ? calloc(1, sizeof(*c)) : NULL;
        pthread_mutex_lock(&p->mu);
        int room = p->nthreads < MAX_CONNS;
        p->accepted += client >= 0;
        if (c && room) {
            *c = (struct conn){.p = p, .client = client, .up = up};
            room = pthread_create(&p->threads[p->nthreads], NULL, relay, c) == 0;
            p->nthreads += room;
        }
        pthread_mutex_unlock(&p->mu);
        if (!c || !room) { /* upstream down or too many: the client sees a closed connection */
            free(c);
            if (client >= 0)
                close(client);
            if (up >= 0)
                close(up);
        }
    }
    return NULL;
}

th_proxy *th_proxy_start(int upstream_port)
{
    th_proxy *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return NULL;
    p->upstream = upstream_port;
    pthread_mutex_init(&p->mu, NULL);
    if ((p->listen_fd = listen_loopback(&p->port)) < 0 ||
        pthread_create(&p->acceptor, NULL, accept_loop, p) != 0) {
        if (p->listen_fd >= 0)
            close(p->listen_fd);
        free(p);
        return NULL;
    }
    return p;
}

int th_proxy_port(const th_proxy *p) { return p->port; }

void th_proxy_redirect(th_proxy *p, int upstream_port)
{
    pthread_mutex_lock(&p->mu);
    p->upstream = upstream_port;
    pthread_mutex_unlock(&p->mu);
}

void th_proxy_delay_next(th_proxy *p, const char *needle, int delay_ms)
{
    pthread_mutex_lock(&p->mu);
    snprintf(p->needle, sizeof(p->needle), "%s", needle);
    p->delay_ms = delay_ms;
    p->armed = 1;
    pthread_mutex_unlock(&p->mu);
}

void th_proxy_cut_after(th_proxy *p, const char *needle)
{
    pthread_mutex_lock(&p->mu);
    snprintf(p->cut_needle, sizeof(p->cut_needle), "%s", needle);
    p->cut_armed = 1;
    pthread_mutex_unlock(&p->mu);
}

int th_proxy_cuts(th_proxy *p)
{
    pthread_mutex_lock(&p->mu);
    int n = p->cuts;
    pthread_mutex_unlock(&p->mu);
    return n;
}

void th_proxy_stall(th_proxy *p, int on)
{
    pthread_mutex_lock(&p->mu);
    p->stalled = on;
    pthread_mutex_unlock(&p->mu);
}

int th_proxy_accepted(th_proxy *p)
{
    pthread_mutex_lock(&p->mu);
    int n = p->accepted;
    pthread_mutex_unlock(&p->mu);
    return n;
}

int th_proxy_delayed(th_proxy *p)
{
    pthread_mutex_lock(&p->mu);
    int n = p->delayed;
    pthread_mutex_unlock(&p->mu);
    return n;
}

void th_proxy_stop(th_proxy *p)
{
    if (p == NULL)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->acceptor, NULL);
    for (int i = 0; i < p->nthreads; i++)
        pthread_join(p->threads[i], NULL);
    close(p->listen_fd);
    pthread_mutex_destroy(&p->mu);
    free(p);
}
