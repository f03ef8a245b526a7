"""Step 1's files (standard library only): rows.csv (one line per GPU event; on a large trace a
forked child writes it while the parent computes the rest), streams.csv, steps.csv, gaps.csv,
python_lines.csv, and summary.txt, a rendering of the result. Writers format what the analysis
computed; they compute no figure.
"""

from __future__ import annotations

import operator
from dataclasses import asdict
from pathlib import Path

from gap_causes import gap_host_cells
from skip_analysis import JOIN_KEYS, Analysis
from tracekit import row_facts, scratch
from tracekit import trace_rules as rules
from tracekit.forked import Forked
from tracekit.trace_rules import pct, us

# From this many GPU events on, rows.csv is written by a forked child while this process computes
# the other tables (a second core; where there is no fork, or one core for this process, it is
# written first, here: tracekit.forked). Under it the fork costs more than it saves.
FORK_ROWS_MIN = 100_000
FORK_GAPS_MIN = 5_000  # gaps: each a search of the host threads

RESULT_FILE = "skip_stats.json"
GPU_CHILD = "rows_gpu.csv"  # rows.csv's child table: a GPU's correlation ids and graphs


def by_stream(events) -> dict[tuple, list]:
    """The events by (device, stream), each stream's in the events' order: the rows' order is
    device, stream and start, each stream's then sorted by its starts alone (stable, as one sort
    on the three would be; a third of its time)."""
    per_stream: dict[tuple, list] = {}
    for ev in events:
        key = (ev.device, ev.lane)
        lst = per_stream.get(key)
        if lst is None:
            lst = per_stream[key] = []
        lst.append(ev)
    return per_stream


def write_rows(path, a: Analysis) -> tuple[int, dict, int]:
    """One line per device event, streamed to the file, and its GPU-only cells (a correlation id,
    a graph) to the child table GPU_CHILD beside it; returns the lines written, what the
    trust list reads of them (row_facts, summarised from each row's cells as they are written,
    in the table's order) and the child's rows. This is the hot loop of a large trace: strings
    repeat (kernel, stream, op names), so each is quoted once and looked up after."""
    names = a.thread_names
    quoted: dict[str, str] = {}

    def q(v):
        r = quoted.get(v)
        if r is None:
            r = quoted[v] = scratch.quote(v)
        return r
    streams = {k: q(v) for k, v in a.stream_names.items()}
    threads = {k: q(v) for k, v in names.items()}
    n = gpu_n = 0
    per_stream = by_stream(a.events)
    by_start = operator.attrgetter("start")
    # the columns that repeat from event to event, each combination formatted once
    tails: dict[tuple, str] = {}
    by_launch: dict[int, tuple] = {}
    step_cells: dict = {None: ""}
    summary = row_facts.Summary()
    add = summary.add
    with open(path, "w", newline="", encoding="utf-8") as fh, \
            open(path.with_name(GPU_CHILD), "w", newline="", encoding="utf-8") as gpu_fh:
        fh.write(scratch.header("rows.csv"))  # the line below, in its declared order
        gpu_fh.write(scratch.header(GPU_CHILD))
        buf = []
        append = buf.append
        gpu_buf: list = []
        gpu_append = gpu_buf.append
        for device, stream in sorted(per_stream):
            dev = str(device)
            where = f"{device},{stream},{streams.get((device, stream), '')},"
            heads: dict[str, tuple] = {}  # name -> (category, the row's first cells)
            for ev in sorted(per_stream.pop((device, stream)), key=by_start):
                join = ev.join
                L = ev.launch
                start = ev.start
                if join in ("launch", "dispatch") and L is not None:  # a TPU op: its dispatch
                    ls, ld = L["start"], L["dur"]
                    raw_lname = L["name"]
                    lname = quoted.get(raw_lname) or q(raw_lname)
                    launch = (f"{lname},{threads.get(L['thread'], '')},{ls / 1e6:.3f},"
                              f"{ld / 1e6:.3f},{(start - ls - ld) / 1e6:.3f},"
                              f"{(start - ls) / 1e6:.3f}")
                elif L is not None and join != "ambiguous":
                    # a graph launch's cells are those of every event it launched: formatted
                    # once
                    shared = by_launch.get(id(L))  # L lives as long as the events: its id stays
                    if shared is None:
                        shared = by_launch[id(L)] = (
                            f"{q(L['name'])},{threads.get(L['thread'], '')},"
                            f"{L['start'] / 1e6:.3f},{L['dur'] / 1e6:.3f},,", L["name"])
                    launch, raw_lname = shared
                else:
                    launch = ",,,,,"
                    raw_lname = ""
                category = ev.category
                head = heads.get(ev.name)
                if head is None or head[0] != category:
                    head = heads[ev.name] = (category, f"{where}{q(ev.name)},{category},")
                step = ev.step
                key = (ev.op, ev.module, step)
                tail = tails.get(key)
                if tail is None:
                    hlo_op, hlo_module, _ = key
                    tail = tails[key] = (f"{q(hlo_op)},{q(hlo_module)},"
                                         f"{'' if step is None else step}\n")
                raw_cid = ev.cid
                if raw_cid != "" or ev.graph:  # a GPU's own cells: the child table's row
                    cid = raw_cid
                    if type(cid) is not int and not (type(cid) is str and cid.isdigit()):
                        # a malformed id (text with commas, quotes) stays one field; a decimal
                        # one (each event's own: not memoized) needs no quotes
                        cid = q(str(cid))
                    gpu_append(f"{n},{cid},{1 if ev.graph else 0}\n")
                    gpu_n += 1
                dur = f"{ev.dur / 1e6:.3f}"
                append(f"{head[1]}{start / 1e6:.3f},{dur},{ev.end / 1e6:.3f},"
                       f"{join},{launch},{tail}")
                cell = step_cells.get(step)
                if cell is None:
                    cell = step_cells[step] = str(step)
                # the row's cells as rows.csv reads back (row_facts.COLUMNS)
                add(dev, dur, "1" if ev.graph else "0", category, join, raw_lname, cell,
                    str(raw_cid), ev.op)
                n += 1
                if n % 10_000 == 0:
                    fh.write("".join(buf))
                    buf.clear()
                    gpu_fh.write("".join(gpu_buf))
                    gpu_buf.clear()
        fh.write("".join(buf))
        gpu_fh.write("".join(gpu_buf))
    return n, asdict(summary.facts()), gpu_n


def rows_job(path: Path, a) -> Forked:
    """rows.csv, the one table as long as the trace: written by a forked child once the events
    are analysed (tracekit.forked), here at once under FORK_ROWS_MIN events."""
    return Forked(write_rows, path, a, here=len(a.events) < FORK_ROWS_MIN, what="rows.csv")


class GapsJob:
    """gaps.csv, its host events found as it is written (gap_causes.gap_host_cells: a search of
    the host threads per gap): from FORK_GAPS_MIN gaps, the later two thirds' by a forked child
    while this process writes the other tables, then finds the first third's and writes gaps.csv
    (each side's share of the work about even)."""

    def __init__(self, path: Path, a, gap_rows):
        self.path, self.a = path, a
        self.rows = sorted(gap_rows, key=lambda g: (g["device"], g["start_ps"]))
        self.half = len(self.rows) // 3 if len(self.rows) >= FORK_GAPS_MIN else len(self.rows)
        self.later = Forked(gap_host_cells, a, self.rows[self.half:],
                            what="gaps.csv's host events") if self.half < len(self.rows) else None

    def wait(self) -> int:
        cells = gap_host_cells(self.a, self.rows[:self.half])
        cells += self.later.wait() if self.later is not None else []
        return scratch.write_table(self.path.parent, self.path.name, (
            [g["device"], g["stream"], g["step"], us(g["start_ps"]), us(g["end_ps"]),
             us(g["dur_ps"]), g["kernel_before"], g["kernel_after"], g["cause"], thread,
             events, us(traced)] for g, (thread, events, traced) in zip(self.rows, cells,
                                                                        strict=True)))

    def abort(self) -> None:
        if self.later is not None:
            self.later.abort()


def write_tables(tmp: Path, a: Analysis, stream_acc, critical, step_rows) -> list:
    """streams.csv, steps.csv (rows.csv is rows_job's, gaps.csv GapsJob's)."""
    parts = ("compute", "collective", "memcpy", "idle")  # each in us, then its share of the span
    stream_rows = [[d, s, a.stream_names.get((d, s), ""), us(acc["span"]),
                    *(us(acc[k]) for k in parts), *(pct(acc[k], acc["span"]) for k in parts),
                    acc["events"], int(critical.get(d) == s)]
                   for (d, s), acc in sorted(stream_acc.items())]
    return [("streams.csv", scratch.write_table(tmp, "streams.csv", stream_rows)),
            ("steps.csv", scratch.write_table(tmp, "steps.csv", (
        [r["step"], r["device"], r["source"], us(r["start_ps"]), us(r["end_ps"]),
          us(r["dur_ps"]), r["kernels"], us(r["busy_ps"]), us(r["idle_ps"]),
          pct(r["idle_ps"], r["dur_ps"]), r["critical_stream"], us(r["tklqt_ps"]),
          us(r["akd_ps"]), us(r["il_ps"]), us(r["il_idle_ps"]), us(r["union_idle_ps"]),
          us(r["host_late_ps"]), us(r["device_wait_ps"]), us(r["unknown_gap_ps"]),
          us(r["period_ps"]), us(r["idle_between_ps"]),
          pct(r["idle_between_ps"], r["period_ps"]) if r["period_ps"] else "",
          r["between_cause"], r["between_events"],
          "" if r["executions"] is None else r["executions"], us(r["between_programs_ps"]),
          r["programs"], us(r.get("arrival_ps"))]
         for r in step_rows)))]


def _rng(f: dict | None, fmt) -> str:
    if f is None:
        return "n/a"
    if f.get("n") == 2 and f["min"] != f["max"]:  # the median of two is their mean: no median
        return f"{fmt(f['min'])} and {fmt(f['max'])} (two values)"
    return f"{fmt(f['value'])} ({fmt(f['min'])}-{fmt(f['max'])})"


def render_summary(r: dict) -> list[str]:
    """summary.txt: a rendering of the result, nothing computed here."""
    out = [f"verdict: {r.get('verdict_qualifier') or r['verdict']}"]
    out += [f"rule: {x}" for x in r["rule"]]
    out += steps_lines(r)
    out += joins_lines(r)
    if r["figures"]:
        out += figures_lines(r)
    if r["straggler"]:
        out += straggler_lines(r)
    out += python_tracer_lines(r.get("python_tracer") or {})
    out += [f"note: {n}" for n in r["notes"]]
    out += [f"cannot compute: {x}" for x in r["refusals"]]
    out += [f"needs a new capture: {x}" for x in r["needs_new_capture"]]
    if r.get("device_kind") == "TPU":
        out = [rules.tpu_words(line) for line in out]
    return [rules.printable(line) for line in out]  # a newline in a name stays on its line


def step_numbers(numbers: list) -> str:
    """Step numbers named as such ("step 0", "steps 1, 2, 3"), never read as a count."""
    return ("step " if len(numbers) == 1 else "steps ") + ", ".join(map(str, numbers)) \
        if numbers else ""


def steps_lines(r: dict) -> list[str]:
    """How the steps were found and which were analysed; the program executions per step and
    the GPU groups where there are several."""
    st = r["steps"]
    out = [f"steps: from {st['source']}; {len(st['analysed'])} analysed "
           f"({step_numbers(st['analysed']) or 'none'})"
           + (f"; skipped as partial: {step_numbers(st['skipped_partial'])}"
              if st["skipped_partial"] else "")
           + (f"; partial but analysed for want of a complete one: "
              f"{step_numbers(st['partial_analysed'])}"
              if st["partial_analysed"] else "")]
    f0 = r["figures"]
    if (f0.get("executions_per_step") or {}).get("max", 0) > 1:
        bp = f0.get("between_programs_idle_us")
        out.append(f"  program executions per step and GPU: "
                   f"{_rng(f0['executions_per_step'], lambda v: f'{v:.0f}')}; the critical stream "
                   f"waiting on the host between two executions' kernels: "
                   f"{_rng(bp, lambda v: f'{v:,.1f} us')} per step "
                   "(steps.csv programs, executions, between_programs_idle_us)")
        dp = r.get("dispatch") or {}
        if dp.get("enclosing_call"):
            out.append(f"  the Python call that encloses a step's dispatches: "
                       f"{dp['enclosing_call']} (in {dp['enclosing_call_steps']} of "
                       f"{dp['steps']} steps)")
    groups = r.get("gpu_groups") or []
    return out + [f"  GPU group{' (compared)' if g['compared'] else ''}: {g['sentence']}"
                  for g in groups if len(groups) > 1]


def joins_lines(r: dict) -> list[str]:
    """What the correlation ids joined, and notes on the ids that joined no launch."""
    j = r["joins"]
    if r.get("device_kind") == "TPU":  # op runs: joined to their program's dispatch
        out = [f"joins: dispatch {j.get('dispatch', 0)} of {r['gpu_events']} op runs joined to "
               "their program run's host dispatch (a TPU: no launch call or correlation id per "
               "op)"]
    else:
        out = ["joins: " + ", ".join(f"{k} {j[k]}" for k in JOIN_KEYS)
               + f" (of {r['gpu_events']} GPU events; join rate to a launch call "
               f"{r['join_rate_pct_of_gpu_events']:.1f}%)"]
    if j["other"]:
        out.append(f"note: {j['other']} GPU events carry a correlation id that belongs to a "
                   "host event that is not a launch (e.g. a stream wait): they are not joined "
                   "to a launch")
    if j["shared_ids_without_graph_launch"]:
        out.append(f"note: {j['shared_ids_without_graph_launch']} GPU events share a "
                   "correlation id with another on the same GPU without a graph launch")
    return out


def figures_lines(r: dict) -> list[str]:
    """The figures as median (min-max) across analysed steps and GPUs, and the host/device
    split."""
    f = r["figures"]
    f_us = lambda v: f"{v:,.1f} us"  # noqa: E731
    f_pct = lambda v: f"{v:.1f}%"  # noqa: E731
    devs = r.get("figures_devices") or []
    over = (f" {', '.join(map(str, devs))} (those that run the step's programs: the others do "
            "other work, gpu_groups)" if devs and any(len(g.get("devices") or ()) and not set(
                g["devices"]) <= set(devs) for g in r.get("gpu_groups") or ()) else "")
    out = [f"figures: median (min-max) across analysed steps and GPUs{over} (of two values, "
           "both)"]
    out.append(f"  step duration: {_rng(f['step_duration_us'], f_us)}")
    out.append("  kernels per step per GPU: "
               f"{_rng(f['kernels_per_step_per_device'], lambda v: f'{v:.0f}')}")
    out.append(f"  busy (union of all streams): {_rng(f['busy_us'], f_us)}")
    out.append(f"  idle from the union (IL - union busy): {_rng(f['union_idle_us'], f_us)}")
    out.append("  idle as the SKIP paper computes it (IL - sum of kernel time; double-counts "
               f"overlapping streams): {_rng(f['il_idle_us'], f_us)}")
    out.append(f"  TKLQT (sum of kernel start - launch start): {_rng(f['tklqt_us'], f_us)}")
    out.append(f"  AKD (mean kernel duration): {_rng(f['akd_us'], f_us)}")
    out.append("  IL (first host op of the step to its last kernel's end): "
               f"{_rng(f['il_us'], f_us)}")
    for k, label in (("host_share_pct_of_step", "host-late share of the step (bounding GPU)"),
                     ("busy_share_pct_of_step", "busy-or-queued share (bounding GPU)"),
                     ("collective_share_pct_of_step", "collective share (bounding GPU)")):
        out.append(f"  {label}: {_rng(f[k], f_pct)}")
    if f.get("period_us"):
        out.append(f"  step period (start to the next step's start, every GPU): "
                   f"{_rng(f['period_us'], f_us)}")
        out.append(f"  GPU idle between steps (each GPU's last kernel to the next step's "
                   f"start, every GPU): "
                   f"{_rng(f['idle_between_us'], f_us)}, "
                   f"{_rng(f['idle_between_pct_of_period'], f_pct)} of the period; cause: "
                   f"{(r.get('between_steps') or {}).get('cause')} (steps.csv "
                   "between_host_events)")
    hd = r["host_device_split"]
    out.append(f"  host/device split on the critical streams: host "
               f"{hd['host_pct_of_step']:.2f}%, device {hd['device_pct_of_step']:.2f}% "
               "of step time")
    return out


def straggler_lines(r: dict) -> list[str]:
    """Which GPU ends the steps last and whether it is a straggler; the GPU with the least
    collective time."""
    sg = r["straggler"]
    dist = ", ".join([f"GPU {d} in {c}" for d, c in sg["last_counts"].items()]
                     + ([f"a tie in {sg['ties']}"] if sg["ties"] else []))
    spread_txt = _rng(sg["end_spread_us"], lambda v: f"{v:,.1f} us")
    margin = (f"{sg['margin_us']['value']:,.1f} us or "
              f"{sg['margin_us']['pct_of_step']:.1f}% of the step")
    if str(r["steps"]["source"]).startswith("the whole capture"):
        out = [f"no straggler: the capture has no steps (one whole-capture window, "
               f"last: {dist})"]
    elif sg["is_straggler"]:
        out = [f"straggler: GPU {sg['gpu']} finishes last in {sg['steps_last']} of "
               f"{sg['steps']} steps, ahead of the next GPU by "
               f"{_rng(sg['lead_us'], lambda v: f'{v:,.1f} us')} (margin {margin}); "
               f"last per step: {dist}; spread of step end times {spread_txt}"]
    else:
        out = [f"no straggler: the last GPU changes from step to step (last: {dist} "
               f"of {sg['steps']} steps; a lead within {margin} is a tie); spread of "
               f"step end times {spread_txt}"]
    if sg["least_collective_gpu"] is not None:
        out.append(f"  collective time per step: GPU {sg['least_collective_gpu']} has the "
                   f"least ({sg['least_collective_us']:,.1f} us, others up to "
                   f"{sg['most_collective_us']:,.1f} us): collective kernels include "
                   "waiting for peers, so the GPU that waits least is the one the others "
                   "wait for")
    return out


def python_tracer_lines(pt: dict) -> list[str]:
    """What the Python tracer recorded, or that it recorded nothing."""
    if pt.get("calls"):
        return [f"python tracer: on; {pt['calls']:,} traced calls of {pt['names']:,} names on "
                f"{pt['threads']} host thread(s), {pt['self_us']['value']:,.1f} us of their "
                "own time (python_lines.csv: host time by Python line, largest first; "
                "upper bounds, the tracer slows what it traces; a blocking call's wait is "
                "its own time; the profiler's start and stop calls left out)"]
    return ["python tracer: no traced call (it was off, or traced nothing): host time "
            "by Python line is not in this capture"]


def write_python_lines(path: Path, py: list) -> int:
    """python_lines.csv from skip_analysis.python_lines' rows; returns the row count."""
    return scratch.write_table(path.parent, path.name,
                               ([r["name"], r["calls"], us(r["total_ps"]), us(r["self_ps"]),
                                 len(r["threads"])] for r in py))


def write_result(tmp: Path, result: dict) -> list:
    """summary.txt (the result rendered) and skip_stats.json; returns their (file, count)."""
    lines = render_summary(result)
    (tmp / "summary.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    scratch.write_result(tmp, RESULT_FILE, result)
    return [("summary.txt", len(lines)), (RESULT_FILE, None)]
