"""Small GPU programs built as XLA's GPU compiler leaves them, for steps of several programs.

A JAX user who calls small jitted functions one after another (op by op), a train step followed by
a separate optimizer program, or pipeline stages on different GPUs runs several programs per step.
Each builder here returns the optimized program of one such function as an `xla.HloModuleProto`:
a scheduled entry computation of parameters, fusions (each with its fused computation, named as
XLA's GPU fusion passes name them: `loop_<op>_fusion`, `input_reduce_fusion`, `gemm_fusion_dot`
with a Triton backend config) and cuBLAS GEMM custom calls (`__cublas$gemm`, a tuple of the result
and its workspace, read through a `get-tuple-element`), in the shape the MiniGPT H100 fixture
shows them. Every instruction carries OpMetadata: `op_name` (the jit name stack) and a
`stack_frame_id` into the module's `stack_frame_index`, whose frames are the Python lines the
function was traced from (innermost first, as jax records them: the jitted function's own line,
then its callers), so a kernel attributes to a Python line. A jitted function is traced once, at
its first call: later calls from other lines run the same program with the first call's frames.

The Python source the frames point at (`/workspace/model.py`, `/workspace/train.py`,
`/workspace/pipeline.py`) is described in scenarios.py beside the plans that call it.
"""

from __future__ import annotations

import json

from jaxperf.program.hlo_program import Program
from jaxperf.read import xprotos

PRED, S8, U8, S32, F32, BF16, TUPLE = 1, 2, 6, 4, 11, 16, 13
# The backend config XLA writes on loop and input fusions (as in tests/data/minigpt-h100).
FUSION_CONFIG = json.dumps({
    "operation_queue_id": "0", "force_earliest_schedule": False, "reification_cost": [],
    "device_type": "DEVICE_TYPE_INVALID",
    "native_emitter_backend_config": {"type": "NATIVE_EMITTER_TYPE_INVALID", "unroll_factor": 0}},
    separators=(",", ":")).encode()
# A Triton GEMM fusion's config (kind `__triton_nested_gemm_fusion`, as in the MiniGPT fixture).
TRITON_CONFIG = json.dumps({
    "operation_queue_id": "0", "fusion_backend_config": {
        "kind": "__triton_nested_gemm_fusion", "block_level_fusion_config": {
            "num_warps": "4", "output_tiles": [{"sizes": ["64", "64"]}], "num_ctas": 1,
            "num_stages": 3, "is_tma_allowed": False, "is_warp_specialization_allowed": False,
            "waves_per_eu": 0}},
    "force_earliest_schedule": False, "reification_cost": [],
    "device_type": "DEVICE_TYPE_INVALID"}, separators=(",", ":")).encode()
# cuBLAS workspace XLA allocates beside a GEMM's result (the tuple's second element), in bytes.
GEMM_WORKSPACE_BYTES = 4 * 1024 * 1024

MODEL = "/workspace/model.py"
TRAIN = "/workspace/train.py"
PIPELINE = "/workspace/pipeline.py"
OPTAX = "/usr/local/lib/python3.12/site-packages/optax/_src/transform.py"
# The frames of the user's loop that calls the model block (outermost first).
MAIN = (TRAIN, 30, "main")


class _Builder:
    """Builds one HloModuleProto: computations, instructions with shapes, metadata and frames."""

    def __init__(self, module_name: str):
        self.hlo = xprotos.classes()["HloProto"]()
        self.m = self.hlo.hlo_module
        self.m.name = module_name
        self.fn = module_name.removeprefix("jit_")
        self._next_id = 0
        self._next_comp = 0
        self._names: dict[str, int] = {}
        self._files: dict[str, int] = {}
        self._functions: dict[str, int] = {}
        self._locations: dict[tuple, int] = {}
        self._frames: dict[tuple, int] = {}
        self._params = 0
        self.entry = self.computation("main")
        self.m.entry_computation_id = self.entry.id
        self.m.entry_computation_name = self.entry.name
        self.schedule: list[int] = []

    # ---------------------------------------------------------------- names, ids, frames
    def name(self, base: str) -> str:
        """XLA's unique names: the first `base`, then `base.1`, `base.2`, ..."""
        n = self._names.get(base, 0)
        self._names[base] = n + 1
        return base if n == 0 else f"{base}.{n}"

    def _id(self) -> int:
        self._next_id += 1
        return self._next_id

    def computation(self, base: str, fusion: bool = False):
        self._next_comp += 1
        comp = self.m.computations.add(name=self.name(base), id=self._next_comp)
        comp.is_fusion_computation = fusion
        return comp

    def frame(self, chain) -> int:
        """The stack frame id of the innermost of `chain` ((file, line, function), outermost
        first); stack_frame_index ids are 1-based, a frame's parent is its caller."""
        sfi = self.m.stack_frame_index
        parent = 0
        for file, line, function in chain:
            if file not in self._files:
                sfi.file_names.append(file)
                self._files[file] = len(sfi.file_names)
            if function not in self._functions:
                sfi.function_names.append(function)
                self._functions[function] = len(sfi.function_names)
            loc = (self._files[file], self._functions[function], line)
            if loc not in self._locations:
                sfi.file_locations.add(file_name_id=loc[0], function_name_id=loc[1], line=line)
                self._locations[loc] = len(sfi.file_locations)
            key = (self._locations[loc], parent)
            if key not in self._frames:
                sfi.stack_frames.add(file_location_id=key[0], parent_frame_id=parent)
                self._frames[key] = len(sfi.stack_frames)
            parent = self._frames[key]
        return parent

    # ---------------------------------------------------------------- instructions
    def ins(self, comp, base: str, opcode: str, dtype: int, dims, operands=(), *,
            frame: int = 0, op: str = "", **fields):
        i = comp.instructions.add(name=self.name(base), opcode=opcode, id=self._id())
        _shape(i.shape, dtype, dims)
        i.operand_ids.extend(o.id for o in operands)
        if op:
            i.metadata.op_name = f"jit({self.fn})/{op}"
        if frame:
            i.metadata.stack_frame_id = frame
        for k, v in fields.items():
            if isinstance(v, (list, tuple)):
                getattr(i, k).extend(v)
            else:
                setattr(i, k, v)
        return i

    def parameter(self, base: str, dtype: int, dims):
        p = self.ins(self.entry, base, "parameter", dtype, dims, op="",
                     parameter_number=self._params)
        p.metadata.op_name = base.split(".")[0]
        self._params += 1
        self.schedule.append(p.id)
        return p

    def scalar_add(self):
        """The reduction computation `region` (a scalar add) that reduces call."""
        comp = self.computation("region")
        a = self.ins(comp, "Arg_0", "parameter", F32, (), parameter_number=0)
        b = self.ins(comp, "Arg_1", "parameter", F32, (), parameter_number=1)
        root = self.ins(comp, "add", "add", F32, (), (a, b))
        comp.root_id = root.id
        return comp

    def fusion(self, base: str, kind: str, operands, body, *, frame: int, op: str,
               config: bytes = FUSION_CONFIG, comp_base: str | None = None):
        """A fusion of `operands`; `body(comp, params)` builds the fused computation and returns
        its root (whose shape the fusion takes)."""
        comp = self.computation(comp_base or "fused_" + base.split("_")[1], fusion=True)
        params = [self.ins(comp, f"param_{k}", "parameter", o.shape.element_type,
                           tuple(o.shape.dimensions), parameter_number=k)
                  for k, o in enumerate(operands)]
        root = body(comp, params)
        comp.root_id = root.id
        for i in comp.instructions:
            if i.opcode != "parameter" and not i.metadata.op_name:
                i.metadata.op_name = f"jit({self.fn})/{op}"
                i.metadata.stack_frame_id = frame
        f = self.ins(self.entry, base, "fusion", root.shape.element_type,
                     tuple(root.shape.dimensions), operands, frame=frame, op=op,
                     fusion_kind=kind, called_computation_ids=[comp.id], backend_config=config)
        f.metadata.scheduling_name = f.name
        self.schedule.append(f.id)
        return f

    def cublas_gemm(self, lhs, rhs, *, frame: int, op: str = "dot_general"):
        """A cuBLAS GEMM custom call (result and workspace as a tuple) and its result."""
        m, k = lhs.shape.dimensions
        n = rhs.shape.dimensions[1]
        dtype = lhs.shape.element_type
        cc = self.entry.instructions.add(name=self.name("custom-call"), opcode="custom-call",
                                         id=self._id(), custom_call_target="__cublas$gemm")
        cc.shape.element_type = 13  # tuple
        _shape(cc.shape.tuple_shapes.add(), dtype, (m, n))
        _shape(cc.shape.tuple_shapes.add(), S8, (GEMM_WORKSPACE_BYTES,))
        cc.operand_ids.extend([lhs.id, rhs.id])
        cc.metadata.op_name = f"jit({self.fn})/{op}"
        cc.metadata.stack_frame_id = frame
        cc.backend_config = json.dumps({
            "operation_queue_id": "0", "gemm_backend_config": {
                "alpha_real": 1, "alpha_imag": 0, "beta": 0,
                "dot_dimension_numbers": {"lhs_contracting_dimensions": ["1"],
                                          "rhs_contracting_dimensions": ["0"],
                                          "lhs_batch_dimensions": [],
                                          "rhs_batch_dimensions": []},
                "precision_config": {"operand_precision": ["DEFAULT", "DEFAULT"],
                                     "algorithm": "ALG_UNSET"},
                "epilogue": "DEFAULT", "damax_output": False,
                "selected_algorithm": "-1", "autotune_workspace_size": "0"}},
            separators=(",", ":")).encode()
        self.schedule.append(cc.id)
        gte = self.ins(self.entry, "get-tuple-element", "get-tuple-element", dtype, (m, n), (cc,),
                       frame=frame, op=op, tuple_index=0)
        self.schedule.append(gte.id)
        return gte

    def finish(self, root) -> Program:
        self.entry.root_id = root.id
        if root.id not in self.schedule:
            self.schedule.append(root.id)
        self.m.schedule.sequences[self.entry.id].instruction_ids.extend(self.schedule)
        return Program(self.m)


def _shape(shape, dtype: int, dims) -> None:
    shape.element_type = dtype
    shape.dimensions.extend(dims)
    shape.layout.minor_to_major.extend(range(len(dims) - 1, -1, -1))


def _elementwise(b: _Builder, comp, opcode: str, params, dims):
    """`opcode` over params, broadcasting each smaller operand along the output's leading dims."""
    args = []
    for p in params:
        pd = tuple(p.shape.dimensions)
        if pd == tuple(dims):
            args.append(p)
            continue
        lead = len(dims) - len(pd)
        args.append(b.ins(comp, "broadcast", "broadcast", p.shape.element_type, dims, (p,),
                          dimensions=list(range(lead, len(dims)))))
    return b.ins(comp, opcode, opcode, params[0].shape.element_type, dims, args)


# ------------------------------------------------------------------- the model block (eager)
# Dimensions of the block: tokens, model width, heads x head width, MLP width.
T, D, H, DH, F = 512, 1024, 16, 64, 4096


def _model_frames(b: _Builder, inner_line: int, inner_function: str, callers) -> int:
    """Frames for a jitted function of model.py traced from `callers` (outermost first, each
    (line, function) in model.py), under the training script's main."""
    chain = [MAIN] + [(MODEL, ln, fn) for ln, fn in callers] + \
        [(MODEL, inner_line, inner_function)]
    return b.frame(chain)


def layer_norm() -> Program:
    """jit_layer_norm: an input fusion reducing each token's mean and variance (f32), then a loop
    fusion normalizing and scaling: two kernels."""
    b = _Builder("jit_layer_norm")
    x = b.parameter("x.1", BF16, (T, D))
    g = b.parameter("g.1", BF16, (D,))
    fr = _model_frames(b, 11, "layer_norm", [(41, "block_forward")])
    add = b.scalar_add()

    def stats(comp, ps):
        cv = b.ins(comp, "convert", "convert", F32, (T, D), ps[:1])
        zero = b.ins(comp, "constant", "constant", F32, ())
        return b.ins(comp, "reduce", "reduce", F32, (T,), (cv, zero), dimensions=[1],
                     called_computation_ids=[add.id])
    red = b.fusion("input_reduce_fusion", "kInput", [x], stats, frame=fr, op="reduce_sum",
                   comp_base="fused_reduce")
    fr2 = _model_frames(b, 12, "layer_norm", [(41, "block_forward")])

    def norm(comp, ps):
        xb, s, gg = ps
        bs = b.ins(comp, "broadcast", "broadcast", F32, (T, D), (s,), dimensions=[0])
        cv = b.ins(comp, "convert", "convert", F32, (T, D), (xb,))
        sub = b.ins(comp, "subtract", "subtract", F32, (T, D), (cv, bs))
        mul = b.ins(comp, "multiply", "multiply", F32, (T, D), (sub, bs))
        back = b.ins(comp, "convert", "convert", BF16, (T, D), (mul,))
        bg = b.ins(comp, "broadcast", "broadcast", BF16, (T, D), (gg,), dimensions=[1])
        return b.ins(comp, "multiply", "multiply", BF16, (T, D), (back, bg))
    out = b.fusion("loop_multiply_fusion", "kLoop", [x, red, g], norm, frame=fr2,
                   op="mul", comp_base="fused_multiply")
    return b.finish(out)


def matmul(m: int, k: int, n: int, callers, triton_batch: int = 0) -> Program:
    """jit_matmul for one shape: one cuBLAS GEMM (m x k @ k x n), or with `triton_batch` a
    batched Triton GEMM fusion (the attention's per-head products)."""
    b = _Builder("jit_matmul")
    fr = _model_frames(b, 15, "matmul", callers)
    if not triton_batch:
        x = b.parameter("x.1", BF16, (m, k))
        w = b.parameter("w.1", BF16, (k, n))
        return b.finish(b.cublas_gemm(x, w, frame=fr))
    x = b.parameter("x.1", BF16, (triton_batch, m, k))
    w = b.parameter("w.1", BF16, (triton_batch, k, n))

    def body(comp, ps):
        d = b.ins(comp, "dot", "dot", BF16, (triton_batch, m, n), ps)
        d.dot_dimension_numbers.lhs_contracting_dimensions.append(2)
        d.dot_dimension_numbers.rhs_contracting_dimensions.append(1)
        d.dot_dimension_numbers.lhs_batch_dimensions.append(0)
        d.dot_dimension_numbers.rhs_batch_dimensions.append(0)
        return d
    out = b.fusion("gemm_fusion_dot", "kCustom", [x, w], body, frame=fr, op="dot_general",
                   config=TRITON_CONFIG, comp_base="gemm_fusion_dot_computation")
    return b.finish(out)


def matmul_split_k(m: int, k: int, n: int, splits: int, callers) -> Program:
    """jit_matmul as XLA's split-K rewrite makes it (xla/service/gpu/split_k_gemm_rewriter.cc,
    MakeDotSplitKBatch): a Triton GEMM fusion whose dot splits K into a leading batch dimension
    of `splits` f32 partial sums, then a reduction fusion summing them over that dimension (and
    converting to bf16): two kernels, the second the partial-sum kernel."""
    b = _Builder("jit_matmul")
    fr = _model_frames(b, 15, "matmul", callers)
    x = b.parameter("x.1", BF16, (m, k))
    w = b.parameter("w.1", BF16, (k, n))
    ks = k // splits

    def gemm(comp, ps):
        lhs = b.ins(comp, "bitcast", "bitcast", BF16, (m, splits, ks), ps[:1])
        lhs = b.ins(comp, "transpose", "transpose", BF16, (splits, m, ks), (lhs,),
                    dimensions=[1, 0, 2])
        rhs = b.ins(comp, "bitcast", "bitcast", BF16, (splits, ks, n), ps[1:])
        d = b.ins(comp, "dot", "dot", F32, (splits, m, n), (lhs, rhs))
        d.dot_dimension_numbers.lhs_contracting_dimensions.append(2)
        d.dot_dimension_numbers.rhs_contracting_dimensions.append(1)
        d.dot_dimension_numbers.lhs_batch_dimensions.append(0)
        d.dot_dimension_numbers.rhs_batch_dimensions.append(0)
        return d
    partial = b.fusion("gemm_fusion_dot", "kCustom", [x, w], gemm, frame=fr, op="dot_general",
                       config=TRITON_CONFIG.replace(b'"num_ctas":1', b'"num_ctas":1,'
                                                    b'"split_k":"%d"' % splits),
                       comp_base="gemm_fusion_dot_computation")
    add_ = b.scalar_add()

    def total(comp, ps):
        zero = b.ins(comp, "constant", "constant", F32, ())
        r = b.ins(comp, "reduce", "reduce", F32, (m, n), (ps[0], zero), dimensions=[0],
                  called_computation_ids=[add_.id])
        return b.ins(comp, "convert", "convert", BF16, (m, n), (r,))
    out = b.fusion("loop_reduce_fusion", "kLoop", [partial], total, frame=fr,
                   op="dot_general", comp_base="fused_reduce")
    return b.finish(out)


def add(dims, other_dims, callers) -> Program:
    """jit_add for one pair of shapes: one loop fusion (a bias broadcast, or a residual)."""
    b = _Builder("jit_add")
    x = b.parameter("x.1", BF16, dims)
    y = b.parameter("y.1", BF16, other_dims)
    fr = _model_frames(b, 18, "add", callers)
    out = b.fusion("loop_add_fusion", "kLoop", [x, y],
                   lambda comp, ps: _elementwise(b, comp, "add", ps, dims), frame=fr, op="add",
                   comp_base="fused_add")
    return b.finish(out)


def heads(split: bool) -> Program:
    """jit_split_heads ([T, D] -> [H, T, DH]) / jit_merge_heads (back): one transpose fusion."""
    b = _Builder("jit_split_heads" if split else "jit_merge_heads")
    src, dst = ((T, D), (H, T, DH)) if split else ((H, T, DH), (T, D))
    x = b.parameter("x.1", BF16, src)
    fr = _model_frames(b, 21 if split else 24, "split_heads" if split else "merge_heads",
                       [(42, "block_forward"), (54 if split else 59, "attention")])

    def body(comp, ps):
        mid = (T, H, DH) if split else (T, H, DH)
        if split:
            r = b.ins(comp, "bitcast", "bitcast", BF16, mid, ps)
            return b.ins(comp, "transpose", "transpose", BF16, dst, (r,), dimensions=[1, 0, 2])
        t = b.ins(comp, "transpose", "transpose", BF16, mid, ps, dimensions=[1, 0, 2])
        return b.ins(comp, "bitcast", "bitcast", BF16, dst, (t,))
    out = b.fusion("loop_transpose_fusion", "kLoop", [x], body, frame=fr, op="transpose",
                   comp_base="fused_transpose")
    return b.finish(out)


def multiply() -> Program:
    """jit_multiply: attention scores times a Python float (an f32 scalar argument the host
    copies to the GPU at each call): one loop fusion."""
    b = _Builder("jit_multiply")
    dims = (H, T, T)
    x = b.parameter("x.1", BF16, dims)
    s = b.parameter("y.1", F32, ())
    fr = _model_frames(b, 27, "multiply", [(42, "block_forward"), (56, "attention")])

    def body(comp, ps):
        cs = b.ins(comp, "convert", "convert", BF16, (), ps[1:])
        bs = b.ins(comp, "broadcast", "broadcast", BF16, dims, (cs,))
        return b.ins(comp, "multiply", "multiply", BF16, dims, (ps[0], bs))
    out = b.fusion("loop_multiply_fusion", "kLoop", [x, s], body, frame=fr, op="mul",
                   comp_base="fused_multiply")
    return b.finish(out)


def softmax() -> Program:
    """jit_softmax: row max (input fusion), exponent sum (input fusion), divide (loop fusion):
    three kernels."""
    b = _Builder("jit_softmax")
    dims, rows = (H, T, T), (H, T)
    x = b.parameter("x.1", BF16, dims)
    add_ = b.scalar_add()
    callers = [(42, "block_forward"), (57, "attention")]

    def reduce_rows(comp, ps):
        cv = b.ins(comp, "convert", "convert", F32, dims, ps[:1])
        if len(ps) > 1:
            bm = b.ins(comp, "broadcast", "broadcast", F32, dims, ps[1:], dimensions=[0, 1])
            cv = b.ins(comp, "exponential", "exponential", F32, dims,
                       (b.ins(comp, "subtract", "subtract", F32, dims, (cv, bm)),))
        zero = b.ins(comp, "constant", "constant", F32, ())
        return b.ins(comp, "reduce", "reduce", F32, rows, (cv, zero), dimensions=[2],
                     called_computation_ids=[add_.id])
    mx = b.fusion("input_reduce_fusion", "kInput", [x], reduce_rows,
                  frame=_model_frames(b, 30, "softmax", callers), op="reduce_max",
                  comp_base="fused_reduce")
    sm = b.fusion("input_reduce_fusion", "kInput", [x, mx], reduce_rows,
                  frame=_model_frames(b, 31, "softmax", callers), op="reduce_sum",
                  comp_base="fused_reduce")

    def divide(comp, ps):
        cv = b.ins(comp, "convert", "convert", F32, dims, ps[:1])
        bm = b.ins(comp, "broadcast", "broadcast", F32, dims, ps[1:2], dimensions=[0, 1])
        bs = b.ins(comp, "broadcast", "broadcast", F32, dims, ps[2:3], dimensions=[0, 1])
        e = b.ins(comp, "exponential", "exponential", F32, dims,
                  (b.ins(comp, "subtract", "subtract", F32, dims, (cv, bm)),))
        q = b.ins(comp, "divide", "divide", F32, dims, (e, bs))
        return b.ins(comp, "convert", "convert", BF16, dims, (q,))
    out = b.fusion("loop_divide_fusion", "kLoop", [x, mx, sm], divide,
                   frame=_model_frames(b, 32, "softmax", callers), op="div",
                   comp_base="fused_divide")
    return b.finish(out)


def gelu() -> Program:
    """jit_gelu (tanh approximation): one loop fusion over the MLP's hidden activations."""
    b = _Builder("jit_gelu")
    dims = (T, F)
    x = b.parameter("x.1", BF16, dims)
    fr = _model_frames(b, 35, "gelu", [(44, "block_forward"), (73, "apply_layers"),
                                     (72, "apply_layers")])

    def body(comp, ps):
        cv = b.ins(comp, "convert", "convert", F32, dims, ps)
        cube = b.ins(comp, "multiply", "multiply", F32, dims, (cv, cv))
        inner = b.ins(comp, "multiply", "multiply", F32, dims, (cube, cv))
        t = b.ins(comp, "tanh", "tanh", F32, dims, (inner,))
        y = b.ins(comp, "multiply", "multiply", F32, dims, (cv, t))
        return b.ins(comp, "convert", "convert", BF16, dims, (y,))
    out = b.fusion("loop_tanh_fusion", "kLoop", [x], body, frame=fr, op="tanh",
                   comp_base="fused_tanh")
    return b.finish(out)


# GELU written with jnp operations and called without jit: each operation dispatches a cached
# one-primitive program (jit_integer_pow, jit_multiply, ...) over the MLP's activations, all from
# one source line (36: `0.5 * x * (1 + jnp.tanh(c * (x + 0.044715 * x ** 3)))`). A Python float
# operand is a weakly typed f32 scalar argument; a program is compiled per operand signature, so
# multiply by a scalar and multiply by a tensor are two programs of one name.
GELU_PASSES = {  # builder -> (module, opcode, operands: "x" a tensor, "s" a scalar)
    "gelu_pow": ("jit_integer_pow", "integer_pow", "x"),
    "gelu_mul_scalar": ("jit_multiply", "multiply", "xs"),
    "gelu_add": ("jit_add", "add", "xx"),
    "gelu_tanh": ("jit_tanh", "tanh", "x"),
    "gelu_add_scalar": ("jit_add", "add", "xs"),
    "gelu_mul": ("jit_multiply", "multiply", "xx"),
}


def gelu_pass(name: str) -> Program:
    """One pass of the eager GELU: one loop fusion of one primitive (bf16 computed in f32)."""
    module, op, operands = GELU_PASSES[name]
    b = _Builder(module)
    dims = (T, F)
    params = [b.parameter(f"{'xy'[i]}.1", BF16 if o == "x" else F32, dims if o == "x" else ())
              for i, o in enumerate(operands)]
    fr = _model_frames(b, 36, "gelu_eager", [(44, "block_forward"), (73, "apply_layers"),
                                             (72, "apply_layers")])

    def body(comp, ps):
        cv = [b.ins(comp, "convert", "convert", F32, tuple(p.shape.dimensions), (p,))
              if p.shape.element_type == BF16 else p for p in ps]
        cv = [c if tuple(c.shape.dimensions) == dims else
              b.ins(comp, "broadcast", "broadcast", F32, dims, (c,)) for c in cv]
        if op == "integer_pow":  # x ** 3, as XLA expands it
            y = b.ins(comp, "multiply", "multiply", F32, dims,
                      (b.ins(comp, "multiply", "multiply", F32, dims, (cv[0], cv[0])), cv[0]))
        else:
            y = b.ins(comp, op, op, F32, dims, cv)
        return b.ins(comp, "convert", "convert", BF16, dims, (y,))
    root = "multiply" if op == "integer_pow" else op  # a fusion is named after its root
    out = b.fusion(f"loop_{root}_fusion", "kLoop", params, body, frame=fr, op=op,
                   comp_base=f"fused_{op}")
    return b.finish(out)


# ------------------------------------------------------------------- custom calls
# Fused attention and kernel calls as the libraries write their backend configs, for the
# custom-call cost model's end-to-end truth (tests/test_custom_costs.py computes each call's
# FLOPs from these parameters with formulas of its own).
# Transformer Engine: the MLIR attribute dictionary of te_fused_attn_*_ffi, keys and types as
# the shared MI355X capture shows them (qkv_layout 5: BS3HD packed; 9: BSHD_BS2HD, grouped KV).
TE_CALLS = {
    "te_plain": dict(input_batch=2, attn_heads=8, num_gqa_groups=8, q_max_seqlen=512,
                     kv_max_seqlen=512, qk_head_dim=64, v_head_dim=64, mask_type=0,
                     dropout_probability=0.0, window_size_left=-1, window_size_right=-1),
    "te_causal_dropout": dict(input_batch=1, attn_heads=16, num_gqa_groups=16,
                              q_max_seqlen=1024, kv_max_seqlen=1024, qk_head_dim=128,
                              v_head_dim=128, mask_type=2, dropout_probability=0.1,
                              window_size_left=-1, window_size_right=-1),
    "te_gqa_window": dict(input_batch=2, attn_heads=16, num_gqa_groups=4, q_max_seqlen=256,
                          kv_max_seqlen=512, qk_head_dim=64, v_head_dim=64, mask_type=4,
                          dropout_probability=0.0, window_size_left=127, window_size_right=0),
}
# cuDNN through XLA: `cudnn_fmha_backend_config` in the GpuBackendConfig JSON, snake_case keys,
# int64 as strings, the mask by name (xla/backends/gpu/tests/gpu_fused_mha_test.cc; fields of
# CudnnfMHABackendConfig in xla/service/gpu/backend_configs.proto). Q, K, V shapes and the
# layout their dimension numbers or intermediate tensor shape [B, N, T, S] imply.
CUDNN_CALLS = {
    # BNTH, sized from bmm1's dimension numbers (no intermediate shape), causal
    "cudnn_causal": dict(target="__cudnn$fmhaSoftmax", q=(2, 6, 1024, 64),
                         kv=(2, 6, 1024, 64), cfg={
                             "fmha_scale": 0.125, "dropout_rate": 0, "mask_type": "CAUSAL",
                             "seed": "42", "bmm1_dot_dimension_numbers": {
                                 "lhs_contracting_dimensions": ["3"],
                                 "rhs_contracting_dimensions": ["3"],
                                 "lhs_batch_dimensions": ["0", "1"],
                                 "rhs_batch_dimensions": ["0", "1"]},
                             "bmm2_dot_dimension_numbers": {
                                 "lhs_contracting_dimensions": ["3"],
                                 "rhs_contracting_dimensions": ["2"],
                                 "lhs_batch_dimensions": ["0", "1"],
                                 "rhs_batch_dimensions": ["0", "1"]}}),
    # BTNH, no mask, query and key lengths apart, sized by the intermediate shape
    "cudnn_plain": dict(target="__cudnn$fmhaSoftmax", q=(4, 256, 4, 32), kv=(4, 384, 4, 32),
                        cfg={"fmha_scale": 0.17, "dropout_rate": 0, "mask_type": "NO_MASK",
                             "intermediate_tensor_shape": {
                                 "element_type": "BF16", "dimensions": ["4", "4", "256", "384"]}}),
    # a backward with grouped KV heads (8 query heads, 2 KV), a window and dropout
    "cudnn_window_gqa_backward": dict(
        target="__cudnn$fmhaSoftmaxDropoutBackward", q=(2, 128, 8, 64), kv=(2, 128, 2, 64),
        cfg={"fmha_scale": 0.125, "dropout_rate": 0.1, "mask_type": "NO_MASK", "seed": "7",
             "sliding_window_length": 32, "intermediate_tensor_shape": {
                 "element_type": "BF16", "dimensions": ["2", "8", "128", "128"]}}),
}
# Pallas on GPU lowers to __gpu$xla.gpu.triton with the kernel's name and IR in an MLIR
# dictionary and no cost estimate; a config that carries one is read.
PALLAS_ESTIMATE = {"flops": 10 * 4096 * 1024, "bytes_accessed": 2 * 4096 * 1024 * 4,
                   "transcendentals": 0}


def _mlir_attrs(cfg: dict) -> bytes:
    """Attributes as MLIR prints a dictionary: `key = value : type`, sorted by key."""
    def typed(v):
        if isinstance(v, bool):
            return str(v).lower()
        return f"{v:e} : f64" if isinstance(v, float) else f"{v} : i64"
    return ("{" + ", ".join(f"{k} = {typed(v)}" for k, v in sorted(cfg.items())) + "}").encode()


def _call(b: _Builder, target: str, operands, outs, config: bytes, frame: int, op: str):
    """A custom call whose result is a tuple of `outs` ((dtype, dims) each), scheduled, with
    the get-tuple-element of its first result."""
    cc = b.entry.instructions.add(name=b.name("custom-call"), opcode="custom-call", id=b._id(),
                                  custom_call_target=target, backend_config=config)
    cc.shape.element_type = TUPLE
    for dtype, dims in outs:
        _shape(cc.shape.tuple_shapes.add(), dtype, dims)
    cc.operand_ids.extend(o.id for o in operands)
    cc.metadata.op_name = f"jit({b.fn})/{op}"
    cc.metadata.stack_frame_id = frame
    b.schedule.append(cc.id)
    dtype, dims = outs[0]
    gte = b.ins(b.entry, "get-tuple-element", "get-tuple-element", dtype, dims, (cc,),
                frame=frame, op=op, tuple_index=0)
    b.schedule.append(gte.id)
    return gte


def custom_calls() -> Program:
    """jit_attention_calls: each call of TE_CALLS forward and backward, of CUDNN_CALLS, and a
    Pallas Triton kernel without and with a cost estimate, each under its own model.py line;
    the results tupled."""
    b = _Builder("jit_attention_calls")
    outs = []
    line = 80

    def frame():
        nonlocal line
        line += 1
        return _model_frames(b, line, "attention_calls", [(46, "block_forward")])
    for name, cfg in TE_CALLS.items():
        bs, h, g = cfg["input_batch"], cfg["attn_heads"], cfg["num_gqa_groups"]
        sq, skv, d = cfg["q_max_seqlen"], cfg["kv_max_seqlen"], cfg["qk_head_dim"]
        packed = g == h and sq == skv
        full = {**cfg, "qkv_layout": 5 if packed else 9, "is_training": True,
                "scaling_factor": d ** -0.5, "deterministic": False}
        ins = ([b.parameter(f"qkv_{name}.1", BF16, (bs, sq, 3, h, d))] if packed else
               [b.parameter(f"q_{name}.1", BF16, (bs, sq, h, d)),
                b.parameter(f"kv_{name}.1", BF16, (bs, skv, 2, g, d))])
        fwd = _call(b, "te_fused_attn_forward_ffi", ins,
                    [(BF16, (bs, sq, h, cfg["v_head_dim"])), (U8, (1 << 20,))],
                    _mlir_attrs(full), frame(), "te_fused_attn_forward_ffi")
        bwd = _call(b, "te_fused_attn_backward_ffi", [*ins, fwd],
                    [*((BF16, tuple(i.shape.dimensions)) for i in ins), (U8, (1 << 20,))],
                    _mlir_attrs(full), frame(), "transpose(jvp())/te_fused_attn_backward_ffi")
        outs += [fwd, bwd]
    for name, c in CUDNN_CALLS.items():
        q = b.parameter(f"q_{name}.1", BF16, c["q"])
        k = b.parameter(f"k_{name}.1", BF16, c["kv"])
        v = b.parameter(f"v_{name}.1", BF16, c["kv"])
        ops, res = [q, k, v], [(BF16, c["q"])]
        if "Backward" in c["target"]:
            ops += [b.parameter(f"stats_{name}.1", F32, c["q"][:3]),
                    b.parameter(f"o_{name}.1", BF16, c["q"]),
                    b.parameter(f"do_{name}.1", BF16, c["q"])]
            res = [(BF16, c["q"]), (BF16, c["kv"]), (BF16, c["kv"])]
        config = json.dumps({"operation_queue_id": "0", "wait_on_operation_queues": [],
                             "cudnn_fmha_backend_config": c["cfg"]},
                            separators=(",", ":")).encode()
        outs.append(_call(b, c["target"], ops, [*res, (U8, (0,))], config, frame(),
                          "dot_product_attention"))
    for name, estimate in (("pallas_plain", None), ("pallas_estimated", PALLAS_ESTIMATE)):
        x = b.parameter(f"x_{name}.1", F32, (4096, 1024))
        config = (json.dumps({"name": name, "cost_estimate": estimate}).encode() if estimate
                  else b'{name = "' + name.encode() + b'", ir = "ML\\EFR", '
                       b'num_stages = 3 : i32, num_warps = 4 : i32}')
        outs.append(_call(b, "__gpu$xla.gpu.triton", [x], [(F32, (4096, 1024))], config,
                          frame(), "pallas_call"))
    root = b.ins(b.entry, "tuple", "tuple", TUPLE, (), outs)
    for o in outs:
        _shape(root.shape.tuple_shapes.add(), o.shape.element_type, tuple(o.shape.dimensions))
    return b.finish(root)


# ------------------------------------------------------------------- an optimizer program
P = 1 << 20  # parameters the optimizer updates (a flat f32 vector)


def apply_updates() -> Program:
    """jit_apply_updates: an Adam-style update of a flat parameter vector, run as its own
    program after the train step: five loop fusions (first and second moments, their bias
    corrections, the step, the new parameters), traced through optax (site-packages) from the
    user's train.py."""
    b = _Builder("jit_apply_updates")
    params = b.parameter("params.1", F32, (P,))
    grads = b.parameter("grads.1", F32, (P,))
    mu = b.parameter("mu.1", F32, (P,))
    nu = b.parameter("nu.1", F32, (P,))
    user = [MAIN, (TRAIN, 88, "apply_updates")]
    dims = (P,)

    def fr(line, fn):
        return b.frame(user + [(OPTAX, line, fn)])

    def ew(op):
        return lambda comp, ps: _elementwise(b, comp, op, ps, dims)
    m1 = b.fusion("loop_add_fusion", "kLoop", [mu, grads], ew("add"),
                  frame=fr(212, "update_moment"), op="add", comp_base="fused_add")
    m2 = b.fusion("loop_multiply_fusion", "kLoop", [nu, grads], ew("multiply"),
                  frame=fr(220, "update_moment_per_elem_norm"), op="mul",
                  comp_base="fused_multiply")
    c1 = b.fusion("loop_divide_fusion", "kLoop", [m1, m2], ew("divide"),
                  frame=fr(231, "bias_correction"), op="div", comp_base="fused_divide")
    step = b.fusion("loop_multiply_fusion", "kLoop", [c1, grads], ew("multiply"),
                    frame=fr(348, "update_fn"), op="mul", comp_base="fused_multiply")
    new = b.fusion("loop_subtract_fusion", "kLoop", [params, step], ew("subtract"),
                   frame=b.frame(user + [(TRAIN, 90, "apply_updates")]), op="sub",
                   comp_base="fused_subtract")
    out = b.ins(b.entry, "tuple", "tuple", 13, (), (new, m1, m2))
    for _ in (new, m1, m2):
        _shape(out.shape.tuple_shapes.add(), F32, dims)
    return b.finish(out)


# ------------------------------------------------------------------- pipeline stages
def stage(k: int, loss: bool = False, layers: int = 2, width: int = 2048,
          tokens: int = 4096) -> Program:
    """jit_stage<k>_forward: one pipeline stage, `layers` x (cuBLAS GEMM, tanh loop fusion); the
    last stage also reduces its output to the loss (an input fusion)."""
    b = _Builder(f"jit_stage{k}_forward")
    x = b.parameter("x.1", BF16, (tokens, width))
    ws = [b.parameter(f"w{i}.1", BF16, (width, width)) for i in range(layers)]
    caller = [(PIPELINE, 50, "main"), (PIPELINE, 30 + k, "pipeline_step"),
              (PIPELINE, 13 + 4 * k, f"stage{k}_forward")]
    dims = (tokens, width)

    def act(comp, ps):
        cv = b.ins(comp, "convert", "convert", F32, dims, ps)
        t = b.ins(comp, "tanh", "tanh", F32, dims, (cv,))
        return b.ins(comp, "convert", "convert", BF16, dims, (t,))
    h = x
    for w in ws:
        h = b.cublas_gemm(h, w, frame=b.frame(caller + [(PIPELINE, 8, "layer")]))
        h = b.fusion("loop_tanh_fusion", "kLoop", [h], act,
                     frame=b.frame(caller + [(PIPELINE, 9, "layer")]), op="tanh",
                     comp_base="fused_tanh")
    if loss:
        add_ = b.scalar_add()

        def total(comp, ps):
            cv = b.ins(comp, "convert", "convert", F32, dims, ps)
            sq = b.ins(comp, "multiply", "multiply", F32, dims, (cv, cv))
            zero = b.ins(comp, "constant", "constant", F32, ())
            return b.ins(comp, "reduce", "reduce", F32, (), (sq, zero), dimensions=[0, 1],
                         called_computation_ids=[add_.id])
        h = b.fusion("input_reduce_fusion", "kInput", [h], total,
                     frame=b.frame(caller),
                     op="reduce_sum", comp_base="fused_reduce")
    return b.finish(h)


# name -> builder; programs.load_program("small:<name>") builds one.
BUILDERS = {
    "layer_norm": layer_norm,
    # the block's four projections (q, k, v, out): traced first from attention's q line
    "matmul_proj": lambda: matmul(T, D, D, [(42, "block_forward"), (51, "attention"),
                                            (61, "dense")]),
    "matmul_scores": lambda: matmul(T, DH, T, [(42, "block_forward"), (55, "attention")],
                                    triton_batch=H),
    "matmul_attend": lambda: matmul(T, T, DH, [(42, "block_forward"), (58, "attention")],
                                    triton_batch=H),
    "matmul_up": lambda: matmul(T, D, F, [(44, "block_forward"), (72, "apply_layers"),
                                          (61, "dense")]),
    "matmul_down": lambda: matmul(T, F, D, [(44, "block_forward"), (73, "apply_layers"),
                                            (73, "apply_layers"), (72, "apply_layers"),
                                            (61, "dense")]),
    "matmul_down_split_k": lambda: matmul_split_k(T, F, D, 4, [
        (44, "block_forward"), (73, "apply_layers"), (73, "apply_layers"),
        (72, "apply_layers"), (61, "dense")]),
    "add_bias": lambda: add((T, D), (D,), [(42, "block_forward"), (51, "attention"),
                                           (61, "dense")]),
    "add_bias_up": lambda: add((T, F), (F,), [(44, "block_forward"), (72, "apply_layers"),
                                              (61, "dense")]),
    "add_residual": lambda: add((T, D), (T, D), [(42, "block_forward")]),
    "split_heads": lambda: heads(True),
    "merge_heads": lambda: heads(False),
    "multiply": multiply,
    "softmax": softmax,
    "gelu": gelu,
    **{k: (lambda k=k: gelu_pass(k)) for k in GELU_PASSES},
    "apply_updates": apply_updates,
    "custom_calls": custom_calls,
    # pipeline stages: stage<k> on GPU k; the last stage of a pipeline also computes the loss
    **{f"stage{k}": (lambda k=k: stage(k)) for k in range(4)},
    **{f"stage{k}_loss": (lambda k=k: stage(k, loss=True)) for k in range(4)},
}


def build(name: str) -> Program:
    return BUILDERS[name]()
