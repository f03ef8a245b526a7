#!/usr/bin/env python3
"""The per-host pass at scale: N generated hosts through the local processes and through a Dask
LocalCluster; wall time and the peak memory of the reducing process (this one: it starts the
hosts' passes and reads their summaries), for each N.

Usage:
    PYTHONPATH=tests:scripts .venv/bin/python bench/hosts.py [--hosts 16 64] [--script NAME]
        [--work DIR]

Each run is a fresh process (`python3 -P <script> RUN --out DIR [--scheduler local]`) whose own
peak resident memory (not its children's) is read from /proc while it runs; hosts are the
rocm-8gpu scenario on 2 GPUs, 4 steps (capgen.generate_hosts), generated once per N into --work.
Prints one line per (N, engine).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
def make(n: int, work: Path) -> Path:
    import dataclasses

    from capgen.generate import generate_hosts
    from capgen.scenarios import SCENARIOS
    root = work / f"hosts-{n}"
    run = root / "plugins" / "profile"
    if not run.is_dir():
        sc = dataclasses.replace(SCENARIOS["rocm-8gpu"], gpus=2, steps=4)
        generate_hosts(sc, root, hosts=n)
    return next(run.iterdir())


def measure(script: Path, run: Path, out: Path, scheduler: str | None) -> dict:
    """One run; its own peak resident memory is its VmHWM, read from /proc while it runs (the
    last read before it exits: the high-water mark only grows)."""
    cmd = [sys.executable, "-P", str(script), str(run), "--out", str(out)]
    cmd += ["--scheduler", scheduler] if scheduler else []
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    peak = 0
    while p.poll() is None:
        try:
            for ln in open(f"/proc/{p.pid}/status"):
                if ln.startswith("VmHWM:"):
                    peak = max(peak, int(ln.split()[1]))
        except OSError:
            pass
        time.sleep(0.02)
    secs = time.monotonic() - t0
    return {"exit": p.returncode, "seconds": round(secs, 1),
            "reducer_peak_mib": round(peak / 1024, 1)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, nargs="+", default=[16, 64])
    ap.add_argument("--script", default="analyzing-jax-launch-overhead/scripts/skip_stats.py")
    ap.add_argument("--work", type=Path, default=REPO / "bench" / "work")
    args = ap.parse_args(argv)
    script = REPO / args.script
    for n in args.hosts:
        run = make(n, args.work)
        for engine in (None, "local"):
            out = args.work / f"hosts-{n}-out-{engine or 'processes'}"
            r = measure(script, run, out, engine)
            print(json.dumps({"hosts": n, "engine": engine or "local processes",
                              "script": script.name, **r}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
