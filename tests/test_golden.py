"""The outputs of the bundled example and a few generated scenarios are the ones whose digests
the repository keeps (tests/golden/digests.json): a change that moves an output says so in its
own commit, where `python3 -P bench/golden.py check --write` keeps the new digests."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import REPO


@pytest.mark.slow
def test_outputs_are_the_kept_digests():
    p = subprocess.run([sys.executable, "-P", str(REPO / "bench" / "golden.py"), "check"],
                       capture_output=True, text=True, timeout=900, cwd=REPO)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
