/* fake.h - an in-process fake stockd for loadgen's client and load engine:
 * it answers what real stockd can't on demand - answers dropped after a
 * commit (so --retry must replay the same requestId), answers cut in their
 * headers or chunks, chunked and close-delimited bodies, answers dribbled in
 * pieces, connections closed after every answer or closed silently when
 * reused, garbage, answers slower than the timeout - and POST /orders carts
 * answered with their lines (or the wrong ones). Test helpers only: they fail
 * the running cmocka test on set-up errors. */
#ifndef TEST_FAKE_H
#define TEST_FAKE_H

#include <pthread.h>

enum th_fake_mode {
    TH_FAKE_OK,               /* Content-Length answers on a kept-alive connection */
    TH_FAKE_DROP_FIRST,       /* a new requestId: commit, send part of the body, close */
    TH_FAKE_CUT_HEADERS,      /* a new requestId: commit, send part of the head, close */
    TH_FAKE_CUT_CHUNKED,      /* a new requestId: commit, send chunks without the last, close */
    TH_FAKE_GARBAGE,          /* 200s that are no JSON answer, every third a 503 */
    TH_FAKE_WRONG_LINES,      /* an order's answer lacks its last line */
    TH_FAKE_CHUNKED,          /* bodies in several chunks, with an extension and a trailer */
    TH_FAKE_DRIBBLE,          /* every answer sent a few bytes at a time */
    TH_FAKE_CLOSE_EACH,       /* close after every answer, without saying so */
    TH_FAKE_CLOSE_DELIMITED,  /* "Connection: close", no Content-Length: the close ends the body */
    TH_FAKE_SILENT_REUSED,    /* a connection's second request: commit, close without a byte */
    TH_FAKE_CUT_REUSED,       /* a connection's second request: commit, part of the body, close */
    TH_FAKE_SLOW_DRIBBLE,     /* one byte of each answer every delay_ms */
};

#define TH_FAKE_MAX_IDS 4096
#define TH_FAKE_MAX_CONNS 512

typedef struct th_fake {
    int lfd, port, mode, delay_ms;
    pthread_t acceptor;
    pthread_mutex_t mu; /* guards everything below */
    char ids[TH_FAKE_MAX_IDS][48];
    int commits[TH_FAKE_MAX_IDS];
    long long remaining_at[TH_FAKE_MAX_IDS];
    char *order_answer[TH_FAKE_MAX_IDS]; /* an order's first answer, for replays */
    int nids, served;                    /* requestIds seen; requests answered or dropped */
    long long stock;
    int orders, order_lines, dup_items; /* carts committed, their lines, carts repeating an item */
    int fds[TH_FAKE_MAX_CONNS];
    pthread_t threads[TH_FAKE_MAX_CONNS];
    int nconns;                         /* connections accepted */
} th_fake;

/* A fake on a free loopback port, stock 1000000, answering GET with 200 and
 * 503 alternately and POST /reduceStock and /orders as stockd does (a
 * requestId commits once; a replay answers the first result), in mode, each
 * answer after delay_ms (in TH_FAKE_SLOW_DRIBBLE: between its bytes). */
th_fake *th_fake_start(int mode, int delay_ms);

/* Closes every connection, joins the fake's threads and frees f. */
void th_fake_stop(th_fake *f);

#endif
