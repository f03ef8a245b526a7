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

import re
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bootstrap; sibling.py: the platform
import sibling

HERE = sibling.HERE
if sibling.DIR is not None:
    from jaxperf.job.job_runner import (  # each step a child process, relayed, timed, told, stopped
        SENTENCES,
        STEP_LIMIT_BASE_S,
        STEP_LIMIT_PER_MIB_S,
        JobStep,
        capture_bytes,
        run_job,
        say,
        steps_at_once,
    )
    from tracekit import (
        scratch,  # the scratch folder, read once
        step_cli,  # the command line, the per-host pass
    )
    from tracekit import trace_rules as rules  # units
else:
    scratch = step_cli = rules = None


PAGE = next((p for p in (HERE.parent / "writing-trace-report-pages" / "scripts" / "build_page.py",
                         HERE.parent.parent / "writing-trace-report-pages" / "scripts"
                         / "build_page.py") if p.is_file()), None)


def steps() -> list[JobStep]:
    skip = sibling.DIR / "skip_stats.py" if sibling.DIR else None
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
        # the tables of steps 1, 2, 4 and 5 (step 0's result for a capture it is given): not
        # step 3's drawing, so it runs beside step 3
        JobStep("changes", HERE / "changes.py", "step 6", "ranking what to change",
                reads_capture=False, after=("capture_info", "skip_stats", "reconcile",
                                            "attribute_kernels", "roofline")),
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


def where_to_look(out: Path, failed: dict[str, str], factcheck_rc: int | None) -> list[str]:
    """The closing lines: verdict, top three changes (and the largest Python line below them),
    trust-list count, files written."""
    lines = []
    summary = out / "summary.txt"
    try:
        text = scratch.read_file(summary)
    except (OSError, ValueError):
        text = ""
    verdict = next((ln.strip() for ln in text.splitlines() if ln.startswith("verdict")), None)
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
            saves = (f"{rules.us_text(r['saving_measured_us'], '? us')} "
                     f"({rules.low_end_words(r)}) to {saves}")
        bound = ""
        if r.get("target") and not r.get("saving_measured_us"):  # the ceiling's bound alone
            saves, bound = f"at most {saves}", f", at its ceiling: {r['target']}"
        of = rules.us_text(r.get("step_us"), "? us")
        lines.append(f"change {r.get('rank')}: {r.get('cause')} (saves {saves} "
                     f"of {of} per step{bound}; inferred, not run)"
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
        lines.append(f"trust list: {rules.plural(n_items, 'item')}, "
                     f"{rules.plural(n_need or 0, 'question')} that need a new capture (trust.csv)")
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
    ap.add_argument("--step-limit", type=step_cli.seconds, metavar="SECONDS",
                    help=f"end a step that runs longer than this; it goes to the trust list and "
                         f"the others go on (default: {STEP_LIMIT_BASE_S} s plus "
                         f"{STEP_LIMIT_PER_MIB_S} s per MiB of the capture's files; 0: none)")
    ap.add_argument("--costs", type=Path, metavar="FILE",
                    help="step 5: a CSV of FLOP and byte formulas for custom calls no model "
                         "knows (references/roofline.md)")
    ap.add_argument("--page", action="store_true",
                    help="then build the HTML page of the draft (writing-trace-report-pages)")


STEP = step_cli.Step("investigate", __doc__, __file__, options=options,
                     locks=True) if step_cli else None


def resolved(args):
    """The capture's files, resolved once for the whole job (every step is given the same
    files, whatever appears in the folder meanwhile), their notes said once; None where the
    arguments lead to no capture (step 0 says why)."""
    from tracekit import capture_inputs
    try:
        files = capture_inputs.resolve(args.capture, run=args.run, host=args.host)
    except capture_inputs.CaptureError:
        return None
    for n in files.notes:
        say(f"[{0.0:6.1f} s] {n}")
    return files if files.xplane or files.trace else None


def start_afresh(files, out: Path) -> None:
    """A folder holding another capture's tables (scratch.other_capture) is emptied of every
    declared file first: none of them may be read beside this capture's."""
    if files is None:
        return  # step 0 says why
    other = scratch.claimed(out).get("xplane" if files.xplane else "trace", {}).get("file")
    if scratch.other_capture(out, [f for f in (files.xplane, files.trace) if f]):
        for p in scratch.outputs(out):
            if p.name == "logs":  # read by no step, each replaced as its step runs; the
                continue  # per-host pass writes this job's own log there as it runs
            if p.name == scratch.HANDOFF:
                for q in p.iterdir():
                    if q.name != step_cli.LOCK_FILE:
                        q.unlink()
            elif p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink()
        say(f"[{0.0:6.1f} s] {out} held the tables of another capture ({other}): removed")


def body(args):
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    args.files = resolved(args)  # the folder's lock is step_cli.main's (Step.locks)
    start_afresh(args.files, out)
    return run_all(args, out)


def run_all(args, out: Path):
    t0 = time.monotonic()
    failed: dict[str, str] = {}
    todo = steps() + ([JobStep("build_page", PAGE, "page", "the HTML page of the draft",
                               reads_capture=False)] if args.page else [])
    jobs, why = steps_at_once(args)
    if args.step_limit is None:
        mib = capture_bytes(args.files) / 2**20
        args.step_limit = STEP_LIMIT_BASE_S + STEP_LIMIT_PER_MIB_S * mib
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
