"""Swimlanes of one step: every GPU x stream and each launching host thread on one time axis, and:
the analysis. Its door, with the command line and what it writes, is scripts/swimlanes.py."""

from __future__ import annotations

import bisect
import csv
import itertools
import math
import os
from pathlib import Path

from jaxperf.device import adapters  # the kind of each device event, as its device says
from jaxperf.report import svg  # SVG elements and text widths, shared with roofline.py
from tracekit import scratch, step_cli
from tracekit import trace_rules as rules  # the classification rules
from tracekit.trace_rules import number_text, us_value  # units

RESULT_FILE = "swimlanes.json"

SVG_FILE = "swimlanes.svg"

STRAGGLERS_FILE = "stragglers.csv"

STEP1_FILES = ("skip_stats.json", "rows.csv", "steps.csv", "gaps.csv")

ATTRIBUTION_FILE = "attribution/kernels.csv"


# ---------------------------------------------------------------- named constants

WIDTH = 1600            # px, the SVG's width and viewBox width: a laptop browser window

PLOT_X0 = 360           # px, left edge of the time axis; lane labels sit left of it

PLOT_X1 = WIDTH - 20    # px, right edge of the time axis

LANE_H = 14             # px, a lane's bar height

LANE_PITCH = 18         # px, from one lane to the next

GROUP_GAP = 8           # px, between GPUs (and between the host lanes and GPU 0)

# Events narrower than this merge into one bar per lane and kind: narrower bars cannot be told
# apart on screen, and drawing each one alone is what makes a 20,000-kernel step megabytes.
MERGE_BELOW_PX = 1.0

# At most this many bars (each with its tooltip, about 200 bytes) keep the SVG near 2 MB or under;
# where a window holds more events at least a pixel wide, the merge width doubles until it fits
# (up to MAX_MERGE_PX), and the SVG says so: --start/--end then shows them one by one.
MAX_BARS = 8000

MAX_MERGE_PX = 16.0

MIN_BAR_PX = 0.5        # a bar's drawn width floor, so a sub-pixel bar stays visible

BAR_LABEL_MIN_PX = 48   # a bar at least this wide carries its name as text inside it

MARGIN_SHARE = 0.01     # of the step's span, drawn on each side of it

NAME_CHARS = 240        # characters of a name kept in a tooltip (some kernel names are pages)

HOST_GAP_EVENTS = 3     # host events named in a GPU-gap bar's tooltip line (largest first)


KINDS = ("compute", "gemm", "collective", "copy", "memset")  # GPU bar kinds, drawing order

KIND_CLASS = {"compute": "kc", "gemm": "kg", "gemm_aux": "kg", "collective": "kn", "copy": "km",
              "memset": "ks", "launch": "hl", "graph_launch": "hg", "other": "ho"}

HOST_KIND_OF_JOIN = {"launch": "launch", "graph_launch": "graph_launch", "other": "other",
                     "dispatch": "launch"}  # a TPU program run's dispatch: its one launch

KIND_WORDS = {"kc": "compute", "kg": "GEMM", "kn": "collective", "km": "memcpy", "ks": "memset",
              "hl": "launch call", "hg": "graph launch", "ho": "other host call"}

GAP_CLASS = {"host_late": "gl", "device_wait": "gw", "unknown": "gu"}

# What a GPU's last stretch was, from what filled most of it; equal times resolve in this order.
STRETCH_KINDS = ("host_late", "compute", "copy", "device_wait", "unknown", "idle")

STRETCH_OF_CATEGORY = {"compute": "compute", "memcpy": "copy", "collective": "collective"}

STRETCH_WORDS = {"collective": "a collective kernel", "host_late":
                 "waiting for the host's launches (host_late gaps)", "compute": "compute",
                 "copy": "copies (memcpy/memset)", "device_wait":
                 "waiting on the device (device_wait gaps)", "unknown": "gaps of unknown cause",
                 "idle": "idle time under 1 us per gap"}

LEGEND = [("kc", "compute kernel"), ("kg", "GEMM"), ("kn", "collective (hatched)"),
          ("km", "memcpy (dotted)"), ("ks", "memset (lined)"), ("hl", "launch call"),
          ("hg", "graph launch (striped)"), ("ho", "other host call"),
          ("hw", "host events during a GPU gap"), ("gr", "ran inside a graph"),
          ("gl", "gap: host late"), ("gw", "gap: device wait"), ("gu", "gap: unknown")]


STYLE = """
.kc{fill:#9ecae1}.kg{fill:#08519c}.kn{fill:url(#pn)}.km{fill:url(#pm)}.ks{fill:url(#ps)}
.hl{fill:#8c8c8c}.hg{fill:url(#pg)}.ho{fill:#d9d9d9;stroke:#737373;stroke-width:.5}
.hw{fill:#fdbf6f;stroke:#b15928;stroke-width:.5}.gr{fill:#6a3d9a}
.gl{fill:#e31a1c}.gw{fill:#969696}.gu{fill:#fff;stroke:#636363;stroke-width:.5}
.bg{fill:#f4f4f4}.lane{fill:#fff;stroke:#e0e0e0;stroke-width:.5}
.grid{stroke:#d9d9d9;stroke-width:.5}.axis{stroke:#000;stroke-width:1}
.step{stroke:#000;stroke-width:1.2;stroke-dasharray:5 3}
.gend{stroke:#000;stroke-width:2}
.strag{fill:#c51b1b;font-weight:bold}.stragl{stroke:#c51b1b;stroke-width:2.5}
.tie{fill:#b35806;font-weight:bold}.tiel{stroke:#b35806;stroke-width:2.5}
.crit{font-weight:bold}.small{font-size:9px}.white{fill:#fff}.hd{font-size:13px}
.title{font-size:16px;font-weight:bold}.note{font-size:11px;fill:#444}
"""

PATTERNS = (
    '<pattern id="pn" width="6" height="6" patternUnits="userSpaceOnUse" '
    'patternTransform="rotate(45)"><rect width="6" height="6" fill="#fd8d3c"/>'
    '<rect width="2.2" height="6" fill="#7f2704"/></pattern>'
    '<pattern id="pm" width="4" height="4" patternUnits="userSpaceOnUse">'
    '<rect width="4" height="4" fill="#a1d99b"/><circle cx="2" cy="2" r="1" fill="#00441b"/>'
    '</pattern>'
    '<pattern id="ps" width="4" height="4" patternUnits="userSpaceOnUse">'
    '<rect width="4" height="4" fill="#dadaeb"/><rect width="4" height="1.3" fill="#3f007d"/>'
    '</pattern>'
    '<pattern id="pg" width="4" height="4" patternUnits="userSpaceOnUse">'
    '<rect width="4" height="4" fill="#bcbddc"/><rect width="1.5" height="4" fill="#3f007d"/>'
    '</pattern>')


class SwimlaneError(step_cli.StepError):
    """The input cannot be drawn; the message is one sentence (exit 1)."""


class WindowError(SwimlaneError):
    """--start/--end do not make a window (a usage error, exit 2)."""

    code = step_cli.USAGE


# ---------------------------------------------------------------- load

def to_ps(us_text: str) -> int:
    """A `_us` cell (three decimals) as integer picoseconds."""
    return round(float(us_text) * 1_000_000)


def _step1_table(out: Path, file: str, names: list):
    """One of step 1's tables, streamed (scratch.stream); a SwimlaneError where it is not there
    (this step needs each)."""
    if (rows := scratch.stream(out, file, names)) is None:
        raise SwimlaneError(f"{out / file} is not there: run skip_stats.py into this folder")
    return rows


def read_step1(out: Path) -> tuple[dict, dict, list]:
    """skip_stats.json, steps.csv as {step: {device: row}}, gaps.csv rows."""
    s1 = scratch.Scratch(out).json("skip_stats.json")
    try:
        s1["steps"]["analysed"]  # noqa: B018 - the field this step relies on
    except (KeyError, TypeError) as exc:
        raise SwimlaneError(f"{out / 'skip_stats.json'} is not step 1's result ({exc}); run "
                            "skip_stats.py into this folder again, or delete it") from exc
    steps: dict[int, dict] = {}
    try:
        for step, dev, source, start, end, crit in _step1_table(out, "steps.csv", [
                "step", "device", "source", "start_us", "end_us", "critical_stream"]):
            steps.setdefault(int(step), {})[int(dev)] = {
                "source": source, "start": to_ps(start), "end": to_ps(end),
                "critical": int(crit) if crit else None}
        gaps = [{"device": int(dev), "stream": int(stream), "step": int(step),
                 "start": to_ps(start), "end": to_ps(end), "before": before, "after": after,
                 "cause": cause, "thread": thread, "host": host}
                for dev, stream, step, start, end, before, after, cause, thread, host in
                _step1_table(out, "gaps.csv", [
                    "device", "stream", "step", "start_us", "end_us", "kernel_before",
                    "kernel_after", "cause", "launch_thread", "host_events"])]
    except ValueError as exc:
        raise SwimlaneError(f"a cell of steps.csv or gaps.csv in {out} is not a number ({exc}); "
                            "run skip_stats.py into this folder again") from exc
    return s1, steps, gaps


ROW_COLUMNS = ["device", "stream", "stream_name", "kernel", "category", "start_us", "end_us",
               "join", "launch_name", "launch_thread", "launch_start_us", "launch_dur_us",
               "hlo_op", "graph", "step"]


class Rows:
    """What this step needs from rows.csv, read in one pass: per analysed step and GPU its events
    (for stragglers.csv); the events and launch calls inside the window (for drawing); each
    stream's name and its busy time per category in the chosen step (for its role)."""

    def __init__(self, out: Path, analysed: set, chosen: int, v0: int, v1: int,
                 event_kind=adapters.ADAPTERS["GPU"].event_kind):
        self.per_step_gpu: dict[tuple, list] = {}
        self.lane_events: dict[tuple, list] = {}
        self.stream_names: dict[tuple, str] = {}
        self.step_streams: dict[tuple, list] = {}   # (device, stream) -> [compute, coll, memcpy]
        self.host: dict[str, dict] = {}             # thread -> (start, name) -> launch call
        self.step_threads: set = set()
        self.span = None                            # (first start, last end) of all GPU events
        cat_index = {"compute": 0, "collective": 1, "memcpy": 2}
        first, last = None, None
        # a hot loop (a row per GPU event): the cells that repeat are converted once each
        keys: dict = {}   # (device, stream) cells -> (device, stream)
        steps: dict = {"": None}  # step cell -> step
        per_step_gpu = self.per_step_gpu
        try:
            for (dev, stream, sname, name, cat, start_t, end_t, join, lname, lthread, lstart,
                 ldur, hlo_op, graph, step) in _step1_table(out, "rows.csv", ROW_COLUMNS):
                if (key := keys.get((dev, stream))) is None:
                    key = keys[(dev, stream)] = (int(dev), int(stream))
                    if key not in self.stream_names:
                        self.stream_names[key] = sname
                d = key[0]
                start, end = to_ps(start_t), to_ps(end_t)
                first = start if first is None or start < first else first
                last = end if last is None or end > last else last
                n = steps.get(step, steps)
                if n is steps:
                    n = steps[step] = int(step)
                if n in analysed:
                    if (evs := per_step_gpu.get((n, d))) is None:
                        evs = per_step_gpu[(n, d)] = []
                    evs.append((start, end, cat, name))
                if n == chosen:
                    acc = self.step_streams.setdefault(key, [0, 0, 0])
                    acc[cat_index.get(cat, 0)] += end - start
                if start < v1 and (end > v0 or start >= v0):
                    kind = event_kind(name, hlo_op, cat == "memcpy")
                    self.lane_events.setdefault(key, []).append(
                        (start, end, KIND_CLASS[kind], name, graph == "1", start_t))
                hk = HOST_KIND_OF_JOIN.get(join)
                if hk and lthread and lstart:
                    ls = to_ps(lstart)
                    if n == chosen:
                        self.step_threads.add(lthread)
                    if ls >= v1:
                        continue  # a launch after the window (its end is not needed)
                    le = ls + to_ps(ldur or "0")
                    if le > v0 or ls >= v0:
                        calls = self.host.setdefault(lthread, {})
                        if (c := calls.get((ls, lname))) is None:
                            calls[(ls, lname)] = [ls, le, KIND_CLASS[hk], lname, {d}, 1]
                        else:
                            c[4].add(d)
                            c[5] += 1
        except ValueError as exc:
            raise SwimlaneError(f"a cell of {out / 'rows.csv'} is not a number ({exc}); run "
                                "skip_stats.py into this folder again") from exc
        if first is not None:
            self.span = (first, last)


# kernels.csv is written in the order of device, stream and start (scratch-layout.md), so from
# this size on each drawn lane's kernels are read where its window lies (found by halving the
# file), not the whole table (258 MB at five times the seed's size, 0.5 s); a key the windows miss
# (a table not in that order) is looked for in the whole table.
WINDOWED_READ_MIN = 8 << 20

_HALVED_DOWN_TO = 1 << 16  # the window's start is found to within this many bytes


def read_instructions(out: Path, keys: set) -> tuple[dict, str | None]:
    """{(device, stream, start_us): (instruction, match)} for the given keys, from step 4's
    kernels.csv (its first three cells are numbers: a line is parsed only where they are a
    key's); a note instead where the file lacks its columns."""
    names = ["device", "stream", "start_us", "instruction", "match"]
    try:
        with scratch.open_file(out / ATTRIBUTION_FILE) as fh:
            head = next(csv.reader([fh.readline()]), [])
            if missing := [c for c in names if c not in head]:
                return {}, (f"{out / ATTRIBUTION_FILE} is not the table attribute_kernels.py "
                            f"writes (it has no column {missing[0]}): tooltips name no "
                            "instruction")
            if head[:3] != names[:3]:
                raise scratch.TableError(f"{out / ATTRIBUTION_FILE} does not start with "
                                         "device, stream and start_us")
            cols = head.index("instruction"), head.index("match")
            if os.fstat(fh.fileno()).st_size >= WINDOWED_READ_MIN:
                found = _read_windows(out / ATTRIBUTION_FILE, keys, cols)
                if len(found) == len(keys):
                    return found, None
            return _read_keys(fh, keys, cols), None
    except (OSError, UnicodeDecodeError, scratch.TableError) as exc:
        return {}, f"{exc}: tooltips name no instruction"


def _read_keys(lines, keys: set, cols: tuple, last=None) -> dict:
    """The (instruction, match) of each key among `lines` (text lines of kernels.csv after its
    header); with `last` ((device, stream, start) of the last key wanted), lines ordered by
    them are read only until one comes after it."""
    found: dict[tuple, tuple] = {}
    wanted = {f"{d},{s},{t},": (d, s, t) for d, s, t in keys}
    ins, match = cols
    for line in lines:
        cut = line.find(",", line.find(",", line.find(",") + 1) + 1) + 1
        if (k := wanted.get(line[:cut])) is not None:
            while line.count('"') % 2:  # a quoted cell holds a newline: read on
                more = next(lines, "")
                if not more:
                    break
                line += more
            row = next(csv.reader([line]))
            if len(row) > max(ins, match):
                found[k] = (row[ins], row[match])
        elif last is not None and (at := _line_key(line)) is not None and at > last:
            break
    return found


def _line_key(line: str) -> tuple | None:
    """(device, stream, start) of a kernels.csv line; None where it does not start with them."""
    cells = line.split(",", 3)
    try:
        return int(cells[0]), int(cells[1]), float(cells[2])
    except (ValueError, IndexError):
        return None


def _read_windows(path: Path, keys: set, cols: tuple) -> dict:
    """_read_keys over each drawn lane's window of the table, found by halving the file by byte
    offset."""
    lanes: dict[tuple, list] = {}
    for d, s, t in keys:
        lanes.setdefault((d, s), []).append(t)
    found: dict = {}
    with scratch.open_file(path, binary=True) as fh:
        size = os.fstat(fh.fileno()).st_size
        fh.readline()
        body = fh.tell()  # the first line after the header
        for (d, s), starts in lanes.items():
            ts = sorted(starts, key=float)
            first = (int(d), int(s), float(ts[0]))
            lo, hi = body, size
            while hi - lo > _HALVED_DOWN_TO:  # lo: a line's start at or before the window's
                fh.seek((lo + hi) // 2)
                fh.readline()  # the rest of the line the seek fell in
                at = fh.tell()
                k = _line_key(fh.readline().decode("utf-8", "replace"))
                if k is not None and k < first:
                    lo = at
                else:
                    hi = at
            fh.seek(lo)
            text = (raw.decode("utf-8") for raw in fh)
            found.update(_read_keys(text, {(d, s, t) for t in ts}, cols,
                                    (int(d), int(s), float(ts[-1]))))
    return found


# ---------------------------------------------------------------- analyses

def choose_step(s1: dict, steps: dict, requested: int | None) -> dict:
    """The step to draw: --step N, else the median-duration complete analysed step."""
    st = s1["steps"]
    partial = set(st.get("partial_analysed", []))
    whole = str(st.get("source", "")).startswith("the whole capture")
    if s1.get("status") == "not computable" or not s1.get("gpu_events"):
        raise SwimlaneError("no GPU events in this capture (step 1 found none: a CPU capture?), "
                            "so there are no GPU lanes to draw")
    if not steps:
        raise SwimlaneError(f"none of the capture's {s1.get('gpu_events')} GPU events falls in "
                            "a step step 1 analysed (steps.csv is empty), so there is no step "
                            "to draw")
    dur = {n: max(r["end"] for r in g.values()) - min(r["start"] for r in g.values())
           for n, g in steps.items()}
    complete = sorted(n for n in st["analysed"] if n not in partial and n in steps)
    if requested is not None:
        if requested not in steps:
            skipped = st.get("skipped_partial", [])
            raise SwimlaneError(
                f"step {requested} was not analysed by step 1 (analysed: "
                f"{', '.join(map(str, sorted(steps)))}"
                + (f"; skipped as partial: {', '.join(map(str, skipped))}" if skipped else "")
                + "); pass one of the analysed steps")
        n = requested
        why = f"step {n}, chosen by --step ({us_value(dur[n]):,.3f} us)"
        if n in partial:
            why += "; it is partial (the profile started or stopped inside it)"
    elif complete:
        order = sorted(complete, key=lambda k: (dur[k], k))
        n = order[(len(order) - 1) // 2]  # the lower median: a step that ran
        frames = s1.get("frames") or {}
        lo, hi = dur[order[0]], dur[order[-1]]
        why = (f"step {n}: the median-duration step of the {len(order)} complete analysed "
               f"step(s) ({us_value(dur[n]):,.3f} us; they range {us_value(lo):,.3f} to "
               f"{us_value(hi):,.3f} us)")
        if frames.get("median_step") in complete:  # step 1's frames: the one median step
            n = frames["median_step"]
            why = (f"{frames.get('why') or f'step {n}: step 1s median step'} "
                   f"({us_value(dur[n]):,.3f} us; the {len(order)} complete analysed steps "
                   f"range {us_value(lo):,.3f} to {us_value(hi):,.3f} us)")
    elif whole:
        n = min(steps)
        why = ("the capture has no steps (no StepTraceAnnotation and no program executions), so "
               f"step 1 took the whole capture as one window ({us_value(dur[n]):,.3f} us): it is "
               "drawn whole; it is not a step")
    else:
        raise SwimlaneError(
            "no complete step: step 1 analysed only partial steps ("
            f"{', '.join(map(str, sorted(steps)))}; the profile started or stopped inside "
            "them); pass --step N to draw one anyway")
    g = steps[n]
    return {"number": n, "why": why, "partial": n in partial, "whole_capture": whole,
            "source": st.get("source"), "start": min(r["start"] for r in g.values()),
            "end": max(r["end"] for r in g.values()), "dur": dur[n]}


def step_of_window(steps: dict, start_us: float | None, end_us: float | None) -> int | None:
    """The analysed step a --start/--end window overlaps most (the one it starts in when it
    overlaps several equally); None when it overlaps none (the median step is drawn around it,
    and a note says the window is outside it)."""
    spans = {n: (min(r["start"] for r in g.values()), max(r["end"] for r in g.values()))
             for n, g in steps.items() if g}
    if not spans:
        return None
    lo = min(a for a, _ in spans.values()) if start_us is None else round(start_us * 1_000_000)
    hi = max(b for _, b in spans.values()) if end_us is None else round(end_us * 1_000_000)
    best = max(sorted(spans), key=lambda n: min(hi, spans[n][1]) - max(lo, spans[n][0]))
    return best if min(hi, spans[best][1]) > max(lo, spans[best][0]) else None


def window(chosen: dict, start_us: float | None, end_us: float | None) -> tuple[int, int, bool]:
    """The drawn window in picoseconds: the step with a margin, or --start/--end."""
    pad = max(1, round((chosen["end"] - chosen["start"]) * MARGIN_SHARE))
    v0 = chosen["start"] - pad if start_us is None else round(start_us * 1_000_000)
    v1 = chosen["end"] + pad if end_us is None else round(end_us * 1_000_000)
    if v1 <= v0:
        raise WindowError(f"the window is empty: --start {us_value(v0):,.3f} us is not before its "
                          f"end {us_value(v1):,.3f} us (step {chosen['number']} spans "
                          f"{us_value(chosen['start']):,.3f} to {us_value(chosen['end']):,.3f} us)")
    return v0, v1, start_us is not None or end_us is not None


def last_stretch(evs: list, gaps: list, step_start: int) -> tuple:
    """One GPU in one step: (last event, its stretch kind, stretch start). The stretch runs from
    the end of the GPU's last collective (or the step's start) to its end; it is `collective`
    when the GPU ends in a collective kernel, else whatever filled most of it: busy time by
    category (all streams; the earlier-starting event owns an overlap), and the time no stream
    was busy by the cause of the critical stream's gap there (gaps.csv), `idle` where no gap
    of 1 us or more was recorded."""
    last = max(evs, key=lambda e: (e[1], e[0]))
    end = last[1]
    if last[2] == "collective":
        return last, "collective", last[0]
    t0 = min(end, max([step_start] + [e[1] for e in evs if e[2] == "collective"]))
    tally = dict.fromkeys(STRETCH_KINDS, 0)
    covered, idle = t0, []
    for s, e, cat, _ in sorted(evs, key=lambda e: (e[0], e[0] - e[1])):
        if e <= covered:
            continue
        if s > covered:
            idle.append((covered, s))
        tally[STRETCH_OF_CATEGORY.get(cat, "compute")] += e - max(s, covered)
        covered = e
    # the gaps by start, and the latest end among the first k: the gaps an idle stretch
    # overlaps are found by bisection, not by a scan of every gap per stretch
    gaps = sorted(gaps, key=lambda g: g["start"])
    starts = [g["start"] for g in gaps]
    reach = list(itertools.accumulate((g["end"] for g in gaps), max))
    for s, e in idle:
        left = e - s
        for g in gaps[bisect.bisect_right(reach, s):bisect.bisect_left(starts, e)]:
            o = min(e, g["end"]) - max(s, g["start"])
            if o > 0:
                tally[g["cause"] if g["cause"] in tally else "unknown"] += o
                left -= o
        tally["idle"] += max(0, left)
    kind = max(STRETCH_KINDS, key=lambda k: (tally[k], -STRETCH_KINDS.index(k)))
    return last, kind, t0


def straggler_rows(steps: dict, per_step_gpu: dict, gaps: list,
                   compared: set | None = None) -> list[dict]:
    """stragglers.csv: one row per analysed step and GPU, by step then device. Only the compared
    GPUs (rules.compared_gpus: those that run the same programs) can finish last; the others
    do other work and have `compared` 0."""
    gaps_of: dict[tuple, list] = {}
    for g in gaps:
        gaps_of.setdefault((g["step"], g["device"]), []).append(g)
    out = []
    for n in sorted(steps):
        g = steps[n]
        ends_all = {d: r["end"] for d, r in g.items()}
        ends = {d: t for d, t in ends_all.items() if compared is None or d in compared}
        first = min((ends or ends_all).values())
        start = min(r["start"] for r in g.values())
        lasts = set(rules.last_finishers(
            ends, rules.straggler_margin_ps(max(ends.values()) - start))) if ends else set()
        for d in sorted(g):
            evs = per_step_gpu.get((n, d))
            row = {"step": n, "device": d, "end": ends_all[d], "lag": ends_all[d] - first,
                   "last_kernel": "", "last_stretch": "", "stretch_start": None,
                   "stretch": None, "last_dur": None, "finishes_last": d in lasts,
                   "compared": d in ends}
            if evs:
                last, kind, t0 = last_stretch(evs, gaps_of.get((n, d), []), g[d]["start"])
                row.update(last_kernel=last[3], last_stretch=kind, stretch_start=t0,
                           stretch=last[1] - t0, last_dur=last[1] - last[0])
            out.append(row)
    return out


def straggler_of(chosen: dict, rows: list[dict]) -> tuple[dict | None, list, list]:
    """The chosen step's straggler (or tie) as data with its sentence; notes; refusals."""
    n = chosen["number"]
    mine = [r for r in rows if r["step"] == n and r.get("compared", True)]
    if chosen["whole_capture"]:
        return None, [], [f"cannot name a straggler because the capture has no steps: window "
                          f"{n} is the whole capture, and the GPU whose last event is latest "
                          "in it did not finish any step late"]
    if len(mine) < 2:
        if any(r["step"] == n for r in rows if not r.get("compared", True)):
            return None, [f"no two GPUs run the same programs in step {n} (each does other "
                          "work: step 1's GPU groups), so there is no straggler to name"], []
        return None, [f"one GPU ran step {n}: there is no straggler to name"], []
    ends = {r["device"]: r["end"] for r in mine}
    # step 1's rule: GPUs that end within its margin of the latest are a tie, not a straggler
    tie_ps = rules.straggler_margin_ps(max(ends.values()) - chosen["start"])
    lasts = rules.last_finishers(ends, tie_ps)
    first = min(ends, key=lambda d: (ends[d], d))
    latest = max(ends.values())
    others = [d for d in ends if d not in lasts]
    nxt = max(others, key=lambda d: (ends[d], -d)) if others else None
    by_dev = {r["device"]: r for r in mine}
    gpus = [{"device": d, "end_us": us_value(ends[d]), "last_kernel": by_dev[d]["last_kernel"],
             "last_stretch": by_dev[d]["last_stretch"],
             "stretch_start_us": None if by_dev[d]["stretch_start"] is None
             else us_value(by_dev[d]["stretch_start"]),
             "stretch_us": None if by_dev[d]["stretch"] is None else us_value(by_dev[d]["stretch"])}
            for d in lasts]
    lag = latest - ends[first]
    margin = latest - ends[nxt] if nxt is not None else None
    tie = len(lasts) > 1
    after = (f"{us_value(lag):,.3f} us after the other GPU (GPU {first})" if nxt == first else
             f"{us_value(lag):,.3f} us after the first GPU to finish (GPU {first}) and "
             f"{us_value(margin):,.3f} us after the next (GPU {nxt})") if nxt is not None else ""
    if tie and nxt is None:
        sentence = (f"no straggler in step {n}: all {len(lasts)} GPUs finish within "
                    f"{us_value(tie_ps):,.3f} us of the last (step 1's margin: a tie; "
                    f"spread {us_value(lag):,.3f} us)")
    elif tie:
        sentence = (f"GPUs {', '.join(map(str, lasts))} tie for last in step {n} (their ends "
                    f"lie within {us_value(tie_ps):,.3f} us of the last, step 1's margin of 5 us "
                    f"or 0.5% of the step), {after}")
    else:
        g0 = gpus[0]
        r = by_dev[lasts[0]]
        if r["last_stretch"] == "collective":
            how = (f"it ends in the collective kernel {r['last_kernel']} "
                   f"({us_value(r['last_dur']):,.3f} us)")
        else:
            frm = "its last collective" if r["stretch_start"] != chosen["start"] else \
                "the step's start"
            how = (f"its last stretch ({g0['stretch_us']:,.3f} us from {frm} to its end) is "
                   f"mostly {STRETCH_WORDS.get(r['last_stretch'], r['last_stretch'])}; its last "
                   f"kernel is {r['last_kernel']}")
        sentence = f"GPU {lasts[0]} finishes step {n} last, {after}; {how}"
    fig = lambda v: None if v is None else {"value": us_value(v), "unit": "us",  # noqa: E731
                                            "label": "measured"}
    return {"gpus": gpus, "tie": tie, "first_gpu": first, "next_gpu": nxt, "lag_us": fig(lag),
            "margin_us": fig(margin), "tie_within_us": us_value(tie_ps),
            "sentence": sentence}, [], []


def lay_out(events, v0: int, v1: int, merge_ps: float) -> list[tuple]:
    """Bars of one lane: (start, end, class, n, busy_ps, event). An event at least `merge_ps`
    wide (in the window) is a bar alone (n = 1); narrower ones of one kind, each within
    `merge_ps` of the previous, merge into one bar (n >= 2) that keeps its longest event."""
    bars, pending = [], {}
    append = bars.append
    for ev in events:
        s, e, cls = max(ev[0], v0), min(ev[1], v1), ev[2]
        if e - s >= merge_ps:
            append((s, e, cls, 1, e - s, ev))
            continue
        p = pending.get(cls)
        if p is not None and s - p[1] <= merge_ps:
            p[1] = max(p[1], e)
            p[2] += 1
            p[3] += e - s
            if ev[1] - ev[0] > p[5]:
                p[4], p[5] = ev, ev[1] - ev[0]
            continue
        if p is not None:
            append((p[0], p[1], cls, p[2], p[3], p[4]))
        pending[cls] = [s, e, 1, e - s, ev, ev[1] - ev[0]]
    bars += [(p[0], p[1], cls, p[2], p[3], p[4]) for cls, p in pending.items()]
    bars.sort(key=lambda b: (b[0], b[1]))
    return bars


def merge_spans(spans, gap_ps: float) -> list[tuple]:
    """Intervals joined where they lie less than `gap_ps` apart (the graph strip)."""
    out: list[list] = []
    for s, e in sorted(spans):
        if out and s - out[-1][1] <= gap_ps:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [tuple(x) for x in out]


def build_lanes(rows: Rows, steps: dict, chosen: dict, gaps: list, v0: int, v1: int) -> list:
    """GPU lanes (every GPU x stream of the step, and any other with events in the window), by
    device and stream, each GPU followed by the host lanes that serve it alone; then the host
    lanes that serve several GPUs (or none in the window). A host lane is a launching thread of
    the step or of the window, or a thread named by a gap's host events."""
    n = chosen["number"]
    crit = {}
    for g in (steps[k] for k in sorted(steps, key=lambda k: (k != n, k))):
        for d, r in g.items():
            crit.setdefault(d, r["critical"])
    keys = sorted(set(rows.step_streams) | set(rows.lane_events))
    lanes = []
    for d, s in keys:
        if (acc := rows.step_streams.get((d, s))) is None:
            acc = [0, 0, 0]
            for ev in rows.lane_events.get((d, s), ()):
                acc[{"kn": 1, "km": 2, "ks": 2}.get(ev[2], 0)] += ev[1] - ev[0]
        name = rows.stream_names.get((d, s)) or f"stream {s}"
        lanes.append({"kind": "gpu", "device": d, "stream": s, "stream_name": name,
                      "role": rules.stream_role(*acc), "critical": crit.get(d) == s,
                      "in_step": (d, s) in rows.step_streams,
                      "events": rows.lane_events.get((d, s), [])})
    host_gaps: dict[str, list] = {}
    for g in gaps:
        if g["host"] and g["thread"] and g["start"] < v1 and g["end"] > v0:
            host_gaps.setdefault(g["thread"], []).append(g)
    threads = set(rows.step_threads) | set(rows.host) | set(host_gaps)
    serves = {t: {d for c in rows.host.get(t, {}).values() for d in c[4]}
              | {g["device"] for g in host_gaps.get(t, [])} for t in threads}
    for t in sorted(threads):
        calls = sorted(rows.host.get(t, {}).values(), key=lambda c: (c[0], c[1]))
        role = " and ".join(x for x, has in (("launches", calls),
                                             ("host work during GPU gaps", host_gaps.get(t)))
                            if has) or "launches (none in the window)"
        lanes.append({"kind": "host", "thread": t, "role": role,
                      "devices": sorted(serves[t]), "events": calls,
                      "gaps": sorted(host_gaps.get(t, []), key=lambda g: (g["start"],
                                                                           g["device"]))})
    # a thread that serves one GPU sits under that GPU's streams; the others after every GPU
    for lane in lanes:
        one = lane["kind"] == "host" and len(lane["devices"]) == 1
        lane["group"] = lane["device"] if lane["kind"] == "gpu" else \
            (lane["devices"][0] if one else None)
    lanes.sort(key=lambda ln: (ln["group"] is None, ln["group"] or 0, ln["kind"] != "gpu",
                               ln.get("stream", 0), ln.get("thread", "")))
    return lanes


# ---------------------------------------------------------------- the SVG

def short(name: str) -> str:
    return name if len(name) <= NAME_CHARS else name[:NAME_CHARS - 1] + "\u2026"


def nice_step(span: float, target: int = 10) -> float:
    raw = span / target
    mag = 10 ** math.floor(math.log10(raw))
    return next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)


def fmt_us(v: float, step: float) -> str:
    return number_text(v, 0 if step >= 1 else min(3, -math.floor(math.log10(step))))


class Canvas:
    """The swimlanes SVG's elements in drawing order, with x from picoseconds by the window's
    scale; texts and bars are placed to 0.1 px."""

    def __init__(self, v0: int, v1: int):
        self.v0, self.v1 = v0, v1
        self.scale = (PLOT_X1 - PLOT_X0) / (v1 - v0)
        self.parts: list[str] = []
        self.add = self.parts.append

    def x(self, ps: int) -> float:
        return PLOT_X0 + (ps - self.v0) * self.scale

    def text(self, x, y, s, cls=None, anchor=None, tip=None, **given):
        self.add(svg.text(f"{x:.1f}", f"{y:.1f}", s, tip, class_=cls, text_anchor=anchor, **given))

    def bar(self, x0, w, y, h, cls, tip):
        self.add(svg.element("rect", tip=tip, x=f"{x0:.1f}", y=f"{y:.1f}",
                             width=max(w, MIN_BAR_PX), height=h, class_=cls))


def kernel_tip(ev, lane, instructions) -> str:
    start, end, cls, name, graph, start_t = ev
    lines = [short(name)]
    ins = instructions.get((str(lane["device"]), str(lane["stream"]), start_t))
    if ins and ins[0]:
        lines.append(f"instruction: {ins[0]} ({ins[1]})")
    lines.append(f"{KIND_WORDS[cls]}, {(end - start) / 1e6:,.3f} us at {start / 1e6:,.3f} us"
                 + (", inside a graph" if graph else ""))
    return "\n".join(lines)


def merged_tip(bar, where: str) -> str:
    s, e, cls, n, busy, ev = bar
    return (f"{n} events merged ({KIND_WORDS[cls]}, each narrower than a pixel): "
            f"{busy / 1e6:,.3f} us busy over {(e - s) / 1e6:,.3f} us from {s / 1e6:,.3f} us; "
            f"longest: {short(ev[3])} ({(ev[1] - ev[0]) / 1e6:,.3f} us)\n{where}")


def merged_gap_tip(bar) -> str:
    s, e, cls, n, idle, ev = bar
    g = ev[3]
    what = "GPU gaps whose host events are named" if cls == "hw" else \
        f"gaps on the critical stream ({g['cause']})"
    return (f"{n} {what}, each narrower than a pixel, merged: {idle / 1e6:,.3f} us idle in all "
            f"from {s / 1e6:,.3f} to {e / 1e6:,.3f} us; the longest, "
            f"{(g['end'] - g['start']) / 1e6:,.3f} us, is before {short(g['after'])}")


def gap_tip(g: dict) -> str:
    """The tooltip of one gap on a critical stream."""
    return (f"idle {(g['end'] - g['start']) / 1e6:,.3f} us on the critical stream "
            f"({g['cause']}) from {g['start'] / 1e6:,.3f} us, after "
            f"{short(g['before']) or 'the step start'}, before {short(g['after'])}")


def host_call_tip(call, cls: str, thread: str) -> str:
    """The tooltip of one launch call on a host lane."""
    return (f"{short(call[3])}\n{KIND_WORDS[cls]}, {(call[1] - call[0]) / 1e6:,.3f} us "
            f"at {call[0] / 1e6:,.3f} us; launched {call[5]} GPU event(s) on GPU "
            f"{', '.join(map(str, sorted(call[4])))}\n{thread}")


def host_gap_tip(g: dict, items: list[str]) -> str:
    """The tooltip of one GPU gap on a host lane: the host events in it, largest first."""
    return (f"GPU {g['device']} idle {(g['end'] - g['start']) / 1e6:,.3f} us "
            f"({g['cause']}) from {g['start'] / 1e6:,.3f} us, before "
            f"{short(g['after'])}; host events on {g['thread']} in that gap "
            f"(name=overlap us, largest first): "
            + "; ".join(short(x) for x in items[:HOST_GAP_EVENTS])
            + (f"; and {len(items) - HOST_GAP_EVENTS} more"
               if len(items) > HOST_GAP_EVENTS else ""))


def render_lines(result: dict) -> list[str]:
    """The SVG's header and footer sentences: a rendering of the result, nothing computed."""
    c, w, m, dr = result["chosen"], result["window"], result["merged"], result["drawn"]
    outside = any(n.startswith("the window does not overlap step") for n in result["notes"])
    zoom = ((f"a zoom (--start/--end) outside every analysed step; the step shown for its "
             f"straggler is step {c['step']}: " if outside else
             f"a zoom (--start/--end) inside step {c['step']}, whose straggler is said below: ")
            if w["zoomed"] and not c["whole_capture"] else "")
    out = [f"why this step: {zoom}{c['why']}"]
    sg = result["straggler"]
    of = f" of step {c['step']} (not of the window)" if zoom else ""
    out.append(f"straggler{of}: {sg['sentence']}" if sg else
               f"straggler{of}: " + ("; ".join(result["refusals"] + result["notes"][:1])
                                     or "none"))
    out.append(f"window: {w['start_us']:,.3f} to {w['end_us']:,.3f} us from the profile start"
               + (" (--start/--end)" if w["zoomed"] else
                  " (the whole capture, with a 1% margin)" if c["whole_capture"] else
                  " (the step, with a 1% margin)")
               + f"; one pixel is {m['pixel_us']:,.3f} us")
    narrower = "a pixel" if m["below_px"] == 1 else f"{m['below_px']:g} pixels"
    out.append(f"drawn: {dr['gpu_events']} GPU events and {dr['host_calls']} host calls in the "
               f"window; {m['events']} events narrower than {narrower} are merged into {m['bars']} "
               f"bars (one per lane and kind; hover for the count); {dr['alone']} are drawn one "
               f"by one; {dr['gaps']} gaps (critical streams, and GPU gaps with their host "
               f"events on host lanes) are drawn as {dr['gap_bars']} bars")
    return out


def lay_out_lanes(lanes: list, v0: int, v1: int, merge_ps: float) -> dict:
    """Each lane's bars (lane["bars"]: its events; lane["gap_bars"]: the critical stream's gaps
    on a GPU lane, the GPU gaps whose host events a host lane shows), merged alike, and the
    counts the SVG and the result state."""
    counts = {"alone": 0, "merged_events": 0, "merged_bars": 0, "gpu_events": 0,
              "host_calls": 0, "gaps": 0, "gap_bars": 0, "merged_gaps": 0}
    for lane in lanes:
        lane["bars"] = bars = lay_out(lane["events"], v0, v1, merge_ps)
        counts["gpu_events" if lane["kind"] == "gpu" else "host_calls"] += len(lane["events"])
        merged = [b[3] for b in bars if b[3] != 1]
        counts["alone"] += len(bars) - len(merged)
        counts["merged_events"] += sum(merged)
        counts["merged_bars"] += len(merged)
        gpu = lane["kind"] == "gpu"
        lane["gap_bars"] = gb = lay_out(
            [(g["start"], g["end"], GAP_CLASS.get(g["cause"], "gu") if gpu else "hw", g)
             for g in lane["gaps"]], v0, v1, merge_ps)
        counts["gaps"] += len(lane["gaps"])
        counts["gap_bars"] += len(gb)
        counts["merged_gaps"] += sum(b[3] for b in gb if b[3] > 1)
    return counts


def name_lanes(lanes: list, straggler: dict | None) -> None:
    """Each lane's label, SVG id and label class: GPU, stream name, role, critical stream and
    the straggler (or tie) mark; a host lane's thread, role and the GPUs it serves."""
    marked = {g["device"] for g in straggler["gpus"]} if straggler else set()
    tie = bool(straggler and straggler["tie"])
    for i, lane in enumerate(lanes):
        if lane["kind"] == "gpu":
            d = lane["device"]
            mark = (" (tie for last)" if tie else " (last)") if d in marked else ""
            lane["label"] = f"GPU {d}{mark} \u00b7 {lane['stream_name']} \u00b7 " \
                f"{lane['role']}" + (" \u00b7 critical" if lane["critical"] else "")
            lane["id"] = f"gpu{d}-s{lane['stream']}"
            lane["cls"] = "lab crit" if lane["critical"] else "lab"
            if d in marked:
                lane["cls"] += " tie" if tie else " strag"
        else:
            lane["label"] = f"host \u00b7 {lane['thread']} \u00b7 {lane['role']}" + (
                f" (GPU {', '.join(map(str, lane['devices']))})" if lane["devices"] else "")
            lane["id"] = f"host{i}"
            lane["cls"] = "lab"


def render_svg(result: dict, lanes: list, v0: int, v1: int, chosen: dict, rows_strag: list,
               instructions: dict, merge_ps: float) -> str:
    """The SVG text: a rendering of the result and of the lanes' bars (lay_out_lanes), drawn in
    layers: the header and legend, the time axis, the lanes, the step's bounds, each GPU's end
    with the straggler, the notes."""
    canvas = Canvas(v0, v1)
    head = render_lines(result)
    title = (f"Swimlanes: {result['capture']['run']} / {result['capture']['host']}, "
             + ("the whole capture (no steps)" if chosen["whole_capture"] else
                f"step {chosen['number']}"))
    y = draw_legend(canvas, draw_head(canvas, title, head))
    axis_y = y + 34
    rows_y, bottom = lane_rows(lanes, axis_y)
    draw_axis(canvas, axis_y, bottom)
    draw_backgrounds(canvas, lanes, rows_y)
    for lane, ly in zip(lanes, rows_y, strict=True):
        draw_lane(canvas, lane, ly, instructions, merge_ps)
    if not chosen["whole_capture"]:
        draw_step_bounds(canvas, chosen, axis_y, bottom)
    draw_gpu_ends(canvas, lanes, rows_y, chosen, result["straggler"], rows_strag)
    notes = [f"note: {x}" for x in result["notes"]] + \
        [f"refused: {x}" for x in result["refusals"]]
    height = draw_notes(canvas, notes, bottom + 18)
    return ('<?xml version="1.0" encoding="UTF-8"?>\n'
            + svg.start("svg", xmlns="http://www.w3.org/2000/svg", width=WIDTH, height=height,
                        viewBox=f"0 0 {WIDTH} {height}", font_family="sans-serif",
                        font_size=svg.FONT_PX)
            + svg.element("title", svg.esc(title))
            + svg.element("desc", svg.esc(" | ".join(head)))
            + svg.element("style", STYLE) + svg.element("defs", PATTERNS)
            + svg.element("rect", width=WIDTH, height=height, fill="#fff")
            + "".join(canvas.parts) + "</svg>\n")


def draw_head(canvas: Canvas, title: str, head: list[str]) -> int:
    """The title and the header sentences, wrapped; returns the y of the last line."""
    y = 28
    canvas.text(16, y, title, "title")
    y += 8
    for part in svg.wrap(head, svg.fits(WIDTH - 32, 13), "    "):
        y += 17
        canvas.text(16, y, part, "hd")
    return y


def draw_legend(canvas: Canvas, y: int) -> int:
    """A swatch and a word per kind of bar, in rows; returns the y of the last row."""
    y += 22
    lx = 16
    for cls, label in LEGEND:
        wpx = 22 + svg.text_px(label) + 14
        if lx + wpx > WIDTH - 16:
            lx, y = 16, y + 18
        # x as Python writes the number, unrounded, as the legend always has
        canvas.add(svg.element("rect", x=str(lx), y=y - 10, width=18, height=12, class_=cls))
        canvas.text(lx + 22, y, label)
        lx += wpx
    canvas.add(svg.element("text", "critical stream: " + svg.element(
        "tspan", "bold label", class_="crit"), x=f"{lx:.0f}", y=y))
    return y


def lane_rows(lanes: list, axis_y: int) -> tuple[list[int], int]:
    """Each lane's y below the axis (a gap between groups), and the y below the last lane."""
    y_cur, rows_y = axis_y + 14, []
    for i, lane in enumerate(lanes):
        if i and lane["group"] != lanes[i - 1]["group"]:
            y_cur += GROUP_GAP
        rows_y.append(y_cur)
        y_cur += LANE_PITCH
    return rows_y, y_cur + 4


def draw_axis(canvas: Canvas, axis_y: int, bottom: int) -> None:
    """The time axis at `axis_y`: ticks at a round step, labelled, with grid lines down to
    `bottom`."""
    v0, v1 = canvas.v0, canvas.v1
    tick = nice_step((v1 - v0) / 1e6)
    t = math.ceil(v0 / 1e6 / tick) * tick
    ticks = []
    while t <= v1 / 1e6 + 1e-9:
        ticks.append(t)
        t += tick
    canvas.add(svg.element("line", x1=PLOT_X0, y1=axis_y, x2=PLOT_X1, y2=axis_y, class_="axis"))
    for t in ticks:
        x = canvas.x(t * 1e6)
        canvas.add(svg.element("line", x1=x, y1=axis_y - 5, x2=x, y2=axis_y, class_="axis"))
        canvas.add(svg.element("line", x1=x, y1=axis_y, x2=x, y2=bottom, class_="grid"))
        canvas.text(x, axis_y - 8, fmt_us(t, tick), "small", "middle")
    canvas.text(8, axis_y - 8, f"time: us from the profile start (tick {fmt_us(tick, tick)} us)",
                "small")


def draw_backgrounds(canvas: Canvas, lanes: list, rows_y: list[int]) -> None:
    """A shaded band behind every other group of lanes (a GPU with its host lanes)."""
    spans: dict = {}
    for lane, ly in zip(lanes, rows_y, strict=True):
        g = lane["group"]
        lo, hi = spans.get(g, (ly, ly))
        spans[g] = (min(lo, ly), max(hi, ly + LANE_H))
    for i, (_g, (lo, hi)) in enumerate(spans.items()):
        if i % 2 == 0:
            canvas.add(svg.element("rect", x=0, y=lo - 3, width=WIDTH, height=hi - lo + 6,
                                   class_="bg"))


def draw_lane(canvas: Canvas, lane: dict, ly: int, instructions: dict, merge_ps: float) -> None:
    """One lane as a group: its label (clipped, whole in its tooltip), its track and its bars."""
    label = lane["label"]
    shown = svg.clip(label, PLOT_X0 - 16)
    canvas.add(svg.start("g", id=lane["id"], class_=f"lane-{lane['kind']}"))
    canvas.text(8, ly + LANE_H - 3, shown, lane["cls"], tip=label if shown != label else None)
    canvas.add(svg.element("rect", x=PLOT_X0, y=ly, width=PLOT_X1 - PLOT_X0, height=LANE_H,
                           class_="lane"))
    gpu = lane["kind"] == "gpu"
    for b in lane["bars"]:  # a GPU lane's kernels (named inside where wide enough), or launches
        x0, w = canvas.x(b[0]), (b[1] - b[0]) * canvas.scale
        if b[3] > 1:
            canvas.bar(x0, w, ly, LANE_H, b[2] + " mg", merged_tip(b, f"lane: {label}"))
        elif gpu:
            canvas.bar(x0, w, ly, LANE_H, b[2], kernel_tip(b[5], lane, instructions))
            if w >= BAR_LABEL_MIN_PX:
                canvas.text(x0 + 2, ly + LANE_H - 4, svg.clip(b[5][3], w - 4, 9),
                            "small white" if b[2] == "kg" else "small")
        else:
            canvas.bar(x0, w, ly, LANE_H, b[2], host_call_tip(b[5], b[2], lane["thread"]))
    if gpu:
        draw_gpu_marks(canvas, lane, ly, merge_ps)
    else:
        draw_host_gaps(canvas, lane, ly)
    canvas.add("</g>")


def draw_gpu_marks(canvas: Canvas, lane: dict, ly: int, merge_ps: float) -> None:
    """A GPU lane's strip over what ran inside a graph, and the critical stream's gaps along
    its foot."""
    graph = merge_spans(((max(e[0], canvas.v0), min(e[1], canvas.v1)) for e in lane["events"]
                         if e[4]), merge_ps)
    for s, e in graph:
        canvas.add(svg.element("rect", x=canvas.x(s), y=ly - 1,
                               width=max((e - s) * canvas.scale, MIN_BAR_PX), height=2.5,
                               class_="gr"))
    for b in lane["gap_bars"]:
        canvas.bar(canvas.x(b[0]), (b[1] - b[0]) * canvas.scale, ly + LANE_H - 3, 3,
                   b[2] if b[3] == 1 else b[2] + " mgap",
                   gap_tip(b[5][3]) if b[3] == 1 else merged_gap_tip(b))


def draw_host_gaps(canvas: Canvas, lane: dict, ly: int) -> None:
    """A host lane's GPU gaps it shows host events for (the largest event named inside where
    wide enough)."""
    for b in lane["gap_bars"]:
        x0, w = canvas.x(b[0]), (b[1] - b[0]) * canvas.scale
        g = b[5][3]
        items = [x for x in g["host"].split(" | ") if x]
        canvas.bar(x0, w, ly + 3, LANE_H - 6, "hw" if b[3] == 1 else "hw mgap",
                   host_gap_tip(g, items) if b[3] == 1 else merged_gap_tip(b))
        if w >= BAR_LABEL_MIN_PX and items:
            canvas.text(x0 + 2, ly + LANE_H - 4, svg.clip(items[0], w - 4, 9), "small")


def draw_step_bounds(canvas: Canvas, chosen: dict, top: int, bottom: int) -> None:
    """The step's begin and end, where they are in the window: a dashed line and a word."""
    n = chosen["number"]
    for t, word in ((chosen["start"], "begins"), (chosen["end"], "ends")):
        if canvas.v0 <= t <= canvas.v1:
            x = canvas.x(t)
            canvas.add(svg.element("line", tip=f"step {n} {word} at {t / 1e6:,.3f} us", x1=x,
                                   y1=top - 22, x2=x, y2=bottom, class_="step"))
            canvas.text(x + (3 if word == "begins" else -3), top - 20, f"step {n} {word}",
                        "small", None if word == "begins" else "end")


def draw_gpu_ends(canvas: Canvas, lanes: list, rows_y: list[int], chosen: dict,
                  straggler: dict | None, rows_strag: list) -> None:
    """Each GPU's end of the step, across its lanes, and the straggler's (or the tie's) mark."""
    marked = {g["device"] for g in straggler["gpus"]} if straggler else set()
    tie = bool(straggler and straggler["tie"])
    ends = {r["device"]: r for r in rows_strag if r["step"] == chosen["number"]}
    gpu_rows: dict[int, list] = {}
    for lane, ly in zip(lanes, rows_y, strict=True):
        if lane["kind"] == "gpu":
            gpu_rows.setdefault(lane["device"], []).append(ly)
    for d, ys in sorted(gpu_rows.items()):
        r = ends.get(d)
        if r is None or not canvas.v0 <= r["end"] <= canvas.v1:
            continue
        x = canvas.x(r["end"])
        lo, hi = min(ys) - 2, max(ys) + LANE_H + 2
        cls = ("tiel" if tie else "stragl") if d in marked else "gend"
        canvas.add(svg.element(
            "line", tip=f"GPU {d} ends "
            f"{'the window' if chosen['whole_capture'] else 'step ' + str(chosen['number'])} at "
            f"{r['end'] / 1e6:,.3f} us, {r['lag'] / 1e6:,.3f} us after the first GPU; last "
            f"kernel {short(r['last_kernel'])}; last stretch: {r['last_stretch']}",
            x1=x, y1=lo, x2=x, y2=hi, class_=cls))
        if d in marked:
            first_end = min(e["end"] for e in ends.values())
            draw_straggler(canvas, d, r, x, (lo, hi), canvas.x(max(first_end, canvas.v0)), tie)


def draw_straggler(canvas: Canvas, d: int, r: dict, x: float, span: tuple, xf: float,
                   tie: bool) -> None:
    """A marked GPU's lag, from the first GPU's end (`xf`) to its own (`x`), across its lanes'
    `span`, and its label on a light box."""
    lo, hi = span
    cls = "tiel" if tie else "stragl"
    ym = (lo + hi) / 2
    canvas.add(svg.element("line", x1=xf, y1=ym, x2=x, y2=ym, class_=cls))
    word = "tie for last" if tie else "last"
    label = f"GPU {d} {word}: +{r['lag'] / 1e6:,.3f} us ({r['last_stretch']})"
    wpx = svg.text_px(label) + 6
    right = x + 6 + wpx <= WIDTH
    tx = x + 6 if right else x - 6 - wpx
    canvas.add(svg.element("rect", x=tx - 3, y=f"{lo - 14:.1f}", width=wpx, height=14,
                           fill="#fff", fill_opacity="0.85"))
    canvas.text(tx, lo - 3, label, "tie" if tie else "strag", id=f"straggler-gpu{d}", data_device=d)


def draw_notes(canvas: Canvas, notes: list[str], y: int) -> int:
    """One line per note (clipped, whole in its tooltip); returns the SVG's height."""
    for line in notes:
        canvas.text(16, y, svg.clip(line, WIDTH - 32), "note",
                    tip=line if svg.text_px(line) > WIDTH - 32 else None)
        y += 15
    return int(y + 8)


# ---------------------------------------------------------------- the step

def run(capture, out: Path, step: int | None = None, start_us: float | None = None,
        end_us: float | None = None, kernels_when_told: bool = False) -> tuple[dict, list]:
    """Step 3 on a capture_inputs.Capture: draws the step into `out` (swimlanes.svg,
    stragglers.csv, swimlanes.json, each written to a temporary name and renamed); runs step 1
    first where its tables are missing. Returns the result and the (file, rows) written.
    Raises SwimlaneError (WindowError for an empty window), capture_inputs.CaptureError and
    trace_reader.TraceError. With `kernels_when_told`, step 4's kernels.csv is read only once
    a line comes on standard input (investigate.py runs step 4 meanwhile)."""
    out = Path(out)
    if ran := not all((out / f).is_file() for f in STEP1_FILES):  # one of its tables missing
        import skip_stats  # sibling skill, standard library only
        skip_stats.run(capture, out)  # step 1 runs first
    s1, steps, gaps = read_step1(out)
    chosen = pick_step(s1, steps, step, start_us, end_us)
    v0, v1, zoomed = window(chosen, start_us, end_us)
    dev = adapters.of_results(scratch.Scratch(out).json("capture_info.json"), s1)
    rows = read_rows(out, steps, chosen, v0, v1, zoomed, dev)
    strag_rows = straggler_rows(steps, rows.per_step_gpu, gaps, rules.compared_gpus(s1))
    straggler, notes, refusals = straggler_of(chosen, strag_rows)
    notes += [f"not compared for the straggler (other work): {x}" for x in rules.other_work(s1)]
    lanes = build_lanes(rows, steps, chosen, gaps, v0, v1)
    attach_gaps(lanes, gaps, v0, v1)
    pixel_ps = (v1 - v0) / (PLOT_X1 - PLOT_X0)
    counts, merge_px, merge_ps = fit_bars(lanes, v0, v1, pixel_ps)
    if merge_px > MERGE_BELOW_PX:
        notes.append(f"the window holds more events at least a pixel wide than {MAX_BARS:,} "
                     f"bars can show: events narrower than {merge_px:g} pixels were merged; "
                     "zoom with --start/--end to see them one by one")
    if kernels_when_told:
        step_cli.wait_until_told("step 4's kernels.csv")
    instructions, attribution, why = tooltip_instructions(out, lanes)
    notes += why + window_notes(s1, chosen, ran, zoomed, v0, v1)
    result = {
        "step": "swimlanes", "status": "done",
        "capture": {"run": capture.files.run_dir.name, "host": capture.files.host},
        "inputs": {"step1": "ran" if ran else "read", "attribution": attribution},
        "chosen": {"step": chosen["number"], "why": chosen["why"], "source": chosen["source"],
                   "partial": chosen["partial"], "whole_capture": chosen["whole_capture"],
                   "start_us": us_value(chosen["start"]), "end_us": us_value(chosen["end"]),
                   "duration_us": scratch.figure(us_value(chosen["dur"]), "us", "measured")},
        "window": {"start_us": us_value(v0), "end_us": us_value(v1), "zoomed": zoomed},
        "lanes": [], "merged": {"events": counts["merged_events"], "bars": counts["merged_bars"],
                                "pixel_us": round(pixel_ps / 1e6, 6), "below_px": merge_px},
        "drawn": {k: counts[k] for k in ("gpu_events", "host_calls", "alone", "gaps", "gap_bars")},
        "straggler": straggler,
        "steps_last": steps_last(strag_rows),
        "notes": notes, "refusals": refusals, "tables": {},
    }
    name_lanes(lanes, straggler)
    result["lanes"] = [lane_json(lane) for lane in lanes]
    text = dev.said(render_svg(result, lanes, v0, v1, chosen, strag_rows, instructions, merge_ps))
    result["notes"] = [dev.said(n) for n in notes]
    return result, write_outputs(out, result, text, strag_rows)


def pick_step(s1: dict, steps: dict, step: int | None, start_us: float | None,
              end_us: float | None) -> dict:
    """The step to draw (choose_step): --step N, else the step a --start/--end window overlaps
    most, else the median one; `why` says which rule chose it."""
    zoom = start_us is not None or end_us is not None
    if step is None and zoom:
        step = step_of_window(steps, start_us, end_us)  # the step the zoom looks into
    chosen = choose_step(s1, steps, step)
    if step is not None and chosen["why"].startswith(f"step {step}, chosen by --step") and zoom:
        chosen["why"] = chosen["why"].replace("chosen by --step", "the step the window (--start/"
                                              "--end) overlaps most", 1)
    return chosen


def read_rows(out: Path, steps: dict, chosen: dict, v0: int, v1: int, zoomed: bool,
              dev: adapters.Adapter = adapters.ADAPTERS["GPU"]) -> Rows:
    """rows.csv read for the chosen step and the window, each event's kind as its device
    draws it (`dev`); SwimlaneError where it holds no GPU event, or none in a zoomed window."""
    path = out / "rows.csv"
    step_cli.progress("reading step 1's rows.csv", path.stat().st_size >> 20 if path.is_file()
                      else 0, unit="MiB")
    rows = Rows(out, set(steps), chosen["number"], v0, v1, dev.event_kind)
    if rows.span is None:
        raise SwimlaneError(f"{path} holds no GPU event, so there are no GPU lanes to draw")
    if zoomed and (v1 <= rows.span[0] or v0 >= rows.span[1]):
        raise SwimlaneError(f"the window {us_value(v0):,.3f} to {us_value(v1):,.3f} us holds "
                            "no GPU event: the capture's GPU events span "
                            f"{us_value(rows.span[0]):,.3f} to {us_value(rows.span[1]):,.3f} us")
    return rows


def attach_gaps(lanes: list, gaps: list, v0: int, v1: int) -> None:
    """Each GPU lane's gaps in the window (lane["gaps"], by start): its stream's, from gaps.csv,
    which holds the critical streams' gaps."""
    crit_gaps: dict[tuple, list] = {}
    for g in gaps:
        if g["start"] < v1 and g["end"] > v0:
            crit_gaps.setdefault((g["device"], g["stream"]), []).append(g)
    for lane in lanes:
        if lane["kind"] == "gpu":
            lane["gaps"] = sorted(crit_gaps.get((lane["device"], lane["stream"]), []),
                                  key=lambda g: g["start"])


def fit_bars(lanes: list, v0: int, v1: int, pixel_ps: float) -> tuple[dict, float, float]:
    """The lanes laid out (lay_out_lanes) merging events narrower than MERGE_BELOW_PX pixels,
    the width doubled until the bars number at most MAX_BARS (or it reaches MAX_MERGE_PX).
    Returns the counts, the merge width in pixels and in picoseconds."""
    merge_px = MERGE_BELOW_PX
    while True:
        merge_ps = merge_px * pixel_ps
        counts = lay_out_lanes(lanes, v0, v1, merge_ps)
        if counts["alone"] + counts["merged_bars"] + counts["gap_bars"] <= MAX_BARS or \
                merge_px >= MAX_MERGE_PX:
            return counts, merge_px, merge_ps
        merge_px *= 2


def tooltip_instructions(out: Path, lanes: list) -> tuple[dict, dict | None, list[str]]:
    """The HLO instruction of each kernel drawn alone, from step 4's kernels.csv where it is in
    `out` (read_instructions); the result's `inputs.attribution` (None without the file); notes
    where the file cannot be used or joins none of them."""
    att = out / ATTRIBUTION_FILE
    if not att.is_file():
        return {}, None, []
    keys = {(str(lane["device"]), str(lane["stream"]), b[5][5]) for lane in lanes
            if lane["kind"] == "gpu" for b in lane["bars"] if b[3] == 1}
    instructions, why_not = read_instructions(out, keys)
    notes = [why_not] if why_not else []
    if keys and not instructions and not why_not:
        notes.append(f"{ATTRIBUTION_FILE} is present but none of the kernels drawn alone "
                     "joins it on (device, stream, start_us): is it another capture's?")
    attribution = {"file": str(ATTRIBUTION_FILE), "kernels_alone": len(keys),
                   "joined": len(instructions)}
    return instructions, attribution, notes


def window_notes(s1: dict, chosen: dict, ran: bool, zoomed: bool, v0: int, v1: int) -> list:
    """Notes on how the drawing came about: step 1 run first, a zoom outside the step, and
    step 1's straggler over all analysed steps (skip_stats.json `straggler`)."""
    notes = []
    if ran:
        notes.append("step 1's tables were missing here: skip_stats.py ran first and wrote them")
    if zoomed and not (v0 < chosen["end"] and v1 > chosen["start"]):
        notes.append(f"the window does not overlap step {chosen['number']}: its begin, end and "
                     "straggler mark are outside it")
    s1_strag = s1.get("straggler") if isinstance(s1.get("straggler"), dict) else None
    if not s1_strag or chosen["whole_capture"]:
        return notes
    if s1_strag.get("gpu") is None:
        notes.append(f"over all {s1_strag['steps']} analysed steps, step 1 finds no GPU "
                     "ending a step last by more than its margin: ties (skip_stats.json "
                     "straggler)")
    else:
        notes.append(f"over all {s1_strag['steps']} analysed steps, step 1 finds GPU "
                     f"{s1_strag['gpu']} finishing last in {s1_strag['steps_last']} of them"
                     + ("" if s1_strag.get("is_straggler", True) else
                        ", not enough to call it a straggler")
                     + " (skip_stats.json straggler)")
    return notes


def write_outputs(out: Path, result: dict, text: str, strag_rows: list) -> list:
    """swimlanes.svg, stragglers.csv and swimlanes.json (with the sizes in `tables`), each to a
    temporary name and renamed; returns the (file, rows or bytes) written."""
    csv_rows = [[r["step"], r["device"], rules.us(r["end"]), rules.us(r["lag"]),
                 r["last_kernel"], r["last_stretch"],
                 rules.us(r["stretch_start"]), rules.us(r["stretch"]),
                 int(r["finishes_last"]), int(r["compared"])] for r in strag_rows]
    with rules.replace_files(out, ".swimlanes-") as tmp:
        (tmp / SVG_FILE).write_text(text, encoding="utf-8")
        n = scratch.write_table(tmp, STRAGGLERS_FILE, csv_rows)
        result["tables"] = {SVG_FILE: len(text.encode("utf-8")), STRAGGLERS_FILE: n}
        scratch.write_result(tmp, RESULT_FILE, result)
    return [(SVG_FILE, len(text.encode("utf-8"))), (STRAGGLERS_FILE, n), (RESULT_FILE, None)]


def steps_last(rows: list[dict]) -> list[dict]:
    """Per analysed step: the GPUs that finish last (several: a tie) and the spread of ends."""
    out = []
    for n in sorted({r["step"] for r in rows}):
        mine = [r for r in rows if r["step"] == n and r["compared"]]
        if not mine:
            continue  # no two GPUs run the same programs: nobody finishes last
        last = sorted(r["device"] for r in mine if r["finishes_last"])
        out.append({"step": n, "gpus": last, "tie": len(last) > 1,
                    "spread_us": us_value(max(r["lag"] for r in mine))})
    return out


def lane_json(lane: dict) -> dict:
    if lane["kind"] == "gpu":
        return {"id": lane["id"], "kind": "gpu", "device": lane["device"],
                "stream": lane["stream"], "stream_name": lane["stream_name"],
                "role": lane["role"], "critical": lane["critical"], "in_step": lane["in_step"],
                "events": len(lane["events"]), "label": lane["label"]}
    return {"id": lane["id"], "kind": "host", "thread": lane["thread"], "role": lane["role"],
            "devices": lane["devices"], "events": len(lane["events"]),
            "gaps": len(lane["gaps"]), "label": lane["label"]}
