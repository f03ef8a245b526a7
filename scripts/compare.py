#!/usr/bin/env python3
"""Before and after: did the change help, by how much, what moved, and was the estimate right.

Usage:
    python3 -P compare.py BEFORE AFTER [--out DIR] [--no-xprof]

Example:
    python3 -P $B/scripts/compare.py runs/before runs/after --out /tmp/jaxtrace-compare

BEFORE and AFTER are each a capture (anything investigate.py takes) or a scratch folder the
investigation already wrote (it holds capture_info.json). A capture is investigated first, into
DIR/before or DIR/after (investigate.py, whole); a scratch folder is read as it is, never
written. Writes into DIR (default ./):
    compare.csv   section, key, before, after, change, change_pct, unit, label, status, note:
                  the step period and step time, the verdict, the host side (kernels,
                  dispatches, kernels launched one by one and in graphs, host-late time, idle
                  between steps, per step), GPU time per step of each program, instruction,
                  kernel family, kernel name and Python line (matched across the two by what
                  survives recompilation: the module's name, the instruction's name and
                  opcode, the family, the kernel's name, the source line; rows of one side
                  alone are `new` or `gone`), and each of BEFORE's ranked changes beside what
                  moved
    compare_draft.md  the report's "Before and after" section, every figure cited from
                  compare.csv (the fact check passes it with --out DIR)
    compare.json  the result: figures (the step period and step time before and after, each
                  with min and max), `significant` and `direction` (the rule below), the
                  verdicts, what moved
                  the verdict, `predictions`, notes, refusals
The rule: a difference counts only where the per-step values of the two captures do not overlap
(every step after is faster than every step before, or slower) and each side has two steps or
more; otherwise it is within the step-to-step spread and is said as such, never as a gain. And
the step period's parts (device busy, host late, idle between steps and programs) that moved
beyond their own spread must account for its move, in its direction, by 5% of BEFORE's period or
more: a smaller move is no gain (a program's step moves about as much between two runs of it).
`direction` in compare.json says it: faster, slower or no gain. Per
step means: the step period (one step's start to the next's) and step time (the longest GPU's)
of each analysed step; host-side times the largest over GPUs, counts the sum; GPU time of a
program, instruction, family or line its capture-wide time over the capture's analysed steps.
A prediction's error is the measured change of the step period over the predicted saving.

Exit codes: 0 done; 1 a side cannot be used (one sentence says which and why, and what can
still be compared); 2 usage; 3 a package is missing.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bootstrap; sibling.py: the platform
import sibling  # noqa: F401
from jaxperf.analyses.compare import compare_sides, kind  # the analysis
from tracekit import step_cli

# ---------------------------------------------------------------- the step

def options(ap) -> None:
    ap.add_argument("--no-xprof", action="store_true",
                    help="investigate a capture without XProf's cross-checks (faster)")


STEP = step_cli.Step("compare", __doc__, __file__, reads="pair", options=options,
                     out_help="where the comparison (and the investigations of captures) go "
                              "(default: .)", fan_out=False)


def body(args) -> list[str]:
    out = Path(args.out)
    for arg, name in ((args.before, "BEFORE"), (args.after, "AFTER")):
        if kind(Path(arg)) is not None and out.resolve().is_relative_to(Path(arg).resolve()):
            raise step_cli.UsageError(f"--out {out} is inside {name} ({arg}), which compare.py "
                                      "only reads: give another folder")
    with step_cli.holding(out):  # after the check: nothing is made inside a side
        return compare_sides(args, out)


def main(argv=None) -> int:
    return step_cli.main(STEP, body, argv)


if __name__ == "__main__":
    raise SystemExit(step_cli.run(STEP, main))
