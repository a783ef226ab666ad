#!/usr/bin/env python3
"""A fault-injecting HTTP proxy in front of an S3 server: anvil chaos's S3
faults (--s3-proxy) and the S3 tests.

    s3_faultproxy.py UPSTREAM_URL PORT_FILE [PORT]

Listens on PORT of 127.0.0.1 (default: a free one), writes the port to
PORT_FILE, and forwards every request to UPSTREAM_URL unchanged, Host header
included, so that SigV4 signatures made for the proxy's address still check
at the server: point the jobs' endpoint (AWS_ENDPOINT_URL, the daemon's
--s3-config endpoint_url) at http://127.0.0.1:PORT. It counts requests by
type (GET, HEAD, PUT, PART, LIST, POST, DELETE), the peak number being
served at once, the bytes of bodies it sent, the Range header of each GET
and the path of each PUT, in the order they completed. Paths under /__ctl/
steer it:

    /__ctl/fault?kind=503&n=N[&type=T]   answer the next N requests (of type T)
                                         503 SlowDown, without forwarding them
                                         (&key=S: only those whose path has S)
    /__ctl/fault?kind=reset&n=N[&type=T] cut the next N transfers after half
                                         their bytes with a TCP RST: a
                                         successful GET's body as it is sent,
                                         a PUT's or PART's as it is received
    /__ctl/fault?kind=slow&n=N&ms=M      hold the next N requests M ms first
    /__ctl/cancel?id=I                   drop fault I, whatever is left of it
    /__ctl/stats                         the counters, as JSON
    /__ctl/reset                         zero the counters, drop the faults

A fault answers {"id": I}. The stats have "struck" (the 503s sent and the
transfers reset, by kind) and "faults": each one's id, kind, n (still to
strike) and struck (by request type), cancelled ones included.
"""
import http.client
import http.server
import json
import os
import socket
import struct
import sys
import threading
import time
import urllib.parse

upstream = urllib.parse.urlsplit(sys.argv[1])
lock = threading.Lock()
state = {}
next_id = 0


def clear():
    state.update(counts={}, inflight=0, peak=0, faults=[], bytes_down=0, ranges=[], puts=[], struck={}, done=[])


clear()

SLOWDOWN = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
            b'<Message>Please reduce your request rate.</Message></Error>')


def kind_of(method, query):
    q = urllib.parse.parse_qs(query, keep_blank_values=True)
    if method == "GET" and "list-type" in q:
        return "LIST"
    if method == "PUT" and "partNumber" in q:
        return "PART"
    return method


def take_fault(kind, rtype, path):
    """The first pending fault of this kind that applies to rtype and path, used up by one."""
    with lock:
        for f in state["faults"]:
            if f["kind"] == kind and f["n"] > 0 and f.get("type") in (None, rtype) and f.get("key", "") in path:
                f["n"] -= 1
                f["struck"][rtype] = f["struck"].get(rtype, 0) + 1
                state["struck"][kind] = state["struck"].get(kind, 0) + 1
                return f
    return None


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, code, body, ctype="application/json"):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def control(self, path, query):
        global next_id
        q = {k: v[0] for k, v in urllib.parse.parse_qs(query).items()}
        with lock:
            answer = None
            if path == "/__ctl/reset":
                clear()
            elif path == "/__ctl/fault":
                next_id += 1
                f = {"id": next_id, "kind": q["kind"], "n": int(q.get("n", "1")), "ms": int(q.get("ms", "0")),
                     "struck": {}}
                for k in ("type", "key"):
                    if k in q:
                        f[k] = q[k]
                state["faults"].append(f)
                answer = {"id": f["id"]}
            elif path == "/__ctl/cancel":
                for f in state["faults"]:
                    if str(f["id"]) == q.get("id"):
                        state["faults"].remove(f)
                        state["done"].append(f)
                        answer = f
                        break
                else:
                    return self.reply(404, b'{"error": "no such fault"}')
            if answer is None:
                answer = {k: state[k] for k in ("counts", "peak", "bytes_down", "ranges", "puts", "struck")}
                answer["faults"] = state["done"] + state["faults"]
            body = json.dumps(answer).encode()
        self.reply(200, body)

    def reset_upload(self, rtype, path, length):
        """Takes in half of an upload's body, then resets the connection; whether a fault did."""
        if rtype not in ("PUT", "PART") or length < 2 or not take_fault("reset", rtype, path):
            return False
        self.rfile.read(length // 2)
        self.abort()
        return True

    def abort(self):
        # SO_LINGER 0: the close sends an RST, as a reset connection does.
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True

    def handle_any(self):
        path, _, query = self.path.partition("?")
        if path.startswith("/__ctl/"):
            return self.control(path, query)
        length = int(self.headers.get("Content-Length") or 0)
        rtype = kind_of(self.command, query)
        if self.reset_upload(rtype, urllib.parse.unquote(path), length):
            with lock:
                state["counts"][rtype] = state["counts"].get(rtype, 0) + 1
            return
        body = self.rfile.read(length) if length else None
        with lock:
            state["counts"][rtype] = state["counts"].get(rtype, 0) + 1
            state["inflight"] += 1
            state["peak"] = max(state["peak"], state["inflight"])
            if rtype == "GET":
                state["ranges"].append(self.headers.get("Range", ""))
        try:
            self.forward(rtype, body)
        finally:
            with lock:
                state["inflight"] -= 1
                if rtype == "PUT":
                    state["puts"].append(urllib.parse.unquote(path))

    def forward(self, rtype, body):
        path = urllib.parse.unquote(self.path.partition("?")[0])
        slow = take_fault("slow", rtype, path)
        if slow:
            time.sleep(slow["ms"] / 1000)
        if take_fault("503", rtype, path):
            return self.reply(503, SLOWDOWN, "application/xml")
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("expect", "connection")}
        conn = http.client.HTTPConnection(upstream.hostname, upstream.port, timeout=60)
        try:
            conn.request(self.command, self.path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        finally:
            conn.close()
        self.send_response(resp.status, resp.reason)
        for k, v in resp.getheaders():
            if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                self.send_header(k, v)
        length = int(resp.getheader("Content-Length") or 0) if self.command == "HEAD" else len(data)
        self.send_header("Content-Length", str(length))
        self.end_headers()
        if self.command == "HEAD":
            return
        if rtype == "GET" and resp.status // 100 == 2 and len(data) > 1 and take_fault("reset", rtype, path):
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            with lock:
                state["bytes_down"] += len(data) // 2
            self.abort()
            return
        self.wfile.write(data)
        with lock:
            state["bytes_down"] += len(data)

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = handle_any


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # A client that went away mid-request (killed, or given up) is its own business, not a fault here.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


srv = Server(("127.0.0.1", int(sys.argv[3]) if len(sys.argv) > 3 else 0), Handler)
with open(sys.argv[2] + ".tmp", "w") as f:
    f.write(str(srv.server_address[1]))
# Renamed into place, so the test never reads a half-written port.
os.rename(sys.argv[2] + ".tmp", sys.argv[2])
srv.serve_forever()
