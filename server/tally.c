/* tally.c - counts per client address under a limit (tally.h): a hash table
 * of the addresses counted now, an entry freed when its count is back to 0,
 * so its size follows the clients connected, not all those ever seen. */
#include "server/tally.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define TALLY_BUCKETS 1024 /* a power of 2 */

struct entry {
    struct entry *next;
    proxies_addr addr;
    int count;
};

struct tally {
    pthread_mutex_t mu;
    struct entry *bucket[TALLY_BUCKETS];
};

tally *tally_new(void)
{
    tally *t = calloc(1, sizeof(*t));
    if (t)
        pthread_mutex_init(&t->mu, NULL);
    return t;
}

void tally_free(tally *t)
{
    if (t == NULL)
        return;
    for (int i = 0; i < TALLY_BUCKETS; i++)
        for (struct entry *e = t->bucket[i], *next; e; e = next) {
            next = e->next;
            free(e);
        }
    pthread_mutex_destroy(&t->mu);
    free(t);
}

/* FNV-1a over the address's bytes. */
static size_t slot(const proxies_addr *a)
{
    uint32_t h = 2166136261u;
    const unsigned char *b = (const unsigned char *)a;
    for (size_t i = 0; i < sizeof(*a); i++)
        h = (h ^ b[i]) * 16777619u;
    return h & (TALLY_BUCKETS - 1);
}

/* a's entry in its bucket (t->mu held), and where it is linked from. */
static struct entry **find(tally *t, const proxies_addr *a)
{
    struct entry **at = &t->bucket[slot(a)];
    while (*at && memcmp(&(*at)->addr, a, sizeof(*a)) != 0)
        at = &(*at)->next;
    return at;
}

int tally_take(tally *t, const proxies_addr *a, int limit)
{
    int rc = 1;
    pthread_mutex_lock(&t->mu);
    struct entry **at = find(t, a);
    if (*at == NULL && (*at = calloc(1, sizeof(**at))) != NULL)
        (*at)->addr = *a;
    if (*at == NULL)
        rc = -1;
    else if (limit > 0 && (*at)->count >= limit)
        rc = 0;
    else
        (*at)->count++;
    pthread_mutex_unlock(&t->mu);
    return rc;
}

void tally_give(tally *t, const proxies_addr *a)
{
    pthread_mutex_lock(&t->mu);
    struct entry **at = find(t, a), *e = *at;
    if (e && --e->count <= 0) {
        *at = e->next;
        free(e);
    }
    pthread_mutex_unlock(&t->mu);
}

int tally_count(tally *t, const proxies_addr *a)
{
    pthread_mutex_lock(&t->mu);
    struct entry *e = *find(t, a);
    int n = e ? e->count : 0;
    pthread_mutex_unlock(&t->mu);
    return n;
}
