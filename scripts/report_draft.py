#!/usr/bin/env python3
"""The report draft: every figure of the report filled in from the scratch folder's tables.

Usage:
    python3 -P report_draft.py [--out DIR]

Example:
    python3 -P $B/scripts/report_draft.py --out scratch

Reads the tables steps 0 to 7 wrote in DIR (default ./) and writes DIR/report_draft.md: the
report in the order of references/report-template.md, titled `<run> on <GPU>: <verdict>`: in
brief (the GPU, what bounds the step, the step time, the top instructions and lines, the first
change, the trust list), then verdict and causes, reconciliation, GPUs and streams with the
swimlanes, top instructions and Python lines with the roofline, changes (assumptions once per
kind), trust list, and an appendix of the tables behind them (a reader stops before it). Every
number is followed by its citation `(label; table: selector)`, a figure with its range as
`value (min–max)` before one citation, a table's figures cited once in its header, so that
factcheck.py can find each again. The judgement sentences are
left to the agent: each place is an HTML comment `<!-- judge: ... -->` saying what to decide and
from which table. A section whose tables are missing says so, and why, instead of its figures.

Exit codes: 0 written; 1 DIR is not a scratch folder (no table of any step in it); 2 usage.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bootstrap; sibling.py: the platform
import sibling  # noqa: F401
from jaxperf.analyses.report_draft import DRAFT, KNOWN_TABLES, draft  # the analysis
from tracekit import step_cli  # the command line, errors, exit codes
from tracekit import trace_rules as rules
from tracekit.scratch import Scratch  # the scratch folder, read once

STEP = step_cli.Step("report_draft", __doc__, __file__, reads="scratch")


def body(args) -> list[str]:
    if not any((args.out / t).is_file() for t in KNOWN_TABLES):
        raise step_cli.StepError(f"{args.out} holds none of {', '.join(KNOWN_TABLES)}: run the "
                                 "steps first (scripts/investigate.py)")
    text = draft(Scratch(args.out))
    with rules.replace_files(args.out, ".report_draft.") as tmp:
        (tmp / DRAFT).write_text(text, encoding="utf-8")
    return [f"wrote {args.out / DRAFT} ({len(text.splitlines())} lines, "
            f"{text.count('<!-- judge:')} places to judge)",
            "Next: write each judged sentence from the table its comment names, then run "
            "factcheck.py on the report."]


def main(argv=None) -> int:
    return step_cli.main(STEP, body, argv)


if __name__ == "__main__":
    raise SystemExit(step_cli.run(STEP, main))
