"""xplane_reader on small captures built inline, one behaviour each."""

from __future__ import annotations

import gzip

import pytest

from jaxperf.program.hlo_program import Program
from jaxperf.read import xplane_reader, xprotos
from xspace_builder import XSpaceBuilder


def _load(tmp_path, builder):
    path = tmp_path / "h.xplane.pb"
    builder.write(path)
    return xplane_reader.load_space(path)


def test_times_names_refs_and_merged_stats(tmp_path):
    b = XSpaceBuilder()
    gpu = b.plane("/device:GPU:0", stats={"device_vendor": "Nvidia", "core_count": 132})
    gpu.event_metadata("fusion_3", stats={"kernel_details": "regs:32 grid:1,1,1",
                                          "hlo_op": ("ref", "from-metadata")})
    line = gpu.line(16, "Stream #16(Kernel)", timestamp_ns=1_500)
    line.event("fusion_3", offset_ps=250, duration_ps=4_000,
               stats={"hlo_op": ("ref", "fusion.7"), "correlation_id": 42})
    line.event("fusion_3", offset_ps=9_000, duration_ps=1)
    space = _load(tmp_path, b)
    (plane,) = space.gpu_planes()
    assert plane.gpu_ordinal == 0
    assert plane.stats == {"device_vendor": "Nvidia", "core_count": 132}
    (ln,) = plane.lines
    assert (ln.id, ln.name, ln.timestamp_ns, len(ln)) == (16, "Stream #16(Kernel)", 1_500, 2)
    first, second = ln.events()
    assert (first.name, first.start_ps, first.duration_ps, first.end_ps) == \
        ("fusion_3", 1_500_250, 4_000, 1_504_250)
    # the event's own stat wins over its metadata's; the ref resolves to a string
    assert first.stats == {"kernel_details": "regs:32 grid:1,1,1", "hlo_op": "fusion.7",
                           "correlation_id": 42}
    assert second.stats == {"kernel_details": "regs:32 grid:1,1,1", "hlo_op": "from-metadata"}
    assert second.start_ps == 1_509_000


def test_repeated_stat_key_keeps_first_and_is_counted(tmp_path):
    b = XSpaceBuilder()
    host = b.plane("/host:CPU")
    host.line(1, "python").event("op", 0, 10, stats=[("k", 1), ("k", 2), ("u", ("uint", 7))])
    space = _load(tmp_path, b)
    (ev,) = space.plane("/host:CPU").lines[0].events()
    assert ev.stats == {"k": 1, "u": 7}
    assert space.repeated_stat_events == 1


def test_planes_by_name_not_id_and_gpu_order(tmp_path):
    b = XSpaceBuilder(hostnames=["a", "b"])
    b.plane("/host:CPU", plane_id=0)
    b.plane("/device:GPU:10", plane_id=0)
    b.plane("/device:GPU:2", plane_id=0)
    b.plane("Task Environment", plane_id=0, stats={"profile_start_time": ("uint", 5),
                                                  "profile_stop_time": ("uint", 9)})
    space = _load(tmp_path, b)
    assert space.hostnames == ["a", "b"]
    assert [p.name for p in space.gpu_planes()] == ["/device:GPU:2", "/device:GPU:10"]
    assert space.plane("/host:CPU").name == "/host:CPU"
    assert space.plane("/device:GPU:3") is None
    assert space.profile_times_ns() == (5, 9)


def test_hlo_programs_by_id_and_source_frames(tmp_path):
    C = xprotos.classes()
    m = C["HloModuleProto"](name="jit_step", id=11, entry_computation_id=1)
    sfi = m.stack_frame_index
    sfi.file_names.extend(["/site-packages/jax/api.py", "/home/u/model.py"])
    sfi.function_names.extend(["jit", "forward"])
    sfi.file_locations.add(file_name_id=2, function_name_id=2, line=31)
    sfi.file_locations.add(file_name_id=1, function_name_id=1, line=500)
    sfi.stack_frames.add(file_location_id=1, parent_frame_id=0)  # id 1: model.py:31
    sfi.stack_frames.add(file_location_id=2, parent_frame_id=1)  # id 2: jax inside, then 1
    comp = m.computations.add(name="main", id=1)
    p = comp.instructions.add(name="p0", opcode="parameter", id=1)
    f = comp.instructions.add(name="fusion.1", opcode="fusion", id=2, operand_ids=[1])
    f.metadata.stack_frame_id = 2
    f.shape.element_type = 16
    old = comp.instructions.add(name="copy.3", opcode="copy", id=3)
    old.metadata.source_file = "/old/model.py"
    old.metadata.source_line = 8
    m.schedule.sequences[1].instruction_ids.extend([1, 3, 2])
    b = XSpaceBuilder()
    b.hlo_program(m)
    space = _load(tmp_path, b)
    protos = space.hlo_protos()
    assert list(protos) == [11]
    prog = Program(xplane_reader.parse_hlo(protos[11][1]), 11)
    assert protos[11][0] == "jit_step(11)"
    assert [i.name for i in prog.schedule(1)] == ["p0", "copy.3", "fusion.1"]
    fusion = prog.by_name["fusion.1"]
    assert [str(fr) for fr in prog.frames(fusion)] == ["/site-packages/jax/api.py:500",
                                                       "/home/u/model.py:31"]
    assert str(prog.user_frame(fusion)) == "/home/u/model.py:31"
    assert prog.user_frame(fusion).function == "forward"
    assert str(prog.user_frame(prog.by_name["copy.3"])) == "/old/model.py:8"
    assert prog.frames(p) == [] and prog.user_frame(p) is None
    assert prog.dtype(fusion) == "bf16"


@pytest.mark.parametrize("content, words", [
    (b"", "is empty"),
    (b"\x0a\xff\xff\xff\xff\x0f", "not a readable XSpace"),
    (gzip.compress(b'{"traceEvents": []}'), "XSpace"),
])
def test_bad_files_give_one_sentence(tmp_path, content, words):
    path = tmp_path / "h.xplane.pb"
    path.write_bytes(content)
    with pytest.raises(xplane_reader.XPlaneError) as err:
        xplane_reader.load_space(path)
    assert words in str(err.value)
    assert "\n" not in str(err.value)


def test_truncated_real_shape_is_refused(tmp_path):
    b = XSpaceBuilder()
    b.plane("/device:GPU:0").line(1, "Stream #1").event("k", 0, 5, stats={"x": "y" * 50})
    data = b.serialize()
    path = tmp_path / "h.xplane.pb"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(xplane_reader.XPlaneError):
        xplane_reader.load_space(path)


def test_program_id_comes_from_the_entry_name_not_the_metadata_id(tmp_path):
    """jax 0.10.2 CPU captures number the /host:metadata entries 1, 2, ...: `jit_f(52)` is 52."""
    C = xprotos.classes()
    b = XSpaceBuilder()
    b.hlo_program(C["HloModuleProto"](name="jit_f", id=52), metadata_id=1)
    b.hlo_program(C["HloModuleProto"](name="jit_stage", id=0), metadata_id=2)
    protos = _load(tmp_path, b).hlo_protos()
    assert {k: v[0] for k, v in protos.items()} == {0: "jit_stage(0)", 52: "jit_f(52)"}


def test_tuples_fast_path_equals_events(tmp_path):
    b = XSpaceBuilder()
    gpu = b.plane("/device:GPU:0")
    gpu.event_metadata("k", stats={"kernel_details": "x", "hlo_op": ("ref", "meta-op")})
    line = gpu.line(3, "Stream #3", timestamp_ns=7)
    line.event("k", 5, 9, stats=[("hlo_op", ("ref", "own-op")), ("correlation_id", ("uint", 4)),
                                 ("correlation_id", ("uint", 5)), ("other", 1)])
    line.event("k", 20, 1)
    (ln,) = _load(tmp_path, b).gpu_planes()[0].lines
    only = frozenset({"hlo_op", "correlation_id", "kernel_details"})
    fast = list(ln.tuples(only))
    slow = [(e.name, e.start_ps, e.duration_ps, {k: v for k, v in e.stats.items() if k in only})
            for e in ln.events()]
    assert fast == slow
    assert fast[0][3] == {"kernel_details": "x", "hlo_op": "own-op", "correlation_id": 4}
