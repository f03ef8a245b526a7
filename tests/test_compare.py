"""compare.py (before and after) on generated pairs with truth: command buffers off then on (the
launch gaps gone), every kernel 20% faster, the same program under another seed (noise only);
its measured deltas against the generator's steps, the rule that calls a difference inside the
spread no change, BEFORE's predictions beside what moved, scratch folders as input (never
written), and bad input as one sentence."""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from capgen.generate import generate
from capgen.scenarios import SCENARIOS
from conftest import REPO, scale_step_durations

COMPARE = REPO / "scripts" / "compare.py"


def compare(before, after, out, *extra):
    return subprocess.run([sys.executable, "-P", str(COMPARE), str(before), str(after), "--out",
                           str(out), "--no-xprof", *extra], capture_output=True, text=True,
                          timeout=600)


def read(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def truth_periods(run_dir: Path) -> list[float]:
    """The generator's step periods (us): one step's start to the next's, on GPU 0."""
    rows = [r for r in read(run_dir.parent.parent.parent / "truth" / "steps.csv")
            if r["device"] == "0"]
    starts = sorted(int(r["start_ps"]) for r in rows)
    return [(b - a) / 1e6 for a, b in zip(starts, starts[1:], strict=False)]


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    root = tmp_path_factory.mktemp("pairs")
    off, dev = SCENARIOS["nvidia-off"], SCENARIOS["nvidia-device-bound"]
    made = {
        "off": generate(off, root / "off"),
        "on": generate(dataclasses.replace(off, command_buffers="all"), root / "on"),
        "on-seed7": generate(dataclasses.replace(off, command_buffers="all", seed=7),
                             root / "on-seed7"),
        "dev": generate(dev, root / "dev"),
        "dev-fast": generate(dataclasses.replace(dev, work_scale=dev.work_scale * 0.8),
                             root / "dev-fast"),
        "dev-slow": generate(dataclasses.replace(dev, work_scale=dev.work_scale * 1.1),
                             root / "dev-slow"),
        "split": generate(SCENARIOS["train-plus-optimizer-annotated"], root / "split"),
    }
    return root, {k: Path(r.run_dir) for k, r in made.items()}


def run_pair(pairs, before, after, name):
    root, runs = pairs
    out = root / name
    p = compare(runs[before], runs[after], out)
    assert p.returncode == 0, p.stderr
    return out, p, json.loads((out / "compare.json").read_text())


def test_command_buffers_on_the_step_period_and_the_prediction(pairs):
    """Off then on: the step period's change equals the generator's within 1%, it counts (every
    step after faster), the verdict moves from launch-bound with host-late time the largest
    part, and BEFORE's change 1 (the host gaps) stands beside what its cause and the step
    moved."""
    out, p, res = run_pair(pairs, "off", "on", "cb")
    _, runs = pairs
    figs = res["figures"]
    for side, run in (("before", runs["off"]), ("after", runs["on"])):
        truth = sorted(truth_periods(run))
        assert figs[f"step_period_{side}_us"]["value"] == pytest.approx(
            truth[len(truth) // 2], rel=0.01)
        assert figs[f"step_period_{side}_us"]["label"] == "measured"
    assert res["significant"] is True and "faster" in res["significance"]["why"]
    assert res["verdict_before"] == "launch-bound" and res["moved"][0]["part"] == "host_late_us"
    first = res["predictions"][0]
    assert first["rank"] == 1 and first["cause"] == "host_gap"
    assert first["measured_change_us"] > 0.9 * first["predicted_saving_us"]
    assert first["error_ratio"] == pytest.approx(
        first["step_period_change_us"] / first["predicted_saving_us"], abs=0.01)
    assert all(q["error_ratio"] is None for q in res["predictions"][1:])  # changes not made
    assert "change 1 (host_gap): predicted" in p.stdout
    rows = read(out / "compare.csv")
    assert [r["status"] for r in rows if r["section"] == "step"] == ["changed", "changed"]


def test_every_kernel_faster_moves_its_families_and_instructions(pairs):
    """Kernels 20% faster on a device-bound program: the step time and every family's and
    program's GPU time per step 20% down (within 1%), matched by name; the verdict the same."""
    out, _, res = run_pair(pairs, "dev", "dev-fast", "fast")
    b, a = res["figures"]["step_time_before_us"]["value"], res["figures"]["step_time_after_us"][
        "value"]
    assert a / b == pytest.approx(0.8, abs=0.01) and res["significant"]
    assert res["verdict_before"] == res["verdict_after"] == "device-bound"
    rows = read(out / "compare.csv")
    for r in rows:
        if r["section"] in ("program", "family") and float(r["before"]) > 100:
            assert float(r["change_pct"]) == pytest.approx(-20, abs=1), r
    assert not [r for r in rows if r["status"] in ("new", "gone")]


def test_noise_alone_is_no_change(pairs):
    """The same program under another seed: no change counted, said why."""
    out, p, res = run_pair(pairs, "on", "on-seed7", "noise")
    assert res["significant"] is False and "no change counted" in p.stdout
    assert {r["status"] for r in read(out / "compare.csv") if r["section"] == "step"} == {
        "within spread"}


def test_scratch_folders_are_read_as_they_are(pairs, tmp_path):
    """Two scratch folders the investigation wrote: the same comparison, nothing written into
    them."""
    root = run_pair(pairs, "off", "on", "cb")[0].parent
    before, after = root / "cb" / "before", root / "cb" / "after"

    def digest(folder):
        return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*")
                if p.is_file()}
    was = (digest(before), digest(after))
    p = compare(before, after, tmp_path / "again")
    assert p.returncode == 0, p.stderr
    assert (digest(before), digest(after)) == was
    assert read(tmp_path / "again" / "compare.csv") == read(root / "cb" / "compare.csv")
    assert not (tmp_path / "again" / "before").exists()


def test_a_side_without_hlo_compares_what_it_can(pairs, tmp_path):
    """AFTER without its xplane: programs, instructions, families and lines are refused in one
    sentence; the steps and the host side are compared."""
    _, runs = pairs
    trace_only = tmp_path / "t" / "plugins" / "profile" / "r"
    trace_only.mkdir(parents=True)
    for f in runs["on"].glob("*.trace.json.gz"):
        (trace_only / f.name).write_bytes(f.read_bytes())
    p = compare(runs["off"], trace_only, tmp_path / "o")
    assert p.returncode == 0, p.stderr
    res = json.loads((tmp_path / "o" / "compare.json").read_text())
    assert res["significant"] and any("because AFTER has no attribution" in r
                                      for r in res["refusals"])
    assert not [r for r in read(tmp_path / "o" / "compare.csv") if r["section"] == "program"]


def test_a_capture_compared_with_a_copy_of_itself_is_said(pairs, tmp_path):
    """AFTER a byte-for-byte copy of BEFORE's capture: compared, and said to be the same
    capture (nothing changed between them)."""
    _, runs = pairs
    copy = tmp_path / "copy" / "plugins" / "profile" / "r"
    shutil.copytree(runs["off"], copy)
    p = compare(runs["off"], copy, tmp_path / "o")
    assert p.returncode == 0, p.stderr
    res = json.loads((tmp_path / "o" / "compare.json").read_text())
    assert any(n.startswith("BEFORE and AFTER are the same capture") for n in res["notes"])
    p = compare(runs["off"], runs["on"], tmp_path / "o2")
    res = json.loads((tmp_path / "o2" / "compare.json").read_text())
    assert not any("the same capture" in n for n in res["notes"])


def test_an_after_whose_trace_is_cut_in_half_is_refused_per_step(pairs, tmp_path):
    """AFTER's trace cut in half, its xplane whole: AFTER has no analysed step, so its GPU time
    has no step to be divided by: programs, instructions and lines are refused in one sentence
    naming it, never published at +300% (a division by max(1, 0) steps)."""
    import gzip
    _, runs = pairs
    cut = tmp_path / "t" / "plugins" / "profile" / "r"
    cut.mkdir(parents=True)
    for f in runs["on"].iterdir():
        data = f.read_bytes()
        if f.name.endswith(".trace.json.gz"):
            text = gzip.decompress(data)
            data = gzip.compress(text[:len(text) // 2])
        (cut / f.name).write_bytes(data)
    p = compare(runs["off"], cut, tmp_path / "o")
    assert p.returncode == 0, p.stderr
    res = json.loads((tmp_path / "o" / "compare.json").read_text())
    assert not res["significant"] and res["direction"] == "no gain"
    assert any("because AFTER has no analysed step" in r for r in res["refusals"])
    rows = read(tmp_path / "o" / "compare.csv")
    assert not [r for r in rows if r["section"] in ("program", "instruction", "line")]


@pytest.mark.parametrize("case", ["missing", "same", "unusable"])
def test_bad_input_is_one_sentence(pairs, tmp_path, case):
    _, runs = pairs
    bad = tmp_path / "bad" / "plugins" / "profile" / "r"
    bad.mkdir(parents=True)
    (bad / "h.trace.json.gz").write_bytes(b"not gzip")
    before, after = {"missing": (runs["off"], tmp_path / "nowhere"),
                     "same": (runs["off"], runs["off"]),
                     "unusable": (runs["off"], bad)}[case]
    if case == "same":
        compare(before, tmp_path / "nowhere", tmp_path / "o")  # investigates BEFORE once
        before = after = tmp_path / "o" / "before"
    p = compare(before, after, tmp_path / "o2")
    lines = [ln for ln in p.stderr.splitlines() if ln.strip() and "…" not in ln]
    assert p.returncode == 1 and len(lines) == 1 and lines[0].startswith("compare: "), p.stderr
    assert "Traceback" not in p.stderr
    assert not (tmp_path / "o2" / "compare.csv").exists()


def test_a_slow_host_fixed_host_by_host(tmp_path):
    """Three hosts, host 1 planted 1.5x slower, then the same run without it: each host compared
    in its own folder (host 1 changed, the others within the spread), the run's step time, the
    slowest host's per step, down by a third (within 1%)."""
    from capgen.generate import generate_hosts
    sc = dataclasses.replace(SCENARIOS["nvidia-device-bound"], gpus=2, steps=3)
    slow = generate_hosts(sc, tmp_path / "slow", hosts=3, slow_host=1, slow_factor=1.5)
    fixed = generate_hosts(sc, tmp_path / "fixed", hosts=3, slow_host=None)
    p = compare(slow[0].run_dir, fixed[0].run_dir, tmp_path / "o")
    assert p.returncode == 0, p.stderr
    res = json.loads((tmp_path / "o" / "compare.json").read_text())
    b, a = (res["figures"][f"step_time_{s}_us"]["value"] for s in ("before", "after"))
    assert a / b == pytest.approx(1 / 1.5, rel=0.01) and res["significant"]
    assert {h["host"]: h["significant"] for h in res["hosts"]} == {
        "gen-host-0": False, "gen-host-1": True, "gen-host-2": False}
    for h in ("gen-host-0", "gen-host-1", "gen-host-2"):
        assert (tmp_path / "o" / h / "compare.csv").is_file()
    # a run against one host's folder is refused, saying what to give instead
    q = compare(tmp_path / "o" / "before", tmp_path / "o" / "after" / "gen-host-1",
                tmp_path / "o2")
    assert q.returncode == 1 and "compare one host's folder of BEFORE" in q.stderr


def test_the_draft_section_passes_the_fact_check_and_makes_a_page(pairs, tmp_path):
    """compare_draft.md (the report's "Before and after" section) cites every figure from
    compare.csv: the fact check on the comparison's folder passes it, and fails it with one
    label changed; the page skill shows the comparison's tables."""
    folder, _, _ = run_pair(pairs, "off", "on", "cb-draft")
    draft = (folder / "compare_draft.md").read_text(encoding="utf-8")
    assert draft.startswith("## Before and after") and "<!-- judge:" in draft
    fc = [sys.executable, "-P", str(REPO / "scripts" / "factcheck.py")]
    report = tmp_path / "report.md"
    report.write_text("# Report\n\n" + draft, encoding="utf-8")
    p = subprocess.run(fc + [str(report), "--out", str(folder)], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    report.write_text("# Report\n\n" + draft.replace("(measured; compare.csv: before, "
                                                     "section=step", "(inferred; compare.csv: "
                                                     "before, section=step", 1))
    p = subprocess.run(fc + [str(report), "--out", str(folder)], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 4 and "no_label" in p.stdout
    page = tmp_path / "p.html"
    q = subprocess.run([sys.executable, "-P", str(REPO / "writing-trace-report-pages" / "scripts"
                                                  / "build_page.py"), str(folder /
                                                                          "compare_draft.md"),
                        "--scratch", str(folder), "--out", str(page)], capture_output=True,
                       text=True, timeout=120)
    assert q.returncode == 0, q.stderr
    html = page.read_text(encoding="utf-8")
    assert "Before and after: the step" in html and "prediction beside what its cause" in html


def test_a_regression_and_a_program_split_out(pairs):
    """Kernels 10% slower: counted as slower (every step after slower), 10% within 1%. The
    optimizer split out of the step into a program of its own: the train step matched by its
    module's name (its GPU time the same within 1%), the optimizer `new`."""
    _, _, res = run_pair(pairs, "dev", "dev-slow", "slow")
    b, a = (res["figures"][f"step_time_{s}_us"]["value"] for s in ("before", "after"))
    assert res["significant"] and "slower" in res["significance"]["why"]
    assert a / b == pytest.approx(1.1, abs=0.01)
    out, _, _ = run_pair(pairs, "off", "split", "split")
    progs = {r["key"]: r for r in read(out / "compare.csv") if r["section"] == "program"}
    assert progs["jit_apply_updates"]["status"] == "new"
    assert float(progs["jit_train_step"]["change_pct"]) == pytest.approx(0, abs=1)


def test_a_fusion_renamed_by_recompilation_is_matched_by_its_structure(pairs, tmp_path):
    """AFTER's ops.csv with two fusions renamed (as a recompilation renumbers them) and one of
    them 40% faster: each is matched to its BEFORE row by module, opcode and fusion fingerprint
    (`renamed`, under its new name), not listed as gone and new; two fusions of one structure
    renamed alike match neither (new, and gone)."""
    before = run_pair(pairs, "off", "on", "cb")[0] / "before"
    after = tmp_path / "after"
    shutil.copytree(before, after)
    path = after / "attribution" / "ops.csv"
    rows = read(path)
    counts = {}
    for r in rows:
        counts[r["fingerprint"]] = counts.get(r["fingerprint"], 0) + 1
    unique = [r for r in rows if r["fingerprint"] and counts[r["fingerprint"]] == 1][:2]
    fp = next(f for f, n in counts.items() if f and n > 1)
    shared = [r for r in rows if r["fingerprint"] == fp][:2]  # two renamed alike: ambiguous
    olds = [r["instruction"] for r in unique + shared]
    for r in unique + shared:
        r["instruction"] += ".renumbered"
    unique[0]["device_us"] = f"{float(unique[0]['device_us']) * 0.6:.3f}"
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    p = compare(before, after, tmp_path / "o")
    assert p.returncode == 0, p.stderr
    got = {r["key"]: r for r in read(tmp_path / "o" / "compare.csv")
           if r["section"] == "instruction"}
    for r, old in zip(unique, olds, strict=False):
        k = f"{r['module']}/{r['instruction']}/{r['opcode']}"
        assert got[k]["status"] == "renamed" and f"before named {old} " in got[k]["note"]
        assert f"{r['module']}/{old}/{r['opcode']}" not in got
    k0 = f"{unique[0]['module']}/{unique[0]['instruction']}/{unique[0]['opcode']}"
    assert float(got[k0]["change_pct"]) == pytest.approx(-40, abs=0.5)
    for r in shared:
        assert got[f"{r['module']}/{r['instruction']}/{r['opcode']}"]["status"] == "new"


def test_the_independent_generators_pair(shared, tmp_path):
    """The shared command-buffer pair of the independent generator (command buffers off, then
    on): the step periods equal its truth.json's (median of its steps' begin to the next's)
    within 1%, the difference counts, and change 1 (the host gaps) stands beside what moved."""
    base = shared / "independent-generator"
    p = compare(base / "minigpt-h100-cb-off", base / "minigpt-h100-cb-on", tmp_path / "o")
    assert p.returncode == 0, p.stderr
    res = json.loads((tmp_path / "o" / "compare.json").read_text())
    for side, case in (("before", "minigpt-h100-cb-off"), ("after", "minigpt-h100-cb-on")):
        truth = json.loads((base / case / "truth.json").read_text())
        steps = truth["steps"] if isinstance(truth, dict) else truth
        begins = [s["begin_ps"] for s in steps]
        periods = sorted((b - a) / 1e6 for a, b in zip(begins, begins[1:], strict=False))
        assert res["figures"][f"step_period_{side}_us"]["value"] == pytest.approx(
            periods[len(periods) // 2], rel=0.01)
    assert res["significant"] and res["predictions"][0]["cause"] == "host_gap"
    assert res["predictions"][0]["error_ratio"] is not None


def test_other_programs_entirely_are_said(pairs, tmp_path):
    """A training step against an op-by-op loop of other programs: said in a note (every
    program, instruction and line new or gone), the steps and host side still compared."""
    _, runs = pairs
    eager = generate(SCENARIOS["eager-op-by-op"], tmp_path / "eager")
    p = compare(runs["off"], eager.run_dir, tmp_path / "o")
    assert p.returncode == 0, p.stderr
    res = json.loads((tmp_path / "o" / "compare.json").read_text())
    assert any("share no program" in n for n in res["notes"]), res["notes"]
    rows = read(tmp_path / "o" / "compare.csv")
    assert {r["status"] for r in rows if r["section"] == "program"} <= {"new", "gone", ""}
    assert [r for r in rows if r["section"] == "step"]


def test_compare_never_writes_into_a_side_or_outside_its_folder(pairs, tmp_path):
    """--out inside a scratch folder compare.py reads is a usage error, nothing written there;
    a side's steps.csv without its step column is one sentence (once a KeyError); a run's
    hosts.csv naming a host '..' or a folder '../../escaped' writes nothing outside --out."""
    out, _, _ = run_pair(pairs, "dev", "dev-fast", "guard")
    before, after = out / "before", out / "after"
    listing = sorted(p for p in before.rglob("*"))
    p = compare(before, after, before / "cmp")
    assert p.returncode == 2 and "which compare.py only reads" in p.stderr.splitlines()[-1]
    assert sorted(before.rglob("*")) == listing
    cut = tmp_path / "cut"
    shutil.copytree(after, cut)
    rows = list(csv.reader(open(cut / "steps.csv", newline="")))
    i = rows[0].index("step")
    with open(cut / "steps.csv", "w", newline="") as fh:
        csv.writer(fh).writerows([r[:i] + r[i + 1:] for r in rows])
    p = compare(before, cut, tmp_path / "o1")
    assert p.returncode == 1 and "(no step)" in p.stderr and "Traceback" not in p.stderr
    runs = {}
    for side, folder in (("b", before), ("a", after)):
        run = tmp_path / "runs" / side / "run"
        shutil.copytree(folder, run / "x")
        with open(run / "hosts.csv", "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["host", "folder"])
            w.writerow(["..", "x"])
            w.writerow(["evil", "../../escaped"])
        runs[side] = run
    target = tmp_path / "runs" / "out" / "o2"
    p = compare(runs["b"], runs["a"], target)
    assert p.returncode == 0, p.stderr
    assert (target / "host-1" / "compare.csv").is_file()
    outside = [q for q in (tmp_path / "runs").rglob("compare.*") if target not in q.parents]
    assert not outside and not list(tmp_path.rglob("escaped"))


def test_tables_that_disagree_with_their_records_are_not_compared(pairs, tmp_path):
    """A side's steps.csv edited to disagree with the skip_stats.json written with it is one
    sentence (once +900% and 'changed'); AFTER whose trace is cut while its xplane is whole
    (reconcile.json: the trace holds less GPU time) gets no program or line per step (once its
    whole capture's GPU time was divided by its one step: +300%), said as a refusal."""
    import gzip
    out, _, _ = run_pair(pairs, "dev", "dev-fast", "agree")
    before, after = out / "before", out / "after"
    edited = tmp_path / "edited"
    shutil.copytree(after, edited)
    scale_step_durations(edited / "steps.csv", 10)
    p = compare(before, edited, tmp_path / "o1")
    assert p.returncode == 1 and "skip_stats.json" in p.stderr.splitlines()[-1], p.stderr
    assert "Traceback" not in p.stderr
    # AFTER's trace cut to its first step, its xplane whole
    _, runs = pairs
    cut = tmp_path / "cut" / "plugins" / "profile" / "r"
    cut.mkdir(parents=True)
    for f in runs["dev-fast"].iterdir():
        shutil.copy(f, cut / f.name)
    trace = next(cut.glob("*.trace.json.gz"))
    doc = json.loads(gzip.decompress(trace.read_bytes()))
    xs = sorted(e["ts"] for e in doc["traceEvents"] if e.get("ph") == "X")
    cut_at = xs[len(xs) // 3]
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("ph") != "X" or e["ts"] < cut_at]
    trace.write_bytes(gzip.compress(json.dumps(doc).encode()))
    p = compare(runs["dev"], cut, tmp_path / "o2")
    assert p.returncode == 0, p.stderr
    res = json.loads((tmp_path / "o2" / "compare.json").read_text())
    assert any("AFTER's trace holds less GPU time than its xplane" in r for r in res["refusals"])
    assert not [r for r in read(tmp_path / "o2" / "compare.csv")
                if r["section"] in ("program", "line")]
