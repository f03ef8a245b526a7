"""Source frames and schedules of real programs saved in the shared AMD captures.

The MI300X (JAX 0.8) programs fill both `source_file/line` and `stack_frame_id`; the MI355X one
fills only `stack_frame_id` (capture-format.md). Both must give the same kind of answer."""

from __future__ import annotations

import xplane_reader
from hlo_program import Program

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
