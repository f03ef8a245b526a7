"""Step 6's model of the steps, read from the scratch folder: the steps used and the median
one, their frames (start, end, window, the GPU that ends each), the median step's critical path
cut into slices (host-late, compute, copies, collectives, idle), what is exposed after the last
host gap, the straggler, and the instructions against their ceilings: the `Context` every cause
of changes.py reads. Reads only the scratch folder; writes nothing."""

from __future__ import annotations

import csv
import functools
import re
import statistics
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from tracekit import scratch, step_cli
from tracekit import trace_rules as rules
from tracekit.scratch import number
from tracekit.trace_rules import number_text, us_text

# Instructions and Python lines listed as causes: the few a reader acts on; the rest of the
# kernel time stays in changes.json's critical path as compute.
TOP_INSTRUCTIONS = 5
# A step of at least this many program executions (step 1's steps.csv `executions`) is a
# dispatch of several programs: the GPU idle between them is a cause of its own (jit the
# function that calls them), apart from the host's lateness inside one program.
DISPATCH_MIN_EXECUTIONS = 2
# A saving below this in the median is not listed: 1 us is below the jitter of a single launch,
# so a smaller figure says nothing about a cause.
MIN_SAVING_US = 1.0
# A measured target is named in the cause's sentence where it is at least this much above the
# instruction's own share (relative): closer than 10% is the spread of one kind of kernel, not
# another way to run it (saving_measured_us counts any distance to it)
TARGET_MARGIN = 1.1


class ChangesError(step_cli.StepError):
    """The scratch folder cannot be used; the message is one sentence."""


# ---------------------------------------------------------------- intervals (us, sorted, disjoint)

def union(iv) -> list:
    out = []
    for s, e in sorted(iv):
        if e <= s:
            continue
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def subtract(a: list, b: list) -> list:
    """a minus b, both sorted and disjoint."""
    out, j = [], 0
    for s, e in a:
        while j < len(b) and b[j][1] <= s:
            j += 1
        k, cur = j, s
        while k < len(b) and b[k][0] < e:
            if b[k][0] > cur:
                out.append([cur, b[k][0]])
            cur = max(cur, b[k][1])
            k += 1
        if cur < e:
            out.append([cur, e])
    return out


def total(a: list, lo: float = float("-inf"), hi: float = float("inf")) -> float:
    return sum(max(0.0, min(e, hi) - max(s, lo)) for s, e in a)


# ---------------------------------------------------------------- load

@functools.cache
def tables(out: Path) -> scratch.Scratch:
    """The scratch folder's files, each read once (scratch.Scratch)."""
    return scratch.Scratch(out)


@dataclass(frozen=True, slots=True)
class StepRow:
    """One GPU's row of one step in steps.csv, as step 6 reads it (microseconds): its start,
    end and duration, its critical stream, its host-late, device-wait and unknown gaps on that
    stream, its kernels' summed time (il_us - il_idle_us), its program executions, the period
    to the next step's start and the critical stream's wait between two executions."""
    start: float
    end: float
    dur: float
    crit: str
    host_late: float
    device_wait: float
    unknown: float
    kernel_sum: float
    executions: int | None
    period: float | None
    between_programs: float


def read_steps(out: Path) -> dict:
    """steps.csv as {step: {device: StepRow}} (read through its declared types:
    scratch.Scratch.typed)."""
    try:
        rows = tables(out).typed("steps.csv", need=(
            "step", "device", "start_us", "end_us", "dur_us", "critical_stream", "host_late_us",
            "device_wait_us", "unknown_gap_us", "il_us", "il_idle_us"))
    except scratch.TableError as exc:
        raise ChangesError(str(exc)) from None
    if rows is None:
        raise ChangesError(f"{out} has no steps.csv: run step 1 (skip_stats.py) into this "
                           "scratch folder first")
    steps: dict = {}
    for r in rows:
        if not isinstance(r["step"], int) or r["start_us"] is None or r["end_us"] is None:
            raise ChangesError(f"{out / 'steps.csv'} has a row that is not step 1's (step "
                               f"{r['step']!r}, device {r['device']!r}); run "
                               "skip_stats.py again")
        steps.setdefault(r["step"], {})[r["device"]] = StepRow(
            r["start_us"], r["end_us"], r["dur_us"],
            "" if r["critical_stream"] is None else str(r["critical_stream"]),
            r["host_late_us"] or 0.0, r["device_wait_us"] or 0.0, r["unknown_gap_us"] or 0.0,
            (r["il_us"] or 0.0) - (r["il_idle_us"] or 0.0), r["executions"], r["period_us"],
            r["between_programs_idle_us"] or 0.0)
    return steps


def read_gaps(path: Path, bound: dict, median: int | None) -> dict | None:
    """gaps.csv streamed, for each step's bounding GPU's critical stream (`bound`: step ->
    (device, stream) as text): the end of its last host-late gap, its other gaps (device_wait,
    unknown) as intervals, and the median step's gaps in full (for their host events). Host-late
    lines, most of a launch-bound file, are kept as text and only the last one is parsed."""
    want = {str(n): (d, st) for n, (d, st) in bound.items()}
    last_host: dict = {}
    other: dict = {n: [] for n in bound}
    median_rows: list = []
    med = str(median)
    with scratch.lines(path, "gaps.csv") as fh:
        if fh is None:
            return None  # no step 1's gaps.csv: the causes that need it are refused
        for line in fh:
            p = line.split(",", 3)
            if len(p) < 4 or want.get(p[2]) != (p[0], p[1]):
                continue
            if p[2] == med:
                median_rows.append(dict(zip(GAPS, next(csv.reader([line])), strict=False)))
            if ",host_late," in p[3]:
                last_host[p[2]] = p[3]
            else:
                q = p[3].split(",", 2)
                other[int(p[2])].append([float(q[0]), float(q[1])])
    host_end = {int(k): float(v.split(",", 2)[1]) for k, v in last_host.items()}
    return {"host_end": host_end, "other": other, "median_rows": median_rows}


# The fast readers of gaps.csv and rows.csv below split lines by the places of a few columns in
# their declarations (scratch.py); a declaration that moves them fails here, at import, rather
# than being misread.
GAPS = scratch.columns("gaps.csv")
ROWS = scratch.columns("rows.csv")
ROW_FIELDS = len(ROWS)
ROW_KERNEL, ROW_HLO_OP = ROWS.index("kernel"), ROWS.index("hlo_op")
_CAT = ROWS.index("category")
if (GAPS[:5] != ["device", "stream", "step", "start_us", "end_us"]
        or ROWS[:2] != ["device", "stream"]
        or ROWS[_CAT:_CAT + 4] != ["category", "start_us", "dur_us", "end_us"]
        or ROWS[-3:] != ["hlo_op", "hlo_module", "step"]):
    raise scratch.ScratchError("changes.py reads gaps.csv and rows.csv by their columns' "
                               "places: their declarations moved them (scratch.py)")
# a rows.csv line's category and times: the only unquoted run of these four fields in a line
ROW_TIMES = re.compile(r",(compute|collective|memcpy),(-?[0-9.]+),-?[0-9.]+,(-?[0-9.]+),")


def add_time(sums: dict, key, start: float, end: float) -> None:
    """Adds an event's time (end - start) to `sums[key]`."""
    sums[key] = sums.get(key, 0.0) + end - start


def add_collective(sums: dict, line: str, step: str, device: str) -> None:
    """Adds a collective's time to `sums[(step, device)]`; any other line is left unparsed."""
    if ",collective," in line and step:
        m = ROW_TIMES.search(line)
        if m is not None and m.group(1) == "collective":
            add_time(sums, (int(step), device), float(m.group(2)), float(m.group(3)))


def row_label(line: str, cat: str) -> tuple[str, str] | None:
    """A collective or memcpy line's category and label: its hlo_op, else its kernel name; a
    memcpy with an hlo_op is the program's own copy, an instruction, so its category becomes
    compute. None when the line, parsed as CSV, does not have ROW_FIELDS fields."""
    # hlo_op, hlo_module, step are the last three fields (no commas in them)
    t = line.rsplit(",", 3)
    op = label = t[1] if len(t) == 4 and '"' not in t[1] and '"' not in t[2] else None
    if not op:
        r = next(csv.reader([line]))
        if len(r) != ROW_FIELDS:
            return None
        op = r[ROW_HLO_OP]
        label = op or r[ROW_KERNEL]
    if cat == "memcpy" and op:
        cat = "compute"  # the program's own copy: an instruction
    return cat, label


def read_rows(path: Path, bound: dict, all_collectives: bool, after: dict | None = None
              ) -> dict | None:
    """rows.csv streamed, for each step's bounding GPU (`bound`: step -> (device, critical
    stream) as text): the end of its critical stream's last event, the critical stream's
    collectives and unlabelled memcpys, and every event of its other streams; where
    `all_collectives`, the summed collective time of every GPU and step. The critical stream's
    lines are parsed for their times where `after` (step -> the end of its last host-late gap,
    or the step's start) names the step: its events ending after that instant give its busy
    time there, sub-microsecond gaps included; other GPUs' lines are skipped unparsed."""
    after = {str(n): v for n, v in (after or {}).items()}
    want = {str(n): (d, f",{st},") for n, (d, st) in bound.items()}
    crit_after: dict = {n: [] for n in bound}
    crit: dict = {n: [] for n in bound}
    others: dict = {n: [] for n in bound}
    crit_last, coll_sum, bad = {}, {}, 0
    with scratch.lines(path, "rows.csv") as fh:
        if fh is None:
            return None  # no step 1's rows.csv: the causes that need it are refused
        for line in fh:
            step = line[line.rfind(",") + 1:].rstrip()
            b = want.get(step)
            i = line.find(",")
            if b is None or b[0] != line[:i]:
                if all_collectives:
                    add_collective(coll_sum, line, step, line[:i])
                continue
            on_crit = line.startswith(b[1], i)
            if on_crit and ",collective," not in line and ",memcpy," not in line:
                crit_last[step] = line
                if step not in after:
                    continue
            if (m := ROW_TIMES.search(line)) is None:
                bad += 1
                continue
            cat, start, end = m.group(1), float(m.group(2)), float(m.group(3))
            n = int(step)
            if on_crit:
                crit_last[step] = line
                if step in after and end > after[step]:
                    crit_after[n].append([start, end])
                if cat == "compute":
                    continue
            if cat == "collective" and all_collectives:
                add_time(coll_sum, (n, line[:i]), start, end)
            label = ""
            if cat != "compute":
                if (labelled := row_label(line, cat)) is None:
                    bad += 1
                    continue
                cat, label = labelled
            if cat == "compute" and on_crit:
                continue  # the critical stream's compute comes from its budget
            (crit if on_crit else others)[n].append(
                (start, end, "arg" if cat == "memcpy" else cat, label))
    ends = {int(step): ROW_TIMES.search(line) for step, line in crit_last.items()}
    return {"crit_end": {n: float(m.group(3)) for n, m in ends.items() if m is not None},
            "crit": crit, "others": others, "coll_sum": coll_sum,
            "crit_after": {n: union(v) for n, v in crit_after.items()} if after else None,
            "bad": bad}


def guarded(reader, path: Path, *args) -> tuple[dict | None, str]:
    """(a streamed table, "") or (None, why it was not read: not in the folder, or a value of
    it that does not parse): the causes that need it are refused with that reason, never a
    traceback. A table there whose header is not step 1's is a TableError (scratch.opened)."""
    try:
        got = reader(path, *args)
    except (ValueError, IndexError, KeyError) as exc:
        said = rules.printable(str(exc))[:80]
        return None, f"a line of {path.name} does not parse ({said}), so it is not step 1's"
    return got, "" if got is not None else f"{path.name} is not in {path.parent}"


# ---------------------------------------------------------------- steps and the critical path

def choose_steps(steps: dict, s1: dict | None, notes: list) -> tuple[list, bool]:
    """The steps the figures are medians over: complete analysed steps, else all analysed ones
    (a capture without steps is one window)."""
    if s1 is None:
        notes.append("skip_stats.json is missing: every step in steps.csv is taken as complete")
        return sorted(steps), False
    st = s1.get("steps") or {}
    analysed = [n for n in st.get("analysed", sorted(steps)) if n in steps]
    partial = set(st.get("partial_analysed", []))
    complete = [n for n in analysed if n not in partial]
    whole = str(st.get("source", "")).startswith("the whole capture")
    if complete:
        return complete, whole
    if analysed:
        notes.append("no complete step: the figures are of the partial step(s) "
                     f"{', '.join(map(str, analysed))}"
                     + (" (the capture has no steps: step 1 took the whole capture as one "
                        "window, so shares are of that window, not of a step)" if whole else ""))
    return analysed, whole


@dataclass(frozen=True)
class Frame:
    """One step as step 6 frames it (us from the profile start): its number, the GPU that ends
    it (`bound`), its start and end on that GPU, the next analysed step's start (None where none
    follows), the end of its window and the window (start to the later of its end and the next
    step's start), and the GPUs that finish it last (step 1's tie rule)."""
    step: int
    bound: int
    start: float
    end: float
    next_start: float | None
    window_end: float
    window: float
    last: list


@dataclass(frozen=True)
class CriticalPath:
    """A step's window on the GPU that ends it, cut into disjoint slices (us, each counted once:
    critical_path), with the part of each after the last host-late gap (`_exposed`), the
    exposed share of compute, and where rows.csv was read, the labels of the collectives and
    memcpys (`labels`) and the count and time of the gaps the critical stream waited in."""
    window: float
    host_late: float
    compute: float
    compute_exposed: float
    memcpy_arg: float
    memcpy_arg_exposed: float
    collective: float
    collective_exposed: float
    idle_before: float
    idle_before_exposed: float
    idle_between: float
    exposure: float
    labels: dict = field(default_factory=dict)
    big_gaps: tuple = (0, 0.0)


def step_frames(steps: dict, chosen: list, compared: set | None = None) -> dict:
    """Per chosen step: its start, the GPU that ends it (the bounding GPU, among the compared
    GPUs: rules.compared_gpus), its end, the start of the next analysed step (when there is one),
    and the window the critical path covers: from the start to the later of the step's end and
    the next step's start."""
    frames = {}
    for n in chosen:
        g = {d: r for d, r in steps[n].items() if compared is None or d in compared} or steps[n]
        end = max(r.end for r in g.values())
        b = min(d for d, r in g.items() if r.end == end)
        start = g[b].start
        nxt = steps.get(n + 1)
        next_start = min(r.start for r in nxt.values()) if nxt else None
        if next_start is None and g[b].period:
            # the next step is not analysed (a partial one), but step 1 measured the period
            next_start = start + g[b].period
        wend = max(end, next_start) if next_start is not None else end
        frames[n] = Frame(n, b, start, end, next_start, wend, wend - start,
                          # step 1's tie: within its margin of the latest end
                          rules.last_finishers(
                              {d: round(r.end * 1e6) for d, r in g.items()},
                              rules.straggler_margin_ps(round((end - start) * 1e6))))
    return frames


def median_step(out: Path, chosen: list, frames: dict) -> tuple[int, str]:
    """The step the figures are of: the one step 3 drew (swimlanes.json) when it chose the median
    step among these, else the lower-median step by duration (a step that ran, as step 3
    chooses it)."""
    sw = tables(out).json("swimlanes.json") or {}
    ch = sw.get("chosen") or {}
    if ch.get("step") in chosen and str(ch.get("why", "")).startswith(f"step {ch['step']}: the "
                                                                         "median"):
        return ch["step"], (f"step {ch['step']}: the step step 3 drew (swimlanes.json), the "
                            "median-duration step")
    s1 = tables(out).json("skip_stats.json") or {}
    median = (s1.get("frames") or {}).get("median_step") if isinstance(s1, dict) else None
    if median in chosen:
        return median, (f"step {median}: step 1's median step (skip_stats.json frames), the "
                        f"lower-median step by duration of the {len(chosen)} step(s) used")
    order = sorted(chosen, key=lambda n: (frames[n].end - frames[n].start, n))
    n = order[(len(order) - 1) // 2]
    return n, (f"step {n}: the lower-median step by duration of the {len(order)} step(s) used")


def intersect(a: list, b: list) -> list:
    return subtract(a, subtract(a, b))


def critical_path(fr: Frame, row: StepRow, rows: dict | None, gaps: dict | None) -> CriticalPath:
    """The bounding GPU's step window cut into disjoint slices, each µs counted once: on its
    critical stream up to its last event, host_late (waiting on a launch), the stream's own
    collectives and unlabelled memcpys, compute (everything else it ran), and its other gaps,
    filled by what other streams ran in them (compute, then unlabelled memcpys, then
    collectives) or idle (idle_before); after the critical stream's last event, what other
    streams ran, the rest idle until the next step (idle_between). `L`: the end of the last
    host-late gap: work before it is hidden behind the host (shortening it only lengthens that
    gap), work after it is exposed (the `_exposed` figures; `exposure`, the exposed share of
    compute)."""
    n, s0, s1 = fr.step, fr.start, fr.window_end
    L = min(max(s0, (gaps or {}).get("host_end", {}).get(n, s0)), s1)
    out = {"window": s1 - s0, "host_late": row.host_late}
    out.update(budget_slices(row, s0, s1, L) if rows is None else
               event_slices(fr, row, rows, (gaps or {}).get("other", {}).get(n, []), L))
    out["exposure"] = out["compute_exposed"] / out["compute"] if out["compute"] > 0 else 0.0
    return CriticalPath(**out)


def budget_slices(row: StepRow, s0: float, s1: float, L: float) -> dict:
    """The slices without rows.csv: the critical stream's budget from steps.csv alone (its busy
    time all compute, its other gaps all idle)."""
    gaps_total = row.device_wait + row.unknown
    busy = max(0.0, row.dur - row.host_late - gaps_total)
    return {"compute": busy, "compute_exposed": max(0.0, min(busy, row.end - L)),
            "memcpy_arg": 0.0, "memcpy_arg_exposed": 0.0, "collective": 0.0,
            "collective_exposed": 0.0, "idle_before": gaps_total,
            "idle_before_exposed": gaps_total if L <= s0 else 0.0,
            "idle_between": max(0.0, s1 - row.end)}


def window_events(rows: dict, n: int, s0: float, s1: float) -> tuple[dict, dict, dict]:
    """A step's events of rows.csv cut to its window: the time of each collective and memcpy
    label (`arg`, `collective`: label -> us), the critical stream's collectives and unlabelled
    memcpys, and the other streams' compute, unlabelled memcpys and collectives, as (start, end)
    pairs by kind."""
    labels: dict = {"arg": {}, "collective": {}}
    crit: dict = {"arg": [], "collective": []}
    other: dict = {"compute": [], "arg": [], "collective": []}
    for where, into in (("crit", crit), ("others", other)):
        for a, b, kind, label in rows[where][n]:
            a, b = max(a, s0), min(b, s1)
            if b <= a:
                continue
            if kind in labels:
                add_time(labels[kind], label, a, b)
            if kind in into:
                into[kind].append((a, b))
    return labels, crit, other


def layered(crit: dict, other: dict) -> dict:
    """The window's events by priority at each instant: compute, then unlabelled memcpys, then
    collectives. Other streams': `c` compute, `a` memcpys, `k` collectives, each less those before
    it. The critical stream's own collectives and memcpys as they ran (`crit_k0`, `crit_a0`) and
    less what other streams computed (or copied) meanwhile (`crit_k`, `crit_a`); the parts taken
    off them count as compute (`to_c`) or memcpy (`to_a`), never as exposed."""
    oc = union(other["compute"])
    oa = subtract(union(other["arg"]), oc)
    ok = subtract(union(other["collective"]), union(oc + oa))
    ck0 = union(crit["collective"])
    ca0 = subtract(union(crit["arg"]), ck0)
    ck1 = subtract(ck0, oc)
    ck = subtract(ck1, oa)
    ca = subtract(ca0, oc)
    return {"c": oc, "a": oa, "k": ok, "crit_k0": ck0, "crit_a0": ca0, "crit_k": ck, "crit_a": ca,
            "to_c": (subtract(ck0, ck1), subtract(ca0, ca)), "to_a": subtract(ck1, ck)}


def event_slices(fr: Frame, row: StepRow, rows: dict, other_gaps: list, L: float) -> dict:
    """The slices with rows.csv (`other_gaps`: the critical stream's gaps that are not host-late,
    from gaps.csv), with the labels of the collectives and memcpys by time and the critical
    stream's gaps of 1 us or more that no other stream filled (`big_gaps`: count, us)."""
    n, s0, s1 = fr.step, fr.start, fr.window_end
    gaps_total = row.device_wait + row.unknown
    ce = min(max(rows["crit_end"].get(n, s0), s0), s1)
    labels, crit, other = window_events(rows, n, s0, s1)
    lay = layered(crit, other)
    # the critical stream up to its last event
    busy = max(0.0, (ce - s0) - row.host_late - gaps_total)
    g = union([max(a, s0), min(b, ce)] for a, b in other_gaps)
    if rows.get("crit_after") is not None:
        # measured from the critical stream's own events after L, sub-microsecond gaps included
        busy_after = total(intersect(rows["crit_after"].get(n, []), [[L, ce]]))
    else:
        busy_after = max(0.0, (ce - L) - total(g, L))
    busy_after = min(busy_after, busy)
    # other streams inside the critical stream's other gaps and after its last event
    free = union(g + [[ce, s1]])
    o = {k: intersect(lay[k], free) for k in "cak"}
    in_gaps = {k: total(v, hi=ce) for k, v in o.items()}
    in_tail = {k: total(v, lo=ce) for k, v in o.items()}
    big = [iv for iv in subtract(g, union(lay["c"] + lay["a"] + lay["k"])) if iv[1] - iv[0] >= 1.0]
    crit_c = max(0.0, busy - total(lay["crit_k0"]) - total(lay["crit_a0"]))
    crit_c_after = max(0.0, busy_after - total(lay["crit_k0"], L) - total(lay["crit_a0"], L))
    idle = gaps_total - in_gaps["c"] - in_gaps["a"] - in_gaps["k"]
    return {
        "compute": crit_c + sum(total(x) for x in lay["to_c"]) + in_gaps["c"] + in_tail["c"],
        "compute_exposed": crit_c_after + sum(total(x, L) for x in lay["to_c"]) + total(o["c"], L),
        "memcpy_arg": total(lay["crit_a"]) + total(lay["to_a"]) + in_gaps["a"] + in_tail["a"],
        "memcpy_arg_exposed": total(lay["crit_a"], L) + total(lay["to_a"], L) + total(o["a"], L),
        "collective": total(lay["crit_k"]) + in_gaps["k"] + in_tail["k"],
        "collective_exposed": total(lay["crit_k"], L) + total(o["k"], L),
        "idle_before": max(0.0, idle),
        # the part of it after the last host-late gap (before it, the stream waits on the host
        # anyway): the stream's idle after L less what other streams ran in its gaps there
        "idle_before_exposed": max(0.0, min(idle, (ce - L) - busy_after - sum(
            total(v, lo=L, hi=ce) for v in o.values()))),
        "idle_between": max(0.0, (s1 - ce) - in_tail["c"] - in_tail["a"] - in_tail["k"]),
        "labels": labels, "big_gaps": (len(big), total(big))}


# ---------------------------------------------------------------- the context every cause reads

def spread(values: list, at: int) -> dict:
    """A figure over the steps used: its median over them (as step 1's summary states each of
    its figures: one figure per quantity across the tables) with the min and max; `at`, the
    median step's index, is where a cause's words are said of one step."""
    del at  # the median step's own value is said in a cause's sentence, not as its figure
    return {"value": statistics.median(values), "min": min(values), "max": max(values)}


def recompiled(s1: dict | None, chosen: list) -> list:
    """The steps of `chosen` in which XLA compiles after an earlier step of them ran without
    (skip_stats.json compile: a new shape met mid-run), where fewer than half of them compile
    (else compiling is every step's and stays in the median); [] where none."""
    c = (s1 or {}).get("compile") or {}
    steps = [n for n in c.get("compiling_steps") or () if n in chosen]
    if not steps or 2 * len(steps) >= len(chosen):
        return []
    return [n for n in steps if any(m < n and m not in steps for m in chosen)]


def steps_used(steps: dict, s1: dict | None, notes: list) -> tuple[list, bool, bool]:
    """The steps the figures are medians over (choose_steps), less those no analysed step follows
    where others remain; whether the capture is one whole window (no steps); whether any of them
    is followed by an analysed step (else the GPU idle between steps cannot be measured)."""
    chosen, whole = choose_steps(steps, s1, notes)
    # a step that recompiles after steps that ran without: its compile is no part of a step
    # (step 6's compile row takes it, over the steps used and these: recompiled)
    later = recompiled(s1, chosen)
    if later and len(later) < len(chosen):
        notes.append(f"step(s) {', '.join(map(str, later))} left out: XLA recompiles in them "
                     "after steps that ran without (the compile row takes that time)")
        chosen = [n for n in chosen if n not in later]
    # a step no analysed step follows has no measurable idle after it: its window would be short
    # by that idle, so it is left out where others remain
    followed = [n for n in chosen if n + 1 in steps or any(r.period for r in steps[n].values())]
    if followed and len(followed) < len(chosen):
        left = [n for n in chosen if n not in followed]
        notes.append(f"step(s) {', '.join(map(str, left))} left out: no analysed step follows, so "
                     "the GPU idle after them cannot be measured")
        chosen = followed
    return chosen, whole, bool(followed)


def find_straggler(s1: dict | None, frames: dict, gpus: list, whole: bool, notes: list
                   ) -> tuple[int | None, list, set | None]:
    """The straggler: the same GPU ends the step last (alone) in most steps, by step 1's rule
    where skip_stats.json has it; None, with a note saying why, where there is none. Also the GPU
    that ends each step last alone (steps with a tie left out), and the GPUs compared
    (rules.compared_gpus: those that run the same programs, the only candidates)."""
    multi = len(gpus) > 1
    alone = [x[0] for x in (fr.last for fr in frames.values()) if len(x) == 1]
    s1_strag = st if isinstance(st := (s1 or {}).get("straggler"), dict) else None
    peers = rules.compared_gpus(s1)
    if peers is not None and len(peers) < 2:
        if multi:
            notes.append("no straggler: no two GPUs run the same programs (step 1's GPU groups: "
                         "pipeline stages, or one GPU with the work), so none is compared")
    elif multi and whole:
        notes.append("no straggler: the capture has no steps (one whole-capture window)")
    elif multi and s1_strag is not None and "is_straggler" in s1_strag:
        # step 1's rule (a majority of the steps, ahead by more than its margin) decides
        if s1_strag["is_straggler"] and s1_strag.get("gpu") in gpus:
            return s1_strag["gpu"], alone, peers
        notes.append("no straggler: step 1 finds the GPU that ends a step last changing from "
                     "step to step, or ties (skip_stats.json straggler)")
    elif multi and alone:
        cand, is_straggler, counts = rules.majority_last(
            [x[0] if len(x) == 1 else None for x in (fr.last for fr in frames.values())])
        if is_straggler:
            return cand, alone, peers
        notes.append(f"no straggler: the GPU that ends a step last changes from step to step "
                     f"(GPU {cand} in {counts.get(cand, 0)} of {len(frames)} steps), or ties")
    return None, alone, peers


def read_step_tables(out: Path, steps: dict, frames: dict, median: int, all_collectives: bool,
                     inputs: dict, notes: list, refusals: list) -> tuple[dict | None, dict | None]:
    """gaps.csv and rows.csv, streamed for the GPU that ends each step (read_gaps, read_rows);
    each None, with a refusal naming the check that failed, where it is not there or does not
    parse, rows.csv also where it holds no event of these steps' critical streams. `inputs`
    records which were read."""
    bound = {n: (str(fr.bound), steps[n][fr.bound].crit) for n, fr in frames.items()}
    gaps, why = guarded(read_gaps, out / "gaps.csv", bound, median)
    inputs["gaps.csv"] = gaps is not None
    if gaps is None:
        refusals.append("cannot name the host events inside the host gaps, nor tell work hidden "
                        f"behind the host from exposed work, because {why} (all work is taken "
                        "as exposed)")
    host_end = (gaps or {}).get("host_end") or {}
    rows, why = guarded(read_rows, out / "rows.csv", bound, all_collectives,
                        {n: host_end.get(n, fr.start) for n, fr in frames.items()})
    if lost := [n for n in frames if rows is not None and n not in rows["crit_end"]]:
        said = ", ".join(f"{n} (device {frames[n].bound} stream {steps[n][frames[n].bound].crit})"
                         for n in lost[:5])
        why = (f"rows.csv holds no event of the critical stream steps.csv names for step(s) "
               f"{said}{' ...' if len(lost) > 5 else ''}, so the two tables are not of one run "
               "of step 1")
        rows = None
    inputs["rows.csv"] = rows is not None
    if rows is None:
        refusals.append("cannot rank exposed collective time, memcpys outside the program or the "
                        f"straggler's extra work, because {why} (compute and the idle between "
                        "steps come from steps.csv alone)")
    elif rows["bad"]:
        notes.append(f"{rows['bad']} rows.csv line(s) could not be read and were left out")
    return gaps, rows


def host_details(median_rows: list, fr: Frame) -> dict:
    """The median step's host-late gaps: count, the leading gap (before the first kernel), and
    the host events inside them summed by name."""
    gaps = [r for r in median_rows if r.get("cause") == "host_late"]
    lead = sum(float(r["dur_us"]) for r in gaps
               if not r.get("kernel_before") and abs(float(r["start_us"]) - fr.start) < 1e-3)
    names: dict = {}
    for r in gaps:
        for name, v in rules.parse_host_events(r.get("host_events")):
            names[name] = names.get(name, 0.0) + v
    top = sorted(names.items(), key=lambda kv: (-kv[1], kv[0]))
    return {"gaps": len(gaps), "leading_us": lead, "events": top,
            "python_tracer": any(n.startswith(rules.PYTHON_TRACER_PREFIX) for n, _ in top),
            "threads": sorted({r.get("launch_thread", "") for r in gaps
                               if "(unknown" not in r.get("launch_thread", "")} - {""})}


def median_host(gaps: dict | None, fr: Frame, whole: bool, notes: list
                ) -> tuple[dict | None, float]:
    """The median step's host-late gaps (host_details; None without gaps.csv), and the capture's
    lead-in: with no steps the window is the whole capture, and the wait before its first kernel
    is the profiler starting before the work, not a cost per step; it is left out of the host
    gap (its time here, its leading gap then 0, with a note), 0.0 otherwise."""
    hd = host_details(gaps["median_rows"], fr) if gaps else None
    if not (whole and hd and hd["leading_us"] > 0):
        return hd, 0.0
    lead_in = hd["leading_us"]
    notes.append(f"the capture has no steps: the {us_text(lead_in)} before the first kernel are "
                 "the capture's lead-in, not a cost of a step, and are left out of the host "
                 "gap's saving")
    hd["leading_us"] = 0.0
    return hd, lead_in


@dataclass
class Ceilings:
    """The attributed instructions of the steps' programs against their roofline ceilings:
    `cands`, those with a ceiling, largest distance to it first, each with its share of the
    programs' compute and copy kernel time (`share`), its pct_of_ceiling (`pct`), its distance
    to the ceiling as a share of that time (`cut`) and its roofline.csv fields; `no_ceiling`,
    the others as (name, share, why, user frame); `model`, the GPU roofline.json names;
    `vendor`, its vendor as the capture reads it (AMD, NVIDIA; '' where unknown)."""
    cands: list
    no_ceiling: list
    model: str
    vendor: str = ""


@dataclass
class Context:
    """What every cause reads, built once (build_context): the scratch folder and step 1's
    skip_stats.json (`s1`) and steps.csv (`steps`); the steps used (`chosen`), their frames
    (step_frames), the median step and why; whether the capture is one whole window and whether
    a step used is followed by another; the GPUs compared, the straggler (after rows.csv: None
    where no collective ran) and the GPU that ends each step last alone (`alone`); rows.csv as
    read (None where refused); each step's critical path (`paths`); the median step's host gaps
    (`host`) and the capture's lead-in; the instructions' ceilings; and the notes and refusals
    of building it."""
    out: Path
    s1: dict | None
    steps: dict
    chosen: list
    frames: dict
    median: int
    why: str
    whole: bool
    followed: bool
    gpus: list
    peers: set | None
    straggler: int | None
    alone: list
    rows: dict | None
    paths: dict
    host: dict | None
    lead_in: float
    notes: list
    refusals: list
    ceilings: Ceilings | None = None

    @property
    def at(self) -> int:
        """The median step's index in the steps used (and in every per-step list)."""
        return self.chosen.index(self.median)

    @property
    def bound(self) -> int:
        """The GPU that ends the median step: the step's critical path is its."""
        return self.frames[self.median].bound

    @property
    def median_path(self) -> CriticalPath:
        """The median step's critical path."""
        return self.paths[self.median]

    @property
    def window(self) -> float:
        """The median step's window (us): every row's pct_of_step is of it."""
        return self.frames[self.median].window

    @cached_property
    def step(self) -> dict:
        """The step time: the window, from the step's start to the later of its end and the next
        step's start (the period where one follows; the duration where the next overlaps)."""
        return spread([self.frames[n].window for n in self.chosen], self.at)

    def each(self, key: str) -> list:
        """A critical-path figure in each step used."""
        return [getattr(self.paths[n], key) for n in self.chosen]

    @cached_property
    def executions(self) -> list:
        """Per step used: the program executions on the GPU that ends it (steps.csv)."""
        return [self.steps[n][self.frames[n].bound].executions or 0 for n in self.chosen]

    @cached_property
    def dispatch_idle(self) -> list | None:
        """Per step used: the critical stream's host-late wait between two program executions'
        kernels, the host dispatching the next program (steps.csv between_programs_idle_us, at
        most its host-late time); None unless a step holds DISPATCH_MIN_EXECUTIONS executions
        and the median step waits so at least MIN_SAVING_US."""
        between = [min(self.steps[n][self.frames[n].bound].between_programs or 0.0,
                       self.paths[n].host_late) for n in self.chosen]
        return between if max(self.executions, default=0) >= DISPATCH_MIN_EXECUTIONS and \
            between[self.at] >= MIN_SAVING_US else None

    @cached_property
    def straggler_work(self) -> dict:
        """Per step used, where there is a straggler and rows.csv (else empty): its compute and
        memcpy kernel time beyond the median GPU's (`excess`; steps.csv il_us - il_idle_us less
        its collectives), and that time scaled to its wall time, at most its compute and
        memcpy slices, all of them (`full`) or their exposed part (`exposed`); both 0 in a step
        it does not end."""
        if self.straggler is None or self.rows is None:
            return {}
        out = {}
        for n, fr in self.frames.items():
            p = self.paths[n]
            work = {d: r.kernel_sum - self.rows["coll_sum"].get((n, str(d)), 0.0)
                    for d, r in self.steps[n].items() if self.peers is None or d in self.peers}
            w = work.get(self.straggler, 0.0)
            ex = max(0.0, w - statistics.median(work.values()))
            if fr.bound != self.straggler or w <= 0:
                # it did not end this step: making it faster would not end the step sooner
                out[n] = {"excess": ex, "full": 0.0, "exposed": 0.0}
                continue
            cm = p.compute + p.memcpy_arg
            cm_exp = p.compute_exposed + p.memcpy_arg_exposed
            out[n] = {"excess": ex, "full": min(ex * cm / w, cm),
                      "exposed": min(ex * cm_exp / w, cm_exp)}
        return out


def build_context(out: Path, s1: dict | None, steps: dict, inputs: dict) -> Context:
    """The context of the scratch folder's steps (`steps` non-empty), each table read once; the
    notes and refusals of reading them in its lists, in that order; `inputs` records which of
    gaps.csv and rows.csv were read."""
    notes, refusals = [], []
    chosen, whole, followed = steps_used(steps, s1, notes)
    compared = rules.step_gpus(s1)
    frames = step_frames(steps, chosen, compared)
    median, why = median_step(out, chosen, frames)
    gpus = sorted({d for n in chosen for d in steps[n] if compared is None or d in compared})
    notes += [f"not compared for the straggler (other work): {s}" for s in rules.other_work(s1)]
    straggler, alone, peers = find_straggler(s1, frames, gpus, whole, notes)
    gaps, rows = read_step_tables(out, steps, frames, median, straggler is not None, inputs,
                                  notes, refusals)
    paths = {n: critical_path(fr, steps[n][fr.bound], rows, gaps) for n, fr in frames.items()}
    host, lead_in = median_host(gaps, frames[median], whole, notes)
    # the others wait for a straggler inside collectives: without any collective kernel in the
    # steps no GPU waits for another, and there is no straggler to rank
    if straggler is not None and rows is not None and not any(rows["coll_sum"].values()):
        notes.append(f"GPU {straggler} ends most steps last, but no collective kernel ran in "
                     "the steps read: no GPU waits for it inside the program (no "
                     "straggler_wait cause); a wait through the host (blocking on every "
                     "result before the next call) is in the idle between steps")
        straggler = None
    ctx = Context(out, s1, steps, chosen, frames, median, why, whole, followed, gpus, peers,
                  straggler, alone, rows, paths, host, lead_in, notes, refusals)
    ctx.ceilings = read_ceilings(ctx)
    return ctx


# ---------------------------------------------------------------- the instructions' ceilings

def programs_in_steps(progs: list | None, chosen: list) -> set | None:
    """The program ids of programs.csv that ran in any of the chosen steps (its `steps` cell:
    step numbers and runs, `1-5 7`); None where programs.csv or its steps are missing."""
    if not progs or "steps" not in progs[0]:
        return None
    want, out, known = set(chosen), set(), False
    for p in progs:
        nums = rules.parse_ranges(p.get("steps"))  # the cell step 4 wrote (rules.format_ranges)
        known = known or bool(nums)
        if nums & want:
            out.add(p.get("program_id", ""))
    return out if known else None


def steps_ops(ctx: Context) -> list | None:
    """attribution/ops.csv's rows of the programs that ran in the steps used and on the GPU that
    ends the median step, with a note for the programs left out; None, with a refusal, where
    step 4 wrote no ops.csv."""
    if (ops := tables(ctx.out).rows("attribution/ops.csv")) is None:
        ctx.refusals.append("cannot rank instructions or Python lines because step 4's "
                            "attribution/ops.csv is missing (step 4 refused or did not run: a "
                            "capture without HLO cannot be attributed)")
        return None
    # every program step 4 attributed: keep those that ran in the steps used (programs.csv
    # steps), so a warm-up or set-up program outside the steps takes no share of a step
    progs = tables(ctx.out).rows("attribution/programs.csv")
    if (in_steps := programs_in_steps(progs, ctx.chosen)) is not None:
        if left := {o.get("program_id", "") for o in ops} - in_steps:
            ctx.notes.append(f"{len(left)} program(s) of attribution/ops.csv ran in none of the "
                             "steps used (programs.csv steps) and take no share of a step: "
                             + ", ".join(sorted(left, key=str)[:8]))
        ops = [o for o in ops if o.get("program_id", "") in in_steps]
    # the step's time is the bounding GPU's: only the programs that run on it take a share (a
    # pipeline's other stages run on other GPUs)
    bound = ctx.bound
    on_bound = {p.get("program_id", "") for p in progs or []
                if str(bound) in (p.get("devices") or "").split()}
    if on_bound and {o.get("program_id", "") for o in ops} - on_bound:
        left = sorted({o.get("program_id", "") for o in ops} - on_bound, key=str)
        ctx.notes.append(f"{len(left)} program(s) do not run on GPU {bound}, which ends the "
                         "median step, and take no share of its compute: " + ", ".join(left[:8]))
        ops = [o for o in ops if o.get("program_id", "") in on_bound]
    return ops


# A capture shows how short a kernel can be only where it holds tiny kernels: on real GPUs
# the shortest (a broadcast of a few bytes) take about 0.7 us (the H200 captures in
# tests/data/h200) to a few us; a capture whose shortest kernels average longer than this
# shows no floor (none is applied).
KERNEL_FLOOR_EVIDENCE_US = 5.0


def kernel_floor_us(work: list) -> float:
    """The shortest average kernel time of any instruction in ops.csv `work`: the least time a
    kernel takes on this GPU, as the capture measures it (0 where no row counts kernels, or
    where it is above KERNEL_FLOOR_EVIDENCE_US)."""
    per = [float(o["device_us"]) / k for o in work
           if (k := number(o.get("kernels"))) and number(o.get("device_us"))]
    least = min(per, default=0.0)
    return least if least <= KERNEL_FLOOR_EVIDENCE_US else 0.0


def distances(work: list, total_us: float, roof: list, several: bool) -> tuple[list, list]:
    """Ceilings.cands and Ceilings.no_ceiling of the compute and copy instructions `work` (their
    kernel time summing to `total_us`) against roofline.csv; an instruction is named with its
    program where `several` programs share the step."""
    by_ins = {(r.get("program_id", ""), r["instruction"]): r for r in roof}
    floor = kernel_floor_us(work)
    partial_sums: dict = {}  # a GEMM's split-K reductions' share: one GEMM's work with it
    for o in work:
        if o.get("split_k_of"):
            gemm = (o.get("program_id", ""), o["split_k_of"])
            partial_sums[gemm] = partial_sums.get(gemm, 0.0) + float(o["device_us"]) / total_us
    cands, no_ceiling = [], []
    for o in work:
        r = by_ins.get((o.get("program_id", ""), o["instruction"]))
        share = float(o["device_us"]) / total_us
        pct = number(r.get("pct_of_ceiling")) if r else None
        # an instruction name repeats across programs: name the program where there are several
        name = (f"{o.get('module', '')}({o.get('program_id', '')}) {o['instruction']}"
                if several else o["instruction"])
        if pct is None:
            no_ceiling.append((name, share, (r or {}).get("no_ceiling_why")
                               or "not in roofline.csv", o.get("user_frame", "")))
            continue
        if (number(r.get("passes")) or 0) >= 2:
            continue  # a matmul of several bf16 passes: the matmul_precision row's, at one pass
        if o.get("independent_loop"):
            continue  # in a loop of independent iterations: the independent_loop row's
        best = number(r.get("best_same_work_pct"))
        # at its ceiling, but never below its kernels at the shortest kernel time this GPU
        # shows (a kernel's launch and teardown: a 12-byte add at 0.00% of the bandwidth does
        # not vanish)
        least = (number(o.get("kernels")) or 0) * floor / total_us
        cands.append({"instruction": name, "key": (o.get("program_id", ""), o["instruction"]),
                      "share": share, "pct": pct,
                      "cut": min(share * max(0.0, 1.0 - pct / 100.0), max(0.0, share - least)),
                      "binding": r.get("binding", ""), "user_frame": o.get("user_frame", ""),
                      "method": r.get("method", ""), "ceiling_dtype": r.get("ceiling_dtype", ""),
                      "work": r.get("work", ""), "backend": r.get("backend", ""),
                      "best": best if best is not None and best >= pct * TARGET_MARGIN
                      else None, "best_raw": best,
                      "best_by": r.get("best_same_work", ""),
                      "flops": number(r.get("run_flops")), "opcode": o.get("opcode", ""),
                      "split_k": partial_sums.get((o.get("program_id", ""), o["instruction"]),
                                                  0.0)})
    cands.sort(key=lambda c: (-c["cut"], c["instruction"]))
    return cands, no_ceiling


def read_ceilings(ctx: Context) -> Ceilings | None:
    """The instructions of the steps' programs against their ceilings (attribution/ops.csv with
    roofline.csv); None, with a refusal, where ops.csv holds no compute or copy kernel time or
    either table is missing, or step 5 refused (the top instructions then named by kernel time).
    Notes: the programs left out, and the attributed share of kernel time where under 100%."""
    if (ops := steps_ops(ctx)) is None:
        return None
    work = [o for o in ops
            if o.get("category") in ("compute", "memcpy") and number(o.get("device_us"))]
    total_us = sum(float(o["device_us"]) for o in work)
    if total_us <= 0:
        ctx.refusals.append("cannot rank instructions because attribution/ops.csv holds no "
                            "compute or copy kernel time")
        return None
    att = ((tables(ctx.out).json("attribution/attribute_kernels.json") or {}).get("figures")
           or {}).get("attributed_pct_of_device_time") or {}
    if number(att.get("value")) is not None and float(att["value"]) < 100.0 - 1e-6:
        ctx.notes.append(f"{float(att['value']):.1f}% of kernel time is attributed to an "
                         "instruction (attribute_kernels.json): instruction shares are of the "
                         "attributed time")
    roof = tables(ctx.out).rows("roofline.csv")
    rj = tables(ctx.out).json("roofline.json")
    if roof is None or (rj or {}).get("status") == "refused":
        why = "roofline.csv is missing (step 5 did not run)" if roof is None else \
            "; ".join((rj or {}).get("refusals", [])) or "step 5 refused"
        cm = ctx.median_path.compute
        ctx.refusals.append(
            "cannot say how far the top instructions are from their ceiling because " + why
            + "; by kernel time they are " + ", ".join(
                f"{o['instruction']} {number_text(float(o['device_us']) / total_us * cm)} us "
                f"of step {ctx.median}" for o in work[:TOP_INSTRUCTIONS]))
        return None
    several = len({o.get("program_id", "") for o in ops}) > 1
    gpu = (rj or {}).get("gpu") if isinstance((rj or {}).get("gpu"), dict) else {}
    vendor = (gpu.get("evidence") or {}).get("device_vendor") if isinstance(
        gpu.get("evidence"), dict) else None
    return Ceilings(*distances(work, total_us, roof, several), gpu.get("model") or "the GPU",
                    vendor if isinstance(vendor, str) else "")
