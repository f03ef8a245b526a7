"""investigate.py: the whole job in one command. On the bundled example it runs every step, writes
every table, a draft the fact check passes, and ends with where to look; a number changed in the
draft is caught; on every shared capture it runs to the end (the V100 capture without HLO says so in
the trust list); a missing step goes to the trust list and the others still run; unusable input is
one sentence; nothing under the capture is written."""

from __future__ import annotations

import csv
import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, SHARED_CAPTURES, layout_text, read_table
from tracekit import scratch

SCRIPT = REPO / "scripts" / "investigate.py"
FACTCHECK = REPO / "scripts" / "factcheck.py"
EXAMPLE = REPO / "examples" / "minigpt-h100-2gpu-cb"
STEP_LINES = ["step 0", "step 1", "step 4", "step 2", "step 3", "step 5", "step 6", "step 7",
              "report", "fact check"]
# the steps whose tables or hand-offs each step reads: it starts once they have ended (step 4
# runs beside step 1 and waits for its steps.csv on its standard input)
READS = {"step 0": {"step 1"}, "step 1": set(), "step 4": set(),
         "step 2": {"step 0", "step 1", "step 4"}, "step 3": {"step 1"},
         "step 5": {"step 4"}, "step 6": {"step 0", "step 1", "step 2", "step 3", "step 4",
                                          "step 5"},
         "step 7": {"step 0", "step 1", "step 4"}, "report": set(STEP_LINES[:8]),
         "fact check": set(STEP_LINES[:9])}


def schedule(stderr: str) -> tuple[list, int]:
    """The progress lines as (event, label) in order ("start", "end", "done"), and the most steps
    that ran at once; the first line says how many may."""
    events, running, most = [], set(), 0
    for ln in stderr.splitlines():
        m = re.match(r"\[\s*[0-9.]+ s\] (.*)", ln)
        if not m:
            continue
        text = m.group(1)
        end = re.fullmatch(r"(.+) ended \([0-9.]+ s\)", text)
        if end:
            events.append(("end", end.group(1)))
            running.discard(end.group(1))
        elif text == "done":
            events.append(("done", ""))
        elif ": " in text and not text.startswith("up to "):
            label = text.split(":")[0]
            events.append(("start", label))
            running.add(label)
            most = max(most, len(running))
    return events, most


def check_schedule(stderr: str, labels=STEP_LINES) -> None:
    events, most = schedule(stderr)
    at_once = int(re.search(r"up to (\d+) steps? at once", stderr).group(1))
    assert most <= at_once, (most, at_once)
    starts = [lb for e, lb in events if e == "start"]
    assert sorted(starts) == sorted(labels), starts
    assert sorted(lb for e, lb in events if e == "end") == sorted(labels)
    assert events[-1] == ("done", "")
    for label in labels:
        began = events.index(("start", label))
        for dep in READS[label] & set(labels):
            assert events.index(("end", dep)) < began, (label, dep, events)
TABLES = ["capture_info.json", "summary.txt", "skip_stats.json", "rows.csv", "streams.csv",
          "steps.csv", "gaps.csv", "attribution/kernels.csv", "attribution/ops.csv",
          "attribution/lines.csv", "attribution/how.csv", "reconciliation.csv", "reconcile.json",
          "swimlanes.svg", "swimlanes.json", "stragglers.csv", "roofline.csv", "roofline.json",
          "roofline.svg", "changes.csv", "changes.json", "trust.csv", "trust.json",
          "report_draft.md", "factcheck.csv", "factcheck.json"]


def read(path):
    return read_table(path)


def tree_digest(folder: Path) -> dict:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def investigate(capture, out, script=SCRIPT, timeout=600):
    return subprocess.run([sys.executable, "-P", str(script), str(capture), "--out", str(out)],
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    before = tree_digest(EXAMPLE)
    out = tmp_path_factory.mktemp("investigate") / "scratch"
    p = investigate(EXAMPLE, out)
    assert tree_digest(EXAMPLE) == before, "the example capture was modified"
    return p, out


def test_one_step_at_a_time_writes_what_steps_side_by_side_write(example, tmp_path):
    """--jobs 1 runs the steps one by one in the job's order (step 4 then reads a steps.csv
    already there, without waiting): every table and result equals the side-by-side run's."""
    _, out = example
    p = subprocess.run([sys.executable, "-P", str(SCRIPT), str(EXAMPLE), "--out",
                        str(tmp_path / "one"), "--jobs", "1"], capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr
    check_schedule(p.stderr)
    events, most = schedule(p.stderr)
    assert most == 1 and [lb for e, lb in events if e == "start"][:4] == [
        "step 1", "step 4", "step 3", "step 0"], events
    side = out / "logs" / "attribute_kernels.txt"
    assert "--steps-when-told" in side.read_text().splitlines()[0]
    assert "--steps-when-told" not in (tmp_path / "one" / "logs" /
                                       "attribute_kernels.txt").read_text().splitlines()[0]

    def tables(folder):
        return {k: v for k, v in tree_digest(folder).items()
                if not k.startswith(("logs/", ".handoff/", "attribution/xplane/"))
                and k not in ("report_draft.md", "factcheck.csv", "factcheck.json")}
    a, b = tables(out), tables(tmp_path / "one")
    assert a.keys() == b.keys() and len(a) > 20
    timed = {"attribution/attribute_kernels.json", "attribution/summary.txt"}  # its seconds
    assert [k for k in a if a[k] != b[k] and k not in timed] == []
    one, two = (json.loads((f / "attribution" / "attribute_kernels.json").read_text())
                for f in (out, tmp_path / "one"))
    assert one.pop("timing_s").keys() == two.pop("timing_s").keys() and one == two
    one, two = ([ln for ln in (f / "attribution" / "summary.txt").read_text().splitlines()
                 if not ln.startswith("timing:")] for f in (out, tmp_path / "one"))
    assert one == two


def test_the_example_runs_every_step_and_says_where_to_look(example):
    p, out = example
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr
    # progress: each step started and ended once, after the steps it reads, then done
    check_schedule(p.stderr)
    assert "could not run" not in p.stderr
    for name in TABLES:
        assert (out / name).is_file(), name
    assert sorted(x.name for x in (out / "logs").iterdir()) == sorted(
        f"{n}.txt" for n in ("capture_info", "skip_stats", "attribute_kernels", "reconcile",
                             "swimlanes", "roofline", "changes", "trust", "report_draft",
                             "factcheck"))
    # where to look: the verdict line of step 1, the top three changes, the trust count, files
    lines = p.stdout.splitlines()
    summary = (out / "summary.txt").read_text(encoding="utf-8").splitlines()
    assert lines[0] == next(ln.strip() for ln in summary if ln.startswith("verdict"))
    changes = read(out / "changes.csv")
    assert len(changes) >= 3
    for i, r in enumerate(changes[:3], start=1):
        assert lines[i].startswith(f"change {i}: {r['cause']} (saves ")
        assert f"{float(r['saving_us']):,.1f} us" in lines[i] and "inferred, not run" in lines[i]
    # the largest Python line too, when it ranks below the top three (lines rank last)
    line = next((r for r in changes[3:] if r["cause_kind"] == "python_line"), None)
    k = 4
    if line is not None:
        assert lines[4].startswith(f"change {line['rank']}: {line['cause']} (saves ")
        assert lines[4].endswith("; the largest Python line")
        k = 5
    trust = json.loads((out / "trust.json").read_text())
    n = trust["figures"]["items"]["value"]
    assert lines[k].startswith(f"trust list: {n} item")
    assert lines[k + 1] == "fact check of the draft: every figure found in its table"
    assert lines[k + 2].startswith(f"files in {out}: ") and "report_draft.md" in lines[k + 2]
    assert lines[-1].startswith("Next: read ")


def test_the_draft_is_complete_and_passes_the_fact_check(example):
    _, out = example
    fc = json.loads((out / "factcheck.json").read_text())
    assert fc["verdict"] == "pass" and fc["figures"]["ok"] > 100, fc["figures"]
    draft = (out / "report_draft.md").read_text(encoding="utf-8")
    # the spec's sections, both drawings linked, and places left to judge
    for heading in ("## In brief", "## 1. Verdict", "## 2. Reconciliation", "## 5. Changes",
                    "## 6. Where this capture cannot be trusted", "## Appendix"):
        assert heading in draft, heading
    assert "swimlanes.svg" in draft and "roofline.svg" in draft
    assert draft.count("<!-- judge:") >= 8
    first = read(out / "changes.csv")[0]
    sys.path.insert(0, str(REPO / "scripts"))
    from jaxperf.analyses import report_draft
    assert (f"Change 1: {report_draft.md_cell(first['cause'])} (inferred; changes.csv: cause, "
            "rank=1)") in draft


@pytest.mark.parametrize("plant, verdict", [
    ("wrong", "wrong_value"), ("label", "no_label"), ("uncited", "no_table")])
def test_a_planted_error_in_the_draft_is_caught(example, tmp_path, plant, verdict):
    _, out = example
    draft = (out / "report_draft.md").read_text(encoding="utf-8")
    m = re.search(r"(- Step time \(.*?\): )([0-9.,]+) us (\([0-9.,–]+ us\) )\(measured; ", draft)
    assert m
    if plant == "wrong":
        wrong = float(m.group(2).replace(",", "")) + 7
        bad = draft.replace(m.group(0), f"{m.group(1)}{wrong:,.1f} us {m.group(3)}(measured; ", 1)
    elif plant == "label":
        bad = draft.replace(m.group(0), f"{m.group(1)}{m.group(2)} us {m.group(3)}(", 1)
    else:
        bad = draft.replace("## In brief\n", "## In brief\n\nThe step could be 12.5 ms shorter.\n",
                            1)
    report = tmp_path / "report.md"
    report.write_text(bad, encoding="utf-8")
    scratch = tmp_path / "scratch"
    shutil.copytree(out, scratch)
    p = subprocess.run([sys.executable, "-P", str(FACTCHECK), str(report), "--out", str(scratch)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 4, p.stdout + p.stderr
    failing = [r for r in read(scratch / "factcheck.csv") if r["verdict"] != "ok"
               and r["verdict"] != "skipped"]
    assert [r["verdict"] for r in failing] == [verdict], failing


SHARED = ["independent-generator/minigpt-h100-cb-off", "independent-generator/minigpt-h100-cb-on",
          "tracelens-amd-rocm/mi300x-jax0.8-conv3d-8gpu",
          "tracelens-amd-rocm/mi300x-jax0.8-elementwise", "tracelens-amd-rocm/mi300x-jax0.8-gemm",
          "tracelens-amd-rocm/mi355x-jax-te-fused-attn"]


@pytest.mark.parametrize("rel", SHARED)
def test_every_shared_jax_capture_runs_to_the_end(shared, tmp_path, rel):
    cap = SHARED_CAPTURES / rel
    before = tree_digest(cap)
    p = investigate(cap, tmp_path / "scratch")
    assert tree_digest(cap) == before, "the capture folder was modified"
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr and "could not run" not in p.stdout + p.stderr
    fc = json.loads((tmp_path / "scratch" / "factcheck.json").read_text())
    assert fc["verdict"] == "pass", fc["failing"][:5]
    assert p.stdout.startswith("verdict: ")
    assert_no_figure_past_a_limit(tmp_path / "scratch")
    assert_changes_agree(tmp_path / "scratch")
    # the idle between steps takes the knob of its cause: on the conv3d capture the host blocks
    # on each step's result (block_until_ready), so async dispatch comes first, not prefetching
    skip = json.loads((tmp_path / "scratch" / "skip_stats.json").read_text())
    first = read(tmp_path / "scratch" / "changes.csv")[0]
    if skip.get("between_steps", {}).get("cause") == "waiting on a result" and \
            first["cause_kind"] == "idle_between_steps":
        assert first["knob"].startswith("async dispatch: stop blocking"), first["knob"]
    if rel.endswith("conv3d-8gpu"):
        assert first["cause_kind"] == "idle_between_steps" and \
            skip["between_steps"]["cause"] == "waiting on a result"


def assert_changes_agree(out):
    """Changes that agree with each other and with the other tables: no knob told two ways (a
    GEMM backend's direction), no measured target that is the instruction itself, one step
    period in the summary and the changes, and the draft's top kernels kernel_names.csv's top
    rows, in order."""
    rows = read(out / "changes.csv")
    directions = {r["knob"].split(":")[0] for r in rows if r["cause_kind"] == "gemm_backend"}
    assert len(directions) <= 1, directions
    for r in rows:
        if r["cause_kind"] == "instruction":
            assert r["target"] and r["target"] != r["where"].split(" (")[0], r
    period = ((json.loads((out / "skip_stats.json").read_text()).get("figures") or {})
              .get("period_us") or {})
    ch = json.loads((out / "changes.json").read_text())
    if period.get("n") == len(ch["steps"]["used"]):
        # the same figure, to the nanosecond (each from windows written to 3 decimals)
        assert abs(period["value"] - ch["figures"]["step_us"]["value"]) <= 1.5e-3, period
    draft = (out / "report_draft.md").read_text(encoding="utf-8")
    said = next((ln for ln in draft.splitlines() if ln.startswith("- Top kernels by name")), "")
    top = [r["kernel"] for r in read(out / "attribution/kernel_names.csv")[:3] if r["kernel"]]
    shown = re.findall(r"`([^`]+)`", said)
    assert len(shown) == len(top), (said, top)
    assert all(t == s or (s.endswith("…") and t.startswith(s[:-1]))
               for t, s in zip(top, shown, strict=True)), (said, top)


def assert_no_figure_past_a_limit(out):
    """No table cell past its column's declared limit, nothing withheld, and at most 5% of the
    attributed GPU time without FLOPs or bytes."""
    for name in scratch.TABLES:
        rows = scratch.records(out, name) if (out / name).is_file() else None
        cols = scratch.columns(name)
        for r in rows or ():
            assert not scratch.past_limits(name, [r.get(c, "") for c in cols]), (name, r)
    for res in out.rglob("*.json"):
        assert "withheld" not in json.loads(res.read_text()), res
    roof = json.loads((out / "roofline.json").read_text())
    assert roof["figures"]["not_computable_pct_of_attributed"]["value"] <= 5.0


def test_the_v100_capture_without_hlo_runs_to_the_end_and_says_so(shared, tmp_path):
    cap = next((SHARED_CAPTURES / "tf-profiler-demo-v100").glob("*/"))
    before = tree_digest(cap)
    out = tmp_path / "scratch"
    p = investigate(cap, out)
    assert tree_digest(cap) == before
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr
    # step 4 refuses (no HLO); every later step still runs
    assert "could not run: attribute_kernels (exit 1: " in p.stdout
    for name in ("reconcile.json", "roofline.json", "changes.csv", "trust.csv",
                 "report_draft.md", "factcheck.json"):
        assert (out / name).is_file(), name
    kinds = {r["kind"]: r for r in read(out / "trust.csv")}
    assert "no_hlo" in kinds and float(kinds["no_hlo"]["pct_of_device_time"]) == 100.0
    assert "step_failed" in kinds
    assert json.loads((out / "factcheck.json").read_text())["verdict"] == "pass"


def copy_bundle(tmp_path: Path, *folders: str) -> Path:
    """A copy of the bundle's `folders` under tmp_path/bundle, to break one step of it."""
    bundle = tmp_path / "bundle"
    for d in folders:
        shutil.copytree(REPO / d, bundle / d, ignore=shutil.ignore_patterns("__pycache__"))
    return bundle


def test_a_missing_step_goes_to_the_trust_list_and_the_rest_runs(tmp_path):
    """A bundle installed without roofline.py: step 5 is said, the others run."""
    bundle = copy_bundle(tmp_path, "scripts", "analyzing-jax-launch-overhead")
    (bundle / "scripts" / "roofline.py").unlink()
    out = tmp_path / "scratch"
    p = investigate(EXAMPLE, out, script=bundle / "scripts" / "investigate.py")
    assert p.returncode == 0, p.stderr
    assert "roofline could not run: roofline.py is not in this bundle" in p.stderr
    assert not (out / "roofline.csv").exists()
    failed = [r for r in read(out / "trust.csv") if r["kind"] == "step_failed"]
    assert len(failed) == 1 and "roofline" in failed[0]["item"], failed
    assert (out / "changes.csv").is_file() and (out / "report_draft.md").is_file()
    assert json.loads((out / "factcheck.json").read_text())["verdict"] == "pass"


def test_a_step_past_its_time_limit_fails_alone(tmp_path):
    """A bundle whose step 3 never ends (it sleeps), run with --step-limit 3: step 3 is ended
    and goes to the trust list as having run past its limit; every other step runs; the job
    ends; nothing of step 3 is written, and no process of it is left."""
    bundle = copy_bundle(tmp_path, "scripts", "analyzing-jax-launch-overhead",
                         "references")  # references/: step 5's ceilings
    swim = bundle / "scripts" / "swimlanes.py"
    swim.write_text(swim.read_text().replace(
        "def body(args) -> list[str]:\n", "def body(args) -> list[str]:\n"
        "    import time\n    time.sleep(600)\n", 1))
    out = tmp_path / "scratch"
    p = subprocess.run([sys.executable, "-P", str(bundle / "scripts" / "investigate.py"),
                        str(EXAMPLE), "--out", str(out), "--step-limit", "3"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "a step is ended past 3 s" in p.stderr
    assert "swimlanes could not run: exit 124: it ran past its time limit of 3 s " \
           "(--step-limit)" in p.stderr
    assert not (out / "swimlanes.svg").exists() and (out / "changes.csv").is_file()
    failed = [r for r in read(out / "trust.csv") if r["kind"] == "step_failed"]
    assert len(failed) == 1 and "swimlanes" in failed[0]["item"], failed
    assert not [f for f in out.iterdir() if f.name.startswith(".swimlanes")]


def test_sigterm_ends_the_job_and_its_steps_leave_no_temporary_folder(tmp_path):
    """SIGTERM to investigate.py while step 4 works inside its temporary folder (a bundle whose
    step 4 sleeps there): the job forwards it, step 4 unwinds (its temporary folder and XProf's
    child go), the job exits 143 within seconds, and nothing half-written is left."""
    import signal
    import time
    bundle = copy_bundle(tmp_path, "scripts", "analyzing-jax-launch-overhead", "references")
    ak = bundle / "scripts" / "jaxperf" / "analyses" / "attribute_kernels.py"
    ak.write_text(ak.read_text().replace(
        "def write_tables(folder: Path, m: Matched, opts: Options) -> Tables:\n",
        "def write_tables(folder: Path, m: Matched, opts: Options) -> Tables:\n"
        "    (folder / 'kernels.csv').write_text('half')\n"
        "    import time\n    time.sleep(600)\n", 1))
    out = tmp_path / "scratch"
    proc = subprocess.Popen([sys.executable, "-P", str(bundle / "scripts" / "investigate.py"),
                             str(EXAMPLE), "--out", str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not list(out.glob(".attribution.*/kernels.csv")) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert list(out.glob(".attribution.*/kernels.csv")), "step 4 never reached its tables"
    assert "time.sleep(600)" in ak.read_text()  # the patch took
    t = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert time.monotonic() - t < 30 and "Traceback" not in err
    assert not [f.name for f in out.iterdir() if f.name.startswith(".attribution")]
    assert not (out / "attribution").exists()


@pytest.mark.parametrize("what", ["missing", "empty_folder", "not_a_capture"])
def test_unusable_input_is_one_sentence(tmp_path, what):
    if what == "missing":
        cap = tmp_path / "nothing-here"
    elif what == "empty_folder":
        cap = tmp_path / "empty"
        cap.mkdir()
    else:
        cap = tmp_path / "host.trace.json.gz"
        cap.write_bytes(b"not gzip at all")
    p = investigate(cap, tmp_path / "scratch")
    assert p.returncode == 1, p.stdout + p.stderr
    assert "Traceback" not in p.stderr and p.stdout == ""
    said = [ln for ln in p.stderr.splitlines() if not ln.startswith("[")]
    assert len(said) == 1 and said[0].startswith("capture_info: "), said


def test_help_is_the_docstring():
    p = subprocess.run([sys.executable, "-P", str(SCRIPT), "--help"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0 and "Runs each step's own script" in p.stdout
    p = subprocess.run([sys.executable, "-P", str(SCRIPT)], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 2


def test_every_file_written_is_in_the_scratch_layout(example):
    """references/scratch-layout.md's file table names every file the one command writes."""
    _, out = example
    layout = layout_text()
    table = {m.group(1) for m in re.finditer(r"^\| `([^`]+)` \|", layout, re.M)}
    for p in out.rglob("*"):
        if not p.is_file() or "xplane" in p.relative_to(out).parts:
            continue
        rel = str(p.relative_to(out))
        name = ("logs/<script>.txt" if rel.startswith("logs/") else
                ".handoff/<name>.json" if rel.startswith(".handoff/") else
                "attribution/<module>(<id>).hlo.txt" if rel.endswith(".hlo.txt") else rel)
        assert name in table, rel


def test_a_draft_without_step_6_says_so_once(example, tmp_path):
    """Without changes.json the draft says the changes are not available, and the verdict line
    stays the verdict's."""
    _, out = example
    folder = tmp_path / "s"
    shutil.copytree(out, folder)
    (folder / "changes.json").unlink()
    (folder / "changes.csv").unlink()
    p = subprocess.run([sys.executable, "-P", str(REPO / "scripts" / "report_draft.py"),
                        "--out", str(folder)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    draft = (folder / "report_draft.md").read_text(encoding="utf-8")
    assert "- What bounds the step: _Not available" not in draft
    assert draft.count("- What bounds the step: **") == 1
    assert "- Changes: _Not available: `changes.csv` is missing" in draft


DRAFT = REPO / "scripts" / "report_draft.py"


def draft_and_check(folder: Path, report: Path | None = None):
    """report_draft.py then factcheck.py on folder: (draft text, factcheck exit, failing rows)."""
    p = subprocess.run([sys.executable, "-P", str(DRAFT), "--out", str(folder)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    report = report or folder / "report_draft.md"
    text = (folder / "report_draft.md").read_text(encoding="utf-8")
    if report != folder / "report_draft.md":
        report.write_text(text, encoding="utf-8")
    return text, *fact(folder, report)


def fact(folder: Path, report: Path):
    p = subprocess.run([sys.executable, "-P", str(FACTCHECK), str(report), "--out", str(folder)],
                       capture_output=True, text=True, timeout=300)
    failing = [r for r in read(folder / "factcheck.csv")
               if r["verdict"] not in ("ok", "skipped")]
    return p.returncode, failing


def test_every_summary_row_of_the_draft_is_cited_or_no_figure(example, tmp_path):
    """Many failed checks: the draft's appendix lists each with its cited sentence, so the
    draft passes its own check; an uncited 'and N more' row, or a number changed in a listed
    row, fails."""
    _, out = example
    folder = tmp_path / "s"
    shutil.copytree(out, folder)
    with open(folder / "reconciliation.csv", "a", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        for n in range(25):
            w.writerow(["stream_budget", 0, 100 + n, "fail", f"{500 + n}.000", "480.000", "us",
                        "events", "span", f"stream {100 + n} of GPU 0: events cover "
                        f"{500 + n}.000 us of a 480.000 us span"])
    text, rc, failing = draft_and_check(folder)
    assert rc == 0, failing
    listed = [ln for ln in text.splitlines() if "(measured; reconciliation.csv: trust_sentence"
              in ln]
    assert len(listed) == sum(r["status"] != "pass" for r in read(folder / "reconciliation.csv"))
    old = text.replace(listed[-1], listed[-1] + "\n| and 5 more | | | | (reconciliation.csv) |")
    (tmp_path / "old.md").write_text(old, encoding="utf-8")
    rc, failing = fact(folder, tmp_path / "old.md")
    assert rc == 4 and [(r["figure"], r["verdict"]) for r in failing] == [("5", "no_table")]
    (tmp_path / "wrong.md").write_text(text.replace("events cover 501.000 us",
                                                    "events cover 511.000 us"), encoding="utf-8")
    rc, failing = fact(folder, tmp_path / "wrong.md")
    # the quoted sentence no longer matches, and its changed number is no longer covered by it
    assert rc == 4 and sorted((r["verdict"], r["figure"]) for r in failing)[0][0] == "no_table"
    assert {(r["verdict"], r["figure"]) for r in failing if r["verdict"] == "no_table"} == {
        ("no_table", "511.000 us")}
    assert [r["verdict"] for r in failing].count("wrong_value") == 1


def test_a_refused_ranking_is_said_not_answered(example, tmp_path):
    """Where step 6 refuses to rank Python lines, the draft quotes the refusal instead of the
    lines' shares and keeps the instructions it did not refuse; a number changed inside the
    quoted refusal fails."""
    _, out = example
    folder = tmp_path / "s"
    shutil.copytree(out, folder)
    cj = json.loads((folder / "changes.json").read_text())
    sentence = ("cannot rank Python lines because the program ran 2 time(s) on a GPU while "
                "step 1 counts 16 steps")
    cj["refusals"] = [*cj.get("refusals", []), sentence]
    (folder / "changes.json").write_text(json.dumps(cj), encoding="utf-8")
    n = len(cj["refusals"]) - 1
    text, rc, failing = draft_and_check(folder)
    assert rc == 0, failing
    assert "attribution/lines.csv: pct_of_attributed" not in text  # the refused answer
    assert "attribution/ops.csv: pct_of_attributed" in text  # not refused: still there
    assert f"- {sentence} (inferred; changes.json: refusals.{n})" in text
    assert "Python lines: not ranked here. The step that ranks them refused:" in text
    (tmp_path / "wrong.md").write_text(text.replace("counts 16 steps", "counts 15 steps"),
                                       encoding="utf-8")
    rc, failing = fact(folder, tmp_path / "wrong.md")
    # the quoted text no longer matches: its last number is checked against it, and fails
    assert rc == 4 and ("15", "wrong_value") in [(r["figure"], r["verdict"]) for r in failing]


def test_every_program_of_a_real_eager_loop_is_ranked_with_its_program(shared, tmp_path):
    """The MI300X GEMM capture runs a loop of small programs (six of them named jit_dot, each
    with a custom-call.1): step 6 ranks the dispatch between them first and every program's
    instructions, and the draft names the program of each instruction and cites it by
    program_id (the same instruction name in six programs), and passes its check."""
    out = tmp_path / "scratch"
    p = investigate(SHARED_CAPTURES / "tracelens-amd-rocm" / "mi300x-jax0.8-gemm", out)
    assert p.returncode == 0, p.stderr
    changes = json.loads((out / "changes.json").read_text())
    assert not [r for r in changes["refusals"] if r.startswith("cannot rank instructions")]
    assert changes["causes"][0]["cause_kind"] == "dispatch"
    text = (out / "report_draft.md").read_text(encoding="utf-8")
    assert "| 49 | `jit_dot` | `custom-call.1` |" in text
    assert "(measured; attribution/ops.csv: device_us, program_id=*, instruction=*3)" in text
    assert json.loads((out / "factcheck.json").read_text())["verdict"] == "pass"


def test_the_printout_cuts_long_names_and_the_tables_keep_them(example, tmp_path):
    """A kernel name of 800 characters (with spaces, as a demangled name has) in change 1's cause
    is printed cut to MAX_NAME_CHARS; changes.csv and kernel_names.csv keep it whole."""
    _, out = example
    folder = tmp_path / "s"
    shutil.copytree(out, folder)
    sys.path.insert(0, str(REPO / "scripts"))
    import investigate as inv
    name = "void gemm<" + ", ".join(f"Tile{n}" for n in range(130)) + ">(float*)"
    assert len(name) > 800
    tensile = "Cijk_Alik_Bljk_" + "_".join(f"MT{n}x{n}" for n in range(120))
    rows = read(folder / "changes.csv")
    rows[0]["cause"] = f"{name} 12.0 us and {tensile} 3.0 us"
    with open(folder / "changes.csv", "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    kn = read(folder / "attribution" / "kernel_names.csv")
    kn[0]["kernel"] = name
    with open(folder / "attribution" / "kernel_names.csv", "w", newline="",
              encoding="utf-8") as fh:
        w = csv.DictWriter(fh, list(kn[0]))
        w.writeheader()
        w.writerows(kn)
    lines = inv.where_to_look(folder, {}, 0)
    change1 = next(ln for ln in lines if ln.startswith("change 1: "))
    assert name not in change1 and tensile not in change1
    assert f"{inv.short_name(name)} 12.0 us and {inv.short_name(tensile)} 3.0 us" in change1
    assert len(inv.short_name(name)) == inv.MAX_NAME_CHARS == 100
    assert inv.short_name(name).startswith("void gemm<Tile0") and name.endswith(
        inv.short_name(name).split("…")[1])
    assert read(folder / "changes.csv")[0]["cause"].startswith(name)  # the table: whole
    assert str(folder) in lines[-1]  # a path is printed whole


def test_one_capture_per_scratch_folder(tmp_path):
    """A scratch folder holds one capture's tables: a step of another capture refuses it in one
    sentence (nothing written); investigate.py on another capture empties it first and says so;
    a second investigate.py into a folder one is writing into is refused."""
    import time

    from capgen.generate import generate
    from capgen.scenarios import SCENARIOS
    other = generate(SCENARIOS["rocm-8gpu-straggler"], tmp_path / "other").run_dir
    out = tmp_path / "scratch"
    assert investigate(EXAMPLE, out).returncode == 0
    before = tree_digest(out)
    p = subprocess.run([sys.executable, "-P", str(REPO / "analyzing-jax-launch-overhead" /
                                                  "scripts" / "skip_stats.py"), str(other),
                        "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert p.returncode == 1 and "holds the tables of another capture" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and tree_digest(out) == before
    p = investigate(other, out)
    assert p.returncode == 0, p.stderr
    assert "held the tables of another capture" in p.stderr
    info = json.loads((out / "capture_info.json").read_text())
    assert info["capture"]["run_dir"] == str(other)
    assert json.loads((out / "factcheck.json").read_text())["verdict"] == "pass"
    # two at once: the second is refused while the first holds the folder
    first = subprocess.Popen([sys.executable, "-P", str(SCRIPT), str(other), "--out", str(out)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    lock = out / ".handoff" / "writer.lock"
    deadline = time.monotonic() + 60
    while not lock.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    second = investigate(other, out)
    first.wait(timeout=600)
    assert second.returncode == 1, second.stderr
    assert "another investigate.py or compare.py is writing into" in second.stderr
    assert first.returncode == 0 and not lock.exists()


def test_links_planted_in_the_scratch_folder_are_replaced_not_followed(tmp_path):
    """`--out/logs`, `--out/.handoff` and a log file planted as symbolic links to elsewhere: the
    job replaces them with its own folder and files; nothing is written where they pointed."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("mine")
    out = tmp_path / "scratch"
    out.mkdir()
    (out / "logs").symlink_to(elsewhere, target_is_directory=True)
    (out / ".handoff").symlink_to(elsewhere, target_is_directory=True)
    p = investigate(EXAMPLE, out)
    assert p.returncode == 0, p.stderr
    assert sorted(f.name for f in elsewhere.iterdir()) == ["keep.txt"]
    assert not (out / "logs").is_symlink() and (out / "logs" / "skip_stats.txt").is_file()
    assert not (out / ".handoff").is_symlink()


def test_a_step_that_fails_takes_its_earlier_tables_with_it(tmp_path):
    """A job into a folder holding a finished job of the same capture, with step 5 now failing
    (its script exits 1): roofline.csv, roofline.json and roofline.svg of the first job are
    removed, said, and the trust list carries step 5; nothing reads them as this job's. Step 5
    run alone and refusing keeps them (test_attribute_kernels: a failed run leaves the previous
    tables whole)."""
    out = tmp_path / "scratch"
    assert investigate(EXAMPLE, out).returncode == 0
    assert (out / "roofline.csv").is_file() and (out / "roofline.svg").is_file()
    bundle = copy_bundle(tmp_path, "scripts", "analyzing-jax-launch-overhead", "references")
    (bundle / "scripts" / "roofline.py").write_text(
        "import sys\nsys.exit('roofline: this step is broken on purpose')\n")
    p = investigate(EXAMPLE, out, script=bundle / "scripts" / "investigate.py")
    assert p.returncode == 0, p.stderr
    assert ("roofline could not run: exit 1: roofline: this step is broken on purpose (the 3 "
            "file(s) it wrote before are removed)") in p.stderr
    assert not any(out.glob("roofline.*"))
    failed = [r for r in read(out / "trust.csv") if r["kind"] == "step_failed"]
    assert len(failed) == 1 and "roofline" in failed[0]["item"], failed
    assert json.loads((out / "factcheck.json").read_text())["verdict"] == "pass"


def test_a_modern_model_ranks_attention_then_the_gemm_backend(shared, tmp_path):
    """The real MI355X Transformer Engine capture: the two backward fused-attention calls rank
    first, the four each with their share of the bf16 ceiling, an attention knob (no
    fp8-for-everything) and no measured target (nothing else here does their work); the GEMM
    backend, one direction only, is set against the library GEMM's 35.0% measured in the same
    capture, the Triton GEMMs counted with their split-K reductions (603.6 us for the best
    against the library's 584.6 us); every measured saving lies within its ceiling saving."""
    out = tmp_path / "scratch"
    p = investigate(SHARED_CAPTURES / "tracelens-amd-rocm/mi355x-jax-te-fused-attn", out)
    assert p.returncode == 0, p.stderr
    with open(out / "changes.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    attn = [r for r in rows if r["cause_kind"] == "instruction"
            and r["where"].startswith("te_fused_attn")]
    assert len(attn) == 4 and attn[:2] == rows[:2]
    assert all("backward" in r["where"] for r in rows[:2])
    assert all("fused-attention implementation" in r["knob"] and "fp8 on the matrix" not in
               r["knob"] for r in attn)
    assert all(re.search(r"at [67]\.\d% of its compute ceiling on MI355X", r["cause"])
               for r in attn)
    assert all(r["target"] == "no measured target in this capture" and not
               r["saving_measured_us"] for r in attn)
    backends = [r for r in rows if r["cause_kind"] == "gemm_backend"]
    assert len(backends) == 1 and backends[0] in rows[:5]
    backend = backends[0]
    assert "library GEMM custom-call.1" in backend["cause"] and "at 35.0%" in backend["cause"]
    assert "triton GEMMs gemm_fusion_dot" in backend["cause"]
    assert "counted with their split-K reductions" in backend["cause"]
    assert backend["target"] == "custom-call.1" and "to the library" in backend["knob"]
    assert backend["saving_measured_us"] == backend["saving_us"]
    for r in rows:
        if r["saving_measured_us"]:
            assert float(r["saving_measured_us"]) <= float(r["saving_us"])
    fc = json.loads((out / "factcheck.json").read_text())
    assert fc["verdict"] == "pass", fc["failing"][:5]
    # XLA's own split-K, found from the program (the reductions' kernels are plain fusions)
    with open(out / "attribution" / "families.csv", newline="") as fh:
        fam = {r["family"]: r for r in csv.DictReader(fh)}
    assert fam["split-K reduction"]["instructions"] == "5"
    assert 7.0 < float(fam["split-K reduction"]["pct_of_device_time"]) < 7.2
    assert any(r["cause_kind"] == "kernel_family" and r["where"].startswith("split-K")
               for r in rows)
    # what the program is: loss and gradients, no update; the GPU and the profiler's start-up
    with open(out / "attribution" / "phases.csv", newline="") as fh:
        ph = {r["phase"]: r for r in csv.DictReader(fh)}
    assert (ph["forward"]["instructions"], ph["backward"]["instructions"]) == ("11", "9")
    assert ph["optimizer"]["device_us"] == "0.000"
    assert ph["optimizer"]["sentence"].startswith("no optimizer update in these programs")
    with open(out / "attribution" / "ops.csv", newline="") as fh:
        ops = list(csv.DictReader(fh))
    assert sum(float(r["device_us"]) for r in ops) == pytest.approx(
        sum(float(r["device_us"]) for r in ph.values()), abs=0.01)
    assert {r["phase"] for r in ops if "te_fused_attn_backward" in r["instruction"]} == {
        "backward"}
    info = json.loads((out / "capture_info.json").read_text())
    assert info["gpu_model"]["model"] == "MI355X"
    assert info["profiler"]["start_trace_ms"] / info["profile_ms"] > 0.99
    assert 10 < info["profiler"]["between_ms"] < 20
    draft = (out / "report_draft.md").read_text()
    assert " on `MI355X`: " in draft.splitlines()[0]
    assert "no optimizer update in these programs" in draft


def test_the_capture_is_resolved_once_for_the_whole_job(tmp_path):
    """A log folder of two runs: the job resolves it once (the newest run, said once and kept
    in capture_info.json), and every step that reads the capture is given the same file."""
    logs = tmp_path / "logs" / "plugins" / "profile"
    run = next((EXAMPLE / "plugins" / "profile").iterdir())
    for name in ("2026_01_01_00_00_00", "2026_02_01_00_00_00"):
        shutil.copytree(run, logs / name)
    out = tmp_path / "scratch"
    p = investigate(tmp_path / "logs", out)
    assert p.returncode == 0, p.stderr
    assert p.stderr.count("took the newest, 2026_02_01_00_00_00") == 1, p.stderr
    notes = json.loads((out / "capture_info.json").read_text())["capture"]["notes"]
    assert any("took the newest, 2026_02_01_00_00_00" in n for n in notes), notes
    given = {}
    for log in (out / "logs").glob("*.txt"):
        cmd = log.read_text().splitlines()[0].split()
        named = [a for a in cmd if a.endswith((".xplane.pb", ".trace.json.gz"))]
        if named:
            given[log.stem] = named
    assert len(given) >= 6 and len({tuple(v) for v in given.values()}) == 1, given
    assert "2026_02_01_00_00_00" in next(iter(given.values()))[0]
