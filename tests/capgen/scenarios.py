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
    # XLA runtime behaviours read in XLA's source (programs.py, flavours.py cite the files)
    # `copy` as a device-to-device memcpy: its own launch op by op, a memcpy node in graphs
    Scenario("nvidia-copy-xla-cb", vendor="nvidia", command_buffers="xla"),
    # fusions that run as memcpys: memcpy fusions (MaxText's wrapped_copy), newest XLA's
    # static-slice copies, dynamic-slice fusions around cuBLAS GEMMs
    Scenario("nvidia-memcpy-fusions", vendor="nvidia", program="maxtext-h100", steps=2,
             static_slice_memcpy=True),
    # copy-hero dynamic-slice fusions whose memcpy is labelled with the copy inside
    Scenario("nvidia-dsf-copy-hero", vendor="nvidia", dsf_copy_label="hero"),
    # older XLA's __dynamic_memcpy fusions: not commands, so they split the graphs
    Scenario("nvidia-dynamic-memcpy-xla-cb", vendor="nvidia", dynamic_memcpy_fusions=True,
             command_buffers="xla"),
    # partition-id / replica-id as 4-byte memsets, a no-op custom call launching nothing; host
    # memcpy/memset events named after the driver call
    Scenario("nvidia-ids-memset", vendor="nvidia", program="minigpt-8gpu", gpus=8, steps=2,
             plant_ids=True, api_launch_names=True),
    Scenario("rocm-ids-memset-xla-cb", vendor="rocm", plant_ids=True, command_buffers="xla"),
    # XLA's kernel reuse cache on ROCm too (on by default for NVIDIA)
    Scenario("rocm-reuse-cache", vendor="rocm", kernel_reuse_cache=True),
    # collectives recorded into graphs (COLLECTIVES enabled): NCCL kernels with the graph's label
    Scenario("nvidia-8gpu-cb-collectives", vendor="nvidia", program="minigpt-8gpu", gpus=8,
             steps=2, command_buffers="xla", graph_commands=("COLLECTIVES",)),
    # while loops whose trip count XLA does not know: condition kernels and a predicate copy to
    # the host every iteration, outside the graphs
    Scenario("nvidia-unknown-trip-count-xla-cb", vendor="nvidia", unknown_trip_counts=True,
             command_buffers="xla"),
    # double-buffered loops: `*.double_buffer_clone` and `*.peeled_double_buffer` instructions of
    # the real MaxText program, and the kernels they share
    Scenario("nvidia-maxtext-double-buffer", vendor="nvidia", program="maxtext-h100", steps=2),
    # the bundled example (examples/minigpt-h100-2gpu-cb): the MiniGPT program compiled for 8
    # H100s, its first two GPUs, three steps, command buffers as XLA forms them
    Scenario("example-2gpu-cb", vendor="nvidia", program="minigpt-8gpu", gpus=2, steps=3,
             command_buffers="xla"),
    # the large case: the real MaxText H100 program on 8 GPUs
    # the real PAX step (a 6.5 MB program) with command buffers as XLA forms them
    Scenario("nvidia-pax-cb", vendor="nvidia", program="pax-a100", steps=1,
             command_buffers="xla"),
    Scenario("nvidia-maxtext-8gpu", vendor="nvidia", program="maxtext-h100", gpus=8, steps=3,
             command_buffers="partial"),
    # the GPU idles between steps: with nothing recorded on the host (the Python tracer off, or
    # the time spent outside traced code), and with the host waiting on its input pipeline
    Scenario("nvidia-between-steps-unrecorded", vendor="nvidia", gpus=2, steps=4,
             between_steps_ps=400 * US, between_host="none"),
    Scenario("nvidia-between-steps-input", vendor="nvidia", gpus=2, steps=4,
             between_steps_ps=400 * US, between_host="input_pipeline"),
]}
