#!/usr/bin/env python3
"""The whole investigation in one command: steps 0 to 7, the report draft and its fact check.

Usage:
    python3 -P investigate.py <xplane.pb | trace.json.gz | run folder | log folder>
                              [--out DIR] [--run NAME] [--host NAME] [--no-xprof] [--page]
                              [--jobs N] [--step-limit SECONDS] [--costs FILE]

Example:
    python3 -P $B/scripts/investigate.py ~/logs/plugins/profile/2026_02_20_13_54_10 --out scratch

Runs each step's own script, each in its own process, all writing into DIR (default ./):
capture_info.py (step 0), skip_stats.py (step 1), attribute_kernels.py (step 4), reconcile.py
(step 2), swimlanes.py (step 3), roofline.py (step 5), changes.py (step 6), trust.py (step 7),
report_draft.py (report_draft.md), factcheck.py (on the draft), and with --page build_page.py of
the writing-trace-report-pages skill (report_draft.html, the draft as one self-contained page).
Each step starts once the steps whose tables or hand-offs it reads have ended, up to --jobs at
once (default: the cores, at most 3, fewer when the capture's estimated memory per step does not
fit): steps 1 and 4 side by side; step 3 and step 0 (from step 1's counts of the trace) once
step 1 has ended; steps 2 and 5 once step 4 has; step 7 reads rows.csv while 2, 3, 5 and 6 run;
then the draft and its check. A step that starts before a table it reads last is written
(step 4: steps.csv; step 3: kernels.csv; step 7: the other results) waits for it: this command
says so on the step's standard input when its writer has ended, with the steps that failed so
far (step_cli.wait_until_told), and keeps a slot free for the steps it waits for.
--jobs 1 runs them one at a time, each after its writers; the tables are the same. Progress
goes to stderr: each step as it starts and ends with the elapsed time, and while a long step runs
its own progress lines (`<step>: … <what it does>: <count> (<seconds> s)`, at most every 2 s).
Each script's own output is kept in DIR/logs/<script>.txt.

A run folder with several hosts and no --host: the whole job runs once per host, each host in
its own process into DIR/<host>/ (--jobs N hosts at once, each host's steps one at a time;
default the cores, fewer when memory is short), then DIR/hosts.txt, hosts.csv and host_steps.csv
compare the hosts (per-host verdicts, the slowest host per step, the spread of step times); the
exit code is the largest of the hosts'.

A step that cannot run (its script exits non-zero, or runs past its time limit: --step-limit,
by default 600 s plus 6 s per MiB of the capture's files; it is then ended and exits 124) does
not stop the others: the reason goes to the trust list (trust.py --failed) and the later steps
work with what there is. Only a capture
that cannot be read at all (step 0 exits 1), or a missing package (step 0 exits 3), ends the run
(nothing more starts; what ran beside step 0 is not said: it failed on the same capture).

Ends with where to look: the verdict line, the top three changes (and the largest Python line
where it ranks lower: Python lines rank last), the trust-list count, and the files written. A
name over 100 characters (MAX_NAME_CHARS) is printed cut to its two ends; the tables keep it
whole.

Exit codes: 0 done (steps that could not run are in the trust list and said on stdout); 1 the
capture cannot be used (one sentence says why); 2 usage; 3 a package the scripts need is missing
(step 0 says which, and the install line); 130 interrupted, 143 terminated (SIGTERM): the
running steps are ended first, each letting its temporary folders go.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import sibling  # where the sibling skill is: one home

SIBLING = sibling.on_path()
if SIBLING is not None:
    from tracekit import (
        scratch,  # the scratch folder, read once
        step_cli,  # the command line, the per-host pass
    )
    from tracekit import trace_rules as rules  # units
else:
    scratch = step_cli = rules = None


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


PAGE = next((p for p in (HERE.parent / "writing-trace-report-pages" / "scripts" / "build_page.py",
                         HERE.parent.parent / "writing-trace-report-pages" / "scripts"
                         / "build_page.py") if p.is_file()), None)


def steps() -> list[JobStep]:
    skip = SIBLING / "skip_stats.py" if SIBLING else None
    # in the order a step is chosen among those ready at once: the longest first
    return [
        JobStep("skip_stats", skip, "step 1", "verdict: host, device or waiting", after=()),
        # steps.csv gives each kernel its step: needed only for its tables, at its end
        JobStep("attribute_kernels", HERE / "attribute_kernels.py", "step 4",
                "kernel -> instruction -> Python line", xprof=True, after=(),
                told=("skip_stats",), told_option="--steps-when-told"),
        # rows.csv, steps.csv, gaps.csv; step 4's kernels.csv for the tooltips, at its end
        JobStep("swimlanes", HERE / "swimlanes.py", "step 3", "drawing one step's swimlanes",
                after=("skip_stats",), told=("attribute_kernels",),
                told_option="--kernels-when-told"),
        # step 1's counts of the trace (it holds it decoded), not the trace read again
        JobStep("capture_info", HERE / "capture_info.py", "step 0", "inventory of the capture",
                after=("skip_stats",)),
        # the hand-offs of steps 0 and 1, and step 4's result
        JobStep("reconcile", HERE / "reconcile.py", "step 2", "reconciling independent totals",
                after=("capture_info", "skip_stats", "attribute_kernels")),
        JobStep("roofline", HERE / "roofline.py", "step 5", "FLOPs, bytes and ceilings",
                xprof=True, after=("attribute_kernels",)),
        JobStep("changes", HERE / "changes.py", "step 6", "ranking what to change",
                reads_capture=False),
        # its long read (rows.csv) first, the other results at its end
        JobStep("trust", HERE / "trust.py", "step 7", "the trust list", reads_capture=False,
                after=("capture_info", "skip_stats", "attribute_kernels"),
                told=("reconcile", "swimlanes", "roofline", "changes"),
                told_option="--rest-when-told"),
        JobStep("report_draft", HERE / "report_draft.py", "report", "writing report_draft.md",
                reads_capture=False),
        JobStep("factcheck", HERE / "factcheck.py", "fact check",
                "checking every number of the draft", reads_capture=False),
    ]


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


def _stop(proc, why: list | None = None, reason: str = "") -> None:
    if why is not None:
        why.append(reason)
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()


def stop_all() -> None:
    """End every step still running (SIGTERM, then SIGKILL after STOP_GRACE_S) and wait."""
    with _RUNNING_LOCK:
        procs = list(_RUNNING)
    for proc in procs:
        _stop(proc)


def run_relaying(cmd: list[str], tell=None, limit: float | None = None) \
        -> subprocess.CompletedProcess:
    """Run a step's script, its output kept whole; its progress lines (step_cli.progress) are
    also relayed to stderr as they come, so a long step is seen alive. With `tell` (a callable
    that returns once the steps it runs beside have ended, with the lines to tell it), the
    script's standard input gets those lines and its end then. Past `limit` seconds the script
    is ended (exit TIMED_OUT, and the sentence why as its last stderr line)."""
    with tempfile.TemporaryFile("w+", encoding="utf-8") as so:
        proc = subprocess.Popen(cmd, stdout=so, stderr=subprocess.PIPE, text=True,
                                encoding="utf-8", errors="replace",
                                stdin=subprocess.PIPE if tell else subprocess.DEVNULL)
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
    try:
        proc.stdin.write("".join(f"{ln}\n" for ln in lines))
        proc.stdin.close()
    except (OSError, ValueError):  # the step has ended already
        pass


SENTENCES: dict[str, str] = {}  # what each step that failed said, as it said it


def could_not_run(step: JobStep, out: Path, failed: dict[str, str], why: str) -> None:
    """Say why the step could not run (in `failed`), and remove what it wrote on an earlier
    run of this capture, so that no later step reads that as this run's (a step run alone
    keeps its earlier tables when it refuses: a mistyped option loses nothing)."""
    gone = scratch.remove_produced(out, f"{step.name}.py")
    failed[step.name] = why + (f" (the {len(gone)} file(s) it wrote before are removed)"
                               if gone else "")


def run_step(step: JobStep, args, out: Path, failed: dict[str, str], t0: float,
             tell=None) -> int | None:
    """Run one step's script; return its exit code (None when the script is missing). Why it
    could not run goes into `failed` (said by the caller: run_job). `tell`: see run_relaying
    (the step is given its told_option)."""
    say(f"[{time.monotonic() - t0:6.1f} s] {step.label}: {step.doing} ({step.name}.py)")
    if step.path is None or not step.path.is_file():
        could_not_run(step, out, failed, f"{step.name}.py is not in this bundle")
        return None
    cmd = [sys.executable, "-P", str(step.path)]
    if step.reads_capture:
        cmd.append(args.capture)
        cmd += [f"--run={args.run}"] if args.run else []
        cmd += [f"--host={args.host}"] if args.host else []
        cmd += ["--no-xprof"] if args.no_xprof and step.xprof else []
        cmd += [f"--costs={args.costs.resolve()}"] if args.costs and step.name == "roofline" \
            else []
    if step.name == "trust":
        cmd += [f"--failed={k}={v}" for k, v in failed.items()]
    cmd += [step.told_option] if tell else []
    if step.name in ("factcheck", "build_page"):
        cmd.append(str(out / "report_draft.md"))
    if step.name == "build_page":
        cmd += ["--scratch", str(out), "--out", str(out / "report_draft.html")]
    else:
        cmd += ["--out", str(out)]
    started = time.monotonic()
    p = run_relaying(cmd, tell, args.step_limit)
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


def capture_bytes(args) -> int:
    """The capture's files together (0 where they cannot be found: step 0 says why)."""
    from tracekit import capture_inputs
    try:
        files = capture_inputs.resolve(args.capture, run=args.run, host=args.host)
        return sum(f.stat().st_size for f in (files.xplane, files.trace) if f is not None)
    except (capture_inputs.CaptureError, OSError):
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
    return per_host.processes_at_once(MOST_STEPS_AT_ONCE, capture_bytes(args), "step")


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
        while len(self.running) < self.jobs and self.gate is not False:
            st = next((st for st in self.pending if self.ready(st)), None)
            if st is None:
                return
            self.pending.remove(st)
            tell = _teller([self.ended[t] for t in self.waits(st)], self.failed) \
                if self.waits(st) else None
            self.running[pool.submit(run_step, st, self.args, self.out, self.failed, self.t0,
                                     tell)] = st

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
    failed so far), while a slot is left to steps that do not wait. JobStep 0 is the gate: where
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


# A name printed longer than this is cut to its two ends with "…" between: ROCm's Tensile kernel
# names run to 800 characters and one would fill the screen; the tables keep every name whole.
MAX_NAME_CHARS = 100
# an unbroken run that long, with no "/" (a path is printed whole: it is where to look)
LONG_RUN_RE = re.compile(r"(?<![^\s,;])[^\s/]{" + str(MAX_NAME_CHARS + 1) + r",}(?![^\s,;])")


def short_name(name: str) -> str:
    """A name of at most MAX_NAME_CHARS characters: its first two thirds and last third."""
    if len(name) <= MAX_NAME_CHARS:
        return name
    keep = MAX_NAME_CHARS - 1
    head = keep * 2 // 3
    return name[:head] + "…" + name[len(name) - (keep - head):]


def long_names(out: Path) -> list[str]:
    """The kernel and instruction names of step 4's tables longer than MAX_NAME_CHARS, longest
    first (a kernel's demangled name may hold spaces: found whole, not word by word)."""
    names = set()
    s = scratch.Scratch(out)
    for table, cols in (("attribution/kernel_names.csv", ("kernel",)),
                        ("attribution/ops.csv", ("instruction", "user_frame"))):
        for c in cols:
            names.update(v or "" for v in s.values(table, c) or ())
    return sorted((n for n in names if len(n) > MAX_NAME_CHARS), key=len, reverse=True)


def cut_names(line: str, names: list[str]) -> str:
    """A printed line with every name over MAX_NAME_CHARS cut (short_name): the known names of
    step 4's tables, then any unbroken run of characters that long that is not a path."""
    for n in names:
        if n in line:
            line = line.replace(n, short_name(n))
    return LONG_RUN_RE.sub(lambda m: short_name(m.group(0)), line)


def _count(n, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def where_to_look(out: Path, failed: dict[str, str], factcheck_rc: int | None) -> list[str]:
    """The closing lines: verdict, top three changes (and the largest Python line below them),
    trust-list count, files written."""
    lines = []
    summary = out / "summary.txt"
    verdict = next((ln.strip() for ln in (summary.read_text(encoding="utf-8").splitlines()
                                          if summary.is_file() else [])
                    if ln.startswith("verdict")), None)
    lines.append(verdict or "verdict: none (step 1 did not run; see the trust list)")
    s = scratch.Scratch(out)
    ranked = s.rows("changes.csv") or []
    top = ranked[:3]
    # Python lines rank after every other cause (references/changes.md): the largest is named
    # here too, since it often holds more of the step than change 1
    line = next((r for r in ranked[3:] if r.get("cause_kind") == "python_line"), None)
    for r in top + ([line] if line else []):
        saves = rules.us_text(r.get("saving_us"), "? us")
        if r.get("saving_measured_us"):
            saves = (f"{rules.us_text(r['saving_measured_us'], '? us')} at a rate this capture "
                     f"reached to {saves}")
        of = rules.us_text(r.get("step_us"), "? us")
        lines.append(f"change {r.get('rank')}: {r.get('cause')} (saves {saves} "
                     f"of {of} per step; inferred, not run)"
                     + ("; the largest Python line" if r is line else ""))
    if not top:
        lines.append("changes: none ranked (see changes.json refusals)")
    trust = s.json("trust.json") or {}
    figs = trust.get("figures") or {}
    n_items = (figs.get("items") or {}).get("value")
    n_need = (figs.get("needs_new_capture") or {}).get("value")
    if n_items is None:
        lines.append("trust list: none (step 7 did not run)")
    else:
        lines.append(f"trust list: {_count(n_items, 'item')}, "
                     f"{_count(n_need or 0, 'question')} that need a new capture (trust.csv)")
    if factcheck_rc is not None:
        lines.append("fact check of the draft: " + (
            "every figure found in its table" if factcheck_rc == 0 else
            "claims failed, see factcheck.csv" if factcheck_rc == 4 else
            "could not run (logs/factcheck.txt)"))
    page = out / "report_draft.html"
    if "build_page" not in failed and page.is_file():
        lines.append(f"page: {page} (self-contained; open it from the file)")
    if failed:
        lines.append("could not run: " + "; ".join(f"{k} ({v})" for k, v in failed.items()))
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*")
                   if p.is_file() and "xplane" not in p.parts and "logs" not in p.parts
                   and not p.relative_to(out).parts[0].startswith("."))
    lines.append(f"files in {out}: " + ", ".join(files))
    lines.append(f"Next: read {out / 'report_draft.md'} and judge each marked place from its "
                 f"table (SKILL.md), then rerun factcheck.py on the report.")
    names = long_names(out)
    return [cut_names(ln, names) for ln in lines]


def options(ap) -> None:
    ap.add_argument("--no-xprof", action="store_true",
                    help="leave XProf's own figures out of steps 4 and 5 (faster)")
    ap.add_argument("--step-limit", type=float, metavar="SECONDS",
                    help=f"end a step that runs longer than this; it goes to the trust list and "
                         f"the others go on (default: {STEP_LIMIT_BASE_S} s plus "
                         f"{STEP_LIMIT_PER_MIB_S} s per MiB of the capture's files; 0: none)")
    ap.add_argument("--costs", type=Path, metavar="FILE",
                    help="step 5: a CSV of FLOP and byte formulas for custom calls no model "
                         "knows (references/roofline.md)")
    ap.add_argument("--page", action="store_true",
                    help="then build the HTML page of the draft (writing-trace-report-pages)")


STEP = step_cli.Step("investigate", __doc__, __file__, options=options) if step_cli else None


@contextlib.contextmanager
def holding(out: Path):
    """The job's lock on its scratch folder: a second investigate.py into it is refused (one
    sentence) while this one runs. Where the system has no file locks, none is taken."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    path = scratch.own_dir(out / scratch.HANDOFF) / "investigate.lock"
    if path.is_symlink():
        path.unlink()  # a planted link is replaced, never followed
    with open(path, "a+", encoding="utf-8") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise step_cli.StepError(f"another investigate.py is writing into {out}: wait for "
                                     "it to end, or use another --out") from None
        try:
            yield
        finally:
            path.unlink(missing_ok=True)


def start_afresh(args, out: Path) -> None:
    """A folder holding another capture's tables (scratch.other_capture) is emptied of every
    declared file first: none of them may be read beside this capture's."""
    from tracekit import capture_inputs
    try:
        files = capture_inputs.resolve(args.capture, run=args.run, host=args.host)
    except capture_inputs.CaptureError:
        return  # step 0 says why
    other = scratch.claimed(out).get("xplane" if files.xplane else "trace", {}).get("file")
    if scratch.other_capture(out, [f for f in (files.xplane, files.trace) if f]):
        for p in scratch.outputs(out):
            if p.name == "logs":  # read by no step, each replaced as its step runs; the
                continue  # per-host pass writes this job's own log there as it runs
            if p.name == scratch.HANDOFF:
                for q in p.iterdir():
                    if q.name != "investigate.lock":
                        q.unlink()
            elif p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink()
        say(f"[{0.0:6.1f} s] {out} held the tables of another capture ({other}): removed")


def body(args):
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    with holding(out):
        start_afresh(args, out)
        return run_all(args, out)


def run_all(args, out: Path):
    t0 = time.monotonic()
    failed: dict[str, str] = {}
    todo = steps() + ([JobStep("build_page", PAGE, "page", "the HTML page of the draft",
                               reads_capture=False)] if args.page else [])
    jobs, why = steps_at_once(args)
    if args.step_limit is None:
        args.step_limit = STEP_LIMIT_BASE_S + STEP_LIMIT_PER_MIB_S * capture_bytes(args) / 2**20
    say(f"[{0.0:6.1f} s] up to {jobs} step{'s' if jobs > 1 else ''} at once ({why}); each "
        "starts once the steps whose tables it reads have ended" + (
            f"; a step is ended past {args.step_limit:,.0f} s" if args.step_limit else ""))
    SENTENCES.clear()  # of this job alone (main may run again in one process)
    codes = run_job(todo, args, out, failed, t0, jobs)
    rc = codes.get("capture_info")
    if rc in (1, 3):  # its own sentence, as it said it
        print(SENTENCES.get("capture_info") or failed["capture_info"], file=sys.stderr)
        return [], rc
    say(f"[{time.monotonic() - t0:6.1f} s] done")
    ordered = {k: failed[k] for k in (st.name for st in todo) if k in failed}
    return where_to_look(out, ordered, codes.get("factcheck"))


def main(argv=None) -> int:
    if step_cli is None:
        print(f"investigate: the {sibling.NAME} skill is not installed beside this one (its "
              "scripts hold steps 1 to 3): install the three skills side by side (README.md)",
              file=sys.stderr)
        return 1
    return step_cli.main(STEP, body, argv)


if __name__ == "__main__":
    raise SystemExit(step_cli.run(STEP, main) if step_cli else main())
