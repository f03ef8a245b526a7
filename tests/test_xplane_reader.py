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
    (gzip.compress(b'{"traceEvents": []}', mtime=0), "XSpace"),
    (b"\0" * 4096, "its first byte (0x00) starts no protobuf field"),
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


def _by_protobuf(path) -> list:
    """Every event of the file as protobuf's own parser reads it (the oracle of the bulk
    decoder): (plane, line, metadata id, start, duration, stats), a stat as (key, value) with
    a key repeated on an event kept first and the metadata's stats under the event's own."""
    space = xprotos.classes()["XSpace"].FromString(path.read_bytes())
    out = []
    for p in space.planes:
        names = {k: v.name for k, v in p.stat_metadata.items()}

        def value(st, names=names):
            kind = st.WhichOneof("value")
            return names.get(st.ref_value, "") if kind == "ref_value" else \
                getattr(st, kind) if kind else None

        meta = {}
        for k, md in p.event_metadata.items():
            meta[k] = {}
            for st in md.stats:
                meta[k].setdefault(names.get(st.metadata_id, str(st.metadata_id)), value(st))
        for ln in p.lines:
            for e in ln.events:
                own = {}
                for st in e.stats:
                    own.setdefault(names.get(st.metadata_id, str(st.metadata_id)), value(st))
                stats = {**meta.get(e.metadata_id, {}), **own}
                out.append((p.name, ln.id, e.metadata_id, ln.timestamp_ns * 1000 + e.offset_ps,
                            e.duration_ps, {k: v for k, v in stats.items() if v is not None}))
    return out


def _by_columns(path) -> list:
    space = xplane_reader.load_space(path)
    return [(p.name, ln.id, mid, start, dur, stats)
            for p in space.planes for ln in p.lines
            for mid, (start, dur, stats) in zip(
                ln.columns().mid.tolist(),
                [(e.start_ps, e.duration_ps, e.stats) for e in ln.events()], strict=True)]


def test_bulk_decoding_equals_protobufs_own_parser(tmp_path):
    """Every wire shape XLA writes and a few it could: multi-byte varints, a negative int64, a
    double, bytes, a uint64 past 2**63, a repeated key, an unknown field, num_occurrences, a
    string stat, events with no stats, a metadata stat under an event's own."""
    b = XSpaceBuilder()
    gpu = b.plane("/device:GPU:0")
    gpu.event_metadata("k", stats={"kernel_details": "x", "hlo_op": ("ref", "meta-op")})
    line = gpu.line(3, "Stream #3", timestamp_ns=7)
    line.event("k", 5, 9, stats=[("hlo_op", ("ref", "own-op")), ("correlation_id", ("uint", 4)),
                                 ("correlation_id", ("uint", 5)), ("other", 1)])
    line.event("k", 20, 1)
    line.event("k", 300_000_000_000, 2**40, stats={"x": -3, "d": 2.5, "blob": b"\x00\xff",
                                                   "big": ("uint", 2**64 - 1), "s": "t\u00e9xt"})
    host = b.plane("/host:CPU")
    host.line(1, "python", timestamp_ns=10**9).event("op", 0, 10)
    host.line(2, "empty")
    ev = b.proto.planes[0].lines[0].events[1]
    ev.num_occurrences = 3  # the oneof of offset_ps
    path = tmp_path / "h.xplane.pb"
    data = bytearray(b.serialize())
    path.write_bytes(bytes(data))
    assert _by_columns(path) == _by_protobuf(path)
    (ln,) = xplane_reader.load_space(path).gpu_planes()[0].lines
    first = next(ln.events(frozenset({"hlo_op", "correlation_id", "kernel_details"})))
    assert first.stats == {"kernel_details": "x", "hlo_op": "own-op", "correlation_id": 4}


def test_bulk_decoding_equals_protobuf_on_real_captures(shared):
    """On each shared capture (real ROCm, CUDA, TPU and TensorFlow writers): every event and
    stat."""
    from pathlib import Path
    files = sorted(str(p) for p in shared.rglob("*.xplane.pb"))
    for f in files:
        path = Path(f)
        if path.stat().st_size > 40 << 20:
            continue
        assert _by_columns(path) == _by_protobuf(path), f


def test_corrupt_event_bytes_give_one_sentence(tmp_path):
    """An event whose bytes protobuf would refuse (a stat longer than the event) is refused by
    the bulk decoder too, in one sentence naming the file."""
    b = XSpaceBuilder()
    gpu = b.plane("/device:GPU:0")
    gpu.line(1, "Stream #1").event("k", 5, 9, stats={"correlation_id": 7})
    data = b.serialize()
    good = bytes(b.proto.planes[0].lines[0].events[0].SerializeToString())
    # the event's stat field (tag 0x22) claims more bytes than the event holds
    at = data.index(good)
    cut = bytearray(good)
    cut[cut.index(0x22) + 1] = 0x7F
    path = tmp_path / "h.xplane.pb"
    path.write_bytes(data[:at] + bytes(cut) + data[at + len(good):])
    with pytest.raises(xplane_reader.XPlaneError, match="corrupt"):
        xplane_reader.load_space(path)


def test_a_sparse_file_of_zeros_is_refused_before_it_is_read(tmp_path, monkeypatch):
    """A 1 GiB sparse file named like an xplane: refused on its first byte, never read whole
    (a 1.9 GB one took 1.8 GB of memory before its refusal)."""
    path = tmp_path / "h.xplane.pb"
    with open(path, "wb") as fh:
        fh.truncate(1 << 30)
    monkeypatch.setattr(type(path), "read_bytes", lambda self: pytest.fail("read whole"))
    with pytest.raises(xplane_reader.XPlaneError, match="starts no protobuf field"):
        xplane_reader.load_space(path)
