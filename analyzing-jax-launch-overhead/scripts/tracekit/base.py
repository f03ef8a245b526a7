"""The base of the platform, importing nothing from the bundle (standard library only): the one
error type with its exit codes and the progress lines. Every module that must signal an error or
say what it does imports them from here; step_cli re-exports them for the steps."""

from __future__ import annotations

import os
import sys
import time

UNUSABLE, USAGE, MISSING_PACKAGE = 1, 2, 3
INTERRUPTED, PIPE_CLOSED, TERMINATED = 130, 141, 143  # 128 + SIGINT, SIGPIPE, SIGTERM
# A long step says what it does at least this often (seconds): often enough that a user
# watching knows it is alive, rarely enough not to drown its other lines. JAXTRACE_PROGRESS_EVERY
# sets another interval (0: every call, as the tests do).
PROGRESS_EVERY_S = float(os.environ.get("JAXTRACE_PROGRESS_EVERY", "2"))
PROGRESS_MARK = ": … "  # what investigate.py looks for to relay a step's progress lines


class StepError(Exception):
    """What ends a step early: one sentence for the user, and the exit code it ends with."""

    code = UNUSABLE

    def __init__(self, sentence: str = "", code: int | None = None):
        super().__init__(sentence)
        if code is not None:
            self.code = code


class UsageError(StepError):
    """The command line does not make sense (exit 2, with the usage line)."""

    code = USAGE


class MissingPackage(StepError):
    """A package the step needs is not installed; the sentence names it and the install line."""

    code = MISSING_PACKAGE


class _Progress:
    """Where the current step is: its name, its start, the phase and the last line's time."""

    name = ""
    start = time.monotonic()
    phase = None
    last = float("-inf")


def progress(what: str, done: int | None = None, total: int | None = None,
             unit: str = "") -> None:
    """Say on stderr what the step is doing (`what`), with `done` of `total` `unit` where given:
    at once when `what` is a new phase, else at most every PROGRESS_EVERY_S seconds; nothing
    in a step's first PROGRESS_EVERY_S seconds (a quick step stays quiet). Costs a clock read
    when nothing is said: callable from a loop every few thousand items."""
    now = time.monotonic()
    if now - _Progress.start < PROGRESS_EVERY_S or (
            what == _Progress.phase and now - _Progress.last < PROGRESS_EVERY_S):
        return
    _Progress.phase, _Progress.last = what, now
    count = ""
    if done is not None:
        count = f": {done:,}" + (f" of {total:,}" if total is not None else "") + \
            (f" {unit}" if unit else "")
    print(f"{_Progress.name or os.path.basename(sys.argv[0])}{PROGRESS_MARK}{what}{count} "
          f"({now - _Progress.start:.1f} s)", file=sys.stderr, flush=True)
