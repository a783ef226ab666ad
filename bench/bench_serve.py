"""The load generator of bench_serve.sh: CLIENTS threads submit JOBS jobs between them through
POST /v1/jobs while one thread polls GET /v1/jobs/ID (a random submitted job) POLLS_PER_S times a
second, until every job has ended. Then it checks that nothing was lost or duplicated (every
submission answered 201 with its own ID, every ID listed once, every job Completed exactly once,
its name its own) and prints the API's latency percentiles per kind of request.
Usage: bench_serve.py PORT RUNS_DIR JOBS CLIENTS POLLS_PER_S"""
import http.client
import json
import os
import random
import statistics
import sys
import threading
import time

port, runs, jobs, clients, polls_per_s = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
headers = {"Authorization": "Bearer " + os.environ["ANVIL_TOKEN"], "Content-Type": "application/json"}
lat = {"submit": [], "poll": [], "list": []}
lock = threading.Lock()
submitted = {}  # name -> id
errors = []


def call(conn, method, path, body=None):
    t0 = time.perf_counter()
    conn.request(method, path, body=body, headers=headers)
    r = conn.getresponse()
    data = r.read()
    return r.status, data, time.perf_counter() - t0


def submitter(k):
    conn = http.client.HTTPConnection("127.0.0.1", int(port), timeout=60)
    for i in range(k, jobs, clients):
        name = f"load-{i:04d}"
        spec = {"name": name, "command": ["train", "--synthetic", "--preset", "tiny", "--steps", "5", "--no-progress",
                                          "--sample-every", "-1", "--threads", "1"],
                "output": f"{runs}/{name}", "max_retries": 0}
        status, data, dt = call(conn, "POST", "/v1/jobs", json.dumps(spec))
        with lock:
            lat["submit"].append(dt)
            if status != 201:
                errors.append(f"{name}: {status} {data[:200]!r}")
            else:
                submitted[name] = json.loads(data)["id"]


def poller(stop):
    conn = http.client.HTTPConnection("127.0.0.1", int(port), timeout=60)
    period, next_at = 1.0 / polls_per_s, time.perf_counter()
    while not stop.is_set():
        with lock:
            ids = list(submitted.values())
        if ids:
            status, _, dt = call(conn, "GET", f"/v1/jobs/{random.choice(ids)}")
            with lock:
                lat["poll"].append(dt)
                if status != 200:
                    errors.append(f"poll: {status}")
        next_at += period
        time.sleep(max(0.0, next_at - time.perf_counter()))


t0 = time.perf_counter()
stop = threading.Event()
poll_thread = threading.Thread(target=poller, args=(stop,))
poll_thread.start()
threads = [threading.Thread(target=submitter, args=(k,)) for k in range(clients)]
for t in threads:
    t.start()
for t in threads:
    t.join()
t_submitted = time.perf_counter() - t0
conn = http.client.HTTPConnection("127.0.0.1", int(port), timeout=60)
while True:
    status, data, dt = call(conn, "GET", "/v1/jobs")
    lat["list"].append(dt)
    listed = json.loads(data)["jobs"]
    if all(j["status"] in ("Completed", "Failed", "Stopped") for j in listed) and len(listed) >= len(submitted):
        break
    time.sleep(0.5)
stop.set()
poll_thread.join()
elapsed = time.perf_counter() - t0

ids = [j["id"] for j in listed]
by_id = {j["id"]: j for j in listed}
checks = {
    "every submission accepted": not errors and len(submitted) == jobs,
    "every ID distinct": len(set(submitted.values())) == jobs,
    "every job listed once": sorted(ids) == sorted(submitted.values()) and len(ids) == len(set(ids)),
    "each job its own name": all(by_id[i]["name"] == n for n, i in submitted.items()),
    "every job Completed, one attempt": all(j["status"] == "Completed" and j["attempt"] == 1 for j in listed),
}


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))] * 1e3


print(f"{jobs} jobs from {clients} clients, polls at {polls_per_s:g}/s: submitted in {t_submitted:.1f} s, "
      f"all ended after {elapsed:.1f} s ({jobs / elapsed:.2f} jobs/s at 2 running)")
for kind, v in lat.items():
    if v:
        print(f"  {kind:6s} n={len(v):5d}  p50 {pct(v, 50):7.2f} ms  p99 {pct(v, 99):7.2f} ms  max {max(v) * 1e3:7.2f} ms  "
              f"mean {statistics.mean(v) * 1e3:6.2f} ms")
for name, good in checks.items():
    print(("ok: " if good else "FAIL: ") + name)
for e in errors[:5]:
    print("  error: " + e)
sys.exit(0 if all(checks.values()) else 1)
