#!/usr/bin/env python3
"""Step 5: a roofline per instruction, with per-dtype ceilings whose provenance is kept.

Usage:
    python3 -P roofline.py <xplane.pb | run folder | log folder> [--out DIR]
                           [--run NAME] [--host NAME] [--costs FILE]

Example:
    python3 -P $B/scripts/attribute_kernels.py ~/logs/plugins/profile/2026_02_20_13_54_10
    python3 -P $B/scripts/roofline.py ~/logs/plugins/profile/2026_02_20_13_54_10

Needs step 4 first: reads ./attribution/ops.csv and attribute_kernels.json (or DIR/attribution/)
for the measured GPU time per instruction and the executions counted, and the capture for the
GPU (its device-plane stats) and the chosen program's HLO. Writes into ./ (or DIR):
    roofline.csv   one row per instruction with kernel time: FLOPs and bytes from the HLO and how
                   they were obtained (shapes / fused computation / backend config / not
                   computable: why), the dtype that sets the ceiling, arithmetic intensity,
                   achieved FLOP/s and B/s from the measured time, the binding ceiling at that
                   intensity with its provenance tag, and the share of it reached
    roofline.json  the GPU and the evidence it was identified by, the ceilings used with their
                   tags, the GPU time whose FLOPs or bytes are not computable (for the trust list)
    roofline.svg   log-log roofline, one per dtype present; points sized by GPU time
Ceilings come from references/peaks.csv (transcribed from the shared peaks.md with each cell's tag:
vendor, vendor-mirror, derived, secondary); an unconfirmed cell is no ceiling. A GPU that matches
no row gets no ceiling: the rows are still written and the result says why. The capture's own
memory_bandwidth stat is shown beside ours and never used (it reads ~half the datasheet on AMD).
A trace measures time, not peaks: every ceiling here is read (vendor, vendor-mirror, secondary)
or inferred (derived: per-clock rate x units x clock), never measured.

Exit codes: 0 done; 1 the input cannot be used (one sentence says why: e.g. step 4 has not run);
2 usage; 3 a missing package (protobuf; the message has the install line).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bootstrap; sibling.py: the platform
import sibling  # noqa: F401
from jaxperf.analyses.roofline import run  # the analysis
from tracekit import step_cli

# ---------------------------------------------------------------- main

def options(ap) -> None:
    ap.add_argument("--no-xprof", action="store_true",
                    help="leave out XProf's own FLOPs and bytes per instruction")
    ap.add_argument("--costs", type=Path, metavar="FILE",
                    help="a CSV of FLOP and byte formulas for custom calls no model knows "
                         "(columns match, flops, bytes, kind; references/roofline.md)")


STEP = step_cli.Step("roofline", __doc__, __file__, options=options)


def body(args) -> list[str]:
    result, written = run(step_cli.open_capture(STEP, args), args.out,
                          use_xprof=not args.no_xprof, costs=args.costs)
    g = result["gpu"]
    out = step_cli.wrote(args.out, written)
    out.append(f"GPU: {g['model'] or 'not identified: ' + g['why']}")
    if result["status"] == "refused":
        return out + [f"roofline refused: {result['refusals'][0]}",
                      "Next: put this refusal on the trust list (SKILL.md step 7)."]
    out += [f"trust list: {line}" for line in result["trust_list"]]
    return out + ["Next: read roofline.csv top rows by device_us; quote ceilings with their tag "
                  "(SKILL.md step 5)."]


def main(argv=None) -> int:
    return step_cli.main(STEP, body, argv)


if __name__ == "__main__":
    raise SystemExit(step_cli.run(STEP, main))
