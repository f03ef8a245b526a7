#!/usr/bin/env python3
"""Swimlanes of one step: every GPU x stream and each launching host thread on one time axis, and
the GPU that finishes the step last, by how much, and what its last stretch was.

Usage:
    python3 -P swimlanes.py <xplane.pb | trace.json.gz | run folder | log folder>
                            [--out DIR] [--step N] [--start US] [--end US]
                            [--run NAME] [--host NAME]

Example:
    python3 -P $B/scripts/swimlanes.py ~/logs/plugins/profile/2026_02_20_13_54_10

Reads step 1's tables in the current directory (or --out DIR): skip_stats.json, rows.csv,
steps.csv, gaps.csv. Where one is missing it runs step 1 (skip_stats.py) first, in this process,
and leaves its tables there. Where attribution/kernels.csv exists (step 4), each kernel's tooltip
names its HLO instruction. Standard library only. Writes:
    swimlanes.svg    the step: one lane per GPU x stream (GPU, stream name, role, critical stream)
                     and per launching host thread; kernels coloured and patterned by kind; idle
                     as gaps; the step's begin and end; the straggler marked; a tooltip on every
                     bar. Opens in a browser as it is (no scripts, no external files).
    stragglers.csv   per analysed step x GPU: end, lag behind the first GPU to finish, last
                     kernel, and what its last stretch was
    swimlanes.json   the result: the step chosen and why, window, lanes, merged bars, straggler,
                     notes, refusals
Columns and fields: references/scratch-layout.md.
The step is the median-duration complete analysed step unless --step N names one. --start and
--end (microseconds from the profile start, as in the tables) zoom into a window. Events narrower
than one pixel are merged into one bar per lane and kind; the SVG says how many. A capture
without steps (step 1 took the whole capture as one window) is drawn whole, and no straggler is
named in it.

Exit codes: 0 done (refusals included); 1 the input cannot be used (one sentence says why: no
GPU events, no complete step, a step that was not analysed, a table that is not step 1's);
2 usage.
"""

from __future__ import annotations

import gc
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bootstrap; sibling.py: the platform
import sibling  # noqa: F401
from jaxperf.analyses.swimlanes import run  # the analysis
from tracekit import step_cli
from tracekit import trace_rules as rules  # the classification rules


def options(ap) -> None:
    ap.add_argument("--step", type=step_cli.count(0),
                    help="the step to draw (default: the median one)")
    ap.add_argument("--start", type=step_cli.microseconds, metavar="US",
                    help="window start, microseconds from the profile start")
    ap.add_argument("--end", type=step_cli.microseconds, metavar="US",
                    help="window end, microseconds from the profile start")
    step_cli.told_option(ap, "--kernels-when-told", "step 4's attribution/kernels.csv",
                         "step 4")


STEP = step_cli.Step("swimlanes", __doc__, __file__, options=options)


def body(args) -> list[str]:
    if args.start is not None and args.end is not None and args.start >= args.end:
        raise step_cli.UsageError(f"--start {args.start} must be before --end {args.end}")
    gc.disable()  # many small objects, no cycles (see skip_stats.py)
    result, written = run(step_cli.open_capture(STEP, args), args.out, args.step, args.start,
                          args.end, args.kernels_when_told)
    sg = result["straggler"]
    return step_cli.wrote(args.out, written) + [
        f"step: {rules.printable(result['chosen']['why'])}",
        rules.printable(f"straggler: {sg['sentence']}" if sg else
                        "straggler: " + "; ".join(result["refusals"] + result["notes"][:1])),
        "Next: open swimlanes.svg in a browser (hover a bar for its kernel); quote the "
        "straggler line and stragglers.csv (SKILL.md step 3)."]


def main(argv=None) -> int:
    return step_cli.main(STEP, body, argv)


if __name__ == "__main__":
    raise SystemExit(step_cli.run(STEP, main))
