#!/usr/bin/env python3
"""Replays the S3 request schedule of anvil's data loader and checkpoint uploader
for a job of HOSTS x RANKS, from anvil's defaults, and prints the peak requests
per second on each prefix (AWS: at least 5,500 GET/HEAD and 3,500
PUT/POST/DELETE per second per partitioned prefix).

Data: every rank runs the loader's schedule (src/data/loader.c with the reader
of src/s3/s3.c): it opens its loader `rank * 2 / start_rate` s after the first
(the stagger), listing the shards (one LIST) and opening shard 0 (its header:
block 0; no HEAD, the size comes from the listing). Training then starts on all
ranks together, and rank r reads its first window `rank * (2 + ahead) /
start_rate` s later (the second stagger); from then on one window of B*T+1
tokens per step, one step ahead (the prefetch thread), steps synchronous. A
read fetches the blocks of `range` bytes it needs that are not held yet; the
second read of an object, and a read that continues where the last one ended,
also queue the next `ahead` blocks of the object (the first read, a shard's
header, and a jump queue none). All shards live under one prefix, the worst
case.

Checkpoint: each uploader sends its files one request at a time (anvil_s3_put_file:
one PUT up to the part size, else create + parts + complete), each request
taking latency + bytes / bandwidth, each file under the prefix two hex digits
of CRC-32C(name) mod prefixes; the index (one PUT) comes last, on its own
prefix. `--uploaders job` is one uploader for the whole job (rank 0, today's
code), `host` one per host (the issue's hierarchical design).

Usage: s3_schedule.py [--hosts 1000] [--ranks 8] [--layout contiguous|strided]
       [--start-rate 500 (0: all at once)] [--seconds 120] ... (--help)"""
import argparse
import collections
import math


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


class Reader:
    """The block logic of anvil_s3_reader for one object: which reads issue GETs."""

    def __init__(self, size, rng, ahead):
        self.size, self.range, self.ahead = size, rng, ahead
        self.nblocks = (size + rng - 1) // rng
        self.held, self.last, self.reads = set(), -1, 0

    def read(self, off, length):
        first, last = off // self.range, (off + length - 1) // self.range
        cont = self.reads == 1 or first in (self.last, self.last + 1)
        ahead = self.ahead if cont and self.reads > 0 else 0
        self.reads += 1
        self.last = last
        new = [b for b in range(first, min(last + ahead, self.nblocks - 1) + 1) if b not in self.held]
        self.held = {b for b in self.held if b >= first} | set(new)
        return len(new)


def data_schedule(a, per_s):
    world = a.hosts * a.ranks
    bt = a.B * a.T
    tb = 2  # bytes per token (uint16 shards, the GPT-2 vocabulary)
    hdr = 1024
    shard_tokens, nshards = a.shard_tokens, math.ceil(a.total_tokens / a.shard_tokens)
    total = shard_tokens * nshards
    step_s = bt / a.tokens_per_s
    rate = a.start_rate if a.start_rate > 0 else math.inf
    opened = [r * 2 / rate for r in range(world)]
    t1 = opened[-1] + 1.0  # model init, then the first step on every rank
    start = [t1 + r * (2 + a.ahead) / rate for r in range(world)]
    t0 = max(start) + step_s
    nsteps = int((a.seconds - t0) / step_s) if a.seconds > t0 else 0
    stretch = (total - 1) // world
    steps_per_epoch = stretch // bt if a.layout == "contiguous" else (shard_tokens - 1) // (world * bt)

    def window(rank, k):
        """(shard, token offset, tokens) pieces of rank's window at step k."""
        if a.layout == "contiguous":
            e, j = divmod(k, steps_per_epoch)
            s = (rank + e) % world * stretch + j * bt
            out, need = [], bt + 1
            while need:
                f, o = divmod(s, shard_tokens)
                n = min(need, shard_tokens - o)
                out.append((f % nshards, o, n))
                s, need = s + n, need - n
            return out
        f, j = divmod(k, steps_per_epoch)  # strided: steps_per_epoch counts one shard's steps
        return [(f % nshards, j * world * bt + rank * bt, bt + 1)]

    for r in range(world):
        t = start[r]
        per_s["GET"][int(opened[r])] += 1  # the listing
        cur, rd = 0, Reader(shard_tokens * tb + hdr, a.range, a.ahead)
        per_s["GET"][int(opened[r])] += rd.read(0, hdr)
        for k in range(nsteps + 1):
            # The first window is read at the rank's start (the first next); then one step ahead.
            tk = t if k == 0 else t0 + (k - 1) * step_s
            for f, o, n in window(r, k):
                # Within the block the last read ended in: nothing to fetch or queue (a fast path).
                if f == cur and rd.reads >= 2 and (hdr + o * tb) // a.range == rd.last == (hdr + (o + n) * tb - 1) // a.range:
                    continue
                if f != cur:
                    cur, rd = f, Reader(shard_tokens * tb + hdr, a.range, a.ahead)
                    per_s["GET"][int(tk)] += rd.read(0, hdr)
                per_s["GET"][int(tk)] += rd.read(hdr + o * tb, n * tb)
    return nsteps, step_s


def ckpt_schedule(a, per_prefix):
    world = a.hosts * a.ranks
    files_total = world  # ZeRO-3: one shard file per rank
    per_file = a.ckpt_bytes / files_total
    uploaders = a.hosts if a.uploaders == "host" else 1
    files_each = files_total // uploaders
    end = 0.0
    for u in range(uploaders):
        t = 0.0
        for i in range(files_each):
            g = u * files_each + i
            name = f"shard_{g}_of_{files_total}.safetensors"
            hh = f"{crc32c(name.encode()) % a.prefixes:02x}"
            nparts = 1 if per_file <= a.part else math.ceil(per_file / a.part)
            reqs = [per_file] if nparts == 1 else [0] + [min(a.part, per_file - p * a.part) for p in range(nparts)] + [0]
            for b in reqs:
                per_prefix[hh][int(t)] += 1
                t += a.latency + b / a.bandwidth
        end = max(end, t)
    per_prefix["index"][int(end)] += 1
    return end


def peak(counts):
    return max(counts.values()) if counts else 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--hosts", type=int, default=1000)
    p.add_argument("--ranks", type=int, default=8, help="ranks per host")
    p.add_argument("--layout", default="contiguous", choices=["contiguous", "strided"])
    p.add_argument("--start-rate", type=float, default=4000,
                   help="requests per second of the ranks' staggered start (ANVIL_LOADER_S3_START_RATE; 0: no stagger)")
    p.add_argument("--range", type=int, default=16 << 20, help="bytes per ranged GET")
    p.add_argument("--ahead", type=int, default=1, help="blocks read ahead (ANVIL_S3_READ_AHEAD)")
    p.add_argument("--B", type=int, default=8)
    p.add_argument("--T", type=int, default=1024)
    p.add_argument("--tokens-per-s", type=float, default=40000, help="per rank (GPT-2 1.5B on an H100 at 40%% MFU)")
    p.add_argument("--shard-tokens", type=int, default=100_000_000, help="anvil prep's default")
    p.add_argument("--total-tokens", type=float, default=100e9)
    p.add_argument("--seconds", type=float, default=120, help="how long to replay the data schedule")
    p.add_argument("--uploaders", default="host", choices=["job", "host"],
                   help="host: one uploader per host (anvil since the per-host uploader); job: rank 0 alone")
    p.add_argument("--prefixes", type=int, default=16, help="--ckpt-prefixes")
    p.add_argument("--part", type=float, default=16 << 20, help="multipart part size")
    p.add_argument("--ckpt-bytes", type=float, default=18e9, help="ZeRO-3 state of GPT-2 1.5B: fp32 weights, m, v")
    p.add_argument("--latency", type=float, default=0.03, help="seconds per request besides the transfer")
    p.add_argument("--bandwidth", type=float, default=1e9, help="bytes/s of one uploader")
    a = p.parse_args()

    per_s = {"GET": collections.Counter()}
    nsteps, step_s = data_schedule(a, per_s)
    gets = per_s["GET"]
    world = a.hosts * a.ranks
    steady = [gets[s] for s in gets if s >= a.seconds / 2]
    print(f"data: {a.hosts} hosts x {a.ranks} ranks, {a.layout}, start rate {a.start_rate:g} requests/s, "
          f"range {a.range >> 20} MiB, {a.ahead} block(s) read ahead, {step_s * 1000:.0f} ms/step, {nsteps} steps replayed")
    print(f"  GETs (LIST included) on the data prefix: peak {peak(gets)}/s, steady (second half) "
          f"max {max(steady) if steady else 0}/s, {sum(gets.values())} in {a.seconds:g} s; limit 5500/s")
    per_prefix = collections.defaultdict(collections.Counter)
    end = ckpt_schedule(a, per_prefix)
    pk = max(peak(c) for c in per_prefix.values())
    total = sum(sum(c.values()) for c in per_prefix.values())
    print(f"checkpoint: {a.ckpt_bytes / 1e9:g} GB in {world} shard files, uploaders per {a.uploaders}, "
          f"{a.prefixes} prefixes, parts of {a.part / 2**20:g} MiB")
    print(f"  PUT/POST requests: peak {pk}/s on one prefix, {total} in all, upload done after {end:.1f} s; "
          f"limit 3500/s")


if __name__ == "__main__":
    main()
