"""capture_inputs: a file, a run folder or a log folder -> one host's files."""

from __future__ import annotations

import pytest

from tracekit.capture_inputs import CaptureError, resolve


def _run(root, name, hosts=("h",), kinds=("xplane.pb", "trace.json.gz")):
    run = root / "plugins" / "profile" / name
    run.mkdir(parents=True)
    for h in hosts:
        for k in kinds:
            (run / f"{h}.{k}").write_bytes(b"x")
    return run


def test_file_run_and_log_folder(tmp_path):
    old = _run(tmp_path, "2026_01_01_00_00_00")
    new = _run(tmp_path, "2026_02_20_13_54_10", hosts=("tw003",))
    f = resolve(tmp_path)
    assert (f.run_dir, f.host) == (new, "tw003")
    assert f.xplane == new / "tw003.xplane.pb" and f.trace == new / "tw003.trace.json.gz"
    assert len(f.notes) == 1 and "took the newest, 2026_02_20_13_54_10" in f.notes[0]
    assert resolve(tmp_path, run="2026_01_01_00_00_00").run_dir == old
    assert resolve(tmp_path / "plugins" / "profile").run_dir == new
    assert resolve(old).notes == [] and resolve(old).host == "h"
    g = resolve(old / "h.trace.json.gz")
    assert (g.xplane, g.trace) == (old / "h.xplane.pb", old / "h.trace.json.gz")


def test_dotted_host_names_and_missing_partner(tmp_path):
    run = _run(tmp_path, "GPU-multi-worker", hosts=("34.83.195.179_6003",), kinds=("xplane.pb",))
    f = resolve(run / "34.83.195.179_6003.xplane.pb")
    assert f.host == "34.83.195.179_6003" and f.trace is None


def test_timestamp_runs_sort_before_other_names(tmp_path):
    _run(tmp_path, "2030_01_01_00_00_00")
    _run(tmp_path, "manual")
    assert resolve(tmp_path).run_dir.name == "manual"


def test_several_hosts_are_listed_not_guessed(tmp_path):
    run = _run(tmp_path, "2026_01_01_00_00_00", hosts=("a", "b"))
    with pytest.raises(CaptureError, match=r"2 hosts \(a, b\); pass one host's file or --host"):
        resolve(run)
    assert resolve(run, host="b").xplane == run / "b.xplane.pb"
    assert resolve(run / "a.xplane.pb").hosts == ["a", "b"]


def _touch(path):
    path.write_text("x")
    return path


@pytest.mark.parametrize("make, kwargs, words", [
    (lambda p: p / "missing", {}, "does not exist"),
    (lambda p: _touch(p / "notes.txt"), {}, "not a capture file"),
    (lambda p: p, {}, "no capture under"),
    (lambda p: _run(p, "r1").parent.parent.parent, {"run": "r9"}, "no run named 'r9'"),
    (lambda p: _run(p, "r1"), {"host": "zz"}, "no host 'zz'"),
])
def test_bad_paths(tmp_path, make, kwargs, words):
    with pytest.raises(CaptureError, match=words):
        resolve(make(tmp_path), **kwargs)
