"""hlo_text: the HLO text printed from the proto, checked against jaxlib's own printer on the
committed programs, and for completeness on the large real programs (without jaxlib there)."""

from __future__ import annotations

import lzma
import re
from pathlib import Path

import pytest

from jaxperf.program import hlo_text
from jaxperf.read import xplane_reader, xprotos

DATA = Path(__file__).parent / "data"
CPU_RUN = DATA / "minigpt-cpu" / "plugins" / "profile" / "2026_01_01_00_00_00" / \
    "minigpt-cpu.xplane.pb"
NSYS = "other-formats/nvidia-jax-toolbox-nsys-jax"

_COMP = re.compile(r"^(ENTRY )?%(\S+) \(.*\) -> .* \{$")
_INS = re.compile(r"^  (ROOT )?%(\S+) = (.*)$")
_INDEX = re.compile(r"/\*index=\d+\*/")
_CALLED_ONE = re.compile(
    r"\b(calls|to_apply|condition|body|true_computation|false_computation|select|scatter)"
    r"=%([^\s,{}]+)")
_CALLED_MANY = re.compile(r"\b(calls|branch_computations|called_computations)=\{([^}]*)\}")


def _balanced(s: str, start: int) -> int:
    """Index just past the bracket group opening at s[start]."""
    depth = 0
    for i in range(start, len(s)):
        if s[i] in "([{":
            depth += 1
        elif s[i] in ")]}":
            depth -= 1
            if depth == 0:
                return i + 1
    raise ValueError(f"unbalanced: {s[start:start + 80]}")


def _parse_instruction(rest: str) -> tuple[str, str, tuple[str, ...], frozenset]:
    """``shape opcode(operands), attrs`` -> (shape, opcode, operand names, called computations)."""
    end = _balanced(rest, 0) if rest.startswith("(") else rest.index(" ")
    shape = _INDEX.sub("", rest[:end])
    tail = rest[end + 1:]
    paren = tail.index("(")
    opcode = tail[:paren]
    close = _balanced(tail, paren)
    operands = tuple(re.findall(r"%([^\s,()]+)", tail[paren:close]))
    attrs = tail[close:]
    for stop in (", metadata={", ", backend_config="):
        if stop in attrs:
            attrs = attrs[:attrs.index(stop)]
    called = {(k, v) for k, v in _CALLED_ONE.findall(attrs)}
    for k, names in _CALLED_MANY.findall(attrs):
        called |= {(k, n.strip().lstrip("%")) for n in names.split(",") if n.strip()}
    return shape, opcode, operands, frozenset(called)


def parse_hlo_text(text: str) -> tuple[list[tuple], list[tuple]]:
    """(computations [(name, is_entry)], instructions [(computation, name, opcode, shape,
    operands, called, is_root)]) from HLO text, in the order printed."""
    comps, instrs = [], []
    comp = None
    for line in text.splitlines():
        m = _COMP.match(line)
        if m:
            comp = m.group(2)
            comps.append((comp, bool(m.group(1))))
            continue
        m = _INS.match(line)
        if m and comp is not None:
            shape, opcode, operands, called = _parse_instruction(m.group(3))
            instrs.append((comp, m.group(2), opcode, shape, operands, called, bool(m.group(1))))
    return comps, instrs


def _jaxlib_text(module) -> str:
    xla_client = pytest.importorskip("jax._src.lib").xla_client
    return xla_client.hlo.HloModule.from_serialized_hlo_module_proto(
        module.SerializeToString()).to_string()


def _ours(module, tmp_path: Path) -> tuple[str, int]:
    path = tmp_path / "program.hlo.txt"
    n = hlo_text.write_hlo_text(module, path)
    text = path.read_text()
    assert n == text.count("\n")
    return text, n


def _assert_same_as_jaxlib(module, tmp_path: Path) -> int:
    ours, _ = _ours(module, tmp_path)
    comps, instrs = parse_hlo_text(ours)
    ref_comps, ref_instrs = parse_hlo_text(_jaxlib_text(module))
    assert sorted(comps) == sorted(ref_comps)
    assert len(instrs) == len(set(instrs))
    assert set(instrs) == set(ref_instrs)
    return len(instrs)


@pytest.mark.parametrize("devices", [1, 8])
def test_minigpt_h100_programs_match_jaxlib(devices, tmp_path):
    blob = lzma.decompress((DATA / "minigpt-h100" / f"jit_train_step.{devices}gpu.hlo.pb.xz")
                           .read_bytes())
    module = xprotos.classes()["HloModuleProto"].FromString(blob)
    n = _assert_same_as_jaxlib(module, tmp_path)
    assert n == sum(len(c.instructions) for c in module.computations)


def test_minigpt_cpu_programs_match_jaxlib(tmp_path):
    space = xplane_reader.load_space(CPU_RUN)
    programs = space.hlo_protos()
    assert len(programs) == 27
    for pid, (_, blob) in programs.items():
        module = xplane_reader.parse_hlo(blob)
        folder = tmp_path / str(pid)
        folder.mkdir()
        _assert_same_as_jaxlib(module, folder)


def test_schedule_order_root_and_attributes(tmp_path):
    """The entry computation prints in schedule order; a few attributes a roofline reads."""
    blob = lzma.decompress((DATA / "minigpt-h100" / "jit_train_step.8gpu.hlo.pb.xz").read_bytes())
    module = xprotos.classes()["HloModuleProto"].FromString(blob)
    text, _ = _ours(module, tmp_path)
    comps, instrs = parse_hlo_text(text)
    assert comps[-1] == ("main.36_spmd", True)
    by_id = {i.id: i.name for c in module.computations for i in c.instructions}
    entry = next(c for c in module.computations if c.id == module.entry_computation_id)
    scheduled = [by_id[i] for i in module.schedule.sequences[entry.id].instruction_ids]
    assert [i[1] for i in instrs if i[0] == entry.name] == scheduled
    roots = [i[1] for i in instrs if i[0] == entry.name and i[6]]
    assert roots == [by_id[entry.root_id]]
    assert text.startswith("HloModule jit_train_step, is_scheduled=true, input_output_alias={ ")
    assert ", entry_computation_layout={(f32[64,32]{1,0}, " in text.splitlines()[0]
    line = next(ln for ln in text.splitlines() if ln.startswith("  %dot.73 = "))
    assert line.startswith("  %dot.73 = f32[96,16]{0,1} dot(%parameter_1, %parameter_0), "
                           "lhs_contracting_dims={0}, rhs_contracting_dims={1}, metadata={"
                           'op_name="jit(train_step)/jvp(blocks)/while/body/closed_call/attn/'
                           'dot_general" scheduling_name="dot.73" stack_frame_id=')
    assert line.endswith(', backend_config={"sizes":["16"]}')
    line = next(ln for ln in text.splitlines() if ln.startswith("  %all-reduce-start = "))
    assert "all-reduce-start(%wrapped_concatenate), channel_id=5, use_global_device_ids=true, " \
           "to_apply=%add.clone, " in line
    assert "  %constant_283_clone_2 = f32[] constant(0.797884583)" in text


def _inline_module():
    C = xprotos.classes()
    m = C["HloModuleProto"](name="m", id=1, entry_computation_id=2, entry_computation_name="e")
    comp = m.computations.add(name="e", id=2, root_id=5)

    def add(iid, name, opcode, dims, operands=(), etype=11, **kw):
        ins = comp.instructions.add(id=iid, name=name, opcode=opcode, operand_ids=operands, **kw)
        ins.shape.element_type = etype
        ins.shape.dimensions.extend(dims)
        ins.shape.layout.minor_to_major.extend(reversed(range(len(dims))))
        return ins

    p = add(1, "p", "parameter", [80, 4], parameter_number=0)
    p.sharding.type = 3
    p.sharding.tile_assignment_dimensions.extend([4, 1])
    p.sharding.iota_reshape_dims.append(4)
    s = add(2, "s", "slice", [8, 4], [1])
    for start, limit, stride in ((0, 80, 10), (0, 4, 1)):
        s.slice_dimensions.add(start=start, limit=limit, stride=stride)
    c = add(3, "c", "constant", [2, 2], etype=16)
    c.literal.shape.CopyFrom(c.shape)
    c.literal.bf16s = bytes.fromhex("803f0040c07f807f")  # 1, 2, nan, inf
    big = add(4, "big", "constant", [11], etype=4)
    big.literal.shape.CopyFrom(big.shape)
    big.literal.s32s.extend(range(11))
    pad = add(5, "pad", "pad", [9, 7], [2, 3])
    for lo, hi, interior in ((0, 1, 0), (1, 0, 1)):
        pad.padding_config.dimensions.add(edge_padding_low=lo, edge_padding_high=hi,
                                          interior_padding=interior)
    pad.metadata.op_name = "it's"
    return m


def test_inline_attributes(tmp_path):
    text, n = _ours(_inline_module(), tmp_path)
    assert text.splitlines() == [
        "HloModule m",
        "",
        "ENTRY %e (p: f32[80,4]) -> f32[9,7] {",
        "  %p = f32[80,4]{1,0} parameter(0), sharding={devices=[4,1]<=[4]}",
        "  %s = f32[8,4]{1,0} slice(%p), slice={[0:80:10], [0:4:1]}",
        "  %c = bf16[2,2]{1,0} constant({ {1, 2}, {nan, inf} })",
        "  %big = s32[11]{0} constant({...})",
        "  ROOT %pad = f32[9,7]{1,0} pad(%s, %c), padding=0_1_0x1_0_1, "
        "metadata={op_name=\"it\\'s\"}",
        "}",
    ]
    assert n == 9


def _proto_instructions(module) -> dict:
    out = {}
    for comp in module.computations:
        names = {i.id: i.name for i in comp.instructions}
        for ins in comp.instructions:
            out[(comp.name, ins.name)] = (ins.opcode, tuple(names[o] for o in ins.operand_ids))
    return out


def _expected_lines(module) -> int:
    sfi = module.stack_frame_index
    frames = len(sfi.file_names) + len(sfi.function_names) + len(sfi.file_locations) + \
        len(sfi.stack_frames) + 8 if sfi.file_names or sfi.stack_frames else 0
    return 1 + frames + sum(3 + len(c.instructions) for c in module.computations)


def _assert_complete(module, tmp_path: Path) -> None:
    text, n = _ours(module, tmp_path)
    assert n == _expected_lines(module)
    comps, instrs = parse_hlo_text(text)
    assert [c[0] for c in comps] == [c.name for c in module.computations]
    keys = [(i[0], i[1]) for i in instrs]
    assert len(keys) == len(set(keys))  # each instruction once
    proto = _proto_instructions(module)
    assert {k: (i[2], i[4]) for k, i in zip(keys, instrs, strict=True)} == proto


def _largest(folder: Path, pattern: str) -> Path:
    return max(folder.glob(pattern), key=lambda p: p.stat().st_size)


def test_pax_program_written_in_full(shared, tmp_path):
    """The 6 MB PAX step (jaxlib needs over 10 GB to print it): every instruction, once."""
    dump = shared / NSYS / "pax-fsdp4-a100-proc0" / "dump"
    (path,) = dump.glob("module_0040*.sm_*_gpu_after_optimizations.hlo.pb.xz")
    module = xplane_reader.parse_hlo(lzma.decompress(path.read_bytes()))
    assert sum(len(c.instructions) for c in module.computations) == 37026
    _assert_complete(module, tmp_path)


def test_maxtext_program_written_in_full(shared, tmp_path):
    dump = shared / NSYS / "maxtext-fsdp4-h100" / "dump"
    path = _largest(dump, "module_*.hlo.pb.xz")
    module = xplane_reader.parse_hlo(lzma.decompress(path.read_bytes()))
    assert module.name == "jit_train_step"
    _assert_complete(module, tmp_path)
