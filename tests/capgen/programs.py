"""Real GPU programs for the generator, and their expansion into the thunks XLA would run.

A program is an optimized `xla.HloModuleProto` (the MiniGPT fixtures in tests/data/, or the MaxText
H100 program read in place from ../shared/captures/). `expand()` walks its schedule as XLA's GPU
runtime does: while loops by their trip count (the body once per iteration; the condition, and a
one-byte copy of its predicate to the host, before every iteration and at the exit when the count
is unknown), `call` and `conditional` (branch 0) followed, instructions that emit no thunk skipped,
`*-done` kept as waits. Each launching instruction becomes one `Thunk` with the GPU work it
launches (kernels, memcpys, memsets) and a cost from its shapes.

What an instruction launches rests on reading XLA's GPU emitters (paths inside openxla/xla, cited
next to each rule below); `variant()` makes the program variations some scenarios need (loops whose
trip count XLA does not know, planted `partition-id`/`replica-id`/no-op custom calls, the
`__dynamic_memcpy` fusions of older XLA) from a copy of a real program.
"""

from __future__ import annotations

import json
import lzma
from dataclasses import dataclass, field
from math import prod
from pathlib import Path

from jaxperf.program.hlo_program import Program
from jaxperf.read import xprotos

TESTS = Path(__file__).resolve().parent.parent
SHARED = TESTS.parent.parent / "shared" / "captures"
PROGRAM_FILES = {
    "minigpt-1gpu": TESTS / "data" / "minigpt-h100" / "jit_train_step.1gpu.hlo.pb.xz",
    "minigpt-8gpu": TESTS / "data" / "minigpt-h100" / "jit_train_step.8gpu.hlo.pb.xz",
    "maxtext-h100": SHARED / "other-formats" / "nvidia-jax-toolbox-nsys-jax" /
    "maxtext-fsdp4-h100" / "dump" /
    "module_0016.jit_train_step.sm_9.0_gpu_after_optimizations.hlo.pb.xz",
    # the real PAX FSDP step for A100 (6.5 MB HloProto, 37,026 instructions, no while loops)
    "pax-a100": SHARED / "other-formats" / "nvidia-jax-toolbox-nsys-jax" /
    "pax-fsdp4-a100-proc0" / "dump" /
    "module_0040.pjit__wrapped_step_fn.sm_8.0_gpu_after_optimizations.hlo.pb.xz",
}

# The devices each fixture's HLO sharding spans (its entry parameters' OpShardings, as the
# compiler left them): a capture of it on fewer GPUs missed the others' work.
PARTITIONS = {"minigpt-8gpu": 8, "maxtext-h100": 4, "pax-a100": 4, "conv3d-mi300x": 8}

COLLECTIVE_OPCODES = frozenset({
    "all-reduce", "all-reduce-start", "all-gather", "all-gather-start", "reduce-scatter",
    "all-to-all", "collective-permute", "collective-permute-start", "collective-broadcast",
    "ragged-all-to-all",
})
WAIT_OPCODES = frozenset({
    "all-reduce-done", "all-gather-done", "collective-permute-done", "async-done",
    "copy-done", "send-done", "recv-done", "async-update",
})
CONTROL_OPCODES = frozenset({"while", "call", "conditional"})
# Instructions for which XLA emits no thunk at all. xla/service/gpu/thunk_emitter.cc
# (ThunkEmitter::EmitHloInstruction): add-dependency, after-all, bitcast, get-tuple-element,
# parameter and tuple give an empty sequence; a constant becomes a global of the executable
# (EmitConstant returns no thunk); opt-barrier and domain are gone before emission. This is the
# generator's own list, not hlo_program.NO_LAUNCH_OPCODES: `partition-id` and `replica-id` are NOT
# here, they emit a Partition/ReplicaIdThunk that runs a memset (see kernels_for).
NO_THUNK_OPCODES = frozenset({
    "parameter", "constant", "tuple", "get-tuple-element", "bitcast", "add-dependency",
    "after-all", "opt-barrier", "domain",
})
# Custom calls that emit no thunk: thunk_emitter.cc (DispatchCustomCall) returns an empty sequence
# for kNopCustomCallTarget, which xla/service/collective_ops_utils.h defines as "AllocateBuffer".
NOP_CUSTOM_CALL_TARGETS = frozenset({"AllocateBuffer"})
# Names of the custom fusions that XLA emits as dynamic-slice fusions
# (xla/backends/gpu/codegen/fusions.cc GetFusionEmitter; custom.cc; the "v2" name in
# xla/backends/gpu/transforms/dynamic_slice_copy.cc IsCopyHeroDynamicSliceFusion).
DSF_STATIC, DSF_DYNAMIC, DSF_V2 = ("address_computation", "dynamic_address_computation",
                                   "dynamic_slice_fusion")
# xla/service/gpu/ir_emission_utils.h: kDynamicMemcpyFusionKind.
DYNAMIC_MEMCPY_KIND = "__dynamic_memcpy"


@dataclass(frozen=True)
class KernelSpec:
    name: str        # the kernel symbol, before vendor decoration
    role: str        # compute | gemm | collective | copy | copy_d2h | copy_h2d | memset
    flops: float
    bytes: float
    inner: str = ""  # the instruction inside the fusion that the event's hlo_op names, if any
    size: int = 0    # bytes a memcpy moves / a memset writes (memcpy_details, Memset_details)


@dataclass
class Thunk:
    instruction: str            # the HLO instruction that launches (truth)
    opcode: str
    kernels: list[KernelSpec] = field(default_factory=list)
    wait_for: str | None = None  # for *-done: the start instruction it waits on
    loop: tuple = ()            # ((while name, iteration), ...) enclosing this thunk
    collective: bool = False
    comp: int = 0               # id of the computation whose schedule holds the instruction
    # The command type (DebugOptions::CommandBufferCmdType) XLA needs enabled to record this thunk
    # into a command buffer, None when it never can (see command_type()).
    cmd: str | None = "FUSION"
    condition: bool = False     # part of a while condition that runs on the host's loop
    host_sync: bool = False     # the host blocks until this thunk's GPU work is done


@dataclass(frozen=True)
class Options:
    """How XLA versions differ in what they launch (scenario options)."""
    # hlo_op of a copy-hero dynamic-slice fusion: the fusion, or the `copy` inside it
    dsf_copy_label: str = "fusion"
    # newest XLA emits a fusion whose root is a contiguous static slice of a parameter as a memcpy
    static_slice_memcpy: bool = False
    # loops whose trip count XLA does not know: while name -> iterations it really runs
    trip_counts: dict = field(default_factory=dict)


CAPTURE_PROGRAMS = {
    "conv3d-mi300x": (SHARED / "tracelens-amd-rocm" / "mi300x-jax0.8-conv3d-8gpu" / "plugins" /
                      "profile" / "2026_02_20_13_53_59" / "tw003.xplane.pb", 15),
}


def load_program(name: str) -> Program:
    """A program by name: PROGRAM_FILES, CAPTURE_PROGRAMS, or `small:<builder>` (one of the small
    programs built in small_programs.py)."""
    if name.startswith("small:"):
        from capgen import small_programs
        return small_programs.build(name.removeprefix("small:"))
    if name in CAPTURE_PROGRAMS:
        from jaxperf.read import xplane_reader
        path, program_id = CAPTURE_PROGRAMS[name]
        _, blob = xplane_reader.load_space(path).hlo_protos()[program_id]
        return Program(xplane_reader.parse_hlo(blob), program_id)
    path = PROGRAM_FILES[name]
    blob = lzma.decompress(path.read_bytes())
    cls = xprotos.classes()
    if name.startswith(("maxtext", "pax")):
        module = cls["HloProto"].FromString(blob).hlo_module
    else:
        module = cls["HloModuleProto"].FromString(blob)
    return Program(module)


def shape_bytes(shape) -> int:
    if shape.tuple_shapes:
        return sum(shape_bytes(s) for s in shape.tuple_shapes)
    bits = xprotos.PRIMITIVE_BITS.get(xprotos.PRIMITIVE_TYPES.get(shape.element_type, ""), 0)
    return prod(shape.dimensions) * bits // 8


def _dot_flops(program: Program, ins) -> float:
    """2*M*N*K of the first dot (in the instruction or its fused computation), else 0."""
    candidates = [ins]
    for cid in ins.called_computation_ids:
        comp = program.computations.get(cid)
        if comp is not None:
            candidates.extend(comp.instructions)
    for c in candidates:
        if c.opcode in ("dot", "convolution") or (
                c.opcode == "custom-call" and ("gemm" in c.custom_call_target or
                                               "matmul" in c.custom_call_target)):
            out = c.shape.tuple_shapes[0] if c.shape.tuple_shapes else c.shape
            k = 1
            if c.opcode == "dot" and c.operand_ids:
                lhs = _operand_shape(program, c, 0)
                for d in c.dot_dimension_numbers.lhs_contracting_dimensions:
                    if lhs is not None and d < len(lhs.dimensions):
                        k *= lhs.dimensions[d]
            elif c.operand_ids:
                lhs = _operand_shape(program, c, 0)
                k = lhs.dimensions[-1] if lhs is not None and lhs.dimensions else 1
            return 2.0 * prod(out.dimensions) * k
    return 0.0


def _operand_shape(program: Program, ins, i):
    if i >= len(ins.operand_ids):
        return None
    op = program.instructions.get(ins.operand_ids[i])
    return op.shape if op is not None else None


def _cost(program: Program, ins) -> tuple[float, float]:
    nbytes = shape_bytes(ins.shape) + sum(
        shape_bytes(program.instructions[o].shape) for o in ins.operand_ids
        if o in program.instructions)
    return _dot_flops(program, ins), float(nbytes)


def sanitize(name: str) -> str:
    """XLA names a fusion's kernel after the fusion with '.' and '-' turned into '_'."""
    return name.replace(".", "_").replace("-", "_")



def _backend_config(ins) -> dict:
    try:
        return json.loads(ins.backend_config or b"{}")
    except ValueError:
        return {}


def _fusion_config(ins) -> dict:
    return _backend_config(ins).get("fusion_backend_config", {})


def _fused(program: Program, ins):
    """(fused computation, its instructions by id, its root) of a fusion."""
    comp = program.computations[ins.called_computation_ids[0]]
    by_id = {i.id: i for i in comp.instructions}
    return comp, by_id, by_id.get(comp.root_id, comp.instructions[-1])


def _through_bitcasts(by_id, ins):
    while ins is not None and ins.opcode in ("bitcast", "reshape") and ins.operand_ids:
        ins = by_id.get(ins.operand_ids[0])
    return ins


def _same_layout(a, b) -> bool:
    return list(a.shape.layout.minor_to_major) == list(b.shape.layout.minor_to_major)


def fusion_kind(program: Program, ins, options: Options) -> str:
    """What XLA's fusion emitters make of a fusion at run time.

    memcpy          every root is `copy(parameter)` with the same layout: one device-to-device
                    memcpy per root, annotated with the fusion (xla/backends/gpu/codegen/fusions.cc
                    HloFusionInfo::GetCopyFusion; copy.cc MemcpyFusion::Emit)
    dynamic_memcpy  `fusion_backend_config.kind == "__dynamic_memcpy"`: one memcpy at an offset
                    computed on the host (fusions.cc GetFusionEmitter case kDynamicMemcpy; copy.cc
                    DynamicMemcpyFusion::Emit; the kind is set by
                    xla/service/gpu/transforms/fusion_dynamic_memcpy_rewriter.cc)
    dsf_copy        custom fusion "dynamic_slice_fusion" whose hero is a `copy`: one memcpy, run by
                    a DynamicSliceFusionV2Thunk around the hero's copy thunk
                    (xla/service/gpu/thunk_emitter.cc EmitDynamicSliceFusionV2 -> EmitCopy;
                    xla/backends/gpu/transforms/dynamic_slice_copy.cc IsCopyHeroDynamicSliceFusion)
    dsf_gemm        custom fusion "address_computation"/"dynamic_address_computation" around a
                    cuBLAS custom call: the library GEMM, annotated with the fusion
                    (xla/backends/gpu/codegen/custom.cc DynamicSliceFusion::Emit -> EmitGemm)
    slice_memcpy    (newest XLA, `options.static_slice_memcpy`) root a contiguous static slice of a
                    parameter: one memcpy (thunk_emitter.cc EmitStaticSliceCopyFusion)
    triton_gemm     a Triton GEMM fusion: one generated kernel
    kernel          everything else: one generated kernel
    """
    fb = _fusion_config(ins)
    kind = fb.get("kind", "")
    _, by_id, root = _fused(program, ins)
    if kind == "__custom_fusion":
        name = fb.get("custom_fusion_config", {}).get("name", "")
        if name in (DSF_STATIC, DSF_DYNAMIC, DSF_V2):
            hero = _dsf_hero(by_id)
            if hero is not None and hero.opcode == "copy" and name == DSF_V2:
                return "dsf_copy"
            if hero is not None and hero.opcode == "custom-call":
                return "dsf_gemm"
        return "kernel"
    if kind == DYNAMIC_MEMCPY_KIND:
        return "dynamic_memcpy"
    if ins.fusion_kind == "kLoop" or not ins.fusion_kind:
        roots = [by_id[o] for o in root.operand_ids] if root.opcode == "tuple" else [root]
        if roots and all(r.opcode == "copy" and by_id.get(r.operand_ids[0]) is not None and
                         by_id[r.operand_ids[0]].opcode == "parameter" and
                         _same_layout(r, by_id[r.operand_ids[0]]) for r in roots):
            return "memcpy"
        if options.static_slice_memcpy and root.opcode == "slice" and \
                by_id.get(root.operand_ids[0]) is not None and \
                by_id[root.operand_ids[0]].opcode == "parameter" and \
                _same_layout(root, by_id[root.operand_ids[0]]) and _contiguous_slice(
                    root, by_id[root.operand_ids[0]]):
            return "slice_memcpy"
    if ins.name.startswith(("gemm_fusion", "triton_gemm")) or "triton" in kind:
        return "triton_gemm"
    return "kernel"


def _contiguous_slice(slice_ins, source) -> bool:
    """A static slice is one contiguous block: after the first sliced dimension (minor to major)
    every more major dimension has extent 1 (dynamic_slice_copy.cc IsContiguousStaticSlice)."""
    dims, src = list(slice_ins.shape.dimensions), list(source.shape.dimensions)
    sliced = False
    for d in source.shape.layout.minor_to_major or range(len(src) - 1, -1, -1):
        if sliced and dims[d] != 1:
            return False
        if dims[d] < src[d]:
            sliced = True
    return True


def _dsf_hero(by_id):
    """The one instruction of a dynamic-slice fusion that is not slicing, plumbing or the scalar
    arithmetic of a slice offset."""
    plumbing = {"parameter", "constant", "dynamic-slice", "slice", "dynamic-update-slice",
                "bitcast", "reshape", "tuple", "get-tuple-element"}
    heroes = [i for i in by_id.values() if i.opcode not in plumbing and
              (i.shape.dimensions or i.shape.tuple_shapes or i.opcode == "custom-call")]
    return heroes[0] if len(heroes) == 1 else None


def kernels_for(program: Program, ins, options: Options | None = None) -> list[KernelSpec]:
    """The GPU work one scheduled instruction launches (empty: no thunk)."""
    options = options or Options()
    flops, nbytes = _cost(program, ins)
    op = ins.opcode
    if op in ("partition-id", "replica-id"):
        # xla/backends/gpu/runtime/replica_id_thunk.cc: ReplicaOrPartitionIdThunk::ExecuteOnStream
        # writes the id with stream->Memset32(dest, id, 4): a 4-byte memset, no kernel.
        return [KernelSpec("memset", "memset", 0.0, 4.0, size=4)]
    if op in COLLECTIVE_OPCODES:
        return [KernelSpec(op.replace("-start", ""), "collective", 0.0, nbytes)]
    if op == "async-start":
        inner = _async_inner(program, ins)
        if inner is not None and inner.opcode in COLLECTIVE_OPCODES:
            return [KernelSpec(inner.opcode.replace("-start", ""), "collective", 0.0, nbytes)]
        return [KernelSpec(sanitize(ins.name), "compute", flops, nbytes)]
    if op == "custom-call":
        target = ins.custom_call_target
        if target in NOP_CUSTOM_CALL_TARGETS:
            return []
        if "gemm" in target or "matmul" in target:
            return [KernelSpec("gemm", "gemm", flops, nbytes)]
        if "conv" in target:
            return [KernelSpec("im2col", "compute", 0.0, nbytes),
                    KernelSpec("gemm", "gemm", flops, nbytes)]
        return [KernelSpec(sanitize(target.strip("_$").replace("$", "_")) or "custom_call",
                           "compute", flops, nbytes)]
    if op in ("copy", "copy-start"):
        # thunk_emitter.cc EmitCopy: a DeviceToDeviceCopyThunk annotated with the copy itself.
        size = shape_bytes(ins.shape)
        return [KernelSpec("copy", "copy", 0.0, nbytes, size=size)]
    if op == "fusion":
        kind = fusion_kind(program, ins, options)
        _, by_id, root = _fused(program, ins)
        if kind == "memcpy":
            roots = [by_id[o] for o in root.operand_ids] if root.opcode == "tuple" else [root]
            return [KernelSpec("copy", "copy", 0.0, 2.0 * shape_bytes(r.shape),
                               size=shape_bytes(r.shape)) for r in roots]
        if kind in ("dynamic_memcpy", "slice_memcpy"):
            size = shape_bytes(root.shape) if root.opcode != "dynamic-update-slice" else \
                shape_bytes(by_id[root.operand_ids[1]].shape)
            return [KernelSpec("copy", "copy", 0.0, 2.0 * size, size=size)]
        if kind == "dsf_copy":
            hero = _dsf_hero(by_id)
            size = shape_bytes(hero.shape)
            # The hero's copy thunk runs under its own annotation inside the fusion's where the
            # embedded executor annotates each thunk (xla/backends/gpu/runtime/thunk_executor.cc
            # ThunkExecutor::ExecuteOnStream: a ScopedAnnotation per thunk; the CUPTI collector
            # keeps the innermost hlo_op), and under the fusion's only where it does not.
            inner = hero.name if options.dsf_copy_label == "hero" else ""
            return [KernelSpec("copy", "copy", 0.0, 2.0 * size, inner=inner, size=size)]
        if kind in ("dsf_gemm", "triton_gemm"):
            name = "gemm" if kind == "dsf_gemm" else sanitize(ins.name)
            return [KernelSpec(name, "gemm", flops, nbytes)]
    return [KernelSpec(sanitize(ins.name), "compute", flops, nbytes)]


def command_type(program: Program, ins, options: Options) -> str | None:
    """The DebugOptions command type under which XLA records this instruction's thunk into a
    command buffer; None when it never can. xla/service/gpu/transforms/
    command_buffer_scheduling.cc (IsCommand, IsAsyncStartCommand): fusions, sorts, `copy`,
    `partition-id` and `replica-id` are FUSION commands; `__dynamic_memcpy` fusions need
    DYNAMIC_SLICE_COPY_FUSION (older versions had no such case); a dynamic-slice fusion around a
    GEMM needs the GEMM to be a command (static offsets) or DYNAMIC_SLICE_FUSION (dynamic ones);
    cuBLAS calls CUBLAS/CUBLASLT, cuDNN CUDNN, other custom calls CUSTOM_CALL; all-reduce /
    all-gather starts and async reduce-scatter / all-to-all COLLECTIVES. The same mapping on
    thunks: xla/backends/gpu/runtime/command_buffer_conversion_pass.cc GetCommandBufferCmdType."""
    op = ins.opcode
    if op in ("copy", "partition-id", "replica-id", "sort"):
        return "FUSION"
    if op == "fusion":
        kind = fusion_kind(program, ins, options)
        if kind == "dynamic_memcpy":
            return "DYNAMIC_SLICE_COPY_FUSION"
        if kind == "dsf_gemm":
            name = _fusion_config(ins).get("custom_fusion_config", {}).get("name", "")
            return "CUBLAS" if name == DSF_STATIC else "DYNAMIC_SLICE_FUSION"
        return "FUSION"
    if op == "custom-call":
        target = ins.custom_call_target
        if "lt$matmul" in target:
            return "CUBLASLT"
        if "gemm" in target or "matmul" in target:
            return "CUBLAS"
        if "cudnn" in target:
            return "CUDNN"
        return "CUSTOM_CALL"
    if op in COLLECTIVE_OPCODES or op in WAIT_OPCODES:
        return "COLLECTIVES"
    if op == "async-start":
        inner = _async_inner(program, ins)
        if inner is not None and inner.opcode in COLLECTIVE_OPCODES:
            return "COLLECTIVES"
        return "FUSION" if inner is not None and inner.opcode == "fusion" else None
    return None


def _async_inner(program: Program, ins):
    for cid in ins.called_computation_ids:
        comp = program.computations.get(cid)
        if comp is not None and comp.instructions:
            root = [i for i in comp.instructions if i.id == comp.root_id]
            return root[0] if root else comp.instructions[-1]
    return None


def _is_condition(program: Program, comp_id: int) -> bool:
    comp = program.computations.get(comp_id)
    if comp is None:
        return False
    root = [i for i in comp.instructions if i.id == comp.root_id]
    root = root[0] if root else comp.instructions[-1]
    return root.shape.element_type == 1 and not root.shape.dimensions  # scalar pred


def _while_parts(program: Program, ins) -> tuple[list[int], list[int]]:
    called = list(ins.called_computation_ids)
    cond = [c for c in called if _is_condition(program, c)]
    return cond, [c for c in called if c not in cond]


def expand(program: Program, unknown_trip_count: int = 1,
           options: Options | None = None) -> list[Thunk]:
    """The thunks of one execution of the program, in execution order."""
    options = options or Options()
    out: list[Thunk] = []
    specs: dict[int, tuple] = {}  # instruction id -> (kernels, command type), computed once

    def walk(comp_id: int, loop: tuple, condition: bool = False) -> None:
        for ins in program.schedule(comp_id):
            op = ins.opcode
            if op in NO_THUNK_OPCODES:
                continue
            if op in WAIT_OPCODES:
                start = program.instructions.get(ins.operand_ids[0]) if ins.operand_ids else None
                out.append(Thunk(ins.name, op, [], start.name if start is not None else None,
                                 loop, comp=comp_id, cmd="COLLECTIVES", condition=condition))
                continue
            if op == "while":
                cond, body = _while_parts(program, ins)
                n = Program.trip_count(ins)
                if n is not None:
                    # xla/backends/gpu/runtime/while_thunk.cc (WhileThunk::ExecuteOnStream): with
                    # a known trip count only the body runs, trip_count times.
                    for i in range(n):
                        for b in body:
                            walk(b, loop + ((ins.name, i),), condition)
                    continue
                # Unknown trip count (no known_trip_count in the while's backend_config): every
                # iteration runs the condition, copies its pred to the host (stream Memcpy of
                # sizeof(bool)) and blocks the host until done, then the body; the exit runs the
                # condition once more (while_thunk.cc, the `for (;;)` loop).
                n = options.trip_counts.get(ins.name, unknown_trip_count)
                for i in list(range(n)) + ["exit"]:
                    it = loop + ((ins.name, i),)
                    for c in cond:
                        walk(c, it, True)
                    out.append(Thunk(ins.name, op, [KernelSpec("pred", "copy_d2h", 0.0, 1.0,
                                                                 size=1)],
                                     None, it, comp=comp_id, cmd=None, condition=True,
                                     host_sync=True))
                    if i != "exit":
                        for b in body:
                            walk(b, it, condition)
                continue
            if op == "call":
                for c in ins.called_computation_ids:
                    walk(c, loop, condition)
                continue
            if op == "conditional":
                if len(ins.called_computation_ids) > 1:
                    walk(ins.called_computation_ids[0], loop, condition)
                continue
            if ins.id not in specs:
                specs[ins.id] = (kernels_for(program, ins, options),
                                 command_type(program, ins, options))
            ks, cmd = specs[ins.id]
            if not ks:
                continue  # e.g. a no-op custom call: no thunk, nothing on the GPU
            out.append(Thunk(ins.name, op, ks, None, loop,
                             any(k.role == "collective" for k in ks), comp=comp_id, cmd=cmd,
                             condition=condition))

    walk(program.entry_id, ())
    return out


# ------------------------------------------------------------------------- kernel reuse

def emission_order(program: Program) -> list:
    """Fusions in the order XLA's thunk emitter visits them: each computation's schedule in order,
    a while's condition then its body at the while (thunk_emitter.cc EmitHloComputation,
    EmitWhile), a call's callee, a conditional's branches, an async-start's wrapped computation."""
    out = []
    seen: set[int] = set()

    def walk(comp_id: int) -> None:
        if comp_id in seen:
            return
        seen.add(comp_id)
        try:
            sched = program.schedule(comp_id)
        except (KeyError, ValueError):
            return
        for ins in sched:
            if ins.opcode == "fusion":
                out.append(ins)
            elif ins.opcode == "while":
                cond, body = _while_parts(program, ins)
                for c in cond + body:
                    walk(c)
            elif ins.opcode in ("call", "conditional", "async-start"):
                for c in ins.called_computation_ids:
                    walk(c)

    walk(program.entry_id)
    return out


_DROP_FIELDS = ("name", "id", "operand_ids", "called_computation_ids", "metadata",
                "backend_config", "control_predecessor_ids")


def _computation_key(program: Program, comp_id: int, memo: dict) -> bytes:
    """The computation as HloPrintOptions::Fingerprint prints it, as bytes: instructions in order
    with canonical names (operands by position), shapes with layouts, every attribute and constant
    literal; no names, ids, metadata or backend_config; called computations by their own key
    (xla/hlo/ir/hlo_print_options.h Canonical/Fingerprint; the reuse cache prints constants in full
    and no operand shapes: GetComputationFingerprint in xla/codegen/emitters/
    computation_fingerprint.h/.cc, in older versions xla/service/gpu/kernel_reuse_cache.cc)."""
    if comp_id in memo:
        return memo[comp_id]
    comp = program.computations[comp_id]
    index = {ins.id: k for k, ins in enumerate(comp.instructions)}
    parts = []
    for ins in comp.instructions:
        c = type(ins)()
        c.CopyFrom(ins)
        for f in _DROP_FIELDS:
            c.ClearField(f)
        c.DiscardUnknownFields()
        parts.append(c.SerializeToString(deterministic=True))
        parts.append(repr([index.get(o, -1) for o in ins.operand_ids]).encode())
        parts.extend(_computation_key(program, cid, memo) for cid in ins.called_computation_ids
                     if cid in program.computations)
        parts.append(b"root" if ins.id == comp.root_id else b";")
    memo[comp_id] = key = b"|".join(parts)
    return key


def _argument_key(ins) -> tuple:
    """The kernel arguments' part of the key: which arguments are the same buffer (an operand
    passed twice is one slice) and how many outputs are written. Alignment and aliasing, which
    XLA also keys on (GetArgumentFingerprint, same files), come from buffer
    assignment, which a saved program does not hold: taken as equal."""
    first: dict[int, int] = {}
    pattern = tuple(first.setdefault(o, k) for k, o in enumerate(ins.operand_ids))
    outputs = len(ins.shape.tuple_shapes) or 1
    return pattern, outputs


def kernel_reuse_names(program: Program, options: Options | None = None) -> dict[str, str]:
    """fusion name -> name of the first fusion (in emission order) whose kernel it launches, for the
    fusions that launch another fusion's kernel. XLA's KernelReuseCache
    (xla/service/gpu/kernel_reuse_cache.cc GetWithStatus) keys a compiled kernel on the fingerprint
    of (fused computation, kernel arguments, discriminator) and names it once, after the fusion that
    generated it (xla/backends/gpu/codegen/emitters/emitter_base.cc EmitterBase::Emit:
    SanitizeFunctionName(fusion.name()); Triton fusions use the same cache:
    xla/backends/gpu/codegen/triton/fusion.cc). Memcpy-like and custom fusions launch no generated
    kernel and take no part."""
    options = options or Options()
    memo: dict = {}
    first: dict[tuple, str] = {}
    out: dict[str, str] = {}
    for ins in emission_order(program):
        kind = fusion_kind(program, ins, options)
        if kind not in ("kernel", "triton_gemm"):
            continue
        key = (kind, _computation_key(program, ins.called_computation_ids[0], memo),
               _argument_key(ins))
        owner = first.setdefault(key, ins.name)
        if owner != ins.name:
            out[ins.name] = owner
    return out


# ------------------------------------------------------------------------- program variants

def variant(name: str, *, unknown_trip_counts: bool = False, plant_ids: bool = False,
            dynamic_memcpy: bool = False) -> tuple[Program, dict]:
    """A copy of a real program changed as some XLA runs have it, and the real trip counts of the
    loops whose count the copy no longer states.

    unknown_trip_counts: drop `known_trip_count` from every while's backend_config, as when XLA's
        loop analysis cannot prove the count (the loop still runs the count it had).
    plant_ids: put a `partition-id`, a `replica-id` and an `AllocateBuffer` custom call (a no-op)
        into the entry schedule, after its first fusion, as SPMD programs that read their
        partition (e.g. axis_index) have them.
    dynamic_memcpy: turn each copy-hero "dynamic_slice_fusion" whose hero copies a dynamic slice of
        a parameter into the loop fusion rooted at that dynamic-slice, marked `__dynamic_memcpy`:
        the form older XLA gave such fusions
        (xla/service/gpu/transforms/fusion_dynamic_memcpy_rewriter.cc, copy.cc
        DynamicMemcpyFusion::IsCandidateFusion).
    """
    base = load_program(name)
    module = type(base.module)()
    module.CopyFrom(base.module)
    trips: dict[str, int] = {}
    if unknown_trip_counts:
        for comp in module.computations:
            for ins in comp.instructions:
                if ins.opcode != "while":
                    continue
                cfg = _backend_config(ins)
                if "known_trip_count" in cfg:
                    trips[ins.name] = int(cfg.pop("known_trip_count").get("n", 1))
                    ins.backend_config = json.dumps(cfg, separators=(",", ":")).encode()
    if dynamic_memcpy:
        _plant_dynamic_memcpy(module)
    if plant_ids:
        _plant_ids(module)
    return Program(module), trips


def _plant_dynamic_memcpy(module) -> None:
    comps = {c.id: c for c in module.computations}
    for comp in module.computations:
        for ins in comp.instructions:
            if ins.opcode != "fusion":
                continue
            fb = _fusion_config(ins)
            if fb.get("custom_fusion_config", {}).get("name") != DSF_V2:
                continue
            fused = comps[ins.called_computation_ids[0]]
            by_id = {i.id: i for i in fused.instructions}
            root = by_id[fused.root_id]
            ds = _through_bitcasts(by_id, by_id.get(root.operand_ids[0])) \
                if root.opcode == "copy" else None
            if ds is None or ds.opcode != "dynamic-slice" or \
                    by_id[ds.operand_ids[0]].opcode != "parameter" or \
                    list(ds.shape.dimensions) != list(root.shape.dimensions):
                continue
            keep = [i for i in fused.instructions if i.id != root.id]
            del fused.instructions[:]
            fused.instructions.extend(keep)
            fused.root_id = ds.id
            cfg = _backend_config(ins)
            cfg["fusion_backend_config"] = {"kind": DYNAMIC_MEMCPY_KIND}
            ins.backend_config = json.dumps(cfg, separators=(",", ":")).encode()
            ins.fusion_kind = "kLoop"


def _plant_ids(module) -> None:
    entry = next(c for c in module.computations if c.id == module.entry_computation_id)
    next_id = 1 + max(i.id for c in module.computations for i in c.instructions)
    seq = module.schedule.sequences[entry.id].instruction_ids
    opcode = {i.id: i.opcode for i in entry.instructions}
    at = next((k + 1 for k, iid in enumerate(seq) if opcode.get(iid) == "fusion"), 0)
    planted = []
    for nm, op in (("partition-id.1", "partition-id"), ("replica-id.1", "replica-id"),
                   ("custom-call.nop", "custom-call")):
        ins = entry.instructions.add(name=nm, opcode=op, id=next_id)
        ins.shape.element_type = 8  # u32[]
        if op == "custom-call":
            ins.custom_call_target = "AllocateBuffer"
        planted.append(next_id)
        next_id += 1
    ids = list(seq)
    ids[at:at] = planted
    del seq[:]
    seq.extend(ids)
