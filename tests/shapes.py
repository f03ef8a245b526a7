#!/usr/bin/env python3
"""Inputs shaped to be expensive rather than broken, each grown along one dimension (a count, a
length, a depth, a width) by a generator of its size n, and the harness that runs each at n/2
and n and compares: the second must cost under 3 times the first (a linear cost doubles, a
quadratic one quadruples, an exponential one squares). The time bound is the input's own half,
not this machine's clock; a per-run limit (--timeout) ends a run that would take minutes.

Usage (the byte mutations of fuzz_inputs.py are its other half):
    PYTHONPATH=tests:scripts .venv/bin/python tests/shapes.py [--shape NAME ...] [--scale F]
        [--timeout S] [--json FILE]

Each shape names the script it is aimed at and the dimension it grows; --scale multiplies every
n (tests run 1, bench/RESULTS.md records larger). Each run is a forked child running the
script's main(argv) (fuzz_inputs.run_forked): its wall time and peak resident memory. Exit 0
when every shape's cost doubles at most, 1 otherwise (each named), 2 usage.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = REPO / "scripts"
SIBLING = REPO / "analyzing-jax-launch-overhead" / "scripts"
PAGE = REPO / "writing-trace-report-pages" / "scripts"
RATIO = 3.0
HOST_PID = 10**6  # above any GPU's pid of a shape


# ---------------------------------------------------------------- traces

def _trace_file(path: Path, events: list) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", compresslevel=1) as fh:
        json.dump({"traceEvents": events + [{}]}, fh)
    return path


def _meta(gpus: int = 1, streams: int = 1) -> list:
    ev = [{"ph": "M", "name": "process_name", "pid": HOST_PID, "args": {"name": "/host:CPU"}},
          {"ph": "M", "name": "thread_name", "pid": HOST_PID, "tid": 3, "args": {"name": "python"}}]
    for g in range(gpus):
        ev.append({"ph": "M", "name": "process_name", "pid": g + 1,
                   "args": {"name": f"/device:GPU:{g}"}})
        for s in range(streams):
            ev.append({"ph": "M", "name": "thread_name", "pid": g + 1, "tid": 7 + s,
                       "args": {"name": f"Stream #{7 + s}(Kernel)"}})
    return ev


def _launched(ev: list, t: float, corr: int, pid: int, tid: int, name: str) -> None:
    ev.append({"ph": "X", "name": "cudaLaunchKernel", "pid": HOST_PID, "tid": 3, "ts": t,
               "dur": 0.5, "args": {"correlation_id": str(corr)}})
    ev.append({"ph": "X", "name": name, "pid": pid, "tid": tid, "ts": t + 1.0, "dur": 0.5,
               "args": {"correlation_id": str(corr), "hlo_op": name}})


def tiny_kernels(n: int, folder: Path) -> list[str]:
    """n tiny kernels on one stream, each after a gap and its own launch: no steps."""
    ev = _meta()
    for i in range(n):
        _launched(ev, 10.0 + 3.0 * i, i + 1, 1, 7, f"fusion.{i % 7}")
    return [str(_trace_file(folder / "h.trace.json.gz", ev))]


def long_host_event(n: int, folder: Path) -> list[str]:
    """n tiny kernels after gaps, and one host event on their launch thread lasting the whole
    capture (an outer Python function, a wait): each gap's search for the host events that
    overlap it started a capture's length back."""
    ev = _meta()
    ev.append({"ph": "X", "name": "$train.py:10 main", "pid": HOST_PID, "tid": 3, "ts": 5.0,
               "dur": 10.0 + 3.0 * n, "args": {}})
    for i in range(n):
        _launched(ev, 10.0 + 3.0 * i, i + 1, 1, 7, f"fusion.{i % 7}")
    return [str(_trace_file(folder / "h.trace.json.gz", ev))]


def many_gpus(n: int, folder: Path) -> list[str]:
    """n GPUs, each launched by a thread of its own (as PjRt runs one per device), 20 kernels
    each in 4 steps of a step-numbered annotation."""
    ev = _meta(gpus=n)
    for g in range(n):
        ev.append({"ph": "M", "name": "thread_name", "pid": HOST_PID, "tid": 100 + g,
                   "args": {"name": f"device {g}"}})
    corr = 0
    for step in range(4):
        t0 = 10.0 + step * 100.0
        ev.append({"ph": "X", "name": "train", "pid": HOST_PID, "tid": 3, "ts": t0, "dur": 95.0,
                   "args": {"step_num": str(step)}})
        for g in range(n):
            for k in range(5):
                corr += 1
                _launched(ev, t0 + 1.0 + k * 3.0, corr, g + 1, 7, f"fusion.{k}")
                ev[-2]["tid"] = 100 + g
    return [str(_trace_file(folder / "h.trace.json.gz", ev))]


def many_planes(n: int, folder: Path) -> list[str]:
    """An xplane of n GPU planes, three kernels each: every plane is decoded and checked, one at
    a time where a step reads them so (the check of each against those read before)."""
    from xspace_builder import XSpaceBuilder
    b = XSpaceBuilder(hostnames=["h"])
    for g in range(n):
        s = b.plane(f"/device:GPU:{g}", stats={"device_vendor": "Nvidia"}).line(
            7, "Stream #7(Kernel)", timestamp_ns=1000)
        for k in range(3):
            s.event("fusion.1", offset_ps=5 + 100 * k, duration_ps=10)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "h.xplane.pb"
    path.write_bytes(b.serialize())
    return [str(path)]


def one_thread_gpus(n: int, folder: Path) -> list[str]:
    """n GPUs launched in turn by one host thread, 10,240 kernels in all: each GPU's gap holds
    the launches for the n - 1 others, so the host events a gap is searched for grow with n
    while the events do not."""
    ev = _meta(gpus=n)
    t = 10.0
    for i in range(10_240):
        ev.append({"ph": "X", "name": "cudaLaunchKernel", "pid": HOST_PID, "tid": 3, "ts": t,
                   "dur": 0.8, "args": {"correlation_id": str(i + 1)}})
        ev.append({"ph": "X", "name": f"fusion.{i % 7}", "pid": i % n + 1, "tid": 7,
                   "ts": t + 0.9, "dur": 0.1, "args": {"correlation_id": str(i + 1)}})
        t += 1.0
    return [str(_trace_file(folder / "h.trace.json.gz", ev))]


def many_streams(n: int, folder: Path) -> list[str]:
    """One GPU with n streams, 10 kernels on each, in one step."""
    ev = _meta(streams=n)
    ev.append({"ph": "X", "name": "train", "pid": HOST_PID, "tid": 3, "ts": 5.0,
               "dur": 10.0 + 3.0 * 10 * n, "args": {"step_num": "0"}})
    corr = 0
    for k in range(10):
        for s in range(n):
            corr += 1
            _launched(ev, 10.0 + 3.0 * corr, corr, 1, 7 + s, f"fusion.{k}")
    return [str(_trace_file(folder / "h.trace.json.gz", ev))]


def long_name(n: int, folder: Path) -> list[str]:
    """60 kernels named by one name of n characters (hex digits: it compresses as a real trace
    does, not as a gzip bomb)."""
    import hashlib
    name = "".join(hashlib.sha256(str(i).encode()).hexdigest() for i in range(n // 64 + 1))
    ev = _meta()
    for i in range(60):
        _launched(ev, 10.0 + 3.0 * i, i + 1, 1, 7, name[:n])
    return [str(_trace_file(folder / "h.trace.json.gz", ev))]


# ---------------------------------------------------------------- reports and drawings

def _scratch_report(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "steps.csv").write_text("step,device,dur_us\n1,0,5.000\n", encoding="utf-8")
    report = folder / "report.md"
    report.write_text(text, encoding="utf-8")
    return report


def citations(n: int, folder: Path) -> list[str]:
    """One paragraph of n citations in one sentence."""
    text = "The step " + " ".join(
        f"took {i}.0 us (measured; steps.csv: dur_us, step=1, device=0)," for i in range(n))
    return [str(_scratch_report(folder, text + "\n")), "--out", str(folder)]


def unclosed_citations(n: int, folder: Path) -> list[str]:
    text = "It took 5 us (measured; steps.csv: dur_us " * n + "\n"
    return [str(_scratch_report(folder, text)), "--out", str(folder)]


def unclosed_comments(n: int, folder: Path) -> list[str]:
    return [str(_scratch_report(folder, "# R\n\n" + "<!-- " * n + "text\n")), "--out",
            str(folder)]


def report_of(unit: str):
    """A report of one paragraph: `unit` n times (runs a pattern could rescan)."""
    def make(n: int, folder: Path) -> list[str]:
        text = "# R\n\nIt took 5 us (measured; steps.csv: dur_us) " + unit * n + "\n"
        return [str(_scratch_report(folder, text)), "--out", str(folder)]
    return make


def table_rule(n: int, folder: Path) -> list[str]:
    """A table whose second line, where its rule would be, is n spaces and a letter."""
    text = "# R\n\n| a |\n" + " " * n + "x\n| 5 us (measured; steps.csv: dur_us) |\n"
    return [str(_scratch_report(folder, text)), "--out", str(folder)]


def page_citations(n: int, folder: Path) -> list[str]:
    """The page of a report of n citations never closed."""
    report = _scratch_report(folder, "# R\n\n" + "It took 5 us (measured; steps.csv: dur_us " * n
                             + "\n")
    return [str(report), "--scratch", str(folder), "--out", str(folder / "p.html")]


def spaced_citation(n: int, folder: Path) -> list[str]:
    """One citation never closed, its source n spaces long (a pattern that tries each length
    of a lazy group against the spaces after it is quadratic in them)."""
    report = _scratch_report(folder, "# R\n\nIt took 5 us (measured; steps.csv: dur_us"
                             + " " * n + "x\n")
    return [str(report), "--out", str(folder)]


def page_spaced_citation(n: int, folder: Path) -> list[str]:
    argv = spaced_citation(n, folder)
    return [argv[0], "--scratch", str(folder), "--out", str(folder / "p.html")]


def page_comments(n: int, folder: Path) -> list[str]:
    report = _scratch_report(folder, "# R\n\n" + "<!-- " * n + "text\n")
    return [str(report), "--scratch", str(folder), "--out", str(folder / "p.html")]


def drawing_sheet(n: int, folder: Path) -> list[str]:
    """A drawing whose <style> holds n @import statements before its one rule, and a rect whose
    fill is a word of n characters."""
    report = _scratch_report(folder, "# R\n\n![d](d.svg)\n")
    (folder / "d.svg").write_text(
        '<svg xmlns="http://www.w3.org/2000/svg"><style>' + "@import x;" * n
        + 'rect{fill:red}</style><rect fill="' + "u" * n + '"/></svg>', encoding="utf-8")
    return [str(report), "--scratch", str(folder), "--out", str(folder / "p.html")]


# ---------------------------------------------------------------- HLO programs (in-process)

def _hlo_module(name: str):
    sys.path[:0] = [str(SCRIPTS), str(SIBLING)]
    from jaxperf.read import xprotos
    return xprotos.classes()["HloModuleProto"](name=name, id=1)


def fusion_depth(n: int, folder: Path):
    """Fusions nested n deep, each level calling the one below twice (2^n paths): the frames
    of the root and the program's fingerprint."""
    m = _hlo_module("jit_deep")
    ids = iter(range(1, 10**7))
    prev = None
    for k in range(n + 1):
        comp = m.computations.add(name=f"c{k}", id=100000 + k)
        p = comp.instructions.add(name=f"p{k}", opcode="parameter", id=next(ids))
        if prev is None:
            r = comp.instructions.add(name=f"add{k}", opcode="add", id=next(ids),
                                      operand_ids=[p.id, p.id])
        else:
            a = comp.instructions.add(name=f"fa{k}", opcode="fusion", id=next(ids),
                                      operand_ids=[p.id], fusion_kind="kLoop")
            a.called_computation_ids.append(prev)
            r = comp.instructions.add(name=f"fb{k}", opcode="fusion", id=next(ids),
                                      operand_ids=[a.id], fusion_kind="kLoop")
            r.called_computation_ids.append(prev)
        for ins in comp.instructions:
            ins.shape.element_type = 11
            ins.shape.dimensions.append(4)
        comp.root_id = r.id
        prev = comp.id
    m.entry_computation_id = prev
    m.entry_computation_name = f"c{n}"

    def run():
        """The root's frames and the program's fingerprint."""
        from jaxperf.match import kernel_match as km
        from jaxperf.program.hlo_program import Program
        prog = Program(m, 1)
        return (prog.frames(prog.computations[m.entry_computation_id].instructions[-1]),
                km.Plan(prog).fingerprint(m.entry_computation_id))
    return run


def frame_chain(n: int, folder: Path):
    """n stack frames in one chain, an instruction on every tenth: each instruction's stack."""
    m = _hlo_module("jit_chain")
    sfi = m.stack_frame_index
    sfi.file_names.append("user.py")
    sfi.function_names.append("f")
    for i in range(n):
        sfi.file_locations.add(file_name_id=1, function_name_id=1, line=i + 1)
        sfi.stack_frames.add(file_location_id=i + 1, parent_frame_id=i)
    comp = m.computations.add(name="main", id=1)
    for i in range(0, n, 10):
        ins = comp.instructions.add(name=f"c{i}", opcode="constant", id=i + 1)
        ins.shape.element_type = 11
        ins.metadata.stack_frame_id = i + 1
    comp.root_id = ins.id
    m.entry_computation_id = 1

    def run():
        """Each instruction's stack (its frames, innermost first)."""
        from jaxperf.program.hlo_program import Program
        prog = Program(m, 1, check=False)
        return [prog.frames(ins) for ins in comp.instructions]
    return run


# ---------------------------------------------------------------- the shapes

@dataclass(frozen=True)
class Shape:
    name: str
    dimension: str  # what n counts
    script: Path | None  # the script run on the files; None: `make` returns a callable
    make: object  # (n, folder) -> argv of the script, or a callable to time in-process
    n: int  # the size a test runs (and its half); --scale multiplies it
    most: int | None = None  # the readers' stated bound on n: larger is refused, by design


SHAPES = {s.name: s for s in [
    Shape("tiny-kernels-step1", "kernels", SIBLING / "skip_stats.py", tiny_kernels, 20_000),
    Shape("tiny-kernels-step3", "kernels", SCRIPTS / "swimlanes.py", tiny_kernels, 20_000),
    Shape("long-host-event", "kernels", SIBLING / "skip_stats.py", long_host_event, 20_000),
    Shape("long-host-event-step3", "kernels", SCRIPTS / "swimlanes.py", long_host_event,
          20_000),
    Shape("many-gpus", "GPUs", SIBLING / "skip_stats.py", many_gpus, 512),
    Shape("many-gpus-step3", "GPUs", SCRIPTS / "swimlanes.py", many_gpus, 512),
    Shape("many-gpus-step0", "GPUs", SCRIPTS / "capture_info.py", many_gpus, 512),
    Shape("one-thread-gpus", "GPUs", SIBLING / "skip_stats.py", one_thread_gpus, 512),
    Shape("many-planes-step0", "planes", SCRIPTS / "capture_info.py", many_planes, 2_000),
    Shape("many-streams", "streams", SIBLING / "skip_stats.py", many_streams, 1_000),
    Shape("long-name", "characters", SIBLING / "skip_stats.py", long_name, 600_000),
    Shape("citations", "citations", SCRIPTS / "factcheck.py", citations, 20_000),
    Shape("unclosed-citations", "citations", SCRIPTS / "factcheck.py", unclosed_citations,
          20_000),
    Shape("unclosed-comments", "comments", SCRIPTS / "factcheck.py", unclosed_comments,
          40_000),
    Shape("report-of-spaces", "spaces", SCRIPTS / "factcheck.py", report_of(" "), 400_000),
    Shape("report-of-exponents", "'1e'", SCRIPTS / "factcheck.py", report_of("1e"), 100_000),
    Shape("report-of-link-starts", "']('", SCRIPTS / "factcheck.py", report_of("]("),
          100_000),
    Shape("report-table-rule", "spaces", SCRIPTS / "factcheck.py", table_rule, 400_000),
    Shape("report-of-words", "words", SCRIPTS / "factcheck.py", report_of("ab "), 100_000),
    Shape("page-citations", "citations", PAGE / "build_page.py", page_citations, 20_000),
    Shape("spaced-citation", "spaces", SCRIPTS / "factcheck.py", spaced_citation, 200_000),
    Shape("page-spaced-citation", "spaces", PAGE / "build_page.py", page_spaced_citation,
          200_000),
    Shape("page-comments", "comments", PAGE / "build_page.py", page_comments, 40_000),
    Shape("drawing-sheet", "characters", PAGE / "build_page.py", drawing_sheet, 200_000),
    # hlo_program.MAX_CALL_DEPTH: a program nesting calls deeper is refused as corrupt
    Shape("fusion-depth", "levels", None, fusion_depth, 40, most=63),
    Shape("frame-chain", "frames", None, frame_chain, 40_000),
]}


@dataclass
class Cost:
    n: int
    seconds: float  # CPU (user + system), which other processes' load inflates less than wall
    rss_mib: float
    outcome: str


def costs(shape: Shape, n: int, work: Path, timeout: float, repeats: int) -> Cost:
    """The shape made once at size n, then run `repeats` times, each a forked child (a script's
    main(argv) into a fresh scratch folder, or the in-process callable) under `timeout`: the
    fastest run (its CPU seconds), or the first that failed."""
    import fuzz_inputs as fz
    folder = work / f"{shape.name}-{n}"
    made = shape.make(n, folder)
    if shape.script is None:
        mod = SimpleNamespace(main=lambda argv: made() and 0)  # its result is not the exit
    else:
        mod = fz.module(shape.script.stem, shape.script)
    best = None
    for r in range(repeats):
        logs = folder / f"logs-{r}"
        logs.mkdir(parents=True)
        argv = [] if shape.script is None else made if shape.script.name in (
            "factcheck.py", "build_page.py") else made + ["--out", str(folder / f"out-{r}")]
        rc, why, _, rss_mib, _, err, cpu = fz.run_forked(mod, argv, logs, timeout=timeout,
                                                         memory_mib=8192)
        outcome = why or ("ok" if rc in (0, 4) else f"exit {rc}: {err.strip()[-300:]}")
        c = Cost(n, cpu, rss_mib, outcome)
        if outcome != "ok":
            return c
        if best is None or c.seconds < best.seconds:
            best = c
    return best


def check(shape: Shape, work: Path, scale: float = 1.0, timeout: float = 120.0,
          repeats: int = 2) -> dict:
    """The shape at n/2 and n: its costs and a verdict."""
    n = max(2, int(shape.n * scale))
    if shape.most is not None:
        n = min(n, shape.most)
    half = costs(shape, n // 2, work, timeout, repeats)
    whole = costs(shape, n, work, timeout, repeats) if half.outcome == "ok" else half
    bad = next((r.outcome for r in (half, whole) if r.outcome != "ok"), None)
    # a forked child's fixed cost (its start, writing its tables) counts in both: 20 ms slack
    if bad is None and whole.seconds >= RATIO * half.seconds + 0.02:
        # measured again before it fails, the fastest of more runs each: a loaded machine's
        # noise (another test's processes) does not repeat, a cost that grows too fast does
        again = work / "again"
        half2 = costs(shape, n // 2, again, timeout, repeats + 1)
        whole2 = costs(shape, n, again, timeout, repeats + 1)
        if half2.outcome == whole2.outcome == "ok":
            half = min(half, half2, key=lambda c: c.seconds)
            whole = min(whole, whole2, key=lambda c: c.seconds)
        if whole.seconds >= RATIO * half.seconds + 0.02:
            bad = f"{whole.seconds / half.seconds:.1f}x the cost at half the size"
    return {"shape": shape.name, "script": shape.script.name if shape.script else "in-process",
            "dimension": shape.dimension, "half": vars(half), "whole": vars(whole),
            "failure": bad}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", action="append", choices=sorted(SHAPES))
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    if args.scale <= 0 or args.timeout <= 0:
        ap.error("--scale and --timeout are positive")
    results = []
    with tempfile.TemporaryDirectory(prefix="shapes-") as tmp:
        for name in args.shape or list(SHAPES):
            r = check(SHAPES[name], Path(tmp), args.scale, args.timeout)
            results.append(r)
            h, w = r["half"], r["whole"]
            print(f"{name:20} {r['script']:18} {h['n']:>11,} {r['dimension']:10} "
                  f"{h['seconds']:8.3f} s {h['rss_mib']:7.0f} MiB   {w['n']:>11,} "
                  f"{w['seconds']:8.3f} s {w['rss_mib']:7.0f} MiB   {r['failure'] or 'ok'}",
                  flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    return 1 if any(r["failure"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
