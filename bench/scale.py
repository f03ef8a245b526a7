#!/usr/bin/env python3
"""Scale checks: the whole job and each step at 1x, 5x and 10x the seed's size, beside floors.

Usage:
    PYTHONPATH=tests:scripts .venv/bin/python bench/scale.py [--sizes 16,80,160] [--repeat N]
                                                           [--work DIR] [--no-append] [--note TEXT]

The seed is the generated 8-GPU MaxText H100 capture of 16 steps (125,440 kernels, command
buffers on); 80 steps is five times it, 160 ten times (the trace holds the exporter's cap of a
million events from 5x on; the xplane grows). Each capture is generated into
bench/work/maxtext-8gpu-<steps>/ when it is not there (`-m capgen`, about a minute at 10x).

Per size, every item a fresh process (wall seconds, peak resident memory from the kernel's
rusage: for the job, its largest process), N runs each, the median:
- the floors: `json.load` of the trace; a bare parse of the xplane; both in one process (the
  read-once floor of the whole job);
- XProf's own hlo_stats on a copy of the xplane (the incumbent on step 4's question);
- the whole job, `scripts/investigate.py CAPTURE --out DIR` as the README runs it;
- each step alone, with the command the job ran it with (its `logs/<step>.txt`; the options by
  which the job tells a step another has ended left out), in the job's folder, in the job's
  order; step 4 also with `--no-xprof`, beside XProf's hlo_stats (the same question, alone).
Rows are printed and appended to bench/RESULTS.md as one table per run of this script, with the
machine. Nothing is asserted: this is where speed and memory are measured.
"""

from __future__ import annotations

import argparse
import datetime as dt
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as bench  # noqa: E402  (bench/run.py: floors, one process's time and memory)

REPO = bench.REPO
WORK = REPO / "bench" / "work"
SEED_STEPS = 16
TOLD = ("--steps-when-told", "--kernels-when-told", "--rest-when-told")
ORDER = ("skip_stats", "attribute_kernels", "swimlanes", "capture_info", "reconcile", "roofline",
         "changes", "trust", "report_draft", "factcheck")


def capture(steps: int, work: Path = WORK) -> Path:
    """The generated capture of `steps` steps (made when missing): its run folder."""
    out = work / f"maxtext-8gpu-{steps}"
    if not any(out.glob("plugins/profile/*/*.xplane.pb")):
        subprocess.run([sys.executable, "-m", "capgen", "nvidia-maxtext-8gpu", str(out),
                        "--steps", str(steps)], check=True, cwd=REPO,
                       env={"PYTHONPATH": "tests:scripts", "PATH": "/usr/bin:/bin"})
    return next(out.glob("plugins/profile/*"))


def timed(cmd: list[str], repeat: int, cwd: Path | None = None) -> tuple[float, float]:
    """Median wall seconds and largest peak MiB of `repeat` fresh runs."""
    walls, peaks = [], []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory(prefix="jaxtrace-scale-") as tmp:
            w, m = bench.run_once(cmd, cwd or Path(tmp))
        walls.append(w)
        peaks.append(m)
    return statistics.median(walls), max(peaks)


def step_commands(out: Path) -> list[tuple[str, list[str]]]:
    """(step, command) as the job ran each (its log's first line), told options left out."""
    found = []
    for name in ORDER:
        log = out / "logs" / f"{name}.txt"
        if log.is_file():
            first = log.read_text(encoding="utf-8").splitlines()[0]
            cmd = [a for a in shlex.split(first[2:]) if a not in TOLD]
            found.append((name, cmd))
    return found


def measure_size(steps: int, repeat: int, work: Path = WORK) -> list[tuple]:
    """Rows (size, item, s, MiB, time vs floor, memory vs floor, vs XProf) at one size."""
    run_dir = capture(steps, work)
    files = bench.capture_inputs.resolve(run_dir)
    py = sys.executable
    size = f"{steps / SEED_STEPS:g}x"
    rows = []
    fj = timed([py, "-c", bench.FLOOR_JSON, str(files.trace)], repeat)
    fx = timed([py, "-c", bench.FLOOR_XPLANE, str(files.xplane), str(REPO / "scripts")], repeat)
    fb = timed([py, "-c", bench.FLOOR_BOTH, str(files.trace), str(files.xplane),
                str(REPO / "scripts")], repeat)
    rows += [(size, "floor json.load (trace)", *fj, "", "", ""),
             (size, "floor xplane parse", *fx, "", "", ""),
             (size, "floor both, one process (read once)", *fb, "", "", "")]

    def against(item, t, floor, floor_name):
        return (size, item, *t, f"{t[0] / floor[0]:.2f}x {floor_name}", f"{t[1] / floor[1]:.2f}x",
                "")

    with tempfile.TemporaryDirectory(prefix="jaxtrace-scale-") as tmp:
        copy = Path(tmp) / "xplane" / files.xplane.name
        copy.parent.mkdir()
        shutil.copy2(files.xplane, copy)
        hs = timed([py, "-c", bench.XPROF, str(copy), "hlo_stats"], repeat)
        rows.append(against("XProf hlo_stats", hs, fx, "xplane parse"))
    with tempfile.TemporaryDirectory(prefix="jaxtrace-scale-job-") as tmp:
        out = Path(tmp) / "out"
        job = timed([py, "-P", str(REPO / "scripts" / "investigate.py"), str(run_dir), "--out",
                     str(out)], repeat)
        rows.append(against("the whole job (investigate.py)", job, fb, "read once"))
        for name, cmd in step_commands(out):
            t = timed(cmd, repeat, cwd=out)
            floor, fname = ((fj, "json.load") if name == "skip_stats" else
                            (fx, "xplane parse") if name in ("attribute_kernels", "roofline")
                            else (fb, "read once"))
            rows.append(against(f"step alone: {name}.py", t, floor, fname))
        # the question XProf's hlo_stats answers, alone (last: it rewrites attribution/)
        cmd = dict(step_commands(out)).get("attribute_kernels")
        if cmd:
            t = timed(cmd + ["--no-xprof"], repeat, cwd=out)
            rows.append(against("step alone: attribute_kernels.py --no-xprof", t, fx,
                                "xplane parse")[:-1] + (f"{t[0] / hs[0]:.2f}x time, "
                                                        f"{t[1] / hs[1]:.2f}x memory",))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[1:]))
    ap.add_argument("--sizes", default=f"{SEED_STEPS},{SEED_STEPS * 5},{SEED_STEPS * 10}",
                    help="steps of each capture, comma-separated (the seed is 16)")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--work", type=Path, default=WORK,
                    help="where the generated captures are kept (default bench/work)")
    ap.add_argument("--no-append", action="store_true", help="print only")
    ap.add_argument("--note", default="")
    args = ap.parse_args(argv)
    try:
        sizes = [int(s) for s in args.sizes.split(",")]
    except ValueError:
        ap.error("--sizes takes whole numbers of steps, comma-separated")
    if args.repeat < 1 or any(s < 1 for s in sizes):
        ap.error("--repeat and every size must be at least 1")
    rows = []
    bench.compile_bundle(sys.executable)
    try:
        for steps in sizes:
            print(f"scale: {steps} steps", file=sys.stderr, flush=True)
            rows += measure_size(steps, args.repeat, args.work.resolve())
    except (RuntimeError, subprocess.CalledProcessError, StopIteration) as exc:
        print(f"scale: {exc}", file=sys.stderr)
        return 1
    head = (f"\n### Scale checks, {dt.date.today().isoformat()}, {bench.machine()}, "
            f"{args.repeat} run(s) each{': ' + args.note if args.note else ''}\n\n"
            "| size | item | s | peak MiB | time vs floor | memory vs floor "
            "| vs XProf hlo_stats |\n|---|---|---|---|---|---|---|\n")
    table = head + "".join(f"| {sz} | {item} | {s:.2f} | {m:.0f} | {vt} | {vm} | {vx} |\n"
                           for sz, item, s, m, vt, vm, vx in rows)
    print(table)
    if not args.no_append:
        with bench.RESULTS.open("a") as fh:
            fh.write(table)
        print(f"wrote {bench.RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
