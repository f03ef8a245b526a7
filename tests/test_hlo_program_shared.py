"""Source frames and schedules of real programs saved in the shared AMD captures; while loops
of real TPU programs (tests/data/).

The MI300X (JAX 0.8) programs fill both `source_file/line` and `stack_frame_id`; the MI355X one
fills only `stack_frame_id` (capture-format.md). Both must give the same kind of answer."""

from __future__ import annotations

import pytest

from conftest import REPO
from jaxperf.program.hlo_program import Program
from jaxperf.read import xplane_reader

RUNS = {
    "gemm": "mi300x-jax0.8-gemm/plugins/profile/2026_02_20_13_54_10/tw003.xplane.pb",
    "conv": "mi300x-jax0.8-conv3d-8gpu/plugins/profile/2026_02_20_13_53_59/tw003.xplane.pb",
    "attn": "mi355x-jax-te-fused-attn/plugins/profile/2026_05_20_08_45_02/934987a2fc2f.xplane.pb",
}


def _program(shared, run, program_id):
    space = xplane_reader.load_space(shared / "tracelens-amd-rocm" / RUNS[run])
    name, blob = space.hlo_protos()[program_id]
    return Program(xplane_reader.parse_hlo(blob), program_id)


def test_gemm_custom_call_line_from_both_metadata_kinds(shared):
    p = _program(shared, "gemm", 79)
    ins = p.by_name["custom-call.1"]
    assert ins.metadata.source_line == 37 and ins.metadata.stack_frame_id == 3
    assert [f"{f} {f.function}" for f in p.frames(ins)] == [
        "/workspace/traces/generate_gemm_trace.py:37 run_gemms",
        "/workspace/traces/generate_gemm_trace.py:76 main",
        "/workspace/traces/generate_gemm_trace.py:96 <module>"]
    assert [i.name for i in p.schedule(p.entry_id)] == ["b.1", "a.1", "custom-call.1",
                                                        "get-tuple-element.1"]


def test_conv_schedule_and_conv_line(shared):
    p = _program(shared, "conv", 15)
    assert [i.name for i in p.schedule(p.entry_id)] == [
        "param.1", "param", "loop_transpose_fusion", "bitcast.14.0", "input_transpose_fusion.1",
        "bitcast.12.0", "cudnn-conv.1", "get-tuple-element.2.0", "input_transpose_fusion",
        "bitcast.16.0"]
    assert str(p.user_frame(p.by_name["cudnn-conv.1"])) == \
        "/workspace/traces/generate_conv_trace.py:23"


def test_mi355x_stack_frames_only(shared):
    p = _program(shared, "attn", 17)
    dot = p.by_name["dot.16"]
    assert dot.metadata.source_file == "" and dot.metadata.stack_frame_id == 13
    assert p.user_frame(dot).function == "_build_layer_stack_fn.<locals>.block"
    assert str(p.user_frame(dot)) == "/workspace/12_te_fused_attn.py:92"
    frames = p.frames(p.by_name["input_reduce_fusion"])
    assert [str(f) for f in frames] == ["/workspace/12_te_fused_attn.py:134",
                                        "/workspace/12_te_fused_attn.py:158",
                                        "/workspace/12_te_fused_attn.py:187"]
    # 65 instructions carry a frame id; 6 fusions without one get theirs from fused instructions
    with_frames = sum(1 for i in p.instructions.values() if p.frames(i))
    own = sum(1 for i in p.instructions.values() if i.metadata.stack_frame_id)
    assert (len(p.instructions), own, with_frames) == (151, 65, 71)


def test_pax_framework_frames_are_not_user_code(shared):
    """The PAX FSDP program: praxis's einsum wrapper (base_ops.py:42) was the default user frame;
    every frame is in paxml, praxis, flax or an installed package, so there is no user frame,
    and the framework frame names the praxis call."""
    from capgen.programs import load_program
    from jaxperf.program import hlo_program
    p = load_program("pax-a100")
    einsums = [i for i in p.instructions.values()
               if p.frames(i) and str(p.frames(i)[0]) == "/opt/praxis/praxis/layers/base_ops.py:42"]
    assert einsums
    for ins in einsums:
        assert p.user_frame(ins) is None
        assert p.framework_frame(ins) == "praxis/layers/base_ops.py:42 __call__"
    # no instruction of the program has a user frame by default; --user-re still picks one
    assert not any(p.user_frame(i) for i in p.instructions.values())
    import re
    ins = einsums[0]
    assert str(p.user_frame(ins, re.compile(r"/praxis/layers/attentions\.py$"))) == \
        "/opt/praxis/praxis/layers/attentions.py:1475"
    # the rule on path components
    assert hlo_program.is_library_file("/usr/lib/python3/dist-packages/absl/app.py")
    assert hlo_program.is_library_file("/home/u/venv/lib/python3.11/site-packages/optax/x.py")
    assert hlo_program.is_library_file("/opt/flax/flax/linen/module.py")
    assert not hlo_program.is_library_file("/home/u/flaxmodels/train.py")
    assert hlo_program.framework_path("/x/site-packages/jax/_src/numpy/lax_numpy.py") == ""
    assert hlo_program.framework_path("/opt/praxis/praxis/layers/base_ops.py") == \
        "praxis/layers/base_ops.py"


@pytest.mark.parametrize("case, independent", [
    ("tpu-probes/lax_map_small", {"while.2": True}),  # lax.map of per-example gradients
    ("tpu-probes/fori_rows", {"while.3": True}),  # fori_loop writing out.at[i]
    ("tpu/scan_layers", {"while.6": False, "while.7": False}),  # a scan's carry, its backward
    ("tpu/tiny_step_scan", {"while": False}),  # steps scanned: the params carried
])
def test_a_loop_is_independent_only_where_no_value_flows_between_iterations(case, independent):
    """A while loop whose body passes its state through, counts, and writes each iteration's
    result into its own slice is independent (vmap would do it at once); a scan that carries a
    value from one iteration to the next is not. Every instruction of an independent loop's body
    names the loop, the loop names itself."""
    (xp,) = (REPO / "tests" / "data" / case).glob("plugins/profile/*/*.xplane.pb")
    programs = [Program(xplane_reader.parse_hlo(blob), pid)
                for pid, (_, blob) in xplane_reader.load_space(xp).hlo_protos().items()]
    prog = max(programs, key=lambda p: len(p.instructions))  # the step's, not an init's
    found = {}
    for ins in prog.instructions.values():
        if ins.opcode == "while":
            found[ins.name] = yes = prog.independent(ins)
            assert prog.independent_loop(ins) == (ins.name if yes else "")
            body = prog.computations[ins.called_computation_ids[0]]
            assert {prog.independent_loop(i) for i in body.instructions} == \
                {ins.name if yes else ""}
    assert found == independent
