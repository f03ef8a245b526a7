#!/usr/bin/env python3
"""Every GPU kernel -> HLO instruction -> op_name -> Python line, command buffers included.

Usage:
    python3 -P attribute_kernels.py <xplane.pb | run folder | log folder>
                                    [--program ID] [--user-re REGEX] [--no-xprof]
                                    [--out DIR] [--run NAME] [--host NAME]

Example:
    python3 -P $B/scripts/attribute_kernels.py ~/logs/plugins/profile/2026_02_20_13_54_10

Reads only the .xplane.pb: its events and the programs' HLO (/host:metadata). For XProf's own
hlo_stats, the coverage cross-check, it copies it to ./attribution/xplane/ (the device planes
whole, the other planes without their events: all XProf reads here; the capture folder is never
written to).
Writes into ./attribution/ (or DIR/attribution/):
    kernels.csv  every GPU event (kernels, memcpys, memsets): its instruction, the inner
                 instruction its label named, match class, confidence, op_name, source, user frame
    ops.csv      per (program, instruction), every program (--program: one): kernels, GPU time,
                 its share of the table's attributed time and of all GPU time, executions,
                 framework frame
    phases.csv   per phase (forward, backward, optimizer, outside differentiation, from the
                 op_name's jvp/transpose and the frames): instructions, GPU time, a sentence
                 where a phase is absent ("no optimizer update in these programs")
    lines.csv    per Python line (user frame; else framework frame): GPU time, the same two
                 shares, kernels, instructions, programs
    programs.csv per program: executions (host execution events, else launches), kernels per
                 execution, GPU time, host dispatch time, GPUs, steps (from steps.csv)
    how.csv      per program and match class (then all): kernels, GPU time, share of the group,
                 and how much of it rests on low-confidence placements
    families.csv      per kernel family that can be a cause of its own (split-K reductions,
                      layout transposes, copies, memsets, collectives by kind): kernels, GPU
                      time and share, the instructions and programs it spans
    kernel_names.csv  per kernel name (no matching involved): family, kernels, GPU time, share
                 of all GPU time
    summary.txt  the program chosen and why, class shares, confidence, XProf's coverage next to
                 ours (and whether ours is lower)
    <module>(<id>).hlo.txt  HLO text, printed from the proto: the chosen program's, then the
                 others with the most GPU time (MAX_HLO_TEXTS in all)
The program with the most GPU time is chosen (named in the summary; its HLO is the one later
steps read) unless --program names one; every kernel is still listed.
Match classes: exact, name, order, none (SKILL.md step 4; references/attribution.md).
--user-re picks the frame that counts as user code (default: the first frame outside
site-packages, jax and the frameworks of hlo_program.FRAMEWORK_PACKAGES).
--no-xprof skips the XProf coverage cross-check.
A CPU capture is not an error: its XLA:CPU thunk events are the kernels of device "CPU".

Exit codes: 0 done; 1 the input cannot be used (one sentence says why); 2 usage;
3 a missing package (jax, xprof or protobuf; the message has the install line).
"""

from __future__ import annotations

import gc
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bootstrap; sibling.py: the platform
import sibling  # noqa: F401
from jaxperf.analyses.attribute_kernels import (  # the analysis
    ATT,
    INSTALL,
    Options,
    require_matcher,
    run,
)
from tracekit import step_cli
from tracekit import trace_rules as rules  # the classification rules


def options(ap) -> None:
    ap.add_argument("--program", type=step_cli.count(0))
    ap.add_argument("--user-re", help="regular expression: frames whose file matches are user "
                    "code (default: the first frame outside site-packages, jax and the "
                    "frameworks flax, praxis, paxml, equinox, haiku, optax, keras)")
    ap.add_argument("--no-xprof", action="store_true",
                    help="skip XProf's coverage cross-check (its hlo_stats)")
    step_cli.told_option(ap, "--steps-when-told", "step 1's steps.csv", "step 1")


STEP = step_cli.Step("attribute_kernels", __doc__, __file__, options=options)


def body(args) -> list[str]:
    try:
        user_re = re.compile(args.user_re) if args.user_re else None
    except re.error as exc:
        raise step_cli.UsageError(f"--user-re is not a regular expression: {exc}") from None
    require_matcher()
    gc.disable()  # many small objects, no cycles (see skip_stats.py)
    try:
        result, written = run(step_cli.open_capture(STEP, args), args.out,
                              Options(args.program, user_re, not args.no_xprof,
                                      args.steps_when_told, own_process=True))
    except ImportError as exc:  # protobuf or xprof (xprotos.MissingDependency is one)
        raise step_cli.MissingPackage(f"a package is missing ({exc}); {INSTALL}") from exc
    return step_cli.wrote(args.out / ATT, written) + [
        f"program: {rules.printable(result['program']['notes'][0])}",
        "Next: how.csv for the class shares, then ops.csv and lines.csv for the top "
        "instructions and Python lines (SKILL.md step 4)."]


def main(argv=None) -> int:
    return step_cli.main(STEP, body, argv)


if __name__ == "__main__":
    step_cli.run_and_exit(STEP, main)
