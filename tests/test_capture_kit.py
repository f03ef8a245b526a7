"""The real-GPU capture kit, dry-run on the CPU: one mode, one step, packed and readable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile

from conftest import REPO
from jaxperf.read import xplane_reader
from tracekit import trace_reader


def test_kit_dry_run_packs_a_readable_capture(tmp_path):
    out = tmp_path / "out"
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    r = subprocess.run([sys.executable, str(REPO / "tests" / "fixtures" / "capture_gpu.py"),
                        "--out", str(out), "--modes", "off", "--steps", "1", "--allow-cpu"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    archive = out / "minigpt-cpu-off.tar.xz"
    with tarfile.open(archive) as tar:
        names = sorted(tar.getnames())
        tar.extractall(tmp_path / "x", filter="data")
    run = "plugins/profile/2026_01_01_00_00_00"
    assert names == ["kit.json", f"{run}/minigpt-gpu.trace.json.gz",
                     f"{run}/minigpt-gpu.xplane.pb"]
    kit = json.loads((tmp_path / "x" / "kit.json").read_text())
    assert (kit["mode"], kit["steps"], kit["platform"]) == ("off", 1, "cpu")
    assert kit["xla_flags"].endswith("--xla_gpu_enable_command_buffer=")
    space = xplane_reader.load_space(tmp_path / "x" / run / "minigpt-gpu.xplane.pb")
    assert any(n.startswith("jit_train_step(") for n, _ in space.hlo_protos().values())
    steps = [e for ln in space.plane("/host:CPU").lines for e in ln.events()
             if "step_num" in e.stats]
    assert [e.stats["step_num"] for e in steps] == [0]
    trace_reader.load_trace(tmp_path / "x" / run / "minigpt-gpu.trace.json.gz")
    summary = json.loads((out / "kit-summary.json").read_text())
    assert [s["mode"] for s in summary] == ["off"]


def test_kit_refuses_without_a_gpu(tmp_path):
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    r = subprocess.run([sys.executable, str(REPO / "tests" / "fixtures" / "capture_gpu.py"),
                        "--out", str(tmp_path), "--modes", "default", "--steps", "1"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 1 and "no GPU here" in r.stderr
