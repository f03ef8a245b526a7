"""What a GPU capture's events are: the GPU vocabulary (standard library only), beside
tracekit.tpu's for a TPU. The device-neutral rules and units stay in tracekit.trace_rules.

- GPU event kinds and categories from the event's name, its `hlo_op` label and its memcpy
  details: `kernel_kind` (what a matcher needs: gemm, gemm_aux, collective, copy, memset,
  compute) and `category` (what a budget needs: compute, collective, memcpy).
- Graph membership (`in_graph`): an event was launched inside a graph (a command buffer) when it
  carries a graph id, or when its correlation id joins a graph-launch host call. A correlation id
  merely shared by several events is not enough: the MI300X conv3d capture has two kernels
  sharing the id of a `hipStreamWaitEvent`.
- Host calls: graph launches, launches, and calls that launch nothing; a CPU capture's XLA:CPU
  thunks and a GPU tracer's runtime calls.
"""

from __future__ import annotations

import functools
import re

# ---------------------------------------------------------------- GPU events

COLLECTIVE_KERNEL_RE = re.compile(
    r"nccl|rccl|NCCL|RCCL|AllReduce|AllGather|ReduceScatter|AllToAll|SendRecv")
COLLECTIVE_HLO_RE = re.compile(
    r"^(all-reduce|all-gather|reduce-scatter|all-to-all|ragged-all-to-all|collective-permute|"
    r"collective-broadcast|send|recv)\b")
COPY_KERNEL_RE = re.compile(r"^(Memcpy|memcpy)|__amd_rocclr_copy|copyBuffer")
MEMSET_KERNEL_RE = re.compile(r"^(Memset|memset)|__amd_rocclr_fill|fillBuffer")
GEMM_KERNEL_RE = re.compile(r"^(Cijk_|sm\d+_xmma|cutlass|nvjet|ampere_|volta_|turing_|hopper_|"
                            r"void cutlass|void gemm|gemm|.*_gemm_|.*xmma_gemm)")
GEMM_AUX_RE = re.compile(r"splitKreduce|PostGSU|gemv2T_kernel|_reduce_kernel")

KINDS = ("compute", "gemm", "gemm_aux", "collective", "copy", "memset")
CATEGORY_OF_KIND = {"collective": "collective", "copy": "memcpy", "memset": "memcpy"}

# a kernel's kind by its name: the first that matches (else compute)
NAME_KINDS = (("collective", COLLECTIVE_KERNEL_RE.search), ("memset", MEMSET_KERNEL_RE.search),
              ("copy", COPY_KERNEL_RE.search), ("gemm_aux", GEMM_AUX_RE.search),
              ("gemm", GEMM_KERNEL_RE.match))


@functools.cache
def kernel_kind(name: str, hlo_op: str | None = None, memcpy: bool = False) -> str:
    """gemm, gemm_aux (a split-K reduction), collective, copy, memset or compute (memoized)."""
    if hlo_op and COLLECTIVE_HLO_RE.match(hlo_op):
        return "collective"
    kind = next((k for k, test in NAME_KINDS if test(name)), "compute")
    return "copy" if memcpy and kind not in ("collective", "memset") else kind


def category(name: str, hlo_op: str | None = None, memcpy: bool = False) -> str:
    """compute, collective or memcpy (memcpys and memsets)."""
    return CATEGORY_OF_KIND.get(kernel_kind(name, hlo_op, memcpy), "compute")


# ---------------------------------------------------------------- host calls and graphs

GRAPH_LAUNCH_RE = re.compile(r"GraphLaunch|CudaGraph|graph_launch", re.I)
NON_LAUNCH_RE = re.compile(
    r"StreamWaitEvent|LaunchHostFunc|EventRecord|EventSynchronize|StreamSynchronize|"
    r"EventQuery|StreamQuery|CtxSynchronize|DeviceSynchronize", re.I)
LAUNCH_RE = re.compile(r"Launch|Memcpy|Memset|memcpy|memset", re.I)
GRAPH_ID_STATS = frozenset({"cuda_graph_id", "hip_graph_id", "graph_id"})
# The runtime's own set-up of each execution on the host: XLA prepares and initialises its thunks
# before the first launch, Initialize recording or updating the command buffers (host events
# named after a command buffer, or command_buffer::...) (xla/service/gpu/gpu_executable.cc; on
# the H200 captures 342 us of Thunks::Initialize in a 622 us gap before each step's first kernel)
EXECUTION_SETUP_RE = re.compile(r"^(\[\d+\] )?(Thunks::(Prepare|Initialize)|command_buffer)")


def is_graph_launch(host_name: str) -> bool:
    return bool(GRAPH_LAUNCH_RE.search(host_name))


def join_kind(host_name: str, kernel_name: str) -> str:
    """What a correlation id joined: launch, graph_launch, or other (not a launch call)."""
    if GRAPH_LAUNCH_RE.search(host_name):
        return "graph_launch"
    return "launch" if not NON_LAUNCH_RE.search(host_name) and (
        LAUNCH_RE.search(host_name) or host_name == kernel_name) else "other"


def in_graph(has_graph_id: bool, joins_graph_launch: bool) -> bool:
    """The one rule for the `graph` column of every table."""
    return has_graph_id or joins_graph_launch


def is_cpu_thunk(stats) -> bool:
    """An XLA:CPU thunk event on /host:CPU (a CPU capture's kernel): it names its instruction
    and program (`hlo_op`, `program_id`) and carries no `correlation_id`. A GPU runtime call
    (cuLaunchKernel, hipModuleLaunchKernel, a memcpy) carries the tracer's correlation id even
    where it also names an instruction, so the host plane of a GPU capture whose GPU planes are
    missing is never taken for a CPU capture."""
    return "hlo_op" in stats and "program_id" in stats and "correlation_id" not in stats


def is_gpu_runtime_call(stats) -> bool:
    """A host event the GPU tracer (CUPTI, roctracer) recorded: it carries a correlation id."""
    return "correlation_id" in stats
