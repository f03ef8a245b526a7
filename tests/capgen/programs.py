"""Real GPU programs for the generator, and their expansion into the thunks XLA would run.

A program is an optimized `xla.HloModuleProto` (the MiniGPT fixtures in tests/data/, or the MaxText
H100 program read in place from ../shared/captures/). `expand()` walks its schedule as XLA's GPU
runtime does: while loops by their known trip count (the body once per iteration; the condition
only when the count is unknown), `call` and `conditional` (branch 0) followed, instructions that
launch nothing skipped, `*-done` kept as waits. Each launching instruction becomes one `Thunk`
with the kernels it launches and a cost from its shapes.
"""

from __future__ import annotations

import lzma
from dataclasses import dataclass, field
from math import prod
from pathlib import Path

import xprotos
from hlo_program import NO_LAUNCH_OPCODES, Program

TESTS = Path(__file__).resolve().parent.parent
SHARED = TESTS.parent.parent / "shared" / "captures"
PROGRAM_FILES = {
    "minigpt-1gpu": TESTS / "data" / "minigpt-h100" / "jit_train_step.1gpu.hlo.pb.xz",
    "minigpt-8gpu": TESTS / "data" / "minigpt-h100" / "jit_train_step.8gpu.hlo.pb.xz",
    "maxtext-h100": SHARED / "other-formats" / "nvidia-jax-toolbox-nsys-jax" /
    "maxtext-fsdp4-h100" / "dump" /
    "module_0016.jit_train_step.sm_9.0_gpu_after_optimizations.hlo.pb.xz",
}

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


@dataclass(frozen=True)
class KernelSpec:
    name: str        # the kernel symbol, before vendor decoration
    role: str        # compute | gemm | collective | copy
    flops: float
    bytes: float


@dataclass
class Thunk:
    instruction: str            # the HLO instruction that launches (truth)
    opcode: str
    kernels: list[KernelSpec] = field(default_factory=list)
    wait_for: str | None = None  # for *-done: the start instruction it waits on
    loop: tuple = ()            # ((while name, iteration), ...) enclosing this thunk
    collective: bool = False


# Programs read from a real capture's /host:metadata: name -> (capture file, program id)
CAPTURE_PROGRAMS = {
    "conv3d-mi300x": (SHARED / "tracelens-amd-rocm" / "mi300x-jax0.8-conv3d-8gpu" / "plugins" /
                      "profile" / "2026_02_20_13_53_59" / "tw003.xplane.pb", 15),
}


def load_program(name: str) -> Program:
    if name in CAPTURE_PROGRAMS:
        import xplane_reader
        path, program_id = CAPTURE_PROGRAMS[name]
        _, blob = xplane_reader.load_space(path).hlo_protos()[program_id]
        return Program(xplane_reader.parse_hlo(blob), program_id)
    path = PROGRAM_FILES[name]
    blob = lzma.decompress(path.read_bytes())
    cls = xprotos.classes()
    if name.startswith("maxtext"):
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


def kernels_for(program: Program, ins) -> list[KernelSpec]:
    flops, nbytes = _cost(program, ins)
    op = ins.opcode
    if op in COLLECTIVE_OPCODES:
        return [KernelSpec(op.replace("-start", ""), "collective", 0.0, nbytes)]
    if op == "async-start":
        inner = _async_inner(program, ins)
        if inner is not None and inner.opcode in COLLECTIVE_OPCODES:
            return [KernelSpec(inner.opcode.replace("-start", ""), "collective", 0.0, nbytes)]
        return [KernelSpec(sanitize(ins.name), "compute", flops, nbytes)]
    if op == "custom-call":
        target = ins.custom_call_target
        if "gemm" in target or "matmul" in target:
            return [KernelSpec("gemm", "gemm", flops, nbytes)]
        if "conv" in target:
            return [KernelSpec("im2col", "compute", 0.0, nbytes),
                    KernelSpec("gemm", "gemm", flops, nbytes)]
        return [KernelSpec(sanitize(target.strip("_$").replace("$", "_")) or "custom_call",
                           "compute", flops, nbytes)]
    if op in ("copy", "copy-start"):
        return [KernelSpec("copy", "copy", 0.0, nbytes)]
    if op == "fusion" and ins.name.startswith(("gemm_fusion", "triton_gemm")):
        return [KernelSpec(sanitize(ins.name), "gemm", flops, nbytes)]
    return [KernelSpec(sanitize(ins.name), "compute", flops, nbytes)]


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


def expand(program: Program, unknown_trip_count: int = 1) -> list[Thunk]:
    """The thunks of one execution of the program, in execution order."""
    out: list[Thunk] = []

    def walk(comp_id: int, loop: tuple) -> None:
        for ins in program.schedule(comp_id):
            op = ins.opcode
            if op in NO_LAUNCH_OPCODES:
                continue
            if op in WAIT_OPCODES:
                start = program.instructions.get(ins.operand_ids[0]) if ins.operand_ids else None
                out.append(Thunk(ins.name, op, [], start.name if start is not None else None,
                                 loop))
                continue
            if op == "while":
                called = list(ins.called_computation_ids)
                cond = [c for c in called if _is_condition(program, c)]
                body = [c for c in called if c not in cond]
                n = Program.trip_count(ins)
                for i in range(n if n is not None else unknown_trip_count):
                    if n is None and cond:
                        walk(cond[0], loop + ((ins.name, i),))
                    for b in body:
                        walk(b, loop + ((ins.name, i),))
                if n is None and cond:
                    walk(cond[0], loop + ((ins.name, "exit"),))
                continue
            if op == "call":
                for c in ins.called_computation_ids:
                    walk(c, loop)
                continue
            if op == "conditional":
                if len(ins.called_computation_ids) > 1:
                    walk(ins.called_computation_ids[0], loop)
                continue
            ks = kernels_for(program, ins)
            out.append(Thunk(ins.name, op, ks, None, loop,
                             any(k.role == "collective" for k in ks)))

    walk(program.entry_id, ())
    return out
