"""The committed H100 programs of MiniGPT (tests/data/minigpt-h100/), compiled without a GPU
by tests/fixtures/compile_h100.py with jax 0.10.2 and a real H100 target config: key facts."""

from __future__ import annotations

import lzma
from collections import Counter
from pathlib import Path

import pytest

from jaxperf.program.hlo_program import NO_LAUNCH_OPCODES, Program
from jaxperf.read import xprotos

DATA = Path(__file__).parent / "data" / "minigpt-h100"


def _program(devices: int) -> Program:
    blob = lzma.decompress((DATA / f"jit_train_step.{devices}gpu.hlo.pb.xz").read_bytes())
    return Program(xprotos.classes()["HloModuleProto"].FromString(blob))


@pytest.mark.parametrize("devices, computations, instructions, loops, fusions", [
    (1, 187, 2066, [("while.45", 2), ("while.77", 2)], 151),
    (8, 205, 2232, [("while.88", 2), ("while.89.clone", 2)], 168),
])
def test_structure(devices, computations, instructions, loops, fusions):
    p = _program(devices)
    assert p.name == "jit_train_step"
    assert (len(p.computations), len(p.instructions)) == (computations, instructions)
    assert sorted((i.name, Program.trip_count(i)) for i in p.instructions.values()
                  if i.opcode == "while") == loops
    ops = Counter(i.opcode for i in p.instructions.values())
    assert ops["fusion"] == fusions
    # Triton GEMM fusions: 21 dots, each emitted as a gemm_fusion_dot* fusion
    gemms = [i for i in p.instructions.values() if i.opcode == "fusion" and
             i.name.startswith("gemm_fusion_dot")]
    assert len(gemms) == 21 and ops["dot"] == 21
    # every non-fusion computation that runs has a schedule
    scheduled = set(p.module.schedule.sequences)
    assert p.entry_id in scheduled
    for ins in p.instructions.values():
        if ins.opcode == "while":
            assert set(ins.called_computation_ids) <= scheduled


def test_collectives_only_in_the_sharded_program():
    one, eight = _program(1), _program(8)
    assert not [i for i in one.instructions.values() if i.opcode.startswith("all-")]
    starts = sorted(i.name for i in eight.instructions.values()
                    if i.opcode == "all-reduce-start")
    dones = sorted(i.name for i in eight.instructions.values() if i.opcode == "all-reduce-done")
    assert (starts, dones) == (["all-reduce-start", "all-reduce-start.1"],
                               ["all-reduce-done", "all-reduce-done.1"])
    # A fact of this compiler: the combined gradient all-reduces keep no source metadata, so an
    # attribution must say "no source" for them rather than guess a line.
    assert all(eight.frames(eight.by_name[n]) == [] for n in starts)


def test_source_frames_point_into_the_model():
    p = _program(1)
    launching = [i for i in p.instructions.values() if i.opcode not in NO_LAUNCH_OPCODES]
    with_user = [(i, p.user_frame(i)) for i in launching if p.user_frame(i) is not None]
    assert with_user and all(f.file.endswith("tests/fixtures/minigpt.py") for _, f in with_user)
    functions = {f.function for _, f in with_user}
    assert {"layer_norm", "attention", "mlp", "forward", "loss_fn"} <= functions
    qkv = [i for i, f in with_user if i.name.startswith("gemm_fusion_dot") and f.line == 53]
    assert qkv, "the attention's `x @ w_qkv` (minigpt.py:53) is a Triton GEMM fusion"


MAXTEXT = ("other-formats/nvidia-jax-toolbox-nsys-jax/maxtext-fsdp4-h100/dump/"
           "module_0016.jit_train_step.sm_9.0_gpu_after_optimizations.hlo.pb.xz")


def test_maxtext_h100_program_read_in_place(shared):
    """The large real case: an optimized MaxText step (xla.HloProto) read from ../shared."""
    blob = lzma.decompress((shared / MAXTEXT).read_bytes())
    p = Program(xprotos.classes()["HloProto"].FromString(blob).hlo_module)
    assert (p.name, p.id, len(p.computations), len(p.instructions)) == \
        ("jit_train_step", 16, 564, 7757)
    ops = Counter(i.opcode for i in p.instructions.values())
    assert (ops["all-gather-start"], ops["all-reduce-start"], ops["async-start"]) == (7, 8, 7)
    assert Counter(i.custom_call_target for i in p.instructions.values()
                   if i.opcode == "custom-call") == {"__cublas$gemm": 159}
    assert sorted((i.name, Program.trip_count(i)) for i in p.instructions.values()
                  if i.opcode == "while") == [("while.5.0", 3), ("while.7.0", 2)]
    assert sum(1 for i in p.instructions.values() if p.frames(i)) == 3648
