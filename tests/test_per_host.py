"""A run folder of several hosts: every entry script runs once per host in processes of its own
(per_host.py) and writes the cross-host summary (cross_host.py); --host still selects one host.

The runs are generated (capgen.generate_hosts: one capture per host in one run folder, one host
planted slow); the truth is each host's planted step times (truth/<host>/steps.csv)."""

from __future__ import annotations

import csv
import dataclasses
import gzip
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from capgen.generate import generate_hosts
from capgen.scenarios import SCENARIOS
from conftest import ROOT_SCRIPTS, SIBLING_SCRIPTS
from tracekit import capture_inputs, cross_host, per_host

ENTRY = {
    "capture_info": ROOT_SCRIPTS / "capture_info.py",
    "skip_stats": SIBLING_SCRIPTS / "skip_stats.py",
    "attribute_kernels": ROOT_SCRIPTS / "attribute_kernels.py",
    "reconcile": ROOT_SCRIPTS / "reconcile.py",
    "swimlanes": ROOT_SCRIPTS / "swimlanes.py",
    "roofline": ROOT_SCRIPTS / "roofline.py",
}
# what each step writes for one host (a file that says the step ran there)
WRITES = {"capture_info": "capture_info.json", "skip_stats": "skip_stats.json",
          "attribute_kernels": "attribution/attribute_kernels.json",
          "reconcile": "reconcile.json", "swimlanes": "swimlanes.svg",
          "roofline": "roofline.json"}


def _read(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _digest(root: Path) -> dict:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _run(script: Path, *args, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-P", str(script), *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def slow_run(tmp_path_factory):
    """Three hosts of a device-bound program on 2 GPUs each, host 1 planted 1.5x slower."""
    root = tmp_path_factory.mktemp("hosts")
    sc = dataclasses.replace(SCENARIOS["nvidia-device-bound"], gpus=2, steps=3)
    results = generate_hosts(sc, root / "cap", hosts=3, slow_host=1, slow_factor=1.5)
    return {"root": root / "cap", "run": results[0].run_dir, "results": results}


@pytest.fixture(scope="module")
def investigated(slow_run, tmp_path_factory):
    out = tmp_path_factory.mktemp("out")
    before = _digest(slow_run["root"])
    p = _run(ROOT_SCRIPTS / "investigate.py", slow_run["run"], "--out", out, "--jobs", "2")
    return {"p": p, "out": out, "before": before}


def _truth_durations(truth_dir: Path) -> dict[str, float]:
    """step -> the planted step's duration on its bounding GPU (us)."""
    by_step: dict[str, float] = {}
    for r in _read(truth_dir / "steps.csv"):
        d = (int(r["end_ps"]) - int(r["start_ps"])) / 1e6
        by_step[r["step"]] = max(by_step.get(r["step"], 0.0), d)
    return by_step


def test_investigate_analyses_each_host_and_names_the_slow_one(slow_run, investigated):
    p, out = investigated["p"], investigated["out"]
    assert p.returncode == 0, p.stderr[-2000:]
    hosts = [r.xplane.name[: -len(".xplane.pb")] for r in slow_run["results"]]
    assert hosts == ["gen-host-0", "gen-host-1", "gen-host-2"]
    summary = json.loads((out / "hosts.json").read_text())
    assert [h["host"] for h in summary["hosts"]] == hosts
    assert all(h["exit"] == 0 for h in summary["hosts"])
    sh = summary["slow_host"]
    assert sh["host"] == "gen-host-1" and sh["is_slow_host"] and sh["steps_slowest"] == 3
    # every host's own job ran to its fact-checked draft
    for h in hosts:
        assert (out / h / "report_draft.md").is_file()
        assert json.loads((out / h / "factcheck.json").read_text())["verdict"] == "pass"
        assert (out / h / "logs" / "investigate.txt").is_file()
    # the slowest host per step, and the spread, against the planted step times
    rows = _read(out / "host_steps.csv")
    assert len(rows) == 9
    truth = {h: _truth_durations(slow_run["root"] / "truth" / h) for h in hosts}
    for r in rows:
        planted = truth[r["host"]][r["step"]]
        assert float(r["dur_us"]) == pytest.approx(planted, rel=0.01), r
        assert r["slowest"] == ("1" if r["host"] == "gen-host-1" else "0")
    spreads = [max(truth[h][s] for h in hosts) - min(truth[h][s] for h in hosts)
               for s in truth[hosts[0]]]
    f = summary["figures"]["step_spread_us"]
    assert f["label"] == "measured"
    assert f["min"] == pytest.approx(min(spreads), rel=0.02)
    assert f["max"] == pytest.approx(max(spreads), rel=0.02)
    # per-host verdicts, one row per host
    table = _read(out / "hosts.csv")
    assert [r["host"] for r in table] == hosts
    assert all(r["verdict"] == "device-bound" for r in table)
    assert summary["verdicts"] == {"device-bound": hosts}
    # the same kernels, slower: the planted 1.5x, and the question it raises
    ratio = {r["host"]: r for r in table}
    assert float(ratio["gen-host-1"]["kernel_time_ratio"]) == pytest.approx(1.5, rel=0.05)
    for h in ("gen-host-0", "gen-host-2"):
        assert float(ratio[h]["kernel_time_ratio"]) == pytest.approx(1.0, abs=0.05)
    assert all(r["same_kernels"] == "yes" for r in table)
    assert [n.split(" runs")[0] for n in summary["needs_new_capture"]] == ["why gen-host-1"]
    kernels = _read(out / "host_kernels.csv")
    assert {r["host"] for r in kernels} == set(hosts) and len(kernels) % 3 == 0
    # no collective in this program: no host waits for another inside it
    assert summary["waits"].startswith("no collective time on any host")
    # the text is the rendering of the JSON, and says the slow host
    assert (out / "hosts.txt").read_text().splitlines() == cross_host.render(summary)
    assert "slow host: gen-host-1 is the slowest in 3 of 3 steps" in p.stdout
    assert investigated["before"] == _digest(slow_run["root"])  # the capture untouched


def test_each_entry_script_accepts_the_run_folder(slow_run, tmp_path):
    out = tmp_path / "s"  # one scratch folder, the steps in order (roofline reads step 4)
    for name, script in ENTRY.items():
        p = _run(script, slow_run["run"], "--out", out)
        assert p.returncode == 0, (name, p.stdout[-1500:], p.stderr[-1500:])
        assert "Traceback" not in p.stderr
        summary = json.loads((out / "hosts.json").read_text())
        assert summary["script"] == name
        for h in ("gen-host-0", "gen-host-1", "gen-host-2"):
            assert (out / h / WRITES[name]).is_file(), (name, h)
            assert (out / h / "logs" / f"{name}.txt").is_file()
        assert "3 hosts in" in p.stderr
        # the per-host command carries --out once: the host's folder
        cmd = (out / "gen-host-0" / "logs" / f"{name}.txt").read_text().splitlines()[0]
        assert cmd.count("--out") == 1 and cmd.endswith(f"--out={out / 'gen-host-0'}"), cmd
    assert json.loads((out / "hosts.json").read_text())["slow_host"]["host"] == "gen-host-1"


def test_host_still_selects_one(slow_run, tmp_path):
    p = _run(ENTRY["skip_stats"], slow_run["run"], "--host", "gen-host-2", "--out", tmp_path)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "skip_stats.json").is_file()
    assert not (tmp_path / "hosts.json").exists() and not (tmp_path / "gen-host-2").exists()
    # a file names its host: no per-host pass either
    one = slow_run["run"] / "gen-host-0.trace.json.gz"
    p = _run(ENTRY["skip_stats"], one, "--out", tmp_path / "file")
    assert p.returncode == 0 and not (tmp_path / "file" / "hosts.json").exists()


def test_scratch_steps_run_on_each_hosts_folder(slow_run, tmp_path):
    out = tmp_path / "s"
    assert _run(ENTRY["skip_stats"], slow_run["run"], "--out", out).returncode == 0
    for script in ("changes.py", "trust.py", "report_draft.py"):
        p = _run(ROOT_SCRIPTS / script, "--out", out)
        assert p.returncode == 0, (script, p.stderr[-1500:])
        for h in ("gen-host-0", "gen-host-1", "gen-host-2"):
            assert (out / h / {"changes.py": "changes.json", "trust.py": "trust.json",
                               "report_draft.py": "report_draft.md"}[script]).is_file()
    table = _read(out / "hosts.csv")
    assert all(r["top_change_kind"] for r in table)  # changes.csv read back per host
    assert all(r["trust_items"] for r in table)


def test_a_host_that_fails_is_named_and_the_others_go_on(slow_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(slow_run["run"], run)
    bad = run / "gen-host-2.trace.json.gz"
    bad.write_bytes(gzip.compress(b'{"traceEvents": [')[:40])  # truncated
    before = _digest(run)
    out = tmp_path / "out"
    p = _run(ENTRY["skip_stats"], run, "--out", out)
    assert p.returncode == 1
    assert "Traceback" not in p.stderr + p.stdout
    table = {r["host"]: r for r in _read(out / "hosts.csv")}
    assert table["gen-host-0"]["exit"] == "0" and table["gen-host-1"]["exit"] == "0"
    assert table["gen-host-2"]["exit"] == "1"
    assert table["gen-host-2"]["error"].startswith("skip_stats: ")
    assert "gen-host-2.trace.json.gz" in table["gen-host-2"]["error"]
    summary = json.loads((out / "hosts.json").read_text())
    assert summary["slow_host"]["host"] == "gen-host-1"  # compared over the two that ran
    assert "gen-host-2: exit 1: skip_stats: " in p.stdout
    assert _digest(run) == before


def test_two_hosts_one_without_an_xplane(slow_run, tmp_path):
    """The bad-input matrix's `two hosts` case: the second host has a trace and no xplane. Each
    script runs per host; the steps that need the xplane fail for that host alone."""
    run = tmp_path / "run"
    run.mkdir()
    for f in ("gen-host-0.xplane.pb", "gen-host-0.trace.json.gz"):
        shutil.copy(slow_run["run"] / f, run / f)
    shutil.copy(slow_run["run"] / "gen-host-1.trace.json.gz", run / "other.trace.json.gz")
    needs_xplane = {"attribute_kernels", "roofline"}
    out = tmp_path / "out"  # the steps in order into one folder (roofline reads step 4)
    for name, script in ENTRY.items():
        p = _run(script, run, "--out", out)
        assert "Traceback" not in p.stderr + p.stdout, name
        table = {r["host"]: r for r in _read(out / "hosts.csv")}
        assert table["gen-host-0"]["exit"] == "0", (name, table)
        assert table["other"]["exit"] == ("1" if name in needs_xplane else "0"), (name, table)
        assert p.returncode == (1 if name in needs_xplane else 0), name
        if name in needs_xplane:
            assert "xplane" in table["other"]["error"], table["other"]


def test_folder_names_are_plain_and_distinct():
    names = per_host.folder_names(["a", "A", "..", "hosts.csv", "host-1", "ok.host_9",
                                   "-dash", "x" * 200, "Host_Kernels.CSV", "LOGS"])
    assert names["ok.host_9"] == "ok.host_9"
    for h in ("a", "A", "..", "hosts.csv", "host-1", "-dash", "x" * 200, "Host_Kernels.CSV",
              "LOGS"):
        assert names[h].startswith("host-"), h
    assert len(set(names.values())) == len(names)


def test_a_host_named_with_a_dash_or_like_a_summary_file(slow_run, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    for src, dst in (("gen-host-0", "-x"), ("gen-host-1", "host_kernels.csv")):
        for suffix in (".xplane.pb", ".trace.json.gz"):
            shutil.copy(slow_run["run"] / f"{src}{suffix}", run / f"{dst}{suffix}")
    out = tmp_path / "out"
    p = _run(ENTRY["skip_stats"], run, "--out", out)
    assert p.returncode == 0, p.stderr[-2000:]
    table = {r["host"]: r for r in _read(out / "hosts.csv")}
    assert set(table) == {"-x", "host_kernels.csv"}
    assert all(r["exit"] == "0" and r["folder"].startswith("host-") for r in table.values())
    assert json.loads((out / "hosts.json").read_text())["slow_host"]["host"] == \
        "host_kernels.csv"


def test_host_names_with_format_and_escape_characters_are_escaped_in_the_draft(slow_run,
                                                                              tmp_path):
    """Host names holding a right-to-left override, a zero-width space or a terminal escape are
    written escaped wherever a text output writes them (trace_rules.printable): hosts.txt and
    hosts_draft.md, its citations too, which the fact check matches against hosts.csv's exact
    names by the same rule; hosts.csv keeps them as the capture has them."""
    run = tmp_path / "run"
    run.mkdir()
    names = {"gen-host-0": "abc\u202egnp.exe", "gen-host-1": "b\u200bx", "gen-host-2": "c\x1b[31m"}
    for src, dst in names.items():
        for suffix in (".xplane.pb", ".trace.json.gz"):
            shutil.copy(slow_run["run"] / f"{src}{suffix}", run / f"{dst}{suffix}")
    out = tmp_path / "out"
    p = _run(ENTRY["skip_stats"], run, "--out", out)
    assert p.returncode == 0, p.stderr[-2000:]
    assert set(r["host"] for r in _read(out / "hosts.csv")) == set(names.values())
    for f in ("hosts.txt", "hosts_draft.md"):
        text = (out / f).read_text(encoding="utf-8")
        assert not any(ch in text for ch in ("\u202e", "\u200b", "\x1b")), f
        assert "abc\\u202egnp.exe" in text, f
    fc = _run(ROOT_SCRIPTS / "factcheck.py", out / "hosts_draft.md", "--out", out)
    assert fc.returncode == 0, fc.stdout + fc.stderr


def test_tables_of_an_earlier_capture_are_not_read(slow_run, tmp_path):
    """One scratch folder re-used for another run whose host 1 has a broken trace: that host's
    step-1 tables left from the first run are not taken for this run's."""
    out = tmp_path / "out"
    assert _run(ENTRY["skip_stats"], slow_run["run"], "--out", out).returncode == 0
    run2 = tmp_path / "run2"
    shutil.copytree(slow_run["run"], run2)
    (run2 / "gen-host-1.trace.json.gz").write_bytes(gzip.compress(b"not json"))
    # step 1 alone: the host's pass fails, its folder's tables are not read
    p = _run(ENTRY["skip_stats"], run2, "--out", out)
    assert p.returncode == 1
    r = json.loads((out / "hosts.json").read_text())
    h1 = next(h for h in r["hosts"] if h["host"] == "gen-host-1")
    assert h1["verdict"] is None and h1["steps"] == 0 and "its pass failed" in h1["not_read"]
    assert r["slow_host"]["host"] != "gen-host-1" and not r["slow_host"]["is_slow_host"]
    # the whole job: the host's investigate ends 0 (step 1's failure is on its trust list), and
    # the host's folder, which held the first run's tables, was emptied first (one capture per
    # folder): nothing of the first run is left to be read
    p = _run(ROOT_SCRIPTS / "investigate.py", run2, "--out", out)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "held the tables of another capture" in (out / "gen-host-1" / "logs" /
                                                    "investigate.txt").read_text()
    assert not (out / "gen-host-1" / "skip_stats.json").exists()
    r = json.loads((out / "hosts.json").read_text())
    h1 = next(h for h in r["hosts"] if h["host"] == "gen-host-1")
    assert h1["exit"] == 0 and h1["verdict"] is None, h1
    assert r["slow_host"]["host"] != "gen-host-1"


def test_a_one_host_folder_over_an_earlier_pass_is_not_fanned_out(tmp_path):
    (tmp_path / "h0").mkdir()
    (tmp_path / "hosts.json").write_text(json.dumps({"hosts": [{"host": "h0", "folder": "h0"}]}))
    assert per_host.scratch_hosts(tmp_path) == ([("h0", "h0")], "")
    (tmp_path / "capture_info.json").write_text("{}")  # a one-host run wrote here since
    assert per_host.scratch_hosts(tmp_path) is None


def test_a_killed_host_is_said_as_the_shell_says_it():
    assert per_host._exit_code(-9) == 137 and per_host._exit_code(3) == 3


def test_jobs_are_bounded_by_cores_and_memory(slow_run, monkeypatch):
    files = capture_inputs.run_hosts(slow_run["run"])
    assert files.hosts == ["gen-host-0", "gen-host-1", "gen-host-2"]
    monkeypatch.setenv("JAXTRACE_CORES", "16")  # a starter's share (tracekit.forked)
    monkeypatch.setattr(per_host, "_available_memory", lambda: 64 * 2**30)
    assert per_host.plan_jobs(files, None)[0] == 3
    monkeypatch.setattr(per_host, "_available_memory", lambda: per_host.MEMORY_BASE + 1)
    jobs, why = per_host.plan_jobs(files, None)
    assert jobs == 1 and "MiB per host" in why
    assert per_host.plan_jobs(files, 2)[0] == 2
    # one host, or a host named: no per-host pass
    assert capture_inputs.run_hosts(slow_run["run"], host="gen-host-0") is None
    assert capture_inputs.run_hosts(slow_run["run"] / "gen-host-0.xplane.pb") is None


def test_no_slow_host_when_the_slowest_changes(tmp_path):
    """Hand-made per-host folders: the slowest host alternates, so no host is called slow."""
    results = []
    for i, durs in enumerate(([100.0, 300.0, 100.0, 300.0], [300.0, 100.0, 300.0, 100.0])):
        folder = tmp_path / f"h{i}"
        folder.mkdir()
        with open(folder / "steps.csv", "w", encoding="utf-8") as fh:
            fh.write("step,device,dur_us,busy_us,period_us\n")
            for s, d in enumerate(durs):
                fh.write(f"{s},0,{d},{d / 2},{d + 10}\n")
        results.append({"host": f"h{i}", "folder": f"h{i}", "exit": 0, "seconds": 1.0})
    r = cross_host.summarise(tmp_path, results)
    assert not r["slow_host"]["is_slow_host"]
    assert r["slow_host"]["slowest_counts"] == {"h0": 2, "h1": 2}
    assert r["figures"]["step_spread_us"]["value"] == pytest.approx(200.0)
    text = "\n".join(cross_host.render(r))
    assert "no slow host: the slowest host changes from step to step" in text
    # steps on one host only are counted, not compared
    with open(tmp_path / "h1" / "steps.csv", "a", encoding="utf-8") as fh:
        fh.write("9,0,50,25,60\n")
    r = cross_host.summarise(tmp_path, results)
    assert r["steps"]["not_on_every_host"] == 1 and len(r["steps"]["compared"]) == 4


def test_processes_at_once_by_cores_and_memory(monkeypatch):
    """The cores, fewer where the estimated memory (MEMORY_PER_CAPTURE_BYTE times the capture
    plus MEMORY_BASE each) does not fit, and a sentence where not even one fits."""
    from tracekit import per_host
    monkeypatch.setenv("JAXTRACE_CORES", "8")
    per = per_host.MEMORY_BASE + per_host.MEMORY_PER_CAPTURE_BYTE * (100 << 20)
    monkeypatch.setattr(per_host, "_available_memory", lambda: 10 * per)
    assert per_host.processes_at_once(3, 100 << 20, "step") == (3, "8 cores")
    monkeypatch.setattr(per_host, "_available_memory", lambda: 2 * per + 1)
    jobs, why = per_host.processes_at_once(3, 100 << 20, "step")
    assert jobs == 2 and "MiB per step" in why and "alone" not in why
    monkeypatch.setattr(per_host, "_available_memory", lambda: per // 2)
    jobs, why = per_host.processes_at_once(3, 100 << 20, "host")
    assert jobs == 1 and why.endswith("one host alone may need more memory than is available: "
                                      "if it is killed, profile fewer steps for a smaller capture")


@pytest.fixture(scope="module")
def spanning(tmp_path_factory):
    """Eight hosts whose all-reduce spans every host (capgen cross_host), one 1.3x slower in
    compute, and the same run without it: step 1 over each."""
    root = tmp_path_factory.mktemp("spanning")
    sc = dataclasses.replace(SCENARIOS["rocm-8gpu"], work_scale=20.0, thunk_host_ps=10**6,
                             launch_ps=2 * 10**6, step_python_ps=20 * 10**6, gpus=2, steps=4)
    out = {}
    for name, slow in (("slow", 3), ("even", None)):
        run = generate_hosts(sc, root / name, hosts=8, slow_host=slow, slow_factor=1.3,
                             cross_host=True)[0].run_dir
        p = _run(SIBLING_SCRIPTS / "skip_stats.py", run, "--out", root / f"out-{name}")
        assert p.returncode == 0, p.stderr[-2000:]
        out[name] = (root / f"out-{name}", p)
    return out


def test_collectives_spanning_hosts_converge_and_the_culprit_is_named(spanning):
    """Every host's step within 1% of the others (the slow host holds them all back inside the
    all-reduce), so no slow host by step time; the culprit rule names the planted host from its
    compute and its short wait; the run without one names none."""
    folder, p = spanning["slow"]
    rows = _read(folder / "hosts.csv")
    steps = [float(r["step_us"]) for r in rows]
    assert max(steps) / min(steps) < 1.01
    summary = json.loads((folder / "hosts.json").read_text())
    assert summary["slow_host"]["is_slow_host"] is False
    c = summary["culprit"]
    assert c["host"] == "gen-host-3" and c["lead_pct"] > 20 and "the others wait for it" in c["why"]
    assert c["last_to_arrive"] == c["least_in_collectives"] == "gen-host-3"
    arrivals = {r["host"]: float(r["arrival_us"]) for r in rows}
    assert max(arrivals, key=arrivals.get) == "gen-host-3"
    assert "culprit: gen-host-3 (" in p.stdout
    even = json.loads((spanning["even"][0] / "hosts.json").read_text())["culprit"]
    assert even["host"] is None and "no single host stands out" in even["why"]
    # the run's own draft: every figure cited from hosts.csv / hosts.json, fact-checked there
    draft = (folder / "hosts_draft.md").read_text(encoding="utf-8")
    assert "holds the others back inside collectives spanning hosts: gen-host-3." in draft
    fc = _run(ROOT_SCRIPTS / "factcheck.py", folder / "hosts_draft.md", "--out", folder)
    assert fc.returncode == 0, fc.stdout + fc.stderr


def test_a_host_whose_step_1_failed_inside_its_job_is_counted_and_said(slow_run, tmp_path):
    """The whole job per host: host 2's trace is cut, so its step 1 fails while its job goes on
    (exit 0 for the host). hosts.txt counts it as failed with step 1's own sentence, and says
    no spread of step times: one host with steps is nothing to compare."""
    run = tmp_path / "run"
    shutil.copytree(slow_run["run"], run)
    (run / "gen-host-2.trace.json.gz").write_bytes(gzip.compress(b'{"traceEvents": [')[:40])
    (run / "gen-host-1.trace.json.gz").write_bytes(gzip.compress(b'{"traceEvents": [')[:40])
    out = tmp_path / "out"
    p = _run(ROOT_SCRIPTS / "investigate.py", run, "--out", out, "--jobs", "2", "--no-xprof")
    assert "Traceback" not in p.stderr + p.stdout
    text = (out / "hosts.txt").read_text()
    assert "(2 failed)" in text.splitlines()[0], text
    lines = [ln for ln in text.splitlines() if ln.startswith("  gen-host-2: ")]
    assert lines and "its step 1 failed or did not run" in lines[0], text
    assert "gen-host-2.trace.json.gz" in lines[0]
    assert "spread of step times" not in text and "1 of 3 hosts have step rows" in text


def _running_for(out: Path) -> list[str]:
    """The processes still running whose command line names `out` (/proc; a zombie has ended:
    it runs and writes nothing, and waits only for whoever adopted it to reap it)."""
    alive = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmd = (proc / "cmdline").read_bytes().decode("utf-8", "replace")
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if str(out) in cmd and state != "Z":
            alive.append(f"{proc.name} {cmd.replace(chr(0), ' ')[:200]}")
    return alive


def _terminated_midway(cmd: list, out: Path, sig=signal.SIGTERM) -> int:
    """Start `cmd` as another program would, send `sig` to it alone once a host's pass is
    under way, and return its exit code."""
    import time
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list(out.glob("**/logs/*.txt")):
        time.sleep(0.05)
    while time.monotonic() < deadline and not [
            x for x in _running_for(out) if not x.startswith(f"{p.pid} ")]:
        time.sleep(0.05)
    time.sleep(0.3)
    assert [x for x in _running_for(out) if not x.startswith(f"{p.pid} ")]  # children run
    os.kill(p.pid, sig)
    p.communicate(timeout=120)
    return p.returncode


@pytest.mark.parametrize("sig, code, hosts", [(signal.SIGTERM, 143, "all"),
                                              (signal.SIGINT, 130, "all"),
                                              (signal.SIGTERM, 143, "one")])
def test_a_signal_to_the_command_alone_leaves_no_process_running(slow_run, tmp_path, sig, code,
                                                                 hosts):
    """SIGTERM or SIGINT sent to investigate.py alone while its hosts' passes and their steps
    run (or, on one host, its steps): it exits 143 (130), no process it started outlives it,
    nothing is written later."""
    import time
    out = tmp_path / "out"
    one = ["--host", "gen-host-1"] if hosts == "one" else []
    rc = _terminated_midway([sys.executable, "-P", str(ROOT_SCRIPTS / "investigate.py"),
                             str(slow_run["run"]), "--out", str(out), "--jobs", "2",
                             "--no-xprof", *one], out, sig)
    assert rc == code
    assert not _running_for(out)
    seen = _digest(out)
    time.sleep(1.5)
    assert _digest(out) == seen


def test_compare_terminated_while_it_investigates_leaves_no_process_running(slow_run, tmp_path):
    """compare.py investigating a run of hosts (its child investigate.py, their steps):
    SIGTERM to compare.py alone ends all of them with it (once its child was killed outright
    and the steps went on writing)."""
    out = tmp_path / "cmp"
    rc = _terminated_midway([sys.executable, "-P", str(ROOT_SCRIPTS / "compare.py"),
                             str(slow_run["run"]), str(slow_run["run"]), "--out", str(out),
                             "--no-xprof"], out)
    assert rc == 143 and not _running_for(out)


@pytest.mark.parametrize("script", ["investigate.py", "compare.py"])
def test_a_second_run_into_a_folder_in_use_is_refused(slow_run, tmp_path, script):
    """A run of several hosts (investigate.py) or a comparison holds its --out folder's lock: a
    second one into it, while the first runs, is one sentence (exit 1), never a mixed folder."""
    import time
    out = tmp_path / "out"
    args = [str(slow_run["run"])] * (2 if script == "compare.py" else 1)
    cmd = [sys.executable, "-P", str(ROOT_SCRIPTS / script), *args, "--out", str(out),
           "--no-xprof"]
    first = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    lock = out / ".handoff" / "writer.lock"
    deadline = time.monotonic() + 60
    while not lock.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    second = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    first.wait(timeout=600)
    assert second.returncode == 1, second.stderr
    assert "another investigate.py or compare.py is writing into" in second.stderr
    assert first.returncode == 0 and not lock.exists()
