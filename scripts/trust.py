#!/usr/bin/env python3
"""Step 7: where this capture cannot be trusted, and what only a new capture can answer.

Usage:
    python3 -P trust.py [--out DIR] [--failed STEP=REASON ...]

Example:
    python3 -P $B/scripts/trust.py --out /tmp/jaxtrace
    python3 -P $B/scripts/trust.py --failed attribute_kernels="exit 1: the xplane holds no HLO"

Reads the results of steps 0 to 6 in the scratch folder ./ (or DIR), never the capture:
capture_info.json, skip_stats.json (with rows.csv and gaps.csv), attribution/
attribute_kernels.json (with how.csv), reconcile.json, swimlanes.json, roofline.json (with
roofline.csv) and changes.json (with changes.csv). It collects what they found; it computes only
what no step records (graph replays that recorded fewer kernels than another replay of the same
graph, Python tracer events in the gaps, ROCm memcpy launches), each from those tables; the async
collective labels absent from the saved HLO are step 4's count (collectives_by_order). With
--rest-when-told (investigate.py) it reads rows.csv first, while the last steps run, then the
rest once its standard input ends. Standard library only.
Writes into ./ (or DIR):
    trust.csv   section, item, kind, count, device_us, pct_of_device_time, source, detail: the trust
                items
                (section "trust": each with its count and share of GPU time), then the
                "needs a new capture" questions (section "needs_new_capture": item = the open
                question, detail = the capture that answers it)
    trust.json  the result: figures (items, defects, needs_new_capture, device_time_us), the
                defect kinds, the steps read or missing, refusals, notes
Kinds and how to word each in a report: references/trust.md. A step whose JSON is missing (or
named by --failed) becomes a step_failed item saying what that means for the report; STEP is a
step's script name (capture_info, skip_stats, reconcile, swimlanes, attribute_kernels, roofline,
changes) or its number in SKILL.md (0 to 6).

Exit codes: 0 done (defects included: they are results); 1 the scratch folder cannot be used (one
sentence says why: it does not exist, or no step has written there); 2 usage.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bootstrap; sibling.py: the platform
import sibling  # noqa: F401
from jaxperf.analyses.trust import (  # the analysis
    build_result,
    collect,
    largest,
    load,
    parse_failed,
    scan_tables,
    write,
)
from tracekit import step_cli


def options(ap) -> None:
    ap.add_argument("--failed", action="append", metavar="STEP=REASON",
                    help="a step that could not run, and why (repeatable)")
    ap.add_argument("--rest-when-told", action="store_true",
                    help="read rows.csv and step 4's result, then wait for the end of standard "
                         "input before reading the other steps' results; each line before it "
                         "is one more --failed STEP=REASON: investigate.py runs this beside "
                         "the last steps and says so when they have ended")


STEP = step_cli.Step("trust", __doc__, __file__, reads="scratch", options=options,
                     out_help="the scratch folder the steps wrote into (default: .)")


def body(args) -> list[str]:
    failed = parse_failed(args.failed)
    if not Path(args.out).is_dir():
        load(args.out, failed)  # its one sentence
    scanned = scan_tables(args.out, failed)
    if args.rest_when_told:
        failed.update(parse_failed(step_cli.wait_until_told("the other steps' results")))
    inp = load(args.out, failed)
    items, questions, facts = collect(inp, failed, scanned)
    result = build_result(inp, items, questions, facts)
    out = step_cli.wrote(args.out, write(args.out, items, questions, result))
    fig = result["figures"]
    d = fig["defects"]["value"]
    out.append(f"trust items: {fig['items']['value']} ({d} defect{'' if d == 1 else 's'} of "
               f"this capture); needs a new capture: {fig['needs_new_capture']['value']} "
               "questions")
    for it in largest(items):
        pct = (f", {it['pct_of_device_time']:.2f}% of GPU time"
               if it["pct_of_device_time"] is not None else "")
        out.append(f"  largest: [{it['kind']}] {it['item']} ({it['device_us']:.3f} us{pct})")
    out += [f"  {s}" for s in result["refusals"]]
    return out + ["Next: put the trust items and the needs-a-new-capture questions in the "
                  "report's trust list, worded as references/trust.md says (SKILL.md step 7), "
                  "then have the report fact-checked."]


def main(argv=None) -> int:
    return step_cli.main(STEP, body, argv)


if __name__ == "__main__":
    raise SystemExit(step_cli.run(STEP, main))
