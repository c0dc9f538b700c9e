/* scripts.c - the Lua scripts the lock runs in Redis (by SHA, see node.c),
 * and why each does what it does: acquire, release (with its grant to the
 * next waiter), renew, the quorum's fence write-back and a holder's fence
 * raise; and the semaphore's acquire, renew and release; the read-write
 * lock's acquires and its writer's release. */
#include "lock/scripts.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Shared Lua pieces. KEYS: lock, fence counter, queue (ZSET of waiting tokens
 * by arrival: with one server each newcomer scores one more than the last,
 * so two that arrive within one millisecond keep their order; with several
 * each waiter brings its own score, the same on every server, so that every
 * server puts the waiters in the same order), alive (HASH token ->
 * "deadline:sent:grant": its deadline in Redis ms, its client's stamp, see
 * the release, and how long a grant to it lasts), gone (ZSET of given-up
 * tokens -> until when, in Redis ms, they may not take the key).
 *
 * A fence is one more than the counter, moved up to Redis's clock in
 * microseconds when it lags that by more than the slack. With one server
 * the slack is 0 and the fence is max(counter + 1, clock): one SET ... GET
 * writes the clock and reads the old counter, and only a counter at or
 * ahead of the clock (more than a million acquisitions a second, or a clock
 * that went back) costs a second write. Tokens keep growing when Redis
 * loses the counter (a restart without persistence, or its expiry) or
 * brings back an older one (from an RDB or AOF file), as long as the key
 * sees fewer than a million acquisitions a second on average and Redis's
 * clock does not go back: every fence issued is at most the clock of its
 * day, so a fence taken from a later clock is larger. With several servers
 * the slack (lock/README.md) keeps the counters of the servers in step
 * between reseeds, so a quorum's servers mostly answer the same fence and
 * need no write-back.
 *
 * Every script draws its fence before it writes what the fence is for
 * (the acquire's SET NX, which must come first, is undone): a script's
 * writes stay when it fails, and a draw can fail (a counter at 2^63 - 1).
 * Fences are exact below 2^53 only, as Lua numbers are doubles: a raise's
 * floor is at most DLOCK_FENCE_MAX (dlock.h), and clocks stay below it.
 *
 * No key lives forever: the lock has its lease, the counter and the gone set
 * keep_ms (DLOCK_KEEP_LEASES leases) after their last write, the queue and
 * alive keys until the last waiter's deadline.
 *
 * Waiters that registered in the queue get the lock in queue order: a
 * release grants it to the first one whose deadline has not passed (a waiter
 * refreshes it on every try, so a crashed one drops out quickly). TIME is
 * read at most once per script: the clock a script sees does not move. */
#define LUA_FENCE                                                                  \
    "local clock = nil\n"                                                          \
    "local function time()\n"                                                      \
    "  clock = clock or redis.call('time')\n"                                      \
    "  return clock\n"                                                             \
    "end\n"                                                                        \
    "local function count(key)\n" /* INCR; at 2^63 - 1 there is no fence above */   \
    "  local n = redis.pcall('incr', key)\n"                                        \
    "  if type(n) ~= 'table' then return n end\n"                                  \
    "  error({err = 'ERR no fence above the counter ' .. key .. ' (' ..\n"          \
    "               string.gsub(n.err, '^ERR ', '') .. ')'})\n"                    \
    "end\n"                                                                        \
    "local function next_fence(keep_ms, slack_us)\n"                               \
    "  local t = time()\n"                                                         \
    "  local now_us = t[1] .. string.format('%06d', tonumber(t[2]))\n"             \
    "  if slack_us == '0' then\n"                                                  \
    "    local old = redis.call('set', KEYS[2], now_us, 'PX', keep_ms, 'GET')\n"   \
    "    if not old or tonumber(old) < tonumber(now_us) then\n"                    \
    "      return tonumber(now_us)\n"                                              \
    "    end\n"                                                                    \
    "    redis.call('set', KEYS[2], old, 'PX', keep_ms)\n" /* ahead: count on */   \
    "    return count(KEYS[2])\n"                                                  \
    "  end\n"                                                                      \
    "  local fence = count(KEYS[2])\n"                                             \
    "  if fence < tonumber(now_us) - tonumber(slack_us) then\n"                    \
    "    redis.call('set', KEYS[2], now_us, 'PX', keep_ms)\n"                      \
    "    return tonumber(now_us)\n"                                                \
    "  end\n"                                                                      \
    "  redis.call('pexpire', KEYS[2], keep_ms)\n"                                  \
    "  return fence\n"                                                             \
    "end\n"

/* The queue's helpers, after LUA_FENCE. Defined apart, so that the lean
 * acquire, which returns before them, does not build their closures. */
#define LUA_QUEUE                                                                  \
    "local function now_ms()\n"                                                    \
    "  local t = time()\n"                                                         \
    "  return t[1] * 1000 + math.floor(t[2] / 1000)\n"                             \
    "end\n"                                                                        \
    "local function keep(key, ms)\n" /* a TTL of at least ms, never shortened */    \
    "  if redis.call('pexpire', key, ms, 'GT') == 0 then\n"                        \
    "    redis.call('pexpire', key, ms, 'NX')\n" /* a new key has none yet */      \
    "  end\n"                                                                      \
    "end\n"                                                                        \
    "local function keep_line(ms)\n"                                               \
    "  keep(KEYS[3], ms)\n"                                                        \
    "  keep(KEYS[4], ms)\n"                                                        \
    "end\n"                                                                        \
    "local function dequeue(token)\n"                                              \
    "  redis.call('zrem', KEYS[3], token)\n"                                       \
    "  redis.call('hdel', KEYS[4], token)\n"                                       \
    "end\n"                                                                        \
    "local function score_of(score)\n" /* a place in line */                    \
    "  if score ~= '0' then return score end\n"                                    \
    "  local t = time()\n"                                                         \
    "  return t[1] .. string.format('%06d', tonumber(t[2]))\n"                     \
    "end\n"                                                                        \
    "local function live(token, now)\n" /* its stamp and grant: see the release */ \
    "  local v = redis.call('hget', KEYS[4], token) or ''\n"                       \
    "  local deadline, sent, grant = string.match(v, '^(%d+):?(%d*):?(%d*)$')\n"   \
    "  local alive = deadline and tonumber(deadline) > now\n"                      \
    "  return alive, sent or '', tonumber(grant) or 0\n"                           \
    "end\n"

/* A script of n keys sent to a Redis Cluster node that is importing its
 * slot, after ASK, declares its first key only and passes the others as
 * its first arguments (node.c): there a command naming several keys of
 * which some are missing gets TRYAGAIN, and a lock's queue, alive and gone
 * keys mostly are. The ASK itself said that none of the keys named by the
 * full call is left at the source, so the importing node holds all of the
 * lock's state: the script runs there as anywhere (lock/README.md,
 * "Cluster"). asked tells the script so: then it uses single-key commands
 * only, which the importing node answers after ASKING whether the key is
 * there or not (elsewhere one EXISTS of two keys saves a command). */
#define LUA_ASKED(n)                                                               \
    "local asked = #KEYS == 1\n"                                                   \
    "if asked then\n"                                                              \
    "  for i = 2, " #n " do KEYS[i] = table.remove(ARGV, 1) end\n"                 \
    "end\n"

/* Acquire. ARGV: token, lease_ms, queue_ms (0: don't queue; else how long
 * the token stays in line without trying again, its grace, and, at most
 * lease_ms, how long a release's grant to it lasts at least), keep_ms,
 * queue score (0: by Redis's clock in us, the arrival order at this one
 * server; a string, as Lua numbers lose digits on the way back to Redis),
 * seed slack in us, sent (the client's stamp for when it sent this, kept
 * with the waiter's deadline and its grant as "deadline:sent:grant"; see
 * the release). Returns {1, fence} when the key is ours (taken now, or
 * granted to us by a release: then the lease is restarted), or {0, pttl}
 * (pttl -1: free, but another waiter is first in line; -2: the token was
 * given up, see release). Never SETNX then EXPIRE: one atomic step.
 *
 * SET NX GET comes first: it takes a free key, and otherwise names its
 * holder. The taken key stays ours at once when nobody is in line and no
 * token was given up (neither the queue nor the gone set exists; one EXISTS
 * asks for both, but for the asked form, see LUA_ASKED): the lean path,
 * what the full path below would decide then. A release that granted us
 * the key is recognised before the gone set is read: a token is only given
 * up after it left the queue and its grant was undone, and nothing grants
 * to a token out of the queue. Our
 * SET NX is undone (DEL, within the script: nobody sees it) when the full
 * path refuses us, and when no fence can be drawn (taken(): a counter at
 * 2^63 - 1 fails INCR, and a script's writes stay when it fails), so that
 * the key is never left to a token whose acquire failed. */
static const char acquire_lua[] =
    LUA_ASKED(5)
    LUA_FENCE
    "local function taken()\n" /* the key our SET NX took, with its fence; or undone */
    "  local ok, e = pcall(next_fence, ARGV[4], ARGV[6])\n"
    "  if ok then return {1, e} end\n"
    "  redis.call('del', KEYS[1])\n"
    "  e = type(e) == 'table' and e.err or tostring(e)\n" /* a string, in Redis 7 */
    "  return redis.error_reply(e .. ': the key was not taken')\n"
    "end\n"
    "local holder = redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2], 'GET')\n"
    "if not holder and (asked and\n" /* one key a command: see LUA_ASKED */
    "    redis.call('exists', KEYS[3]) + redis.call('exists', KEYS[5]) or\n"
    "    redis.call('exists', KEYS[3], KEYS[5])) == 0 then\n"
    "  return taken()\n"
    "end\n"
    LUA_QUEUE
    "if holder == ARGV[1] then\n" /* the release that granted it dequeued us */
    "  redis.call('pexpire', KEYS[1], ARGV[2])\n"
    "  local fence = tonumber(redis.call('get', KEYS[2]))\n"
    "  return {1, fence or next_fence(ARGV[4], ARGV[6])}\n" /* the counter expired or was evicted */
    "end\n"
    "local gone = redis.call('zscore', KEYS[5], ARGV[1])\n"
    "if gone and tonumber(gone) > now_ms() then\n"
    "  if not holder then redis.call('del', KEYS[1]) end\n"
    "  return {0, -2}\n"
    "end\n"
    "if not holder then\n" /* free: ours unless a live waiter is first in line */
    "  local first = redis.call('zrange', KEYS[3], 0, 0)[1]\n"
    "  while first and first ~= ARGV[1] and not live(first, now_ms()) do\n"
    "    dequeue(first)\n"
    "    first = redis.call('zrange', KEYS[3], 0, 0)[1]\n"
    "  end\n"
    "  if not first or first == ARGV[1] then\n"
    "    if first then dequeue(ARGV[1]) end\n"
    "    return taken()\n"
    "  end\n"
    "  redis.call('del', KEYS[1])\n"
    "end\n"
    "if tonumber(ARGV[3]) > 0 then\n"
    "  redis.call('zadd', KEYS[3], 'NX', score_of(ARGV[5]), ARGV[1])\n" /* a refresh keeps its place */
    "  local grant = math.min(tonumber(ARGV[3]), tonumber(ARGV[2]))\n" /* see the release */
    "  local deadline = now_ms() + tonumber(ARGV[3])\n"
    "  redis.call('hset', KEYS[4], ARGV[1], deadline .. ':' .. ARGV[7] .. ':' .. grant)\n"
    "  keep_line(ARGV[3])\n"
    "end\n"
    "if not holder then return {0, -1} end\n"
    "return {0, redis.call('pttl', KEYS[1])}\n";

/* Release. ARGV: token, channel, grant_ms, leaving, keep_ms, seed slack in
 * us (for the fence of a grant), next ("" for none, else
 * "token:queue_ms:score:sent:grant", each as for acquire, grant being
 * min(queue_ms, its lease_ms): one argument, as each costs the script a
 * little). leaving is 1 for a token given up (a waiter that stopped
 * waiting, an acquire or release whose reply was lost): it leaves the queue
 * and is marked gone for keep_ms, so that an acquire of it still on its way
 * (a connection that timed out may deliver it later) can never take the
 * key. Only our own key is touched: it goes to the first live waiter (it
 * restarts the lease when it claims it; waiters found dead on the way leave
 * the line) for the longer of grant_ms and the waiter's own grant, stored
 * with its deadline: a waiter may go silent in line for its grace, so a
 * grant to it must not lapse sooner, whatever the releaser's retry_ms (a
 * lapsed grant costs the waiter its place: it was taken out of the line to
 * be granted), or is deleted. The channel gets "token:fence:grant:sent" of
 * the new holder (grant: the longer of the two, how long the key is its;
 * sent: the stamp its waiter's deadline was last written with, so the grant
 * came after the client's time sent; with one server all it needs to hold,
 * see queue.c), or "" for nobody - only when someone was in line: a waiter
 * that means to wait queues before it listens (queue.c), so with the queue
 * empty nobody listens who needs waking. A grant needs a fence: when none
 * can be drawn (see LUA_FENCE), the key is deleted and "" published, as for
 * nobody in line, and each waiter's own acquire then says why. When the key
 * went to another waiter, next goes in line behind the others, as its
 * acquire would have put it: that acquire (a script and a round trip per
 * turn of the key between processes) is saved. Returns 2 (released, next in
 * line), 1 (released), or 0 when the key was not ours. */
static const char release_lua[] =
    LUA_ASKED(5)
    LUA_FENCE
    "local next = false\n"
    "if ARGV[4] ~= '1' then\n" /* the lean path first: ours, and nobody in line */
    "  if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end\n"
    "  next = redis.call('zpopmin', KEYS[3])[1]\n"
    "  if not next then\n"
    "    redis.call('del', KEYS[1])\n"
    "    return 1\n"
    "  end\n"
    "end\n"
    LUA_QUEUE
    "if ARGV[4] == '1' then\n"
    "  dequeue(ARGV[1])\n"
    "  local now = now_ms()\n"
    "  redis.call('zremrangebyscore', KEYS[5], '-inf', now)\n"
    "  redis.call('zadd', KEYS[5], now + tonumber(ARGV[5]), ARGV[1])\n"
    "  keep(KEYS[5], ARGV[5])\n"
    "  if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end\n"
    "  next = redis.call('zpopmin', KEYS[3])[1]\n"
    "end\n"
    "local queued, now, alive, sent, grant = next, nil, false, '', 0\n"
    "while next do\n"
    "  now = now or now_ms()\n"
    "  alive, sent, grant = live(next, now)\n"
    "  redis.call('hdel', KEYS[4], next)\n"
    "  if alive then break end\n"
    "  next = redis.call('zpopmin', KEYS[3])[1]\n"
    "end\n"
    "local granted, fence = false, nil\n" /* no fence to draw: the key goes to nobody */
    "if next then granted, fence = pcall(next_fence, ARGV[5], ARGV[6]) end\n"
    "if granted then\n"
    "  grant = string.format('%d', math.max(tonumber(ARGV[3]), grant))\n"
    "  redis.call('set', KEYS[1], next, 'PX', grant)\n"
    "  fence = string.format('%d', fence)\n"
    "  redis.call('publish', ARGV[2], next .. ':' .. fence .. ':' .. grant .. ':' .. sent)\n"
    "  local mine, ms, score, stamp, its =\n"
    "    string.match(ARGV[7], '^(%x+):(%d+):(%d+):(%d+):(%d+)$')\n"
    "  if mine and mine ~= next then\n"
    "    redis.call('zadd', KEYS[3], 'NX', score_of(score), mine)\n"
    "    local deadline = now_ms() + tonumber(ms)\n"
    "    redis.call('hset', KEYS[4], mine, deadline .. ':' .. stamp .. ':' .. its)\n"
    "    keep_line(ms)\n"
    "    return 2\n"
    "  end\n"
    "else\n"
    "  redis.call('del', KEYS[1])\n"
    "  if queued then redis.call('publish', ARGV[2], '') end\n"
    "end\n"
    "return 1\n";

static const char renew_lua[] =
    "if redis.call('get', KEYS[1]) == ARGV[1] then\n"
    "  return redis.call('pexpire', KEYS[1], ARGV[2])\n"
    "end\n"
    "return 0\n";

/* Whether a lease is ours: the token's in key (a lock, a writer), or a live
 * member of the ZSET key scored by its deadline in Redis ms (a permit, a
 * reader). An expired member is no lease: it may count as free already. */
#define LUA_OWNS                                                                   \
    "local function owns(key, token, member)\n"                                    \
    "  if not member then return redis.call('get', key) == token end\n"            \
    "  local t = redis.call('time')\n"                                             \
    "  local deadline = redis.call('zscore', key, token)\n"                        \
    "  return deadline and tonumber(deadline) > t[1] * 1000 + math.floor(t[2] / 1000)\n" \
    "end\n"

/* Fence write-back. KEYS: the lease's key (a lock's, a writer's key:writer,
 * or the ZSET of permits or readers: its type tells), fence counter. ARGV:
 * token, fence (a string), keep_ms. Raises the counter to the fence a
 * quorum agreed on, only while the lease is still ours here: a server where
 * it already ran out (and a next holder may have drawn its fence) must not
 * be raised. Returns 1 when the counter is now at least the fence, 0 when
 * the lease is not ours. */
static const char fence_lua[] =
    LUA_ASKED(2)
    LUA_OWNS
    "local member = redis.call('type', KEYS[1]).ok == 'zset'\n"
    "if not owns(KEYS[1], ARGV[1], member) then return 0 end\n"
    "local counter = tonumber(redis.call('get', KEYS[2]) or '0')\n"
    "if counter < tonumber(ARGV[2]) then redis.call('set', KEYS[2], ARGV[2]) end\n"
    "redis.call('pexpire', KEYS[2], ARGV[3])\n"
    "return 1\n";

/* The semaphore (dlock_sem_acquire): KEYS[1] is a ZSET of permit tokens
 * scored by their lease deadline in Redis ms, KEYS[2] its fence counter
 * (LUA_FENCE's). A member whose deadline passed is no permit: acquire and
 * renew treat it as gone, acquire sweeps such members first. The ZSET's
 * own TTL is kept at least the latest deadline (keep() never shortens it),
 * so an abandoned semaphore vanishes once its last lease ran out.
 *
 * Acquire. ARGV: token, lease_ms, permits (the caller's own limit: each
 * call checks against the N it passes), keep_ms, seed slack in us (the
 * lock's: 0 with one server, so that the counters of several stay in
 * step). Returns {1, fence}, or {0, ms until the earliest permit's lease
 * runs out}. */
static const char sem_acquire_lua[] =
    LUA_ASKED(2)
    LUA_FENCE
    LUA_QUEUE
    "local now = now_ms()\n"
    "redis.call('zremrangebyscore', KEYS[1], '-inf', now)\n"
    "if redis.call('zcard', KEYS[1]) >= tonumber(ARGV[3]) then\n"
    "  local first = redis.call('zrange', KEYS[1], 0, 0, 'WITHSCORES')\n"
    "  return {0, tonumber(first[2]) - now}\n"
    "end\n"
    "local fence = next_fence(ARGV[4], ARGV[5])\n"
    "redis.call('zadd', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])\n"
    "keep(KEYS[1], ARGV[2])\n"
    "return {1, fence}\n";

/* Renew. KEYS[1] the ZSET. ARGV: token, lease_ms (the lock's renew
 * arguments, so the watchdog renews both alike). Only a permit still
 * there and not expired is renewed (ZADD XX): an expired one may already
 * count as free to another acquirer. Returns 1, or 0 when lost. */
static const char sem_renew_lua[] =
    LUA_FENCE
    LUA_QUEUE
    "local now = now_ms()\n"
    "local deadline = redis.call('zscore', KEYS[1], ARGV[1])\n"
    "if not deadline or tonumber(deadline) <= now then return 0 end\n"
    "redis.call('zadd', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[1])\n"
    "keep(KEYS[1], ARGV[2])\n"
    "return 1\n";

/* Release. KEYS[1] the ZSET. ARGV: token, the release channel. Removes the
 * permit and, when one was there, publishes "" (a release to nobody in
 * particular: every waiting process's head tries again). Returns 1, or 0
 * when the permit was gone or had expired (lost). */
static const char sem_release_lua[] =
    LUA_FENCE
    LUA_QUEUE
    "local deadline = redis.call('zscore', KEYS[1], ARGV[1])\n"
    "if not deadline then return 0 end\n"
    "redis.call('zrem', KEYS[1], ARGV[1])\n"
    "redis.call('publish', ARGV[2], '')\n"
    "if tonumber(deadline) <= now_ms() then return 0 end\n"
    "return 1\n";

/* The read-write lock (dlock_acquire_read / _write). KEYS: the readers'
 * ZSET (token -> lease deadline in Redis ms, a semaphore without a limit:
 * its renew and release are the semaphore's), the fence counter (one for
 * readers and writers, so every fence is larger than all earlier ones of
 * either), key:writer (the writer's token, PX lease: a lock's key, renewed
 * by the lock's script), key:writers (ZSET of waiting writers -> until when
 * their wish stands, in Redis ms; refreshed on each try of theirs, so a
 * writer that crashed or gave up stops blocking readers within queue_ms).
 *
 * Both acquires take ARGV: token, lease_ms, keep_ms, queue_ms (a writer's,
 * below; a reader's is not read), seed slack in us (as the semaphore's).
 *
 * Read. Writer preference: a reader gets in only while no writer holds and
 * none waits, so the readers a waiting writer found drain and none join
 * them. Returns {1, fence}, or {0, ms until worth trying again, -1
 * unknown}. */
static const char rw_read_lua[] =
    LUA_ASKED(4)
    LUA_FENCE
    LUA_QUEUE
    "local now = now_ms()\n"
    "local w = redis.call('pttl', KEYS[3])\n"
    "if w > 0 then return {0, w} end\n"
    "redis.call('zremrangebyscore', KEYS[4], '-inf', now)\n"
    "if redis.call('zcard', KEYS[4]) > 0 then return {0, -1} end\n"
    "redis.call('zremrangebyscore', KEYS[1], '-inf', now)\n"
    "local fence = next_fence(ARGV[3], ARGV[5])\n"
    "redis.call('zadd', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])\n"
    "keep(KEYS[1], ARGV[2])\n"
    "return {1, fence}\n";

/* Write. queue_ms is how long this wish to write stands if not renewed
 * (0: don't register one). Takes key:writer when nobody holds (no writer,
 * no live reader); otherwise registers the wish and answers {0, ms until
 * the writer's lease or the earliest reader's runs out}. Writers among
 * themselves take it as they come. */
static const char rw_write_lua[] =
    LUA_ASKED(4)
    LUA_FENCE
    LUA_QUEUE
    "local now = now_ms()\n"
    "redis.call('zremrangebyscore', KEYS[1], '-inf', now)\n"
    "redis.call('zremrangebyscore', KEYS[4], '-inf', now)\n"
    "local w = redis.call('pttl', KEYS[3])\n"
    "if w < 0 and redis.call('zcard', KEYS[1]) == 0 then\n"
    "  local fence = next_fence(ARGV[3], ARGV[5])\n"
    "  redis.call('set', KEYS[3], ARGV[1], 'PX', ARGV[2])\n"
    "  redis.call('zrem', KEYS[4], ARGV[1])\n"
    "  return {1, fence}\n"
    "end\n"
    "if ARGV[4] ~= '0' then\n"
    "  redis.call('zadd', KEYS[4], now + tonumber(ARGV[4]), ARGV[1])\n"
    "  keep(KEYS[4], ARGV[4])\n"
    "end\n"
    "if w < 0 then\n"
    "  w = tonumber(redis.call('zrange', KEYS[1], 0, 0, 'WITHSCORES')[2]) - now\n"
    "end\n"
    "return {0, w}\n";

/* The writer's release. KEYS[1] key:writer; KEYS[2] key:writers when a
 * writer gives up waiting, whose wish goes first (rather than keep readers
 * out until it runs out). ARGV: token, the release channel. Deletes
 * key:writer only while it holds our token (an acquire whose answer was
 * lost may have taken it), and publishes "" when that or the wish let
 * anyone in (every waiting process's head tries again). Returns 1, or 0
 * when not ours (lost). */
static const char rw_write_release_lua[] =
    "local wished = KEYS[2] and redis.call('zrem', KEYS[2], ARGV[1]) or 0\n"
    "if redis.call('get', KEYS[1]) ~= ARGV[1] then\n"
    "  if wished == 1 then redis.call('publish', ARGV[2], '') end\n"
    "  return 0\n"
    "end\n"
    "redis.call('del', KEYS[1])\n"
    "redis.call('publish', ARGV[2], '')\n"
    "return 1\n";

/* Fence raise (dlock_fence_raise): a holder whose fence a store refused,
 * because the row carries a larger one, takes a fence above it. KEYS: the
 * lease's target (the lock's key, a writer's key:writer, or the ZSET of a
 * semaphore's permits or of readers), the fence counter. ARGV: token,
 * floor, keep_ms, member ('1': the lease is a member of the ZSET target
 * scored by its deadline in Redis ms; else target holds the token). Only
 * while the lease is ours: then the counter becomes max(counter, floor) + 1
 * and that is our fence. The owner check is what keeps fencing safe: a
 * holder whose lease ran out, and whose key may be another's now, gets 0
 * and stays refused by the row; the owner's new fence is above every fence
 * the counter issued (it holds the counter's maximum) and every later one
 * is above it. floor is compared as a decimal string, exact whatever the
 * counter holds; it is at most DLOCK_FENCE_MAX, so the INCR's answer, a Lua
 * number, is exact unless the counter was past that already (fence.c
 * refuses such an answer). Returns the new fence, or 0 when not ours. */
static const char raise_lua[] =
    LUA_ASKED(2)
    LUA_OWNS
    "if not owns(KEYS[1], ARGV[1], ARGV[4] == '1') then return 0 end\n"
    "local counter = redis.call('get', KEYS[2]) or '0'\n"
    "if #ARGV[2] > #counter or (#ARGV[2] == #counter and ARGV[2] > counter) then\n"
    "  redis.call('set', KEYS[2], ARGV[2])\n"
    "end\n"
    "local fence = redis.call('incr', KEYS[2])\n"
    "redis.call('pexpire', KEYS[2], ARGV[3])\n"
    "return fence\n";

const char *const dlock__script_body[DLOCK_SCRIPT_COUNT] = {
    acquire_lua,     release_lua,   renew_lua,    fence_lua,           sem_acquire_lua,
    sem_renew_lua,   sem_release_lua, rw_read_lua, rw_write_lua, rw_write_release_lua,
    raise_lua};

const unsigned char dlock__script_asked_form[DLOCK_SCRIPT_COUNT] = {
    [DLOCK_SCRIPT_ACQUIRE] = 1,  [DLOCK_SCRIPT_RELEASE] = 1, [DLOCK_SCRIPT_FENCE] = 1,
    [DLOCK_SCRIPT_SEM_ACQUIRE] = 1, [DLOCK_SCRIPT_RW_READ] = 1, [DLOCK_SCRIPT_RW_WRITE] = 1,
    [DLOCK_SCRIPT_RAISE] = 1};

/* ---- a Redis Cluster's bodies: SPUBLISH for PUBLISH ---- */

static const char *sharded_body[DLOCK_SCRIPT_COUNT];
static pthread_once_t sharded_once = PTHREAD_ONCE_INIT;

/* body with each "'publish'" made "'spublish'", or NULL when out of memory. */
static char *shard(const char *body)
{
    static const char from[] = "'publish'";
    size_t count = 0, len = strlen(body);
    for (const char *p = body; (p = strstr(p, from)) != NULL; p++)
        count++;
    char *out = malloc(len + count + 1), *o = out;
    if (out == NULL)
        return NULL;
    for (const char *p = body, *hit; *p; p = hit + sizeof(from) - 1) {
        if ((hit = strstr(p, from)) == NULL) {
            strcpy(o, p);
            return out;
        }
        memcpy(o, p, (size_t)(hit - p));
        o += hit - p;
        memcpy(o, "'spublish'", 10);
        o += 10;
    }
    *o = '\0';
    return out;
}

static void build_sharded(void)
{
    for (int s = 0; s < DLOCK_SCRIPT_COUNT; s++)
        sharded_body[s] = shard(dlock__script_body[s]);
}

const char *dlock__script_text(enum dlock_script s, int sharded)
{
    if (!sharded)
        return dlock__script_body[s];
    pthread_once(&sharded_once, build_sharded);
    return sharded_body[s] ? sharded_body[s] : dlock__script_body[s];
}
