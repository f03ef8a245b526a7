"""The named scenarios of the corpus. Each is one `Scenario`; tests generate them into tmp folders.

Programs: `minigpt-1gpu` / `minigpt-8gpu` (tests/data/minigpt-h100, compiled for H100 without a
GPU), `maxtext-h100` (the real MaxText step in ../shared/captures/other-formats), `conv3d-mi300x`
(the real program of the MI300X conv3d capture: a convolution that launches im2col + GEMM).

Several programs per step (`Scenario.plan`; the programs are built in small_programs.py, the
MiniGPT step aside):
- `eager-op-by-op`: a transformer block called op by op, each op a small jitted function of
  /workspace/model.py, 25 program executions of 14 programs per iteration (five different
  programs all named jit_matmul, three jit_add), the host slower between dispatches than the GPU
  runs them (dispatch-bound), no step annotation, the Python tracer on. The user's source, as
  the programs' stack frames and the traced calls name it:

      10 def layer_norm(x, g):      # jitted (as are matmul ... gelu); 11: statistics, 12: scale
      14 def matmul(x, w):          # 15: return x @ w
      17 def add(x, y):             # 18
      20 def split_heads(x):        # 21      23 def merge_heads(x):  # 24
      26 def multiply(x, s):        # 27      29 def softmax(x):      # 30, 31, 32
      34 def gelu(x):               # 35
      40 def block_forward(x, p):
      41     h = layer_norm(x, p.g1)
      42     x = add(x, attention(h, p))
      43     h = layer_norm(x, p.g2)
      44     return add(x, apply_layers(h, [dense_up, gelu, dense_down]))
      50 def attention(h, p):
      51-53  q, k, v = dense(h, p.wq, p.bq), dense(h, p.wk, p.bk), dense(h, p.wv, p.bv)
      54     q, k, v = split_heads(q), split_heads(k), split_heads(v)
      55     s = matmul(q, k.swapaxes(1, 2))
      56     s = multiply(s, 1 / math.sqrt(DH))     # a Python float: an argument copy
      57     a = softmax(s)
      58     o = matmul(a, v)
      59     return dense(merge_heads(o), p.wo, p.bo)
      60 def dense(x, w, b):
      61     return add(matmul(x, w), b)
      70 def apply_layers(x, layers):     # calls itself: a traced name nested in itself
      72     y = layers[0](x)
      73     return apply_layers(y, layers[1:]) if layers[1:] else y

- `eager-gelu-passes`: the block's MLP op by op (dense up, GELU, dense down) with the GELU
  written as jnp operations on line 36 (`0.5 * x * (1 + jnp.tanh(c * (x + 0.044715 * x ** 3)))`):
  eight element-wise passes, each a one-primitive program (jit_integer_pow, jit_multiply by a
  scalar or a tensor, jit_add, jit_tanh), dispatch-bound; jitted, XLA would fuse them into one.
  The dense down is a split-K Triton GEMM (four f32 partial sums, then their reduction fusion).
- `custom-calls`: one program of custom calls whose FLOPs only their backend configs state:
  Transformer Engine fused attention forward and backward (no mask; causal with dropout; grouped
  KV heads with a bottom-right window), cuDNN fused attention as XLA writes its config (causal
  from dimension numbers; no mask from the intermediate shape; a backward with grouped KV heads,
  a sliding window and dropout), and a Pallas Triton kernel without and with a cost estimate.
- `train-plus-optimizer` (and `-annotated`): the MiniGPT train step, then a separate optimizer
  program (jit_apply_updates, five fusions) each iteration; no step annotation, or one around
  both.
- `copies-on-other-gpu`: GPU 0 receives only the argument copies (host-to-device, outside any
  program) while GPU 7 runs the program, as in the real AMD captures where copies sit on GPU 0.
- `pipeline-stages` (2 GPUs) and `pipeline-stages-4`: stage k's program on GPU k, each stage
  reading the previous stage's result (its first kernel waits for the previous stage's last);
  no straggler.
"""

from __future__ import annotations

from capgen.generate import US, Execution, Plan, ProgramDef, Scenario

# The block's Python calls as the Python tracer names them ($<file>:<def line> <function>).
BLOCK, ATTENTION = "$model.py:40 block_forward", "$model.py:50 attention"
DENSE, APPLY = "$model.py:60 dense", "$model.py:70 apply_layers"
# Python time between two dispatches of the eager block: what a few lines of Python cost between
# jitted calls (argument handling, attribute look-ups, the pytree flattening of each call),
# enough that the GPU finishes each small program before the next one is launched.
EAGER_HOST_PS = 30 * US
# The small programs of the block, in the order they are first called (jax compiles a program at
# its first call and numbers programs in that order).
EAGER_PROGRAMS = ("layer_norm", "matmul_proj", "add_bias", "split_heads", "matmul_scores",
                  "multiply", "softmax", "matmul_attend", "merge_heads", "add_residual",
                  "matmul_up", "add_bias_up", "gelu", "matmul_down")


def _eager_plan() -> Plan:
    """One call of block_forward, op by op (see the module's docstring for the source)."""
    def dense(tag, *outer):
        calls = (BLOCK, *outer, f"{DENSE}#{tag}")
        proj = "matmul_proj" if tag in "qkvo" else f"matmul_{tag}"
        bias = "add_bias_up" if tag == "up" else "add_bias"
        return [(proj, calls, 0), (bias, calls, 0)]
    att = (BLOCK, ATTENTION)
    ops = [("layer_norm", (BLOCK,), 0), *dense("q", ATTENTION), *dense("k", ATTENTION),
           *dense("v", ATTENTION), ("split_heads", att, 0), ("split_heads", att, 0),
           ("split_heads", att, 0), ("matmul_scores", att, 0), ("multiply", att, 1),
           ("softmax", att, 0), ("matmul_attend", att, 0), ("merge_heads", att, 0),
           *dense("o", ATTENTION), ("add_residual", (BLOCK,), 0), ("layer_norm", (BLOCK,), 0),
           *dense("up", f"{APPLY}#1"), ("gelu", (BLOCK, f"{APPLY}#1", f"{APPLY}#2"), 0),
           *dense("down", f"{APPLY}#1", f"{APPLY}#2", f"{APPLY}#3"),
           ("add_residual", (BLOCK,), 0)]
    programs = tuple(ProgramDef(k, f"small:{k}", 21 + 2 * i)
                     for i, k in enumerate(EAGER_PROGRAMS))
    # the host's time before each dispatch varies a little from op to op (deterministically)
    iteration = tuple(Execution(k, host_before_ps=EAGER_HOST_PS + (i * 13 % 5) * 6 * US,
                                python=calls, argument_copies=copies, copy_bytes=4)
                      for i, (k, calls, copies) in enumerate(ops))
    return Plan(programs, iteration, dispatch_bound=True)


# The MLP of the block op by op with its GELU written as jnp operations (small_programs
# GELU_PASSES): dense up, eight element-wise passes from line 36, dense down.
GELU_EAGER_ORDER = ("gelu_pow", "gelu_mul_scalar", "gelu_add", "gelu_mul_scalar", "gelu_tanh",
                    "gelu_add_scalar", "gelu_mul", "gelu_mul_scalar")


def _gelu_eager_plan() -> Plan:
    names = ("matmul_up", "add_bias_up", *dict.fromkeys(GELU_EAGER_ORDER), "matmul_down_split_k")
    programs = tuple(ProgramDef(k, f"small:{k}", 21 + 2 * i) for i, k in enumerate(names))
    mlp = (BLOCK, f"{APPLY}#1")
    ops = [("matmul_up", (*mlp, f"{DENSE}#up"), 0), ("add_bias_up", (*mlp, f"{DENSE}#up"), 0),
           *((k, (*mlp, f"{APPLY}#2"), 1 if k.endswith("scalar") else 0)
             for k in GELU_EAGER_ORDER),
           ("matmul_down_split_k", (*mlp, f"{APPLY}#2", f"{APPLY}#3", f"{DENSE}#down"), 0)]
    iteration = tuple(Execution(k, host_before_ps=EAGER_HOST_PS + (i * 13 % 5) * 6 * US,
                                python=calls, argument_copies=copies, copy_bytes=4)
                      for i, (k, calls, copies) in enumerate(ops))
    return Plan(programs, iteration, dispatch_bound=True)


# Fused-attention and kernel calls (small_programs.custom_calls), one program a step.
CUSTOM_CALLS = Plan((ProgramDef("calls", "small:custom_calls", 21),),
                    (Execution("calls", host_before_ps=40 * US),))

TRAIN_PLUS_OPTIMIZER = Plan(
    (ProgramDef("train", "minigpt-1gpu", 17, "train_step"),
     ProgramDef("optimizer", "small:apply_updates", 19)),
    (Execution("train", host_before_ps=60 * US, argument_copies=1),
     Execution("optimizer", host_before_ps=15 * US)))

COPIES_ON_OTHER_GPU = Plan(
    (ProgramDef("train", "minigpt-1gpu", 17, "train_step"),),
    (Execution("train", gpus=(7,), copy_gpus=(0,), argument_copies=2, host_before_ps=60 * US),))


def _pipeline_plan(stages: int) -> Plan:
    """Stage k on GPU k; stage k > 0 reads stage k-1's result (dispatched right after it: jax
    does not wait, the stage's GPU does)."""
    call = ("$pipeline.py:28 pipeline_step",)
    programs = tuple(ProgramDef(f"stage{k}", f"small:stage{k}" + (
        "_loss" if k == stages - 1 else ""), 21 + 2 * k) for k in range(stages))
    iteration = tuple(Execution(f"stage{k}", gpus=(k,), python=call,
                                host_before_ps=40 * US if k == 0 else 10 * US,
                                argument_copies=1 if k == 0 else 0,
                                after=k - 1 if k else None) for k in range(stages))
    return Plan(programs, iteration)


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

# Several programs per step: an eager op-by-op loop, a train step and its optimizer, a GPU with
# argument copies only, pipeline stages on GPUs of their own. Named apart (tests of steps,
# programs and GPU groups take them from here) and part of SCENARIOS, whose every scenario the
# analyses' own tests run end to end (tests/test_trust.py, tests/test_attribute_kernels.py).
MULTI_PROGRAM_SCENARIOS = {s.name: s for s in [
    # op by op, dispatch-bound, no step annotation (module docstring)
    Scenario("eager-op-by-op", vendor="nvidia", program="", steps=4, step_annotations=False,
             plan=_eager_plan()),
    Scenario("eager-op-by-op-rocm", vendor="rocm", program="", steps=3, step_annotations=False,
             plan=_eager_plan()),
    # the MLP op by op, its GELU as eight jnp element-wise passes of one line
    Scenario("eager-gelu-passes", vendor="nvidia", program="", steps=4, step_annotations=False,
             plan=_gelu_eager_plan()),
    # Transformer Engine and cuDNN attention (masks, GQA, windows, dropout) and Pallas calls
    Scenario("custom-calls", vendor="nvidia", program="", steps=3, step_annotations=False,
             plan=CUSTOM_CALLS),
    # a train step and a separate optimizer program, without and with a step annotation
    Scenario("train-plus-optimizer", vendor="nvidia", program="", steps=4,
             step_annotations=False, plan=TRAIN_PLUS_OPTIMIZER),
    Scenario("train-plus-optimizer-annotated", vendor="nvidia", program="", steps=4,
             plan=TRAIN_PLUS_OPTIMIZER),
    # the argument copies on GPU 0, the program on GPU 7
    Scenario("copies-on-other-gpu", vendor="rocm", program="", gpus=8, steps=4,
             step_annotations=False, plan=COPIES_ON_OTHER_GPU),
    # pipeline stages, each a different program on its own GPU
    Scenario("pipeline-stages", vendor="nvidia", program="", gpus=2, steps=4,
             plan=_pipeline_plan(2)),
    Scenario("pipeline-stages-4", vendor="nvidia", program="", gpus=4, steps=3,
             plan=_pipeline_plan(4)),
]}
SCENARIOS.update(MULTI_PROGRAM_SCENARIOS)
ALL_SCENARIOS = SCENARIOS
