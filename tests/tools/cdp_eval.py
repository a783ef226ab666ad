"""Opens URL in a running headless Chromium (its DevTools port) and prints what
the JavaScript EXPR, an expression that evaluates to a promise of a string,
resolved to: what `--dump-dom` cannot give, such as the layout's widths.

The DevTools protocol runs over a WebSocket; this speaks the little of RFC 6455
it needs (a client's masked text frames, the server's unmasked ones). Standard
library only.

usage: cdp_eval.py PORT URL EXPR (once the page has loaded)"""
import base64
import http.client
import json
import os
import socket
import struct
import sys
import time
import urllib.parse

port, url, expr = int(sys.argv[1]), sys.argv[2], sys.argv[3]

conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
conn.request("PUT", "/json/new?" + urllib.parse.quote(url, safe=""))
target = json.loads(conn.getresponse().read())
ws_path = urllib.parse.urlparse(target["webSocketDebuggerUrl"]).path

sock = socket.create_connection(("127.0.0.1", port), timeout=60)
key = base64.b64encode(os.urandom(16)).decode()
sock.sendall((f"GET {ws_path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
              f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
head = b""
while b"\r\n\r\n" not in head:
    chunk = sock.recv(1)
    if not chunk:
        sys.exit("cdp_eval: the DevTools connection closed during the handshake")
    head += chunk
if b" 101 " not in head.split(b"\r\n", 1)[0]:
    sys.exit("cdp_eval: no WebSocket upgrade: " + head.decode(errors="replace"))


def recv_exact(n):
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            sys.exit("cdp_eval: the DevTools connection closed")
        out += chunk
    return out


def send(obj):
    data = json.dumps(obj).encode()
    mask = os.urandom(4)
    n = len(data)
    header = bytes([0x81]) + (bytes([0x80 | n]) if n < 126 else
                              bytes([0x80 | 126]) + struct.pack(">H", n) if n < 65536 else
                              bytes([0x80 | 127]) + struct.pack(">Q", n))
    sock.sendall(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))


def recv():
    message = b""
    while True:
        b0, b1 = recv_exact(2)
        n = b1 & 0x7F
        if n == 126:
            n = struct.unpack(">H", recv_exact(2))[0]
        elif n == 127:
            n = struct.unpack(">Q", recv_exact(8))[0]
        payload = recv_exact(n)
        message += payload
        if b0 & 0x80:
            return json.loads(message)


def evaluate(expression, call_id):
    send({"id": call_id, "method": "Runtime.evaluate",
          "params": {"expression": expression, "awaitPromise": True, "returnByValue": True}})
    while True:
        reply = recv()
        if reply.get("id") == call_id:
            return reply


# The new tab starts on about:blank and navigates: an evaluation before the page has loaded runs in
# a context that the navigation destroys. Up to 30 s for the page, then EXPR.
for attempt in range(300):
    reply = evaluate('location.href !== "about:blank" && document.readyState === "complete" ? "yes" : "no"',
                     2 + attempt)
    if reply.get("result", {}).get("result", {}).get("value") == "yes":
        break
    time.sleep(0.1)
reply = evaluate(expr, 1)
result = reply.get("result", {})
if "exceptionDetails" in result or result.get("result", {}).get("type") != "string":
    sys.exit("cdp_eval: " + json.dumps(reply)[:2000])
print(result["result"]["value"])
