#!/usr/bin/env python3
"""Fact check of a report: every number in it against the scratch-folder table it cites.

Usage:
    python3 -P factcheck.py REPORT.md [--out DIR]

Example:
    python3 -P $B/scripts/factcheck.py /tmp/jaxtrace/report.md --out /tmp/jaxtrace

Reads the report (Markdown) and the tables of the scratch folder (the current directory, or
--out DIR). Every number in the report must be followed by its citation,
    <number><unit> (<label>; <table>: <selector>)
    12.41 ms (measured; steps.csv: dur_us, median)
    5.4% (inferred; = 100 * t / s; t = attribution/ops.csv: device_us, instruction=fusion.3;
          s = steps.csv: dur_us, step=1, device=0)
under the rules stated once, each with an example that passes and one that fails, on the first
screen of references/report-template.md: labels (one per value, the table's own), CSV and JSON
selectors, ranges, units and rounding, the words allowed before a citation, several citations
in one parenthesis, figures derived by a formula (and derived.csv, whose rows are checked too),
text citations, what is a name and not a figure, Markdown tables.

Writes into ./ (or DIR):
    factcheck.csv   one row per number or cited claim, in report order: line, claim (the sentence
                    or table row, 200 characters), figure (as written), label, table, selector,
                    found_value (the table's value in the written unit), verdict (ok,
                    wrong_value, no_label, no_table, skipped), why
    factcheck.json  {step: "factcheck", status, verdict (pass or fail), figures (count per
                    verdict), failing (every failing row), report, notes, tables}

Exit codes: 0 every figure is ok (skipped numbers do not fail) and at least one was checked;
1 the report or the scratch folder cannot be read (one sentence says why); 2 usage; 4 at least
one figure failed (wrong_value, no_label or no_table; a figure that is not a finite decimal,
such as NaN, inf or 0x1F, is wrong_value), or nothing was checked against a table: the failing
claims are printed (up to 20) and all are in factcheck.csv.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bootstrap; sibling.py: the platform
import sibling  # noqa: F401
from jaxperf.analyses.factcheck import (  # the analysis
    EXIT_FAILED,
    FAILS_PRINTED,
    RESULT_FILE,
    TABLE,
    VERDICTS,
    run,
)
from tracekit import step_cli

STEP = step_cli.Step("factcheck", __doc__, __file__, reads="report", fan_out=False)


def body(args):
    rows, result, n = run(args.report, args.out)
    out = step_cli.wrote(args.out, [(TABLE, n), (RESULT_FILE, None)])
    c = result["figures"]
    out.append("figures: " + ", ".join(f"{c[v]} {v}" for v in VERDICTS))
    out += [f"note: {note}" for note in result["notes"]]
    failing = result["failing"]
    out += [f"line {f['line']}: {f['figure'] or '(claim)'}: {f['verdict']}: {f['why']}"
            for f in failing[:FAILS_PRINTED]]
    if len(failing) > FAILS_PRINTED:
        out.append(f"... and {len(failing) - FAILS_PRINTED} more in {args.out / TABLE}")
    if failing:
        return out + [f"Next: correct each failing figure or its citation in {args.report} "
                      f"({len(failing)} in {TABLE}), then run the fact check again."], EXIT_FAILED
    if result["verdict"] == "fail":  # nothing was checked
        return out + ["Next: cite the report's figures (references/report-template.md), then "
                      "run the fact check again."], EXIT_FAILED
    return out + ["Next: every figure matches its table; hand the report over (SKILL.md, "
                  "Report)."]


def main(argv=None) -> int:
    return step_cli.main(STEP, body, argv)


if __name__ == "__main__":
    raise SystemExit(step_cli.run(STEP, main))
