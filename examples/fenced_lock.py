#!/usr/bin/python3
"""fenced_lock.py - the inventory service of naive_lock.py done right: loadgen
must find nothing wrong with it, under the same load and the same pause.

What it does differently:
  1. the lock's value is a random token, and it is released by a script that
     deletes the key only while it still holds that token;
  2. the deduction is fenced: one Lua script checks that the lock still holds
     our token and that the stock suffices, then decrements, all at once in
     Redis. A holder paused past its lease (kill -STOP) finds on resuming that
     its token is gone and writes nothing; it answers 503 lock_lost;
  3. the lease (--lease-ms, 1000) is longer than the work (--work-ms, 50), so
     only a holder that stalls loses its lock; waiting for the lock is
     bounded (--wait-ms, 3000: a 503 lock_timeout, never a thread stuck for
     good) and longer than the lease, so a buyer outwaits a stalled holder;
  4. a request id already served is answered as before, not sold twice.
What keeps the stock right is that the check and the decrement are one
script, where no other client's command can come between them. The token in
the same script is what makes the lock mean something: a holder that lost it
writes nothing, so whatever it decided during its work is refused with it.
The lock spares the others that work for a sale that could not happen.

Run: python3 examples/fenced_lock.py --port 8093 --redis-port 6379
"""

import os
import secrets
import sys
import time

import redis

sys.dont_write_bytecode = True  # no __pycache__ left in the source tree
import shop  # noqa: E402

# KEYS: lock, item, requests. ARGV: token, quantity, request id.
# Returns the stock left, -1 when the lock is no longer ours, -2 sold out.
DEDUCT = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
local done = redis.call('HGET', KEYS[3], ARGV[3])
if done then return tonumber(done) end
local stock = tonumber(redis.call('HGET', KEYS[2], 'stock'))
if stock < tonumber(ARGV[2]) then return -2 end
local left = redis.call('HINCRBY', KEYS[2], 'stock', -tonumber(ARGV[2]))
redis.call('HINCRBY', KEYS[2], 'sold', ARGV[2])
redis.call('HSET', KEYS[3], ARGV[3], left)
return left
"""

# KEYS: lock. ARGV: token. Deletes the lock only while it is ours.
RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

scripts = {}


def acquire(r, lock, token, args):
    deadline = time.monotonic() + args.wait_ms / 1000
    while not r.set(lock, token, nx=True, px=args.lease_ms):
        if time.monotonic() > deadline:
            raise shop.Refusal(503, "lock_timeout")
        time.sleep(0.005)


def buy(r, args, item, quantity, request_id):
    if not scripts:  # registered once; redis-py sends EVALSHA, EVAL when unknown
        scripts["deduct"] = r.register_script(DEDUCT)
        scripts["release"] = r.register_script(RELEASE)
    key, lock = shop.item_key(item), shop.lock_key(item)
    done = r.hget(shop.requests_key(item), request_id)
    if done is not None:  # a resend of a request that deducted
        return 200, {"remaining": int(done)}
    if not r.exists(key):
        raise shop.Refusal(404, "not_found", "no item %d" % item)
    # unguessable, so no other holder can match it; the pid in front says
    # who holds the lock to whoever reads it (redis-cli GET shop:lock:1)
    token = "%d:%s" % (os.getpid(), secrets.token_hex(16))
    acquire(r, lock, token, args)
    try:
        # a sold-out answer without the work; only the script's check counts
        if int(r.hget(key, "stock")) < quantity:
            raise shop.Refusal(409, "sold_out")
        time.sleep(args.work_ms / 1000)  # the work: a stall here costs the lock, not the stock
        try:
            left = scripts["deduct"](keys=[lock, key, shop.requests_key(item)],
                                     args=[token, quantity, request_id])
        except redis.RedisError:
            # the script may have run and its answer been lost
            raise shop.Refusal(503, "outcome_unknown")
        if left == -1:
            shop.log("warn", "lock_lost", item=item, requestId=request_id)
            raise shop.Refusal(503, "lock_lost")
        if left == -2:
            raise shop.Refusal(409, "sold_out")
        return 200, {"remaining": left}
    finally:
        try:
            scripts["release"](keys=[lock], args=[token])
        except redis.RedisError:
            pass  # the lease frees it; the fence keeps a late holder out meanwhile


if __name__ == "__main__":
    shop.serve("fenced_lock", shop.parse_args("fenced_lock", lease_ms=1000, work_ms=50), buy)
