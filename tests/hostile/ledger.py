#!/usr/bin/env python3
"""A hostile HTTP server standing in for the scabbard ledger (tests/hostile).

It speaks enough of scabbard's REST API for a worker to submit and follow
batches, and answers with what a ledger, a proxy in front of it or a
broken deployment may send: non-ASCII and huge bodies, deeply nested and
malformed JSON, an HTML "400 Bad Request" from a proxy, error bodies that
echo the request's Authorization header, a 503 with a Japanese HTML page.

The mode is switched at run time (POST /_hostile/mode with the mode name as
the body) so one worker meets every mode in turn. In every mode but
invalid-jp the hostility is bounded: the first FAILS requests per service
(POST) or per batch id (status) are hostile, then the server behaves, so
the test can check both what the worker recorded while it was attacked and
that every batch still ends final.

    ledger.py --port-file FILE [--fails N]

Stops on SIGTERM. Standard library only.
"""
import argparse
import json
import os
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

JP = "取引が無効です"  # "the transaction is invalid"
MODES = ("normal", "invalid-jp", "html503-jp", "proxy400", "echo-token", "bad-status",
         "huge-post")


class State:
    def __init__(self, fails):
        self.lock = threading.Lock()
        self.mode = "normal"
        self.fails = fails
        self.counts = {}  # (mode, key) -> requests seen

    def hostile(self, key):
        """True while `key` (a service or a batch id) has met fewer than `fails` hostile answers."""
        with self.lock:
            n = self.counts.get((self.mode, key), 0)
            self.counts[(self.mode, key)] = n + 1
            return n < self.fails


def statuses(ids, status_type, message):
    return json.dumps([{"id": i, "status": {"statusType": status_type, "message": message},
                        "timestamp": 1795272805.5} for i in ids])


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "hostile-ledger"

    def log_message(self, fmt, *args):  # quiet
        pass

    def send(self, code, body, ctype="application/json"):
        data = body.encode("utf-8") if isinstance(body, str) else body
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        st = self.server.state
        path = urlparse(self.path).path
        if path == "/_hostile/mode":
            mode = body.decode().strip()
            if mode not in MODES:
                return self.send(400, '{"message": "unknown mode"}')
            with st.lock:
                st.mode = mode
            return self.send(200, json.dumps({"mode": mode}))
        parts = path.strip("/").split("/")
        if len(parts) != 4 or parts[0] != "scabbard" or parts[3] != "batches":
            return self.send(404, '{"message": "not found"}')
        service = parts[1] + "::" + parts[2]
        mode = st.mode
        link = json.dumps({"link": "/scabbard/%s/%s/batch_statuses?ids=x" % (parts[1], parts[2])})
        if mode == "html503-jp" and st.hostile(service):
            page = "<html><head><title>503</title></head><body><h1>%s</h1><p>%s</p></body></html>" % (
                "サービスは一時的に利用できません", "ただいまメンテナンス中です。" * 300)
            return self.send(503, page, "text/html; charset=utf-8")
        if mode == "proxy400" and st.hostile(service):
            return self.send(400, "<html><head><title>400 Bad Request</title></head><body>"
                             "<center><h1>400 Bad Request</h1></center><hr><center>nginx</center>"
                             "</body></html>", "text/html")
        if mode == "echo-token" and st.hostile(service):
            echoed = "".join("%s: %s\r\n" % (k, v) for k, v in self.headers.items())
            return self.send(502, "<pre>upstream error; your request was:\r\n%s</pre>" % echoed,
                             "text/html")
        if mode == "huge-post" and st.hostile(service):
            return self.send(202, '{"link": "' + "x" * (4 << 20) + '"}')
        return self.send(202, link)

    def do_GET(self):
        st = self.server.state
        url = urlparse(self.path)
        if not url.path.endswith("/batch_statuses"):
            return self.send(404, '{"message": "not found"}')
        ids = [i for i in parse_qs(url.query).get("ids", [""])[0].split(",") if i]
        mode = st.mode
        if mode == "invalid-jp":
            return self.send(200, statuses(ids, "Invalid",
                                           [{"transaction_id": "t1", "error_message": JP * 40,
                                             "error_data": []}]))
        if mode == "echo-token" and ids and st.hostile("status:" + ids[0]):
            auth = self.headers.get("Authorization", "")
            return self.send(200, statuses(ids, "Invalid",
                                           [{"error_message": "refused (" + auth + ")"}]))
        if mode == "bad-status" and ids:
            n = st.counts.get((mode, "status:" + ids[0]), 0)
            if st.hostile("status:" + ids[0]):
                kind = n % 3
                if kind == 0:
                    return self.send(200, '[{"id": "%s", "status": {"statusType": "Comm' % ids[0])
                if kind == 1:
                    return self.send(200, "[" * 100000 + "]" * 100000)
                return self.send(200, "[" + ",".join(['{"id": "%s"}' % ids[0]] * 20000) + "]")
        return self.send(200, statuses(ids, "Committed", []))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--fails", type=int, default=2)
    args = ap.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.state = State(args.fails)
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d\n" % server.server_address[1])
    os.rename(tmp, args.port_file)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
