"""A script that needs a package the Python lacks exits 3 with the install line and writes
nothing; the standard-library steps run under that Python. The bare interpreter (-I -S: no
site-packages) stands in for a Python without the requirements."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import REPO

BARE = getattr(sys, "_base_executable", sys.executable)
EXAMPLE = REPO / "examples" / "minigpt-h100-2gpu-cb"
NEEDS = {"capture_info": REPO / "scripts" / "capture_info.py",
         "attribute_kernels": REPO / "scripts" / "attribute_kernels.py",
         "reconcile": REPO / "scripts" / "reconcile.py",
         "roofline": REPO / "scripts" / "roofline.py"}


# The stand-in holds only where the bare interpreter itself lacks protobuf (a Python built
# with it in its standard library cannot play a Python without the requirements).
pytestmark = pytest.mark.skipif(
    subprocess.run([BARE, "-I", "-S", "-c", "import google.protobuf"],
                   capture_output=True).returncode == 0,
    reason="this interpreter has protobuf without site-packages")


def bare(args, cwd, timeout=120):
    return subprocess.run([BARE, "-I", "-S", "-P", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, cwd=cwd)


@pytest.mark.parametrize("name", sorted(NEEDS))
def test_a_missing_package_is_exit_3_and_nothing_written(tmp_path, name):
    out = tmp_path / "out"
    out.mkdir()
    p = bare([NEEDS[name], EXAMPLE, "--out", out], tmp_path)
    if p.returncode == 0 and name == "capture_info":
        pytest.fail("capture_info ran without protobuf: " + p.stdout[:200])
    assert p.returncode == 3, (p.returncode, p.stderr)
    assert "Traceback" not in p.stderr and "pip install" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
    assert list(out.iterdir()) == [], list(out.rglob("*"))


def test_investigate_stops_at_step_0_with_exit_3(tmp_path):
    p = bare([REPO / "scripts" / "investigate.py", EXAMPLE, "--out", tmp_path / "out"], tmp_path)
    assert p.returncode == 3, p.stderr
    assert "pip install" in p.stderr.splitlines()[-1]


def test_the_standard_library_steps_run_under_it(tmp_path):
    """skip_stats and swimlanes need no package: the bare Python runs them."""
    out = tmp_path / "out"
    for script in (REPO / "analyzing-jax-launch-overhead" / "scripts" / "skip_stats.py",
                   REPO / "scripts" / "swimlanes.py"):
        p = bare([script, EXAMPLE, "--out", out], tmp_path)
        assert p.returncode == 0, (script.name, p.stderr)
    assert (out / "summary.txt").is_file() and (out / "swimlanes.svg").is_file()


def test_without_xprof_step_4_is_exit_3_and_step_5_says_why(tmp_path):
    """XProf runs in a child process (xprof_figures.convert): an xprof that cannot be imported
    there is still step 4's exit 3 with the install line, and step 5's note, never a traceback."""
    fake = tmp_path / "site" / "xprof"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text('raise ImportError("No module named xprof.convert")\n')
    env = dict(__import__("os").environ, PYTHONPATH=str(tmp_path / "site"))
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-P", str(NEEDS["attribute_kernels"]), str(EXAMPLE),
                        "--out", str(out)], capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 3, (p.returncode, p.stderr)
    assert p.stderr.strip().splitlines() == [
        "attribute_kernels: the xprof package is not installed (No module named xprof.convert); "
        "pip install -r requirements.txt (jax, jaxlib, xprof, protobuf, numpy)"]
    assert not (out / "attribution").exists()
    # step 5 on a step 4 that ran with --no-xprof... then asked for XProf's figures
    p = subprocess.run([sys.executable, "-P", str(NEEDS["attribute_kernels"]), str(EXAMPLE),
                        "--out", str(out), "--no-xprof"], capture_output=True, text=True,
                       timeout=300, env=env)
    assert p.returncode == 0, p.stderr
    p = subprocess.run([sys.executable, "-P", str(NEEDS["roofline"]), str(EXAMPLE),
                        "--out", str(out)], capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    import json
    xc = json.loads((out / "roofline.json").read_text())["xprof_ceiling"]
    assert "No module named xprof.convert" in xc["note"], xc
