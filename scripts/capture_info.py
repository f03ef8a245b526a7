#!/usr/bin/env python3
"""Inventory of one capture: what it holds, and whether its two files agree on the GPU events.

Usage:
    python3 -P capture_info.py <xplane.pb | trace.json.gz | run folder | log folder>
                               [--run NAME] [--host NAME]

Example:
    python3 -P $B/scripts/capture_info.py ~/logs/plugins/profile/2026_02_20_13_54_10

Prints (stdout, nothing written to disk):
- which run and host were taken, and the files found;
- each GPU plane's device stats (vendor, cores, clock, memory, compute capability) and, per
  GPU, its streams and event count in the xplane and in the trace, with the verdict
  "agree" or "DIFFER" (step 2's first reconciliation check);
- the host plane's line and event counts (the trace exporter drops memory-allocation events,
  so host counts may differ: said, not flagged);
- the programs in /host:metadata: program id, module name, computations, instructions,
  while loops with their known trip counts;
- the profile's wall-clock span from the Task Environment plane.
Either file may be missing: what the other can tell is printed, and the gap is said.

Exit codes: 0 done; 1 the input cannot be read or is not a capture; 2 usage;
3 a missing dependency (the protobuf package, for the xplane).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# The sibling skill's stdlib-only readers: beside this skill in an install, inside it in a checkout.
SIBLING = next((p for p in (HERE.parent / "analyzing-jax-launch-overhead" / "scripts",
                            HERE.parent.parent / "analyzing-jax-launch-overhead" / "scripts")
                if (p / "trace_reader.py").is_file()), None)
sys.path[:0] = [str(HERE)] + ([str(SIBLING)] if SIBLING else [])

import capture_inputs  # noqa: E402  (sibling skill)
import trace_reader  # noqa: E402  (sibling skill)

DEVICE_STATS = ("device_vendor", "core_count", "clock_rate", "memory_size", "memory_bandwidth",
                "compute_cap_major", "compute_cap_minor")


def gpu_counts_xplane(space) -> dict[int, dict]:
    out = {}
    for plane in space.gpu_planes():
        streams = {ln.id: (ln.name, len(ln)) for ln in plane.lines}
        out[plane.gpu_ordinal] = {"stats": plane.stats, "lines": streams,
                                  "events": sum(n for _, n in streams.values())}
    return out


def gpu_counts_trace(trace) -> dict[int, dict]:
    ordinal_of = {pid: o for o, pid in trace.gpu_pids().items()}
    out = {o: {"events": 0, "threads": {}} for o in ordinal_of.values()}
    for ev in trace.events:
        o = ordinal_of.get(ev.get("pid"))
        if o is not None:
            d = out[o]
            d["events"] += 1
            d["threads"][ev.get("tid")] = d["threads"].get(ev.get("tid"), 0) + 1
    return out


def program_rows(space, parse_hlo) -> list[dict]:
    rows = []
    for pid, (name, blob) in sorted(space.hlo_protos().items()):
        module = parse_hlo(blob)
        instructions = sum(len(c.instructions) for c in module.computations)
        from hlo_program import Program
        loops = [Program.trip_count(ins) for comp in module.computations
                 for ins in comp.instructions if ins.opcode == "while"]
        rows.append({"program_id": pid, "entry": name, "module": module.name,
                     "computations": len(module.computations), "instructions": instructions,
                     "while_loops": loops})
    return rows


def render(files, space, trace, programs, xplane_error, trace_error) -> list[str]:
    out = [f"capture: {files.run_dir} host {files.host}"]
    out += [f"note: {n}" for n in files.notes]
    if len(files.hosts) > 1:
        out.append(f"note: this run has {len(files.hosts)} hosts ({', '.join(files.hosts)}); "
                   f"this inventory covers {files.host} only")
    out.append(f"xplane: {files.xplane.name if files.xplane else 'MISSING'}"
               + (f" (unreadable: {xplane_error})" if xplane_error else ""))
    out.append(f"trace: {files.trace.name if files.trace else 'MISSING'}"
               + (f" (unreadable: {trace_error})" if trace_error else ""))
    xg = gpu_counts_xplane(space) if space else {}
    tg = gpu_counts_trace(trace) if trace else {}
    for o in sorted(set(xg) | set(tg)):
        x, t = xg.get(o), tg.get(o)
        if (x is None or not x["lines"]) and (t is None or t["events"] == 0):
            out.append(f"GPU {o}: idle (no events)")
            continue
        parts = [f"GPU {o}:"]
        if x:
            st = x["stats"]
            desc = ", ".join(f"{k}={st[k]}" for k in DEVICE_STATS if k in st)
            parts.append(f"{len(x['lines'])} lines, {x['events']} events in the xplane;")
        if t:
            parts.append(f"{t['events']} events in the trace;")
        if x and t:
            parts.append("agree" if x["events"] == t["events"] else "DIFFER")
        else:
            parts.append("(one file only: nothing to compare)")
        out.append(" ".join(parts))
        if x:
            out.append(f"  device: {desc or 'no device stats'}")
            for lid, (lname, n) in sorted(x["lines"].items()):
                out.append(f"  line {lid} {lname!r}: {n} events")
    if not xg and not tg:
        out.append("GPUs: none in this capture")
    if space:
        host = space.plane("/host:CPU")
        if host and not xg:
            thunks = sum(1 for ln in host.lines for e in ln.events() if "hlo_op" in e.stats)
            if thunks:
                out.append(f"CPU: {thunks} XLA:CPU thunk events carry hlo_op on /host:CPU "
                           "(they are this capture's kernels)")
        if host:
            line = f"host: {len(host.lines)} lines, {host.event_count()} events in the xplane"
            if trace:
                pids = set(trace.host_pids())
                n = sum(1 for e in trace.events if e.get("pid") in pids)
                line += f"; {n} in the trace"
                if n != host.event_count():
                    line += " (the exporter drops memory-allocation events)"
            out.append(line)
        start, stop = space.profile_times_ns()
        if start and stop:
            out.append(f"profile: {(stop - start) / 1e6:.3f} ms wall clock")
        if space.repeated_stat_events:
            out.append(f"note: {space.repeated_stat_events} stats repeated a key on one event; "
                       "the first value was kept")
    if programs is None:
        out.append("programs: not read (no readable xplane)")
    elif not programs:
        out.append("programs: none (no /host:metadata HLO): instruction and source-line "
                   "attribution is impossible for this capture")
    else:
        out.append(f"programs: {len(programs)}")
        for r in programs:
            loops = ", ".join("?" if n is None else str(n) for n in r["while_loops"])
            out.append(f"  {r['entry']}: module {r['module']}, {r['computations']} computations, "
                       f"{r['instructions']} instructions"
                       + (f", while loops with trip counts [{loops}]" if loops else ""))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[1:]))
    ap.add_argument("capture")
    ap.add_argument("--run", help="run name, when a log folder holds several runs")
    ap.add_argument("--host", help="host name, when a run holds several hosts")
    args = ap.parse_args(argv)
    try:
        files = capture_inputs.resolve(args.capture, run=args.run, host=args.host)
    except capture_inputs.CaptureError as exc:
        print(f"capture_info: {exc}", file=sys.stderr)
        return 1
    space = trace = programs = None
    xplane_error = trace_error = None
    missing_dependency = False
    if files.xplane:
        try:
            import xplane_reader
            space = xplane_reader.load_space(files.xplane)
            programs = program_rows(space, xplane_reader.parse_hlo)
        except Exception as exc:  # noqa: BLE001 - each reported as one sentence
            import xprotos
            missing_dependency = isinstance(exc, (ImportError, xprotos.MissingDependency))
            xplane_error = (f"{exc}" if not isinstance(exc, ImportError)
                            else f"{exc}; pip install -r requirements.txt")
            space = programs = None
    if files.trace:
        try:
            trace = trace_reader.load_trace(files.trace)
        except trace_reader.TraceError as exc:
            trace_error = str(exc)
    if space is None and trace is None:
        print(f"capture_info: nothing readable in {files.run_dir}: "
              f"{xplane_error or trace_error or 'no files'}", file=sys.stderr)
        return 3 if missing_dependency and not trace_error else 1
    print("\n".join(render(files, space, trace, programs, xplane_error, trace_error)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
