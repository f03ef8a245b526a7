#!/usr/bin/env python3
"""Step 5: a roofline per instruction, with per-dtype ceilings whose provenance is kept.

Usage:
    python3 -P roofline.py <xplane.pb | run folder | log folder> [--out DIR]
                           [--run NAME] [--host NAME]

Example:
    python3 -P $B/scripts/attribute_kernels.py ~/logs/plugins/profile/2026_02_20_13_54_10
    python3 -P $B/scripts/roofline.py ~/logs/plugins/profile/2026_02_20_13_54_10

Needs step 4 first: reads ./attribution/ops.csv and attribute_kernels.json (or DIR/attribution/)
for the measured GPU time per instruction and the executions counted, and the capture for the
GPU (its device-plane stats) and the chosen program's HLO. Writes into ./ (or DIR):
    roofline.csv   one row per instruction with kernel time: FLOPs and bytes from the HLO and how
                   they were obtained (shapes / fused computation / backend config / not
                   computable: why), the dtype that sets the ceiling, arithmetic intensity,
                   achieved FLOP/s and B/s from the measured time, the binding ceiling at that
                   intensity with its provenance tag, and the share of it reached
    roofline.json  the GPU and the evidence it was identified by, the ceilings used with their
                   tags, the GPU time whose FLOPs or bytes are not computable (for the trust list)
    roofline.svg   log-log roofline, one per dtype present; points sized by GPU time
Ceilings come from references/peaks.csv (transcribed from the shared peaks.md with each cell's tag:
vendor, vendor-mirror, derived, secondary); an unconfirmed cell is no ceiling. A GPU that matches
no row gets no ceiling: the rows are still written and the result says why. The capture's own
memory_bandwidth stat is shown beside ours and never used (it reads ~half the datasheet on AMD).
A trace measures time, not peaks: every ceiling here is read (vendor, vendor-mirror, secondary)
or inferred (derived: per-clock rate x units x clock), never measured.

Exit codes: 0 done; 1 the input cannot be used (one sentence says why: e.g. step 4 has not run);
2 usage; 3 a missing package (protobuf; the message has the install line).
"""

from __future__ import annotations

import argparse
import csv
import html
import json
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import sibling  # noqa: E402  (where the sibling skill is: one home)

SIBLING = sibling.on_path()

import per_host  # noqa: E402  (sibling skill: the per-host pass)
import trace_rules as rules  # noqa: E402  (sibling skill)
from trace_rules import (  # noqa: E402  (sibling skill: shared rules)
    COLLECTIVE_OPCODES,
    CONTROL_OPCODES,
    NO_LAUNCH_OPCODES,
    pct,
    write_csv,
)

import capture_inputs  # noqa: E402  (sibling skill)

PEAKS_CSV = HERE.parent / "references" / "peaks.csv"
RESULT_FILE = "roofline.json"
TABLE = "roofline.csv"
PLOT = "roofline.svg"
INSTALL = "pip install -r requirements.txt (protobuf)"

COLUMNS = [
    "program_id", "instruction", "opcode", "category", "kernels", "runs", "gpu_us",
    "run_flops", "run_bytes", "total_flops", "total_bytes", "method", "dtype", "ceiling_dtype",
    "intensity_flop_per_byte", "achieved_flop_per_s", "achieved_bytes_per_s",
    "compute_ceiling_flop_per_s", "compute_tag", "compute_source",
    "memory_ceiling_bytes_per_s", "memory_tag", "memory_source",
    "binding", "attainable_flop_per_s", "pct_of_ceiling", "no_ceiling_why",
    "xprof_run_flops", "xprof_run_bytes", "xprof_flops_diff_pct_of_ours",
    "xprof_bytes_diff_pct_of_ours",
]
# XProf's hlo_stats gives per op a FLOP rate in GFLOP/s and a memory bandwidth in GiB/s (found
# by comparison: its bytes came out 6.9% = 1 - 1e9/2^30 under ours on every row) over its
# average self time in us: per run, FLOPs = rate x time x 1e3, bytes = bandwidth x time x 2^30/1e6.
XPROF_FLOP_SCALE = 1e3
XPROF_BYTE_SCALE = 2 ** 30 / 1e6

# memory_size differs by up to ~0.5% between drivers (peaks.md section 4: three A100 40GB
# readings span 206 MB); a 2% band separates every pair in the table (the closest, H100 80GB vs
# A100 80GB, differ in compute capability anyway) without an exact match.
MEMORY_BAND = 0.02
# clock_rate is the max SM/engine clock in kHz; 2% keeps MI355X (2.4 GHz) apart from MI350X
# (2.2 GHz, same gfx950 and 256 CUs) while tolerating a driver's rounding.
CLOCK_BAND = 0.02
GIB = 2 ** 30

# peaks.md section 4: vendor, (cc major, minor), core_count, clock_rate kHz, memory_size bytes,
# and what the row rests on. Matched on every field; memory and clock within their bands.
IDENTIFY = (
    ("H100 SXM5 80GB", "nvidia", (9, 0), 132, 1_980_000, 84.935e9, "C2, X1 [source]"),
    ("H100 PCIe 80GB", "nvidia", (9, 0), 114, 1_755_000, 84.94e9, "X1 [source]"),
    ("H200 SXM 141GB", "nvidia", (9, 0), 132, 1_980_000, 151.40e9, "X1 [source]"),
    ("A100 SXM4 80GB", "nvidia", (8, 0), 108, 1_410_000, 85.10e9, "X1 [source]"),
    ("A100 SXM4 40GB", "nvidia", (8, 0), 108, 1_410_000, 42.40e9, "C2, X1 [source]"),
    ("B200", "nvidia", (10, 0), 148, 1_965_000, 191.51e9, "X1 [source]"),
    ("MI300X", "amd", (9, 4), 304, 2_100_000, 206_141_652_992, "C1 [seen]"),
    ("MI325X", "amd", (9, 4), 304, 2_100_000, 256 * GIB,
     "A2 (clock and memory expected, unconfirmed)"),
    ("MI355X", "amd", (9, 5), 256, 2_400_000, 309_220_868_096, "C1 [seen]"),
)

# Element-wise opcodes counted as one FLOP per output element (transcendentals included, as one).
FLOP_OPCODES = frozenset({
    "add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "remainder",
    "atan2", "negate", "abs", "exponential", "exponential-minus-one", "log", "log-plus-one",
    "logistic", "tanh", "sqrt", "rsqrt", "cbrt", "sine", "cosine", "tan", "erf", "sign",
    "floor", "ceil", "round-nearest-afz", "round-nearest-even", "clamp",
})
# FLOPs are floating-point: index arithmetic (s32 scalars in slice fusions) is not counted.
FLOAT_TYPES = frozenset({"f16", "bf16", "f32", "f64", "c64", "c128", "f8e5m2", "f8e4m3fn",
                         "f8e4m3b11fnuz", "f8e5m2fnuz", "f8e4m3fnuz", "f8e4m3", "f8e3m4",
                         "f4e2m1fn"})
SLICE_OPCODES = frozenset({"slice", "dynamic-slice", "gather"})
GEMM_TARGET_RE = re.compile(r"^__cublas\$|^__hipblas|gemm|matmul", re.IGNORECASE)
CUDNN_CONV_RE = re.compile(r"^__cudnn\$conv|^__miopen\$conv", re.IGNORECASE)
CATEGORY_COLOURS = {"compute": "#1f77b4", "collective": "#d62728", "memcpy": "#2ca02c"}
DTYPE_COLOURS = ("#444444", "#9467bd", "#ff7f0e", "#8c564b", "#17becf", "#e377c2", "#bcbd22")
CAPTION_CHARS = 140  # caption lines are wrapped to stay inside the plot's width
LABELLED_POINTS = 8  # the instructions with the most GPU time get a text label on the plot


class UsageError(Exception):
    """The input cannot be used; the message is one sentence."""


class MissingPackage(Exception):
    pass


# ---------------------------------------------------------------- ceilings and the GPU

@dataclass(frozen=True)
class Ceiling:
    gpu: str
    key: str
    value: float | None  # FLOP/s or B/s; None = no ceiling (unconfirmed, none)
    unit: str
    tag: str
    source: str
    other_values: str


def load_peaks(path: Path = PEAKS_CSV) -> dict[str, dict[str, Ceiling]]:
    """peaks.csv -> {gpu: {ceiling key: Ceiling}}; TFLOP/s converted to FLOP/s (1 TFLOP/s =
    1e12 FLOP/s). A cell without a value (unconfirmed, none) is kept with value None."""
    out: dict[str, dict[str, Ceiling]] = {}
    with open(path, newline="", encoding="utf-8") as fh:
        for r in csv.DictReader(fh):
            if r["ceiling"] == "hbm_bandwidth":
                value = float(r["hbm_bytes_per_s"]) if r["hbm_bytes_per_s"] else None
                unit = "B/s"
            else:
                tflops = r["dense_tflops"]
                value = float(round(float(tflops) * 1e12)) if tflops else None
                unit = "FLOP/s"
            out.setdefault(r["gpu"], {})[r["ceiling"]] = Ceiling(
                r["gpu"], r["ceiling"], value, unit, r["tag"], r["source"], r["other_values"])
    return out


def _near(a, b, band) -> bool:
    return a is not None and b and abs(a - b) <= band * b


def identify(stats: dict) -> dict:
    """The GPU model from one device plane's stats (peaks.md section 4): `model` (None when no
    row matches), `evidence` (the stats used), `basis`, `why` (a sentence when unrecognised)."""
    vendor = stats.get("device_vendor")
    cc = (stats.get("compute_cap_major"), stats.get("compute_cap_minor"))
    cores, clock, memory = stats.get("core_count"), stats.get("clock_rate"), stats.get(
        "memory_size")
    evidence = {"device_vendor": vendor, "gpu_device_name": stats.get("gpu_device_name"),
                "compute_cap": f"{cc[0]}.{cc[1]}" if cc[0] is not None else None,
                "core_count": cores, "clock_rate_khz": clock, "memory_size_bytes": memory}
    out = {"model": None, "evidence": evidence, "basis": None, "why": None}
    if not vendor:
        out["why"] = ("cannot identify the GPU because its device plane has no device_vendor stat"
                      f" (compute capability {evidence['compute_cap']}, {cores} cores, clock "
                      f"{clock} kHz, memory {memory} B), and peaks.md requires the vendor first: "
                      "no ceiling is used")
        return out
    for model, v, want_cc, want_cores, want_clock, want_mem, basis in IDENTIFY:
        if (str(vendor).lower() == v and cc == want_cc and cores == want_cores
                and _near(clock, want_clock, CLOCK_BAND) and _near(memory, want_mem, MEMORY_BAND)):
            out["model"], out["basis"] = model, basis
            return out
    out["why"] = (f"cannot identify the GPU because no row of peaks.md section 4 matches vendor "
                  f"{vendor}, compute capability {evidence['compute_cap']}, {cores} cores, clock "
                  f"{clock} kHz, memory {memory} B: no ceiling is used")
    return out


def identify_space(space) -> dict:
    """Identify every GPU plane; one model for the capture, or none with why."""
    # idle GPUs may carry device_vendor alone (the MI355X capture): identify by the planes
    # that report the full set
    planes = [p for p in space.gpu_planes() if p.stats.get("core_count")]
    if not planes:
        return {"model": None, "evidence": {}, "basis": None, "devices": 0,
                "why": "cannot identify the GPU because the xplane has no GPU plane with device "
                       "stats: no ceiling is used"}
    ids = [identify(p.stats) for p in planes]
    models = sorted({str(i["model"]) for i in ids})
    first = dict(ids[0])
    first["devices"] = len(planes)
    first["xprof_memory_bandwidth_bytes_per_s"] = planes[0].stats.get("memory_bandwidth")
    if len(models) > 1:
        first["model"] = None
        first["why"] = ("cannot use one ceiling because the GPU planes identify as different "
                        f"models ({', '.join(models)}): no ceiling is used")
    return first


# ---------------------------------------------------------------- FLOPs and bytes from the HLO

def _prod(xs) -> int:
    n = 1
    for x in xs:
        n *= int(x)
    return n


def elements(shape) -> int:
    if shape.tuple_shapes:
        return sum(elements(s) for s in shape.tuple_shapes)
    return _prod(shape.dimensions)


def dtype_name(shape) -> str:
    import xprotos
    if shape.tuple_shapes:
        return dtype_name(shape.tuple_shapes[0])
    return xprotos.PRIMITIVE_TYPES.get(shape.element_type, f"type{shape.element_type}")


def nbytes(shape) -> int:
    """Bytes of an array (sum over a tuple); token/opaque count 0."""
    import xprotos
    if shape.tuple_shapes:
        return sum(nbytes(s) for s in shape.tuple_shapes)
    bits = xprotos.PRIMITIVE_BITS.get(dtype_name(shape))
    return 0 if bits is None else (_prod(shape.dimensions) * bits + 7) // 8


@dataclass
class Cost:
    flops: int | None = 0
    bytes: int | None = 0
    method: str = "shapes"
    matrix_dtype: str | None = None   # operand dtype of a dot / convolution / GEMM
    tf32_allowed: bool = False        # an f32 dot at DEFAULT precision may run as TF32
    vector_f64: bool = False
    why: str | None = None            # set when not computable
    notes: list = field(default_factory=list)


def dot_flops(out_shape, lhs_shape, lhs_contracting) -> int:
    """2 x output elements x contracted size (batch dimensions are in the output)."""
    k = _prod(lhs_shape.dimensions[d] for d in lhs_contracting)
    return 2 * _prod(out_shape.dimensions) * k


def conv_flops(out_shape, kernel_shape, dn) -> int:
    """2 x output elements x kernel window x kernel input features (the per-group features:
    feature_group_count is already in the kernel's shape)."""
    window = _prod(kernel_shape.dimensions[d] for d in dn.kernel_spatial_dimensions)
    return 2 * _prod(out_shape.dimensions) * window * int(
        kernel_shape.dimensions[dn.kernel_input_feature_dimension])


class Costs:
    """FLOPs and bytes of one program's instructions."""

    def __init__(self, program, group_size: int | None = None):
        self.p = program
        self.group_size = group_size  # GPUs taking part when a collective names no groups
        self.users: dict[int, list] = {}
        for ins in program.instructions.values():
            for o in ins.operand_ids:
                self.users.setdefault(o, []).append(ins)

    def operand(self, ins, i):
        return self.p.instructions[ins.operand_ids[i]]

    # ---- FLOPs of one instruction (recursing into fused computations)
    def _precision_tf32(self, ins) -> bool:
        pc = ins.precision_config
        return not any(pc.operand_precision) and not pc.algorithm

    def add_flops(self, ins, c: Cost) -> None:
        op = ins.opcode
        if op == "dot":
            lhs = self.operand(ins, 0).shape
            c.flops += dot_flops(ins.shape, lhs,
                                 ins.dot_dimension_numbers.lhs_contracting_dimensions)
            c.matrix_dtype = c.matrix_dtype or dtype_name(lhs)
            c.tf32_allowed = self._precision_tf32(ins)
        elif op == "convolution":
            c.flops += conv_flops(ins.shape, self.operand(ins, 1).shape,
                                  ins.convolution_dimension_numbers)
            c.matrix_dtype = c.matrix_dtype or dtype_name(self.operand(ins, 0).shape)
            c.tf32_allowed = self._precision_tf32(ins)
        elif op == "custom-call":
            self.custom_call_flops(ins, c)
        elif op in ("fusion", "call", "async-start"):
            for cid in ins.called_computation_ids:
                for inner in self.p.computations[cid].instructions:
                    self.add_flops(inner, c)
        elif op in ("reduce", "reduce-window"):
            per = max(1, sum(1 for cid in ins.called_computation_ids
                             for i in self.p.computations[cid].instructions
                             if i.opcode in FLOP_OPCODES))
            n_in = len(ins.operand_ids) // 2 or 1
            out = elements(ins.shape) // n_in if ins.shape.tuple_shapes else elements(ins.shape)
            if op == "reduce":
                c.flops += max(0, elements(self.operand(ins, 0).shape) - out) * per
            else:
                c.flops += out * _prod(d.size for d in ins.window.dimensions) * per
            self._mark_f64(ins, c)
        elif op in ("scatter", "select-and-scatter"):
            # each update element is combined into the operand by the combiner's arithmetic
            per = sum(1 for cid in ins.called_computation_ids
                      for i in self.p.computations[cid].instructions
                      if i.opcode in FLOP_OPCODES)
            updates = self.operand(ins, len(ins.operand_ids) - 1) if op == "scatter" else \
                self.operand(ins, 1)
            if dtype_name(updates.shape) in FLOAT_TYPES:
                c.flops += elements(updates.shape) * per
                self._mark_f64(ins, c)
        elif op in FLOP_OPCODES and dtype_name(ins.shape) in FLOAT_TYPES:
            c.flops += elements(ins.shape)
            self._mark_f64(ins, c)

    def _mark_f64(self, ins, c: Cost) -> None:
        if dtype_name(ins.shape) == "f64":
            c.vector_f64 = True

    def custom_call_flops(self, ins, c: Cost) -> None:
        target = ins.custom_call_target
        out = ins.shape.tuple_shapes[0] if ins.shape.tuple_shapes else ins.shape
        if GEMM_TARGET_RE.search(target):
            try:
                cfg = json.loads(ins.backend_config or b"{}")
                dn = cfg.get("gemm_backend_config", cfg)["dot_dimension_numbers"]
                contracting = [int(d) for d in dn["lhs_contracting_dimensions"]]
            except (ValueError, KeyError, TypeError):
                c.why = (f"custom call {target} has no dot_dimension_numbers in its backend "
                         "config")
                return
            lhs = self.operand(ins, 0).shape
            c.flops += dot_flops(out, lhs, contracting)
            c.matrix_dtype = c.matrix_dtype or dtype_name(lhs)
            c.tf32_allowed = True
            c.method = "backend config"
        elif CUDNN_CONV_RE.search(target):
            dn = ins.convolution_dimension_numbers
            a, b = self.operand(ins, 0).shape, self.operand(ins, 1).shape
            if "BackwardInput" in target:
                fwd_out, kernel = a, b
            elif "BackwardFilter" in target:
                fwd_out, kernel = b, out
            else:
                fwd_out, kernel = out, b
            if not dn.kernel_spatial_dimensions and not dn.input_spatial_dimensions and \
                    len(kernel.dimensions) > 2:
                c.why = f"custom call {target} carries no convolution dimension numbers"
                return
            c.flops += conv_flops(fwd_out, kernel, dn)
            c.matrix_dtype = c.matrix_dtype or dtype_name(a)
            c.tf32_allowed = True
            c.method = "backend config"
        else:
            c.why = f"custom call {target} has no cost model here"

    # ---- bytes
    def _source(self, ins):
        """The instruction under a chain of bitcasts (a bitcast moves no data)."""
        while ins.opcode == "bitcast" and ins.operand_ids:
            ins = self.operand(ins, 0)
        return ins

    def _uses(self, ins) -> list[tuple]:
        """(user, the id it reads ins through) for the users of ins, looking through bitcasts."""
        out = []
        for u in self.users.get(ins.id, []):
            if u.opcode == "bitcast":
                out += self._uses(u) if u.id != ins.id else []
            else:
                out.append((u, ins.id))
        return out

    def fusion_bytes(self, ins) -> int:
        """Operands read plus results written. Each parameter is charged the share of its
        elements the fusion needs, propagated from the roots (every output element needed):
        a slice, dynamic-slice or gather needs only what it selects, a dynamic-update-slice
        does not read the elements it overwrites, everything else needs all of its operands;
        the shares of a value's users add up to at most all of it (a byte is read once).
        A buffer updated in place (a root dynamic-update-slice on a parameter, through
        bitcasts) costs the update, read and written, and nothing for the rest of the buffer."""
        comp = self.p.computations[ins.called_computation_ids[0]]
        by_id = {i.id: i for i in comp.instructions}
        root = self._source(self.p.instructions.get(comp.root_id) or comp.instructions[-1])
        roots = ([self._source(self.p.instructions[o]) for o in root.operand_ids]
                 if root.opcode == "tuple" else [root])
        written = 0
        need: dict[int, float] = {}
        in_place_updates = set()
        for r in roots:
            base = self._source(self.operand(r, 0)) if r.opcode == "dynamic-update-slice" else None
            if base is not None and base.opcode == "parameter":
                in_place_updates.add(r.id)
                written += nbytes(self.operand(r, 1).shape)
            else:
                written += nbytes(r.shape)
            need[r.id] = 1.0
        for i in reversed(self._post_order(comp, by_id)):
            u = min(1.0, need.get(i.id, 0.0))
            if not u or i.opcode == "parameter":
                continue
            for k, o in enumerate(i.operand_ids):
                share = u
                if k == 0 and i.opcode in SLICE_OPCODES:
                    share = u * min(1.0, elements(i.shape) / max(1, elements(by_id[o].shape)))
                elif k == 0 and i.opcode == "dynamic-update-slice":
                    share = 0.0 if i.id in in_place_updates else u * max(0.0, 1 - elements(
                        self.operand(i, 1).shape) / max(1, elements(by_id[o].shape)))
                need[o] = need.get(o, 0.0) + share
        read = 0
        for prm in comp.instructions:
            if prm.opcode == "parameter":
                read += round(nbytes(prm.shape) * min(1.0, need.get(prm.id, 0.0)))
        return read + written

    @staticmethod
    def _post_order(comp, by_id) -> list:
        """The computation's instructions with every operand before its users."""
        order, state = [], {}
        for start in comp.instructions:
            stack = [(start, False)]
            while stack:
                ins, done = stack.pop()
                if done:
                    order.append(ins)
                    continue
                if state.get(ins.id):
                    continue
                state[ins.id] = 1
                stack.append((ins, True))
                stack += [(by_id[o], False) for o in ins.operand_ids
                          if o in by_id and not state.get(o)]
        return order

    def plain_bytes(self, ins) -> int:
        seen = set()
        total = nbytes(ins.shape)
        for o in ins.operand_ids:
            if o not in seen:
                seen.add(o)
                total += nbytes(self.p.instructions[o].shape)
        return total

    def group(self, ins, base: str) -> tuple[int | None, str]:
        """GPUs taking part in one group of a collective, and where the count comes from: the
        replica groups (listed or iota), else the gathered / scattered dimension's shapes, else
        the capture's GPU count (an assumption, said)."""
        groups = [len(g.replica_ids) for g in ins.replica_groups if g.replica_ids]
        if ins.HasField("collective_device_list"):
            cdl = ins.collective_device_list
            groups += [len(g.replica_ids) for g in cdl.replica_groups if g.replica_ids]
            if cdl.iota_replica_group_list.num_devices_per_group:
                groups.append(int(cdl.iota_replica_group_list.num_devices_per_group))
        if groups:
            return max(groups), "replica groups"
        if base in ("all-gather", "reduce-scatter") and ins.dimensions and ins.operand_ids:
            d = int(ins.dimensions[0])
            ins_shape = self.operand(ins, 0).shape
            outs = ins.shape.tuple_shapes or [ins.shape]
            out_shape = outs[-1] if base == "all-gather" and len(outs) > 1 else outs[0]
            try:
                small, big = ((ins_shape, out_shape) if base == "all-gather"
                              else (out_shape, ins_shape))
                a, b = int(small.dimensions[d]), int(big.dimensions[d])
            except IndexError:
                a = b = 0
            if a and b % a == 0 and b // a > 1:
                return b // a, f"dimension {d}'s shapes"
        if self.group_size:
            return self.group_size, "the capture's GPU count (assumed: no replica groups)"
        return None, ""

    def collective(self, ins) -> Cost:
        op, inner = ins.opcode, ins
        if op == "async-start":  # the groups and dimensions are on the wrapped collective
            inner = next((i for cid in ins.called_computation_ids
                          for i in self.p.computations[cid].instructions
                          if i.opcode in COLLECTIVE_OPCODES), ins)
            op = inner.opcode
        base = op.removesuffix("-start")
        size = sum(nbytes(self.p.instructions[o].shape) for o in ins.operand_ids)
        if base in ("collective-permute", "send", "recv", "collective-broadcast"):
            return Cost(0, size, "shapes (collective: operand bytes sent, per GPU)")
        n, basis = self.group(inner, base)
        if not n:
            return Cost(None, None, "not computable",
                        why=f"{op} names no replica groups and the GPU count is unknown")
        if base == "all-reduce":
            moved, rule = 2 * (n - 1) * size // n, "ring all-reduce 2(n-1)/n x operand bytes"
        elif base == "all-gather":
            moved, rule = (n - 1) * size, "ring all-gather (n-1) x operand bytes"
        elif base in ("reduce-scatter", "all-to-all", "ragged-all-to-all"):
            moved, rule = (n - 1) * size // n, f"ring {base} (n-1)/n x operand bytes"
        else:
            return Cost(None, None, "not computable", why=f"{op} has no byte model here")
        return Cost(0, moved, f"shapes (collective: {rule}, n={n} from {basis}, per GPU)")

    def checked_cost(self, ins) -> Cost:
        """cost(), or "not computable" where the instruction's HLO does not have what its
        opcode's rule reads (an operand, a dimension, a config: a corrupt or unusual program),
        or where the rule gives a negative size: said in the row, never a crash."""
        try:
            c = self.cost(ins)
        except (IndexError, KeyError, TypeError, ValueError, AttributeError, ZeroDivisionError,
                OverflowError, RecursionError) as exc:
            return Cost(None, None, "not computable",
                        why=f"its HLO lacks what the {ins.opcode or 'empty'} opcode's rule reads "
                            f"({type(exc).__name__})")
        if (c.flops is not None and c.flops < 0) or (c.bytes is not None and c.bytes < 0):
            return Cost(None, None, "not computable",
                        why="its shapes give a negative size (a negative dimension)")
        return c

    def cost(self, ins) -> Cost:
        """FLOPs and bytes of one run of a scheduled instruction, and how they were obtained."""
        op = ins.opcode
        if op in COLLECTIVE_OPCODES or (op == "async-start" and any(
                i.opcode in COLLECTIVE_OPCODES for cid in ins.called_computation_ids
                for i in self.p.computations[cid].instructions)):
            return self.collective(ins)
        if op in CONTROL_OPCODES or op in NO_LAUNCH_OPCODES:
            return Cost(None, None, "not computable",
                        why=f"{op} is control flow; its work is in the instructions it runs")
        c = Cost()
        if op in ("copy", "copy-start"):
            src = nbytes(self.operand(ins, 0).shape)
            c.bytes, c.method = 2 * src, "shapes (copy: read + write)"
            return c
        self.add_flops(ins, c)
        if c.why:
            return Cost(None, None, "not computable", why=c.why)
        if op == "fusion":
            c.bytes = self.fusion_bytes(ins)
            if c.method == "shapes":
                c.method = "fused computation"
        else:
            c.bytes = self.plain_bytes(ins) if op != "custom-call" else (
                sum(nbytes(self.p.instructions[o].shape) for o in ins.operand_ids)
                + nbytes(ins.shape.tuple_shapes[0] if ins.shape.tuple_shapes else ins.shape))
        return c

    # ---- how often an instruction runs per execution of the program
    def runs_per_execution(self, ins) -> int | None:
        """Product of the known trip counts of the while loops around the instruction; None when
        one is unknown."""
        callers: dict[int, object] = getattr(self, "_callers", None)
        if callers is None:
            callers = self._callers = {}
            for i in self.p.instructions.values():
                for cid in i.called_computation_ids:
                    callers.setdefault(cid, i)
        mult, comp, seen = 1, self.p.computation_of.get(ins.id), set()
        while comp is not None and comp != self.p.entry_id and comp not in seen:
            seen.add(comp)
            caller = callers.get(comp)
            if caller is None:
                return mult
            if caller.opcode == "while":
                trips = self.p.trip_count(caller)
                if trips is None:
                    return None
                mult *= trips
            comp = self.p.computation_of.get(caller.id)
        return mult


def ceiling_key(c: Cost, flops: int, gpu_ceilings: dict) -> str | None:
    """The peaks.csv row that bounds an instruction's arithmetic: its matrix operand's dtype
    (an f32 dot at DEFAULT precision may run as TF32: the higher ceiling), else the vector
    FP32 (FP64 for f64 arithmetic). None when it does no arithmetic."""
    if not flops:
        return None
    d = c.matrix_dtype
    if d is None:
        return "fp64_vector" if c.vector_f64 else "fp32_vector"
    if d == "f64":
        return "fp64_matrix"
    if d == "f32":
        if c.tf32_allowed:
            return "tf32_matrix"
        return "fp32_matrix" if "fp32_matrix" in gpu_ceilings else "fp32_vector"
    if d in ("bf16", "f16"):
        return "bf16_fp16_matrix"
    if d.startswith("f8"):
        return "fp8_matrix"
    if d == "f4e2m1fn":
        return "fp4_matrix" if "fp4_matrix" in gpu_ceilings else "fp6_fp4_matrix"
    return f"{d}_matrix"  # not in the table: said as no ceiling


# ---------------------------------------------------------------- the analysis

def _g(x) -> str:
    return "" if x is None else f"{x:.6g}"


def read_attribution(out: Path, capture) -> tuple[list[dict], dict]:
    folder = out / "attribution"
    ops, result = folder / "ops.csv", folder / "attribute_kernels.json"
    if not ops.is_file() or not result.is_file():
        raise UsageError(
            f"cannot build the roofline because {ops} is missing; run step 4 first: python3 -P "
            f"scripts/attribute_kernels.py {capture.files.xplane or capture.files.run_dir} "
            f"--out {out}")
    try:
        res = json.loads(result.read_text(encoding="utf-8"))
        with open(ops, newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read step 4's tables in {folder}: {exc}") from exc
    was = (res.get("capture") or {}).get("xplane")
    if was and capture.files.xplane and Path(was).resolve() != Path(
            capture.files.xplane).resolve():
        raise UsageError(f"cannot build the roofline because {folder} was written for {was}, "
                         f"not {capture.files.xplane}; rerun attribute_kernels.py on this capture")
    return rows, res


def program_executions(res: dict) -> dict:
    """program id (str) -> (executions summed over GPUs, GPUs) as step 4 counted them
    (attribute_kernels.json `programs`; an older result: the chosen program's `executions`)."""
    out = {}
    for p in res.get("programs") or []:
        if isinstance(p, dict) and isinstance(p.get("executions"), int):
            out[str(p.get("program_id"))] = (p["executions"], len(p.get("gpus") or []))
    if not out and res.get("program"):
        devices = (res.get("figures", {}).get("devices") or {}).get("value")
        out[str(res["program"].get("id"))] = (
            sum(int(e.get("executions") or 0) for e in (res.get("executions") or {}).values()),
            devices or 0)
    return out


def analyse(rows, res, programs, gpu: dict, peaks: dict) -> tuple[list[list], dict]:
    """roofline.csv rows and the figures of the result. `programs`: program id (str) ->
    Program (a single Program: every row is that program's)."""
    if not isinstance(programs, dict):
        programs = {str(programs.id): programs}
    counts = program_executions(res)
    all_costs = {pid: Costs(p, group_size=counts.get(pid, (0, 0))[1]
                            if counts.get(pid, (0, 0))[1] > 1 else None)
                 for pid, p in programs.items()}
    gpu_ceilings = peaks.get(gpu["model"] or "", {})
    hbm = gpu_ceilings.get("hbm_bandwidth")
    out_rows, used, no_cost_ps, no_ceiling_ps, total_ps = [], {}, 0, 0, 0
    no_cost = []
    for r in rows:
        ps = round(float(r["gpu_us"] or 0) * 1e6)
        total_ps += ps
        pid = str(r.get("program_id"))
        program = programs.get(pid)
        costs = all_costs.get(pid)
        executions = counts.get(pid, (0, 0))[0]
        ins = program.by_name.get(r["instruction"]) if program is not None else None
        if program is None:
            c = Cost(None, None, "not computable",
                     why=f"the capture holds no readable HLO of program {pid}")
        elif ins is None:
            c = Cost(None, None, "not computable",
                     why=f"instruction {r['instruction']} is not in program {program.id}")
        else:
            c = costs.checked_cost(ins)
        per_exec = costs.runs_per_execution(ins) if ins is not None else None
        runs = per_exec * executions if per_exec is not None and executions else None
        if c.why is None and runs is None:
            c = Cost(None, None, "not computable", why=(
                "a while loop around it has no known trip count" if per_exec is None
                else "step 4 counted no executions of the program"))
        why_ceiling = None
        key = comp_c = None
        total_flops = total_bytes = intensity = ach_f = ach_b = attainable = share = None
        binding = ""
        if c.why is not None:
            method = f"not computable: {c.why}"
            no_cost_ps += ps
            no_cost.append((ps, r["instruction"], c.why))
            why_ceiling = "FLOPs or bytes not computable"
        else:
            method = c.method
            total_flops, total_bytes = c.flops * runs, c.bytes * runs
            secs = ps / 1e12
            intensity = c.flops / c.bytes if c.bytes else None
            ach_f = total_flops / secs if secs else None
            ach_b = total_bytes / secs if secs else None
            key = ceiling_key(c, c.flops, gpu_ceilings)
            comp_c = gpu_ceilings.get(key) if key else None
            if not gpu["model"]:
                why_ceiling = "GPU not identified"
            elif r["category"] == "collective":
                why_ceiling = "collectives are bound by the interconnect, which has no ceiling here"
            elif not secs:
                why_ceiling = "no measured time"
            elif hbm is None or hbm.value is None:
                why_ceiling = f"HBM bandwidth of {gpu['model']} is {hbm.tag if hbm else 'absent'}"
            elif key and (comp_c is None or comp_c.value is None):
                why_ceiling = (f"{key} of {gpu['model']} is "
                               f"{comp_c.tag if comp_c else 'not in peaks.csv'}")
            elif not key:
                binding, attainable = "memory", None
                share = 100.0 * ach_b / hbm.value
                used[hbm.key] = hbm
            else:
                mem_roof = intensity * hbm.value if intensity is not None else math.inf
                attainable = min(comp_c.value, mem_roof)
                binding = "compute" if comp_c.value <= mem_roof else "memory"
                share = 100.0 * ach_f / attainable
                used[hbm.key], used[comp_c.key] = hbm, comp_c
        if why_ceiling:
            no_ceiling_ps += ps
        show_c = comp_c if comp_c is not None and comp_c.value is not None else None
        out_rows.append([
            r["program_id"], r["instruction"], r["opcode"], r["category"], r["kernels"],
            runs if runs is not None else "", r["gpu_us"],
            c.flops if c.flops is not None else "", c.bytes if c.bytes is not None else "",
            total_flops if total_flops is not None else "",
            total_bytes if total_bytes is not None else "", method,
            c.matrix_dtype or (dtype_name(ins.shape) if ins is not None else ""), key or "",
            _g(intensity), _g(ach_f), _g(ach_b),
            _g(show_c.value) if show_c else "", comp_c.tag if comp_c else "",
            comp_c.source if comp_c else "",
            _g(hbm.value) if hbm and hbm.value else "", hbm.tag if hbm else "",
            hbm.source if hbm else "", binding, _g(attainable),
            f"{share:.2f}" if share is not None else "", why_ceiling or "",
        ])
    figures = {
        "gpu_time_us": {"value": round(total_ps / 1e6, 3), "unit": "us", "label": "measured"},
        "not_computable_us": {"value": round(no_cost_ps / 1e6, 3), "unit": "us",
                              "label": "measured"},
        "not_computable_pct_of_attributed": {"value": float(pct(no_cost_ps, total_ps) or 0),
                                             "unit": "pct", "label": "inferred"},
        "no_ceiling_us": {"value": round(no_ceiling_ps / 1e6, 3), "unit": "us",
                          "label": "measured"},
        "executions": {"value": counts.get(str((res.get("program") or {}).get("id")),
                                           (0, 0))[0], "unit": "count", "label": "measured"},
        "executions_all_programs": {"value": sum(n for n, _ in counts.values()),
                                    "unit": "count", "label": "measured"},
    }
    trust = []
    if no_cost_ps:
        top = ", ".join(f"{n} ({w})" for _, n, w in sorted(no_cost, reverse=True)[:3])
        trust.append(f"FLOPs or bytes are not computable for {len(no_cost)} instructions with "
                     f"{no_cost_ps / 1e6:.3f} us of GPU time ({pct(no_cost_ps, total_ps)}% of "
                     f"the program's attributed time); largest: {top}.")
    return out_rows, {"figures": figures, "trust": trust, "used": used}


def xprof_costs(out: Path) -> tuple[dict, str]:
    """(program id, instruction) -> (FLOPs, bytes) per run as XProf's hlo_stats computes them,
    from the xplane copy step 4 left in out/attribution/xplane/ (the capture is never touched);
    and a note saying why there are none."""
    copies = sorted((out / "attribution" / "xplane").glob("*.xplane.pb"))
    if not copies:
        return {}, "XProf's figures not shown: step 4 left no xplane copy in attribution/xplane/"
    saved = copies[0].parent / "hlo_stats.json"  # step 4's own XProf conversion, when it ran
    try:
        if saved.is_file() and saved.stat().st_size:
            data = saved.read_text()
        else:
            from xprof.convert import raw_to_tool_data
            with rules.quiet_fd2():
                raw_to_tool_data.xspace_to_tool_names([str(copies[0])])
                data = raw_to_tool_data.xspace_to_tool_data([str(copies[0])], "hlo_stats",
                                                             {"use_saved_result": False})
            data = data[0] if isinstance(data, tuple) else data
        table = json.loads(data)
        cols = [c["id"] for c in table["cols"]]
        at = {k: cols.index(k) for k in ("program_id", "hlo_op_name", "avg_self_time",
                                         "model_flop_rate", "measured_memory_bw")}
    except Exception as exc:  # noqa: BLE001 - XProf's own failure, said in the note
        return {}, f"XProf's figures not shown: its hlo_stats could not be read ({exc})"
    out_costs = {}
    for r in table["rows"]:
        v = [c.get("v") if isinstance(c, dict) else None for c in r["c"]]
        try:
            t = float(v[at["avg_self_time"]] or 0)
            out_costs[(str(v[at["program_id"]]), str(v[at["hlo_op_name"]]))] = (
                float(v[at["model_flop_rate"]] or 0) * t * XPROF_FLOP_SCALE,
                float(v[at["measured_memory_bw"]] or 0) * t * XPROF_BYTE_SCALE)
        except (TypeError, ValueError, IndexError):
            continue
    return out_costs, ""


def xprof_peaks(out: Path) -> dict:
    """XProf's own ceilings for this capture (its roofline_model tool: one compute peak for
    every dtype, and an HBM bandwidth from the memory clock), converted to FLOP/s and B/s; or
    a note saying why there are none. Shown beside ours, never used."""
    copies = sorted((out / "attribution" / "xplane").glob("*.xplane.pb"))
    if not copies:
        return {"note": "XProf's ceilings not shown: step 4 left no xplane copy"}
    try:
        from xprof.convert import raw_to_tool_data
        with rules.quiet_fd2():
            raw_to_tool_data.xspace_to_tool_names([str(copies[0])])
            data = raw_to_tool_data.xspace_to_tool_data([str(copies[0])], "roofline_model",
                                                         {"use_saved_result": False})
        data = data[0] if isinstance(data, tuple) else data
        tables = json.loads(data)
        props = next(t["p"] for t in tables if isinstance(t, dict) and t.get("p"))
        return {"device_type": props.get("device_type"),
                "compute_flop_per_s": float(props["peak_flop_rate"]) * 1e9,
                "memory_bytes_per_s": float(props["peak_hbm_bw"]) * 2 ** 30,
                "note": "XProf's roofline_model peaks (GFLOP/s x 1e9, GiB/s x 2^30): one "
                        "compute peak for every dtype; the bandwidth from the memory clock"}
    except Exception as exc:  # noqa: BLE001 - XProf's own failure, said in the note
        return {"note": f"XProf's ceilings not shown: its roofline_model could not be read "
                      f"({str(exc)[:200]})"}


def add_xprof(table: list[list], costs: dict, program=None) -> int:
    """XProf's FLOPs and bytes per run beside ours, and the differences in percent; returns
    the rows that got them. XProf lists some fusions under an instruction inside them (a
    dynamic-slice fusion that runs as a memcpy appears as its `copy`): where the fusion itself
    is not listed and exactly one instruction of its fused computation is, that one is used."""
    col = {c: i for i, c in enumerate(COLUMNS)}
    n = 0
    for row in table:
        pid = str(row[col["program_id"]])
        x = costs.get((pid, row[col["instruction"]]))
        prog = program.get(pid) if isinstance(program, dict) else program
        ins = prog.by_name.get(row[col["instruction"]]) if prog is not None else None
        if x is None and ins is not None and ins.opcode == "fusion":
            inner = [costs[(pid, i.name)] for cid in ins.called_computation_ids
                     for i in prog.computations[cid].instructions if (pid, i.name) in costs]
            x = inner[0] if len(inner) == 1 else None
        if x is None:
            row.extend(["", "", "", ""])
            continue
        n += 1
        diffs = []
        for ours, theirs in ((row[col["run_flops"]], x[0]), (row[col["run_bytes"]], x[1])):
            diffs.append(f"{100.0 * (theirs - ours) / ours:.1f}"
                         if isinstance(ours, int) and ours else "")
        row.extend([_g(x[0]), _g(x[1]), *diffs])
    return n


def refuse_without_hlo(capture, out: Path, space, gpu: dict) -> tuple[dict, list]:
    """A capture with no HLO program (a TensorFlow capture, or one taken without the metadata
    plane): no instruction has FLOPs or bytes. The refusal is written, with the GPU time it
    leaves uncovered (every event on the GPUs' stream lines, read from the device planes)."""
    busy_ps = sum(e.duration_ps for p in space.gpu_planes() for ln in p.lines
                  if ln.name.startswith("Stream #") for e in ln.events())
    why = (f"{Path(space.path).name} holds no HLO program, so no instruction's FLOPs or bytes "
           f"can be computed: the roofline covers none of the {busy_ps / 1e6:,.3f} us of GPU "
           f"stream time in the capture")
    refusals = [why] + ([gpu["why"]] if gpu["why"] else [])
    result = {
        "step": "roofline", "status": "refused",
        "capture": {"xplane": str(capture.files.xplane), "host": capture.files.host,
                    "run": Path(capture.files.run_dir).name if capture.files.run_dir else None},
        "program": None,
        "gpu": {"model": gpu["model"], "basis": gpu["basis"], "devices": gpu.get("devices"),
                "evidence": gpu["evidence"], "why": gpu["why"], "label": "inferred"},
        "ceilings": [],
        "figures": {"gpu_time_us": {"value": round(busy_ps / 1e6, 3), "label": "measured"},
                    "not_computable_us": {"value": round(busy_ps / 1e6, 3),
                                          "label": "measured"}},
        "trust_list": refusals, "refusals": refusals, "tables": {TABLE: 0},
    }
    return result, _write_all(out, [], result, None)


def run(capture, out: Path, use_xprof: bool = True) -> tuple[dict, list[tuple[str, int]]]:
    out = Path(out)
    try:
        import xplane_reader
        import xprotos
        space = xplane_reader.space_of(capture)
    except ImportError as exc:
        raise MissingPackage(f"{exc}; {INSTALL}") from exc
    except xplane_reader.XPlaneError as exc:
        raise UsageError(str(exc)) from exc
    except xprotos.MissingDependency as exc:
        raise MissingPackage(f"{exc}") from exc
    if not space.hlo_protos():
        return refuse_without_hlo(capture, out, space, identify_space(space))
    rows, res = read_attribution(out, capture)
    from hlo_program import ProgramError, load
    pid = int((res.get("program") or {}).get("id"))
    protos = space.hlo_protos()
    if pid not in protos:
        raise UsageError(f"cannot build the roofline because the capture holds no HLO for "
                         f"program {pid} (the one step 4 chose)")
    try:
        program = load(protos[pid][1], pid)
    except ProgramError as exc:
        raise UsageError(f"cannot build the roofline because {exc}") from exc
    programs = {str(pid): program}
    unreadable = []
    for other in sorted({r.get("program_id") for r in rows} - {str(pid)}, key=str):
        try:
            programs[other] = load(protos[int(other)][1], int(other))
        except (KeyError, ValueError, ProgramError):
            unreadable.append(other)  # its rows say "not computable" with the reason
    gpu = identify_space(space)
    peaks = load_peaks()
    table, a = analyse(rows, res, programs, gpu, peaks)
    xcosts, xnote = xprof_costs(out) if use_xprof else ({}, "XProf's figures skipped "
                                                          "(--no-xprof)")
    with_xprof = add_xprof(table, xcosts, programs)
    if xcosts and with_xprof < len(table):
        xnote = (f"{len(table) - with_xprof} of {len(table)} instructions have no XProf figures: "
                 f"XProf's hlo_stats does not list them (graph kernels, or instructions it "
                 f"records under another name)")
    refusals = [gpu["why"]] if gpu["why"] else []
    used = a["used"]
    result = {
        "step": "roofline", "status": "done",
        "capture": {"xplane": str(capture.files.xplane), "host": capture.files.host,
                    "run": Path(capture.files.run_dir).name if capture.files.run_dir else None},
        "program": {"id": pid, "name": program.name},
        "gpu": {"model": gpu["model"], "basis": gpu["basis"], "devices": gpu.get("devices"),
                "evidence": gpu["evidence"], "why": gpu["why"], "label": "inferred"},
        "ceilings": [{"ceiling": c.key, "value": c.value, "unit": c.unit, "tag": c.tag,
                      "source": c.source, "other_values": c.other_values,
                      "label": "read" if c.tag in ("vendor", "vendor-mirror", "secondary")
                      else "inferred"} for c in sorted(used.values(), key=lambda c: c.key)],
        "xprof_ceiling": {
            "capture_memory_bandwidth_bytes_per_s": gpu.get("xprof_memory_bandwidth_bytes_per_s"),
            "capture_note": "the capture's memory_bandwidth stat (2 x memory clock x bus width "
                            "/ 8); never used (about half the datasheet on AMD)",
            **(xprof_peaks(out) if use_xprof else {"note": "XProf's ceilings skipped "
                                                             "(--no-xprof)"}),
            "label": "read"},
        "figures": a["figures"],
        "trust_list": a["trust"] + refusals,
        "refusals": refusals,
        "notes": ["FLOPs: dots and convolutions 2 x output elements x contracted size; other "
                  "arithmetic one FLOP per output element (transcendentals as one).",
                  "Bytes: operands read plus results written; slices count as sliced, in-place "
                  "updates as the update; collectives as ring-algorithm bytes per GPU."],
        "tables": {TABLE: len(table)},
        "xprof": {"rows_with_xprof": with_xprof, "note": xnote or None},
    }
    svg = render_svg(table, result)
    written = _write_all(out, table, result, svg)
    return result, written


def _write_all(out: Path, table, result, svg) -> list[tuple[str, int]]:
    """Each file to a temporary name in `out`, then renamed: whole or not at all."""
    with rules.replace_files(out, ".roofline.") as tmp:
        n = write_csv(tmp / TABLE, COLUMNS, table)
        (tmp / RESULT_FILE).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n",
                                       encoding="utf-8")
        if svg is not None:
            (tmp / PLOT).write_text(svg, encoding="utf-8")
    if svg is None:  # nothing to draw: an older plot must not stay behind as if it were this one
        (out / PLOT).unlink(missing_ok=True)
        return [(TABLE, n), (RESULT_FILE, 1)]
    return [(TABLE, n), (PLOT, 1), (RESULT_FILE, 1)]


# ---------------------------------------------------------------- the plot

W, H, LEFT, RIGHT, TOP, BOTTOM = 900, 620, 90, 30, 40, 150


def render_svg(table, result) -> str:
    col = {c: i for i, c in enumerate(COLUMNS)}
    pts = []
    for r in table:
        f, i, t = r[col["achieved_flop_per_s"]], r[col["intensity_flop_per_byte"]], r[
            col["gpu_us"]]
        if f and i and float(f) > 0 and float(i) > 0:
            pts.append((float(i), float(f), float(t), r[col["category"]], r[col["instruction"]]))
    ceilings = {c["ceiling"]: c for c in result["ceilings"]}
    hbm = ceilings.get("hbm_bandwidth")
    computes = [c for k, c in sorted(ceilings.items()) if k != "hbm_bandwidth"]
    xs = [p[0] for p in pts] + ([c["value"] / hbm["value"] for c in computes] if hbm else [])
    ys = [p[1] for p in pts] + [c["value"] for c in computes]
    xlo = 10 ** math.floor(math.log10(min(xs))) if xs else 1e-2
    xhi = 10 ** math.ceil(math.log10(max(xs) * 10)) if xs else 1e4
    ylo = 10 ** math.floor(math.log10(min(ys) / 10)) if ys else 1e9
    yhi = 10 ** math.ceil(math.log10(max(ys) * 2)) if ys else 1e16

    def X(v):
        return LEFT + (math.log10(v) - math.log10(xlo)) / (
            math.log10(xhi) - math.log10(xlo)) * (W - LEFT - RIGHT)

    def Y(v):
        return H - BOTTOM - (math.log10(v) - math.log10(ylo)) / (
            math.log10(yhi) - math.log10(ylo)) * (H - TOP - BOTTOM)

    e = html.escape
    title = f"Roofline: {result['program']['name']} ({result['program']['id']})"
    s = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
         f'font-family="sans-serif" font-size="11">',
         f'<rect width="{W}" height="{H}" fill="white"/>',
         f'<text x="{W / 2}" y="20" text-anchor="middle" font-size="14">'
         f'{e(title)}'
         '</text>']
    for k in range(round(math.log10(xlo)), round(math.log10(xhi)) + 1):
        x = X(10 ** k)
        s.append(f'<line x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{H - BOTTOM}" stroke="#eee"/>'
                 f'<text x="{x:.1f}" y="{H - BOTTOM + 15}" text-anchor="middle">1e{k}</text>')
    for k in range(round(math.log10(ylo)), round(math.log10(yhi)) + 1):
        y = Y(10 ** k)
        s.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{W - RIGHT}" y2="{y:.1f}" stroke="#eee"/>'
                 f'<text x="{LEFT - 5}" y="{y + 4:.1f}" text-anchor="end">1e{k}</text>')
    s.append(f'<text x="{(LEFT + W - RIGHT) / 2}" y="{H - BOTTOM + 35}" text-anchor="middle">'
             'arithmetic intensity (FLOP/byte, log)</text>'
             f'<text transform="translate(20,{(TOP + H - BOTTOM) / 2}) rotate(-90)" '
             'text-anchor="middle">achieved FLOP/s (log)</text>')
    if hbm:
        for n, c in enumerate(computes):
            colour = DTYPE_COLOURS[n % len(DTYPE_COLOURS)]
            ridge = c["value"] / hbm["value"]
            x0 = max(xlo, ylo / hbm["value"])
            s.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="'
                     f'{X(x0):.1f},{Y(x0 * hbm["value"]):.1f} {X(ridge):.1f},{Y(c["value"]):.1f} '
                     f'{X(xhi):.1f},{Y(c["value"]):.1f}"/>'
                     f'<circle cx="{X(ridge):.1f}" cy="{Y(c["value"]):.1f}" r="3" '
                     f'fill="{colour}"/>')
    # the legend sits top left: above the memory slope no instruction can be drawn
    legend = ([(f"HBM {hbm['value'] / 1e12:.2f} TB/s [{hbm['tag']} {hbm['source']}] "
                f"(the slope)", "#333")] if hbm else []) + [
        (f"{c['ceiling']} {c['value'] / 1e12:.1f} TFLOP/s [{c['tag']} {c['source']}], ridge "
         f"{c['value'] / hbm['value']:.0f} FLOP/B", DTYPE_COLOURS[n % len(DTYPE_COLOURS)])
        for n, c in enumerate(computes) if hbm]
    placed: list[tuple[float, float, float, float]] = []  # label boxes already drawn
    for n, (text, colour) in enumerate(legend):
        y = TOP + 14 + 14 * n
        s.append(f'<text x="{LEFT + 8}" y="{y}" fill="{colour}">{e(text)}</text>')
        placed.append((LEFT, y - 11, LEFT + 8 + 6.2 * len(text), y + 3))
    tmax = max((p[2] for p in pts), default=1) or 1
    for i, f, t, cat, name in sorted(pts, key=lambda p: -p[2]):
        r = 2 + 14 * math.sqrt(t / tmax)
        s.append(f'<circle cx="{X(i):.1f}" cy="{Y(f):.1f}" r="{r:.1f}" fill-opacity="0.6" '
                 f'fill="{CATEGORY_COLOURS.get(cat, "#7f7f7f")}"><title>{e(name)}: '
                 f'{t:.3f} us, {i:.3g} FLOP/B, {f:.3g} FLOP/s</title></circle>')
    for i, f, _t, _cat, name in sorted(pts, key=lambda p: -p[2])[:LABELLED_POINTS]:
        w = 6.2 * len(name)  # about the width of an 11px sans-serif label
        right = X(i) + 6 + w <= W - 4
        for dy in (-6, 14, -20, 28):  # above the point, below it, further up, further down
            x0, y0 = (X(i) + 6, Y(f) + dy) if right else (X(i) - 6 - w, Y(f) + dy)
            box = (x0, y0 - 10, x0 + w, y0 + 2)
            if not any(box[0] < b[2] and b[0] < box[2] and box[1] < b[3] and b[1] < box[3]
                       for b in placed):
                placed.append(box)
                s.append(f'<text x="{x0:.1f}" y="{y0:.1f}">{e(name)}</text>')
                break
    g = result["gpu"]
    lines = [f"GPU: {g['model'] or 'not identified'} ({g['basis'] or g['why']})",
             "evidence: " + ", ".join(f"{k}={v}" for k, v in g["evidence"].items()
                                      if v is not None)]
    lines += [f"{c['ceiling']}: {c['value']:.4g} {c['unit']} [{c['tag']} {c['source']}]"
              for c in result["ceilings"]]
    lines.append("ceilings from references/peaks.csv (shared peaks.md); times measured; FLOPs "
                 "and bytes read from the HLO. Points: size = GPU time; colour = category "
                 "(blue compute, red collective, green memcpy).")
    xc = result.get("xprof_ceiling") or {}
    if xc.get("compute_flop_per_s"):
        lines.append(f"XProf's own ceilings for this capture (not used): "
                     f"{xc['compute_flop_per_s']:.4g} FLOP/s for every dtype, "
                     f"{xc['memory_bytes_per_s']:.4g} B/s.")
    if len(pts) < len(table):
        lines.append(f"{len(table) - len(pts)} instructions without FLOPs or time are not drawn.")
    import textwrap
    wrapped = [part for line in lines
               for part in textwrap.wrap(line, CAPTION_CHARS, subsequent_indent="  ") or [""]]
    for n, line in enumerate(wrapped):
        s.append(f'<text x="{LEFT}" y="{H - BOTTOM + 58 + 13 * n}">{e(line)}</text>')
    height = max(H, H - BOTTOM + 58 + 13 * len(wrapped) + 8)
    s[0] = s[0].replace(f'height="{H}"', f'height="{height}"', 1)
    s.append("</svg>\n")
    return "\n".join(s)


# ---------------------------------------------------------------- main

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[1:]))
    ap.add_argument("capture")
    ap.add_argument("--out", type=Path, default=Path("."))
    ap.add_argument("--no-xprof", action="store_true",
                    help="leave out XProf's own FLOPs and bytes per instruction")
    ap.add_argument("--run")
    ap.add_argument("--host")
    per_host.add_arguments(ap)
    args = ap.parse_args(argv)
    fanned = per_host.maybe_fan_out("roofline", __file__, argv, args.capture, args.run,
                                   args.host, args.out, args.jobs)
    if fanned is not None:
        return fanned
    try:
        capture = capture_inputs.open_capture(args.capture, run=args.run, host=args.host)
        result, written = run(capture, args.out, use_xprof=not args.no_xprof)
    except (capture_inputs.CaptureError, UsageError) as exc:
        print(f"roofline: {rules.printable(exc)}", file=sys.stderr)
        return 1
    except MissingPackage as exc:
        print(f"roofline: a package is missing ({exc})", file=sys.stderr)
        return 3
    except OSError as exc:  # the scratch folder: permissions, a full disk
        print(f"roofline: cannot write into {rules.printable(args.out)}: {exc.strerror or exc}",
              file=sys.stderr)
        return 1
    for f, n in written:
        print(f"wrote {args.out / f}" + (f" ({n} rows)" if f.endswith(".csv") else ""))
    g = result["gpu"]
    print(f"GPU: {g['model'] or 'not identified: ' + g['why']}")
    if result["status"] == "refused":
        print(f"roofline refused: {result['refusals'][0]}")
        print("Next: put this refusal on the trust list (SKILL.md step 7).")
        return 0
    for line in result["trust_list"]:
        print(f"trust list: {line}")
    print("Next: read roofline.csv top rows by gpu_us; quote ceilings with their tag (SKILL.md "
          "step 5).")
    return 0


if __name__ == "__main__":
    raise SystemExit(rules.run_main("roofline", main))
