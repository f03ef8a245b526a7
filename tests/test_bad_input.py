"""Broken and hostile input (issue 15), for every entry script that reads a capture:
capture_info, skip_stats, attribute_kernels, reconcile, swimlanes, roofline (and investigate,
which runs them all).

- The bad-input matrix: each case (an empty file, a zero-byte gzip, not gzip, gzip of something
  else, a cut gzip, JSON cut mid-array, JSON of the wrong shape, events missing fields, NaN /
  negative / 1e300 / string durations, an xplane cut at 10/50/90%, random bytes, GPU planes
  removed, the json and xplane of different captures, no capture, a missing path, a folder
  named like a file, a symbolic-link loop, a gzip bomb, hostile names) goes through the
  scripts in investigate.py's order; each answers with its documented exit code, one sentence
  on stderr when it refuses, no traceback, nothing half-written in the scratch folder, and the
  capture untouched. Two hosts in one run (one without its xplane) are a per-host pass, not a
  refusal: tests/test_per_host.py.
- Memory: the gzip bomb and the 8,000-digit ts, the peak resident set of a real `python3 -P`
  child (resource.getrusage), bounded.
- Hostile names in the CSVs read back with Python's csv module as the very same strings.
- The seeded mutation fuzzer (tests/fuzz_inputs.py): its CI share, 200 mutants by default
  (JAXTRACE_FUZZ_MUTANTS=N for more), with no traceback, hang or other failure.
"""

from __future__ import annotations

import csv
import gzip
import json
import os
import subprocess
import sys
import zlib
from pathlib import Path

import fuzz_inputs as fz
import pytest

from capgen.generate import generate
from capgen.scenarios import SCENARIOS
from conftest import REPO

RUN = "2026_01_01_00_00_00"
HOST = "h"
SCRIPTS = [name for name, _, _ in fz.ENTRY]
# the exit code of each script when the trace, the xplane or the path is what is wrong
EXPECTED = {
    "trace": {"capture_info": 0, "skip_stats": 1, "attribute_kernels": 0, "reconcile": 0,
              "swimlanes": 1, "roofline": 0},
    "xplane": {"capture_info": 0, "skip_stats": 0, "attribute_kernels": 1, "reconcile": 0,
               "swimlanes": 0, "roofline": 1},
    "path": dict.fromkeys(SCRIPTS, 1),
    "fine": dict.fromkeys(SCRIPTS, 0),
}
# Peak resident set allowed to a script refusing a gzip bomb (1 MiB of gzip, 1 GiB of zeros):
# the decompressed-size cap is 64 MiB, read in 1 MiB pieces; the interpreter is about 20 MiB.
# Before the cap it took 2.1 GB.
BOMB_RSS_MIB = 160
# ... and refusing a 45 kB trace whose one ts is an 8,000-digit string (7.8 GB before: the
# string was multiplied by 1,000,000).
DIGITS_RSS_MIB = 64


# ---------------------------------------------------------------- the seed capture

@pytest.fixture(scope="module")
def seed(tmp_path_factory):
    """nvidia-cb-partial, generated once: its trace as data and both files as bytes."""
    root = tmp_path_factory.mktemp("seed")
    r = generate(SCENARIOS["nvidia-cb-partial"], root / "cap")
    gz = Path(r.trace).read_bytes()
    return {"trace_gz": gz, "doc": json.loads(gzip.decompress(gz)),
            "xplane": Path(r.xplane).read_bytes(), "root": root}


@pytest.fixture(scope="module")
def other_xplane(tmp_path_factory):
    """The xplane of another capture (nvidia-device-bound: other timings and kernels)."""
    r = generate(SCENARIOS["nvidia-device-bound"], tmp_path_factory.mktemp("other") / "cap")
    return Path(r.xplane).read_bytes()


@pytest.fixture(scope="module")
def bomb(tmp_path_factory):
    """1 MiB of gzip holding 1 GiB of zeros."""
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = bytes(1 << 20)
    data = b"".join(c.compress(zeros) for _ in range(1024)) + c.flush()
    assert len(data) < 1.1e6
    return data


def run_folder(tmp_path, trace=None, xplane=None, trace_name=f"{HOST}.trace.json.gz") -> Path:
    d = tmp_path / "cap" / "plugins" / "profile" / RUN
    d.mkdir(parents=True)
    if trace is not None:
        (d / trace_name).write_bytes(trace)
    if xplane is not None:
        (d / f"{HOST}.xplane.pb").write_bytes(xplane)
    return d


def gz(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)


def dumps(doc) -> bytes:
    return json.dumps(doc).encode()


def with_event(seed, **fields):
    """The seed trace with fields of its first GPU kernel event set (None: removed)."""
    doc = json.loads(json.dumps(seed["doc"]))
    ev = next(e for e in doc["traceEvents"] if e.get("ph") == "X" and e["pid"] < 100)
    for k, v in fields.items():
        if v is None:
            ev.pop(k, None)
        else:
            ev[k] = v
    return gz(dumps(doc))


def xplane_without_gpu_planes(seed) -> bytes:
    from jaxperf.read import xprotos
    space = xprotos.classes()["XSpace"].FromString(seed["xplane"])
    keep = [type(p)() for p in space.planes if not p.name.startswith("/device:GPU")]
    for k, p in zip(keep, [p for p in space.planes if not p.name.startswith("/device:GPU")],
                    strict=True):
        k.CopyFrom(p)
    del space.planes[:]
    space.planes.extend(keep)
    return space.SerializeToString()


def xplane_with_gpu_00(seed) -> bytes:
    """The seed's xplane with a copy of its GPU 0 plane named /device:GPU:00."""
    from jaxperf.read import xprotos
    space = xprotos.classes()["XSpace"].FromString(seed["xplane"])
    gpu0 = next(p for p in space.planes if p.name == "/device:GPU:0")
    twin = space.planes.add()
    twin.CopyFrom(gpu0)
    twin.name = "/device:GPU:00"
    return space.SerializeToString()


def xplane_with_a_kernel_of(seed, duration_ps: int) -> bytes:
    """The seed's xplane with its first GPU kernel lasting duration_ps."""
    from jaxperf.read import xprotos
    space = xprotos.classes()["XSpace"].FromString(seed["xplane"])
    gpu0 = next(p for p in space.planes if p.name == "/device:GPU:0")
    next(ln for ln in gpu0.lines if ln.events).events[0].duration_ps = duration_ps
    return space.SerializeToString()


# ---------------------------------------------------------------- the matrix

def _case(name, bad, build, words=None):
    return pytest.param(bad, build, words, id=name)


CASES = [
    _case("empty-trace", "trace", lambda t, s, **_: run_folder(t, b"", s["xplane"]), "is empty"),
    _case("zero-byte-gzip", "trace", lambda t, s, **_: run_folder(t, gz(b""), s["xplane"]),
          "holds no data"),
    _case("not-gzip", "trace",
          lambda t, s, **_: run_folder(t, dumps(s["doc"]), s["xplane"]), "not gzip"),
    _case("gzip-of-non-json", "trace",
          lambda t, s, **_: run_folder(t, gz(b"hello, not JSON\n"), s["xplane"]),
          "not valid JSON"),
    _case("truncated-gzip", "trace",
          lambda t, s, **_: run_folder(t, s["trace_gz"][: len(s["trace_gz"]) // 2],
                                       s["xplane"]), "not a complete gzip"),
    _case("json-cut-mid-array", "trace",
          lambda t, s, **_: run_folder(t, gz(dumps(s["doc"])[:40_000]), s["xplane"]),
          "not valid JSON"),
    _case("json-wrong-shape", "trace",
          lambda t, s, **_: run_folder(t, gz(b'{"events": [1, 2]}'), s["xplane"]),
          "without a traceEvents list"),
    _case("event-missing-dur", "trace",
          lambda t, s, **_: run_folder(t, with_event(s, dur=None), s["xplane"]),
          "without 'dur'"),
    _case("event-missing-pid", "trace",
          lambda t, s, **_: run_folder(t, with_event(s, pid=None), s["xplane"]),
          "without 'pid'"),
    _case("dur-nan", "trace",
          lambda t, s, **_: run_folder(t, with_event(s, dur=float("nan")), s["xplane"]),
          "holds NaN"),
    _case("dur-infinity", "trace",
          lambda t, s, **_: run_folder(t, with_event(s, dur=float("inf")), s["xplane"]),
          "holds Infinity"),
    _case("dur-negative", "trace",
          lambda t, s, **_: run_folder(t, with_event(s, dur=-5.0), s["xplane"]), "dur is -5.0"),
    _case("dur-1e300", "trace",
          lambda t, s, **_: run_folder(t, with_event(s, dur=1e300), s["xplane"]),
          "dur is 1e+300"),
    _case("dur-string-number", "trace",
          lambda t, s, **_: run_folder(t, with_event(s, dur="12.5"), s["xplane"]),
          "not a string"),
    _case("ts-8000-digit-string", "trace",
          lambda t, s, **_: run_folder(t, with_event(s, ts="9" * 8000), s["xplane"]),
          "8,002 characters"),
    _case("pid-list", "trace",
          lambda t, s, **_: run_folder(t, with_event(s, pid=[1]), s["xplane"]),
          "pid is an array"),
    _case("correlation-id-with-a-comma", "trace",
          lambda t, s, **_: run_folder(t, with_event(s, args={"correlation_id": "1,2"}),
                                       s["xplane"]), "expected a decimal integer"),
    _case("args-list", "trace",
          lambda t, s, **_: run_folder(t, with_event(s, args=[1]), s["xplane"]),
          "args is an array"),
    _case("deep-nesting", "trace",
          lambda t, s, **_: run_folder(t, gz(b"[" * 100_000 + b"]" * 100_000), s["xplane"]),
          "nests JSON more than"),
    _case("random-bytes-trace", "trace",
          lambda t, s, **_: run_folder(t, os.urandom(5000), s["xplane"]), "not gzip"),
    _case("invalid-utf8-name", "trace",
          lambda t, s, **_: run_folder(
              t, gz(dumps(s["doc"]).replace(b'"name": "', b'"name": "\xff', 1)), s["xplane"]),
          "not UTF-8"),
    _case("second-gpu-0-process", "trace",
          lambda t, s, **_: run_folder(t, gz(dumps({**s["doc"], "traceEvents": s["doc"][
              "traceEvents"] + [{"ph": "M", "pid": 99, "name": "process_name",
                                 "args": {"name": "/device:GPU:0"}}]})), s["xplane"]),
          "names two processes for GPU 0"),
    # one ordinal written two ways is the same GPU twice (it vanished from the tables before)
    _case("gpu-00-process", "trace",
          lambda t, s, **_: run_folder(t, gz(dumps({**s["doc"], "traceEvents": s["doc"][
              "traceEvents"] + [{"ph": "M", "pid": 99, "name": "process_name",
                                 "args": {"name": "/device:GPU:00"}}]})), s["xplane"]),
          "names two processes for GPU 0"),
    _case("gpu-00-plane", "xplane",
          lambda t, s, **_: run_folder(t, s["trace_gz"], xplane_with_gpu_00(s)),
          "holds two planes for /device:GPU:00 (GPU 0)"),
    # within the readers' 64-bit bound, but longer than the profile: 11.6 days in a 2 ms capture
    # (negative idle figures in steps.csv before)
    _case("kernel-outlasts-the-trace", "trace",
          lambda t, s, **_: run_folder(t, with_event(s, dur=1e12), s["xplane"]),
          "outlasts the profile that recorded it"),
    _case("kernel-outlasts-the-xplane", "xplane",
          lambda t, s, **_: run_folder(t, s["trace_gz"], xplane_with_a_kernel_of(s, 10**18)),
          "outlasts the profile that recorded it"),
    _case("gzip-bomb", "trace", lambda t, s, bomb, **_: run_folder(t, bomb, s["xplane"]),
          "gzip bomb"),
    _case("empty-xplane", "xplane", lambda t, s, **_: run_folder(t, s["trace_gz"], b""),
          "is empty"),
    _case("xplane-cut-10", "xplane",
          lambda t, s, **_: run_folder(t, s["trace_gz"], s["xplane"][: len(s["xplane"]) // 10]),
          "not a readable XSpace"),
    _case("xplane-cut-50", "xplane",
          lambda t, s, **_: run_folder(t, s["trace_gz"], s["xplane"][: len(s["xplane"]) // 2]),
          "not a readable XSpace"),
    _case("xplane-cut-90", "xplane",
          lambda t, s, **_: run_folder(t, s["trace_gz"],
                                       s["xplane"][: len(s["xplane"]) * 9 // 10]),
          "not a readable XSpace"),
    _case("random-bytes-xplane", "xplane",
          lambda t, s, **_: run_folder(t, s["trace_gz"], bytes(range(256)) * 20), None),
    _case("gpu-planes-removed", "xplane",
          lambda t, s, **_: run_folder(t, s["trace_gz"], xplane_without_gpu_planes(s)), None),
    _case("no-capture", "path", lambda t, s, **_: _mkdir(t / "empty"), "no capture under"),
    _case("missing-path", "path", lambda t, s, **_: t / "nowhere", "does not exist"),
    _case("folder-named-like-a-file", "path",
          lambda t, s, **_: _mkdir(t / "x" / f"{HOST}.trace.json.gz"), "named like a capture"),
    _case("symlink-loop", "path", lambda t, s, **_: _loop(t), "leads nowhere"),
    _case("different-captures", "fine",
          lambda t, s, other_xplane, **_: run_folder(t, s["trace_gz"], other_xplane), None),
]


def _mkdir(p: Path) -> Path:
    p.mkdir(parents=True)
    return p


def _loop(t) -> Path:
    a = t / f"{HOST}.trace.json.gz"
    a.symlink_to(a)
    return a


def _sentence_lines(script: str, err: str) -> list[str]:
    """stderr's lines that are not notes (capture_inputs' run choice, the reader's repairs)."""
    return [ln for ln in err.strip().splitlines()
            if ln.strip() and ": note: " not in ln and not ln.startswith(f"{script}: note")]


@pytest.mark.parametrize("bad, build, words", CASES)
def test_each_bad_input_is_one_sentence_and_a_documented_exit(tmp_path, seed, other_xplane,
                                                              bomb, bad, build, words):
    root = _mkdir(tmp_path / "in")
    capture = build(root, seed, bomb=bomb, other_xplane=other_xplane)
    out, logs = tmp_path / "out", tmp_path / "logs"
    logs.mkdir()
    before_input = fz.digest(root)
    said = {}
    for name, path, _ in fz.ENTRY:
        before = fz.snapshot(out)
        rc, why, _, rss, _, err, _ = fz.run_forked(fz.module(name, path),
                                                [str(capture), "--out", str(out)], logs,
                                                timeout=120, memory_mib=1024)
        after = fz.snapshot(out)
        outcome, detail = fz.classify(rc, why, err, before, after, out, name)
        assert outcome not in fz.FAILURES, (name, outcome, detail, err[-2000:])
        assert rc == EXPECTED[bad][name], (name, rc, err[-1500:])
        if rc == 1:
            lines = _sentence_lines(name, err)
            assert len(lines) == 1 and lines[0].startswith(f"{name}: "), (name, err)
            assert after == before  # nothing written, nothing half-written
            said[name] = lines[0]
    assert fz.digest(root) == before_input  # the capture untouched
    if words:
        assert said and all(words in s for s in said.values()), said


def test_gpu_planes_removed_is_not_a_cpu_capture(tmp_path, seed):
    """The instance: an xplane whose GPU planes were removed was reported as a CPU capture with
    100% exact matches (its host launch calls taken for XLA:CPU thunks)."""
    d = run_folder(tmp_path, None, xplane_without_gpu_planes(seed))
    p = _run("attribute_kernels", d, tmp_path / "out")
    assert p.returncode == 1
    assert "GPU runtime calls on /host:CPU" in p.stderr and "not a CPU capture" in p.stderr
    assert not (tmp_path / "out" / "attribution").exists()
    p = _run("capture_info", d, tmp_path / "out")
    assert p.returncode == 0
    info = json.loads((tmp_path / "out" / "capture_info.json").read_text())
    from jaxperf.read import xplane_reader
    host = xplane_reader.load_space(d / f"{HOST}.xplane.pb").plane("/host:CPU")
    calls = sum(1 for ln in host.lines for e in ln.events() if "correlation_id" in e.stats)
    assert calls > 50
    assert info["cpu_thunk_events"] == 0 and info["host"]["gpu_runtime_calls"] == calls
    assert any("GPU runtime calls" in r for r in info["refusals"])
    assert f"GPU runtime calls: {calls} on /host:CPU" in p.stdout


def test_a_flipped_hlo_byte_is_a_refusal_for_that_program(tmp_path, seed):
    """The instance: one flipped byte in an HLO blob crashed attribute_kernels.py (DecodeError)
    and made capture_info.py reject the capture. Now the program is unreadable: a refusal in
    step 0; step 4, whose only program it is, says so in one sentence."""
    from jaxperf.read import xprotos
    space = xprotos.classes()["XSpace"].FromString(seed["xplane"])
    md = next(p for p in space.planes if p.name == "/host:metadata")
    st = next(s for k in sorted(md.event_metadata) for s in md.event_metadata[k].stats
              if s.WhichOneof("value") == "bytes_value")
    blob = bytearray(st.bytes_value)
    blob[3] ^= 0x80  # the first field's length: the proto no longer parses
    st.bytes_value = bytes(blob)
    d = run_folder(tmp_path, seed["trace_gz"], space.SerializeToString())
    p = _run("capture_info", d, tmp_path / "out")
    assert p.returncode == 0, p.stderr
    info = json.loads((tmp_path / "out" / "capture_info.json").read_text())
    assert [(r["error"] is not None, r["parses"]) for r in info["programs"]] == [(True, False)]
    assert info["refusals"] == [f"cannot read program {info['programs'][0]['entry']} because "
                                f"its HLO proto does not parse ({info['programs'][0]['error']})"]
    p = _run("attribute_kernels", d, tmp_path / "out", "--no-xprof")
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert "no program in" in p.stderr and "program 17: its HLO proto does not parse" in p.stderr
    assert not (tmp_path / "out" / "attribution").exists()
    assert not [f for f in (tmp_path / "out").iterdir()
                if f.name.startswith(".") and f.name != ".handoff"]  # step 0's hand-off


def test_the_json_and_xplane_of_different_captures_fail_the_check(tmp_path, seed,
                                                                   other_xplane):
    """Both files readable, from two captures of one program: step 0 counts the same events
    per GPU (its check compares counts), and step 2's json = xplane duration check fails, which
    puts the pair on the trust list; both exit 0."""
    d = run_folder(tmp_path, seed["trace_gz"], other_xplane)
    out = tmp_path / "out"
    assert _run("capture_info", d, out).returncode == 0
    assert _run("reconcile", d, out).returncode == 0
    rows = {r["check"]: r["status"] for r in _read(out / "reconciliation.csv")
            if r["check"].startswith("gpu_events_json_vs_xplane") and r["stream"] == "13"}
    assert rows == {"gpu_events_json_vs_xplane_count": "pass",
                    "gpu_events_json_vs_xplane_duration": "fail"}


def test_a_failed_attribution_names_the_users_file_and_leaves_nothing(tmp_path, seed):
    """The instance: failing runs left attribution/xplane/<copy> and named the copy."""
    d = run_folder(tmp_path, seed["trace_gz"], seed["xplane"][: len(seed["xplane"]) // 2])
    out = tmp_path / "out"
    p = _run("attribute_kernels", d, out)
    assert p.returncode == 1
    assert str(d / f"{HOST}.xplane.pb") in p.stderr and "attribution/xplane" not in p.stderr
    assert not out.exists() or not list(out.rglob("*"))


def test_an_unwritable_scratch_folder_is_one_sentence(tmp_path, seed):
    d = run_folder(tmp_path, seed["trace_gz"], seed["xplane"])
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    for name in ("skip_stats", "capture_info", "attribute_kernels", "reconcile", "swimlanes"):
        p = _run(name, d, blocker / "out")
        assert p.returncode == 1, (name, p.stderr)
        assert "Traceback" not in p.stderr
        assert len(_sentence_lines(name, p.stderr)) == 1, (name, p.stderr)


def test_investigate_on_bad_input(tmp_path, seed):
    """The runner: a path that leads nowhere is its one sentence and exit 1; a broken trace is
    a step that could not run (exit 0, on the trust list), no traceback in any step's log."""
    p = subprocess.run([sys.executable, "-P", str(fz.INVESTIGATE), str(tmp_path / "nowhere"),
                        "--out", str(tmp_path / "o1"), "--no-xprof"],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 1 and p.stderr.strip().splitlines()[-1].startswith("capture_info: ")
    # a sentence past 400 characters (a long path) is printed whole: it is what the user is told
    deep = tmp_path / ("d" * 200) / ("e" * 200) / "nowhere"
    p = subprocess.run([sys.executable, "-P", str(fz.INVESTIGATE), str(deep), "--out",
                        str(tmp_path / "o3"), "--no-xprof"], capture_output=True, text=True,
                       timeout=600)
    said = (tmp_path / "o3" / "logs" / "capture_info.txt").read_text().strip().splitlines()[-1]
    assert p.returncode == 1 and len(said) > 400 and p.stderr.strip().splitlines()[-1] == said
    assert "step 0 ended (exit 1, " in p.stderr
    d = run_folder(tmp_path, with_event(seed, dur=-1.0), seed["xplane"])
    out = tmp_path / "o2"
    p = subprocess.run([sys.executable, "-P", str(fz.INVESTIGATE), str(d), "--out", str(out),
                        "--no-xprof"], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    logs = "".join(f.read_text() for f in (out / "logs").glob("*.txt"))
    assert "Traceback" not in logs and "dur is -1.0" in logs
    failed = [r["item"] for r in _read(out / "trust.csv") if r["kind"] == "step_failed"]
    assert "step 1 (skip_stats) did not run or failed" in failed


# ---------------------------------------------------------------- memory

WRAPPER = ("import resource, subprocess, sys; p = subprocess.run(sys.argv[1:], "
           "capture_output=True, text=True); sys.stderr.write(p.stderr); "
           "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, p.returncode)")


def _measured(script: Path, capture: Path, out: Path) -> tuple[int, float, str]:
    """(exit code, peak resident set MiB, stderr) of `python3 -P script capture --out out`,
    from getrusage of the child (the wrapper runs nothing else)."""
    p = subprocess.run([sys.executable, "-c", WRAPPER, sys.executable, "-P", str(script),
                        str(capture), "--out", str(out)], capture_output=True, text=True,
                       timeout=600)
    kib, rc = p.stdout.split()
    return int(rc), int(kib) / 1024, p.stderr


@pytest.mark.parametrize("name", ["skip_stats", "capture_info"])
def test_a_gzip_bomb_is_refused_in_bounded_memory(tmp_path, bomb, name):
    d = run_folder(tmp_path, bomb)
    rc, mib, err = _measured(dict((n, p) for n, p, _ in fz.ENTRY)[name], d, tmp_path / "out")
    assert rc == 1 and "gzip bomb" in err
    assert mib < BOMB_RSS_MIB, f"{name} peaked at {mib:.0f} MiB on the bomb"


def test_an_8000_digit_ts_is_refused_in_bounded_memory(tmp_path, seed):
    d = run_folder(tmp_path, with_event(seed, ts="9" * 8000))
    rc, mib, err = _measured(REPO / "analyzing-jax-launch-overhead" / "scripts" /
                             "skip_stats.py", d, tmp_path / "out")
    assert rc == 1 and "ts is the string" in err
    assert mib < DIGITS_RSS_MIB, f"skip_stats peaked at {mib:.0f} MiB"


# ---------------------------------------------------------------- hostile names

HOSTILE = ['<script>alert("x")</script>', "q\"u'o,te", "a,b,c", "line\nbreak", "cr\rhere",
           "tab\tx", "nul\x00x", "é 中文 🙂", "=cmd|' /C calc'!A0", "lone \ud800 surrogate"]


def _run(name, capture, out, *extra):
    path = dict((n, p) for n, p, _ in fz.ENTRY)[name]
    return subprocess.run([sys.executable, "-P", str(path), str(capture), "--out", str(out),
                           *extra], capture_output=True, text=True, timeout=600)


def _read(path):
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def test_hostile_names_read_back_from_the_csvs_as_the_same_strings(tmp_path, seed):
    from jaxperf.read import xprotos
    # the trace: each GPU kernel and launch name gets a hostile prefix
    doc = json.loads(json.dumps(seed["doc"]))
    planted = {}
    for i, ev in enumerate(e for e in doc["traceEvents"] if e.get("ph") == "X"):
        ev["name"] = HOSTILE[i % len(HOSTILE)] + ev["name"]
        planted.setdefault(ev["pid"] < 100, set()).add(ev["name"])
    # the xplane: each event-metadata name of the GPU plane, likewise (no lone surrogate: a
    # proto string is UTF-8)
    space = xprotos.classes()["XSpace"].FromString(seed["xplane"])
    proto_hostile = [h for h in HOSTILE if "\ud800" not in h]
    for p in space.planes:
        if p.name.startswith("/device:GPU"):
            for k in sorted(p.event_metadata):
                md = p.event_metadata[k]
                md.name = proto_hostile[k % len(proto_hostile)] + md.name
        if p.name == "/host:metadata":  # the program's name: in summary.txt and a file name
            for k in p.event_metadata:
                p.event_metadata[k].name = "../\nevil " + p.event_metadata[k].name
    d = run_folder(tmp_path, gz(json.dumps(doc).encode("utf-8", "surrogatepass")),
                   space.SerializeToString())
    out = tmp_path / "out"
    p = _run("skip_stats", d, out)
    assert p.returncode == 0, p.stderr
    assert "lone surrogate escape" in p.stderr  # replaced by U+FFFD, and said
    kernels = {r["kernel"] for r in _read(out / "rows.csv")}
    expected = {n.replace("\ud800", "\ufffd") for n in planted[True]}
    assert kernels == expected
    launches = {r["launch_name"] for r in _read(out / "rows.csv")} - {""}
    assert launches <= {n.replace("\ud800", "\ufffd") for n in planted[False]}
    assert len(launches) > 3
    p = _run("attribute_kernels", d, out, "--no-xprof")
    assert p.returncode == 0, p.stderr
    from jaxperf.read import xplane_reader
    sp = xplane_reader.load_space(d / f"{HOST}.xplane.pb")
    names = {e.name for pl in sp.gpu_planes() for ln in pl.lines if ln.name.startswith("Stream #")
             for e in ln.events()}
    assert {r["kernel"] for r in _read(out / "attribution" / "kernels.csv")} == names
    assert {r["kernel"] for r in _read(out / "attribution" / "kernel_names.csv")} == names
    assert any("\n" in n for n in names) and any("," in n for n in names)
    # summary.txt: one line per rendered line, none split by a name's newline
    from jaxperf.analyses import attribute_kernels
    result = json.loads((out / "attribution" / "attribute_kernels.json").read_text())
    text = (out / "attribution" / "summary.txt").read_text(encoding="utf-8")
    assert text.splitlines() == attribute_kernels.render_summary(result)
    assert "../\\nevil jit_train_step(17)" in text and "\nevil" not in text
    # the program's name in a file name: nothing outside attribution/, no newline
    assert result["hlo_text"] == "__evil_jit_train_step(17).hlo.txt"
    assert (out / "attribution" / result["hlo_text"]).is_file()
    assert sorted(f.name for f in tmp_path.iterdir()) == ["cap", "out"]
    # the other tables that carry names read back whole
    for table in ("gaps.csv", "streams.csv", "steps.csv"):
        rows = _read(out / table)
        with open(out / table, newline="", encoding="utf-8") as fh:
            width = len(next(csv.reader(fh)))
        assert all(len(r) == width and None not in r for r in rows)


# ---------------------------------------------------------------- the fuzzer

CI_MUTANTS = int(os.environ.get("JAXTRACE_FUZZ_MUTANTS", "200"))


def test_mutants_are_made_again_from_their_number(seed):
    seeds = [fz.Seed("cb", seed["trace_gz"], gzip.decompress(seed["trace_gz"]).decode(),
                     seed["xplane"])]
    for i in (0, 7, 123):
        a, b = fz.make_mutant(i, "s", seeds), fz.make_mutant(i, "s", seeds)
        assert (a.desc, a.files) == (b.desc, b.files)
    kinds = {fz.make_mutant(i, "s", seeds).kind for i in range(40)}
    assert kinds == {"trace", "xplane"}


def test_the_fuzzer_finds_no_traceback_hang_or_leftover(tmp_path):
    """The CI share of the campaign (bench/RESULTS.md holds a 5,000-mutant one, XProf on):
    seeds are the generated nvidia-cb-partial capture and, where ../shared is present, the
    MI300X gemm; --no-xprof keeps it under a minute (the matrix above runs XProf)."""
    report = fz.campaign(CI_MUTANTS, "ci", work=tmp_path,
                         opts=fz.Options(timeout=120, memory_mib=1024, no_xprof=True))
    assert report.mutants == CI_MUTANTS
    assert report.failed == 0, "\n".join(report.render())
    # the mutants reach both answers: some are refused, most of the scripts' runs still work
    assert report.counts.get("refused", 0) > CI_MUTANTS // 4
    assert report.counts.get("ok", 0) > CI_MUTANTS
    assert set(report.by_script) == set(SCRIPTS)



@pytest.mark.parametrize("mutant", [26, 1475])
def test_xprof_on_a_flipped_tpu_xplane_leaves_no_file_that_is_not_json(tmp_path, mutant):
    """Mutants of a real TPU capture (probe named_steps, campaign seed 53, XProf on) whose
    flipped bits XProf's hlo_stats turns into no JSON: step 4 keeps no such file for step 5
    (it had written the empty answer as attribution/xplane/hlo_stats.json) and says why."""
    run = next((REPO / "tests" / "data" / "tpu-probes" / "named_steps").glob("plugins/profile/*"))
    report = fz.campaign(1, "53", seeds=[fz.load_seed(run, run.name)], work=tmp_path,
                         opts=fz.Options(timeout=120, memory_mib=1024), start=mutant)
    assert report.failed == 0, "\n".join(report.render())

def test_a_closed_output_pipe_is_not_a_traceback(tmp_path):
    """`script ... | head -c 1`: the reader leaves before the script has printed; the files are
    written, the script says nothing more and exits 141 (as for SIGPIPE), no traceback. The
    scripts in investigate.py's order, into one scratch folder (roofline reads step 4)."""
    example = REPO / "examples" / "minigpt-h100-2gpu-cb"
    for name, path, _ in fz.ENTRY:
        p = subprocess.run(["bash", "-c", f'"{sys.executable}" -P "{path}" "{example}" --out '
                            f'"{tmp_path}" | (exec 0<&-; true); exit "${{PIPESTATUS[0]}}"'],
                           capture_output=True, text=True, timeout=300)
        assert "Traceback" not in p.stderr and "Exception ignored" not in p.stderr, \
            (name, p.stderr)
        assert p.returncode in (0, 141), (name, p.returncode, p.stderr)
    for f in ("capture_info.json", "skip_stats.json", "rows.csv", "attribution/kernels.csv",
              "reconcile.json", "swimlanes.svg", "roofline.json"):
        assert (tmp_path / f).is_file(), f  # every file written, whatever the pipe did


@pytest.mark.parametrize("script, option", [
    ("scripts/investigate.py", ["--step-limit", "nan"]),
    ("scripts/investigate.py", ["--step-limit", "-1"]),
    ("scripts/investigate.py", ["--step-limit", "inf"]),
    ("scripts/investigate.py", ["--step-limit", "1e308"]),
    ("scripts/investigate.py", ["--step-limit", "1_0"]),
    ("scripts/swimlanes.py", ["--start", "nan"]),
    ("scripts/swimlanes.py", ["--end", "-inf"]),
    ("scripts/swimlanes.py", ["--step", "-1"]),
    ("scripts/attribute_kernels.py", ["--program", "-3"]),
    ("analyzing-jax-launch-overhead/scripts/skip_stats.py", ["--jobs", "0"]),
    ("analyzing-jax-launch-overhead/scripts/skip_stats.py", ["--jobs", "99999999999"]),
])
def test_an_option_value_out_of_its_range_is_a_usage_error(tmp_path, script, option):
    """Checked as the command line is parsed: exit 2 with one sentence naming the option, before
    anything is read or written (a NaN or negative limit once ended every step at once)."""
    p = subprocess.run([sys.executable, "-P", str(REPO / script), str(tmp_path / "none"),
                        "--out", str(tmp_path / "out"), *option], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2, p.stderr
    assert f"argument {option[0]}" in p.stderr.splitlines()[-1]
    assert "Traceback" not in p.stderr and not (tmp_path / "out").exists()
