"""Inventory of one capture: what it holds, and whether its two files agree on the GPU events: the
analysis. Its door, with the command line and what it writes, is scripts/capture_info.py."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import model_checks  # sibling skill: step 1's counts of the trace
from jaxperf.gpu import peaks as gpu_peaks
from tracekit import gpu as gpu_rules
from tracekit import scratch, step_cli, tpu, trace_reader
from tracekit import trace_rules as rules
from tracekit.records import Device

RESULT_FILE = "capture_info.json"

HOST_STATS = frozenset({"hlo_op", "program_id", "correlation_id"})

# Units of the device stats as the profiler writes them (printed beside each value).
DEVICE_STAT_UNITS = {"clock_rate": " kHz", "memory_size": " bytes",
                     "memory_bandwidth": " bytes/s (derived from the memory clock: not a "
                                         "ceiling)"}

DEVICE_STATS = ("device_vendor", "core_count", "clock_rate", "memory_size", "memory_bandwidth",
                "compute_cap_major", "compute_cap_minor")


def gpu_counts_xplane(space) -> dict[int, dict]:
    """Per device plane (a GPU's, or a TPU core's) its stats, lines and the events the trace
    would hold too (a TPU's `Async XLA Ops` line is the xplane's alone: left out of the count)."""
    from jaxperf.tpu import op_runs
    out = {}
    for kind, planes, ordinal in (("GPU", space.gpu_planes(), lambda p: p.gpu_ordinal),
                                  ("TPU", op_runs.tpu_planes(space), op_runs.ordinal)):
        for plane in planes:
            lines = {ln.id: (ln.name, len(ln)) for ln in plane.lines}
            out[ordinal(plane)] = {"kind": kind, "stats": plane.stats, "lines": lines,
                                   "events": sum(n for name, n in lines.values()
                                                 if kind == "GPU" or name != tpu.ASYNC_LINE)}
    return out


def program_rows(space) -> list[dict]:
    """One row per program in /host:metadata; a program whose HLO cannot be read, or is not
    consistent (hlo_program.load's checks), gets an `error` (a refusal for that program, not the
    loss of the whole xplane)."""
    from jaxperf.program.hlo_program import Program, ProgramError, load
    rows = []
    for pid, (name, blob) in sorted(space.hlo_protos().items()):
        try:
            module = load(blob, pid).module
        except ProgramError as exc:
            cause = exc.__cause__ if exc.parse else None
            rows.append({"program_id": pid, "entry": name,
                         "error": (str(cause) or type(cause).__name__) if cause else str(exc),
                         "parses": not exc.parse})
            continue
        instructions = sum(len(c.instructions) for c in module.computations)
        loops = [Program.trip_count(ins) for comp in module.computations
                 for ins in comp.instructions if ins.opcode == "while"]
        rows.append({"program_id": pid, "entry": name, "module": module.name,
                     "computations": len(module.computations), "instructions": instructions,
                     "while_loops": loops, "error": None, "parses": True})
    return rows


def profiler_calls(host) -> dict | None:
    """The profiler's own start-up and stop on the host (trace_rules.PROFILER_CALL_RE): each
    call's total ms, and the ms between the end of the last start and the first stop (the
    traced work); None when the host plane records neither."""
    if host is None:
        return None
    ids = {k: m.group(1) for k, name, _ in host.event_metadata_items()
           if (m := rules.PROFILER_CALL_RE.match(name)) and m.group(1) != "trace"}
    if not ids:
        return None
    spans: dict[str, list] = {"start_trace": [], "stop_trace": []}
    for ln in host.lines:
        c = ln.columns(frozenset(), ids)
        for mid, start, dur in zip(c.mid.tolist(), c.start.tolist(), c.dur.tolist(),
                                   strict=True):
            spans[ids[mid]].append((start, start + dur))
    out = {f"{call}_ms": sum(b - a for a, b in sp) / 1e9 if sp else None
           for call, sp in spans.items()}
    starts, stops = spans["start_trace"], spans["stop_trace"]
    out["between_ms"] = (min(a for a, _ in stops) - max(b for _, b in starts)) / 1e9 \
        if starts and stops and min(a for a, _ in stops) >= max(b for _, b in starts) else None
    return out


def xplane_facts(space) -> dict:
    """What the inventory reads of the xplane, taken at once so that the decoded xplane can be
    let go before the trace is read: each GPU's counts and device stats, the host plane's lines,
    events and (without GPU planes) its XLA:CPU thunks and GPU runtime calls, the profile's
    span, and the stats repeated on one event (counted as the events decode, so taken last)."""
    step_cli.progress("counting each GPU's events in the xplane")
    xg = gpu_counts_xplane(space)
    host = space.plane("/host:CPU")
    facts = {"gpus": xg, "host": None, "cpu_thunk_events": None, "calls": None,
             "profile_ms": None}
    if host and not xg:
        stats = [e.stats for ln in host.lines for e in ln.events(HOST_STATS)]
        facts["cpu_thunk_events"] = sum(1 for st in stats if gpu_rules.is_cpu_thunk(st))
        facts["calls"] = sum(1 for st in stats if gpu_rules.is_gpu_runtime_call(st))
    if host:
        facts["host"] = {"lines": len(host.lines), "xplane_events": host.event_count()}
    start, stop = space.profile_times_ns()
    if start and stop and stop >= start:
        facts["profile_ms"] = (stop - start) / 1e6
    facts["profiler"] = profiler_calls(host)
    facts["gpu"] = gpu_peaks.identify_space(space)
    from jaxperf.tpu import chip
    facts["tpu"] = chip.describe(space)
    facts["repeated_stat_events"] = space.repeated_stat_events  # after every decode
    return facts


def build_inventory(files, xf, tf, programs, xplane_error, trace_error) -> dict:
    """The inventory as data (capture_info.json; fields: references/scratch-layout.md), from
    the xplane's facts (`xf`: xplane_facts) and the trace's (`tf`: model_checks.trace_totals),
    each None where its file could not be read."""
    xg = xf["gpus"] if xf else {}
    tg = {o: {"events": n} for o, n in tf["gpu_events"]} if tf else {}
    gpus, checks, refusals = [], [], []
    for o in sorted(set(xg) | set(tg)):
        x, t = xg.get(o), tg.get(o)
        idle = (x is None or not x["lines"]) and (t is None or t["events"] == 0)
        g = {"ordinal": o, "kind": x["kind"] if x else (tf.get("kinds") or {}).get(str(o), "GPU"),
             "idle": idle,
             "xplane_events": x["events"] if x else None,
             "trace_events": t["events"] if t else None,
             "device": {k: x["stats"][k] for k in DEVICE_STATS if x and k in x["stats"]},
             "lines": [{"id": lid, "name": lname, "events": n}
                       for lid, (lname, n) in sorted(x["lines"].items())] if x else [],
             "agree": None}
        if not idle:
            if x and t:
                g["agree"] = x["events"] == t["events"]
            checks.append({"name": f"{g['kind']} events per device: json = xplane", "device": o,
                           "status": "not checkable" if g["agree"] is None else
                           ("pass" if g["agree"] else "fail"),
                           "xplane": g["xplane_events"], "trace": g["trace_events"]})
        gpus.append(g)
    result = {"step": "capture_info", "status": "done",
              "capture": {"run_dir": str(files.run_dir), "host": files.host,
                          "trace": scratch.identity(files.trace) if files.trace else None,
                          "xplane": scratch.identity(files.xplane) if files.xplane else None,
                          "hosts": list(files.hosts), "notes": list(files.notes)},
              "xplane": {"file": files.xplane.name if files.xplane else None,
                         "error": xplane_error},
              "trace": {"file": files.trace.name if files.trace else None, "error": trace_error,
                        "notes": list(tf["notes"]) if tf else []},
              "gpus": gpus, "cpu_thunk_events": None, "host": None, "profile_ms": None,
              "profiler": None, "gpu_model": None, "device": None,
              "repeated_stat_events": 0,
              "programs": programs, "checks": checks, "refusals": refusals}
    if xf:
        calls = xf["calls"]
        result.update({k: xf[k] for k in ("cpu_thunk_events", "profile_ms", "profiler",
                                          "repeated_stat_events")})
        if calls:
            refusals.append(f"cannot count GPU events in the xplane because it has no "
                            f"/device:GPU plane while its host plane holds {calls} GPU "
                            "runtime calls (events with a correlation id): its GPU planes "
                            "are missing, so it is not a CPU capture")
        if xf["host"]:
            result["host"] = {**xf["host"], "trace_events": tf["host_events"] if tf else None,
                              "gpu_runtime_calls": calls}
        result["gpu_model"] = None if xf["tpu"] else {  # a TPU: `device` says what it is
            k: xf["gpu"].get(k) for k in ("model", "basis", "why", "devices")}
        result["device"] = xf["tpu"] or Device(
            kind="GPU" if xg else ("CPU" if xf["cpu_thunk_events"] else None),
            model=xf["gpu"].get("model"), cores=len(xg), peaks=None, versions=None)
    if programs is not None and not programs:
        refusals.append("cannot attribute kernels to instructions or source lines because the "
                        "xplane holds no HLO (/host:metadata)")
    refusals += [f"cannot read program {r['entry']} because its HLO "
                 f"{'is not consistent' if r['parses'] else 'proto does not parse'} ({r['error']})"
                 for r in programs or () if r["error"]]
    return result


def render(r: dict) -> list[str]:
    """The inventory as text: a rendering of the result, nothing computed here."""
    c = r["capture"]
    out = [f"capture: {c['run_dir']} host {c['host']}"]
    out += [f"note: {n}" for n in c["notes"]]
    if len(c["hosts"]) > 1:
        out.append(f"note: this run has {len(c['hosts'])} hosts ({', '.join(c['hosts'])}); "
                   f"this inventory covers {c['host']} only")
    for key in ("xplane", "trace"):
        f = r[key]
        out.append(f"{key}: {f['file'] or 'MISSING'}"
                   + (f" (unreadable: {f['error']})" if f["error"] else ""))
        out += [f"note: {n}" for n in f.get("notes", ())]
    for g in r["gpus"]:
        o, kind = g["ordinal"], g.get("kind", "GPU")
        if g["idle"]:
            out.append(f"{kind} {o}: idle (no events)")
            continue
        parts = [f"{kind} {o}:"]
        if g["xplane_events"] is not None:
            parts.append(f"{len(g['lines'])} lines, {g['xplane_events']} events in the xplane;")
        if g["trace_events"] is not None:
            parts.append(f"{g['trace_events']} events in the trace;")
        parts.append("(one file only: nothing to compare)" if g["agree"] is None else
                     ("agree" if g["agree"] else "DIFFER"))
        out.append(" ".join(parts))
        if g["xplane_events"] is not None and kind == "GPU":
            desc = ", ".join(f"{k}={g['device'][k]}{DEVICE_STAT_UNITS.get(k, '')}"
                             for k in DEVICE_STATS if k in g["device"])
            out.append(f"  device: {desc or 'no device stats'}")
        if g["xplane_events"] is not None:
            out += [f"  line {ln['id']} {ln['name']!r}: {ln['events']} events" for ln in g["lines"]]
    if not r["gpus"]:
        out.append("GPUs: none in this capture")
    if (r["host"] or {}).get("gpu_runtime_calls"):
        out.append(f"GPU runtime calls: {r['host']['gpu_runtime_calls']} on /host:CPU (events "
                   "with a correlation id) but no GPU plane: the GPU planes are missing, so "
                   "this is not a CPU capture")
    if r["cpu_thunk_events"]:
        out.append(f"CPU: {r['cpu_thunk_events']} XLA:CPU thunk events carry hlo_op on "
                   "/host:CPU (they are this capture's kernels)")
    if h := r["host"]:
        line = f"host: {h['lines']} lines, {h['xplane_events']} events in the xplane"
        if h["trace_events"] is not None:
            line += f"; {h['trace_events']} in the trace"
            if h["trace_events"] != h["xplane_events"]:
                line += " (the exporter drops memory-allocation events)"
        out.append(line)
    if r["profile_ms"]:
        out.append(f"profile: {r['profile_ms']:.3f} ms wall clock")
    p = r.get("profiler") or {}
    for call, what in (("start_trace", "start-up"), ("stop_trace", "stop")):
        if p.get(f"{call}_ms") is not None:
            out.append(f"  of which {p[f'{call}_ms']:.3f} ms the profiler's own {what} ({call})")
    if p.get("between_ms") is not None:
        out.append(f"  traced work (from the end of start_trace to stop_trace): "
                   f"{p['between_ms']:.3f} ms")
    g = r.get("gpu_model")
    if g and (r.get("device") or {}).get("kind") != "TPU":
        out.append(f"GPU model: {g['model']} (its vendor, compute capability, cores, clock and "
                   f"memory match that model's row; evidence {g['basis']}: "
                   "references/peaks-sources.md)" if g["model"] else
                   f"GPU model: not identified ({g['why']})")
    d = r.get("device") or {}
    if d.get("kind") == "TPU":
        out.append(f"TPU: {d['model']} ({d['generation'] or 'generation not read'}), "
                   f"{d['cores']} core(s) in the capture"
                   + (", megacore" if d["megacore"] else ""))
        out.append("  peaks (read from the device plane; not a datasheet): " + (", ".join(
            f"{k} {v['value']:.4g} {v['unit']}" for k, v in d["peaks"].items()) or "none"))
        v = d["versions"]
        out.append(f"  jax {v['jax']}, jaxlib {v['jaxlib']}; TPU runtime: {v['tpu_runtime']}")
    if r["repeated_stat_events"]:
        out.append(f"note: {r['repeated_stat_events']} stats repeated a key on one event; "
                   "the first value was kept")
    programs = r["programs"]
    if programs is None:
        out.append("programs: not read (no readable xplane)")
    elif not programs:
        out.append("programs: none (no /host:metadata HLO): instruction and source-line "
                   "attribution is impossible for this capture")
    else:
        out.append(f"programs: {len(programs)}")
        for p in programs:
            if p["error"]:
                out.append(f"  {p['entry']}: UNREADABLE HLO ({p['error']})")
                continue
            loops = ", ".join("?" if n is None else str(n) for n in p["while_loops"])
            out.append(f"  {p['entry']}: module {p['module']}, {p['computations']} "
                       f"computations, {p['instructions']} instructions"
                       + (f", while loops with trip counts [{loops}]" if loops else ""))
    # names come from the capture: a newline or an escape in one must not split or hide a line
    return [rules.printable(line) for line in out]


def _trace_facts(p: dict) -> dict:
    """Step 1's hand-off of the trace's counts, taken apart (scratch.handoff_get's shape)."""
    return {"gpu_events": [(int(o), int(n)) for o, n in p["gpu_events"]],
            "host_events": int(p["host_events"]), "notes": [str(x) for x in p["notes"]]}


def run(capture, own_process: bool = False, out: Path | None = None) -> dict:
    """Step 0 on a capture (capture_inputs.Capture: each file read once per process, shared with
    the later steps); the inventory as data. A file that cannot be read is said in the result;
    a StepError (exit 1, or 3 for a missing package) when neither can. In a process of its own
    (`own_process`) the decoded xplane is let go once its facts are taken, before the trace is
    read (the step's peak is then one file's, not both). With `out`, the xplane's per-stream
    totals are handed on there for step 2 (scratch.handoff_put), and the trace is read only
    where step 1 has not handed on its counts of this very file (it holds the decoded trace;
    investigate.py runs step 0 after it)."""
    files = capture.files
    xf = tf = programs = streams = None
    xplane_error = trace_error = None
    missing_dependency = False
    if files.xplane:
        try:
            from jaxperf.read import xplane_reader
            # each plane's events decoded only where read: the GPU planes' only for their
            # per-stream totals, which step 4 hands on where it has read this very file
            space = xplane_reader.space_of(capture, lazy=True)
            programs = program_rows(space)
            xf = xplane_facts(space)
            handed = scratch.handoff_get(out, "xplane_streams", [files.xplane]) \
                if out is not None else None
            streams = xplane_reader.stream_totals(space) if out is not None and handed is None \
                else None
            del space
            if own_process:
                capture.cache.pop("space", None)
                gc.collect()  # its planes and lines refer to each other
        except Exception as exc:  # noqa: BLE001 - each reported as one sentence
            from jaxperf.read import xprotos
            missing_dependency = isinstance(exc, (ImportError, xprotos.MissingDependency))
            xplane_error = (rules.printable(exc) if not isinstance(exc, ImportError)
                            else f"{exc}; pip install -r requirements.txt")
            xf = programs = None
            if missing_dependency:
                # a half inventory would read as "no programs": say what is missing instead
                raise step_cli.MissingPackage(
                    f"cannot read {files.xplane.name}: {xplane_error}") from None
    if files.trace:
        # step 1's counts of this very trace where it handed them on, else the trace read here
        tf = scratch.handoff_get(out, "trace_facts", [files.trace], _trace_facts) \
            if out is not None else None
        if tf is None:
            try:
                trace = capture.trace
                step_cli.progress("counting each GPU's events in the trace")
                tf = model_checks.trace_totals(trace)[1]
            except trace_reader.TraceError as exc:
                trace_error = rules.printable(exc)
    if xf is None and tf is None:
        raise step_cli.StepError(f"nothing readable in {files.run_dir}: "
                                 f"{xplane_error or trace_error or 'no files'}",
                                 3 if missing_dependency and not trace_error else 1)
    if streams is not None:  # the step has succeeded: its hand-off to step 2
        scratch.handoff_put(out, "xplane_streams", [files.xplane], {"streams": streams})
    return build_inventory(files, xf, tf, programs, xplane_error, trace_error)


def write_json(path: Path, data: dict) -> None:
    """Write a JSON file whole or not at all (a temporary file, then a rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(scratch.result_text(RESULT_FILE, data))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
