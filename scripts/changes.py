#!/usr/bin/env python3
"""Step 6: changes: the causes of the step time, ranked by their share of the critical path.
Each with the step time if the cause were gone (inferred, not run) and the knob to test.

Usage:
    python3 -P changes.py [<capture>] [--out DIR] [--run NAME] [--host NAME]

Example:
    python3 -P $B/scripts/changes.py --out /tmp/jaxtrace

Reads only the scratch folder (the current directory, or DIR) that steps 1 to 5 wrote:
steps.csv, gaps.csv, rows.csv, skip_stats.json (step 1), reconcile.json (step 2),
attribution/ops.csv, kernels.csv, programs.csv, families.csv and attribute_kernels.json (step 4),
roofline.csv and roofline.json (step 5); not step 3's drawing, so it runs beside step 3.
rows.csv is streamed: only the lines of the GPU that ends each step
(and, with a straggler, every GPU's collectives) are parsed. The capture argument is optional:
given, it is only checked against the capture the tables came from (capture_info.json), a
mismatch being an error; the capture itself is never read. Standard library only. Writes:
    changes.csv   one row per cause, in rank order: kind, cause, where, share of the median
                  step's critical path, the step time now, the saving if the cause were gone
                  (in the median step; min and max across steps), the step time then, the
                  assumptions, the knob to test, the label "inferred, not run", the tables used
    changes.json  the same as data, the critical path of the median step by slice, the combined
                  saving (an upper bound, never past the step time) and how causes combine,
                  refusals (what could not be ranked and why) and notes
Columns, fields and the rules behind each saving: references/changes.md.
Causes: host-late gaps on the critical stream (with the host events inside them), exposed
collective time, the straggler's extra work, memcpys on the critical path, the critical stream
idle between its kernels with no late launch, the instructions and Python lines furthest from
their ceiling, and the GPU idle between steps. A cause whose input
table is missing is not ranked; `refusals` says which and why.

Exit codes: 0 done (refusals included); 1 the scratch folder cannot be used (one sentence says
why: no step 1 tables, tables of another capture); 2 usage.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bootstrap; sibling.py: the platform
import sibling  # noqa: F401
from jaxperf.analyses.changes import LABEL, check_capture, run, summary_lines  # the analysis
from tracekit import step_cli

STEP = step_cli.Step("changes", __doc__, __file__, reads="scratch", capture_check=True,
                     out_help="the scratch folder steps 1 to 5 wrote into (default: .)")


def body(args) -> list[str]:
    if args.capture is not None:
        note = check_capture(args.capture, args.run, args.host, args.out)
        if note:
            step_cli.say(STEP, note)
    result, written = run(args.out)
    return step_cli.wrote(args.out, written) + summary_lines(result) + [
        "Next: quote changes.csv's top rows with their assumptions and knobs as hypotheses "
        f"({LABEL}); then the trust list (SKILL.md step 7)."]


def main(argv=None) -> int:
    return step_cli.main(STEP, body, argv)


if __name__ == "__main__":
    raise SystemExit(step_cli.run(STEP, main))
