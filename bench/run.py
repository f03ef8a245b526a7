#!/usr/bin/env python3
"""Time a script of this bundle over one capture, next to its floors and XProf's own conversions.

Usage:
    python3 bench/run.py CAPTURE [--script PATH] [--args "..."] [--repeat N] [--paired]
                         [--xprof TOOL[,TOOL...]] [--no-floors] [--no-append] [--note TEXT]

Example:
    .venv/bin/python bench/run.py ../shared/captures/tracelens-amd-rocm/mi300x-jax0.8-gemm \\
        --script scripts/capture_info.py --xprof hlo_stats,kernel_stats

Each item runs N times (default 5) as a fresh process; the median, min and max wall time and the
process's peak resident memory (from the kernel's rusage of that child) are reported:
- `script`: `python -P SCRIPT CAPTURE ARGS` run in an empty scratch folder;
- `floor json.load`: a bare `json.load` of the trace (gzip included), the least any trace tool does;
- `floor xplane parse`: a bare protobuf parse of the xplane with this bundle's schema;
- `xprof TOOL`: `xprof.convert.raw_to_tool_data.xspace_to_tool_data` on a fresh copy of the
  xplane (no cached results), the incumbent's own conversion.
With --paired the script and its floor (json.load for a trace reader, the xplane parse for
attribute_kernels.py, both one after the other in one process for investigate.py; with --xprof
TOOL, that XProf conversion) alternate, floor then script, N times; each pair gives a ratio,
and the `vs floor` column is the median ratio of the pairs (min-max): a machine that slows
down for a while moves both halves of a pair, not one item's median.
Rows are printed and appended to bench/RESULTS.md with the machine they ran on. Timing is never
asserted anywhere: this file is where speed and memory are measured and recorded.

Exit codes: 0 done; 1 the capture cannot be found or an item failed; 2 usage.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BUNDLE_SCRIPTS = (REPO / "scripts", REPO / "analyzing-jax-launch-overhead" / "scripts",
                  REPO / "writing-trace-report-pages" / "scripts")
sys.path[:0] = [str(REPO / "analyzing-jax-launch-overhead" / "scripts")]
from tracekit import capture_inputs

RESULTS = REPO / "bench" / "RESULTS.md"
HEADER = ("| date | machine | capture | size | item | runs | median_s | min_s | max_s | "
          "peak_rss_mib | vs floor | note |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")

FLOOR_JSON = "import gzip, json, sys\nf = sys.argv[1]\n" \
    "o = gzip.open if open(f, 'rb').read(2) == b'\\x1f\\x8b' else open\n" \
    "with o(f, 'rb') as fh:\n    d = json.load(fh)\nprint(len(d['traceEvents']))\n"
FLOOR_XPLANE = "import sys\nsys.path.insert(0, sys.argv[2])\nfrom jaxperf.read import xprotos\n" \
    "s = xprotos.classes()['XSpace'].FromString(open(sys.argv[1], 'rb').read())\n" \
    "print(sum(len(ln.events) for p in s.planes for ln in p.lines))\n"
# both files loaded in one process, one after the other: the least the whole job does
FLOOR_BOTH = FLOOR_JSON.replace("d = json.load(fh)", "d = json.load(fh)\ndel d") \
    .replace("print(len(d['traceEvents']))\n", "") + \
    "sys.path.insert(0, sys.argv[3])\nfrom jaxperf.read import xprotos\n" \
    "s = xprotos.classes()['XSpace'].FromString(open(sys.argv[2], 'rb').read())\n" \
    "print(sum(len(ln.events) for p in s.planes for ln in p.lines))\n"
XPROF = "import sys\nfrom xprof.convert import raw_to_tool_data as r\n" \
    "out = r.xspace_to_tool_data([sys.argv[1]], sys.argv[2], {'use_saved_result': False})\n" \
    "data = out[0] if isinstance(out, tuple) else out\nprint(len(data or b''))\n"


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f", {kb / 2**20:.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    return f"{cpu}, {os.cpu_count()} cores{mem}, Python {platform.python_version()}"


def compile_bundle(py: str) -> None:
    """The bundle's modules compiled, as after any first run: an interpreter told not to write
    bytecode (PYTHONDONTWRITEBYTECODE) would compile them again in every timed run, which no
    installed package (XProf's included) pays."""
    subprocess.run([py, "-m", "compileall", "-q", *map(str, BUNDLE_SCRIPTS)], check=True,
                   stdout=subprocess.DEVNULL)


def run_once(cmd: list[str], cwd: Path) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one fresh process."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    if proc.returncode != 0:
        tail = err.strip().splitlines()[-1:] or ["(no message)"]
        raise RuntimeError(f"{shlex.join(cmd)} exited {proc.returncode}: {tail[0]}")
    return wall, usage.ru_maxrss / 1024  # Linux reports KiB


def measure(name, make_cmd, repeat, prepare=None) -> dict:
    walls, peaks = [], []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory(prefix="jaxtrace-bench-") as tmp:
            tmp = Path(tmp)
            extra = prepare(tmp) if prepare else None
            wall, peak = run_once(make_cmd(tmp, extra), tmp)
        walls.append(wall)
        peaks.append(peak)
    return {"item": name, "runs": repeat, "median_s": statistics.median(walls),
            "min_s": min(walls), "max_s": max(walls), "peak_rss_mib": max(peaks)}


def _target(script: Path, files) -> str:
    if script.name in ("capture_info.py", "investigate.py"):
        return str(files.run_dir)
    return str(files.xplane or files.trace) if "attribute" in script.name or \
        not files.trace else str(files.trace)


def paired(args, files, py) -> int:
    """The script and its floor alternating; the median ratio of the pairs."""
    if not args.script:
        print("bench: --paired needs --script", file=sys.stderr)
        return 2
    script = args.script.resolve()
    target = _target(script, files)
    extra = shlex.split(args.args)
    tools = [t for t in args.xprof.split(",") if t]
    if len(tools) > 1 or (tools and not files.xplane):
        print("bench: --paired takes one XProf tool, on an xplane", file=sys.stderr)
        return 2
    if tools:  # XProf's own conversion, on a fresh copy each time
        floor_name = f"xprof {tools[0]}"

        def floor_cmd(tmp):
            dst = tmp / "xplane" / files.xplane.name
            dst.parent.mkdir()
            shutil.copy2(files.xplane, dst)
            return [py, "-c", XPROF, str(dst), tools[0]]
    elif script.name == "investigate.py" and files.trace and files.xplane:
        floor_name, floor_cmd = "floor json.load + xplane parse", lambda _: [
            py, "-c", FLOOR_BOTH, str(files.trace), str(files.xplane), str(REPO / "scripts")]
    elif "attribute" in script.name or not files.trace:
        floor_name, floor_cmd = "floor xplane parse", lambda _: [
            py, "-c", FLOOR_XPLANE, str(files.xplane), str(REPO / "scripts")]
    else:
        floor_name, floor_cmd = "floor json.load", lambda _: [py, "-c", FLOOR_JSON,
                                                               str(files.trace)]
    fw, fp, sw, sp, ratios = [], [], [], [], []
    try:
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory(prefix="jaxtrace-bench-") as tmp:
                w, m = run_once(floor_cmd(Path(tmp)), Path(tmp))
            fw.append(w)
            fp.append(m)
            with tempfile.TemporaryDirectory(prefix="jaxtrace-bench-") as tmp:
                w2, m2 = run_once([py, "-P", str(script), target, *extra], Path(tmp))
            sw.append(w2)
            sp.append(m2)
            ratios.append(w2 / w)
            print(f"pair {len(ratios)}: floor {w:.3f} s, script {w2:.3f} s, ratio {w2 / w:.3f}",
                  file=sys.stderr, flush=True)
    except RuntimeError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 1
    size = sum(p.stat().st_size for p in (files.xplane, files.trace) if p)
    try:
        cap_name = str(files.run_dir.relative_to(REPO.parent))
    except ValueError:
        cap_name = str(files.run_dir)
    today, host = dt.date.today().isoformat(), machine()
    med = statistics.median(ratios)
    vs = (f"paired: {med:.2f}x time ({min(ratios):.2f}-{max(ratios):.2f}) of {floor_name}, "
          f"{max(sp) / max(fp):.2f}x memory")
    rows = [f"| {today} | {host} | {cap_name} | {size / 2**20:.1f} MiB | script {script.name} | "
            f"{len(sw)} | {statistics.median(sw):.3f} | {min(sw):.3f} | {max(sw):.3f} | "
            f"{max(sp):.0f} | {vs} | {args.note} |",
            f"| {today} | {host} | {cap_name} | {size / 2**20:.1f} MiB | {floor_name} | "
            f"{len(fw)} | {statistics.median(fw):.3f} | {min(fw):.3f} | {max(fw):.3f} | "
            f"{max(fp):.0f} | (paired with the row above) | {args.note} |"]
    print("\n".join(rows))
    if not args.no_append:
        with RESULTS.open("a") as fh:
            fh.write("\n".join(rows) + "\n")
        print(f"wrote {RESULTS} ({len(rows)} rows)")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[1:]))
    ap.add_argument("capture")
    ap.add_argument("--script", type=Path, help="a script of this bundle to time")
    ap.add_argument("--args", default="", help="extra arguments for the script (one string)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--xprof", default="", help="XProf tools to time, comma-separated")
    ap.add_argument("--paired", action="store_true",
                    help="alternate the script and its floor; report the median ratio of pairs")
    ap.add_argument("--no-floors", action="store_true")
    ap.add_argument("--no-append", action="store_true", help="print only")
    ap.add_argument("--note", default="")
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    try:
        files = capture_inputs.resolve(Path(args.capture).resolve())
    except capture_inputs.CaptureError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 1
    py = sys.executable
    items = []
    compile_bundle(py)
    if args.paired:
        return paired(args, files, py)
    try:
        if args.script:
            script = args.script.resolve()
            target = str(files.xplane or files.trace) if "attribute" in script.name or \
                not files.trace else str(files.trace)
            if script.name == "capture_info.py":
                target = str(files.run_dir)
            extra = shlex.split(args.args)
            items.append(measure(f"script {script.name}",
                                 lambda tmp, _: [py, "-P", str(script), target, *extra],
                                 args.repeat))
        if not args.no_floors and files.trace:
            items.append(measure("floor json.load", lambda tmp, _: [
                py, "-c", FLOOR_JSON, str(files.trace)], args.repeat))
        if not args.no_floors and files.xplane:
            items.append(measure("floor xplane parse", lambda tmp, _: [
                py, "-c", FLOOR_XPLANE, str(files.xplane), str(REPO / "scripts")], args.repeat))
        for tool in filter(None, args.xprof.split(",")):
            if not files.xplane:
                raise RuntimeError("XProf's conversions need the xplane.pb")

            def copy(tmp, _x=files.xplane):
                dst = tmp / "xplane" / _x.name
                dst.parent.mkdir()
                shutil.copy2(_x, dst)
                return dst
            items.append(measure(f"xprof {tool}", lambda tmp, dst, _t=tool: [
                py, "-c", XPROF, str(dst), _t], args.repeat, prepare=copy))
    except RuntimeError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 1
    floors = {i["item"]: i for i in items if i["item"].startswith("floor")}
    size = sum(p.stat().st_size for p in (files.xplane, files.trace) if p)
    try:
        cap_name = str(files.run_dir.relative_to(REPO.parent))
    except ValueError:
        cap_name = str(files.run_dir)
    today = dt.date.today().isoformat()
    host = machine()
    rows = []
    for it in items:
        floor = floors.get("floor json.load") or floors.get("floor xplane parse")
        if it["item"].startswith("script") and "attribute" in it["item"]:
            floor = floors.get("floor xplane parse") or floor
        vs = "" if floor is None or it is floor else \
            f"{it['median_s'] / floor['median_s']:.2f}x time, " \
            f"{it['peak_rss_mib'] / floor['peak_rss_mib']:.2f}x memory of {floor['item']}"
        rows.append(f"| {today} | {host} | {cap_name} | {size / 2**20:.1f} MiB | {it['item']} | "
                    f"{it['runs']} | {it['median_s']:.3f} | {it['min_s']:.3f} | "
                    f"{it['max_s']:.3f} | {it['peak_rss_mib']:.0f} | {vs} | {args.note} |")
    print("\n".join(rows))
    if not args.no_append:
        if not RESULTS.exists():
            RESULTS.write_text("# Benchmark results\n\nAppended by `bench/run.py`; each row is "
                               "one item timed over one capture (fresh process per run, wall "
                               "time includes interpreter start).\n\n" + HEADER)
        with RESULTS.open("a") as fh:
            fh.write("\n".join(rows) + "\n")
        print(f"wrote {RESULTS} ({len(rows)} rows)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
