/* redis.c - what a test asks a Redis (see harness.h): a connection with
 * the server's password, one command's answer as a number or a string, its
 * clock, and an item's lock as stockd names it, waited for, taken or let go
 * as another owner would. */
#include "tests/support/harness.h"

#include "server/service.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>

redisContext *th_redis_connect(const th_redis *r)
{
    struct timeval tv = {1, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", r->port, tv);
    if (c && !c->err)
        redisSetTimeout(c, tv);
    if (c && !c->err && r->password[0])
        freeReplyObject(redisCommand(c, "AUTH %s", r->password));
    return c;
}

long long th_redis_int(const th_redis *r, const char *fmt, ...)
{
    redisContext *c = th_redis_connect(r);
    if (c == NULL || c->err) {
        redisFree(c);
        return -2;
    }
    va_list ap;
    va_start(ap, fmt);
    redisReply *rep = redisvCommand(c, fmt, ap);
    va_end(ap);
    long long v = -2;
    if (rep && rep->type == REDIS_REPLY_INTEGER)
        v = rep->integer;
    else if (rep && rep->type == REDIS_REPLY_NIL)
        v = -1;
    else if (rep && rep->type == REDIS_REPLY_STATUS)
        v = 0;
    else if (rep && rep->type == REDIS_REPLY_STRING)
        v = strtoll(rep->str, NULL, 10);
    freeReplyObject(rep);
    redisFree(c);
    return v;
}

const char *th_redis_get(const th_redis *r, const char *key, char *buf, size_t size)
{
    buf[0] = '\0';
    redisContext *c = th_redis_connect(r);
    redisReply *rep = (c && !c->err) ? redisCommand(c, "GET %s", key) : NULL;
    if (rep && rep->type == REDIS_REPLY_STRING)
        snprintf(buf, size, "%s", rep->str);
    freeReplyObject(rep);
    redisFree(c);
    return buf;
}

long long th_redis_now_us(const th_redis *r)
{
    redisContext *c = th_redis_connect(r);
    redisReply *t = (c && !c->err) ? redisCommand(c, "TIME") : NULL;
    long long us = -1;
    if (t && t->type == REDIS_REPLY_ARRAY && t->elements == 2)
        us = atoll(t->element[0]->str) * 1000000 + atoll(t->element[1]->str);
    freeReplyObject(t);
    redisFree(c);
    return us;
}

const char *th_item_lock_key(long long item, char *buf)
{
    service_config defaults;
    service_config_defaults(&defaults);
    service_lock_key(defaults.lock_prefix, item, buf);
    return buf;
}

/* Waits until item's lock key exists (exists 1) or is gone (exists 0). */
static int wait_item_key(const th_redis *r, long long item, int exists, int timeout_ms)
{
    char key[DLOCK_KEY_MAX + 1];
    th_item_lock_key(item, key);
    for (int64_t end = th_now_ms() + timeout_ms; th_redis_int(r, "EXISTS %s", key) != exists;) {
        if (th_now_ms() >= end)
            return -1;
        th_sleep_ms(2);
    }
    return 0;
}

int th_wait_item_locked(const th_redis *r, long long item, int timeout_ms)
{
    return wait_item_key(r, item, 1, timeout_ms);
}

int th_wait_item_unlocked(const th_redis *r, long long item, int timeout_ms)
{
    return wait_item_key(r, item, 0, timeout_ms);
}

int th_hold_item_lock(const th_redis *r, long long item)
{
    char key[DLOCK_KEY_MAX + 1];
    return th_redis_int(r, "SET %s nobody NX PX 30000", th_item_lock_key(item, key)) == 0 ? 0
                                                                                         : -1;
}

int th_release_item_lock(const th_redis *r, long long item)
{
    char key[DLOCK_KEY_MAX + 1];
    return th_redis_int(r, "DEL %s", th_item_lock_key(item, key)) == 1 ? 0 : -1;
}
