"""Print a compiled program (``xla.HloModuleProto``) as XLA's HLO text, straight from the proto.

``write_hlo_text(module, path)`` writes the text that ``HloModule.to_string()`` of jaxlib prints,
closely enough to read and to parse again, but without jaxlib: that one rebuilds the whole module
in C++ and then the whole text in memory (over 10 GB for a 6 MB optimized proto). Here each line
is formatted and written on its own, so memory stays at the size of the parsed proto.

What is printed:
- the header ``HloModule name, is_scheduled=true, input_output_alias={...}, buffer_donor={...},
  entry_computation_layout={(...)->...}, frontend_attributes={...}``;
- the stack-frame index (FileNames, FunctionNames, FileLocations, StackFrames) with the proto's
  own 1-based ids (0 = none), which ``stack_frame_id=`` in the metadata refers to;
- every computation, ``[ENTRY ]%name (param: shape, ...) -> shape {``, its instructions in the
  module's schedule order where it has one (any instruction the schedule misses follows, in
  stored order), else in stored order; ``ROOT`` marks the root;
- each instruction as ``%name = shape opcode(%operand, ...), attr=value, ...`` with shapes and
  layouts, constants' values (up to 10 elements, else ``{...}``), the attributes of its opcode
  (dimensions, slices, padding, windows, dot / convolution / gather / scatter dimension numbers,
  comparison direction, collective channel, replica groups and source-target pairs, custom-call
  target, aliasing, precision), called computations (``calls=``, ``to_apply=``, ``condition=``,
  ``body=``, ``branch_computations=``, ...), sharding, frontend attributes, control predecessors,
  metadata and backend_config.

Where it differs from jaxlib: async ops are printed plainly (``async-start(...),
calls=%async_computation`` with that computation printed too), not folded into
``reduce-scatter-start(...)``; replica groups given only in a form newer than this bundle's
schema (``replica_groups=mesh[...]``) are left out; computations are printed in stored order
(callees first, as XLA stores them); ``stack_frame_id=`` and the stack-frame index keep the
proto's ids (jaxlib renumbers them); backend_config is the stored string (jaxlib re-serializes
it); sparsity descriptors, statistics, original values and result accuracy are not printed.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from jaxperf.read.xprotos import PRIMITIVE_TYPES

# Constants with more elements than this print as {...} (as XLA does by default).
MAX_CONSTANT_ELEMENTS = 10

_TUPLE = 13
_OPAQUE = 14
_TOKEN = 17
_UNBOUNDED = -(2**63)

_ESCAPES = {i: f"\\{i:03o}" for i in range(32)}
_ESCAPES.update({ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t", ord('"'): '\\"',
                 ord("'"): "\\'", ord("\\"): "\\\\", 127: "\\177"})


def _q(s: str) -> str:
    """A double-quoted string, C-escaped as XLA prints strings."""
    return '"' + s.translate(_ESCAPES) + '"'


def _ints(values: Iterable[int]) -> str:
    return "{" + ",".join(str(v) for v in values) + "}"


def _with_index_marks(items: Iterable[str]) -> str:
    """Join with ", ", putting XLA's ``/*index=N*/`` before every fifth item."""
    return ", ".join(f"/*index={i}*/{s}" if i and i % 5 == 0 else s for i, s in enumerate(items))


# ---- shapes ------------------------------------------------------------------------------------

def _layout(layout: Any, rank: int) -> str:
    extras = ["T" + "".join("(" + ",".join(str(d) for d in t.dimensions) + ")"
                            for t in layout.tiles)] if layout.tiles else []
    if layout.tail_padding_alignment_in_elements > 1:
        extras.append(f"L({layout.tail_padding_alignment_in_elements})")
    extras += [f"{mark}({_type_name(t)})" for mark, t in (
        ("#", layout.index_primitive_type), ("*", layout.pointer_primitive_type)) if t]
    extras += [f"{mark}({n})" for mark, n in (
        ("E", layout.element_size_in_bits), ("S", layout.memory_space)) if n]
    extras += [f"SC({sc.dimension}:" + ",".join(str(i) for i in sc.split_indices) + ")"
               for sc in layout.split_configs]
    if layout.dynamic_shape_metadata_prefix_bytes:
        extras.append(f"M({layout.dynamic_shape_metadata_prefix_bytes})")
    if rank == 0 and not extras:
        return ""
    m2m = ",".join(str(d) for d in layout.minor_to_major)
    return "{" + m2m + (":" + "".join(extras) if extras else "") + "}"


def _type_name(element_type: int) -> str:
    return PRIMITIVE_TYPES.get(element_type, f"type{element_type}")


_SHAPE_TEXTS: dict[tuple, str] = {}  # (a shape's bytes, with its layout) -> its text


def shape_text(shape: Any, layout: bool = True) -> str:
    """``f32[2,3]{1,0}``, ``(s32[], f32[4]{0})``, ``token[]``; without layouts when told.
    Shapes repeat through a module: each is formatted once (by its bytes)."""
    key = (shape.SerializeToString(), layout)
    if (out := _SHAPE_TEXTS.get(key)) is None:
        if len(_SHAPE_TEXTS) >= _MAX_SHAPE_TEXTS:
            _SHAPE_TEXTS.clear()
        out = _SHAPE_TEXTS[key] = _shape_text(shape, layout)
    return out


_MAX_SHAPE_TEXTS = 100_000


def _shape_text(shape: Any, layout: bool) -> str:
    et = shape.element_type
    if et == _TUPLE:
        return "(" + _with_index_marks(shape_text(s, layout) for s in shape.tuple_shapes) + ")"
    if et in (_TOKEN, _OPAQUE):
        return _type_name(et) + "[]"
    dyn = shape.is_dynamic_dimension
    dims = ["?" if d == _UNBOUNDED else f"<={d}" if i < len(dyn) and dyn[i] else str(d)
            for i, d in enumerate(shape.dimensions)]
    out = _type_name(et) + "[" + ",".join(dims) + "]"
    if layout and shape.HasField("layout"):
        out += _layout(shape.layout, len(dims))
    return out


# ---- constants ---------------------------------------------------------------------------------

# (digits10, max_digits10) of each floating type: XLA prints a value with the first that reads
# back to the same value in that type.
_FLOAT_DIGITS = {"f64": (15, 17), "f32": (6, 9), "f16": (3, 5), "bf16": (2, 4)}


def _to_f32(v: float) -> float:
    return struct.unpack("<f", struct.pack("<f", v))[0]


def _to_f16(v: float) -> float:
    try:
        return struct.unpack("<e", struct.pack("<e", v))[0]
    except OverflowError:
        return math.copysign(math.inf, v)


def _bf16_from_bits(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", bits << 16))[0]


def _to_bf16(v: float) -> float:
    bits = struct.unpack("<I", struct.pack("<f", v))[0]
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16  # round to nearest even
    return _bf16_from_bits(bits & 0xFFFF)


_ROUND = {"f64": float, "f32": _to_f32, "f16": _to_f16, "bf16": _to_bf16}


def _float_text(v: float, type_name: str) -> str:
    if math.isnan(v):
        return "-nan" if math.copysign(1.0, v) < 0 else "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    low, high = _FLOAT_DIGITS.get(type_name, (3, 17))
    cast = _ROUND.get(type_name, float)
    s = f"{v:.{low}g}"
    return s if cast(float(s)) == v else f"{v:.{high}g}"


def _minifloat(byte: int, exp_bits: int, man_bits: int, bias: int, kind: str) -> float:
    """Decode one 8-bit float: kind "ieee" (inf and NaN), "fn" (NaN = all ones, no inf),
    "fnuz" (NaN = 0x80, no negative zero, no inf)."""
    if kind == "fnuz" and byte == 0x80:
        return math.nan
    sign = -1.0 if byte >> (exp_bits + man_bits) & 1 else 1.0
    e = (byte >> man_bits) & ((1 << exp_bits) - 1)
    m = byte & ((1 << man_bits) - 1)
    top = (1 << exp_bits) - 1
    if kind == "ieee" and e == top:
        return sign * math.inf if m == 0 else math.nan
    if kind == "fn" and e == top and m == (1 << man_bits) - 1:
        return math.nan
    if e == 0:
        return sign * m * 2.0 ** (1 - bias - man_bits)
    return sign * (1 + m / (1 << man_bits)) * 2.0 ** (e - bias)


# type -> (LiteralProto field, exponent bits, mantissa bits, bias, kind)
_F8 = {
    "f8e5m2": ("f8e5m2s", 5, 2, 15, "ieee"),
    "f8e4m3": ("f8e4m3s", 4, 3, 7, "ieee"),
    "f8e3m4": ("f8e3m4s", 3, 4, 3, "ieee"),
    "f8e4m3fn": ("f8e4m3fns", 4, 3, 7, "fn"),
    "f8e4m3fnuz": ("f8e4m3fnuzs", 4, 3, 8, "fnuz"),
    "f8e5m2fnuz": ("f8e5m2fnuzs", 5, 2, 16, "fnuz"),
    "f8e4m3b11fnuz": ("f8e4m3b11fnuzs", 4, 3, 11, "fnuz"),
}
_BYTE_INTS = {"s8": ("s8s", True), "u8": ("u8s", False), "s4": ("s4s", True),
              "u4": ("u4s", False), "s2": ("s2s", True), "u2": ("u2s", False),
              "s1": ("s1s", True), "u1": ("u1s", False)}
_REPEATED_INTS = {"s32": "s32s", "s64": "s64s", "u32": "u32s", "u64": "u64s"}


def _literal_values(lit: Any, type_name: str, count: int) -> list[str] | None:
    """The first ``count`` values of an array literal as text; None if not decodable."""
    if type_name == "pred":
        return ["true" if b else "false" for b in lit.preds[:count]]
    if type_name in _REPEATED_INTS:
        return [str(v) for v in getattr(lit, _REPEATED_INTS[type_name])[:count]]
    if type_name in ("f32", "f64"):
        return [_float_text(v, type_name) for v in getattr(lit, type_name + "s")[:count]]
    if type_name in _BYTE_INTS:
        field, signed = _BYTE_INTS[type_name]
        raw = getattr(lit, field)[:count]
        return [str(b - 256 if signed and b > 127 else b) for b in raw]
    if type_name in ("s16", "u16"):
        raw = getattr(lit, type_name + "s")[: 2 * count]
        fmt = "<" + ("h" if type_name == "s16" else "H") * (len(raw) // 2)
        return [str(v) for v in struct.unpack(fmt, raw)]
    if type_name == "f16":
        raw = lit.f16s[: 2 * count]
        return [_float_text(v, "f16") for v in struct.unpack("<" + "e" * (len(raw) // 2), raw)]
    if type_name == "bf16":
        raw = lit.bf16s[: 2 * count]
        bits = struct.unpack("<" + "H" * (len(raw) // 2), raw)
        return [_float_text(_bf16_from_bits(b), "bf16") for b in bits]
    if type_name in _F8:
        field, eb, mb, bias, kind = _F8[type_name]
        return [_float_text(_minifloat(b, eb, mb, bias, kind), type_name)
                for b in getattr(lit, field)[:count]]
    if type_name in ("c64", "c128"):
        parts = getattr(lit, type_name + "s")[: 2 * count]
        t = "f32" if type_name == "c64" else "f64"
        return [f"({_float_text(parts[i], t)}, {_float_text(parts[i + 1], t)})"
                for i in range(0, len(parts) - 1, 2)]
    return None


def _nest(values: list[str], dims: list[int]) -> str:
    if len(dims) == 1:
        return "{" + ", ".join(values) + "}"
    step = len(values) // dims[0] if dims[0] else 0
    inner = [_nest(values[i * step:(i + 1) * step], dims[1:]) for i in range(dims[0])]
    return "{ " + ", ".join(inner) + " }"


def literal_text(lit: Any, shape: Any) -> str:
    """A constant's value as XLA prints it inside ``constant(...)``."""
    if shape.element_type == _TUPLE:
        parts = [literal_text(lit.tuple_literals[i], s) if i < len(lit.tuple_literals) else "{...}"
                 for i, s in enumerate(shape.tuple_shapes)]
        return "( " + ", ".join(parts) + " )"
    dims = list(shape.dimensions)
    count = math.prod(dims)
    if count > MAX_CONSTANT_ELEMENTS:
        return "{...}"
    values = _literal_values(lit, _type_name(shape.element_type), count)
    if values is None or len(values) != count:
        return "{...}"
    if not dims:
        return values[0]
    if count == 0:
        return "{}"
    return _nest(values, dims)


# ---- attributes --------------------------------------------------------------------------------

_PRECISION = {0: "default", 1: "high", 2: "highest"}
_ALGORITHM = {
    1: "dot_any_f8_any_f8_f32", 2: "dot_any_f8_any_f8_f32_fast_accum", 3: "dot_f16_f16_f16",
    4: "dot_f16_f16_f32", 5: "dot_bf16_bf16_bf16", 6: "dot_bf16_bf16_f32",
    7: "dot_bf16_bf16_f32_x3", 8: "dot_bf16_bf16_f32_x6", 9: "dot_tf32_tf32_f32",
    10: "dot_tf32_tf32_f32_x3", 11: "dot_f32_f32_f32", 12: "dot_f64_f64_f64",
    13: "dot_bf16_bf16_f32_x9",
}
_RNG_ALGORITHM = {0: "rng_default", 1: "rng_three_fry", 2: "rng_philox"}
_DISTRIBUTION = {1: "rng_uniform", 2: "rng_normal"}
_FFT = {0: "FFT", 1: "IFFT", 2: "RFFT", 3: "IRFFT"}
_TRANSPOSE_A = {1: "NO_TRANSPOSE", 2: "TRANSPOSE", 3: "ADJOINT"}
_SCHEDULE = {1: "SCHEDULE_LATEST", 2: "SCHEDULE_EARLIEST"}
_API_VERSION = {2: "API_VERSION_STATUS_RETURNING", 3: "API_VERSION_STATUS_RETURNING_UNIFIED",
                4: "API_VERSION_TYPED_FFI"}
_SHARDING_TYPE = {0: "replicated", 1: "maximal", 3: "other", 4: "manual", 5: "unknown",
                  6: "unreduced"}
_ALIAS_KIND = {1: "may-alias", 2: "must-alias"}

# Opcodes that always print dimensions={...}, even empty; iota prints iota_dimension instead.
_DIMENSION_OPS = frozenset({
    "broadcast", "concatenate", "reduce", "reverse", "transpose", "sort", "map",
    "all-gather", "all-gather-start", "reduce-scatter",
})
_COLLECTIVES = frozenset({
    "all-reduce", "all-reduce-start", "all-gather", "all-gather-start", "reduce-scatter",
    "all-to-all", "ragged-all-to-all", "collective-broadcast", "collective-permute",
    "collective-permute-start",
})
# Collectives that print dimensions={...} right after their replica groups.
_DIMENSIONS_AFTER_GROUPS = frozenset({"all-gather", "all-gather-start", "all-to-all"})
_SEND_RECV = frozenset({"send", "recv", "send-done", "recv-done"})
_TO_APPLY_OPS = frozenset({
    "call", "map", "reduce-window", "reduce", "all-reduce", "all-reduce-start",
    "reduce-scatter", "scatter", "sort", "topk",
})


def _default_comparison(type_name: str) -> str:
    """The comparison type XLA assumes for operands of this type (not printed)."""
    return "FLOAT" if type_name.startswith(("f", "bf", "c")) else \
        "SIGNED" if type_name.startswith("s") else "UNSIGNED"


def _window(window: Any) -> str:
    dims = window.dimensions
    if not dims:
        return "{}"
    parts = ["size=" + "x".join(str(d.size) for d in dims)]
    if any(d.stride not in (0, 1) for d in dims):
        parts.append("stride=" + "x".join(str(d.stride) for d in dims))
    if any(d.padding_low or d.padding_high for d in dims):
        parts.append("pad=" + "x".join(f"{d.padding_low}_{d.padding_high}" for d in dims))
    if any(d.base_dilation not in (0, 1) for d in dims):
        parts.append("lhs_dilate=" + "x".join(str(d.base_dilation) for d in dims))
    if any(d.window_dilation not in (0, 1) for d in dims):
        parts.append("rhs_dilate=" + "x".join(str(d.window_dilation) for d in dims))
    if any(d.window_reversal for d in dims):
        parts.append("rhs_reversal=" + "x".join("1" if d.window_reversal else "0" for d in dims))
    return "{" + " ".join(parts) + "}"


def _dim_labels(cdn: Any) -> str:
    def labels(rank: int, fixed: dict[int, str], spatial: Iterable[int]) -> str:
        out = ["?"] * rank
        for dim, ch in fixed.items():
            if 0 <= dim < rank:
                out[dim] = ch
        for i, dim in enumerate(spatial):
            if 0 <= dim < rank:
                out[dim] = str(i)
        return "".join(out)

    n = len(cdn.input_spatial_dimensions) + 2
    lhs = labels(n, {cdn.input_batch_dimension: "b", cdn.input_feature_dimension: "f"},
                 cdn.input_spatial_dimensions)
    rhs = labels(n, {cdn.kernel_input_feature_dimension: "i",
                     cdn.kernel_output_feature_dimension: "o"}, cdn.kernel_spatial_dimensions)
    out = labels(n, {cdn.output_batch_dimension: "b", cdn.output_feature_dimension: "f"},
                 cdn.output_spatial_dimensions)
    return f"{lhs}_{rhs}->{out}"


def _tile_assignment(dims: Iterable[int], devices: Iterable[int], reshape: Iterable[int],
                     perm: Iterable[int]) -> str:
    out = "[" + ",".join(str(d) for d in dims) + "]"
    reshape, perm = list(reshape), list(perm)
    if reshape:
        out += "<=[" + ",".join(str(d) for d in reshape) + "]"
        if perm and perm != list(range(len(perm))):
            out += "T(" + ",".join(str(p) for p in perm) + ")"
    else:
        out += ",".join(str(d) for d in devices)
    return out


def sharding_text(s: Any) -> str:
    """An ``OpSharding`` as XLA prints it: ``{replicated}``, ``{devices=[4,1]<=[4]}``, ..."""
    if s.type == 2:  # TUPLE
        return "{" + ", ".join(sharding_text(t) for t in s.tuple_shardings) + "}"
    if s.type == 1:  # MAXIMAL
        dev = s.tile_assignment_devices[0] if s.tile_assignment_devices else 0
        return f"{{maximal device={dev}}}"
    if s.type != 3:
        return "{" + _SHARDING_TYPE.get(s.type, f"type{s.type}") + "}"
    out = "devices=" + _tile_assignment(s.tile_assignment_dimensions, s.tile_assignment_devices,
                                        s.iota_reshape_dims, s.iota_transpose_perm)
    if s.replicate_on_last_tile_dim:
        out += " last_tile_dim_replicate"
    if s.last_tile_dims:
        out += " last_tile_dims={" + ", ".join(_SHARDING_TYPE.get(t, str(t))
                                               for t in s.last_tile_dims) + "}"
    if s.is_shard_group:
        out += f" shard_{'like' if s.shard_group_type == 1 else 'as'} {s.shard_group_id}"
    return "{" + out + "}"


def _replica_groups(ins: Any) -> str | None:
    groups = ins.replica_groups
    cdl = ins.collective_device_list if ins.HasField("collective_device_list") else None
    if not groups and cdl is not None:
        groups = cdl.replica_groups
        if not groups and cdl.HasField("iota_replica_group_list"):
            iota = cdl.iota_replica_group_list
            return _tile_assignment([iota.num_replica_groups, iota.num_devices_per_group], [],
                                    iota.iota_reshape_dims, iota.iota_transpose_perm)
    return "{" + ",".join(_ints(g.replica_ids) for g in groups) + "}" if groups else None


def _shape_index(index: Iterable[int]) -> str:
    return "{" + ", ".join(str(i) for i in index) + "}"


# The metadata fields XLA prints, in its order, and whether each is a quoted string.
_METADATA_FIELDS = (("op_type", True), ("op_name", True), ("source_file", True),
                    ("source_line", False), ("source_end_line", False), ("source_column", False),
                    ("source_end_column", False), ("deduplicated_name", True),
                    ("scheduling_name", True), ("stack_frame_id", False))


def _metadata(md: Any) -> str | None:
    if not (md.op_type or md.op_name or md.source_file or md.scheduling_name):
        return None  # XLA prints no metadata without one of these
    parts = [f"{k}={_q(v) if quoted else v}" for k, quoted in _METADATA_FIELDS
             if (v := getattr(md, k))]
    return "{" + " ".join(parts) + "}" if parts else None


def _frontend_attributes(fa: Any) -> str | None:
    # a value that is itself a {...} dictionary prints bare, as XLA prints it
    return "{" + ",".join(f"{k}={v}" if v.startswith("{") and v.endswith("}") else f"{k}={_q(v)}"
                          for k, v in sorted(fa.map.items())) + "}" if fa.map else None


def _backend_config(raw: bytes) -> str:
    text = raw.decode("utf-8", errors="backslashreplace")
    return text if text.startswith("{") and text.endswith("}") else _q(text)


def _collective_attributes(ins: Any, op: str, add: Callable[[str], None]) -> None:
    """Add a collective's or a send/recv's channel, replica groups and pairs (nothing for
    another opcode)."""
    if op not in _COLLECTIVES and op not in _SEND_RECV:
        return
    if ins.channel_id > 0:
        add(f"channel_id={ins.channel_id}")
    if op in _SEND_RECV:
        if ins.is_host_transfer:
            add("is_host_transfer=true")
    elif op not in ("collective-permute", "collective-permute-start"):
        if (rg := _replica_groups(ins)) is not None:
            add(f"replica_groups={rg}")
        if op in _DIMENSIONS_AFTER_GROUPS and (ins.dimensions or op != "all-to-all"):
            add("dimensions=" + _ints(ins.dimensions))
    if ins.constrain_layout:
        add("constrain_layout=true")
    if ins.use_global_device_ids:
        add("use_global_device_ids=true")
    if ins.source_target_pairs:
        add("source_target_pairs={" + ",".join(
            f"{{{p.source},{p.target}}}" for p in ins.source_target_pairs) + "}")


def _dimension_attributes(ins: Any, op: str, add: Callable[[str], None]) -> None:
    """Add the dimensions, a sort's stability, the window, convolution labels and group
    counts."""
    # (an all-gather's and an all-to-all's dimensions follow their replica groups)
    if op not in _DIMENSIONS_AFTER_GROUPS and (
            op in _DIMENSION_OPS or (ins.dimensions and op != "iota")):
        add("dimensions=" + _ints(ins.dimensions))
    if op == "sort" and ins.is_stable:
        add("is_stable=true")
    if ins.HasField("window") and (op != "custom-call" or ins.window.dimensions):
        add("window=" + _window(ins.window))
    if ins.HasField("convolution_dimension_numbers") and (
            op == "convolution" or ins.convolution_dimension_numbers.input_spatial_dimensions
            or ins.convolution_dimension_numbers.kernel_spatial_dimensions):
        add("dim_labels=" + _dim_labels(ins.convolution_dimension_numbers))
    if ins.feature_group_count > 1:
        add(f"feature_group_count={ins.feature_group_count}")
    if ins.batch_group_count > 1:
        add(f"batch_group_count={ins.batch_group_count}")


# A gather's and a scatter's dimension numbers as HLO text prints them: the fields always
# printed, then those printed only when set, then index_vector_dim.
_INDEXING_DIMS = {
    "gather_dimension_numbers": (
        ("offset_dims", "collapsed_slice_dims", "start_index_map"),
        ("operand_batching_dims", "start_indices_batching_dims")),
    "scatter_dimension_numbers": (
        ("update_window_dims", "inserted_window_dims", "scatter_dims_to_operand_dims"),
        ("input_batching_dims", "scatter_indices_batching_dims")),
}


def _dimension_numbers(ins: Any, add: Callable[[str], None]) -> None:
    """Add the dot, ragged dot, gather and scatter dimension numbers and the operand
    precision."""
    dnums = None
    if ins.HasField("dot_dimension_numbers"):
        dnums = ins.dot_dimension_numbers
    elif ins.HasField("ragged_dot_dimension_numbers"):
        dnums = ins.ragged_dot_dimension_numbers.dot_dimension_numbers
    if dnums is not None:
        if dnums.lhs_batch_dimensions:
            add("lhs_batch_dims=" + _ints(dnums.lhs_batch_dimensions))
        add("lhs_contracting_dims=" + _ints(dnums.lhs_contracting_dimensions))
        if dnums.rhs_batch_dimensions:
            add("rhs_batch_dims=" + _ints(dnums.rhs_batch_dimensions))
        add("rhs_contracting_dims=" + _ints(dnums.rhs_contracting_dimensions))
    if ins.HasField("ragged_dot_dimension_numbers"):
        r = ins.ragged_dot_dimension_numbers
        add("lhs_ragged_dims=" + _ints(r.lhs_ragged_dimensions))
        add("rhs_group_dims=" + _ints(r.rhs_group_dimensions))
    for field_name, (always, when_set) in _INDEXING_DIMS.items():
        if ins.HasField(field_name):
            d = getattr(ins, field_name)
            for name in always:
                add(f"{name}=" + _ints(getattr(d, name)))
            for name in when_set:
                if getattr(d, name):
                    add(f"{name}=" + _ints(getattr(d, name)))
            add(f"index_vector_dim={d.index_vector_dim}")
            if field_name == "gather_dimension_numbers":
                add("slice_sizes=" + _ints(ins.gather_slice_sizes))
    if ins.indices_are_sorted:
        add("indices_are_sorted=true")
    if ins.unique_indices:
        add("unique_indices=true")
    if ins.HasField("precision_config"):
        pc = ins.precision_config
        if any(p for p in pc.operand_precision):
            add("operand_precision={" + ",".join(
                _PRECISION.get(p, str(p)) for p in pc.operand_precision) + "}")
        if pc.algorithm:
            add(f"algorithm={_ALGORITHM.get(pc.algorithm, pc.algorithm)}")


def _aliasing_attributes(ins: Any, op: str, add: Callable[[str], None]) -> None:
    """Add the output-to-operand aliasing, a custom call's flags and layout constraints, a
    parameter's replication."""
    if ins.output_operand_aliasing:
        add("output_to_operand_aliasing={" + ", ".join(
            f"{_shape_index(x.output_shape_index)}: ({x.operand_index}, "
            f"{_shape_index(x.operand_shape_index)})"
            for x in ins.output_operand_aliasing) + "}")
    if op == "custom-call":
        if ins.custom_call_has_side_effect:
            add("custom_call_has_side_effect=true")
        if ins.custom_call_schedule in _SCHEDULE:
            add(f"schedule={_SCHEDULE[ins.custom_call_schedule]}")
        if ins.custom_call_api_version in _API_VERSION:
            add(f"api_version={_API_VERSION[ins.custom_call_api_version]}")
        if ins.constrain_layout and ins.operand_shapes_with_layout:
            add("operand_layout_constraints={" + ", ".join(
                shape_text(s) for s in ins.operand_shapes_with_layout) + "}")
    if op == "parameter" and ins.parameter_replication.replicated_at_leaf_buffers:
        add("parameter_replication={" + ",".join(
            "true" if r else "false"
            for r in ins.parameter_replication.replicated_at_leaf_buffers) + "}")


class _Printer:
    """Formats one module; per-computation lookups live only while that computation prints."""

    def __init__(self, module: Any):
        self.module = module
        self.comp_names = {c.id: c.name for c in module.computations}
        self.by_id: dict[int, Any] = {}

    def comp(self, cid: int) -> str:
        return "%" + self.comp_names.get(cid, f"computation.{cid}")

    def operand_type(self, ins: Any) -> str:
        operand = self.by_id.get(ins.operand_ids[0]) if ins.operand_ids else None
        return _type_name(operand.shape.element_type) if operand is not None else ""

    def name(self, iid: int) -> str:
        ins = self.by_id.get(iid)
        return "%" + (ins.name if ins is not None else f"instruction.{iid}")

    # -- module ----------------------------------------------------------------------------------

    def header(self) -> str:
        m = self.module
        parts = [f"HloModule {m.name}"]
        if any(seq.instruction_ids for seq in m.schedule.sequences.values()):
            parts.append("is_scheduled=true")
        if m.input_output_alias.entries:
            items = [f"{_shape_index(e.output_shape_index)}: ({e.parameter_number}, "
                     f"{_shape_index(e.parameter_shape_index)}, "
                     f"{_ALIAS_KIND.get(e.kind, 'may-alias')})"
                     for e in m.input_output_alias.entries]
            parts.append("input_output_alias={ " + ", ".join(items) + " }")
        if m.buffer_donor.entries:
            items = [f"({e.parameter_number}, {_shape_index(e.parameter_shape_index)})"
                     for e in m.buffer_donor.entries]
            parts.append("buffer_donor={ " + ", ".join(items) + " }")
        if layout := self.entry_layout():
            parts.append(f"entry_computation_layout={{{layout}}}")
        if fa := _frontend_attributes(m.frontend_attributes):
            parts.append(f"frontend_attributes={fa}")
        return ", ".join(parts)

    def entry_layout(self) -> str | None:
        m = self.module
        ps = None
        if m.HasField("host_program_shape"):
            ps = m.host_program_shape
        else:
            entry = next((c for c in m.computations if c.id == m.entry_computation_id), None)
            if entry is not None and entry.HasField("program_shape"):
                ps = entry.program_shape
        if ps is None:
            return None
        params = _with_index_marks(shape_text(p) for p in ps.parameters)
        return f"({params})->{shape_text(ps.result)}"

    def stack_frame_lines(self) -> Iterator[str]:
        sfi = self.module.stack_frame_index
        if not sfi.file_names and not sfi.stack_frames:
            return
        for title, names in (("FileNames", sfi.file_names),
                             ("FunctionNames", sfi.function_names)):
            yield ""
            yield title
            yield from (f"{i} {_q(n)}" for i, n in enumerate(names, 1))
        yield ""
        yield "FileLocations"
        for i, loc in enumerate(sfi.file_locations, 1):
            yield (f"{i} {{file_name_id={loc.file_name_id} function_name_id="
                   f"{loc.function_name_id} line={loc.line} end_line={loc.end_line} "
                   f"column={loc.column} end_column={loc.end_column}}}")
        yield ""
        yield "StackFrames"
        for i, fr in enumerate(sfi.stack_frames, 1):
            yield f"{i} {{file_location_id={fr.file_location_id} " \
                  f"parent_frame_id={fr.parent_frame_id}}}"

    # -- computations ----------------------------------------------------------------------------

    def order(self, comp: Any) -> list[Any]:
        seq = self.module.schedule.sequences.get(comp.id)
        if seq is None or not seq.instruction_ids:
            return list(comp.instructions)
        out, seen = [], set()
        for iid in seq.instruction_ids:
            ins = self.by_id.get(iid)
            if ins is not None and iid not in seen:
                seen.add(iid)
                out.append(ins)
        out.extend(ins for ins in comp.instructions if ins.id not in seen)
        return out

    def computation_lines(self, comp: Any) -> Iterator[str]:
        self.by_id = {ins.id: ins for ins in comp.instructions}
        root = self.by_id.get(comp.root_id)
        if root is None and comp.instructions:
            root = comp.instructions[len(comp.instructions) - 1]
        params = sorted((i for i in comp.instructions if i.opcode == "parameter"),
                        key=lambda i: i.parameter_number)
        sig = ", ".join(f"{p.name}: {shape_text(p.shape, layout=False)}" for p in params)
        result = shape_text(root.shape, layout=False) if root is not None else "()"
        entry = "ENTRY " if comp.id == self.module.entry_computation_id else ""
        yield f"{entry}%{comp.name} ({sig}) -> {result} {{"
        for ins in self.order(comp):
            yield ("  ROOT " if ins is root else "  ") + self.instruction(ins)
        tail = f", execution_thread={_q(comp.execution_thread)}" \
            if comp.execution_thread and comp.execution_thread != "main" else ""
        yield "}" + tail
        self.by_id = {}

    # -- instructions ----------------------------------------------------------------------------

    def instruction(self, ins: Any) -> str:
        op = ins.opcode
        if op == "parameter":
            args = str(ins.parameter_number)
        elif op == "constant":
            args = literal_text(ins.literal, ins.literal.shape if ins.literal.HasField("shape")
                                else ins.shape) if ins.HasField("literal") else "{...}"
        else:
            args = _with_index_marks(self.name(i) for i in ins.operand_ids)
        attrs = self.attributes(ins)
        head = f"%{ins.name} = {shape_text(ins.shape)} {op}({args})"
        return head + (", " + ", ".join(attrs) if attrs else "")

    def attributes(self, ins: Any) -> list[str]:
        """The instruction's attributes as HLO text prints them after its operands, in
        that order."""
        op = ins.opcode
        a: list[str] = []
        add = a.append
        self.opcode_attributes(ins, op, add)
        _collective_attributes(ins, op, add)
        _dimension_attributes(ins, op, add)
        _dimension_numbers(ins, add)
        self.called_attributes(ins, op, add)
        _aliasing_attributes(ins, op, add)
        self.generic_attributes(ins, add)
        return a

    def opcode_attributes(self, ins: Any, op: str, add: Callable[[str], None]) -> None:
        """Add the attributes of one opcode alone (a fusion's kind, a slice's bounds, ...)."""
        if op == "fusion":
            add(f"kind={ins.fusion_kind}")
        elif op == "get-tuple-element":
            add(f"index={ins.tuple_index}")
        elif op == "iota":
            add(f"iota_dimension={ins.dimensions[0] if ins.dimensions else 0}")
        elif op == "compare":
            add(f"direction={ins.comparison_direction}")
            ctype = ins.comparison_type
            if ctype and ctype != _default_comparison(self.operand_type(ins)):
                add(f"type={ctype}")
        elif op == "slice":
            strided = any(s.stride not in (0, 1) for s in ins.slice_dimensions)
            add("slice={" + ", ".join(
                f"[{s.start}:{s.limit}:{s.stride}]" if strided else f"[{s.start}:{s.limit}]"
                for s in ins.slice_dimensions) + "}")
        elif op == "dynamic-slice":
            add("dynamic_slice_sizes=" + _ints(ins.dynamic_slice_sizes))
        elif op == "pad":
            dims = ins.padding_config.dimensions
            interior = any(d.interior_padding for d in dims)
            add("padding=" + "x".join(
                f"{d.edge_padding_low}_{d.edge_padding_high}"
                + (f"_{d.interior_padding}" if interior else "") for d in dims))
        elif op == "reduce-precision":
            add(f"exponent_bits={ins.exponent_bits}")
            add(f"mantissa_bits={ins.mantissa_bits}")
        elif op == "rng":
            add(f"distribution={_DISTRIBUTION.get(ins.distribution, ins.distribution)}")
        elif op == "rng-bit-generator":
            add(f"algorithm={_RNG_ALGORITHM.get(ins.rng_algorithm, ins.rng_algorithm)}")
        elif op == "rng-get-and-update-state":
            add(f"delta={ins.delta}")
        elif op == "fft":
            add(f"fft_type={_FFT.get(ins.fft_type, ins.fft_type)}")
            add("fft_length=" + _ints(ins.fft_length))
        elif op == "triangular-solve":
            o = ins.triangular_solve_options
            add(f"left_side={str(o.left_side).lower()}")
            add(f"lower={str(o.lower).lower()}")
            if o.unit_diagonal:
                add("unit_diagonal=true")
            add(f"transpose_a={_TRANSPOSE_A.get(o.transpose_a, o.transpose_a)}")
        elif op == "cholesky":
            add(f"lower={str(ins.cholesky_options.lower).lower()}")
        elif op == "topk":
            add(f"k={ins.k}")
            add(f"largest={str(ins.largest).lower()}")
        elif op == "copy-start" and ins.HasField("cross_program_prefetch_index"):
            add(f"cross_program_prefetch_index={ins.cross_program_prefetch_index}")
        elif op == "custom-call":
            add(f"custom_call_target={_q(ins.custom_call_target)}")
        elif op in ("batch-norm-training", "batch-norm-inference", "batch-norm-grad"):
            add(f"epsilon={ins.epsilon:g}")
            add(f"feature_index={ins.feature_index}")
        elif op == "infeed" and ins.infeed_config:
            add(f"infeed_config={_q(ins.infeed_config.decode('utf-8', 'backslashreplace'))}")
        elif op == "outfeed":
            add(f"outfeed_shape={shape_text(ins.outfeed_shape)}")
            if ins.outfeed_config:
                add("outfeed_config="
                    + _q(ins.outfeed_config.decode("utf-8", "backslashreplace")))

    def called_attributes(self, ins: Any, op: str, add: Callable[[str], None]) -> None:
        """Add the computations the instruction calls, under the names its opcode gives them."""
        called = list(ins.called_computation_ids)
        if called:
            if op == "while" and len(called) == 2:
                add(f"condition={self.comp(called[1])}")
                add(f"body={self.comp(called[0])}")
            elif op == "select-and-scatter" and len(called) == 2:
                add(f"select={self.comp(called[0])}")
                add(f"scatter={self.comp(called[1])}")
            elif op == "conditional":
                pred = self.by_id.get(ins.operand_ids[0]) if ins.operand_ids else None
                if pred is not None and pred.shape.element_type == 1 and len(called) == 2:
                    add(f"true_computation={self.comp(called[0])}")
                    add(f"false_computation={self.comp(called[1])}")
                else:
                    add("branch_computations={" + ", ".join(self.comp(c) for c in called) + "}")
            elif op in _TO_APPLY_OPS and len(called) == 1:
                add(f"to_apply={self.comp(called[0])}")
            elif op == "custom-call":
                add("called_computations={" + ", ".join(self.comp(c) for c in called) + "}")
            elif len(called) == 1:
                add(f"calls={self.comp(called[0])}")
            else:
                add("calls={" + ", ".join(self.comp(c) for c in called) + "}")
        if op in ("async-start", "async-update", "async-done") and ins.async_execution_thread \
                and ins.async_execution_thread != "main":
            add(f"async_execution_thread={_q(ins.async_execution_thread)}")
        if ins.is_composite:
            add("is_composite=true")

    def generic_attributes(self, ins: Any, add: Callable[[str], None]) -> None:
        """Add what any instruction may carry: sharding, frontend attributes, control
        predecessors, metadata, backend config."""
        if ins.HasField("sharding"):
            add(f"sharding={sharding_text(ins.sharding)}")
        if fa := _frontend_attributes(ins.frontend_attributes):
            add(f"frontend_attributes={fa}")
        if ins.control_predecessor_ids:
            add("control-predecessors={" + ", ".join(
                self.name(i) for i in ins.control_predecessor_ids) + "}")
        if md := _metadata(ins.metadata):
            add(f"metadata={md}")
        if ins.backend_config:
            add(f"backend_config={_backend_config(ins.backend_config)}")

    def lines(self) -> Iterator[str]:
        yield self.header()
        yield from self.stack_frame_lines()
        for comp in self.module.computations:
            yield ""
            yield from self.computation_lines(comp)


def write_hlo_text(module: Any, path: str | Path) -> int:
    """Write the HLO text of ``module`` (an ``xla.HloModuleProto``) to ``path``, line by line.

    Returns the number of lines written."""
    n = 0
    with open(path, "w", encoding="utf-8", buffering=1 << 20) as f:
        for line in _Printer(module).lines():
            f.write(line)
            f.write("\n")
            n += 1
    return n
