"""One command-line home for the bundle's steps: the parser, the per-host fan-out, the one error
type with its exit code, and the closing lines (standard library only).

A step script declares itself as a `Step` (its name, its docstring as the --help text, its file,
what it reads, its own options) and hands `main` a body: a function of the parsed arguments
that does the work and returns the lines to print. Everything else is here:

- the parser: the docstring's first line as the description, the rest as the epilog; for a step
  that reads a capture the `capture` argument, `--run` and `--host`; `--out` (default ./);
  `--jobs` (the per-host pass); then the step's own options;
- the per-host pass: a capture that leads to a run of several hosts with no --host, or a scratch
  folder that holds a per-host pass, runs the step once per host (per_host.py);
- the ways out: `StepError` carries one sentence and its exit code (1 the input cannot be used,
  2 usage, 3 a package is missing); an OSError is the scratch folder's (cannot write into it);
  a MemoryError says the capture is too large for this machine; an interrupt is one sentence
  (exit 130), SIGTERM too (exit 143: raised as `Terminated` where the step is, so that its
  temporary folders and child processes go), and a closed pipe exits 141; never a traceback;
  each process a command starts leads a group that what it starts in turn joins, and is ended
  with its whole group (`child_group`, `end_children`), so nothing a command started outlives it;
- the closing lines: `wrote <path> (<n> rows | lines | bytes)` per file, the step's summary,
  then its "Next:" line;
- progress: `progress(what, done, total)` says on stderr what a long step is doing, with its
  counts (`<step>: … <what>: <done> of <total> (<seconds> s)`), at most every
  PROGRESS_EVERY_S seconds, a new phase at once, none in a quick step's first seconds: a user
  watching a two-minute run knows it is alive. investigate.py relays these lines as they come.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tracekit import forked
from tracekit import trace_rules as rules
from tracekit.base import (  # noqa: F401  (re-exported: the steps import them from here)
    INTERRUPTED,
    MISSING_PACKAGE,
    PIPE_CLOSED,
    PROGRESS_EVERY_S,
    PROGRESS_MARK,
    TERMINATED,
    UNUSABLE,
    USAGE,
    MissingPackage,
    StepError,
    UsageError,
    _Progress,
    progress,
)


@dataclass
class Step:
    name: str                  # the script's name without .py, the prefix of its messages
    doc: str                   # the module docstring: the --help text
    script: str                # the script's __file__ (the per-host pass runs it again)
    reads: str = "capture"     # capture | scratch (only the scratch folder) | report | pair
    capture_check: bool = False  # a scratch step that may be given the capture to check against
    options: Callable[[argparse.ArgumentParser], None] | None = None
    out_help: str | None = None
    fan_out: bool = True
    locks: bool = False          # holds its --out folder's lock (holding), one host or many


def told_option(ap: argparse.ArgumentParser, flag: str, reads: str, writer: str) -> None:
    """The option of a step investigate.py may start beside the step it reads (`writer`, which
    writes `reads`): with it the step waits for its standard input to end (wait_until_told)."""
    ap.add_argument(flag, action="store_true",
                    help=f"read {reads} only once a line (or the end of input) comes on standard "
                         f"input: investigate.py runs {writer} beside this step and says so "
                         f"when {writer} has ended")


def wait_until_told(what: str) -> list[str]:
    """Wait for the end of standard input: investigate.py runs a step beside the steps that
    write `what`, and closes the step's input when they have ended; returns the non-empty
    lines written before (what the step is told, such as the steps that failed)."""
    progress(f"waiting for {what}")
    try:
        return [ln.rstrip("\n") for ln in sys.stdin if ln.strip()]
    except (OSError, ValueError, UnicodeDecodeError):  # no input at all: nothing to wait for
        return []


# ---------------------------------------------------------------- option values, checked as parsed

MAX_LIMIT_S = 7 * 86_400  # a step's time limit: a week is past any capture's analysis
MAX_COUNT = 1 << 20  # --jobs and the like: past any machine or cluster


def _finite(text: str, what: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
    if not math.isfinite(v) or "_" in text:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what} (a finite decimal)")
    return v


def seconds(text: str) -> float:
    """A time limit in seconds: a finite decimal from 0 (no limit) to MAX_LIMIT_S."""
    v = _finite(text, "a number of seconds")
    if not 0 <= v <= MAX_LIMIT_S:
        raise argparse.ArgumentTypeError(f"{text} s is outside 0 (no limit) to {MAX_LIMIT_S:,} s")
    return v


def microseconds(text: str) -> float:
    """A time in microseconds: any finite decimal."""
    return _finite(text, "a number of microseconds")


def count(low: int = 1):
    """A whole number from `low` to MAX_COUNT, as an argparse type."""
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not low <= v <= MAX_COUNT or "_" in text:
            raise argparse.ArgumentTypeError(f"{text} is outside {low} to {MAX_COUNT:,}")
        return v
    parse.__name__ = "count"
    return parse


def parser(step: Step) -> argparse.ArgumentParser:
    lines = step.doc.splitlines()
    ap = argparse.ArgumentParser(description=lines[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(lines[1:]))
    if step.reads == "capture":
        ap.add_argument("capture")
    elif step.capture_check:
        ap.add_argument("capture", nargs="?",
                        help="optional: checked against the scratch folder's capture, never read")
    elif step.reads == "report":
        ap.add_argument("report", type=Path)
    elif step.reads == "pair":  # two captures or scratch folders: before and after
        ap.add_argument("before")
        ap.add_argument("after")
    if step.options:
        step.options(ap)
    ap.add_argument("--out", type=Path, default=Path("."),
                    help=step.out_help or "the scratch folder (default: the current folder)")
    if step.reads == "capture" or step.capture_check:
        ap.add_argument("--run", help="run name, when a log folder holds several runs")
        ap.add_argument("--host", help="host name, when a run holds several hosts")
    if step.fan_out:
        ap.add_argument("--jobs", type=count(1), default=None,
                        help="with a run of several hosts: how many hosts to analyse at once "
                             "(default: the cores, fewer when memory is short)")
        ap.add_argument("--scheduler", metavar="ADDRESS",
                        help="with a run of several hosts: run each host's pass as a task on "
                             "the Dask cluster at ADDRESS (tcp://host:8786), or on a "
                             "LocalCluster started here with 'local'; captures and --out must "
                             "be paths every worker sees (default: local processes)")
    return ap


def _fanned(step: Step, args, argv) -> int | None:
    if not step.fan_out:
        return None
    from tracekit import per_host
    if getattr(args, "capture", None) is not None:
        return per_host.maybe_fan_out(step.name, step.script, argv, args.capture, args.run,
                                      args.host, args.out, args.jobs, args.scheduler)
    return per_host.maybe_fan_out_scratch(step.name, step.script, argv, args.out, args.jobs,
                                          args.scheduler)


def say(step: Step | str, sentence) -> None:
    """One line on stderr, prefixed with the step's name, control characters escaped."""
    name = step if isinstance(step, str) else step.name
    print(f"{name}: {rules.printable(sentence)}", file=sys.stderr)


def open_capture(step: Step, args):
    """The capture the arguments name (capture_inputs.Capture), its notes said on stderr; the
    scratch folder claimed for it (claim_for)."""
    from tracekit import capture_inputs
    capture = capture_inputs.open_capture(args.capture, run=args.run, host=args.host)
    for n in capture.files.notes:
        say(step, n)
    claim_for(capture.files, args.out)
    return capture


_CLAIMED: list = []  # (folder, files) a step claims, recorded once it has succeeded (main)


def claim_for(files, out) -> None:
    """The scratch folder `out` is to hold this capture's tables: a StepError in one sentence
    where it holds another capture's (scratch.other_capture); the claim is recorded when the
    step succeeds (a failed step leaves the folder as it was)."""
    from tracekit import scratch
    sources = [f for f in (files.xplane, files.trace) if f is not None]
    if refusal := scratch.other_capture(out, sources):
        raise StepError(refusal)
    _CLAIMED.append((out, sources))


LOCK_FILE = "writer.lock"  # in the scratch folder's .handoff/


@contextlib.contextmanager
def holding(out: Path):
    """A command's lock on the scratch folder it writes (investigate.py, one host or many;
    compare.py): a second such command into it is refused in one sentence while this one runs,
    never left to mix its files with this one's. Where the system has no file locks, none is
    taken."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    from tracekit import scratch
    path = scratch.own_dir(Path(out) / scratch.HANDOFF) / LOCK_FILE
    if path.is_symlink():
        path.unlink()  # a planted link is replaced, never followed
    with open(path, "a+", encoding="utf-8") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise StepError(f"another investigate.py or compare.py is writing into {out}: wait "
                            "for it to end, or use another --out") from None
        try:
            yield
        finally:
            path.unlink(missing_ok=True)


def main(step: Step, body: Callable, argv=None) -> int:
    """Parse `argv`, run the per-host pass or `body(args)` (holding the folder's lock where the
    step locks), and map every way out to its exit code. The body returns the lines to print,
    or (lines, exit code) where a finished step has a verdict of its own to exit with (the fact
    check's 4)."""
    ap = parser(step)
    args = ap.parse_args(argv)
    _Progress.name, _Progress.start = step.name, time.monotonic()
    with contextlib.ExitStack() as lock:
        if step.locks:
            try:
                lock.enter_context(holding(args.out))
            except StepError as exc:
                say(step, exc)
                return exc.code
            except OSError as exc:
                say(step, f"cannot write into {args.out}: {exc.strerror or exc}")
                return UNUSABLE
        return _main(step, body, args, argv, ap)


def _main(step: Step, body: Callable, args, argv, ap) -> int:
    try:
        fanned = _fanned(step, args, argv)
    except StepError as exc:  # the cluster cannot be had (--scheduler): one sentence
        say(step, exc)
        return exc.code
    if fanned is not None:
        return fanned
    try:
        out = body(args)
        lines, code = out if isinstance(out, tuple) else (out, 0)
        if code == 0:  # the tables written are this capture's: the folder is claimed for it
            from tracekit import scratch
            for folder, sources in _CLAIMED:
                scratch.claim(folder, sources)
    except StepError as exc:
        if exc.code == USAGE:
            ap.error(str(exc))
        say(step, exc)
        return exc.code
    except OSError as exc:  # the scratch folder (permissions, a full disk), a file missing
        say(step, f"cannot use {exc.filename}: {exc.strerror or exc}" if exc.filename else
            f"cannot write into {args.out}: {exc.strerror or exc}")
        return UNUSABLE
    except MemoryError:
        what = getattr(args, "capture", None) or args.out
        say(step, f"{what} is too large to analyse in this machine's memory")
        return UNUSABLE
    for line in lines:
        print(line)
    return code


def wrote(folder: Path, written) -> list[str]:
    """`wrote <path> (<n> <unit>)` for each (file, count) written: rows of a table, lines of a
    text, bytes of a picture; a result JSON or a count of None says no count."""
    out = []
    for f, n in written:
        unit = ("bytes" if f.endswith((".svg", ".html")) else
                "lines" if f.endswith((".txt", ".md")) else "rows")
        out.append(f"wrote {Path(folder) / f}" + ("" if n is None or f.endswith(".json")
                                                  else f" ({n} {unit})"))
    return out


# One process group per command: the command the user started stays where it was started (a
# terminal's Ctrl-C still reaches it), and puts each process it starts (a step, a host's pass,
# an investigation) in a group of that process's own, which everything the process starts in
# turn joins (the environment says a command runs inside such a group). Interrupted or
# terminated, a command ends each child's whole group (end_children), so nothing it started
# outlives it, however deep.
GROUP_ENV = "JAXTRACE_IN_GROUP"
_TOP = GROUP_ENV not in os.environ
CHILD_GRACE_S = 30  # a terminated child's time to let its own children and folders go


def child_group(at_once: int | None = None) -> dict:
    """Popen's keywords for a child: a group of its own where this is the command the user
    started (where process groups exist), else the group this process is in; and the
    environment that tells it it runs inside one, and, where it runs beside at_once - 1 others
    like it, its share of the cores (forked.share)."""
    group = {"process_group": 0} if _TOP and hasattr(os, "setpgid") else {}
    env = {**os.environ, GROUP_ENV: "1"}
    if at_once is not None:
        env[forked.CORES_ENV] = str(forked.share(at_once))
    return {**group, "env": env}


def end_children(procs, grace: float = CHILD_GRACE_S) -> None:
    """End children and everything they started: SIGTERM to each one's group (to it alone
    where it leads none), SIGKILL to those left past `grace` seconds; each reaped."""
    def send(proc, sig):
        if proc.poll() is not None:
            return  # reaped: its number may be another's now (each waits for its own children)
        with contextlib.suppress(OSError):  # it has ended meanwhile
            if hasattr(os, "killpg") and os.getpgid(proc.pid) == proc.pid:
                os.killpg(proc.pid, sig)
            else:
                proc.send_signal(sig)
    for proc in procs:
        send(proc, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for proc in procs:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            send(proc, signal.SIGKILL)
            proc.wait()


def run_child(cmd: list[str]):
    """A command of the bundle run to its end, its output captured (subprocess.run's result);
    interrupted or terminated, it and what it started are ended (end_children) before this
    goes."""
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          stdin=subprocess.DEVNULL, **child_group()) as proc:
        try:
            out, err = proc.communicate()
        except BaseException:
            end_children([proc])
            raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _once(signum) -> None:
    """The first SIGTERM or SIGINT: later ones are ignored (the process is already unwinding;
    a second, from its group and from its parent, must not cut its clean-up short)."""
    with contextlib.suppress(OSError, ValueError):
        signal.signal(signum, signal.SIG_IGN)


def run(step: Step | str, main_fn: Callable[[], int]) -> int:
    """An entry script's exit code from `main_fn()`, with the two ways out that are not its own:
    the reader of its output went away (`| head`: the files are written; nothing more is said,
    exit 141 as for SIGPIPE) and an interrupt (one sentence, exit 130), never a traceback.
    A second SIGTERM or SIGINT is ignored while it unwinds."""
    name = step if isinstance(step, str) else step.name
    with contextlib.suppress(ValueError, OSError):  # not the main thread, or no such signal here
        signal.signal(signal.SIGTERM, _terminated)
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, _interrupted)
    try:
        code = main_fn()
        sys.stdout.flush()  # here, not at the interpreter's exit, where it could not be caught
        return code
    except BrokenPipeError:
        # the interpreter flushes stdout at exit: point it somewhere that takes it
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return PIPE_CLOSED
    except (Terminated, KeyboardInterrupt) as exc:
        how = "terminated" if isinstance(exc, Terminated) else "interrupted"
        print(f"{name}: {how}; files already written stay as they were or whole", file=sys.stderr)
        return TERMINATED if isinstance(exc, Terminated) else INTERRUPTED


def run_and_exit(step: Step | str, main_fn: Callable[[], int]) -> None:
    """run(), then the process ends at once with its code, its output flushed: what the step
    built is freed by the exit, not one object at a time (a twentieth of step 4's time, about
    a second of step 1's on a million events)."""
    code = run(step, main_fn)
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


class Terminated(BaseException):
    """SIGTERM, raised where the step is so that its temporary folders and child processes are
    let go on the way out, as for an interrupt."""


def _terminated(signum, frame):
    _once(signum)
    raise Terminated()


def _interrupted(signum, frame):
    _once(signum)
    raise KeyboardInterrupt
