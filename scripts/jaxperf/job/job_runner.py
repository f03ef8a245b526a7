"""The job runner of investigate.py: each step as a child process whose lines are relayed as
they come (one at a time on stderr), its time limit, the steps that wait to be told when the
steps they read have ended, how many run at once, and stopping them all on an interrupt. The
step list itself (what runs after what) is investigate.py's."""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from tracekit import scratch, step_cli


class JobStep:
    """One script of the job: its file, the step it serves, what it does (for the progress
    line), whether it reads the capture (else only the scratch folder), and the steps whose
    tables or hand-offs it reads (`after`: it starts once they have ended; None: after every
    step before it in the job), and those it may run beside, told on its standard input when
    they have ended (`told`, with the option `told_option` that makes it wait for that)."""

    def __init__(self, name: str, path: Path | None, label: str, doing: str,
                 reads_capture: bool = True, xprof: bool = False,
                 after: tuple[str, ...] | None = None, told: tuple[str, ...] = (),
                 told_option: str = ""):
        self.name, self.path, self.label, self.doing = name, path, label, doing
        self.reads_capture, self.xprof, self.after = reads_capture, xprof, after
        self.told, self.told_option = told, told_option


# A step's sentence is printed whole up to this many characters (a path or a name can make it
# long; a cut one ends in "…" and logs/<step>.txt holds it whole): 400 cut real sentences.
MAX_SENTENCE_CHARS = 2000


def _tail_sentence(text: str) -> str:
    """The last non-empty line a failing script printed (its one sentence), trimmed."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    line = lines[-1] if lines else "no output"
    return line if len(line) <= MAX_SENTENCE_CHARS else line[:MAX_SENTENCE_CHARS - 1] + "…"


_SAID = threading.Lock()  # steps run side by side: one line at a time on stderr


def say(line: str) -> None:
    with _SAID:
        print(line, file=sys.stderr, flush=True)


# The steps' processes now running: ended with the job when it is interrupted or terminated
# (stop_all), never left to write after it has gone.
_RUNNING: set = set()
_RUNNING_LOCK = threading.Lock()
STOP_GRACE_S = 10  # after SIGTERM, a step's time to let its temporary files go; then SIGKILL


def _stop(proc, why: list, reason: str) -> None:
    why.append(reason)
    step_cli.end_children([proc], STOP_GRACE_S)  # with what it started (XProf's child)


def stop_all() -> None:
    """End every step still running, with what each started (SIGTERM, then SIGKILL after
    STOP_GRACE_S) and wait."""
    with _RUNNING_LOCK:
        procs = list(_RUNNING)
    step_cli.end_children(procs, STOP_GRACE_S)


def run_relaying(cmd: list[str], tell=None, limit: float | None = None, at_once=None) \
        -> subprocess.CompletedProcess:
    """Run a step's script, its output kept whole; its progress lines (step_cli.progress) are
    also relayed to stderr as they come, so a long step is seen alive. With `tell` (a callable
    that returns once the steps it runs beside have ended, with the lines to tell it), the
    script's standard input gets those lines and its end then. Past `limit` seconds the script
    is ended (exit TIMED_OUT, and the sentence why as its last stderr line). `at_once`: the
    scripts run at once, the script told its share of the cores (step_cli.child_group)."""
    with tempfile.TemporaryFile("w+", encoding="utf-8") as so:
        proc = subprocess.Popen(cmd, stdout=so, stderr=subprocess.PIPE, text=True,
                                encoding="utf-8", errors="replace",
                                stdin=subprocess.PIPE if tell else subprocess.DEVNULL,
                                **step_cli.child_group(at_once))
        with _RUNNING_LOCK:
            _RUNNING.add(proc)
        late: list = []
        clock = _Clock(proc, late, limit)
        if tell:
            threading.Thread(target=_tell, args=(proc, tell, clock), daemon=True).start()
        err = []
        for line in proc.stderr:
            err.append(line)
            if step_cli.PROGRESS_MARK in line:
                say(f"           {line.rstrip()}")
        code = proc.wait()
        clock.cancel()
        with _RUNNING_LOCK:
            _RUNNING.discard(proc)
        if late:
            code = TIMED_OUT
            err.append(late[0] + "\n")
        so.seek(0)
        return subprocess.CompletedProcess(cmd, code, so.read(), "".join(err))


class _Clock:
    """A step's time limit: past `limit` seconds it is ended (_stop) and `late` says why. A step
    that waits to be told has its limit again from then: the time it waited was its writer's."""

    def __init__(self, proc, late: list, limit: float | None):
        self.proc, self.late, self.limit = proc, late, limit
        self._timer = None
        self.restart()

    def restart(self) -> None:
        self.cancel()
        if self.limit:
            self._timer = threading.Timer(self.limit, _stop, (
                self.proc, self.late,
                f"it ran past its time limit of {self.limit:,.0f} s (--step-limit)"))
            self._timer.daemon = True
            self._timer.start()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()


def _tell(proc, tell, clock) -> None:
    lines = tell()
    clock.restart()
    with contextlib.suppress(OSError, ValueError):  # the step has ended already
        proc.stdin.write("".join(f"{ln}\n" for ln in lines))
        proc.stdin.close()


SENTENCES: dict[str, str] = {}  # what each step that failed said, as it said it


def could_not_run(step: JobStep, out: Path, failed: dict[str, str], why: str) -> None:
    """Say why the step could not run (in `failed`), and remove what it wrote on an earlier
    run of this capture, so that no later step reads that as this run's (a step run alone
    keeps its earlier tables when it refuses: a mistyped option loses nothing)."""
    gone = scratch.remove_produced(out, f"{step.name}.py")
    failed[step.name] = why + (f" (the {len(gone)} file(s) it wrote before are removed)"
                               if gone else "")


def run_step(step: JobStep, args, out: Path, failed: dict[str, str], t0: float,
             tell=None, at_once=None) -> int | None:
    """Run one step's script; return its exit code (None when the script is missing). Why it
    could not run goes into `failed` (said by the caller: run_job). `tell`: see run_relaying
    (the step is given its told_option); `at_once`: the steps run at once (run_relaying)."""
    say(f"[{time.monotonic() - t0:6.1f} s] {step.label}: {step.doing} ({step.name}.py)")
    if step.path is None or not step.path.is_file():
        could_not_run(step, out, failed, f"{step.name}.py is not in this bundle")
        return None
    cmd = [sys.executable, "-P", str(step.path)]
    if step.reads_capture and args.files is not None:  # the files the job resolved, once
        cmd.append(str(args.files.xplane or args.files.trace))
        cmd += [f"--resolved-note={n}" for n in args.files.notes] \
            if step.name == "capture_info" else []
    elif step.reads_capture:  # the user's words: step 0 says why they lead to no capture
        cmd.append(args.capture)
        cmd += [f"--run={args.run}"] if args.run else []
        cmd += [f"--host={args.host}"] if args.host else []
    if step.reads_capture:  # the user's options, whichever way the capture was named
        cmd += ["--no-xprof"] if args.no_xprof and step.xprof else []
        cmd += [f"--costs={args.costs.resolve()}"] if args.costs and step.name == "roofline" \
            else []
    if step.name == "trust":
        cmd += [f"--failed={k}={v}" for k, v in failed.items()]
    cmd += [step.told_option] if tell else []
    if step.name in ("factcheck", "build_page"):
        cmd.append(str(out / "report_draft.md"))
    cmd += ["--scratch", str(out), "--out", str(out / "report_draft.html")] \
        if step.name == "build_page" else ["--out", str(out)]
    started = time.monotonic()
    p = run_relaying(cmd, tell, args.step_limit, at_once)
    logs = scratch.own_dir(out / "logs")  # a planted link is replaced, never followed
    tmp = logs / f".{step.name}.{os.getpid()}.tmp"
    tmp.write_text("$ " + " ".join(cmd) + "\n" + p.stdout + (
        "\n--- stderr\n" + p.stderr if p.stderr else ""), encoding="utf-8")
    os.replace(tmp, logs / f"{step.name}.txt")  # a link in the file's place is replaced too
    # the fact check exits 4 when a claim fails: a result, not a failure to run
    if p.returncode != 0 and not (step.name == "factcheck" and p.returncode == 4):
        SENTENCES[step.name] = _tail_sentence(p.stderr or p.stdout)
        could_not_run(step, out, failed, f"exit {p.returncode}: {SENTENCES[step.name]}")
    status = f"exit {p.returncode}, " if p.returncode else ""
    say(f"[{time.monotonic() - t0:6.1f} s] {step.label} ended "
        f"({status}{time.monotonic() - started:.1f} s)")
    return p.returncode


# A step's time limit by default (--step-limit): ten minutes plus 6 s per MiB of the capture's
# files (a step takes about 0.1 s per MiB at five and ten times the seed's size: 60 times that
# margin), so that a step that runs away fails alone instead of holding the job.
STEP_LIMIT_BASE_S = 600
STEP_LIMIT_PER_MIB_S = 6
TIMED_OUT = 124  # a step's exit code when it ran past its time limit, as timeout(1) says


def capture_bytes(files) -> int:
    """The capture's files together (0 where there are none: step 0 says why)."""
    try:
        return sum(f.stat().st_size for f in (files.xplane, files.trace) if f is not None) \
            if files is not None else 0
    except OSError:
        return 0


# The most steps of this job that are ever ready at once (steps 2, 3 and 5, once step 4 ends).
MOST_STEPS_AT_ONCE = 3


def steps_at_once(args) -> tuple[int, str]:
    """How many steps run side by side, and why: --jobs, else the cores (at most
    MOST_STEPS_AT_ONCE), fewer where their memory (estimated from the capture's size, as for
    the hosts of a run) would pass what is available now."""
    if args.jobs is not None:
        return max(1, args.jobs), f"--jobs {args.jobs}"
    from tracekit import per_host
    return per_host.processes_at_once(MOST_STEPS_AT_ONCE, capture_bytes(args.files),
                                      "step")


def _teller(events: list, failed: dict):
    """What a step that waits is told: nothing until `events` are set, then the steps that
    failed so far (STEP=REASON lines)."""
    def tell() -> list[str]:
        for e in events:
            e.wait()
        return [f"{k}={v}" for k, v in dict(failed).items()]
    return tell


class Job:
    """The steps of one job and where each stands (run_job)."""

    def __init__(self, todo: list[JobStep], args, out: Path, failed: dict[str, str], t0: float,
                 jobs: int):
        self.args, self.out, self.failed, self.t0, self.jobs = args, out, failed, t0, jobs
        self.order = [st.name for st in todo]
        self.after = {st.name: (set(st.after) & set(self.order) if st.after is not None
                                else set(self.order[:i])) for i, st in enumerate(todo)}
        self.ended = {name: threading.Event() for name in self.order}
        self.codes: dict[str, int | None] = {}
        self.held: list[str] = []  # failures said once the gate has passed
        self.gate = None if "capture_info" in self.order else True
        self.pending, self.running = list(todo), {}

    def waits(self, st) -> list[str]:
        return [t for t in st.told if t in self.order and t not in self.codes]

    def ready(self, st) -> bool:
        # a step that would wait for others keeps a slot: one slot is always left to steps
        # that do not wait, so the steps it waits for can run
        waiting = sum(1 for r in self.running.values() if self.waits(r))
        return self.after[st.name] <= self.codes.keys() and (
            not self.waits(st) or waiting < self.jobs - 1)

    def start_ready(self, pool) -> None:
        chosen = []  # each step ready to start, held in its slot until all are chosen
        while len(self.running) < self.jobs and self.gate is not False:
            st = next((st for st in self.pending if self.ready(st)), None)
            if st is None:
                break
            self.pending.remove(st)
            slot = object()
            self.running[slot] = st
            chosen.append((slot, st))
        # each is told its share of the cores among the steps running once they have started
        # (tracekit.forked: steps 1 and 4 on two cores, one each; on four, two each)
        at_once = len(self.running)
        for slot, st in chosen:
            del self.running[slot]
            tell = _teller([self.ended[t] for t in self.waits(st)], self.failed) \
                if self.waits(st) else None
            self.running[pool.submit(run_step, st, self.args, self.out, self.failed, self.t0,
                                     tell, at_once)] = st

    def finish(self, fut) -> None:
        st = self.running.pop(fut)
        self.codes[st.name] = fut.result()
        self.ended[st.name].set()
        line = (f"           {st.name} could not run: {self.failed[st.name]}"
                if st.name in self.failed else None)
        if st.name == "capture_info":
            self.gate = self.codes[st.name] not in (1, 3)
            lines = (self.held + ([line] if line else [])) if self.gate else []
            self.held = []
            for ln in lines:
                say(ln)
        elif line and self.gate:
            say(line)
        elif line:
            self.held.append(line)

    def run(self, pool) -> None:
        while self.pending or self.running:
            self.start_ready(pool)
            if not self.running:
                return
            done, _ = concurrent.futures.wait(self.running,
                                              return_when=concurrent.futures.FIRST_COMPLETED)
            for fut in sorted(done, key=lambda f: self.order.index(self.running[f].name)):
                self.finish(fut)


def run_job(todo: list[JobStep], args, out: Path, failed: dict[str, str], t0: float,
            jobs: int) -> dict[str, int | None]:
    """Run every step once the steps it reads (`after`) have ended, at most `jobs` at once and
    in the job's order where several are ready; returns each step's exit code. A step with
    `told` may start before those have ended, and is told when they have (with the steps that
    failed so far), while a slot is left to steps that do not wait. Step 0 is the gate: where
    it finds the capture unusable (exit 1 or 3) nothing more starts, and what ran beside it is
    not said (its failure would follow from the same capture). A step that could not run is
    said once step 0 has passed. Interrupted or terminated, the job ends its running steps
    (SIGTERM; they let their temporary folders go) before it waits for them."""
    job = Job(todo, args, out, failed, t0, jobs)
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        try:
            job.run(pool)
        except BaseException:
            stop_all()  # before the pool waits for the threads that wait for the steps
            raise
    return job.codes
