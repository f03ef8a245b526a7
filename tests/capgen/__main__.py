"""Generate corpus captures from the command line.

Usage (from the repository root, with the project's .venv):
    .venv/bin/python -P -m capgen --list
    .venv/bin/python -P -m capgen SCENARIO OUT_DIR [--steps N] [--gpus N] [--seed N]
                                  [--hosts N [--slow-host I] [--slow-factor F]]

(`-m capgen` needs tests/ and scripts/ on the path: run it as
`PYTHONPATH=tests:scripts .venv/bin/python -m capgen ...`.) Writes OUT_DIR/plugins/profile/<run>/
and OUT_DIR/truth/, and prints the sizes and counts. With --hosts N the run folder holds N hosts'
captures (truth/<host>/ each, truth/hosts.csv), host --slow-host planted slower.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

import sibling  # scripts/ is on the path (above): it finds the platform, tracekit

sibling.on_path()


def main(argv=None) -> int:
    from capgen.generate import generate, generate_hosts
    from capgen.scenarios import ALL_SCENARIOS as SCENARIOS
    ap = argparse.ArgumentParser(prog="capgen", description=__doc__.splitlines()[0])
    ap.add_argument("scenario", nargs="?")
    ap.add_argument("out", nargs="?")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--steps", type=int)
    ap.add_argument("--gpus", type=int)
    ap.add_argument("--seed", type=int)
    ap.add_argument("--hosts", type=int)
    ap.add_argument("--slow-host", type=int)
    ap.add_argument("--slow-factor", type=float, default=1.5)
    args = ap.parse_args(argv)
    if args.list or not args.scenario:
        for name, sc in SCENARIOS.items():
            what = sc.program if sc.plan is None else (
                f"{len(sc.plan.programs)} programs, {len(sc.plan.iteration)} executions a step")
            print(f"{name}: {sc.vendor}, {what}, {sc.gpus} GPU(s), {sc.steps} steps, "
                  f"command buffers {sc.command_buffers}")
        return 0
    if args.scenario not in SCENARIOS or not args.out:
        print(f"capgen: unknown scenario {args.scenario!r} or no OUT_DIR; see --list",
              file=sys.stderr)
        return 2
    changes = {k: v for k, v in (("steps", args.steps), ("gpus", args.gpus),
                                 ("seed", args.seed)) if v is not None}
    sc = dataclasses.replace(SCENARIOS[args.scenario], **changes)
    t = time.perf_counter()
    results = (generate_hosts(sc, args.out, args.hosts, args.slow_host, args.slow_factor)
               if args.hosts else [generate(sc, args.out)])
    for r in results:
        print(f"wrote {r.xplane} ({r.xplane.stat().st_size} bytes)")
        print(f"wrote {r.trace} ({r.trace.stat().st_size} bytes)")
        print(f"wrote {r.truth_dir} ({len(r.kernels)} kernels, {len(r.steps)} step rows)")
    print(f"generated in {time.perf_counter() - t:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
