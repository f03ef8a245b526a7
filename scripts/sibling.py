"""Where the sibling skill's scripts are: `analyzing-jax-launch-overhead/scripts`, beside this
skill in an install (skills side by side) or inside it in a checkout. The one home of the lookup
every entry script of this skill makes before it imports the sibling's standard-library modules
(`capture_inputs`, `trace_reader`, `trace_rules`, `per_host`, `skip_stats`, ...).

    sys.path.insert(0, str(Path(__file__).resolve().parent))  # bootstrap; sibling.py: the platform
    import sibling
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
NAME = "analyzing-jax-launch-overhead"
MARKER = "tracekit/__init__.py"  # the platform package: present in every copy of that skill


def find() -> Path | None:
    """The sibling's scripts folder, or None where this skill is installed without it."""
    return next((p for p in (HERE.parent / NAME / "scripts", HERE.parent.parent / NAME / "scripts")
                 if (p / MARKER).is_file()), None)


DIR = find()


def on_path() -> Path | None:
    """Put this skill's scripts folder and the sibling's (when found) at the front of sys.path,
    once; return the sibling's folder (None when it is missing)."""
    for p in reversed([HERE] + ([DIR] if DIR else [])):
        if str(p) not in sys.path:
            sys.path.insert(0, str(p))
    return DIR


on_path()  # importing this module is the bootstrap
