"""A receiver for the job service's URL hook (tests/cli_serve.sh): appends each POSTed event to a
JSON-lines file, and answers 503 to the first delivery attempt of the events of the jobs named
on the command line, so the daemon's retry is exercised. It writes its port to a file once it
listens. Usage: hook_receiver.py OUT.jsonl PORT_FILE [JOB_ID...]"""
import http.server
import json
import os
import sys

out_path, port_path = sys.argv[1], sys.argv[2]
flaky = {int(j) for j in sys.argv[3:]}


class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        event = json.loads(body)
        header_id = self.headers.get("X-Anvil-Event-Id")
        refuse = event["job_id"] in flaky and event["delivery_attempt"] == 1
        if not refuse:
            with open(out_path, "a") as f:
                f.write(json.dumps({"header_id": header_id, **event}) + "\n")
        self.send_response(503 if refuse else 204)
        self.end_headers()

    def log_message(self, *args):
        pass


server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
with open(port_path + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
os.rename(port_path + ".tmp", port_path)
server.serve_forever()
