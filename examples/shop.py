"""shop.py - the HTTP API, flags and Redis layout that both example services
share, so that one loadgen profile (shop.json) describes both and the two
service files differ only in how they lock and deduct.

Not a module to reuse: an example kept small on purpose. Python 3 standard
library plus Debian's python3-redis, nothing else.
"""

import argparse
import json
import re
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import redis

MAX_BODY = 64 * 1024
ITEM_PATH = re.compile(r"^/items/([0-9]{1,18})$")
SAFE_VALUE = re.compile(r"[\w.:/-]+\Z")


def item_key(item):
    """The item's hash: name, stock and units sold. One hash per item, so that
    a service can read or change all of it in one command or script."""
    return "shop:item:%d" % item


def lock_key(item):
    return "shop:lock:%d" % item


def requests_key(item):
    """requestId -> stock left after it: a resend of a request that deducted
    is answered from here instead of deducting twice. Kept for good in this
    example; a real service would let each expire after its clients' retries."""
    return "shop:item:%d:requests" % item


class Refusal(Exception):
    """An answer other than 200, raised from anywhere in a request's handling."""

    def __init__(self, status, error, detail=None):
        super().__init__(error)
        self.status, self.error, self.detail = status, error, detail


def log(level, msg, **fields):
    # One line per event on stderr, as the project's own programs log; a value
    # from a request is quoted, so that it can't forge a field or a line.
    extra = "".join(" %s=%s" % (k, v if SAFE_VALUE.match(str(v)) else json.dumps(str(v)))
                    for k, v in fields.items())
    print("level=%s msg=%s%s" % (level, msg, extra), file=sys.stderr, flush=True)


def parse_args(prog, lease_ms, work_ms):
    p = argparse.ArgumentParser(prog=prog)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8090)
    p.add_argument("--redis-port", type=int, default=6379)
    p.add_argument("--redis-url", help="redis://host:port/db; overrides --redis-port")
    p.add_argument("--lease-ms", type=int, default=lease_ms,
                   help="how long the lock is held before Redis lets it go")
    p.add_argument("--work-ms", type=int, default=work_ms,
                   help="how long a purchase works while it holds the lock")
    p.add_argument("--wait-ms", type=int, default=3000,
                   help="how long a purchase waits for the lock before answering 503")
    p.add_argument("--redis-timeout-ms", type=int, default=2000)
    a = p.parse_args()
    for name, least in (("lease_ms", 1), ("work_ms", 0), ("wait_ms", 1), ("redis_timeout_ms", 1)):
        if getattr(a, name) < least:
            p.error("--%s must be at least %d" % (name.replace("_", "-"), least))
    return a


def connect(args):
    timeout = args.redis_timeout_ms / 1000
    if args.redis_url:
        return redis.Redis.from_url(args.redis_url, socket_timeout=timeout)
    return redis.Redis(host="127.0.0.1", port=args.redis_port, socket_timeout=timeout)


def positive_int(body, key):
    v = body.get(key)
    # bool is an int in Python; true is not a quantity
    if not isinstance(v, int) or isinstance(v, bool) or v < 1 or v > 2**53:
        raise Refusal(400, "bad_request", "%s must be a positive integer" % key)
    return v


def create_item(r, body):
    name = body.get("name")
    stock = body.get("stock")
    if not isinstance(name, str) or not 0 < len(name) <= 200:
        raise Refusal(400, "bad_request", "name must be a string of 1 to 200 characters")
    if not isinstance(stock, int) or isinstance(stock, bool) or not 0 <= stock <= 2**53:
        raise Refusal(400, "bad_request", "stock must be an integer >= 0")
    item = r.incr("shop:next_id")
    # one command: nobody sees an item without its stock
    r.hset(item_key(item), mapping={"name": name, "stock": stock, "sold": 0})
    return 201, {"id": item}


def read_item(r, item):
    name, stock, sold = r.hmget(item_key(item), "name", "stock", "sold")
    if stock is None:
        raise Refusal(404, "not_found", "no item %d" % item)
    return 200, {"id": item, "name": name.decode(), "stock": int(stock), "sold": int(sold)}


def buy_request(body):
    """(item, quantity, requestId) of a POST /buy body, or a 400."""
    item = positive_int(body, "item")
    quantity = positive_int(body, "quantity")
    req = body.get("requestId")
    if not isinstance(req, str) or not 0 < len(req) <= 128:
        raise Refusal(400, "bad_request", "requestId must be a string of 1 to 128 characters")
    return item, quantity, req


def make_handler(r, args, buy):
    class Handler(BaseHTTPRequestHandler):
        # keep-alive, as load generators and browsers expect
        protocol_version = "HTTP/1.1"
        # head and body go out in two writes: without this the client's
        # delayed ACK would hold the body for 40 ms
        disable_nagle_algorithm = True

        def handle(self):
            try:
                super().handle()
            except ConnectionError:
                pass  # the client left (timed out on a paused server): nobody to answer

        def log_message(self, fmt, *a):
            pass  # one line per request would drown the events that matter

        def answer(self, status, obj):
            data = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def json_body(self):
            length = self.headers.get("Content-Length")
            if length is None or not length.isdigit():
                # a body we can't delimit leaves the connection unusable
                self.close_connection = True
                raise Refusal(411, "length_required")
            if int(length) > MAX_BODY:
                self.close_connection = True
                raise Refusal(413, "too_large")
            raw = self.rfile.read(int(length))
            try:
                body = json.loads(raw)
            except (ValueError, UnicodeDecodeError):
                raise Refusal(400, "bad_request", "the body is not JSON")
            if not isinstance(body, dict):
                raise Refusal(400, "bad_request", "the body is not a JSON object")
            return body

        def route(self, method):
            m = ITEM_PATH.match(self.path)
            if m and method == "GET":
                return read_item(r, int(m.group(1)))
            if self.path == "/items" and method == "POST":
                return create_item(r, self.json_body())
            if self.path == "/buy" and method == "POST":
                return buy(r, args, *buy_request(self.json_body()))
            if m or self.path in ("/items", "/buy"):
                raise Refusal(405, "method_not_allowed")
            raise Refusal(404, "not_found", "no route %s" % self.path)

        def handle_method(self, method):
            try:
                status, obj = self.route(method)
            except Refusal as e:
                status, obj = e.status, {"error": e.error}
                if e.detail:
                    obj["detail"] = e.detail
            except redis.RedisError as e:
                # a failed read, or a write that did not happen: fenced_lock's
                # one write is a script whose failure it answers itself
                # (outcome_unknown); naive_lock's may leave half a sale
                log("warn", "redis_error", error=type(e).__name__)
                status, obj = 503, {"error": "redis_unavailable"}
            self.answer(status, obj)

        def do_GET(self):
            self.handle_method("GET")

        def do_POST(self):
            self.handle_method("POST")

        def do_PUT(self):
            self.handle_method("PUT")

        def do_DELETE(self):
            self.handle_method("DELETE")

    return Handler


def serve(prog, args, buy):
    """Serves until SIGTERM or SIGINT, then stops taking requests and exits 0."""
    r = connect(args)
    try:
        server = ThreadingHTTPServer((args.host, args.port), make_handler(r, args, buy))
    except OSError as e:  # the port taken, an address not ours: say which, not a traceback
        log("error", "cannot_listen", prog=prog, host=args.host, port=args.port,
            error=e.strerror or str(e))
        sys.exit(1)
    server.daemon_threads = True
    stop = threading.Event()
    # the handler only sets a flag; the main thread does the stopping
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    threading.Thread(target=server.serve_forever, daemon=True).start()
    log("info", "listening", prog=prog, url="http://%s:%d" % server.server_address[:2],
        lease_ms=args.lease_ms, work_ms=args.work_ms, wait_ms=args.wait_ms)
    while not stop.wait(1):
        pass
    server.shutdown()
    server.server_close()
    log("info", "stopped", prog=prog)
