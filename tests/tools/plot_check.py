#!/usr/bin/env python3
"""The checks of tests/cli_plot.sh on `anvil plot`'s figures.

  plot_check.py gen DIR             writes runs alpha, beta and gamma under DIR
  plot_check.py big DIR N           writes run DIR/big of N train steps with one loss spike
  plot_check.py expect RUN...       prints the curves the runs' metrics.jsonl should draw (JSON)
  plot_check.py svg FILE EXPECTED [thinned]
                                    checks the SVG against them; thinned: for curves of more
                                    than four points per pixel column
  plot_check.py png FILE W H RUNS   checks the PNG: its size, and each run's legend swatch colour
  plot_check.py timeline SVG GOODPUT
                                    checks `anvil plot --goodput`'s SVG against the goodput JSON
  plot_check.py timeline-png PNG SVG
                                    checks its PNG: the SVG's size, each part's swatch colour

The SVG is read as the figure's structure: a panel starts at its title, then its frame (the plot
area), tick labels and one polyline per curve (class "curve runI WHAT"). Tick labels are values
at their pixel, so two of them give the axis' map; each point is mapped back to data and compared
with the record it stands for.
"""
import json
import math
import os
import struct
import sys
import xml.etree.ElementTree as ET
import zlib

PANELS = ["loss", "loss by tokens", "learning rate", "gradient norm", "tokens/s"]
PALETTE = [0x0072B2, 0xD55E00, 0x009E73, 0xCC79A7, 0xE69F00, 0x56B4E9, 0x000000, 0xF0E442]
WIDTH, LEGEND_PAD, LEGEND_ROW, LEGEND_RUNS, PANEL_H = 1200, 12, 28, 3, 320
PLOT_W = WIDTH // 2 - 80 - 20


def g9(v):
    """A number as the trainer prints it (src/obs/metrics.c)."""
    if v is None:
        return None
    return int(v) if v == math.floor(v) and abs(v) < 1e15 else float(f"{v:.9g}")


def expected_of(runs):
    """The curves each panel should hold: {title: {"runI what": [[x, y], ...]}}, from the runs' records
    (lists of dicts, in file order): null values left out, repeated steps replacing earlier ones."""
    panels = {t: {} for t in PANELS}
    logs = []
    for i, recs in enumerate(runs):
        series = {}
        tps_step = 0
        for r in recs:
            fields = {"train": ["loss", "lr", "grad_norm", "tokens_per_s"], "val": ["val_loss"]}.get(r["kind"])
            if r["kind"] == "log":
                fields = [k for k in r if k not in ("kind", "step")]
            if fields is None:
                continue
            if r["kind"] == "train" and r.get("ms") and r.get("tokens_per_s"):
                tps_step = round(r["ms"] * r["tokens_per_s"] / 1e3)
            for f in fields:
                key = ("log:" if r["kind"] == "log" else "") + f
                if key.startswith("log:") and f not in logs:
                    logs.append(f)
                s = series.setdefault(key, [])
                if r.get(f) is None:
                    continue
                while s and s[-1][0] >= r["step"]:
                    s.pop()
                s.append([r["step"], r[f]])
        for title, key, what in [("loss", "loss", "loss"), ("loss", "val_loss", "val_loss"),
                                 ("learning rate", "lr", "lr"), ("gradient norm", "grad_norm", "grad_norm"),
                                 ("tokens/s", "tokens_per_s", "tokens_per_s")]:
            if key in series:
                panels[title][f"run{i} {what}"] = series[key]
                if title == "loss" and tps_step:
                    panels["loss by tokens"][f"run{i} {what}"] = [[x * tps_step, y] for x, y in series[key]]
        for key, pts in series.items():
            if key.startswith("log:"):
                panels.setdefault(key[4:], {})[f"run{i} log"] = pts
    for t in list(panels):
        panels[t] = {k: v for k, v in panels[t].items() if v}
    return {"titles": PANELS + logs, "panels": panels}


def write_run(path, recs):
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "metrics.jsonl"), "w") as f:
        for r in recs:
            f.write(json.dumps({k: g9(v) if isinstance(v, float) else v for k, v in r.items()},
                               separators=(",", ":")) + "\n")


def train(step, loss, lr, norm, tok_per_step, ms):
    return {"kind": "train", "step": step, "loss": None if loss is None else g9(loss), "lr": g9(lr),
            "grad_norm": g9(norm), "ms": g9(ms), "tokens_per_s": g9(tok_per_step / (ms / 1e3)), "gflops": 1.5}


def gen(d):
    alpha = []
    for s in range(1, 41):
        # step 13's loss is NaN, which the trainer writes as null
        alpha.append(train(s, None if s == 13 else 5.5 - 0.06 * s + 0.03 * math.sin(s), 3e-4 * min(1, s / 8),
                           0.5 + 0.25 * (s % 5), 512, 90 + 7 * (s % 4)))
        if s % 20 == 0:
            alpha.append({"kind": "val", "step": s, "val_loss": g9(5.3 - 0.05 * s)})
        if s % 4 == 0:
            alpha.append({"kind": "log", "step": s, "acc": g9(0.1 + s / 80)})
        if s == 30:
            alpha.append({"kind": "ckpt", "step": s, "background": 1, "write_ms": 12.5})
    # beta ran to step 15, was resumed from its checkpoint at step 10 and wrote steps 11..25 again
    beta = [train(s, 7 - 0.1 * s, 1e-3, 2 + 0.05 * s, 1024, 200 + s) for s in range(1, 16)]
    beta += [train(s, 6.9 - 0.1 * s, 1e-3, 2.1 + 0.05 * s, 1024, 150 + s) for s in range(11, 26)]
    beta.append({"kind": "val", "step": 25, "val_loss": 4.75})
    gamma = []
    for s in range(1, 11):
        gamma.append(train(s, 4 + 0.01 * s, 6e-4 * (1 - s / 20), 1.0, 2048, 400))
        gamma.append({"kind": "log", "step": s, "acc": g9(0.5 + s / 100), "ppl": g9(60 - s)})
    for name, recs in {"alpha": alpha, "beta": beta, "gamma": gamma}.items():
        write_run(os.path.join(d, name), recs)


def big(d, n):
    """n train steps; step n // 3 has a loss spike of 9, which the per-column thinning must keep."""
    path = os.path.join(d, "big")
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "metrics.jsonl"), "w") as f:
        for s in range(1, n + 1):
            loss = 9.0 if s == n // 3 else 3 + 2 / math.sqrt(s)
            f.write('{"kind":"train","step":%d,"loss":%.9g,"lr":0.0003,"grad_norm":1,"ms":100,'
                    '"tokens_per_s":10240,"gflops":2}\n' % (s, loss))


def number(label):
    units = {"k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
    return float(label[:-1]) * units[label[-1]] if label[-1] in units else float(label)


def axis_map(ticks, what):
    """(pixel -> value) from the tick labels, after checking they all lie on one line."""
    if len(ticks) < 2:
        raise AssertionError(f"{what}: {len(ticks)} tick labels")
    (p0, v0), (p1, v1) = ticks[0], ticks[-1]
    scale = (v1 - v0) / (p1 - p0)
    for p, v in ticks:
        # tick positions are written to 0.01 px: 0.01 px of error each at both ends of the map
        if abs(v0 + (p - p0) * scale - v) > 0.02 * abs(scale) + 1e-12 * abs(v):
            raise AssertionError(f"{what}: tick {v} at {p} is off the axis")
    return lambda p: v0 + (p - p0) * scale, abs(scale)


def panels_of(root):
    panels = []
    for el in root:
        cls = el.get("class", "")
        if cls == "title":
            panels.append({"title": el.text, "curves": {}, "xt": [], "yt": [], "frame": None})
        elif not panels:
            continue
        elif cls == "frame":
            panels[-1]["frame"] = [float(el.get(k)) for k in ("x", "y", "width", "height")]
        elif cls == "xtick":
            panels[-1]["xt"].append((float(el.get("x")), number(el.text)))
        elif cls == "ytick":
            panels[-1]["yt"].append((float(el.get("y")), number(el.text)))
        elif cls.startswith("curve "):
            key = cls[len("curve "):]
            if key in panels[-1]["curves"]:
                raise AssertionError(f"panel {panels[-1]['title']}: curve {key} twice")
            pts = [tuple(map(float, p.split(","))) for p in el.get("points").split()]
            panels[-1]["curves"][key] = pts
    return panels


def check_svg(path, expected_path, exact=True):
    """exact: every record is a point; else (the big run) each curve is at most four points per column
    (first, last, least, greatest), the least and greatest of all among them."""
    exp = json.load(open(expected_path))
    root = ET.parse(path).getroot()
    height = int(root.get("height"))
    names = [t.text for t in root if t.get("class") == "legend"]
    if names != exp["names"]:
        raise AssertionError(f"legend {names}, expected {exp['names']}")
    rows = (len(exp["titles"]) + 1) // 2
    legend = LEGEND_PAD + (len(names) + LEGEND_RUNS - 1) // LEGEND_RUNS * LEGEND_ROW
    if height != legend + rows * PANEL_H or int(root.get("width")) != WIDTH:
        raise AssertionError(f"size {root.get('width')}x{height}")
    panels = panels_of(root)
    if [p["title"] for p in panels] != exp["titles"]:
        raise AssertionError(f"titles {[p['title'] for p in panels]}, expected {exp['titles']}")
    npoly = sum(1 for el in root.iter() if el.tag.endswith("polyline"))
    nexp = sum(len(c) for c in exp["panels"].values())
    if npoly != nexp:
        raise AssertionError(f"{npoly} polylines, expected {nexp}")
    for p in panels:
        want = exp["panels"].get(p["title"], {})
        t = p["title"]
        if sorted(p["curves"]) != sorted(want):
            raise AssertionError(f"panel {t}: curves {sorted(p['curves'])}, expected {sorted(want)}")
        fx, fy, fw, fh = p["frame"]
        xmap, xs = axis_map(sorted(p["xt"]), f"panel {t} x")
        ymap, ys = axis_map(sorted(p["yt"]), f"panel {t} y")
        # the y axis is widened to whole ticks: the frame's bottom and top are its first and last tick
        # (the same pixel, each printed to 0.01 px)
        ytop, ybot = min(p["yt"]), max(p["yt"])
        if abs(ybot[0] - (fy + fh)) > 0.01 or abs(ytop[0] - fy) > 0.01:
            raise AssertionError(f"panel {t}: the frame {fy}..{fy + fh} does not end at ticks {ytop}, {ybot}")
        xlo = min(x for c in want.values() for x, _ in c)
        xhi = max(x for c in want.values() for x, _ in c)
        ylo = min(y for c in want.values() for _, y in c)
        yhi = max(y for c in want.values() for _, y in c)
        if not (ybot[1] <= ylo and yhi <= ytop[1]):
            raise AssertionError(f"panel {t}: values {ylo}..{yhi} outside the ticks {ybot[1]}..{ytop[1]}")
        drawn_x = [x for c in p["curves"].values() for x, _ in c]
        # the x axis spans the data exactly: the first step at the frame's left, the last at its right
        # (the same pixel, each printed to 0.01 px; the frame's span through the tick map, as below)
        if abs(min(drawn_x) - fx) > 0.01 or abs(max(drawn_x) - (fx + fw)) > 0.01:
            raise AssertionError(f"panel {t}: x from {min(drawn_x)} to {max(drawn_x)}, frame {fx}..{fx + fw}")
        if abs(xmap(fx) - xlo) > 0.02 * xs or abs(xmap(fx + fw) - xhi) > 0.02 * xs:
            raise AssertionError(f"panel {t}: the frame spans {xmap(fx)}..{xmap(fx + fw)}, the data {xlo}..{xhi}")
        for key, pts in p["curves"].items():
            wp = want[key]
            for x, y in pts:
                # inside the frame, both printed to 0.01 px
                if not (fx - 0.01 <= x <= fx + fw + 0.01 and fy - 0.01 <= y <= fy + fh + 0.01):
                    raise AssertionError(f"panel {t} {key}: point ({x}, {y}) outside the frame")
            if exact:
                if len(pts) != len(wp):
                    raise AssertionError(f"panel {t} {key}: {len(pts)} points, expected {len(wp)}")
                for (x, y), (wx, wy) in zip(pts, wp):
                    # points are written to 0.01 px: half of that, plus the maps' own error
                    if abs(xmap(x) - wx) > 0.03 * xs or abs(ymap(y) - wy) > 0.03 * ys:
                        raise AssertionError(f"panel {t} {key}: ({xmap(x)}, {ymap(y)}) for ({wx}, {wy})")
            else:
                if len(pts) > 4 * fw or len(pts) < fw:
                    raise AssertionError(f"panel {t} {key}: {len(pts)} points for {fw} columns")
                # the least and greatest value are points of their columns: mapped back as above
                got_hi = max(ymap(y) for _, y in pts)
                got_lo = min(ymap(y) for _, y in pts)
                if abs(got_hi - yhi) > 0.03 * ys or abs(got_lo - ylo) > 0.03 * ys:
                    raise AssertionError(f"panel {t} {key}: drawn {got_lo}..{got_hi}, data {ylo}..{yhi}")
    print(f"{path}: {len(panels)} panels, {npoly} polylines as expected")


def read_png(path):
    """(width, height, pixel(x, y) -> (r, g, b)) of an 8-bit RGB(A) PNG."""
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise AssertionError("not a PNG")
    chunks, at = {}, 8
    idat = b""
    while at < len(data):
        n, kind = struct.unpack(">I4s", data[at:at + 8])
        body = data[at + 8:at + 8 + n]
        if zlib.crc32(kind + body) != struct.unpack(">I", data[at + 8 + n:at + 12 + n])[0]:
            raise AssertionError(f"chunk {kind} has a bad CRC")
        chunks.setdefault(kind, body)
        if kind == b"IDAT":
            idat += body
        at += 12 + n
    w, h, depth, ctype = struct.unpack(">IIBB", chunks[b"IHDR"][:10])
    if depth != 8 or ctype not in (2, 6):
        raise AssertionError(f"IHDR {w}x{h} depth {depth} type {ctype}, expected RGB(A)")
    bpp = 3 if ctype == 2 else 4
    raw = zlib.decompress(idat)
    stride = w * bpp
    rows, prev = [], bytearray(stride)
    for r in range(h):
        f, line = raw[r * (stride + 1)], bytearray(raw[r * (stride + 1) + 1:(r + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(line)
        prev = line
    return w, h, lambda x, y: tuple(rows[y][x * bpp:x * bpp + 3])


def check_png(path, width, height, runs):
    w, h, pixel = read_png(path)
    if (w, h) != (width, height):
        raise AssertionError(f"{w}x{h}, expected {width}x{height}")
    colours = {pixel(x, y) for y in range(0, h, 3) for x in range(0, w, 3)}
    if len(colours) < 16:
        raise AssertionError(f"{len(colours)} colours: nothing much is drawn")
    for r in range(runs):
        # the middle of run r's legend swatch (src/obs/plot.c draw_legend)
        x, y = 20 + r % LEGEND_RUNS * 300 + 9, LEGEND_PAD // 2 + LEGEND_ROW // 2 + r // LEGEND_RUNS * LEGEND_ROW
        c = PALETTE[r % len(PALETTE)]
        if pixel(x, y) != (c >> 16, c >> 8 & 255, c & 255):
            raise AssertionError(f"run {r}'s swatch at ({x}, {y}) is {pixel(x, y)}, not #{c:06X}")
    print(f"{path}: {w}x{h} PNG, {len(colours)} colours, the runs' swatches in their colours")


PARTS = ["productive", "recomputed", "detection", "restart", "checkpoint", "eval", "queue"]
PART_COLORS = [0x009E73, 0xD55E00, 0xE69F00, 0xCC79A7, 0x0072B2, 0x56B4E9, 0xBBBBBB]


def points_of(el):
    return [tuple(map(float, p.split(","))) for p in el.get("points").split()]


def check_timeline(path, goodput_path):
    """The timeline of `anvil plot --goodput`: title, bands, legend, spans, faults, loss, boundaries,
    each mapped back through the tick labels to the goodput's numbers."""
    g = json.load(open(goodput_path))
    root = ET.parse(path).getroot()
    els = list(root)
    of = lambda cls: [e for e in els if e.get("class", "") == cls]
    sub, wall = g["submitted_at"], g["wall_s"]
    if int(root.get("width")) != 1200:
        raise AssertionError(f"width {root.get('width')}")
    title = of("title")[0].text
    if f"ETTR {100 * g['ettr']:.1f}%" not in title:
        raise AssertionError(f"title {title!r} without ETTR {100 * g['ettr']:.1f}%")
    # a band per attempt, after one for the time outside every attempt when a span has attempt 0
    outside = any(s["attempt"] == 0 for s in g["spans"])
    labels = (["no attempt"] if outside else []) + [f"attempt {a['attempt']}" for a in g["attempts"]]
    row_of = {a["attempt"]: i + outside for i, a in enumerate(g["attempts"])}
    row_of[0] = 0
    bands = [e for e in els if e.get("class", "").startswith("band ")]
    if [e.text for e in of("row")] != labels or len(bands) != len(labels):
        raise AssertionError(f"{len(bands)} bands labelled {[e.text for e in of('row')]}, expected {labels}")
    legend = [e.text for e in of("legend")]
    want = [f"{p} {g['parts'][p]:.1f} s ({100 * g['parts'][p] / wall:.1f}%)" for p in PARTS]
    if legend != want:
        raise AssertionError(f"legend {legend}, expected {want}")
    xt = of("xtick")
    top = min(float(e.get("y")) for e in xt)
    xmap, xs = axis_map(sorted((float(e.get("x")), number(e.text)) for e in xt if float(e.get("y")) == top), "time")
    # every span two pixels wide or more has its middle in a rectangle of its row and part
    rects = [(e.get("class").split()[1:], float(e.get("x")), float(e.get("width")))
             for e in els if e.get("class", "").startswith("span ")]
    for s in g["spans"]:
        if (s["t1"] - s["t0"]) / xs < 2:
            continue
        mid = (s["t0"] + s["t1"]) / 2
        hit = [c for c, x, w in rects if c[0] == f"row{row_of[s['attempt']]}" and xmap(x) <= mid <= xmap(x + w)]
        if hit != [[f"row{row_of[s['attempt']]}", f"cat{PARTS.index(s['part'])}"]]:
            raise AssertionError(f"span {s}: drawn as {hit}")
    faults = [f"{f['kind']} {f['target']}".strip() for f in g["faults"]]
    lines = [e for e in els if e.tag.endswith("}line") and e.get("class") == "mark"]
    if [e.text for e in of("mark-label")] != faults or len(lines) != len(faults):
        raise AssertionError(f"fault labels {[e.text for e in of('mark-label')]}, {len(lines)} lines, expected {faults}")
    for f, l in zip(g["faults"], lines):
        if abs(xmap(float(l.get("x1"))) - (f["at"] - sub)) > 0.03 * xs:
            raise AssertionError(f"fault at {f['at'] - sub} s drawn at {xmap(float(l.get('x1')))} s")
    yt = of("ytick")
    ymap, ys = axis_map(sorted((float(e.get("y")), number(e.text)) for e in yt), "loss")
    pts = [p for e in of("curve") for p in points_of(e)]
    if len(pts) != len(g["loss"]):
        raise AssertionError(f"{len(pts)} loss points, expected {len(g['loss'])}")
    for (x, y), (t, v) in zip(pts, g["loss"]):
        if abs(xmap(x) - t) > 0.03 * xs or abs(ymap(y) - v) > 0.03 * ys:
            raise AssertionError(f"loss point ({xmap(x)}, {ymap(y)}) for ({t}, {v})")
    got = sorted(xmap(points_of(e)[0][0]) for e in of("boundary"))
    # held to the axis: an attempt's end the service saw a few ms after the job's is drawn at its end
    want = sorted(min(max(t - sub, 0), wall) for a in g["attempts"] for t in (a["started_at"], a["ended_at"]))
    if len(got) != len(want) or any(abs(a - b) > 0.03 * xs for a, b in zip(got, want)):
        raise AssertionError(f"attempt boundaries at {got}, expected {want}")
    print(f"{path}: {len(bands)} bands, {len(rects)} span rectangles, {len(faults)} faults, "
          f"{len(of('curve'))} loss polylines of {len(pts)} points, {len(got)} boundaries as expected")


def check_timeline_png(path, svg):
    root = ET.parse(svg).getroot()
    w, h, pixel = read_png(path)
    if (w, h) != (int(root.get("width")), int(root.get("height"))):
        raise AssertionError(f"{w}x{h}, the SVG {root.get('width')}x{root.get('height')}")
    for el in root:
        cls = el.get("class", "")
        if cls.startswith("swatch cat"):
            c = PART_COLORS[int(cls[len("swatch cat"):])]
            x, y = int(float(el.get("x")) + 9), int(float(el.get("y")) + 6)
            if pixel(x, y) != (c >> 16, c >> 8 & 255, c & 255):
                raise AssertionError(f"{cls} at ({x}, {y}) is {pixel(x, y)}, not #{c:06X}")
    print(f"{path}: {w}x{h} PNG, each part's swatch in its colour")


def main():
    cmd = sys.argv[1]
    try:
        if cmd == "gen":
            gen(sys.argv[2])
        elif cmd == "big":
            big(sys.argv[2], int(sys.argv[3]))
        elif cmd == "expect":
            runs = [[json.loads(l) for l in open(os.path.join(d, "metrics.jsonl"))] for d in sys.argv[2:]]
            exp = expected_of(runs)
            exp["names"] = [os.path.basename(d.rstrip("/")) for d in sys.argv[2:]]
            print(json.dumps(exp))
        elif cmd == "svg":
            check_svg(sys.argv[2], sys.argv[3], exact=len(sys.argv) < 5 or sys.argv[4] != "thinned")
        elif cmd == "png":
            check_png(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
        elif cmd == "timeline":
            check_timeline(sys.argv[2], sys.argv[3])
        elif cmd == "timeline-png":
            check_timeline_png(sys.argv[2], sys.argv[3])
    except (AssertionError, ET.ParseError, OSError, ValueError, KeyError) as e:
        print(f"plot_check {cmd}: {e}", file=sys.stderr)
        sys.exit(1)


main()
