#!/usr/bin/python3
"""naive_lock.py - an inventory service guarded by the Redis lock of many blog
posts, kept here because it oversells: loadgen must say so.

Its three mistakes, each common and each enough alone:
  1. the lease (--lease-ms, 50) is shorter than the work (--work-ms, 250), so
     Redis lets the lock go while its holder still works, and the next buyer
     takes it and reads the same stock;
  2. the stock is read, checked and written back (GET, check, SET) instead of
     being changed where it lives, so the slower of two holders writes over
     the other's sale;
  3. the lock is released by DEL without checking that it is still ours, so a
     late holder frees the lock of the buyer who took it after its lease.
A holder paused past its lease (a GC pause, a stopped VM, kill -STOP) does all
three at once when it resumes. fenced_lock.py is the same service done right.

Run: python3 examples/naive_lock.py --port 8091 --redis-port 6379
"""

import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ left in the source tree
import shop  # noqa: E402


def buy(r, args, item, quantity, request_id):
    """The request id is taken and ignored: a resend sells again."""
    if not r.exists(shop.item_key(item)):
        raise shop.Refusal(404, "not_found", "no item %d" % item)
    lock = shop.lock_key(item)
    deadline = time.monotonic() + args.wait_ms / 1000
    # "SET NX PX": ours for lease_ms, whoever else thinks they hold it
    while not r.set(lock, 1, nx=True, px=args.lease_ms):
        if time.monotonic() > deadline:
            raise shop.Refusal(503, "lock_timeout")
        time.sleep(0.005)
    try:
        stock = int(r.hget(shop.item_key(item), "stock"))
        if stock < quantity:
            raise shop.Refusal(409, "sold_out", "%d left" % stock)
        time.sleep(args.work_ms / 1000)  # payment, fraud check...: the lease runs out here
        # written back from what we read before the work, whatever happened since
        r.hset(shop.item_key(item), "stock", stock - quantity)
        r.hincrby(shop.item_key(item), "sold", quantity)
        return 200, {"remaining": stock - quantity}
    finally:
        r.delete(lock)  # may be another buyer's lock by now


if __name__ == "__main__":
    shop.serve("naive_lock", shop.parse_args("naive_lock", lease_ms=50, work_ms=250), buy)
