"""swimlanes.py (step 3): lanes and labels for every GPU x stream of the step, the straggler
planted by the generator, exact stragglers.csv values on a capture built here, escaping of
hostile names, merged bars on the 8-GPU MaxText capture, --step, --start/--end, bad input, and
every shared capture."""

from __future__ import annotations

import csv
import gzip
import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from capgen.generate import export_trace_json, generate
from capgen.scenarios import SCENARIOS
from conftest import REPO, SHARED_CAPTURES
from xspace_builder import XSpaceBuilder

SCRIPT = REPO / "scripts" / "swimlanes.py"
BARE = getattr(sys, "_base_executable", sys.executable)
SVG = "{http://www.w3.org/2000/svg}"
OUTPUTS = ("swimlanes.svg", "stragglers.csv", "swimlanes.json")
US = 1_000_000  # picoseconds
HOSTILE = "<script>alert(\"x\")</script>&'\x01]]>"


def run(capture, out, *args, cwd=None):
    """As a user runs it: a bare interpreter (no site-packages), -P."""
    return subprocess.run([BARE, "-I", "-S", "-P", str(SCRIPT), str(capture), "--out", str(out),
                           *map(str, args)], capture_output=True, text=True, timeout=600,
                          cwd=cwd)


def read(path):
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def svg_of(out):
    return ET.parse(out / "swimlanes.svg").getroot()


def classes(el):
    return set((el.get("class") or "").split())


def all_text(el):
    return "".join(el.itertext())


# ---------------------------------------------------------------- a capture built here

# (device, stream, name, start_us, dur_us, launch_start_us, launch_dur_us); steps of 100 us.
# step 0: GPU 1's last kernel waits on the host (its launch ends at 54 us, the stream is idle
#         from 40 us): GPU 1 is last by 10 us, its last stretch host_late.
# step 1: both GPUs end in their all-reduce, 0.5 us apart: a tie.
# step 2: GPU 0's last kernel runs 30 us where GPU 1's runs 20 us: GPU 0 last by 10 us, compute.
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
KERNELS = [
    (0, 7, "fusion_1", 5, 20, 1, 2), (0, 8, NCCL, 25, 15, 2, 2), (0, 7, "fusion_2", 40, 10, 20, 2),
    (1, 7, "fusion_1", 5, 25, 1, 2), (1, 8, NCCL, 30, 10, 2, 2), (1, 7, "fusion_2", 55, 5, 44, 10),
    (0, 7, "fusion_0", 102, 2, 101, 0.5), (0, 7, "fusion_1", 105, 20, 101.5, 0.5),
    (0, 8, NCCL, 125, 25, 102, 0.5),
    (1, 7, "fusion_0", 102, 2, 101, 0.5), (1, 7, "fusion_1", 105, 20, 101.5, 0.5),
    (1, 8, NCCL, 125, 25.5, 102, 0.5),
    (0, 7, "fusion_1", 205, 20, 201, 2), (0, 8, NCCL, 225, 15, 202, 2),
    (0, 7, "fusion_2", 240, 30, 220, 2),
    (1, 7, "fusion_1", 205, 20, 201, 2), (1, 8, NCCL, 225, 15, 202, 2),
    (1, 7, "fusion_2", 240, 20, 220, 2),
]
EXPECTED_STRAGGLERS = [  # stragglers.csv of that capture, exactly
    ["0", "0", "50.000", "0.000", "fusion_2", "compute", "40.000", "10.000", "0"],
    ["0", "1", "60.000", "10.000", "fusion_2", "host_late", "40.000", "20.000", "1"],
    ["1", "0", "150.000", "0.000", NCCL, "collective", "125.000", "25.000", "1"],
    ["1", "1", "150.500", "0.500", NCCL, "collective", "125.000", "25.500", "1"],
    ["2", "0", "270.000", "10.000", "fusion_2", "compute", "240.000", "30.000", "1"],
    ["2", "1", "260.000", "0.000", "fusion_2", "compute", "240.000", "20.000", "0"],
]


def build_capture(folder: Path, hostile: bool = False) -> Path:
    """Two GPUs, three annotated steps, launches on one host thread; written as XProf does
    (the trace from jaxlib's own exporter). `hostile` puts markup in a kernel name, a stream
    name, the host thread's name and a host event's name."""
    thread = f"py{HOSTILE}" if hostile else "python"
    b = XSpaceBuilder(hostnames=["tiny"])
    host = b.plane("/host:CPU")
    line = host.line(1, thread)
    line.proto.display_name = thread
    events = [("train", n * 100 * US, 100 * US, {"step_num": n}) for n in range(3)]
    events.append(("host_work" + (HOSTILE if hostile else ""), 41 * US, 12 * US, None))
    gpu_lines: dict = {}
    for i, (d, s, name, start, dur, ls, ld) in enumerate(KERNELS, 1):
        if hostile and (d, start) == (1, 55):
            name = HOSTILE
        events.append(("cuLaunchKernel", round(ls * US), round(ld * US),
                       {"correlation_id": ("uint", i), "device_id": d}))
        gpu_lines.setdefault((d, s), []).append((name, round(start * US), round(dur * US), i))
    for name, off, dur, stats in sorted(events, key=lambda e: (e[1], -e[2])):
        line.event(name, off, dur, stats=stats)
    planes = {d: b.plane(f"/device:GPU:{d}", plane_id=d, stats={"device_vendor": "Nvidia"})
              for d in (0, 1)}
    for (d, s), evs in sorted(gpu_lines.items()):
        sname = f"Stream #{s}(<i>&)" if hostile and s == 7 else f"Stream #{s}(Kernel)"
        ln = planes[d].line(s, sname)
        for name, off, dur, corr in sorted(evs, key=lambda e: e[1]):
            ln.event(name, off, dur, stats={"correlation_id": ("uint", corr)})
    run_dir = folder / "plugins" / "profile" / "2026_01_01_00_00_00"
    run_dir.mkdir(parents=True)
    data = b.serialize()
    (run_dir / "tiny.xplane.pb").write_bytes(data)
    (run_dir / "tiny.trace.json.gz").write_bytes(export_trace_json(data))
    return run_dir


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_capture(tmp_path_factory.mktemp("tiny") / "capture")


@pytest.fixture(scope="module")
def straggler(tmp_path_factory):
    """rocm-8gpu-straggler: GPU 5 planted 1.6x slower; step 1 (skip_stats.py) run by swimlanes."""
    base = tmp_path_factory.mktemp("straggler")
    r = generate(SCENARIOS["rocm-8gpu-straggler"], base / "capture")
    p = run(r.run_dir, base / "out")
    assert p.returncode == 0, p.stderr
    return r, base / "out", p


# ---------------------------------------------------------------- lanes, labels, straggler

def test_a_lane_and_a_label_for_every_gpu_stream_of_the_step(straggler):
    _, out, _ = straggler
    result = json.loads((out / "swimlanes.json").read_text())
    n = result["chosen"]["step"]
    rows = [r for r in read(out / "rows.csv") if r["step"] == str(n)]
    want = {(int(r["device"]), int(r["stream"])): r["stream_name"] for r in rows}
    assert len(want) == 24  # 8 GPUs x (compute, collective, argument-copy stream)
    critical = {int(r["device"]): int(r["critical_stream"]) for r in read(out / "steps.csv")
                if r["step"] == str(n)}
    root = svg_of(out)
    groups = {e.get("id"): e for e in root.iter(f"{SVG}g")}
    roles = {}
    for (d, s), name in want.items():
        g = groups[f"gpu{d}-s{s}"]
        label = next(t for t in g.iter(f"{SVG}text") if "lab" in classes(t))
        text = all_text(label)
        assert text.startswith(f"GPU {d}") and name in text
        roles[(d, s)] = text.split(" \u00b7 ")[2]
        assert ("critical" in text) == (critical[d] == s)
        assert ("crit" in classes(label)) == (critical[d] == s)
    # per GPU one compute, one collective and one copy stream; the compute one is critical
    assert sorted(roles.values()) == sorted(["compute", "collective", "copy"] * 8)
    assert all(roles[(d, s)] == "compute" for d, s in critical.items())
    # each launching host thread of the step has a lane, under the GPU it launches for
    threads = {r["launch_thread"] for r in rows if r["launch_thread"]}
    host = {ln["thread"] for ln in result["lanes"] if ln["kind"] == "host"}
    assert threads <= host
    # one time axis in microseconds: tick labels are increasing numbers inside the window
    ticks = [float(t.text.replace(",", "")) for t in root.iter(f"{SVG}text")
             if "small" in classes(t) and t.get("text-anchor") == "middle"]
    assert len(ticks) >= 5 and ticks == sorted(ticks)
    w = result["window"]
    assert w["start_us"] <= ticks[0] and ticks[-1] <= w["end_us"]
    assert root.get("viewBox").startswith("0 0 1600 ") and root.get("width") == "1600"


def test_the_planted_straggler_is_marked(straggler):
    r, out, p = straggler
    (defect,) = [d for d in r.defects if d["kind"] == "straggler"]
    planted = int(defect["device"])
    result = json.loads((out / "swimlanes.json").read_text())
    sg = result["straggler"]
    assert [g["device"] for g in sg["gpus"]] == [planted] and not sg["tie"]
    assert sg["sentence"].startswith(f"GPU {planted} finishes step {result['chosen']['step']} "
                                     "last")
    assert sg["gpus"][0]["last_stretch"] == "compute"  # its kernels run 1.6x slower
    root = svg_of(out)
    marks = [e for e in root.iter() if (e.get("id") or "").startswith("straggler-gpu")]
    assert [(m.get("id"), m.get("data-device")) for m in marks] == \
        [(f"straggler-gpu{planted}", str(planted))]
    assert all_text(marks[0]).startswith(f"GPU {planted} last: +")
    marked = {e.get("id") for e in root.iter(f"{SVG}g")
              if any("strag" in classes(t) for t in e.iter(f"{SVG}text"))}
    assert marked == {f"gpu{planted}-s{s}" for s in (33, 34, 35)}
    # the planted GPU finishes last in every analysed step, and nobody ties with it
    rows = read(out / "stragglers.csv")
    assert {(x["device"], x["finishes_last"]) for x in rows if x["finishes_last"] == "1"} == \
        {(str(planted), "1")}
    assert [x["step"] for x in rows if x["finishes_last"] == "1"] == ["0", "1", "2", "3"]
    assert f"straggler: {sg['sentence']}" in p.stdout


RESULT_FIELDS = {"step", "status", "capture", "inputs", "chosen", "window", "lanes", "merged",
                 "drawn", "straggler", "steps_last", "notes", "refusals", "tables"}


def test_the_svg_text_is_a_rendering_of_the_result(straggler):
    sys.path.insert(0, str(SCRIPT.parent))
    from jaxperf.analyses import swimlanes
    _, out, _ = straggler
    result = json.loads((out / "swimlanes.json").read_text())
    assert set(result) == RESULT_FIELDS and result["step"] == "swimlanes"
    assert result["chosen"]["duration_us"]["label"] == "measured"
    header = " ".join(all_text(t) for t in svg_of(out).iter(f"{SVG}text") if "hd" in classes(t))
    for line in swimlanes.render_lines(result):
        assert " ".join(line.split()) in " ".join(header.split())
    assert result["tables"]["swimlanes.svg"] == (out / "swimlanes.svg").stat().st_size
    assert result["tables"]["stragglers.csv"] == len(read(out / "stragglers.csv")) == 32
    assert result["inputs"]["step1"] == "ran"  # the folder was empty: step 1 ran first


# ---------------------------------------------------------------- exact values

def test_stragglers_csv_exact_values(tiny, tmp_path):
    p = run(tiny, tmp_path)
    assert p.returncode == 0, p.stderr
    with open(tmp_path / "stragglers.csv", newline="") as fh:
        table = list(csv.reader(fh))
    assert table[0] == ["step", "device", "end_us", "lag_us", "last_kernel", "last_stretch",
                        "stretch_start_us", "stretch_us", "finishes_last", "compared"]
    assert table[1:] == [row + ["1"] for row in EXPECTED_STRAGGLERS]
    result = json.loads((tmp_path / "swimlanes.json").read_text())
    # the median step is step 1's: the lower median of the steps followed by another (60 and
    # 50.5 us; the last, 70 us, has no period), the one step 6 takes its figures from
    assert result["chosen"]["step"] == 1 and result["chosen"]["why"].startswith(
        "step 1: the lower-median duration of the 2 complete analysed step(s) followed by "
        "another (50.500 us")
    assert run(tiny, tmp_path, "--step", "0").returncode == 0
    result = json.loads((tmp_path / "swimlanes.json").read_text())
    assert result["straggler"]["sentence"] == (
        "GPU 1 finishes step 0 last, 10.000 us after the other GPU (GPU 0); its last stretch "
        "(20.000 us from its last collective to its end) is mostly waiting for the host's "
        "launches (host_late gaps); its last kernel is fusion_2")
    assert result["straggler"]["lag_us"] == {"value": 10.0, "unit": "us", "label": "measured"}
    assert [(s["step"], s["gpus"], s["tie"]) for s in result["steps_last"]] == \
        [(0, [1], False), (1, [0, 1], True), (2, [0], False)]
    # the host lane shows the host event that ran while GPU 1 waited
    root = svg_of(tmp_path)
    tips = [t.text for t in root.iter(f"{SVG}title") if t.text]
    assert any(t.startswith("GPU 1 idle 25.000 us (host_late)") and "host_work=12.000" in t
               for t in tips)


def test_step_option_a_tie_is_said_as_a_tie(tiny, tmp_path):
    p = run(tiny, tmp_path, "--step", "1")
    assert p.returncode == 0, p.stderr
    result = json.loads((tmp_path / "swimlanes.json").read_text())
    assert result["chosen"]["why"] == "step 1, chosen by --step (50.500 us)"
    sg = result["straggler"]
    assert sg["tie"] and [g["device"] for g in sg["gpus"]] == [0, 1]
    assert sg["sentence"] == ("no straggler in step 1: all 2 GPUs finish within 5.000 us of "
                              "the last (step 1's margin: a tie; spread 0.500 us)")
    root = svg_of(tmp_path)
    assert not [e for e in root.iter() if "strag" in classes(e)]
    assert {e.get("id") for e in root.iter() if "tie" in classes(e) and e.get("id")} == \
        {"straggler-gpu0", "straggler-gpu1"}
    p = run(tiny, tmp_path, "--step", "2")
    sg = json.loads((tmp_path / "swimlanes.json").read_text())["straggler"]
    assert [g["device"] for g in sg["gpus"]] == [0] and sg["gpus"][0]["last_stretch"] == \
        "compute" and sg["gpus"][0]["stretch_us"] == 30.0


def tooltips_with(tiny, tmp_path, kernels: str) -> list[str]:
    """The drawing's tooltips of step 0 once step 4's kernels.csv (its leading columns:
    `kernels`, the rows after the header) is beside step 1's tables."""
    assert run(tiny, tmp_path).returncode == 0
    att = tmp_path / "attribution"
    att.mkdir()
    att.joinpath("kernels.csv").write_text(
        "device,stream,start_us,dur_us,kernel,instruction,match\n" + kernels)
    p = run(tiny, tmp_path, "--step", "0")
    assert p.returncode == 0, p.stderr
    return [t.text for t in svg_of(tmp_path).iter(f"{SVG}title") if t.text]


def test_kernel_tooltips_name_the_instruction_from_step_4(tiny, tmp_path):
    tips = tooltips_with(tiny, tmp_path, "0,7,40.000,10.000,fusion_2,fusion.2,exact\n"
                                         "1,8,30.000,10.000,x,all-reduce.1,order\n")
    (f2,) = [t for t in tips if t.startswith("fusion_2\n") and "at 40.000 us" in t]
    assert f2.splitlines()[1] == "instruction: fusion.2 (exact)"
    assert any(t.startswith(NCCL) and "instruction: all-reduce.1 (order)" in t for t in tips)
    result = json.loads((tmp_path / "swimlanes.json").read_text())
    assert result["inputs"] == {"step1": "read", "attribution": {
        "file": "attribution/kernels.csv", "kernels_alone": 6, "joined": 2}}


def test_a_kernel_name_holding_a_newline_still_joins(tiny, tmp_path):
    """kernels.csv is read by its leading cells; a record whose quoted name spans two lines is
    read whole, and the line after it is not taken for a record."""
    tips = tooltips_with(tiny, tmp_path, '0,7,40.000,10.000,"fusion\n1,8,30.000,",fusion.2,exact\n')
    assert any("at 40.000 us" in t and "instruction: fusion.2 (exact)" in t for t in tips)
    assert not any("at 30.000 us" in t and "instruction:" in t for t in tips)


def test_start_end_zoom_into_a_window(tiny, tmp_path):
    p = run(tiny, tmp_path, "--start", "100", "--end", "200")
    assert p.returncode == 0, p.stderr
    result = json.loads((tmp_path / "swimlanes.json").read_text())
    assert result["window"] == {"start_us": 100.0, "end_us": 200.0, "zoomed": True}
    assert result["drawn"]["gpu_events"] == 6  # step 1's kernels only
    assert result["merged"]["pixel_us"] == pytest.approx(100 / 1220, abs=1e-6)  # 1,220 px of axis
    root = svg_of(tmp_path)
    tips = [t.text for t in root.iter(f"{SVG}title") if t.text]
    starts = {float(m) for t in tips for m in re.findall(r"us at ([\d.]+) us", t)}
    assert starts and all(100 <= s < 200 for s in starts)
    # the drawing's header says the window is a zoom and whose straggler it names
    desc = next(t.text for t in root.iter(f"{SVG}desc"))
    # the window 100-200 us lies in step 1 (100 to 150.5 us), so the zoom is of step 1
    assert "why this step: a zoom (--start/--end) inside step 1, " in desc
    assert result["chosen"]["step"] == 1 and "the window (--start/--end) overlaps most" in \
        result["chosen"]["why"]
    assert not [n for n in result["notes"] if "does not overlap" in n]
    assert re.search(r"straggler of step 1 \(not of the window\): ", desc)
    # a window outside the capture is refused in one sentence
    p = run(tiny, tmp_path, "--start", "5000", "--end", "6000")
    assert p.returncode == 1 and p.stderr.strip() == (
        "swimlanes: the window 5,000.000 to 6,000.000 us holds no GPU event: the capture's GPU "
        "events span 5.000 to 270.000 us")
    p = run(tiny, tmp_path, "--start", "200", "--end", "100")
    assert p.returncode == 2 and "--start 200.0 must be before --end 100.0" in p.stderr


# ---------------------------------------------------------------- escaping

def test_hostile_names_are_escaped(tmp_path):
    cap = build_capture(tmp_path / "capture", hostile=True)
    out = tmp_path / "out"
    p = run(cap, out, "--step", "0")
    assert p.returncode == 0, p.stderr
    raw = (out / "swimlanes.svg").read_text(encoding="utf-8")
    assert "<script" not in raw and "\x01" not in raw
    root = ET.fromstring(raw.encode("utf-8"))  # well-formed XML
    assert not list(root.iter(f"{SVG}script"))
    clean = HOSTILE.replace("\x01", "\ufffd")
    tips = [t.text for t in root.iter(f"{SVG}title") if t.text]
    assert any(t.startswith(clean + "\n") for t in tips)  # the kernel, its name intact
    texts = [all_text(t) for t in root.iter(f"{SVG}text")]
    assert any(t.startswith("GPU 1 (last) \u00b7 Stream #7(<i>&)") for t in texts)
    assert any(f"py{clean}" in t for t in texts + tips)  # the host thread's lane
    assert any(f"host_work{clean}=12.000" in t for t in tips)  # the host event in the gap
    assert any(t.startswith(f"host_work{clean}") for t in texts)  # its label on the gap's bar
    rows = read(out / "stragglers.csv")
    assert rows[1]["last_kernel"] == HOSTILE
    assert json.loads((out / "swimlanes.json").read_text())["straggler"]["gpus"][0][
        "last_kernel"] == HOSTILE


# ---------------------------------------------------------------- scale

def test_narrow_events_merge_and_the_count_is_said(shared, tmp_path):
    """nvidia-maxtext-8gpu (the real MaxText H100 step on 8 GPUs, command buffers partial):
    a step of ~7,800 kernels and ~5,700 launch calls. Narrower-than-a-pixel events merge, and
    the SVG, the JSON and the bars' tooltips say the same count."""
    r = generate(SCENARIOS["nvidia-maxtext-8gpu"], tmp_path / "capture")
    out = tmp_path / "out"
    p = run(r.run_dir, out)
    assert p.returncode == 0, p.stderr
    result = json.loads((out / "swimlanes.json").read_text())
    m, dr = result["merged"], result["drawn"]
    root = svg_of(out)
    merged = [e for e in root.iter(f"{SVG}rect") if "mg" in classes(e)]
    counts = [int(e.find(f"{SVG}title").text.split(" ", 1)[0]) for e in merged]
    assert m["events"] > 1000 and m["bars"] == len(merged) and sum(counts) == m["events"]
    assert min(counts) >= 2
    alone = [e for e in root.iter(f"{SVG}rect") if classes(e) & {
        "kc", "kg", "kn", "km", "ks", "hl", "hg", "ho"} and "mg" not in classes(e)
        and e.find(f"{SVG}title") is not None]  # (the legend's swatches have none)
    assert len(alone) == dr["alone"]
    assert dr["alone"] + m["events"] == dr["gpu_events"] + dr["host_calls"]
    step_rows = [x for x in read(out / "rows.csv") if x["step"] == str(result["chosen"]["step"])]
    assert dr["gpu_events"] >= len(step_rows) == 7840
    header = " ".join(all_text(t) for t in root.iter(f"{SVG}text") if "hd" in classes(t))
    assert f"{m['events']} events narrower than a pixel are merged into {m['bars']} bars" in \
        " ".join(header.split())
    assert len({ln["device"] for ln in result["lanes"] if ln["kind"] == "gpu"}) == 8


# ---------------------------------------------------------------- bad input

def _cpu(p):
    return REPO / "tests" / "data" / "minigpt-cpu"


def _trace_only(p):
    doc = {"traceEvents": [{"ph": "M", "pid": 1, "name": "process_name",
                            "args": {"name": "/host:CPU"}}, {}]}
    (p / "h.trace.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode()))
    return p / "h.trace.json.gz"


@pytest.mark.parametrize("make, args, words", [
    (_cpu, (), "no GPU events in this capture"),
    (_trace_only, (), "no GPU events in this capture"),
    (lambda p: p / "absent.trace.json.gz", (), "does not exist"),
    (lambda p: (p / "h.trace.json.gz").write_bytes(b"not gzip") and p / "h.trace.json.gz", (),
     "not gzip"),
])
def test_bad_input_one_sentence_exit_1_nothing_drawn(tmp_path, make, args, words):
    src = tmp_path / "in"
    src.mkdir()
    out = tmp_path / "out"
    p = run(make(src), out, *args)
    assert p.returncode == 1, p.stderr
    assert words in p.stderr and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
    assert not any((out / f).exists() for f in OUTPUTS)


def test_a_step_that_was_not_analysed_is_refused(tiny, tmp_path):
    p = run(tiny, tmp_path, "--step", "7")
    assert p.returncode == 1
    assert p.stderr.strip() == ("swimlanes: step 7 was not analysed by step 1 (analysed: 0, 1, "
                                "2); pass one of the analysed steps")
    assert not any((tmp_path / f).exists() for f in OUTPUTS)


def test_no_complete_step_and_bad_tables_leave_the_previous_drawing(tiny, tmp_path):
    assert run(tiny, tmp_path).returncode == 0
    before = {f: (tmp_path / f).read_bytes() for f in OUTPUTS}
    s1 = json.loads((tmp_path / "skip_stats.json").read_text())
    s1["steps"]["partial_analysed"] = [0, 1, 2]
    (tmp_path / "skip_stats.json").write_text(json.dumps(s1))
    p = run(tiny, tmp_path)
    assert p.returncode == 1 and p.stderr.strip() == (
        "swimlanes: no complete step: step 1 analysed only partial steps (0, 1, 2; the profile "
        "started or stopped inside them); pass --step N to draw one anyway")
    p = run(tiny, tmp_path, "--step", "1")  # drawn when asked for, and said to be partial
    assert p.returncode == 0 and "it is partial" in json.loads(
        (tmp_path / "swimlanes.json").read_text())["chosen"]["why"]
    (tmp_path / "swimlanes.json").write_bytes(before["swimlanes.json"])
    (tmp_path / "swimlanes.svg").write_bytes(before["swimlanes.svg"])
    rows = (tmp_path / "rows.csv").read_text().splitlines()
    (tmp_path / "rows.csv").write_text("\n".join([rows[0].replace("start_us", "begin_us")]
                                                 + rows[1:]) + "\n")
    p = run(tiny, tmp_path, "--step", "1")
    assert p.returncode == 1 and len(p.stderr.strip().splitlines()) == 1
    assert "rows.csv is not the table skip_stats.py writes (it has no column start_us)" in p.stderr
    assert (tmp_path / "swimlanes.svg").read_bytes() == before["swimlanes.svg"]
    assert (tmp_path / "swimlanes.json").read_bytes() == before["swimlanes.json"]
    assert not [f for f in tmp_path.iterdir() if f.name.startswith(".swimlanes-")]


# ---------------------------------------------------------------- real captures

SHARED_RUNS = sorted(str(p.parent.relative_to(SHARED_CAPTURES))
                     for p in SHARED_CAPTURES.glob("*/*/plugins/profile/*/*.trace.json.gz"))


@pytest.mark.parametrize("case", SHARED_RUNS or ["none"])
def test_every_shared_capture_draws_and_its_table_reads(shared, tmp_path, case):
    run_dir = shared / case
    before = sorted((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in run_dir.iterdir())
    p = run(run_dir, tmp_path)
    assert p.returncode == 0, p.stderr
    assert sorted((f.name, f.stat().st_size, f.stat().st_mtime_ns)
                  for f in run_dir.iterdir()) == before  # nothing written into the capture
    result = json.loads((tmp_path / "swimlanes.json").read_text())
    svg_of(tmp_path)  # well-formed
    steps = read(tmp_path / "steps.csv")
    rows = read(tmp_path / "stragglers.csv")
    assert [(r["step"], r["device"]) for r in rows] == [(s["step"], s["device"]) for s in steps]
    assert [r["end_us"] for r in rows] == [s["end_us"] for s in steps]
    s1 = json.loads((tmp_path / "skip_stats.json").read_text())
    compared = {str(d) for d in s1["gpu_groups"][0]["devices"]}
    assert {r["device"] for r in rows if r["compared"] == "1"} == compared
    # a GPU that does other work (the V100 capture's GPU 1 holds argument copies only) never
    # finishes last
    assert not [r for r in rows if r["compared"] == "0" and r["finishes_last"] == "1"]
    for n in {r["step"] for r in rows}:
        mine = [r for r in rows if r["step"] == n and r["compared"] == "1"]
        lags = [float(r["lag_us"]) for r in mine]
        assert min(lags) == 0.0 and all(x >= 0 for x in lags)
        latest = max(float(r["end_us"]) for r in mine)
        start = min(float(s["start_us"]) for s in steps if s["step"] == n)
        margin = max(5.0, 0.005 * (latest - start))  # step 1's straggler margin
        assert {r["device"] for r in mine if r["finishes_last"] == "1"} == \
            {r["device"] for r in mine if latest - float(r["end_us"]) <= margin + 1e-9}
        assert all(r["last_kernel"] and r["last_stretch"] for r in mine)
    gpu_lanes = {(ln["device"], ln["stream"]) for ln in result["lanes"] if ln["kind"] == "gpu"}
    chosen = str(result["chosen"]["step"])
    step_streams = {(int(r["device"]), int(r["stream"])) for r in read(tmp_path / "rows.csv")
                    if r["step"] == chosen}
    assert step_streams <= gpu_lanes
    if "tf-profiler-demo-v100" in case:
        # no steps: the whole capture is drawn as one window, and no straggler is named
        assert result["chosen"]["whole_capture"] and result["straggler"] is None
        assert result["refusals"][0].startswith("cannot name a straggler because the capture "
                                                "has no steps")
        assert {ln["device"] for ln in result["lanes"] if ln["kind"] == "gpu"} == {1, 4, 6}
    elif len({r["device"] for r in rows if r["step"] == chosen}) == 1:
        one = "one TPU core ran step" if "tpu-v5e" in case else "one GPU ran step"
        assert result["straggler"] is None and result["notes"][0].startswith(one)
    else:
        assert result["straggler"]["gpus"]


def test_runs_from_any_folder_into_the_current_one(tiny, tmp_path):
    p = run(tiny, ".", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert {f.name for f in tmp_path.iterdir()} >= set(OUTPUTS) | {"rows.csv", "steps.csv"}
    assert p.stdout.splitlines()[0].startswith("wrote swimlanes.svg (")


def _tiny_trace(path, n: int) -> None:
    """n tiny kernels on one GPU stream, each launched by its own host call and 2 us after the
    last: a capture without steps, one gap before each kernel."""
    ev = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/device:GPU:0"}},
          {"ph": "M", "name": "thread_name", "pid": 1, "tid": 7,
           "args": {"name": "Stream #7(Kernel)"}},
          {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "/host:CPU"}},
          {"ph": "M", "name": "thread_name", "pid": 2, "tid": 3, "args": {"name": "python"}}]
    for i in range(n):
        t = 10.0 + i * 3.0
        ev.append({"ph": "X", "name": "cudaLaunchKernel", "pid": 2, "tid": 3, "ts": t,
                   "dur": 0.5, "args": {"correlation_id": str(i + 1)}})
        ev.append({"ph": "X", "name": f"fusion_{i % 7}", "pid": 1, "tid": 7, "ts": t + 1.0,
                   "dur": 0.5, "args": {"correlation_id": str(i + 1), "hlo_op": f"f.{i % 7}"}})
    with gzip.open(path, "wt") as fh:
        json.dump({"traceEvents": ev + [{}]}, fh)


def test_many_gaps_without_steps_end_in_linear_time(tmp_path):
    """20,000 kernels, each after a gap, in a capture without steps: step 1 (56.8 s before: each
    gap scanned its launch thread) and step 3 (its last stretch scanned every gap per idle
    stretch: past 120 s on 125,000 kernels) each finish, within a bound far below those."""
    trace = tmp_path / "h.trace.json.gz"
    _tiny_trace(trace, 20000)
    for script in (REPO / "analyzing-jax-launch-overhead" / "scripts" / "skip_stats.py",
                   REPO / "scripts" / "swimlanes.py"):
        p = subprocess.run([sys.executable, "-P", str(script), str(trace), "--out",
                            str(tmp_path / "out")], capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, (script.name, p.stderr[-500:])
    assert "the whole capture as one window" in p.stdout


def test_tooltips_read_only_each_lane_s_window_of_a_large_kernels_table(tmp_path, monkeypatch):
    """kernels.csv is in the order of device, stream and start: each lane's kernels are read
    from its window, found by halving the file, with the same result as reading it whole (a
    quoted name holding a newline included); a table not in that order is read whole."""
    import random

    from jaxperf.analyses import swimlanes
    rows = [(d, s, f"{t * 1.5:.3f}", f"k{t}", f"fusion.{d}.{s}.{t}", "exact")
            for d in range(2) for s in (7, 8) for t in range(1500)]
    rows[2000] = rows[2000][:3] + ('k"\n1,8,30.000,',) + rows[2000][4:]
    keys = {(str(d), str(s), t) for d, s, t, *_ in rows[1990:2010] + rows[5000:5003]}
    keys.add(("1", "8", "99999.000"))  # drawn, not in the table

    def read(table):
        (tmp_path / "attribution").mkdir(exist_ok=True)
        with open(tmp_path / "attribution" / "kernels.csv", "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["device", "stream", "start_us", "kernel", "instruction", "match"])
            w.writerows(table)
        return swimlanes.read_instructions(tmp_path, keys)

    whole, why = read(rows)
    assert why is None and len(whole) == len(keys) - 1
    assert whole[("0", "8", rows[2000][2])] == ("fusion.0.8.500", "exact")
    monkeypatch.setattr(swimlanes, "WINDOWED_READ_MIN", 0)
    monkeypatch.setattr(swimlanes, "_HALVED_DOWN_TO", 256)
    calls = []
    real = swimlanes._read_keys
    monkeypatch.setattr(swimlanes, "_read_keys",
                        lambda *a, **k: calls.append(len(a) > 3) or real(*a, **k))
    assert read(rows) == (whole, None)
    assert calls and all(calls[:-1]) and not calls[-1]  # windows, then the whole for the one missed
    keys.discard(("1", "8", "99999.000"))
    calls.clear()
    assert read(rows) == (whole, None) and all(calls)  # every key in its window: nothing more
    random.Random(3).shuffle(rows)
    calls.clear()
    assert read(rows) == (whole, None) and not calls[-1]  # not in order: read whole
