"""factcheck.py: a report citing real values of a generated capture's scratch folder passes; planted
wrong numbers, missing labels, wrong tables and uncited numbers are caught; units, rounding,
ranges, Markdown tables, skipped identifiers, hand-made changes.csv / trust.csv, and bad input."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from decimal import ROUND_HALF_EVEN, ROUND_HALF_UP, Decimal
from pathlib import Path
from statistics import median

import pytest

from capgen.generate import generate
from capgen.scenarios import SCENARIOS
from conftest import REPO, scale_step_durations

SCRIPT = REPO / "scripts" / "factcheck.py"
TEMPLATE = REPO / "references" / "report-template.md"
STEPS = [REPO / "analyzing-jax-launch-overhead" / "scripts" / "skip_stats.py",
         REPO / "scripts" / "attribute_kernels.py",
         REPO / "scripts" / "reconcile.py",
         REPO / "scripts" / "swimlanes.py",
         REPO / "scripts" / "roofline.py"]
BARE = getattr(sys, "_base_executable", sys.executable)
FAILING = {"wrong_value", "no_label", "no_table"}


def read(path):
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def r(value, decimals: int) -> str:
    """A table value rounded as a report writes it (half up), with thousands separators."""
    q = Decimal(value).quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_HALF_UP)
    return f"{q:,.{decimals}f}"


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    """Steps 1-5 on the 8-GPU straggler scenario: a scratch folder with ranges across GPUs."""
    base = tmp_path_factory.mktemp("factcheck")
    generate(SCENARIOS["rocm-8gpu-straggler"], base / "capture")
    out = base / "out"
    for step in STEPS:
        p = subprocess.run([sys.executable, "-P", str(step), str(base / "capture"), "--out",
                            str(out)], capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, (step.name, p.stderr)
    return out


def check(report_text, out, tmp_path, name="report.md"):
    report = tmp_path / name
    report.write_text(report_text, encoding="utf-8")
    p = subprocess.run([BARE, "-I", "-S", "-P", str(SCRIPT), str(report), "--out", str(out)],
                       capture_output=True, text=True, timeout=300)
    rows = read(out / "factcheck.csv") if (out / "factcheck.csv").is_file() else []
    return p, rows


def by_figure(rows, figure):
    hits = [x for x in rows if x["figure"] == figure]
    assert hits, (figure, [x["figure"] for x in rows])
    return hits


def values(out):
    """The figures the test report quotes, computed here from the tables."""
    steps = read(out / "steps.csv")
    dur = [Decimal(x["dur_us"]) for x in steps]
    ms = Decimal(1000)
    ops = read(out / "attribution" / "ops.csv")
    how = read(out / "attribution" / "how.csv")
    skip = json.loads((out / "skip_stats.json").read_text())
    roof = json.loads((out / "roofline.json").read_text())
    lanes = json.loads((out / "swimlanes.json").read_text())
    step1 = {x["device"]: x for x in steps if x["step"] == "1"}
    exact = next(x for x in how if x["program_id"] != "all" and x["match"] == "exact")
    return {
        "med": r(median(dur) / ms, 2), "lo": r(min(dur) / ms, 2), "hi": r(max(dur) / ms, 2),
        "med_us3": r(median(dur), 3), "med_us0": r(median(dur), 0),
        "host": r(skip["figures"]["host_share_pct_of_step"]["value"], 1),
        "verdict": skip["verdict"],
        "top_op": ops[0]["instruction"], "top_ms": r(Decimal(ops[0]["device_us"]) / ms, 1),
        "top_pct": r(ops[0]["pct_of_attributed"], 2), "prog": exact["program_id"],
        "exact_kernels": r(exact["kernels"], 0), "exact_pct": r(exact["pct_of_group"], 1),
        "mem_gib": r(Decimal(roof["gpu"]["evidence"]["memory_size_bytes"]) / 2 ** 30, 1),
        "hbm_tbs": r(Decimal(str(roof["ceilings"][1]["value"])) / 10 ** 12, 2),
        "lag": r(lanes["straggler"]["lag_us"]["value"], 1),
        "k5": step1["5"]["kernels"],
        "d": {dev: r(Decimal(x["dur_us"]) / ms, 3) for dev, x in step1.items()},
        "steps": steps,
    }


def good_report(v) -> str:
    d = v["d"]
    table = "\n".join(f"| {dev} | {d[dev]} | {v['k5'] if dev == '5' else ''} |"
                      for dev in sorted(d, key=int))
    return f"""# Report

## 1. Verdict and causes
The step is {v['verdict']} (inferred; skip_stats.json: verdict). The median step takes
{v['med']} ms ({v['lo']}–{v['hi']} ms) (measured; steps.csv: dur_us, median) across steps and GPUs,
that is {v['med_us3']} us (measured; steps.csv: dur_us, median) or
**{v['med_us0']} µs** (measured; steps.csv: dur_us, median).
Host share {v['host']}% (inferred; skip_stats.json: figures.host_share_pct_of_step.value).
GPU 5 finishes step 1 last by {v['lag']} us of step 1's end (measured; swimlanes.json:
straggler.lag_us) before the host dispatches step n+1, in
steps 0–3 of GPUs 0, 1 and 7; see `fusion.12`, `--step 3`, `64 GPUs`, minigpt.py:84 and
jit_train_step(17). Change 6 and change 7 act on the same gaps.
<!-- judge: 12.5 ms is not a figure, this comment is ignored -->

```
python3 -P scripts/swimlanes.py cap --step 2   # 42 ms in a code block: ignored
```

## Top ops
{v['top_op']} takes {v['top_ms']} ms (measured; attribution/ops.csv: device_us,
instruction={v['top_op']}),
{v['top_pct']}% (inferred; attribution/ops.csv: pct_of_attributed, instruction={v['top_op']}).
Exact matches: {v['exact_kernels']} kernels (measured; attribution/how.csv: kernels,
program_id={v['prog']}, match=exact), {v['exact_pct']}% of GPU time
(inferred; attribution/how.csv: pct_of_group, program_id={v['prog']}, match=exact).
The GPU has {v['mem_gib']} GiB (read; roofline.json: gpu.evidence.memory_size_bytes) and
{v['hbm_tbs']} TB/s (read; roofline.json: ceilings.1.value).

| GPU | step 1 (ms) (measured; steps.csv: dur_us, step=1, device=*) | kernels |
|---|---|---|
{table.replace(f"| {v['k5']} |", f"| {v['k5']} (measured; steps.csv: kernels, step=1, device=5) |")}
"""


def test_a_report_of_real_values_passes(scratch, tmp_path):
    v = values(scratch)
    p, rows = check(good_report(v), scratch, tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    bad = [x for x in rows if x["verdict"] in FAILING]
    assert bad == []
    ok = [x for x in rows if x["verdict"] == "ok"]
    # 3 step medians (range one), host, lag, verdict, 2 top op, 2 exact, GiB, TB/s, 8 cells + 1
    assert len(ok) == 3 + 1 + 1 + 1 + 2 + 2 + 2 + len(v["d"]) + 1
    med = by_figure(rows, f"{v['med']} ms ({v['lo']}–{v['hi']} ms)")[0]
    assert med["verdict"] == "ok" and med["table"] == "steps.csv"
    assert med["selector"] == "dur_us, median" and med["label"] == "measured"
    assert med["found_value"].startswith(v["med"][:3]) and "min" in med["found_value"]
    assert by_figure(rows, v["verdict"])[0]["verdict"] == "ok"  # a word cited: its text
    gib = by_figure(rows, f"{v['mem_gib']} GiB")[0]
    assert gib["verdict"] == "ok" and gib["found_value"].endswith(" GiB")
    cell = [x for x in rows if x["selector"] == "dur_us, step=1, device=5"]
    assert len(cell) == 1 and cell[0]["verdict"] == "ok" and cell[0]["figure"] == v["d"]["5"]
    # not figures: skipped with the reason, never failed
    skipped = {(x["figure"], x["why"]) for x in rows if x["verdict"] == "skipped"}
    assert ("64", "inside backticks") in skipped
    assert not [x for x in rows if x["figure"] == "12"]  # fusion.12 is a name, not a number
    assert ("3", "inside backticks") in skipped  # --step 3
    assert ("5", "an identifier after 'GPU'") in skipped
    assert ("1", "an identifier after 'step'") in skipped
    assert ("0–3", "an identifier after 'steps'") in skipped
    assert ("7", "an identifier after 'GPUs'") in skipped
    assert ("6", "an identifier after 'Change'") in skipped
    assert ("7", "an identifier after 'change'") in skipped
    assert ("1", "an index expression (n+1)") in skipped
    assert ("84", "file:line or a name's number") in skipped
    assert ("17", "a program id in name(id)") in skipped
    assert ("1.", "a section number") in skipped
    assert ("0", "the row key (the column headers' key=* filter)") in skipped
    # HTML comments and fenced code are not read
    ignored = {i for i, ln in enumerate(good_report(v).splitlines(), 1)
               if "<!--" in ln or "```" in ln or "42 ms" in ln}
    assert len(ignored) == 4 and not [x for x in rows if int(x["line"]) in ignored]
    res = json.loads((scratch / "factcheck.json").read_text())
    assert res["step"] == "factcheck" and res["verdict"] == "pass" and res["failing"] == []
    assert res["figures"]["ok"] == len(ok)
    assert res["figures"]["skipped"] == len(rows) - len(ok)
    assert p.stdout.splitlines()[-1].startswith("Next:")


def test_planted_errors_are_caught(scratch, tmp_path):
    v = values(scratch)
    wrong = r(Decimal(v["med"].replace(",", "")) * Decimal("1.1"), 2)
    text = good_report(v) + f"""
## Planted
Wrong value: {wrong} ms (measured; steps.csv: dur_us, median).
No label: {v['med']} ms (steps.csv: dur_us, median).
Bad label: {v['med']} ms (guessed; steps.csv: dur_us, median).
Label the table contradicts: {v['host']}% (measured;
skip_stats.json: figures.host_share_pct_of_step).
Table without it: {v['top_ms']} ms (measured; steps.csv: device_us, instruction={v['top_op']}).
Missing file: {v['med']} ms (measured; changes.csv: step_us).
No row: {v['med']} ms (measured; steps.csv: dur_us, device=99).
Several rows: {v['med']} ms (measured; steps.csv: dur_us, device=5).
Bad path: {v['host']}% (inferred; skip_stats.json: figures.nothing_pct).
Uncited: the median step takes {v['med']} ms.
Label only: {v['med']} ms (measured).
Wrong unit: {v['med']} ms (inferred; steps.csv: idle_pct_of_step, step=1, device=5).
Wrong max: {v['med']} ms ({v['lo']}–{v['lo']} ms) (measured; steps.csv: dur_us, median).
Wrong word: the step is compute-starved (inferred; skip_stats.json: verdict).
"""
    p, rows = check(text, scratch, tmp_path)
    assert p.returncode == 4, p.stdout + p.stderr
    lines = text.splitlines()

    def row(prefix):
        no = next(i for i, ln in enumerate(lines, 1) if ln.startswith(prefix))
        hits = [x for x in rows if int(x["line"]) == no and x["verdict"] != "skipped"]
        assert len(hits) == 1, (prefix, hits)
        return hits[0]

    assert row("Wrong value:")["verdict"] == "wrong_value"
    assert row("Wrong value:")["found_value"].startswith(v["med"][:3])
    assert row("No label:")["verdict"] == "no_label"
    assert row("Bad label:")["verdict"] == "no_label"
    contradicted = row("Label the table contradicts:")
    assert contradicted["verdict"] == "no_label" and "inferred" in contradicted["why"]
    assert row("Table without it:")["verdict"] == "no_table"
    assert "no column device_us" in row("Table without it:")["why"]
    assert row("Missing file:")["verdict"] == "no_table"
    assert "no row" in row("No row:")["why"]
    several = row("Several rows:")
    assert several["verdict"] == "no_table" and "no aggregate" in several["why"]
    assert row("Bad path:")["verdict"] == "no_table"
    assert row("Uncited:")["verdict"] == "no_table" and row("Uncited:")["table"] == ""
    assert row("Label only:")["verdict"] == "no_table"
    unit = row("Wrong unit:")
    assert unit["verdict"] == "wrong_value" and "unit" in unit["why"]
    rng = row("Wrong max:")
    assert rng["verdict"] == "wrong_value" and rng["why"].startswith("max:")
    assert row("Wrong word:")["verdict"] == "wrong_value"
    assert sum(1 for x in rows if x["verdict"] in FAILING) == 14
    out = p.stdout.splitlines()
    assert "4 wrong_value, 3 no_label, 7 no_table" in out[2]
    wrong_line = next(i for i, ln in enumerate(lines, 1) if ln.startswith("Wrong value:"))
    assert f"line {wrong_line}: {wrong} ms: wrong_value: the table gives " in p.stdout
    assert out[-1].startswith("Next:")
    res = json.loads((scratch / "factcheck.json").read_text())
    assert res["verdict"] == "fail" and len(res["failing"]) == 14
    assert res["figures"]["no_table"] == 7 and res["figures"]["no_label"] == 3
    assert res["figures"]["wrong_value"] == 4


def test_units_and_rounding(scratch, tmp_path):
    v = values(scratch)
    steps = v["steps"]
    one = next(x for x in steps if x["step"] == "2" and x["device"] == "3")
    dur, idle = Decimal(one["dur_us"]), Decimal(one["idle_pct_of_step"])
    skip = json.loads((scratch / "skip_stats.json").read_text())
    margin = r(Decimal(str(skip["straggler"]["margin_us"]["pct_of_step"])), 1)
    sel = "step=2, device=3"
    ok_lines = [
        f"{r(dur / 1000, 3)} ms (measured; steps.csv: dur_us, {sel})",
        f"{r(dur / 1000, 1)} ms (measured; steps.csv: dur_us, {sel})",  # fewer decimals
        f"{r(dur / 10 ** 6, 4)} s (measured; steps.csv: dur_us, {sel})",
        f"{r(dur * 1000, 0)} ns (measured; steps.csv: dur_us, {sel})",
        f"{r(dur, 0)}us (measured; steps.csv: dur_us, {sel})",
        f"{r(dur, 3).replace(',', '')} (measured; steps.csv: dur_us, {sel})",  # as in the table
        f"{r(idle, 1)}% (measured; steps.csv: idle_pct_of_step, {sel})",
        f"<{r(idle + 1, 0)}% (measured; steps.csv: idle_pct_of_step, {sel})",
        f"{r(Decimal(206141652992) / 10 ** 9, 1)} GB (read; roofline.json: "
        "gpu.evidence.memory_size_bytes)",
        # a share beside a figure's value is a percentage, not the figure's unit (us)
        f"{margin}% (inferred; skip_stats.json: straggler.margin_us.pct_of_step)",
    ]
    bad_lines = [
        f"{r(dur / 1000 + Decimal('0.001'), 3)} ms (measured; steps.csv: dur_us, {sel})",
        f"{r(dur / 1000, 3)} us (measured; steps.csv: dur_us, {sel})",  # unit wrong
        f">{r(idle + 1, 0)}% (measured; steps.csv: idle_pct_of_step, {sel})",
        f"{r(idle, 1)} ms (measured; steps.csv: idle_pct_of_step, {sel})",
    ]
    mem = json.loads((scratch / "roofline.json").read_text())["gpu"]["evidence"]
    assert mem["memory_size_bytes"] == 206141652992  # what the ok GB line quotes
    text = "\n\n".join(ok_lines + bad_lines) + "\n"
    p, rows = check(text, scratch, tmp_path)
    assert p.returncode == 4
    checked = [x for x in rows if x["verdict"] != "skipped"]
    assert [x["verdict"] for x in checked] == ["ok"] * len(ok_lines) + ["wrong_value"] * len(
        bad_lines), checked
    # the table's value in the written unit, three decimals more than written
    shown = f"{(dur / 1000).quantize(Decimal('0.0001'), rounding=ROUND_HALF_EVEN):f}"
    assert checked[1]["found_value"] == shown.rstrip("0").rstrip(".") + " ms"
    assert "a time" in checked[-1]["why"] and "pct" in checked[-1]["why"]


def test_changes_and_trust_tables(tmp_path):
    out = tmp_path / "scratch"
    out.mkdir()
    cols = ["rank", "cause_kind", "cause", "where", "pct_of_step", "step_us", "saving_us",
            "saving_min_us", "saving_max_us", "step_if_gone_us", "assumptions", "knob", "label",
            "source"]
    (out / "changes.csv").write_text(
        ",".join(cols) + "\n"
        '1,host_gap,"The host launches late, one kernel at a time",GPU 0 stream 13,38.24,'
        '8072.466,3086.912,2950.100,3201.555,4985.554,"host idle removed, same kernels",'
        'command buffers on,"inferred, not run",gaps.csv; steps.csv\n'
        "2,memcpy,Argument copies,GPU 0 stream 15,0.08,8072.466,6.097,6.000,6.200,8066.369,"
        'copies overlap,donate_argnums,"inferred, not run",rows.csv\n', encoding="utf-8")
    (out / "changes.json").write_text(json.dumps({"step": "changes", "figures": {
        "combined_saving_us": {"value": 3093.009, "unit": "us", "label": "inferred"}}}))
    tcols = ["section", "item", "kind", "count", "device_us", "pct_of_device_time", "source",
             "detail"]
    (out / "trust.csv").write_text(
        ",".join(tcols) + "\n"
        "trust,Kernels with no instruction,unattributed,32,524.100,0.24,attribution/how.csv,\n"
        'trust,"Graph kernels, under-recorded",under_recorded_replays,7,,,reconciliation.csv,\n'
        "needs_new_capture,What the host does inside a launch,open_question,,,,,"
        "a capture with the Python tracer off\n", encoding="utf-8")
    text = """# Changes
The host gap costs 38.2% of the step (inferred, not run; changes.csv: pct_of_step, rank=1);
without it the step would take 4.99 ms (inferred, not run; changes.csv: step_if_gone_us, rank=1),
a saving of 3.09 ms (2.95–3.20 ms) (inferred, not run; changes.csv: saving_us, rank=1).
Knob: donate_argnums (inferred, not run; changes.csv: knob, rank=2).
Together at most 3.1 ms (inferred; changes.json: figures.combined_saving_us).

| rank | cause | share (%) (inferred, not run; changes.csv: pct_of_step, rank=*) |
|---|---|---|
| 1 | host gap | 38.24 |
| 2 | copies | 0.1 |

# Trust
- 32 kernels (measured; trust.csv: count, kind=unattributed), 0.24% of GPU time
  (inferred; trust.csv: pct_of_device_time, kind=unattributed), 0.52 ms (measured;
  trust.csv: device_us, kind=unattributed).
- 7 replays (measured; trust.csv: count, item="Graph kernels, under-recorded").
- Planted: 38.2% (measured; changes.csv: pct_of_step, rank=1).
- Planted: 0.25% (inferred; trust.csv: pct_of_device_time, kind=unattributed).
- Planted: 5 (inferred; trust.csv: pct_of_device_time, section=trust).
"""
    p, rows = check(text, out, tmp_path)
    assert p.returncode == 4, p.stdout + p.stderr
    checked = [x for x in rows if x["verdict"] != "skipped"]
    verdicts = [(x["figure"], x["verdict"]) for x in checked]
    assert verdicts == [
        ("38.2%", "ok"), ("4.99 ms", "ok"), ("3.09 ms (2.95–3.20 ms)", "ok"),
        ("donate_argnums", "ok"), ("3.1 ms", "ok"), ("38.24", "ok"), ("0.1", "ok"),
        ("32", "ok"), ("0.24%", "ok"), ("0.52 ms", "ok"), ("7", "ok"),
        ("38.2%", "no_label"), ("0.25%", "wrong_value"), ("5", "no_table")], verdicts
    assert checked[0]["label"] == "inferred" and checked[0]["table"] == "changes.csv"
    assert "min 2.95" in checked[2]["found_value"] and "max 3.201" in checked[2]["found_value"]
    assert "inferred" in checked[11]["why"]
    assert "2 rows" in checked[13]["why"]
    rank_keys = [x for x in rows if x["why"].startswith("the row key")]
    assert [x["figure"] for x in rank_keys] == ["1", "2"]


def test_bad_input(tmp_path):
    out = tmp_path / "scratch"
    out.mkdir()
    p = subprocess.run([BARE, "-I", "-S", "-P", str(SCRIPT), str(tmp_path / "none.md"),
                        "--out", str(out)], capture_output=True, text=True)
    assert p.returncode == 1 and len(p.stderr.strip().splitlines()) == 1
    assert "Traceback" not in p.stderr and "does not exist" in p.stderr
    report = tmp_path / "r.md"
    report.write_text("12 ms (measured; steps.csv: dur_us)\n")
    p = subprocess.run([BARE, "-I", "-S", "-P", str(SCRIPT), str(report), "--out",
                        str(tmp_path / "nowhere")], capture_output=True, text=True)
    assert p.returncode == 1 and "scratch folder" in p.stderr
    assert not (tmp_path / "nowhere").exists()
    report.write_bytes(b"\xff\xfe 12 ms")
    p = subprocess.run([BARE, "-I", "-S", "-P", str(SCRIPT), str(report), "--out", str(out)],
                       capture_output=True, text=True)
    assert p.returncode == 1 and "UTF-8" in p.stderr
    p = subprocess.run([BARE, "-I", "-S", "-P", str(SCRIPT)], capture_output=True, text=True)
    assert p.returncode == 2


def test_template_citations_parse():
    sys.path.insert(0, str(REPO / "scripts"))
    from jaxperf.analyses import factcheck

    text = TEMPLATE.read_text(encoding="utf-8")
    lines = text.splitlines()
    # a short template: the sections, the citation rules and examples (160: with "Before and
    # after", issue 25)
    assert len(lines) < 160 and lines[2].startswith("Read this when")
    examples = [ln for ln in lines if ln.startswith("- `") and "; " in ln]
    assert len(examples) >= 8
    for ln in examples:
        quoted = ln.split("`")[1]
        cites = factcheck.find_citations(quoted)
        assert len(cites) == 1, quoted
        ok, _, label = factcheck.check_label(cites[0])
        assert ok and label in factcheck.LABELS, quoted
        assert cites[0].table.endswith((".csv", ".json")) and cites[0].selector
    for section in ("## In brief", "## Verdict and causes", "## Reconciliation",
                    "## Per GPU and stream", "## Top ops and Python lines", "## Changes",
                    "## Trust list"):
        assert section in text
    order = [text.index(s) for s in ("## In brief", "## Verdict", "## Reconciliation",
                                     "## Per GPU", "## Top ops", "## Changes", "## Trust")]
    assert order == sorted(order)
    assert "swimlanes.svg" in text and "roofline.svg" in text and "<!-- judge:" in text


def test_the_template_follows_its_own_rules(tmp_path):
    """Outside its fenced skeleton every number of the template is a non-figure (backticks,
    identifiers) or an example in backticks: checked as a report it has nothing to fail, and
    nothing checked, which is no pass (exit 4, verdict fail, no failing figure)."""
    out = tmp_path / "scratch"
    out.mkdir()
    p = subprocess.run([BARE, "-I", "-S", "-P", str(SCRIPT), str(TEMPLATE), "--out", str(out)],
                       capture_output=True, text=True)
    assert p.returncode == 4, p.stdout
    result = json.loads((out / "factcheck.json").read_text())
    assert result["verdict"] == "fail" and result["failing"] == []
    rows = read(out / "factcheck.csv")
    assert rows and {x["verdict"] for x in rows} == {"skipped"}
    assert "no cited figure" in p.stdout and p.stdout.splitlines()[-1].startswith("Next: cite")


def test_template_examples_check_against_a_scratch_folder(scratch, tmp_path):
    """The template's examples that name columns of steps 1-5 hold on a real scratch folder
    once their numbers are the folder's: the format the template teaches is the one checked."""
    v = values(scratch)
    text = (f"A {v['med']} ms ({v['lo']}–{v['hi']} ms) (measured; steps.csv: dur_us, median)\n\n"
            f"B {v['host']}% (inferred; skip_stats.json: figures.host_share_pct_of_step)\n\n"
            f"C {v['hbm_tbs']} TB/s (read; roofline.json: ceilings.1.value)\n\n"
            f"D {v['verdict']} (inferred; skip_stats.json: verdict)\n")
    p, rows = check(text, scratch, tmp_path)
    assert p.returncode == 0, p.stdout
    assert [x["verdict"] for x in rows if x["verdict"] != "skipped"] == ["ok"] * 4


def test_help_is_the_docstring():
    p = subprocess.run([BARE, "-I", "-S", "-P", str(SCRIPT), "--help"], capture_output=True,
                       text=True)
    assert p.returncode == 0 and "Exit codes" in p.stdout and "factcheck.csv" in p.stdout
    assert Path(SCRIPT).read_text().startswith("#!/usr/bin/env python3")


def test_a_tool_sentence_quoted_whole_is_checked_as_text(scratch, tmp_path):
    """A sentence quoted verbatim from a table (swimlanes.json straggler.sentence) and cited
    once: its numbers are covered by the text check; one number changed and it fails."""
    sentence = json.loads((scratch / "swimlanes.json").read_text())["straggler"]["sentence"]
    lag = json.loads((scratch / "swimlanes.json").read_text())["straggler"]["lag_us"]["value"]
    assert f"{lag:.3f} us" in sentence  # the sentence carries the lag figure
    cite = "(measured; swimlanes.json: straggler.sentence)"
    p, rows = check(f"Straggler: {sentence} {cite}\n", scratch, tmp_path)
    assert p.returncode == 0, p.stdout
    quoted = [x for x in rows if x["why"].startswith("inside the text quoted")]
    assert f"{lag:.3f} us" in [x["figure"] for x in quoted]
    assert [x["verdict"] for x in rows if x["verdict"] != "skipped"] == ["ok"]
    changed = sentence.replace(f"{lag:.3f} us", f"{lag + 1:.3f} us")
    p, rows = check(f"Straggler: {changed} {cite}\n", scratch, tmp_path)
    assert p.returncode == 4
    failed = {(x["figure"], x["verdict"]) for x in rows if x["verdict"] in FAILING}
    assert (f"{lag + 1:.3f} us", "no_table") in failed
    assert any(v == "wrong_value" for _, v in failed)  # the quoted text no longer matches


def test_the_users_words_in_a_block_quote_are_theirs(scratch, tmp_path):
    """A block quote without a citation is the user's words: its numbers are skipped, each said
    in factcheck.csv; a cited figure in one is checked like any other."""
    v = values(scratch)
    text = (f"> My step takes about 9 ms and I expected under 1 ms.\n\n"
            f"> The step: {v['med_us3']} us (measured; steps.csv: dur_us, median)\n\n"
            f"> The step: 1.5 ms (measured; steps.csv: dur_us, median)\n")
    p, rows = check(text, scratch, tmp_path)
    assert p.returncode == 4  # the quoted figure with a wrong value still fails
    said = [(x["figure"], x["verdict"]) for x in rows]
    assert said == [("9", "skipped"), ("1", "skipped"), (v["med_us3"] + " us", "ok"),
                    ("1.5 ms", "wrong_value")], said
    assert "the user's" in rows[0]["why"]


def test_table_keyed_by_two_cells(scratch, tmp_path):
    """A GPU x stream table: the header's `device=*, stream=*2` takes the row's first two cells;
    those are not checked; a planted cell is caught on its row."""
    streams = read(scratch / "streams.csv")[:4]
    head = ("| GPU | stream | idle (%) (measured; streams.csv: idle_pct_of_span, device=*, "
            "stream=*2) | busy (ms) (measured; streams.csv: compute_us, device=*, stream=*2) |")
    body = [f"| {x['device']} | {x['stream']} | {r(x['idle_pct_of_span'], 1)} | "
            f"{r(Decimal(x['compute_us']) / 1000, 2)} |" for x in streams]
    p, rows = check("\n".join([head, "|---|---|---|---|", *body]) + "\n", scratch, tmp_path)
    assert p.returncode == 0, p.stdout
    ok = [x for x in rows if x["verdict"] == "ok"]
    assert len(ok) == 2 * len(streams)
    assert ok[0]["selector"] == f"idle_pct_of_span, device={streams[0]['device']}, " \
                               f"stream={streams[0]['stream']}"
    keys = [x["figure"] for x in rows if x["why"].startswith("the row key")]
    assert keys == [v for x in streams for v in (x["device"], x["stream"])]
    planted = Decimal(r(streams[2]["idle_pct_of_span"], 1)) + Decimal("0.3")
    body[2] = body[2].replace(f"| {r(streams[2]['idle_pct_of_span'], 1)} |", f"| {planted} |")
    p, rows = check("\n".join([head, "|---|---|---|---|", *body]) + "\n", scratch, tmp_path)
    assert p.returncode == 4
    bad = [x for x in rows if x["verdict"] in FAILING]
    assert [(x["figure"], x["verdict"], int(x["line"])) for x in bad] == [
        (str(planted), "wrong_value", 5)]


def test_quoted_sentences_cited_ranges_and_text_cells(tmp_path):
    """A quoted cause that ends in a number is checked as text, not as that number; a range
    whose two ends carry their own citations is two figures; a cell under a header citing a
    text column must say that text, and a number changed inside it fails through the row key."""
    out = tmp_path / "scratch"
    out.mkdir()
    (out / "changes.csv").write_text(
        "rank,cause,saving_us,saving_min_us,saving_max_us\n"
        '1,"the host waits: 88.0 us of step 1, largest command_buffer_1 1.0 us",8.472,6.3,8.472\n',
        encoding="utf-8")
    (out / "trust.csv").write_text(
        "section,item,detail\n"
        'needs_new_capture,"the step with change 1 made (estimated 522.4 us, inferred)",'
        "a capture of 2 steps with the change made\n", encoding="utf-8")
    good = "\n".join([
        "# Changes",
        "- Change 1: the host waits: 88.0 us of step 1, largest command_buffer_1 1.0 us"
        " (inferred; changes.csv: cause, rank=1).",
        "- Range 6.3 us (inferred; changes.csv: saving_min_us, rank=1) to 8.5 us"
        " (inferred; changes.csv: saving_max_us, rank=1).",
        "",
        "| question | the capture that answers it (inferred; trust.csv: detail,"
        " section=needs_new_capture, item=*) |",
        "|---|---|",
        "| the step with change 1 made (estimated 522.4 us, inferred) |"
        " a capture of 2 steps with the change made |", ""])
    p, rows = check(good, out, tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    checked = [(x["figure"], x["verdict"]) for x in rows if x["verdict"] != "skipped"]
    assert [v for _, v in checked] == ["ok"] * 4, checked
    assert ("6.3 us", "ok") in checked and ("8.5 us", "ok") in checked
    bad = (good.replace("88.0 us of step", "87.0 us of step")
           .replace("estimated 522.4", "estimated 512.4")
           .replace("a capture of 2 steps", "a capture of 3 steps"))
    p, rows = check(bad, out, tmp_path, "bad.md")
    assert p.returncode == 4
    failing = [x for x in rows if x["verdict"] in FAILING]
    assert {x["line"] for x in failing} == {"2", "7"}, failing
    assert any(x["verdict"] == "wrong_value" and x["line"] == "2" for x in failing)
    assert any(x["verdict"] == "no_table" and "512.4" in x["why"] for x in failing)


def test_enumerations_and_citations_too_far(tmp_path):
    out = tmp_path / "scratch"
    out.mkdir()
    (out / "changes.csv").write_text("rank,saving_us\n1,137.0\n", encoding="utf-8")
    text = ("# Changes\n"
            "Two rules: (1) the host first, (2) the rest.\n"
            "It saves 137.0 us when the host is never late again (inferred; changes.csv: "
            "saving_us, rank=1).\n")
    p, rows = check(text, out, tmp_path)
    assert p.returncode == 4
    enum = [x for x in rows if x["why"].startswith("an enumeration")]
    assert [x["figure"] for x in enum] == ["1", "2"]
    far = [x for x in rows if x["verdict"] == "no_table"]
    assert len(far) == 1 and "too far" in far[0]["why"], far


def test_a_dimension_order_is_a_name(tmp_path):
    """"the order (0, 2, 1, 3)", "axes [1, 0]": a permutation of the axes names them, no figure
    (an agent's report failed on four); a tuple that is no permutation is still four figures."""
    out = tmp_path / "scratch"
    out.mkdir()
    p, rows = check("# R\nStore the cache in the order (0, 2, 1, 3), or transpose [1, 0] once.\n"
                    "Not one: (0, 2, 2, 3).\n", out, tmp_path)
    assert p.returncode == 4
    assert {x["why"] for x in rows if x["line"] == "2"} == {
        "a dimension order (a permutation of 0 to n-1)"} and len(rows) == 10, rows
    assert [x["verdict"] for x in rows if x["line"] == "3"] == ["no_table"] * 4


def test_dunder_names_in_key_cells_and_selectors(tmp_path):
    """A row key with underscores (`__call__`, `_fused_`) is taken whole from a code span, an
    escaped cell or a selector; a wrong value on such a row still fails."""
    out = tmp_path / "scratch"
    (out / "attribution").mkdir(parents=True)
    (out / "attribution" / "lines.csv").write_text(
        "user_frame,device_us,pct_of_attributed,pct_of_device_time,kernels,instructions\n"
        "model.py:12 __call__,612.000,61.20,58.10,4,2\n"
        "model.py:40 _fused_,388.000,38.80,36.80,2,1\n"
        "model.py:12 __call,1.000,0.10,0.10,1,1\n", encoding="utf-8")
    head = ("| Python line | share (%) (inferred; attribution/lines.csv: pct_of_attributed, "
            "user_frame=*) |\n|---|---|\n")
    good = (head + "| `model.py:12 __call__` | 61.2 |\n"
            "| **`model.py:40 _fused_`** | 38.8 |\n"
            "| model.py:12 \\_\\_call\\_\\_ | 61.20 |\n\n"
            "The line model.py:12 `__call__` takes 61.2% (inferred; attribution/lines.csv: "
            "pct_of_attributed, user_frame=model.py:12 __call__) of the attributed time.\n")
    p, rows = check(good, out, tmp_path)
    assert p.returncode == 0, p.stdout
    ok = [x for x in rows if x["verdict"] == "ok"]
    assert [x["selector"] for x in ok] == [
        "pct_of_attributed, user_frame=model.py:12 __call__",
        "pct_of_attributed, user_frame=model.py:40 _fused_",
        "pct_of_attributed, user_frame=model.py:12 __call__",
        "pct_of_attributed, user_frame=model.py:12 __call__"]
    # the same rows with a wrong figure: found on the dunder row, and wrong
    bad = good.replace("| 61.2 |", "| 61.3 |").replace("takes 61.2%", "takes 0.2%")
    p, rows = check(bad, out, tmp_path, "bad.md")
    assert p.returncode == 4
    failing = [(x["figure"], x["verdict"], x["found_value"]) for x in rows
               if x["verdict"] in FAILING]
    assert failing == [("61.3", "wrong_value", "61.2%"), ("0.2%", "wrong_value", "61.2%")]


def test_several_citations_in_one_parenthesis(tmp_path):
    """One parenthesis may hold several citations, separated by ; or |, a label before each
    (a citation without one takes the previous label); a figure must hold in every one that
    names a column; a row reference (key=value only) must find its rows."""
    out = tmp_path / "scratch"
    out.mkdir()
    (out / "steps.csv").write_text("step,device,dur_us,kernels\n3,0,812.500,40\n3,1,790.250,40\n",
                                   encoding="utf-8")
    (out / "changes.csv").write_text('rank,cause,saving_us,step_us,label\n'
                                     '1,host gap,812.500,812.500,"inferred, not run"\n',
                                     encoding="utf-8")
    good = "\n\n".join([
        "GPU 0 in step 3 is where change 1 acts (measured; steps.csv: step=3, device=0; "
        "inferred; changes.csv: rank=1).",
        "Step 3 takes 0.81 ms (measured; steps.csv: dur_us, step=3, device=0 | inferred; "
        "changes.csv: step_us, rank=1).",
        "Step 3 takes 812.5 us (measured; steps.csv: dur_us, step=3, device=0; "
        "steps.csv: dur_us, max, step=3).",
        "It saves 812.5 us (inferred; changes.csv: saving_us, rank=1; measured; steps.csv: "
        "step=3, device=0).",
        "| GPU | kernels (measured; steps.csv: kernels, step=3, device=*; steps.csv: kernels, "
        "max, step=3) |\n|---|---|\n| 0 | 40 |\n| 1 | 40 |"]) + "\n"
    p, rows = check(good, out, tmp_path)
    assert p.returncode == 0, p.stdout
    checked = [(x["figure"], x["verdict"], x["table"]) for x in rows if x["verdict"] != "skipped"]
    assert checked == [
        ("", "ok", "steps.csv | changes.csv"),
        ("0.81 ms", "ok", "steps.csv | changes.csv"),
        ("812.5 us", "ok", "steps.csv | steps.csv"),
        ("812.5 us", "ok", "changes.csv | steps.csv"),
        ("40", "ok", "steps.csv | steps.csv"), ("40", "ok", "steps.csv | steps.csv")], checked
    inherited = next(x for x in rows if x["figure"] == "812.5 us")
    assert inherited["label"] == "measured"  # the second citation took the first one's label
    # the same patterns, each with one thing wrong
    bad = "\n\n".join([
        "GPU 0 in step 4 is where change 1 acts (measured; steps.csv: step=4, device=0; "
        "inferred; changes.csv: rank=1).",
        "Step 3 takes 0.79 ms (measured; steps.csv: dur_us, step=3, device=0 | inferred; "
        "changes.csv: step_us, rank=1).",
        "Step 3 takes 812.5 us (measured; steps.csv: step=3, device=0; inferred; changes.csv: "
        "rank=1).",
        "It saves 812.5 us (guessed; changes.csv: saving_us, rank=1; measured; steps.csv: "
        "dur_us, step=3, device=0).",
        "| GPU | kernels (measured; steps.csv: kernels, step=3, device=*; steps.csv: kernels, "
        "max, step=3) |\n|---|---|\n| 0 | 41 |"]) + "\n"
    p, rows = check(bad, out, tmp_path, "bad.md")
    assert p.returncode == 4
    failing = [(x["figure"], x["verdict"]) for x in rows if x["verdict"] in FAILING]
    assert failing == [("", "no_table"), ("0.79 ms", "wrong_value"), ("812.5 us", "no_table"),
                       ("812.5 us", "no_label"), ("41", "wrong_value")], failing
    whys = [x["why"] for x in rows if x["verdict"] in FAILING]
    assert "no row of steps.csv has step=4, device=0" in whys[0]
    assert whys[1].startswith("steps.csv: the table gives 0.8125 ms, which rounds to 0.81; "
                              "changes.csv: the table gives 0.8125 ms")
    assert "names rows but no column" in whys[2]


def test_names_with_numbers_are_identifiers(tmp_path):
    """A number right after a name (layer 4, GPU 7, step 18, block 2, stage 1) or inside one
    (conv3d, jit_dot(12)) is not a figure; a figure with a unit, a percentage or a count after
    a verb still needs its citation."""
    out = tmp_path / "scratch"
    out.mkdir()
    (out / "steps.csv").write_text("step,device,dur_us\n18,7,3000.000\n", encoding="utf-8")
    good = ("Layer 4 of block 2 in stage 1 runs on GPU 7 in step 18; the conv3d kernel of "
            "jit_dot(12) and `jit_dot`(12) too; GPUs 0 through 7, head 3, epoch 2, expert 7, "
            "node 1 and iteration 5.\n\n"
            "In layer 4, step 18 takes 3.0 ms (measured; steps.csv: dur_us, step=18, device=7).\n")
    p, rows = check(good, out, tmp_path)
    assert p.returncode == 0, p.stdout
    skipped = [(x["figure"], x["why"]) for x in rows if x["verdict"] == "skipped"]
    for fig, word in (("4", "Layer"), ("2", "block"), ("1", "stage"), ("7", "GPU"),
                      ("18", "step"), ("3", "head"), ("2", "epoch"), ("7", "expert"),
                      ("1", "node"), ("5", "iteration"), ("4", "layer")):
        assert (fig, f"an identifier after '{word}'") in skipped, (fig, word, skipped)
    assert ("0", "an identifier after 'GPUs'") in skipped  # "GPUs 0 through 7"
    assert ("7", "an identifier after 'GPUs'") in skipped
    assert [f for f, why in skipped if why == "a program id in name(id)"] == ["12", "12"]
    assert [x["figure"] for x in rows if x["verdict"] == "ok"] == ["3.0 ms"]
    bad = ("Layer 4 takes 3 ms; block 2 runs 12 kernels; stage 1 is 45% of the step; the "
           "blocks 3 streams wait; the workers process 16 batches.\n")
    p, rows = check(bad, out, tmp_path, "bad.md")
    assert p.returncode == 4
    assert [x["figure"] for x in rows if x["verdict"] == "no_table"] == ["3 ms", "12", "45%",
                                                                        "3", "16"]
    assert [x["figure"] for x in rows if x["verdict"] == "skipped"] == ["4", "2", "1"]


def test_one_label_per_value_names_the_other_figure(tmp_path):
    """A value a table carries under two names with two labels: the label must be the one of
    the name cited, and the reason names the other figure that has the writer's label."""
    out = tmp_path / "scratch"
    out.mkdir()
    (out / "skip_stats.json").write_text(json.dumps({"step": "skip_stats", "figures": {
        "idle_between_pct_of_period": {"value": 27.21, "min": 4.39, "max": 87.79, "unit": "pct",
                                       "label": "measured"},
        "between_share_pct_of_period": {"value": 27.21, "min": 4.39, "max": 87.79,
                                        "unit": "pct", "label": "inferred"}}}))
    good = ("Idle between steps: 27.2% (measured; skip_stats.json: "
            "figures.idle_between_pct_of_period) of the period.\n")
    p, rows = check(good, out, tmp_path)
    assert p.returncode == 0, p.stdout
    bad = good.replace("figures.idle_between_pct_of_period",
                       "figures.between_share_pct_of_period")
    p, rows = check(bad, out, tmp_path, "bad.md")
    assert p.returncode == 4
    (row,) = [x for x in rows if x["verdict"] in FAILING]
    assert row["verdict"] == "no_label"
    assert row["why"] == (
        "labelled measured, but skip_stats.json labels figures.between_share_pct_of_period "
        "inferred: one label per value, the one its table gives; write (inferred; "
        "skip_stats.json: figures.between_share_pct_of_period), or cite "
        "figures.idle_between_pct_of_period, which holds the same value labelled measured")
    p, rows = check(good.replace("27.2%", "27.3%"), out, tmp_path, "wrong.md")
    assert p.returncode == 4
    assert [x["verdict"] for x in rows if x["verdict"] in FAILING] == ["wrong_value"]


def test_a_csv_column_carries_its_declared_label(tmp_path):
    """A CSV with no label column: the figure takes the label scratch.py declares for its column
    (streams.csv idle_us is measured), so the same value cannot be cited under two labels."""
    out = tmp_path / "scratch"
    out.mkdir()
    (out / "streams.csv").write_text("device,stream,idle_us\n0,7,12.500\n")
    good = "GPU 0 idles 12.5 us (measured; streams.csv: idle_us, device=0, stream=7).\n"
    p, rows = check(good, out, tmp_path)
    assert p.returncode == 0, p.stdout
    p, rows = check(good.replace("measured", "inferred"), out, tmp_path, "bad.md")
    assert p.returncode == 4
    (row,) = [x for x in rows if x["verdict"] in FAILING]
    assert row["verdict"] == "no_label" and "measured" in row["why"], row


def test_reports_shaped_to_be_expensive_finish_in_linear_time(scratch, tmp_path):
    """A paragraph of 20,000 citations in one sentence, 20,000 citations never closed, 20,000
    HTML comments never closed, an exponent of nine digits: each ends (a 60 s bound on inputs
    that ran past 120 s) with a result, never a traceback; the number is skipped as no figure."""
    out = scratch
    cases = {
        "many": "The step " + " ".join(
            f"took {i}.0 us (measured; steps.csv: dur_us, step=1, device=0)," for i in
            range(20000)) + "\n",
        "unclosed": "It took 5 us (measured; steps.csv: dur_us " * 20000 + "\n",
        "comments": "<!-- " * 20000 + "text\n",
        "exponent": "It took 1e999999999 us (measured; steps.csv: dur_us, step=1, device=0).\n",
    }
    for name, text in cases.items():
        path = tmp_path / f"{name}.md"
        path.write_text(text)
        p = subprocess.run([sys.executable, "-P", str(SCRIPT), str(path), "--out", str(out)],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode in (0, 4) and "Traceback" not in p.stderr, (name, p.stderr[-500:])
    rows = read(out / "factcheck.csv")
    assert any(row["verdict"] == "skipped" and "exponent" in row["why"] for row in rows)


def test_a_careful_writers_sentences_pass_and_derived_figures_are_computed(tmp_path):
    """The grammar a careful writer follows: lists of change numbers are names, identifiers may
    stand between a figure and its citation, two single-row citations give two figures, a
    figure may stand inside its citation, a round count restating a cited one is that figure;
    a derived figure's formula is computed from its cited values and constants (in the report
    and in derived.csv), and a wrong result, a wrong label, an uncited count or a figure
    written as code still fail."""
    out = tmp_path / "scratch"
    out.mkdir()
    (out / "changes.csv").write_text(
        "rank,pct_of_step,step_us,saving_us\n1,14.42,610.352,88.000\n2,13.17,610.352,80.400\n"
        "3,4.10,610.352,25.000\n", encoding="utf-8")
    (out / "trust.csv").write_text(
        "section,item,kind,count,device_us,pct_of_device_time,source,detail\n"
        "trust,Kernels with no instruction,unattributed,32,524.100,0.24,attribution/how.csv,\n",
        encoding="utf-8")
    (out / "derived.csv").write_text(
        'name,value,unit,formula\nshare1,14.42,%,"= 100 * s / w; s = changes.csv: saving_us, '
        'rank=1; w = changes.csv: step_us, rank=1"\nbad,20,%,"= 100 * s / w; s = changes.csv: '
        'saving_us, rank=1; w = changes.csv: step_us, rank=1"\nbare,14.42,%,"100 * s / w; '
        's = changes.csv: saving_us, rank=1; w = changes.csv: step_us, rank=1"\n',
        encoding="utf-8")  # the last without its leading `= `
    c = "(inferred, not run; changes.csv: pct_of_step, rank=1; changes.csv: pct_of_step, rank=2)"
    f = "= 100 * s / w; s = changes.csv: saving_us, rank=1; w = changes.csv: step_us, rank=1"
    k = "= b / peak * 1e6; b = 7.2e6 [bytes moved]; peak = 3.35e12 [peaks.md: H100 HBM3]"
    text = f"""# Changes
Changes 1, 2 and 3 come first; changes 1, 2, 3 and 2 touch the host, change 3 does not.
The step takes 610.352 us on GPU 0 in step 1 (measured; changes.csv: step_us, rank=1).
They save 14.42% to 13.17% {c}, 14.42% and 13.17% {c}, 14.42–13.17% {c} of the step.
The first saves (14.42%, inferred, not run; changes.csv: pct_of_step, rank=1) of the step.
There are 32 kernels (measured; trust.csv: count, kind=unattributed); those 32 kernels matter.
Change 1 is 14.4% (inferred; {f}) of the step.
At a 3.35 TB/s peak 7.2 MB take 2.1 us (inferred; {k}).
Kept: 14.42% (inferred; derived.csv: value, name=share1).
Planted: changes 12 to 16 launches; 33 kernels; `12.5 us`.
Planted: 20.0% (inferred; {f}).
Planted: 14.4% (measured; {f}).
Planted: 3 (inferred; = open(x); x = 3 [a call]).
Planted: 32 steps ran, not the 32 kernels.
"""
    p, rows = check(text, out, tmp_path)
    assert p.returncode == 4, p.stdout + p.stderr
    checked = [(x["line"], x["figure"], x["verdict"]) for x in rows if x["verdict"] != "skipped"]
    assert checked == [
        ("0", "14.42%", "ok"), ("0", "20%", "wrong_value"), ("0", "14.42%", "ok"),
        ("3", "610.352 us", "ok"),
        ("4", "14.42% to 13.17%", "ok"), ("4", "14.42% and 13.17%", "ok"),
        ("4", "14.42–13.17%", "ok"),
        ("5", "14.42%", "ok"),
        ("6", "32", "ok"), ("6", "32", "ok"),
        ("7", "14.4%", "ok"),
        ("8", "3.35 TB/s", "ok"), ("8", "7.2 MB", "ok"), ("8", "2.1 us", "ok"),
        ("9", "14.42%", "ok"),
        ("10", "12 to 16", "no_table"), ("10", "33", "no_table"), ("10", "12.5 us", "no_table"),
        ("11", "20.0%", "wrong_value"), ("12", "14.4%", "no_label"), ("13", "3", "no_table"),
        ("14", "32", "no_table"), ("14", "32", "ok"),  # 32 steps are not the 32 kernels cited
    ], checked
    named = [x["figure"] for x in rows if "(a list of them)" in x["why"]]
    assert named == ["1", "2", "3", "1", "2", "3", "2"], named
    assert "restates the figure cited on line 6" in rows[[x["line"] for x in rows].index("6")
                                                         + 1]["why"]
    result = json.loads((out / "factcheck.json").read_text())
    assert result["skipped"]["an identifier"] >= 9, result["skipped"]


@pytest.mark.parametrize("written", ["NaN", "nan", "inf", "-inf", "Infinity", "1e999999999",
                                     "0x1F", "1_135.9", "−inf"])
def test_a_figure_that_is_not_a_finite_decimal_fails(scratch, tmp_path, written):
    """Before a citation, NaN, an infinity, another base, underscores or an exponent no figure
    has is a wrong value, never skipped: with a true figure elsewhere the report still fails."""
    steps = read(scratch / "steps.csv")
    median_us = r(median(Decimal(x["dur_us"]) for x in steps), 1)
    p, rows = check(f"The step takes {median_us} us (measured; steps.csv: dur_us, median).\n\n"
                    f"It saves {written} us (measured; steps.csv: dur_us, median).\n",
                    scratch, tmp_path)
    assert p.returncode == 4, p.stdout
    bad = by_figure(rows, written)
    assert [x["verdict"] for x in bad if x["table"]] == ["wrong_value"]
    assert "not a finite decimal figure" in bad[-1]["why"]
    assert by_figure(rows, f"{median_us} us")[0]["verdict"] == "ok"
    assert json.loads((scratch / "factcheck.json").read_text())["verdict"] == "fail"


def test_words_and_names_near_a_citation_are_not_taken_for_a_number(scratch, tmp_path):
    """'nanoseconds', 'info', a name such as conv_2 before a citation: no figure, so skipped."""
    p, rows = check("Look at the info (steps.csv: dur_us, median) and conv_2 in "
                    "nanoseconds (measured; steps.csv: dur_us, median).\n", scratch, tmp_path)
    assert p.returncode == 4  # nothing checked
    assert rows and {x["verdict"] for x in rows} == {"skipped"}


def test_the_check_costs_citations_plus_rows_never_their_product(tmp_path, monkeypatch):
    """2,000 rows and 400 citations each selecting one by step and device: the keys compared
    are those of one index of the table and a few per citation (once 400 x 2,000 x 2)."""
    sys.path.insert(0, str(SCRIPT.parent))
    from jaxperf.analyses import factcheck
    out = tmp_path / "s"
    out.mkdir()
    with open(out / "steps.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["step", "device", "dur_us"])
        for s in range(500):
            for d in range(4):
                w.writerow([s, d, f"{1000 + s + d / 10:.1f}"])
    report = tmp_path / "r.md"
    report.write_text("".join(
        f"Step {s} took {1000 + s + 0.3:,.1f} us (measured; steps.csv: dur_us, step={s}, "
        "device=3).\n\n" for s in range(0, 500, 5) for _ in range(4)))
    calls = [0]
    key_of = factcheck.key_of

    def counted(cell):
        calls[0] += 1
        return key_of(cell)
    monkeypatch.setattr(factcheck, "key_of", counted)
    rows, result, _ = factcheck.run(report, out)
    assert result["figures"]["ok"] == 400 and result["verdict"] == "pass", result["failing"][:3]
    assert calls[0] <= 2 * 2_000 + 8 * 400  # the product: 1,600,000


def test_a_table_that_disagrees_with_its_record_is_not_cited(scratch, tmp_path):
    """steps.csv edited so that its durations disagree with the skip_stats.json written with
    it: a figure cited from it fails (no_table, saying why), even one the edited table holds."""
    import shutil
    out = tmp_path / "s"
    shutil.copytree(scratch, out)
    rows = scale_step_durations(out / "steps.csv", 10)
    edited = r(median(Decimal(x["dur_us"]) for x in rows), 1)
    p, got = check(f"The step takes {edited} us (measured; steps.csv: dur_us, median).\n", out,
                   tmp_path)
    assert p.returncode == 4
    row = by_figure(got, f"{edited} us")[0]
    assert row["verdict"] == "no_table" and "disagrees with its own record" in row["why"]


def test_one_host_event_of_a_gap_is_cited_by_its_name(scratch, tmp_path):
    """A gap's host events are one cell (`name=us | ...`): `host_events[name]` cites one of
    them (measured, in us); a wrong time fails, a name the cell does not hold and a column that
    is not such a list have no table."""
    gap = next(g for g in read(scratch / "gaps.csv") if g["host_events"])
    name, _, us = gap["host_events"].split(" | ")[0].rpartition("=")
    where = f"step={gap['step']}, device={gap['device']}, start_us={gap['start_us']}"
    p, rows = check(
        f"The gap holds {name} for {us} us (measured; gaps.csv: host_events[{name}], {where}).\n\n"
        f"Planted: {float(us) * 2 + 1:.3f} us (measured; gaps.csv: host_events[{name}], "
        f"{where}).\n\nPlanted: 5 us (measured; gaps.csv: host_events[no such event], {where}).\n"
        f"\nPlanted: 6 us (measured; gaps.csv: cause[{name}], {where}).\n", scratch, tmp_path)
    assert p.returncode == 4, p.stdout + p.stderr
    got = [(x["line"], x["verdict"]) for x in rows if x["verdict"] != "skipped"]
    assert got == [("1", "ok"), ("3", "wrong_value"), ("5", "no_table"), ("7", "no_table")], got
    why = {x["line"]: x["why"] for x in rows}
    assert "holds no host event no such event" in why["5"]
    assert "is not a list of host events" in why["7"]


def test_a_share_restates_only_a_cited_share_of_the_same_thing(tmp_path):
    """A round share written without its citation restates a cited share only where both are of
    the same thing: "100% of GPU time" again is that figure; "100% of peak" is a claim of its
    own, never accepted on the strength of an unrelated 100% (a quantity, not its digits)."""
    out = tmp_path / "scratch"
    out.mkdir()
    (out / "changes.csv").write_text("rank,pct_of_step\n1,100.00\n", encoding="utf-8")
    text = """# Shares
Change 1 holds 100% (inferred, not run; changes.csv: pct_of_step, rank=1) of the step.
So 100% of the step is that change.
It runs at 100% of peak.
"""
    p, rows = check(text, out, tmp_path)
    assert p.returncode == 4, p.stdout + p.stderr
    checked = [(x["line"], x["figure"], x["verdict"]) for x in rows if x["verdict"] != "skipped"]
    assert checked == [("2", "100%", "ok"), ("3", "100%", "ok"), ("4", "100%", "no_table")], \
        checked


def test_a_figure_restated_as_written_and_a_cell_every_row_holds(tmp_path):
    """Agents' reports failed on their first run on figures they repeated: "5,007.4 us" cited
    once, then written again alike, is that figure (written otherwise, "5,007.5 us", a claim of
    its own); "all 8 steps" restates "8 ... analysed steps" (a count's word among the other's
    two), never "8 kernels"; a cell cited without a row holds where every matching row holds
    it ("compute" in each step), and fails where the rows differ."""
    out = tmp_path / "scratch"
    out.mkdir()
    (out / "changes.csv").write_text("rank,saving_us,label\n1,5007.361,inferred\n",
                                     encoding="utf-8")
    (out / "stragglers.csv").write_text("step,device,last_stretch,end_us\n1,0,compute,10\n"
                                        "2,0,compute,20\n", encoding="utf-8")
    (out / "skip_stats.json").write_text(json.dumps({"figures": {"share": {
        "value": 33.0, "n": 8, "unit": "pct", "label": "inferred"}}}), encoding="utf-8")
    text = """# R
Change 1 saves 5,007.4 us (inferred, not run; changes.csv: saving_us, rank=1).
Over 8 (inferred; skip_stats.json: figures.share.n) analysed steps it holds.
In all 8 steps the chip waits; change 1's 5,007.4 us is a mean.
Not the same: 5,007.5 us, and 8 kernels.
Each step ends in compute (inferred; stragglers.csv: last_stretch).
Each step ends at 10 us (measured; stragglers.csv: end_us).
"""
    p, rows = check(text, out, tmp_path)
    assert p.returncode == 4, p.stdout + p.stderr
    got = [(x["line"], x["figure"], x["verdict"]) for x in rows if x["verdict"] != "skipped"]
    assert got == [("2", "5,007.4 us", "ok"), ("3", "8", "ok"), ("4", "8", "ok"),
                   ("4", "5,007.4 us", "ok"), ("5", "5,007.5 us", "no_table"),
                   ("5", "8", "no_table"), ("6", "compute", "ok"), ("7", "10 us", "no_table")
                   ], got
    assert "2 values" in next(x["why"] for x in rows if x["line"] == "7")


def test_an_identifier_before_a_table_named_alone_is_no_claim(scratch, tmp_path):
    """"Test change 1 (steps.csv) first.": the parentheses name a table, no column; the number
    before them is an identifier, so nothing is claimed (an agent's report failed on it)."""
    p, rows = check("# R\n\nTest change 1 (steps.csv) first.\n", scratch, tmp_path)
    assert [x["verdict"] for x in rows if x["figure"] == "1"] == ["skipped"], p.stdout


def test_two_figures_before_two_json_paths_are_each_their_own(tmp_path):
    """"between a and b (label; x.json: path a; x.json: path b)": each figure is checked against
    its own path, as two one-row CSV citations are (an agent's report failed on it as written);
    the two swapped still fail."""
    out = tmp_path / "scratch"
    out.mkdir()
    (out / "skip_stats.json").write_text(json.dumps({"figures": {"busy": {
        "value": 97.94, "min": 96.9858, "max": 98.2846, "unit": "pct", "label": "inferred"}}}),
        encoding="utf-8")
    c = "(inferred; skip_stats.json: figures.busy.min; skip_stats.json: figures.busy.max)"
    p, rows = check(f"# R\nBusy between 96.99% and 98.28% {c}.\nSwapped: 98.28% and 96.99% {c}.\n",
                    out, tmp_path)
    got = [(x["line"], x["figure"], x["verdict"]) for x in rows if x["verdict"] != "skipped"]
    assert got == [("2", "96.99% and 98.28%", "ok"), ("3", "98.28% and 96.99%", "wrong_value")]
    assert p.returncode == 4


def test_a_range_of_changes_where_changes_is_a_noun(tmp_path):
    """"Changes 4 to 7 each save less", "of changes 4 to 7": after a sentence's start or a
    preposition the plural is a noun, so the range names changes, and so does a range listed
    after it ("Changes 3 to 7 and 9 to 11": agents' reports failed on both); "the fix changes
    12 to 16 launches" is still a figure to cite."""
    out = tmp_path / "scratch"
    out.mkdir()
    p, rows = check("# R\nChanges 4 to 7 each save less.\nOf changes 2 to 3 none is large; the "
                    "fix changes 12 to 16 launches.\n- Changes 5 to 6 are host work.\n"
                    "Changes 3 to 7 and 9 to 11 are one time.\nTwo items limit changes 2 "
                    "to 6 only.\n", out, tmp_path)
    got = [(x["line"], x["figure"], x["verdict"]) for x in rows]
    assert got == [("2", "4 to 7", "skipped"), ("3", "2 to 3", "skipped"),
                   ("3", "12 to 16", "no_table"), ("4", "5 to 6", "skipped"),
                   ("5", "3 to 7", "skipped"), ("5", "9 to 11", "skipped"),
                   ("6", "2 to 6", "skipped")], got


def test_a_shape_an_alignment_and_a_parenthesised_list_of_rows_are_names(tmp_path):
    """An array's dimensions ("4096 by 4096 bf16", "128x512"), an alignment ("multiples of
    128") and rows listed in parentheses after their word ("rows (3, 5 to 9)") are names, not
    figures (an agent's first run failed on each); a count beside them still needs its
    citation."""
    out = tmp_path / "scratch"
    out.mkdir()
    p, rows = check("# R\nSix 4096 by 4096 bf16 arrays and a 128x512 tile.\nIts dimensions "
                    "are multiples of 128.\nThe line rows (3, 5 to 9) hold 21 instructions.\n",
                    out, tmp_path)
    got = [(x["line"], x["figure"], x["verdict"]) for x in rows]
    assert got == [("2", "4096", "skipped"), ("2", "4096", "skipped"), ("3", "128", "skipped"),
                   ("4", "3", "skipped"), ("4", "5 to 9", "skipped"), ("4", "21", "no_table")
                   ], got  # (128x512 is one token: no figure)


def test_a_figure_a_cited_sentence_states_and_an_axis(tmp_path):
    """A figure cited to a sentence's cell that states it as written ("32.0%" of a rule's
    sentence) is found there; one the sentence does not state ("31.9%", "32%") is not; "axis
    0" names an axis, "step_num 0" a step, "1/k" is a formula (tries 31, 32 and 34's first runs
    failed on these)."""
    out = tmp_path / "scratch"
    out.mkdir()
    (out / "skip_stats.json").write_text(json.dumps({"rule": [
        "between steps: 32.0% of the step period is idle (median over 7 steps)"]}),
        encoding="utf-8")
    c = "(inferred; skip_stats.json: rule.0)"
    p, rows = check(f"# R\nIdle 32.0% {c}.\nIdle 31.9% {c}.\nIdle 32% {c}.\nvmap over axis 0 "
                    "in step_num 0, each step 1/k of it.\n", out, tmp_path)
    got = [(x["line"], x["figure"], x["verdict"]) for x in rows]
    assert got == [("2", "32.0%", "ok"), ("3", "31.9%", "wrong_value"),
                   ("4", "32%", "wrong_value"), ("5", "0", "skipped"), ("5", "0", "skipped"),
                   ("5", "1", "skipped")], got


def test_row_numbers_are_identifiers(tmp_path):
    """"rows 4 to 12 of the table", "rows 2 and 3": row numbers, not uncited figures (an
    agent's report failed on them); "changes 12 to 16 launches" still needs its citation."""
    out = tmp_path / "scratch"
    out.mkdir()
    p, rows = check("# R\nThe ranked rows 4 to 12 of the table are small; rows 2 and 3 are "
                    "host rows.\nPlanted: changes 12 to 16 launches.\n", out, tmp_path)
    got = [(x["line"], x["figure"], x["verdict"]) for x in rows]
    assert got == [("2", "4 to 12", "skipped"), ("2", "2", "skipped"), ("2", "3", "skipped"),
                   ("3", "12 to 16", "no_table")], got
