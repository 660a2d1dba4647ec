"""A non-Node upstream for the gateway tests: python3 http.server + sqlite3.

It records every effect in its own database, exactly once per (Idem-Scope, Idempotency-Key):
its writes are fenced with the gateway's Idem-Fencing-Token (a write whose token is lower than
the highest seen for the key is refused with 409, so an attempt the gateway gave up on can never
apply after a takeover's attempt began), and an attempt that finds the key's effect already
applied answers with it instead of applying it again.

Usage: python3 upstream.py DB_PATH   (prints "listening PORT" once it accepts connections)

POST /v1/charges?mode=...   the effect; mode (or an X-Mode header, not part of the gateway's fingerprint): ok (default), hold (wait for POST /control/release),
                            fail500, fail503, reset (close the socket without answering),
                            cookie (answer with Set-Cookie), big (a 64 KiB body);
                            an X-Delay-Ms header makes the effect wait that long first (the chaos drill's work time)
GET  /control/effects       JSON: every effect row, the headers of every request seen, and how many are in flight
POST /control/release       wakes every held request (and lets later ones through)
POST /control/arm           makes mode=hold hold again
"""

import json
import socket
import sqlite3
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

DB = sys.argv[1]
released = threading.Event()
lock = threading.Lock()
inflight = [0]  # requests to /v1 not answered yet (a held one included)


def db():
    conn = sqlite3.connect(DB, timeout=30, isolation_level=None)
    return conn


def setup():
    conn = db()
    conn.execute("CREATE TABLE IF NOT EXISTS fences (scope TEXT, key TEXT, token INTEGER, PRIMARY KEY (scope, key))")
    conn.execute("CREATE TABLE IF NOT EXISTS effects (id INTEGER PRIMARY KEY, scope TEXT, key TEXT, token INTEGER, attempt INTEGER, body TEXT)")
    conn.execute("CREATE TABLE IF NOT EXISTS seen (id INTEGER PRIMARY KEY, path TEXT, headers TEXT)")
    conn.close()


def fence(conn, scope, key, token):
    """True when token is the highest seen for (scope, key) (or ties it); records it."""
    row = conn.execute("SELECT token FROM fences WHERE scope = ? AND key = ?", (scope, key)).fetchone()
    if row is not None and token < row[0]:
        return False
    conn.execute("INSERT INTO fences (scope, key, token) VALUES (?, ?, ?) ON CONFLICT (scope, key) DO UPDATE SET token = excluded.token", (scope, key, token))
    return True


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self, status, payload, extra=()):
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for name, value in extra:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path.startswith("/control/effects"):
            conn = db()
            effects = [dict(zip(("id", "scope", "key", "token", "attempt", "body"), r)) for r in conn.execute("SELECT id, scope, key, token, attempt, body FROM effects ORDER BY id")]
            seen = [{"path": p, "headers": json.loads(h)} for p, h in conn.execute("SELECT path, headers FROM seen ORDER BY id")]
            conn.close()
            return self.answer(200, {"effects": effects, "seen": seen, "inflight": inflight[0]})
        self.answer(200, {"get": self.path})

    def do_POST(self):
        with lock:
            inflight[0] += 1
        try:
            self.post()
        finally:
            with lock:
                inflight[0] -= 1

    def post(self):
        url = urlparse(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode() if length else ""
        if url.path == "/control/release":
            released.set()
            return self.answer(200, {"released": True})
        if url.path == "/control/arm":
            released.clear()
            return self.answer(200, {"armed": True})
        headers = {k.lower(): v for k, v in self.headers.items()}
        conn = db()
        conn.execute("INSERT INTO seen (path, headers) VALUES (?, ?)", (self.path, json.dumps(headers)))
        mode = headers.get("x-mode") or parse_qs(url.query).get("mode", ["ok"])[0]
        scope = headers.get("idem-scope", "")
        key = headers.get("idempotency-key", "")
        token = int(headers.get("idem-fencing-token", "0"))
        attempt = int(headers.get("idem-attempt", "0"))
        if key and not fence(conn, scope, key, token):
            conn.close()
            return self.answer(409, {"error": "stale fencing token", "token": token})
        if mode == "hold":
            released.wait()
        delay = float(headers.get("x-delay-ms", "0") or 0)
        if delay > 0:
            time.sleep(delay / 1000)
        if mode == "reset":
            # RST instead of FIN: SO_LINGER with a zero timeout, then close.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
            self.close_connection = True
            conn.close()
            return
        if mode == "fail500":
            conn.close()
            return self.answer(500, {"error": "upstream failed"})
        if mode == "fail503":
            conn.close()
            return self.answer(503, {"error": "try later"}, [("Retry-After", "2")])
        with lock:
            # The write itself is fenced: a token overtaken while this request was held applies nothing.
            conn.execute("BEGIN IMMEDIATE")
            if key and not fence(conn, scope, key, token):
                conn.execute("ROLLBACK")
                conn.close()
                return self.answer(409, {"error": "stale fencing token", "token": token})
            # One effect per (scope, key): an earlier attempt that finished before this one arrived
            # already applied it, and this attempt answers with it instead of applying it again.
            row = conn.execute("SELECT id FROM effects WHERE scope = ? AND key = ?", (scope, key)).fetchone() if key else None
            if row is not None:
                effect_id = row[0]
            else:
                cur = conn.execute("INSERT INTO effects (scope, key, token, attempt, body) VALUES (?, ?, ?, ?, ?)", (scope, key, token, attempt, body))
                effect_id = cur.lastrowid
            conn.execute("COMMIT")
        conn.close()
        payload = {"id": f"ch_{effect_id}", "key": key, "token": token, "attempt": attempt, "body": body}
        extra = [("Set-Cookie", "session=secret; HttpOnly")] if mode == "cookie" else []
        if mode == "big":
            payload["padding"] = "x" * 65536
        self.answer(201, payload, extra)


setup()
server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
print(f"listening {server.server_address[1]}", flush=True)
server.serve_forever()
