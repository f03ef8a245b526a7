"""The named scenarios of the corpus. Each is one `Scenario`; tests generate them into tmp folders.

Programs: `minigpt-1gpu` / `minigpt-8gpu` (tests/data/minigpt-h100, compiled for H100 without a
GPU), `maxtext-h100` (the real MaxText step in ../shared/captures/other-formats), `conv3d-mi300x`
(the real program of the MI300X conv3d capture: a convolution that launches im2col + GEMM).
"""

from __future__ import annotations

from capgen.generate import US, Scenario

SCENARIOS = {s.name: s for s in [
    # vendors, command buffers off
    Scenario("rocm-off", vendor="rocm"),
    Scenario("nvidia-off", vendor="nvidia"),
    # command buffers on, in several partitions
    Scenario("rocm-cb-partial", vendor="rocm", command_buffers="partial"),
    Scenario("nvidia-cb-partial", vendor="nvidia", command_buffers="partial"),
    Scenario("nvidia-cb-all", vendor="nvidia", command_buffers="all"),   # no exact anchor at all
    Scenario("rocm-cb-all-call-labels", vendor="rocm", command_buffers="all", graph_label="call"),
    Scenario("nvidia-cb-while-bodies", vendor="nvidia", command_buffers="while_bodies"),
    Scenario("nvidia-cb-profiling-fallback", vendor="nvidia",
             command_buffers="profiling_fallback"),
    # kernel reuse and ops that launch several kernels
    Scenario("rocm-reuse-splitk", vendor="rocm", kernel_reuse=0.3, split_k=0.5),
    Scenario("nvidia-reuse-splitk-cb", vendor="nvidia", kernel_reuse=0.3, split_k=0.5,
             command_buffers="partial"),
    Scenario("rocm-conv", vendor="rocm", program="conv3d-mi300x"),
    # reductions that zero their output with a memset first, op by op and inside graphs
    Scenario("rocm-reduce-init", vendor="rocm", reduce_init=1.0),
    Scenario("nvidia-reduce-init-cb", vendor="nvidia", reduce_init=0.7,
             command_buffers="partial"),
    # 8 GPUs with async collectives: labels kept / absent from the saved HLO; a straggler
    Scenario("rocm-8gpu", vendor="rocm", program="minigpt-8gpu", gpus=8),
    Scenario("nvidia-8gpu-prelabels", vendor="nvidia", program="minigpt-8gpu", gpus=8,
             collective_label="pre_async"),
    Scenario("rocm-8gpu-straggler", vendor="rocm", program="minigpt-8gpu", gpus=8,
             straggler_gpu=5, straggler_factor=1.6, work_scale=10.0),
    # steps without StepTraceAnnotation
    Scenario("rocm-no-steps", vendor="rocm", step_annotations=False),
    # launch-bound (host slow between launches, Python busy) vs device-bound (queue kept full)
    Scenario("nvidia-launch-bound", vendor="nvidia", thunk_host_ps=25 * US,
             step_python_ps=400 * US, expected_verdict="launch-bound"),
    Scenario("nvidia-device-bound", vendor="nvidia", work_scale=60.0, thunk_host_ps=US,
             launch_ps=2 * US, step_python_ps=20 * US, expected_verdict="device-bound"),
    # programs: one under two ids; several sharing a module name
    Scenario("rocm-duplicate-program-id", vendor="rocm", duplicate_program_id=41),
    Scenario("rocm-same-name-programs", vendor="rocm", same_name_programs=3),
    # planted defects
    Scenario("nvidia-cb-missing-replays", vendor="nvidia", command_buffers="partial",
             drop_graph_kernels=7),
    Scenario("rocm-json-disagrees", vendor="rocm", json_drop_gpu_events=5),
    Scenario("rocm-non-launch-correlation", vendor="rocm", non_launch_correlations=2),
    # the large case: the real MaxText H100 program on 8 GPUs
    Scenario("nvidia-maxtext-8gpu", vendor="nvidia", program="maxtext-h100", gpus=8, steps=3,
             command_buffers="partial"),
]}
