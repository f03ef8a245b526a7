"""Every script runs under `python3 -P` from a checkout and from an install, in a scratch folder;
the installed skills are named after their folders; bad input gives one sentence, never a trace."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, layout_text

SKILL_DIRS = {"investigating-jax-traces": REPO,
              "analyzing-jax-launch-overhead": REPO / "analyzing-jax-launch-overhead",
              "writing-trace-report-pages": REPO / "writing-trace-report-pages"}
GEMM_RUN = ("tracelens-amd-rocm/mi300x-jax0.8-gemm/plugins/profile/2026_02_20_13_54_10")


def _run(args, cwd, python=sys.executable, flags=("-P",)):
    return subprocess.run([python, *flags, *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def _install(tmp_path, link):
    dest = tmp_path / ("links" if link else "copies")
    r = _run([REPO / "install_skills.py", dest] + (["--link"] if link else []), tmp_path)
    assert r.returncode == 0, r.stderr
    return dest


def _frontmatter(skill_md: Path) -> dict:
    text = skill_md.read_text()
    m = re.match(r"^---\n(.*?)\n---\n", text, re.S)
    assert m, f"{skill_md} has no frontmatter"
    out = {}
    for line in m.group(1).splitlines():
        key, _, value = line.partition(":")
        out[key.strip()] = value.strip()
    return out


@pytest.mark.parametrize("link", [False, True], ids=["copies", "links"])
def test_install_places_three_skills_named_after_their_folders(tmp_path, link):
    dest = _install(tmp_path, link)
    assert sorted(p.name for p in dest.iterdir()) == sorted(SKILL_DIRS)
    for name in SKILL_DIRS:
        fm = _frontmatter(dest / name / "SKILL.md")
        assert fm["name"] == name
        assert set(fm) <= {"name", "description", "license", "compatibility", "metadata",
                           "allowed-tools"}
        assert 0 < len(fm["description"]) <= 1024 and "Use when" in fm["description"]
        # the stricter rules of agents' skill uploaders: no angle brackets (read as XML tags)
        # anywhere in the frontmatter, a lowercase-hyphen name without reserved words
        assert not re.search(r"[<>]", fm["description"] + fm["name"]), name
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", fm["name"]) and len(fm["name"]) <= 64
        assert not re.search(r"anthropic|claude", fm["name"])
        assert len((dest / name / "SKILL.md").read_text().splitlines()) < 500
    root = dest / "investigating-jax-traces"
    assert (root / "scripts" / "capture_info.py").is_file()
    assert (root / "references" / "scratch-layout.md").is_file()
    assert not (root / "tests").exists() and not (root / "analyzing-jax-launch-overhead").exists()
    # the spec's cross-skill path resolves in the install
    assert (root / ".." / "analyzing-jax-launch-overhead" / "scripts" / "tracekit"
            / "trace_reader.py").is_file()
    # a second install refuses to overwrite, --force replaces
    r = _run([REPO / "install_skills.py", dest], tmp_path)
    assert r.returncode == 1 and "pass --force" in r.stderr
    r = _run([REPO / "install_skills.py", dest, "--force"], tmp_path)
    assert r.returncode == 0


def test_checkout_skill_md_names_match_folders():
    for name, folder in SKILL_DIRS.items():
        if folder != REPO:
            assert _frontmatter(folder / "SKILL.md")["name"] == folder.name == name
    assert _frontmatter(REPO / "SKILL.md")["name"] == "investigating-jax-traces"


def _capture_info_paths(tmp_path):
    yield "checkout", REPO / "scripts" / "capture_info.py"
    for link in (False, True):
        dest = _install(tmp_path, link)
        yield ("links" if link else "copies"), \
            dest / "investigating-jax-traces" / "scripts" / "capture_info.py"


def test_capture_info_runs_from_checkout_and_installs(tmp_path, shared):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    run = shared / GEMM_RUN
    before = sorted((p.name, p.stat().st_mtime_ns) for p in run.iterdir())
    outputs = {}
    for where, script in _capture_info_paths(tmp_path):
        r = _run([script, run], scratch)
        assert r.returncode == 0, (where, r.stderr)
        outputs[where] = r.stdout
    assert len(set(outputs.values())) == 1
    out = outputs["checkout"]
    assert "GPU 0: 2 lines, 54 events in the xplane; 54 events in the trace; agree" in out
    assert "  line 16 'Stream #16(Kernel)': 42 events" in out
    assert "host: 5 lines, 3728 events in the xplane; 3566 in the trace" in out
    assert "programs: 16" in out
    assert "  jit_dot(5): module jit_dot, 4 computations, 10 instructions" in out
    # capture_info writes its inventory as data, and nothing else but its hand-off to step 2
    assert sorted(p.name for p in scratch.iterdir()) == [".handoff", "capture_info.json"]
    assert sorted(p.name for p in (scratch / ".handoff").iterdir()) == [
        "capture.json", "xplane_streams.json"]  # the folder's claim, and step 2's hand-off
    import json
    inv = json.loads((scratch / "capture_info.json").read_text())
    assert inv["checks"] == [{"name": "GPU events per device: json = xplane", "device": 0,
                              "status": "pass", "xplane": 54, "trace": 54}]
    assert len(inv["programs"]) == 16 and inv["refusals"] == []
    assert sorted((p.name, p.stat().st_mtime_ns) for p in run.iterdir()) == before


def test_capture_info_without_hlo_says_attribution_is_impossible(shared, tmp_path):
    run = shared / "tf-profiler-demo-v100/tf2.4-bert-multiworker-8xv100"
    r = _run([REPO / "scripts" / "capture_info.py", run], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "programs: none (no /host:metadata HLO)" in r.stdout
    assert "GPU 4: 7 lines, 3875 events in the xplane; 3875 events in the trace; agree" in r.stdout
    import json
    inv = json.loads((tmp_path / "capture_info.json").read_text())
    assert inv["programs"] == [] and inv["refusals"] == [
        "cannot attribute kernels to instructions or source lines because the xplane holds no "
        "HLO (/host:metadata)"]


def test_sibling_readers_need_only_the_standard_library(tmp_path, shared):
    """A bare interpreter (-I: isolated, -S: no site-packages) reads a trace and finds files."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "from tracekit import capture_inputs, trace_reader;"
        "f = capture_inputs.resolve(sys.argv[2]);"
        "t = trace_reader.load_trace(f.trace);"
        "print(f.host, len(t.events), sorted(t.gpu_pids()))"
    )
    base = getattr(sys, "_base_executable", sys.executable)
    r = subprocess.run([base, "-I", "-S", "-c", code,
                        str(REPO / "analyzing-jax-launch-overhead" / "scripts"),
                        str(shared / GEMM_RUN)], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "tw003 3620 [0, 1, 2, 3, 4, 5, 6, 7]"


@pytest.mark.parametrize("make, words", [
    (lambda p: p / "nothing-here", "does not exist"),
    (lambda p: _write(p / "h.xplane.pb", b"\x0a\xff\xff\xff"), "nothing readable"),
    (lambda p: _write(p / "h.trace.json.gz", b"not gzip"), "nothing readable"),
])
def test_capture_info_bad_input_exit_1_one_sentence(tmp_path, make, words):
    r = _run([REPO / "scripts" / "capture_info.py", make(tmp_path)], tmp_path)
    assert r.returncode == 1
    assert words in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert r.stdout == ""


def test_capture_info_usage_error_exit_2(tmp_path):
    r = _run([REPO / "scripts" / "capture_info.py"], tmp_path)
    assert r.returncode == 2


def _write(path, data):
    path.write_bytes(data)
    return path


def test_every_script_runs_under_P_from_a_checkout_and_installs(tmp_path):
    """capture_info.py, skip_stats.py and attribute_kernels.py, run from an empty scratch folder
    from the checkout and from copied and linked installs, give the same outputs on a GPU
    capture with command buffers (so that each has something to compute)."""
    from capgen.generate import generate
    from capgen.scenarios import SCENARIOS
    cap = generate(SCENARIOS["nvidia-cb-partial"], tmp_path / "capture").run_dir
    roots = {"checkout": (REPO / "analyzing-jax-launch-overhead", REPO)}
    for link in (False, True):
        dest = _install(tmp_path, link)
        roots["links" if link else "copies"] = (dest / "analyzing-jax-launch-overhead",
                                                dest / "investigating-jax-traces")
    results = {}
    for where, (sib, root) in roots.items():
        scratch = tmp_path / f"scratch-{where}"
        scratch.mkdir()
        r0 = _run([root / "scripts" / "capture_info.py", cap], scratch)
        r1 = _run([sib / "scripts" / "skip_stats.py", cap], scratch)
        r2 = _run([root / "scripts" / "attribute_kernels.py", cap, "--no-xprof"], scratch)
        assert (r0.returncode, r1.returncode, r2.returncode) == (0, 0, 0), \
            (where, r0.stderr, r1.stderr, r2.stderr)
        summary = (scratch / "attribution" / "summary.txt").read_text()
        results[where] = (r0.stdout, (scratch / "summary.txt").read_text(),
                          re.sub(r"(?m)^timing: .*$", "", summary),
                          (scratch / "attribution" / "kernels.csv").read_text())
    assert len(set(results.values())) == 1
    info, verdict, summary, _ = results["checkout"]
    assert "agree" in info and "DIFFER" not in info
    assert verdict.startswith("verdict: ") and "not computable" not in verdict.splitlines()[0]
    assert "match classes (all programs): exact" in summary


def _snapshot(folder: Path) -> list:
    return sorted((str(p.relative_to(folder)), p.stat().st_size, p.stat().st_mtime_ns)
                  for p in folder.rglob("*"))


def test_shared_folder_is_never_written(shared, tmp_path):
    """Every script, on every shared capture (XProf included): the capture folders are left
    exactly as they were (names, sizes, modification times)."""
    runs = sorted(shared.glob("*/*/plugins/profile/*"))
    before = {run: _snapshot(run) for run in runs}
    for i, run in enumerate(runs):
        out = tmp_path / str(i)
        _run([REPO / "scripts" / "capture_info.py", run, "--out", out], tmp_path)
        _run([REPO / "analyzing-jax-launch-overhead" / "scripts" / "skip_stats.py", run,
              "--out", out], tmp_path)
        _run([REPO / "scripts" / "attribute_kernels.py", run, "--out", out], tmp_path)
    assert {run: _snapshot(run) for run in runs} == before


def test_bench_command_measures_every_item(shared, tmp_path):
    """The benchmark runs (its numbers are recorded in bench/RESULTS.md, never asserted)."""
    r = subprocess.run([sys.executable, str(REPO / "bench" / "run.py"), str(shared / GEMM_RUN),
                        "--script", str(REPO / "scripts" / "capture_info.py"), "--repeat", "1",
                        "--xprof", "kernel_stats", "--no-append"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    items = [line.split(" | ")[4] for line in r.stdout.splitlines() if line.startswith("| ")]
    assert items == ["script capture_info.py", "floor json.load", "floor xplane parse",
                     "xprof kernel_stats"]


def test_scale_checks_measure_the_job_and_every_step(tmp_path):
    """bench/scale.py on a capture of two steps: the floors, XProf, the job and each step alone
    (its numbers are recorded in bench/RESULTS.md, never asserted)."""
    r = subprocess.run([sys.executable, str(REPO / "bench" / "scale.py"), "--sizes", "2",
                        "--work", str(tmp_path), "--no-append"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=600,
                       env={**os.environ, "PYTHONPATH": f"{REPO / 'tests'}:{REPO / 'scripts'}"})
    assert r.returncode == 0, r.stderr
    items = [line.split(" | ")[1] for line in r.stdout.splitlines() if line.startswith("| 0.125x")]
    assert items[:5] == ["floor json.load (trace)", "floor xplane parse",
                         "floor both, one process (read once)", "XProf hlo_stats",
                         "the whole job (investigate.py)"]
    assert {f"step alone: {s}.py" for s in ("skip_stats", "attribute_kernels", "swimlanes",
                                             "capture_info", "reconcile", "roofline", "changes",
                                             "trust", "report_draft", "factcheck")} <= set(items)
    assert items[-1] == "step alone: attribute_kernels.py --no-xprof"


def test_installed_skills_pass_the_agentskills_validator(tmp_path):
    """The agentskills specification's reference validator (skills-ref) accepts all three."""
    validator = Path(sys.executable).parent / "agentskills"
    assert validator.is_file(), "skills-ref is in requirements-test.txt"
    dest = _install(tmp_path, link=False)
    for name in SKILL_DIRS:
        r = subprocess.run([str(validator), "validate", str(dest / name)], capture_output=True,
                           text=True)
        assert r.returncode == 0 and r.stdout.startswith("Valid skill"), (name, r.stdout,
                                                                         r.stderr)


def test_capture_info_one_unreadable_program_is_a_refusal_for_it_alone(tmp_path):
    """A program whose HLO proto does not parse is refused by name; the rest of the xplane and
    the other programs are still inventoried."""
    import json

    from jaxperf.read import xprotos
    from xspace_builder import XSpaceBuilder
    b = XSpaceBuilder()
    b.hlo_program(xprotos.classes()["HloModuleProto"](name="jit_good", id=3))
    md = next(p for p in b.proto.planes if p.name == "/host:metadata")
    from xspace_builder import _Plane
    plane = _Plane(md)
    plane._stat_ids = {m.name: k for k, m in md.stat_metadata.items()}
    plane.event_metadata("jit_bad(4)", stats={"Hlo Proto": b"\x0a\xff\xff\xff\xff"},
                         metadata_id=4)
    gpu = b.plane("/device:GPU:0", stats={"device_vendor": "Nvidia"})
    gpu.line(7, "Stream #7(Kernel)").event("k", 0, 1000, stats={"correlation_id": ("uint", 1)})
    src = tmp_path / "in"
    src.mkdir()
    b.write(src / "h.xplane.pb")
    r = _run([REPO / "scripts" / "capture_info.py", src / "h.xplane.pb", "--out", tmp_path],
             tmp_path)
    assert r.returncode == 0, r.stderr
    assert "  jit_good(3): module jit_good, 0 computations, 0 instructions" in r.stdout
    assert "  jit_bad(4): UNREADABLE HLO (" in r.stdout
    inv = json.loads((tmp_path / "capture_info.json").read_text())
    assert [p["entry"] for p in inv["programs"] if p["error"]] == ["jit_bad(4)"]
    assert len(inv["refusals"]) == 1 and inv["refusals"][0].startswith(
        "cannot read program jit_bad(4) because its HLO proto does not parse")


def test_three_steps_in_one_process_read_each_file_once(tmp_path, shared):
    """A capture is loaded once per process: capture_info, skip_stats and attribute_kernels
    share one capture_inputs.Capture; the xplane is decoded once and the trace read once."""
    import gc

    import skip_stats
    from jaxperf.analyses import attribute_kernels, capture_info
    from tracekit import capture_inputs
    cap = capture_inputs.open_capture(shared / "independent-generator" / "minigpt-h100-cb-on")
    inv = capture_info.run(cap)
    try:
        result, _ = skip_stats.run(cap, tmp_path)
        att, _ = attribute_kernels.run(cap, tmp_path, attribute_kernels.Options(use_xprof=False))
    finally:
        gc.enable()  # the steps turn the collector off for their process
    assert cap.loads == {"space": 1, "trace": 1}
    assert [c["status"] for c in inv["checks"]] == ["pass", "pass"]
    assert result["gpu_events"] == att["figures"]["kernels"]["value"] == 1960


def test_capture_info_printout_is_a_rendering_of_its_json(shared, tmp_path):
    import json

    from jaxperf.analyses import capture_info
    r = _run([REPO / "scripts" / "capture_info.py", shared / GEMM_RUN, "--out", tmp_path],
             tmp_path)
    assert r.returncode == 0, r.stderr
    inv = json.loads((tmp_path / "capture_info.json").read_text())
    printed = [ln for ln in r.stdout.splitlines() if not ln.startswith("wrote ")]
    assert capture_info.render(inv) == printed
    documented = layout_text()
    assert all(f"`{k}`" in documented for k in inv)
