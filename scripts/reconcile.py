#!/usr/bin/env python3
"""Step 2: reconciliation. Totals that independent records of one capture must agree on, checked.

Usage:
    python3 -P reconcile.py <xplane.pb | trace.json.gz | run folder | log folder>
                            [--out DIR] [--run NAME] [--host NAME]

Example:
    python3 -P $B/scripts/reconcile.py ~/logs/plugins/profile/2026_02_20_13_54_10

Writes into ./ (or DIR):
    reconciliation.csv  one row per check and device (and stream where it applies): check,
                        device, stream, status (pass / fail / not checkable), the two figures
                        compared with their unit, and the sentence for the trust list when the
                        check fails or cannot be made
    reconcile.json      the same as data, with the counts per status (references/scratch-layout.md)
The checks (SKILL.md step 2):
    1 gpu_events_json_vs_xplane  per GPU and stream: event count and summed duration in the trace
                                 and in the xplane (the exporter's 1M-event cap named as the cause
                                 where it applies)
    2 launch_join                per GPU: every GPU event joins exactly one launch call (a graph's
                                 events join its one launch); ids that join nothing, several calls
                                 or a non-launch call (a stream wait) are listed
    3 kernels_per_step           per GPU: the same number of events in every analysed step
    4 same_work_across_gpus      per GPU: events, and compute + memcpy time (collectives left
                                 out: they include waiting; argument copies left out: a GPU
                                 that receives the inputs copies more), per step against the
                                 other GPUs that run the same programs (step 1's GPU
                                 groups: a GPU that runs other programs or holds only
                                 argument copies does other work, said as such)
                                 (argument copies and idle GPUs explained; time within 10%)
    5 stream_budget              per GPU and stream: compute + collective + memcpy + idle = span, to
                                 the picosecond, and idle equal to the span minus the union of the
                                 stream's events (computed a second way)
    6 attribution                per GPU, when step 4 ran (attribution/attribute_kernels.json in
                                 DIR): events per program execution within what the schedule
                                 predicts; and the share of attributed time below the confidence
A capture with one of its two files runs what it can; the rest is not checkable, with the reason.
What steps 0 and 1 handed on for these very files it reads from DIR/.handoff/ (per-stream totals,
checks 2 to 5 on step 1's analysis, each keyed to its file's size and modification time);
without them it reads the capture once and runs step 1's analysis in-process. It writes nothing
else.

Exit codes: 0 done (failed checks included: they are results); 1 the input cannot be used (one
sentence says why); 2 usage; 3 a missing package (protobuf, for the xplane).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bootstrap; sibling.py: the platform
import sibling  # noqa: F401
from jaxperf.analyses.reconcile import run  # the analysis
from tracekit import step_cli
from tracekit import trace_rules as rules

STEP = step_cli.Step("reconcile", __doc__, __file__)


def body(args) -> list[str]:
    result, written = run(step_cli.open_capture(STEP, args), args.out, own_process=True)
    c = result["counts"]
    lines = step_cli.wrote(args.out, written)
    lines.append(f"checks: {c['pass']} pass, {c['fail']} fail, {c['not checkable']} not checkable")
    lines += [f"{r['status']}: {rules.printable(r['trust_sentence'])}"
              for r in result["checks"] if r["status"] != "pass"]
    return lines + ["Next: every fail and not-checkable sentence goes on the trust list "
                    "(SKILL.md step 7)."]


def main(argv=None) -> int:
    return step_cli.main(STEP, body, argv)


if __name__ == "__main__":
    raise SystemExit(step_cli.run(STEP, main))
