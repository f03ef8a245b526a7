#!/usr/bin/env python3
"""Inventory of one capture: what it holds, and whether its two files agree on the GPU events.

Usage:
    python3 -P capture_info.py <xplane.pb | trace.json.gz | run folder | log folder>
                               [--run NAME] [--host NAME] [--out DIR]

Example:
    python3 -P $B/scripts/capture_info.py ~/logs/plugins/profile/2026_02_20_13_54_10

Prints (stdout) and writes the same as data to ./capture_info.json (or DIR/capture_info.json
with --out DIR; fields in references/scratch-layout.md):
- which run and host were taken, and the files found;
- each GPU plane's device stats (vendor, cores, clock, memory, compute capability) and, per
  GPU, its streams and event count in the xplane and in the trace, with the verdict
  "agree" or "DIFFER" (step 2's first reconciliation check);
- the host plane's line and event counts (the trace exporter drops memory-allocation events,
  so host counts may differ: said, not flagged);
- the programs in /host:metadata: program id, module name, computations, instructions,
  while loops with their known trip counts;
- the profile's wall-clock span from the Task Environment plane.
Either file may be missing: what the other can tell is printed, and the gap is said.

Exit codes: 0 done; 1 the input cannot be read or is not a capture; 2 usage;
3 a missing dependency (the protobuf package, for the xplane).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bootstrap; sibling.py: the platform
import sibling  # noqa: F401
from jaxperf.analyses.capture_info import RESULT_FILE, render, run, write_json  # the analysis
from tracekit import capture_inputs, step_cli


def options(ap) -> None:
    ap.add_argument("--resolved-note", action="append", default=[], metavar="TEXT",
                    help="a note of the job that resolved the capture's files (investigate.py "
                         "passes the files it chose and why), kept in capture_info.json")


STEP = step_cli.Step("capture_info", __doc__, __file__, options=options,
                     out_help="folder for capture_info.json (default: the current folder)")


def body(args) -> list[str]:
    files = capture_inputs.resolve(args.capture, run=args.run, host=args.host)
    files.notes[:0] = args.resolved_note
    step_cli.claim_for(files, args.out)
    result = run(capture_inputs.Capture(files), own_process=True, out=args.out)
    write_json(args.out / RESULT_FILE, result)  # first: what is printed after cannot cost it
    return render(result) + step_cli.wrote(args.out, [(RESULT_FILE, None)])


def main(argv=None) -> int:
    return step_cli.main(STEP, body, argv)


if __name__ == "__main__":
    raise SystemExit(step_cli.run(STEP, main))
