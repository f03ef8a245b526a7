#!/usr/bin/env python3
"""Rewrite tests/slow.txt, the tests the quick tier leaves out, from a timed run of the suite:

    .venv/bin/python -m pytest -q tests --durations=0 > /tmp/durations.log
    python3 tests/tiers.py /tmp/durations.log

A test (all its parameters together) is slow where its slowest parameter's setup, call and
teardown take SLOW_S or more; tests/conftest.py marks those `slow`, the ones reading
../shared `shared`, the browser's `browser`, and every other one `quick`."""

from __future__ import annotations

import re
import sys
from pathlib import Path

SLOW_S = 0.4  # on two busy cores: the quick tier stays under a minute
LINE = re.compile(r"\s*([\d.]+)s (?:call|setup|teardown)\s+(\S+)")


def main(log: str) -> int:
    took: dict[str, float] = {}
    for line in Path(log).read_text().splitlines():
        m = LINE.match(line)
        if m:
            name = m.group(2).split("[")[0]
            took[name] = took.get(name, 0.0) + float(m.group(1))
    slow = sorted(n for n, t in took.items() if t >= SLOW_S)
    (Path(__file__).parent / "slow.txt").write_text("\n".join(slow) + "\n")
    print(f"{len(slow)} slow tests of {len(took)} timed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(*sys.argv[1:]) if len(sys.argv) == 2 else (print(__doc__) or 2))
