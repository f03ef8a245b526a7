"""What step 1 computes for steps 0 and 2 from the trace it holds (standard library only): the
checks 2 to 5 of step 2's reconciliation on step 1's model (launch joins, kernels per step, same
work across GPUs, stream budgets), the trace's per-stream totals of check 1, and the trace's
counts step 0's inventory reads. They need the decoded trace or step 1's analysis in memory, so
step 1 (skip_stats.py) computes them where it has both and hands them on in the scratch folder
(scratch.handoff_put: `.handoff/model_checks.json`, `trace_streams.json`, `trace_facts.json`,
each keyed to the trace's path, size and modification time); reconcile.py and capture_info.py
compute them from the capture only where a hand-off is missing or was made from another
file (a step run on its own)."""

from __future__ import annotations

import operator
import statistics

import gpu_events
import skip_analysis
from tracekit import trace_reader
from tracekit import trace_rules as rules

# Compute + memcpy time per step (collectives left out: they include waiting for peers) of GPUs
# that do the same work differs by launch jitter and data; more than this relative difference
# from the GPUs' median is a GPU that runs slower or faster, reported.
SAME_WORK_TIME_TOLERANCE = 0.10
IDS_LISTED = 10  # correlation ids quoted in a sentence


def _num(v):
    """A figure as written: whole numbers without a decimal point."""
    return int(v) if isinstance(v, float) and v.is_integer() else v


def row(check, device="", stream="", status="pass", a="", b="", unit="", what_a="",
        what_b="", sentence="") -> dict:
    return {"check": check, "device": device, "stream": stream, "status": status,
            "figure_a": _num(a), "figure_b": _num(b), "unit": unit, "what_a": what_a,
            "what_b": what_b, "trust_sentence": sentence}


def trace_totals(trace) -> tuple[dict, dict]:
    """One pass over the trace's complete events: (device, stream) -> [events, summed duration
    ps] of its GPU "Stream #" lines (step 2's check 1), and what step 0's inventory reads of the
    trace (`gpu_events`: [ordinal, events] of every GPU process, `host_events`: the host
    process's events, `notes`: what the reader repaired)."""
    ordinal = {pid: o for o, pid in trace.gpu_pids().items()}
    streams = trace_reader.device_lanes(trace.processes, trace.threads)
    host = set(trace.host_pids())
    per_device = {o: 0 for o in ordinal.values()}
    n_host = 0
    out: dict = {}
    ps = trace_reader.ps
    for ev in trace.events:
        pid = ev.get("pid")
        o = ordinal.get(pid)
        if o is None:
            n_host += pid in host
            continue
        per_device[o] += 1
        if (pid, ev.get("tid")) in streams:
            e = out.setdefault((o, ev["tid"]), [0, 0])
            e[0] += 1
            e[1] += ps(ev.get("dur", 0))
    kinds = trace_reader.device_kinds(trace.processes)
    facts = {"gpu_events": [[o, n] for o, n in sorted(per_device.items())], "host_events": n_host,
             "kinds": {str(o): "TPU" for pid, o in ordinal.items() if kinds.get(pid) == "TPU"},
             "notes": list(trace.notes)}
    return out, facts


# ---------------------------------------------------------------- checks 2 to 5

def check_joins(a) -> list[dict]:
    """Every GPU event joins one launch call (a TPU's op runs join their program's dispatch:
    check_program_runs)."""
    if getattr(a, "tpu_joins", None):
        return []
    out = []
    by_device: dict = {}  # GPU -> [events, the graph launches' ids, events joining no launch]
    for e in a.events:
        acc = by_device.get(e.device)
        if acc is None:
            acc = by_device[e.device] = [0, set(), []]
        acc[0] += 1
        join = e.join
        if join == "graph_launch":
            acc[1].add(e.cid)
        elif join not in ("launch", "dispatch"):  # dispatch: a TPU op run's program dispatch
            acc[2].append(e)
    for d, (n, graphs, bad) in sorted(by_device.items()):
        joined = n - len(bad)
        sentence = ""
        if bad:
            by: dict[str, list] = {}
            for e in bad:
                by.setdefault(e.join, []).append(str(e.cid or "-"))
            sentence = f"GPU {d}: {len(bad)} of {n} events join no launch call: " + \
                "; ".join(f"{k} {len(v)} (ids {', '.join(sorted(set(v))[:IDS_LISTED])})"
                          for k, v in sorted(by.items()))
        out.append(row("launch_join", d, "", "fail" if bad else "pass", joined, n,
                       "count", f"events joined to a launch ({len(graphs)} graph launches)",
                       "GPU events", sentence))
    return out


def check_kernels_per_step(a, step_rows) -> list[dict]:
    out = []
    if not step_rows:
        return [row("kernels_per_step", status="not checkable",
                    sentence="kernels per step cannot be checked because no complete step was "
                             "analysed")]
    partial = any(s.partial for s in a.analysed)
    by_device: dict[int, dict] = {}  # grouped once: a filter per GPU was GPUs x rows
    for r in step_rows:
        by_device.setdefault(r["device"], {})[r["step"]] = r["kernels"]
    for d in sorted(by_device):
        per = by_device[d]
        if len(per) < 2:
            out.append(row("kernels_per_step", d, "", "not checkable", sum(per.values()), "",
                           "count", "events in the one analysed step", "",
                           f"kernels per step cannot be checked on GPU {d}: one analysed step"
                           + (" (a partial one: the capture holds no complete step)"
                              if partial else "")))
            continue
        common = statistics.mode(per.values())
        odd = {s: n for s, n in per.items() if n != common}
        # a step that compiles runs a program the others do not (a new shape): its count differs
        # with the work, not with the records
        new = odd and set(odd) <= set((skip_analysis.compile_summary(a) or {}).get(
            "compiling_steps") or ())
        out.append(row("kernels_per_step", d, "", "fail" if odd and not new else "pass",
                       min(per.values()), max(per.values()), "count", "fewest events in a step",
                       "most events in a step", "" if not odd else
                       f"GPU {d}: {common} events in most steps, but " +
                       ", ".join(f"{n} in step {s}" for s, n in sorted(odd.items()))
                       + (": XLA compiles in it, so it runs a program the others do not"
                          if new else "")))
    return out


def _per_device(a, steps) -> tuple[dict, dict]:
    """One pass over the events: per GPU, the program's compute + memcpy time per step
    (collective kernels left out: their time includes waiting for the peers; argument copies
    left out: a GPU that receives the inputs copies more, which the events check explains), and
    argument copies (memcpys with no hlo_op and a launch of their own) in steps."""
    time_ps: dict = {}
    copies: dict = {}
    for e in a.events:
        if e.step not in steps:
            continue
        cat = e.category
        if rules.is_argument_copy(cat, e.op, e.graph):
            copies[e.device] = copies.get(e.device, 0) + 1
        elif cat != "collective":
            t = time_ps.setdefault(e.device, {})
            t[e.step] = t.get(e.step, 0) + e.dur
    return time_ps, copies


def check_same_work(a, step_rows, idle_gpus, groups=None, compared=None) -> list[dict]:
    """Same work across the GPUs that run the same programs (step 1's GPU groups): a GPU that
    runs other programs, or holds only argument copies, does other work, which is said (a pass
    with its explanation), never compared for speed."""
    devices = sorted({r["device"] for r in step_rows})
    out = [row("same_work_across_gpus", d, "", "not checkable", "", "", "", "", "",
               f"GPU {d} has no events in this capture (idle, or its work not recorded: "
               "attribution/programs.csv partitions): nothing to compare") for d in idle_gpus]
    groups = [g for g in (groups or []) if g["devices"]]
    if len(groups) > 1:
        n_steps = len({r["step"] for r in step_rows})
        compared = set(compared or ())
        runs = [d for g in groups if g["kind"] == "programs" for d in g["devices"]]
        ref = sorted(compared) or sorted(runs)
        for g in groups:
            if set(g["devices"]) == compared:
                continue
            sentence = skip_analysis.group_sentence(g, n_steps)
            other = "runs other programs" if g["kind"] == "programs" else "does other work"
            for d in g["devices"]:
                if g["kind"] == "programs" and len(g["devices"]) == 1:
                    why = (f"GPU {d} runs programs no other GPU runs ({sentence}): its work is "
                           "compared with none")
                else:
                    why = f"GPU {d} {other} than GPU(s) {', '.join(map(str, ref))}: {sentence}"
                out.append(row("same_work_across_gpus", d, "", "pass", "", "", "", "", "", why))
            if g["kind"] == "programs" and len(g["devices"]) > 1:
                members = set(g["devices"])  # once, not once per row
                out += check_same_work(a, [r for r in step_rows if r["device"] in members], [],
                                       None)
        if compared:
            out += check_same_work(a, [r for r in step_rows if r["device"] in compared], [],
                                   None)
        return out
    if len(devices) < 2:
        if devices:
            out.append(row("same_work_across_gpus", devices[0], "", "not checkable", 1, "",
                           "count", "devices with work", "",
                           "one GPU with work: nothing to compare it with"))
        return out
    steps = sorted({r["step"] for r in step_rows})
    kernels_of: dict[int, list] = {}
    for r in step_rows:
        kernels_of.setdefault(r["device"], []).append(r["kernels"])
    kern = {d: statistics.median(kernels_of.get(d, [])) for d in devices}
    per_step, n_copies = _per_device(a, set(steps))
    time_ps = {d: statistics.median(per_step[d].values()) if per_step.get(d) else 0
               for d in devices}
    ref_k = statistics.median(kern.values())
    ref_t = statistics.median(time_ps.values())
    copies = {d: n_copies.get(d, 0) / max(len(steps), 1) for d in devices}
    for d in devices:
        diff = kern[d] - ref_k
        explained = diff and abs(diff - (copies[d] - statistics.median(copies.values()))) < 0.5
        status = "pass" if diff == 0 or explained else "fail"
        out.append(row("same_work_across_gpus_events", d, "", status, kern[d], ref_k, "count",
                       "events per step (median)", "median over GPUs",
                       "" if diff == 0 else
                       f"GPU {d}: {kern[d]:g} events per step vs {ref_k:g} on the others, "
                       + (f"explained by {copies[d]:g} argument copies per step" if explained
                          else "not explained by the capture")))
        off = abs(time_ps[d] - ref_t) / ref_t if ref_t else 0.0
        out.append(row("same_work_across_gpus_time", d, "",
                       "pass" if off <= SAME_WORK_TIME_TOLERANCE else "fail",
                       rules.us(time_ps[d]), rules.us(ref_t), "us",
                       "compute + memcpy time per step without argument copies (median)",
                       "median over GPUs",
                       "" if off <= SAME_WORK_TIME_TOLERANCE else
                       f"GPU {d}: {rules.us(time_ps[d])} us of compute and memcpy time per step "
                       f"vs {rules.us(ref_t)} us on the others ({100 * off:.1f}% apart) for the "
                       "same work: this GPU runs slower or faster (clocks, power, contention: "
                       "the capture cannot say which)"))
    return out


def check_stream_budgets(a, stream_acc, by_stream) -> list[dict]:
    """Each stream's budget (compute + collective + memcpy + idle) against its span, and its idle
    a second way: the span minus the union of its events in each step window (`by_stream`:
    (GPU, step) -> stream -> the step's events, skip_analysis.per_step_rows')."""
    out = []
    analysed = {s.number: s for s in a.analysed}
    ends: dict = {}
    by_stream_step: dict = {}
    end_of = operator.attrgetter("end")
    for (d, num), per_stream in by_stream.items():
        for s, evs in per_stream.items():
            ends[(d, num)] = max(ends.get((d, num), 0), max(map(end_of, evs)))
            by_stream_step[(d, s, num)] = evs
    for (d, s), acc in sorted(stream_acc.items()):
        parts = acc["compute"] + acc["collective"] + acc["memcpy"] + acc["idle"]
        # idle a second way: the span minus the union of the stream's events in each window
        idle2 = 0
        for num, st in analysed.items():
            if (d, num) not in ends:
                continue
            start, end = st.start, ends[(d, num)]
            iv = [(e.start if e.start > start else start, e.end if e.end < end else end)
                  for e in by_stream_step.get((d, s, num), ()) if e.end > start]
            idle2 += (end - start) - gpu_events.union_ps(iv)
        ok = parts == acc["span"] and idle2 == acc["idle"]
        out.append(row("stream_budget", d, s, "pass" if ok else "fail", parts, acc["span"], "ps",
                       "compute + collective + memcpy + idle", "span", "" if ok else
                       f"GPU {d} stream {s}: the budget parts add up to {parts} ps for a span "
                       f"of {acc['span']} ps (idle {acc['idle']} ps vs {idle2} ps from the "
                       "union of its events)"))
    return out


def check_program_runs(a) -> list[dict]:
    """A TPU's records nest: every op run inside a program run on its device, every program
    run joined to the host's dispatch of it (tracekit.tpu.join_runs' counts)."""
    j = getattr(a, "tpu_joins", None)
    if not j:
        return []
    ops = j["dispatch"] + j["no_run"] + j.get("undispatched", 0)
    inside = ops - j["no_run"]
    out = [row("ops_in_program_runs", "", "", "pass" if not j["no_run"] else "fail", inside,
               ops, "count", "op runs inside a program run", "op runs", "" if not j["no_run"]
               else f"{j['no_run']} of {ops} TPU op runs lie outside every program run on their "
               "device: they have no program and no dispatch")]
    ok = j["runs_dispatched"] == j["runs"]
    out.append(row("program_runs_dispatched", "", "", "pass" if ok else "fail",
                   j["runs_dispatched"], j["runs"], "count",
                   "program runs joined to a host dispatch", "program runs", "" if ok else
                   f"{j['runs'] - j['runs_dispatched']} of {j['runs']} TPU program runs join no "
                   "host dispatch (dispatched before the capture began, or by a host not "
                   "recorded): the gaps before them are of unknown cause"))
    return out


def rows(a, step_rows, stream_acc, info, idle_gpus) -> list[dict]:
    """Checks 2 to 5 on step 1's analysis `a` and its per-step tables, in reconcile's order
    (a TPU's nesting of op runs in program runs in dispatches with check 2)."""
    return (check_joins(a) + check_program_runs(a) + check_kernels_per_step(a, step_rows)
            + check_same_work(a, step_rows, idle_gpus, info.get("groups"), info.get("compared"))
            + check_stream_budgets(a, stream_acc, info["by_stream"]))
