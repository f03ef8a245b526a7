"""Step 5's cost model: the FLOPs and bytes of one run of an HLO instruction, how they were
obtained (shapes, the fused computation, the backend config, or why they are not computable), and
how often an instruction runs per execution of its program. Rules: references/roofline.md
("How FLOPs and bytes are counted")."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from jaxperf.cost import custom_costs
from jaxperf.read.xprotos import dtype_name, nbytes
from tracekit.trace_rules import COLLECTIVE_OPCODES, CONTROL_OPCODES, NO_LAUNCH_OPCODES

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
# What an instruction's work is (Cost.kind): what a measured target of the same kind compares
# (an attention backward is work of its own: its kernels recompute and reduce what the forward's
# do not, so a forward is never held to a backward's rate)
WORK_KINDS = ("attention", "attention backward", "gemm", "convolution", "sort", "scatter",
              "reduction", "elementwise", "data movement", "copy", "kernel", "custom")


def elements(shape) -> int:
    if shape.tuple_shapes:
        return sum(elements(s) for s in shape.tuple_shapes)
    return math.prod(shape.dimensions)


@dataclass
class Cost:
    """FLOPs and bytes of one run of an instruction and how they were obtained; both None, with
    `why`, when they are not computable."""
    flops: int | None = 0
    bytes: int | None = 0
    method: str = "shapes"
    matrix_dtype: str | None = None   # operand dtype of a dot / convolution / GEMM
    tf32_allowed: bool = False        # an f32 dot at DEFAULT precision may run as TF32
    passes: int | None = None         # a TPU's f32 matmul: the MXU's bf16 passes its FLOPs count
    vector_f64: bool = False
    why: str | None = None            # set when not computable
    kind: str = ""                    # the work: WORK_KINDS (what_work)
    backend: str = ""                 # who runs it (backend_of)
    opcodes: set = field(default_factory=set)  # the opcodes add_flops walked through


def dot_flops(out_shape, lhs_shape, lhs_contracting) -> int:
    """2 x output elements x contracted size (batch dimensions are in the output)."""
    k = math.prod(lhs_shape.dimensions[d] for d in lhs_contracting)
    return 2 * math.prod(out_shape.dimensions) * k


def conv_flops(out_shape, kernel_shape, dn) -> int:
    """2 x output elements x kernel window x kernel input features (the per-group features:
    feature_group_count is already in the kernel's shape)."""
    window = math.prod(kernel_shape.dimensions[d] for d in dn.kernel_spatial_dimensions)
    return 2 * math.prod(out_shape.dimensions) * window * int(
        kernel_shape.dimensions[dn.kernel_input_feature_dimension])


# what_work's rule: the first of these opcode sets that `found` meets names the work
_WORK_OF = (({"dot"}, "gemm"), ({"convolution"}, "convolution"), ({"sort"}, "sort"),
            ({"scatter", "select-and-scatter"}, "scatter"),
            ({"reduce", "reduce-window"}, "reduction"), (FLOP_OPCODES, "elementwise"))


def what_work(found: set) -> str:
    """The kind of work (WORK_KINDS) of an instruction whose costing walked through the opcodes
    `found` (its fused computations included), for comparing it with the same kind of work
    elsewhere in the capture: a dot or convolution anywhere in it (a GEMM fusion), else a sort
    (comparisons over several passes: no other kind's rate), else a scatter (its updates land
    by index: atomics, not a reduction's tree), else a reduction, else element-wise
    arithmetic, else data movement."""
    return next((kind for opcodes, kind in _WORK_OF if found & opcodes), "data movement")


def backend_of(ins) -> str:
    """Who generates the instruction's kernel: a library (`library <custom call target>`), a
    Triton fusion (`triton`: the fusion backend config's kind names Triton), another fusion
    emitter (`<kind>`), else XLA's own emitters (`xla`)."""
    if ins.opcode == "custom-call":
        return f"library {ins.custom_call_target}"
    if ins.opcode == "fusion":
        kind = str((custom_costs.attributes(ins.backend_config).get("fusion_backend_config")
                    or {}).get("kind") or "")
        return "triton" if "triton" in kind.lower() else kind.strip("_") or "xla"
    return "xla"


class Costs:
    """FLOPs and bytes of one program's instructions."""

    def __init__(self, program, group_size: int | None = None,
                 user: custom_costs.UserCosts | None = None):
        self.p = program
        self.group_size = group_size  # GPUs taking part when a collective names no groups
        self.user = user              # the user's --costs table, read before the registry
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
        c.opcodes.add(op)
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
            c.flops += (max(0, elements(self.operand(ins, 0).shape) - out) if op == "reduce"
                        else out * math.prod(d.size for d in ins.window.dimensions)) * per
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
        """A custom call's FLOPs (custom_costs' registry, the user's table first)."""
        cc = self.call_cost(ins)
        if cc.why is not None:
            c.why = cc.why
            return
        c.flops += cc.flops
        c.matrix_dtype = c.matrix_dtype or cc.matrix_dtype
        c.tf32_allowed = c.tf32_allowed or cc.kind in ("gemm", "convolution")
        c.method = cc.method
        c.kind = cc.kind

    def call_cost(self, ins) -> custom_costs.CallCost:
        return custom_costs.call_cost(
            ins, [self.p.instructions[o].shape for o in ins.operand_ids], self.user)

    # ---- bytes (a value is read under its chain of bitcasts, Program.under: they move no data)
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
        A buffer updated in place (a root dynamic-update-slice or scatter on a parameter,
        through bitcasts: XLA aliases that operand with the fusion's output, per
        GetInPlaceInputOutputPairs in xla/hlo/analysis/hlo_dataflow_analysis.cc) costs the
        update read and the elements it lands on written (a scatter also reads those elements
        to combine), and nothing for the rest of the buffer."""
        comp = self.p.computations[ins.called_computation_ids[0]]
        by_id = {i.id: i for i in comp.instructions}
        root = self.p.under(self.p.instructions.get(comp.root_id) or comp.instructions[-1])
        roots = ([self.p.under(self.p.instructions[o]) for o in root.operand_ids]
                 if root.opcode == "tuple" else [root])
        written = 0
        need: dict[int, float] = {}
        in_place = {}  # root id -> {operand index: the share of it touched}
        for r in roots:
            if pairs := self._in_place_pairs(r):
                in_place[r.id] = {}
                for k, upd in pairs:
                    whole = self.operand(r, k).shape
                    share = min(1.0, elements(upd.shape) / max(1, elements(whole)))
                    in_place[r.id][k] = share if r.opcode == "scatter" else 0.0
                    written += round(nbytes(whole) * share)
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
                elif k in in_place.get(i.id, ()):
                    share = in_place[i.id][k]
                elif k == 0 and i.opcode == "dynamic-update-slice":
                    share = u * max(0.0, 1 - elements(
                        self.operand(i, 1).shape) / max(1, elements(by_id[o].shape)))
                need[o] = need.get(o, 0.0) + share
        return written + sum(round(nbytes(prm.shape) * min(1.0, need.get(prm.id, 0.0)))
                             for prm in comp.instructions if prm.opcode == "parameter")

    def _in_place_pairs(self, r) -> list[tuple]:
        """(operand index, its update) for each operand of a fused root that XLA updates in
        place: a dynamic-update-slice's or a scatter's buffer when it is a parameter."""
        if r.opcode == "dynamic-update-slice":
            pairs = [(0, self.operand(r, 1))]
        elif r.opcode == "scatter":  # operands..., indices, updates... (variadic)
            n = (len(r.operand_ids) - 1) // 2
            pairs = [(k, self.operand(r, n + 1 + k)) for k in range(n)]
        else:
            return []
        return [(k, u) for k, u in pairs if self.p.under(self.operand(r, k)).opcode == "parameter"]

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
        """The result written and each distinct operand read once."""
        return nbytes(ins.shape) + sum(nbytes(self.p.instructions[o].shape)
                                       for o in dict.fromkeys(ins.operand_ids))

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
        if op == "async-start" and ins.called_computation_ids:
            # work wrapped to run on another stream: its cost is the wrapped instruction's (the
            # async computation's root, whose parameters are the start's operands); the start's
            # tuple holds those operands and the result again, which no kernel moves twice
            wrapped = self.p.computations[ins.called_computation_ids[0]]
            root = self.p.instructions.get(wrapped.root_id) or wrapped.instructions[-1]
            if root.opcode != "async-start":
                return self.cost(root)
        if op in CONTROL_OPCODES or op in NO_LAUNCH_OPCODES:
            return Cost(None, None, "not computable",
                        why=f"{op} is control flow; its work is in the instructions it runs")
        if op == "custom-call":
            cc = self.call_cost(ins)
            if cc.why is not None:
                return Cost(None, None, "not computable", why=cc.why)
            return Cost(cc.flops, cc.bytes, cc.method, cc.matrix_dtype,
                        cc.kind in ("gemm", "convolution"), kind=cc.kind, backend=backend_of(ins))
        if op in ("copy", "copy-start"):
            return Cost(0, 2 * nbytes(self.operand(ins, 0).shape), "shapes (copy: read + write)",
                        kind="copy", backend=backend_of(ins))
        c = Cost()
        self.add_flops(ins, c)
        if c.why:
            return Cost(None, None, "not computable", why=c.why)
        if op == "fusion":
            c.bytes = self.fusion_bytes(ins)
            if c.method == "shapes":
                c.method = "fused computation"
        else:
            c.bytes = self.plain_bytes(ins)
        c.kind = c.kind or what_work(c.opcodes)
        c.backend = backend_of(ins)
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
