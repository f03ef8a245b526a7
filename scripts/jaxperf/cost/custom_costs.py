"""Step 5's cost model for custom calls: one registry keyed on the call target, each entry
reading the FLOPs and bytes of one run from the call's backend config and operand shapes, and a
user's own table (`--costs FILE`) for calls and kernels nobody else can know. Conventions, with
their sources: references/roofline.md ("Custom calls").

Entries (first match wins):
- fused attention: Transformer Engine (`te_fused_attn_forward_ffi` / `_backward_ffi`: batch,
  heads, GQA groups, lengths, head dims, mask and window in the backend config's attributes) and
  cuDNN (`__cudnn$fmha*`: `cudnn_fmha_backend_config`, the lengths from its
  `intermediate_tensor_shape` [B, N, T, S] with the head dims from the operands, else from the
  bmm1 dot dimension numbers). FLOPs = 2 x (query, key) pairs the mask leaves visible x (qk head
  dim + v head dim) x batch x heads, the forward; the backward 2.5x that (FlashAttention-2's
  count: five matrix products, QK^T recomputed). Dropout adds no FLOPs counted here.
- GEMMs: cuBLAS / hipBLASLt (`dot_dimension_numbers` in the backend config) and Transformer
  Engine's `te_gemm_ffi` / `te_gemm_v2_ffi` (M, N and K from the operands collapsed at the axis
  boundaries, as the call itself does); cuDNN / MIOpen convolutions.
- element-wise library calls (Transformer Engine's norms, activations, softmax, quantization):
  bytes only; their arithmetic is a few operations per element, bound by memory.
- anything else: the user's table, else not computable with the sentence saying what is missing.
Bytes: every operand read and every result written, a `u8`/`s8` scratch result (a workspace)
left out."""

from __future__ import annotations

import ast
import contextlib
import csv
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from jaxperf.read.xprotos import dtype_name, nbytes
from tracekit import scratch

GEMM_TARGET_RE = re.compile(r"^__cublas\$|^__hipblas|gemm|matmul", re.IGNORECASE)
TE_GEMM_RE = re.compile(r"^te_gemm(_v2)?_ffi$")
CUDNN_CONV_RE = re.compile(r"^__cudnn\$conv|^__miopen\$conv", re.IGNORECASE)
TE_ATTENTION_RE = re.compile(r"^te_fused_attn_(forward|backward)_ffi$")
CUDNN_ATTENTION_RE = re.compile(r"^__cudnn\$fmha")
# Transformer Engine's element-wise calls (transformer_engine/jax/csrc/extensions/pybind.cpp)
TE_ELEMENTWISE_RE = re.compile(
    r"^te_(norm_(forward|backward)|act_lu|dact_dbias_quantize|dbias_quantize|quantize|"
    r"dequantize|scaled_(masked_|upper_triang_masked_)?softmax_(forward|backward)|"
    r"(layernorm|rmsnorm)_(forward|backward))(_ffi)?$")
# Pallas on GPU (Triton, Mosaic GPU): JAX drops pallas_call's cost_estimate on these backends
# (jax/_src/pallas/triton/pallas_call_registration.py, mosaic_gpu/lowering.py); a backend
# config that does carry one (as TPU's does) is read.
KERNEL_CALL_RE = re.compile(r"^__gpu\$xla\.gpu\.triton$|^triton_kernel_call|^mosaic_gpu",
                            re.IGNORECASE)
# FlashAttention-2's backward count (Dao-AILab/flash-attention benchmarks/
# benchmark_flash_attention.py `flops`): 2.5x the forward
BACKWARD_FACTOR = 2.5
SCRATCH_TYPES = frozenset({"u8", "s8"})
# Transformer Engine's NVTE_Mask_Type (transformer_engine/common/include/transformer_engine/
# fused_attn.h): 0 none, 1 padding, 2 causal, 3 padding + causal, 4 causal bottom-right,
# 5 padding + causal bottom-right
TE_CAUSAL = {2: "top-left", 3: "top-left", 4: "bottom-right", 5: "bottom-right"}
TE_PADDING = frozenset({1, 3, 5})
# XLA's CudnnfMHABackendConfig.MaskType (xla/service/gpu/backend_configs.proto)
CUDNN_MASKS = {0: "NO_MASK", 1: "PADDING", 2: "CAUSAL", 3: "PADDING_CAUSAL", 4: "ALIBI"}


@dataclass
class CallCost:
    """FLOPs and bytes of one run of a custom call, how they were read, and what the call is
    (`kind`: attention, gemm, convolution, elementwise, kernel); `why` set (the figures None)
    where they cannot be had."""
    flops: int | None = None
    bytes: int | None = None
    method: str = ""
    kind: str = "custom"
    matrix_dtype: str | None = None
    why: str | None = None


# ---------------------------------------------------------------- backend configs

def attributes(raw) -> dict:
    """A custom call's backend config as a dict: JSON (XLA's own configs), or the MLIR
    attribute dictionary typed FFI calls carry (`{attn_heads = 16 : i64, is_training = true,
    name = "x"}`); {} where it is neither."""
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else (raw or "")
    text = text.strip()
    if not text:
        return {}
    with contextlib.suppress(ValueError):
        cfg = json.loads(text)
        return cfg if isinstance(cfg, dict) else {}
    if not (text.startswith("{") and text.endswith("}")):
        return {}
    out = {}
    for part in _top_level_split(text[1:-1]):
        key, eq, value = part.partition("=")
        if eq:
            out[key.strip().strip('"')] = _mlir_value(value.strip())
    return out


def _top_level_split(text: str) -> list[str]:
    """Split at commas outside quotes and brackets."""
    parts, depth, start, quoted, i = [], 0, 0, False, 0
    while i < len(text):
        ch = text[i]
        if quoted:
            if ch == "\\":
                i += 1
            elif ch == '"':
                quoted = False
        elif ch == '"':
            quoted = True
        elif ch in "[{(<":
            depth += 1
        elif ch in "]})>":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    parts.append(text[start:])
    return parts


def _mlir_value(v: str):
    """An MLIR attribute's value: a number (its `: type` dropped), a boolean, a string, a nested
    dictionary, else the text as it is."""
    if v.startswith('"'):
        return v[1:-1] if v.endswith('"') else v[1:]
    if v.startswith("{") and v.endswith("}"):
        return attributes(v)
    v = v.rsplit(" : ", 1)[0].strip()
    if v in ("true", "false"):
        return v == "true"
    for number in (int, float):
        with contextlib.suppress(ValueError):
            return number(v)
    return v


# ---------------------------------------------------------------- shapes

def _dims(shape) -> list[int]:
    return [int(d) for d in shape.dimensions]


def io_bytes(ins, operands: list) -> int:
    """Operands read plus results written, a u8/s8 scratch result (a workspace) left out."""
    results = list(ins.shape.tuple_shapes) or [ins.shape]
    written = sum(nbytes(s) for s in results if not (
        len(results) > 1 and dtype_name(s) in SCRATCH_TYPES))
    return sum(nbytes(o) for o in operands) + written


# ---------------------------------------------------------------- attention

def visible_pairs(sq: int, skv: int, causal: str | None, left: int = -1,
                  right: int = -1) -> int:
    """(query, key) pairs a mask leaves visible: all, or causal (`top-left`: key j <= query i;
    `bottom-right`: j <= i + skv - sq), narrowed by a sliding window of `left` keys before and
    `right` after the diagonal (-1: unlimited). Exact, one term per query."""
    if causal is None and left < 0 and right < 0:
        return sq * skv
    off = skv - sq if causal == "bottom-right" else 0
    total = 0
    for i in range(sq):
        diag = i + off
        hi = skv - 1
        if causal is not None:
            hi = min(hi, diag)
        if right >= 0:
            hi = min(hi, diag + right)
        lo = max(0, diag - left) if left >= 0 else 0
        if hi >= lo:
            total += hi - lo + 1
    return total


def attention_flops(batch: int, heads: int, sq: int, skv: int, d_qk: int, d_v: int,
                    causal: str | None, left: int, right: int, backward: bool) -> int:
    """2 x visible pairs x (d_qk + d_v) x batch x heads (QK^T and PV), the backward 2.5x."""
    fwd = 2 * visible_pairs(sq, skv, causal, left, right) * (d_qk + d_v) * batch * heads
    return round(fwd * BACKWARD_FACTOR) if backward else fwd


@dataclass
class Attention:
    """One fused-attention call's sizes and mask, as its backend config gives them (`kv`: how
    its key/value heads are said, `GQA groups n` or `KV heads n`)."""
    backward: bool
    batch: int
    heads: int
    kv: str
    sq: int
    skv: int
    d_qk: int
    d_v: int
    causal: str | None
    left: int
    right: int
    padding: bool
    dropout: float

    def cost(self, ins, operands: list) -> CallCost:
        """Its FLOPs (attention_flops), bytes (operands + results) and how they were read."""
        words = [f"causal ({self.causal})" if self.causal else "no causal mask"]
        if self.left >= 0 or self.right >= 0:
            words.append(f"window ({self.left}, {self.right})")
        if self.padding:
            words.append("padding counted at the maximum lengths (an upper bound)")
        if self.dropout:
            words.append(f"dropout {self.dropout:g} (no FLOPs counted for it)")
        if self.backward:
            words[-1] += "; 2.5x the forward, QK^T recomputed"
        return CallCost(
            attention_flops(self.batch, self.heads, self.sq, self.skv, self.d_qk, self.d_v,
                            self.causal, self.left, self.right, self.backward),
            io_bytes(ins, operands),
            f"backend config (attention {'backward' if self.backward else 'forward'}: batch "
            f"{self.batch}, heads {self.heads}, {self.kv}, lengths {self.sq}x{self.skv}, head "
            f"dims {self.d_qk}/{self.d_v}, {', '.join(words)})",
            "attention backward" if self.backward else "attention",
            dtype_name(operands[0]) if operands else None)


def te_attention(ins, operands: list, cfg: dict) -> CallCost:
    """Transformer Engine's fused attention from its backend config's attributes."""
    backward = ins.custom_call_target.startswith("te_fused_attn_backward")
    try:
        b, h = int(cfg["input_batch"]), int(cfg["attn_heads"])
        sq, skv = int(cfg["q_max_seqlen"]), int(cfg["kv_max_seqlen"])
        d_qk, d_v = int(cfg["qk_head_dim"]), int(cfg.get("v_head_dim", cfg["qk_head_dim"]))
    except (KeyError, TypeError, ValueError):
        return CallCost(why=f"custom call {ins.custom_call_target} lacks batch, heads, lengths "
                            "or head dims in its backend config", kind="attention")
    mask = int(cfg.get("mask_type", 0) or 0)
    causal = TE_CAUSAL.get(mask)
    if cfg.get("bottom_right_diagonal") is True and causal:
        causal = "bottom-right"
    left, right = int(cfg.get("window_size_left", -1)), int(cfg.get("window_size_right", -1))
    if causal and right > 0:
        right = 0  # a causal mask already hides every key after the diagonal
    return Attention(backward, b, h, f"GQA groups {cfg.get('num_gqa_groups', h)}", sq, skv,
                     d_qk, d_v, causal, left, right, mask in TE_PADDING,
                     float(cfg.get("dropout_probability", 0) or 0)).cost(ins, operands)


def cudnn_attention(ins, operands: list, cfg: dict) -> CallCost:
    """cuDNN's fused attention (XLA's `__cudnn$fmha*`) from `cudnn_fmha_backend_config`: batch,
    heads and lengths from its intermediate tensor shape [B, N, T, S] (else the forward's bmm1
    dimension numbers), head dims from Q, K and V (operands 0-2)."""
    target = ins.custom_call_target
    backward = "Backward" in target
    f = cfg.get("cudnn_fmha_backend_config", cfg)
    if len(operands) < 3 or not isinstance(f, dict):
        return CallCost(why=f"custom call {target} has fewer than three operands (Q, K, V) or "
                            "no cudnn_fmha_backend_config", kind="attention")
    q, k, v = (math.prod(_dims(s)) for s in operands[:3])
    inter = [int(d) for d in (f.get("intermediate_tensor_shape") or {}).get("dimensions", [])]
    try:
        if len(inter) == 4:
            b, n, t, s = inter
        else:
            dn = f["bmm1_dot_dimension_numbers"]
            qd, kd = _dims(operands[0]), _dims(operands[1])
            lb = [int(x) for x in dn["lhs_batch_dimensions"]]
            lc = [int(x) for x in dn["lhs_contracting_dimensions"]]
            rb = [int(x) for x in dn["rhs_batch_dimensions"]]
            rc = [int(x) for x in dn["rhs_contracting_dimensions"]]
            b, n = qd[lb[0]], math.prod(qd[x] for x in lb[1:])
            t = math.prod(qd[x] for x in range(len(qd)) if x not in lb + lc)
            s = math.prod(kd[x] for x in range(len(kd)) if x not in rb + rc)
        d_qk = q // (b * n * t)
        kv_heads = k // (b * s * d_qk)
        d_v = v // (b * kv_heads * s)
    except (KeyError, TypeError, ValueError, IndexError, ZeroDivisionError):
        return CallCost(why=f"custom call {target} gives neither an intermediate tensor shape "
                            "nor bmm1 dimension numbers to size it", kind="attention")
    mask = f.get("mask_type", "NO_MASK")
    mask = CUDNN_MASKS.get(mask, str(mask)) if isinstance(mask, int) else str(mask)
    causal = "top-left" if "CAUSAL" in mask or f.get("is_causal_mask") is True else None
    window = int(f.get("sliding_window_length", 0) or 0)
    left = window - 1 if window > 0 else -1  # the window holds the diagonal and window-1 before
    return Attention(backward, b, n, f"KV heads {kv_heads}", t, s, d_qk, d_v, causal, left, -1,
                     "PADDING" in mask, float(f.get("dropout_rate", 0) or 0)).cost(ins, operands)


# ---------------------------------------------------------------- GEMMs and convolutions

def library_gemm(ins, operands: list, cfg: dict) -> CallCost:
    """cuBLAS / hipBLASLt: the dimension numbers of the backend config."""
    target = ins.custom_call_target
    out = ins.shape.tuple_shapes[0] if ins.shape.tuple_shapes else ins.shape
    try:
        dn = cfg.get("gemm_backend_config", cfg)["dot_dimension_numbers"]
        contracting = [int(d) for d in dn["lhs_contracting_dimensions"]]
        lhs = _dims(operands[0])
        flops = 2 * math.prod(_dims(out)) * math.prod(lhs[d] for d in contracting)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError):
        return CallCost(why=f"custom call {target} has no dot_dimension_numbers in its backend "
                            "config", kind="gemm")
    return CallCost(flops, sum(nbytes(o) for o in operands) + nbytes(out), "backend config",
                    "gemm", dtype_name(operands[0]))


def te_gemm(ins, operands: list, cfg: dict) -> CallCost:
    """Transformer Engine's GEMM: each operand collapsed to 2-D at its axis boundary, M and K
    from the left one (transposed or not), N from the right (transformer_engine/jax/csrc/
    extensions/gemm.cpp)."""
    c = cfg.get("config", cfg) if isinstance(cfg.get("config"), dict) else cfg
    try:
        lhs, rhs = _dims(operands[0]), _dims(operands[1])
        lb, rb = int(c["lhs_axis_boundary"]), int(c["rhs_axis_boundary"])
        l2 = (math.prod(lhs[:lb]), math.prod(lhs[lb:]))
        r2 = (math.prod(rhs[:rb]), math.prod(rhs[rb:]))
        m, k = (l2[1], l2[0]) if c.get("lhs_transposed") else l2
        n = r2[0] if c.get("rhs_transposed") else r2[1]
    except (KeyError, TypeError, ValueError, IndexError):
        return CallCost(why=f"custom call {ins.custom_call_target} lacks its axis boundaries "
                            "in the backend config", kind="gemm")
    return CallCost(2 * m * n * k, io_bytes(ins, operands),
                    f"backend config (GEMM {m}x{n}x{k})", "gemm", dtype_name(operands[0]))


def convolution(ins, operands: list, cfg: dict) -> CallCost:
    """cuDNN / MIOpen convolutions: 2 x forward output elements x kernel window x kernel input
    features, with the forward's output and kernel found by the call's direction."""
    target = ins.custom_call_target
    dn = ins.convolution_dimension_numbers
    out = ins.shape.tuple_shapes[0] if ins.shape.tuple_shapes else ins.shape
    a, b = operands[0], operands[1]
    fwd_out, kernel = (a, b) if "BackwardInput" in target else \
        (b, out) if "BackwardFilter" in target else (out, b)
    if not dn.kernel_spatial_dimensions and not dn.input_spatial_dimensions and \
            len(kernel.dimensions) > 2:
        return CallCost(why=f"custom call {target} carries no convolution dimension numbers",
                        kind="convolution")
    kd = _dims(kernel)
    flops = 2 * math.prod(_dims(fwd_out)) * math.prod(
        kd[d] for d in dn.kernel_spatial_dimensions) * kd[dn.kernel_input_feature_dimension]
    return CallCost(flops, sum(nbytes(o) for o in operands) + nbytes(out), "backend config",
                    "convolution", dtype_name(a))


def elementwise_call(ins, operands: list, cfg: dict) -> CallCost:
    return CallCost(0, io_bytes(ins, operands),
                    "shapes (element-wise library call: bytes read + written; its few "
                    "operations per element not counted)", "elementwise")


def kernel_call(ins, operands: list, cfg: dict) -> CallCost:
    """A Pallas / Triton / Mosaic GPU kernel: its cost estimate where the backend config
    carries one."""
    est = cfg.get("cost_estimate") if isinstance(cfg.get("cost_estimate"), dict) else None
    if est and est.get("flops") is not None and est.get("bytes_accessed") is not None:
        with contextlib.suppress(TypeError, ValueError):
            return CallCost(int(est["flops"]), int(est["bytes_accessed"]),
                            "backend config (the kernel's own cost estimate)", "kernel")
    name = cfg.get("name") or cfg.get("kernel_name") or ""
    return CallCost(why=f"custom call {ins.custom_call_target}"
                        f"{' (' + str(name) + ')' if name else ''} is a hand-written kernel "
                        "whose backend config carries no cost estimate (JAX drops "
                        "pallas_call's cost_estimate on GPU); give its FLOPs and bytes in a "
                        "--costs table", kind="kernel")


REGISTRY = (
    (TE_ATTENTION_RE, te_attention),
    (CUDNN_ATTENTION_RE, cudnn_attention),
    (TE_GEMM_RE, te_gemm),
    (CUDNN_CONV_RE, convolution),
    (TE_ELEMENTWISE_RE, elementwise_call),
    (KERNEL_CALL_RE, kernel_call),
    (GEMM_TARGET_RE, library_gemm),
)


def call_cost(ins, operands: list, user: UserCosts | None = None) -> CallCost:
    """One custom call's FLOPs and bytes per run: the user's table first (it names what the
    user knows), then the registry; why not, where neither has it."""
    cfg = attributes(ins.backend_config)
    if user is not None and (c := user.cost(ins, operands, cfg)) is not None:
        return c
    for pattern, rule in REGISTRY:
        if pattern.search(ins.custom_call_target):
            return rule(ins, operands, cfg)
    return CallCost(why=f"custom call {ins.custom_call_target} has no cost model here; give "
                        "its FLOPs and bytes in a --costs table")


# ---------------------------------------------------------------- the user's table

class CostsTableError(ValueError):
    """A --costs table that cannot be used (one sentence)."""


_ALLOWED = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Constant, ast.Name, ast.Load,
            ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Pow, ast.Mod, ast.USub,
            ast.UAdd, ast.Call)
_FUNCTIONS = {"min": min, "max": max, "prod": math.prod}
MAX_FORMULA_CHARS = 1000  # a formula is a line of arithmetic, never a program


def _check_formula(text: str, where: str) -> ast.Expression:
    if len(text) > MAX_FORMULA_CHARS:
        raise CostsTableError(f"{where}: the formula is over {MAX_FORMULA_CHARS} characters")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise CostsTableError(f"{where}: {text!r} is not arithmetic ({exc.msg})") from exc
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED) or (
                isinstance(node, ast.Call) and not (
                    isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS
                    and not node.keywords)) or (
                isinstance(node, ast.Constant) and not isinstance(node.value, int | float)):
            raise CostsTableError(f"{where}: {text!r} may hold only numbers, names, + - * / // "
                                  "% ** and min/max/prod")
    return tree


def _evaluate(node, names: dict):
    if isinstance(node, ast.Expression):
        return _evaluate(node.body, names)
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return names[node.id]  # a KeyError naming it where the call has no such attribute
    if isinstance(node, ast.UnaryOp):
        v = _evaluate(node.operand, names)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.Call):
        args = [_evaluate(a, names) for a in node.args]
        return math.prod(args) if node.func.id == "prod" else _FUNCTIONS[node.func.id](*args)
    a, b = _evaluate(node.left, names), _evaluate(node.right, names)
    op = node.op
    if isinstance(op, ast.Pow) and abs(b) > 64:
        raise ValueError("an exponent over 64")
    return {ast.Add: lambda: a + b, ast.Sub: lambda: a - b, ast.Mult: lambda: a * b,
            ast.Div: lambda: a / b, ast.FloorDiv: lambda: a // b, ast.Mod: lambda: a % b,
            ast.Pow: lambda: a ** b}[type(op)]()


@dataclass
class UserRow:
    pattern: re.Pattern
    flops: ast.Expression
    bytes: ast.Expression | None
    kind: str
    line: int


class UserCosts:
    """A user's table of FLOP and byte formulas (CSV: `match`, a regular expression searched in
    the custom call's target, its instruction's name and a kernel name its backend config
    gives (Pallas's `name`); `flops`; `bytes`, empty for the call's
    operands and results; `kind`, optional). A formula is arithmetic over the backend config's
    numeric attributes by name, `operand_bytes`, `result_bytes`, `in<i>_d<j>` (operand i's
    dimension j) and `out_d<j>` (the first result's)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.rows: list[UserRow] = []
        try:
            with scratch.open_file(self.path) as fh:
                reader = csv.DictReader(fh)
                if not reader.fieldnames or not {"match", "flops"} <= set(reader.fieldnames):
                    raise CostsTableError(f"{self.path} needs the columns match and flops "
                                          "(bytes and kind optional)")
                for n, r in enumerate(reader, start=2):
                    where = f"{self.path} line {n}"
                    try:
                        pattern = re.compile(r["match"] or "")
                    except re.error as exc:
                        raise CostsTableError(f"{where}: match is not a regular expression "
                                              f"({exc})") from exc
                    b = (r.get("bytes") or "").strip()
                    self.rows.append(UserRow(
                        pattern, _check_formula((r["flops"] or "").strip() or "0", where),
                        _check_formula(b, where) if b else None,
                        (r.get("kind") or "").strip() or "custom", n))
        except (OSError, UnicodeDecodeError, csv.Error) as exc:
            raise CostsTableError(f"cannot read the costs table {self.path}: {exc}") from exc

    def cost(self, ins, operands: list, cfg: dict) -> CallCost | None:
        kernel = cfg.get("name") if isinstance(cfg.get("name"), str) else ""  # Pallas's name
        for row in self.rows:
            if any(row.pattern.search(t) for t in (ins.custom_call_target, ins.name, kernel)
                   if t):
                return self._apply(row, ins, operands, cfg)
        return None

    def _apply(self, row: UserRow, ins, operands: list, cfg: dict) -> CallCost:
        names = {k: v for k, v in cfg.items()
                 if isinstance(v, int | float) and not isinstance(v, bool)}
        out = ins.shape.tuple_shapes[0] if ins.shape.tuple_shapes else ins.shape
        names["operand_bytes"] = sum(nbytes(o) for o in operands)
        names["result_bytes"] = io_bytes(ins, [])
        names.update((f"in{i}_d{j}", d) for i, o in enumerate(operands)
                     for j, d in enumerate(_dims(o)))
        names.update((f"out_d{j}", d) for j, d in enumerate(_dims(out)))
        where = f"{self.path.name} line {row.line}"
        try:
            flops = int(_evaluate(row.flops, names))
            n_bytes = int(_evaluate(row.bytes, names)) if row.bytes is not None else \
                io_bytes(ins, operands)
        except KeyError as exc:
            return CallCost(why=f"the costs table ({where}) names {exc.args[0]}, which custom "
                                f"call {ins.custom_call_target} does not have", kind=row.kind)
        except (ArithmeticError, ValueError, TypeError) as exc:
            return CallCost(why=f"the costs table's formula ({where}) fails on "
                                f"{ins.name}: {exc}", kind=row.kind)
        if flops < 0 or n_bytes < 0:
            return CallCost(why=f"the costs table's formula ({where}) gives a negative figure "
                                f"for {ins.name}", kind=row.kind)
        return CallCost(flops, n_bytes, f"costs table ({where})", row.kind,
                        dtype_name(operands[0]) if operands else None)
