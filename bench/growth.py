#!/usr/bin/env python3
"""How each cost grows with its input: the many-planes, many-events, many-devices and many-hosts
shapes at 1x, 4x and 16x, and the exponent of the growth.

Usage:
    PYTHONPATH=tests:scripts .venv/bin/python bench/growth.py [--work DIR] [--no-append]
        [--note TEXT]

- many planes: step 0 (capture_info.py) on an xplane of n GPU planes, three kernels each
  (tests/shapes.py many-planes-step0): 1,250, 5,000 and 20,000 planes;
- many events: step 1 (skip_stats.py) on n tiny kernels, each after a gap and its own launch
  (tiny-kernels-step1): 12,500, 50,000 and 200,000 kernels;
- many devices: step 1 on n GPUs, each launched by a thread of its own (many-gpus): 64, 256 and
  1,024 GPUs;
- many hosts: step 1 over a run of n generated hosts (bench/hosts.py: the rocm-8gpu scenario on
  2 GPUs, 4 steps), each host's pass its own process: 4, 16 and 64 hosts.

The shapes are timed in CPU seconds of a forked child (user + system: another process's load
inflates it less than the wall clock), the fastest of 2 runs, with its peak resident memory;
the hosts in wall seconds with the reducing process's peak memory. The exponent is
log(cost at 16x / cost at 1x) / log(16): 1 is linear, 2 quadratic; n log n over these sizes reads
about 1.1 to 1.3. Rows are printed and, unless --no-append, appended to bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "tests"), str(REPO / "bench")]

import hosts  # noqa: E402  (bench/hosts.py: generated hosts and their measurement)
import run as bench  # noqa: E402  (bench/run.py: the machine line)
import shapes  # noqa: E402  (tests/shapes.py: inputs shaped to be expensive)

SHAPES = (("many planes", "many-planes-step0", 1_250), ("many events", "tiny-kernels-step1",
                                                         12_500),
          ("many devices", "many-gpus", 64))
HOSTS = 4
SCALES = (1, 4, 16)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--no-append", action="store_true")
    ap.add_argument("--note", default="")
    args = ap.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="growth-"))
    rows = []
    for what, name, n0 in SHAPES:
        costs = [shapes.costs(shapes.SHAPES[name], n0 * k, work, 600, 2) for k in SCALES]
        rows.append((what, shapes.SHAPES[name].script.name, [c.n for c in costs],
                     [c.seconds for c in costs], [c.rss_mib for c in costs],
                     "CPU s", [c.outcome for c in costs]))
        print(rows[-1], flush=True)
    script = REPO / "analyzing-jax-launch-overhead" / "scripts" / "skip_stats.py"
    got = []
    for k in SCALES:
        r = hosts.measure(script, hosts.make(HOSTS * k, work), work / f"hosts-out-{k}", None)
        got.append(r)
    rows.append(("many hosts", "skip_stats.py (one process a host)", [HOSTS * k for k in SCALES],
                 [r["seconds"] for r in got], [r["reducer_peak_mib"] for r in got], "wall s",
                 ["ok" if r["exit"] == 0 else f"exit {r['exit']}" for r in got]))
    print(rows[-1], flush=True)
    lines = [f"### Growth at 1x, 4x and 16x, {dt.date.today()}, {bench.machine()}"
             + (f": {args.note}" if args.note else ""), "",
             "| shape | script | sizes | cost | at 1x, 4x, 16x | exponent | peak MiB | outcome |",
             "|---|---|---|---|---|---|---|---|"]
    for what, script_name, ns, cost, mib, unit, outcomes in rows:
        exp = (math.log(cost[-1] / cost[0]) / math.log(SCALES[-1])
               if cost[0] and cost[-1] else float("nan"))
        lines.append(f"| {what} | {script_name} | {', '.join(f'{n:,}' for n in ns)} | {unit} | "
                     f"{', '.join(f'{c:.2f}' for c in cost)} | {exp:.2f} | "
                     f"{', '.join(f'{m:.0f}' for m in mib)} | {', '.join(outcomes)} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.no_append:
        with open(REPO / "bench" / "RESULTS.md", "a", encoding="utf-8") as fh:
            fh.write("\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
