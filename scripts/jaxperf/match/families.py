"""A kernel's family from its name (the kind of code it is: a library GEMM, an XLA fusion, a
collective, ...), the families that can be a cause of their own in step 6 (split-K reductions,
layout transposes, copies, memsets, collectives by kind) and XLA's own split-K reductions found
from the program: families.csv and kernel_names.csv."""

from __future__ import annotations

import re

from jaxperf.match import kernel_match as km
from tracekit import gpu as gpu_rules
from tracekit.trace_rules import pct, us

# a kernel's family: its kind's where it has one, else the first its name says
FAMILY_OF_KIND = {"collective": "NCCL/RCCL collective", "copy": "memcpy", "memset": "memset",
                  "gemm_aux": "split-K reduction"}
TRITON_RE = re.compile(r"^(triton|gemm_fusion|fusion_.*triton)")
# attention first: cuDNN's fused attention launches kernels named for its steps (an H200 capture:
# ..._sdpa_sm90_flash_bprop..., cudnn::fusion::compute_dot_do_o..., convert_dq_to_16bits)
ATTENTION_RE = re.compile(r"fmha|flash|attn|attention|sdpa|ck_tile|dot_do_o|_dq_", re.IGNORECASE)
CONV_RE = re.compile(r"Im2Col|Im3d2Col|conv(?!ert)", re.IGNORECASE)
DNN_LIBRARY_RE = re.compile(r"cudnn|miopen", re.IGNORECASE)


def kernel_family(name: str, xla_names: set, declared: frozenset = frozenset()) -> str:
    """What kind of code a kernel name says it is (no matching involved): `declared` are the
    kernel names the programs' custom calls give in their backend configs (Pallas's `name`)."""
    kind = gpu_rules.kernel_kind(name)
    norm = km.normalize_kernel_name(name)
    said = ((kind in FAMILY_OF_KIND, FAMILY_OF_KIND.get(kind)),
            (TRITON_RE.match(norm), "Triton kernel (XLA)"),
            (name in declared or norm in declared, "Pallas / Triton kernel (custom call)"),
            (kind == "gemm", "library GEMM (cuBLAS / hipBLASLt)"),
            (norm in xla_names, "XLA fusion"),
            (ATTENTION_RE.search(norm), "attention library"),
            ("fusion" in norm and "::" not in norm, "XLA fusion"),  # not cudnn::fusion::
            (CONV_RE.search(norm), "convolution library"),
            (DNN_LIBRARY_RE.search(norm), "DNN library (cuDNN / MIOpen)"))
    return next((family for hit, family in said if hit), "other kernel")


# Kernel families that can be a cause of their own in step 6 when their time spans many
# instructions: library reductions (split-K), layout transposes, copies, memsets, collectives
# by kind. A transpose is an XLA fusion whose kernel name says so; a collective's kind is the
# operation its name carries (NCCL's and RCCL's kernel names spell it).
TRANSPOSE_RE = re.compile(r"transpose", re.IGNORECASE)
COLLECTIVE_KIND_RE = re.compile(r"(all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|"
                                r"send|recv|broadcast)", re.IGNORECASE)
FAMILY_TOP_INSTRUCTIONS = 5  # instructions named per family in families.csv


def cause_family(name: str, family: str) -> str | None:
    """The family a kernel counts under in families.csv (None: an ordinary compute kernel)."""
    if family in ("split-K reduction", "memcpy", "memset"):
        return family
    if family == "NCCL/RCCL collective":
        m = COLLECTIVE_KIND_RE.search(name)
        kind = m.group(1).lower().replace("_", "") if m else "other"
        return f"collective: {kind}"
    if TRANSPOSE_RE.search(km.normalize_kernel_name(name)):
        return "layout transpose"
    return None


def split_k_reductions(programs) -> dict[tuple, str]:
    """(program id, instruction) of XLA's own split-K reductions, from the program rather than
    kernel names, each with the GEMM fusion whose partial sums it adds (split_k_gemm)."""
    return {(pid, ins.name): gemm for pid, prog in programs.items()
            for ins in prog.instructions.values() if (gemm := split_k_gemm(prog, ins))}


def split_k_gemm(prog, ins) -> str | None:
    """The GEMM fusion whose partial sums `ins` adds, where `ins` is a fusion that reduces, over
    its leading dimension, the result of a fusion whose root is a dot with a batch dimension
    leading its output; else None. XLA's split-K rewrite (xla/service/gpu/
    split_k_gemm_rewriter.cc, MakeDotSplitKBatch) splits K into such a batch dimension of
    partial sums and sums them in a reduction after the GEMM fusion: the two are one GEMM's
    work."""
    comp = prog.computations.get(ins.called_computation_ids[0]) \
        if ins.opcode == "fusion" and ins.called_computation_ids else None
    for r in comp.instructions if comp is not None else ():
        if r.opcode != "reduce" or list(r.dimensions) != [0] or not r.operand_ids:
            continue
        src = prog.under(prog.instructions[r.operand_ids[0]])
        if src.opcode != "parameter" or src.parameter_number >= len(ins.operand_ids):
            continue
        gemm = prog.under(prog.instructions[ins.operand_ids[src.parameter_number]])
        root = prog.called_root(gemm, ("bitcast", "convert", "copy")) \
            if gemm.opcode == "fusion" else None
        if root is not None and root.opcode == "dot" and \
                root.dot_dimension_numbers.lhs_batch_dimensions and \
                list(src.shape.dimensions[:1]) == list(root.shape.dimensions[:1]):
            return gemm.name
    return None


def family_rows(totals: dict, name_rows, split_k=frozenset()) -> list[tuple]:
    """families.csv: per family of cause_family, its kernels, distinct names, GPU time and share,
    the instructions (program id, instruction) its attributed kernels span, the programs, and the
    largest instructions by its time (`<program_id>:<instruction>=us`). `totals`: step 4's
    event_totals ((program id, instruction, name, ...) -> [events, ps]); `split_k`: XLA's own
    split-K reductions (split_k_reductions), counted as split-K whatever their kernels' names."""
    family_of = {r[0]: cause_family(r[0], r[1]) for r in name_rows}
    total = sum(ps for _, ps in totals.values())
    per: dict[str, dict] = {}
    for (pid, ins, name, *_), (n, ps) in totals.items():
        fam = "split-K reduction" if (pid, ins) in split_k else family_of.get(name)
        if fam is None:
            continue
        f = per.setdefault(fam, {"n": 0, "t": 0, "names": set(), "ins": {}, "progs": set()})
        f["n"] += n
        f["t"] += ps
        f["names"].add(name)
        if ins:
            f["ins"][(pid, ins)] = f["ins"].get((pid, ins), 0) + ps
            f["progs"].add(pid)
    rows = []
    for fam, f in sorted(per.items(), key=lambda kv: (-kv[1]["t"], kv[0])):
        top = sorted(f["ins"].items(), key=lambda kv: (-kv[1], str(kv[0])))
        rows.append((fam, f["n"], len(f["names"]), us(f["t"]), pct(f["t"], total), len(f["ins"]),
                     len(f["progs"]), " | ".join(f"{p}:{i}={us(t)}" for (p, i), t in
                                                 top[:FAMILY_TOP_INSTRUCTIONS])))
    return rows


def plans_names(programs) -> set:
    """Sanitized names of every instruction of every program: what XLA's own kernels are called."""
    return {km.sanitize(n) for prog in programs.values() for n in prog.by_name}


def kernel_name_rows(totals: dict, xla_names: set,
                     declared: frozenset = frozenset()) -> list[tuple]:
    """kernel_names.csv's rows from step 4's event_totals ((program id, instruction, name,
    device, ...) -> [events, ps])."""
    total = sum(ps for _, ps in totals.values())
    by: dict[str, list] = {}
    for (_, _, name, dev, *_), (n, ps) in totals.items():
        e = by.setdefault(name, [0, 0, set()])
        e[0] += n
        e[1] += ps
        e[2].add(dev)
    return [(name, kernel_family(name, xla_names, declared), n, us(t), pct(t, total), g,
             f"{n / g:.1f}", us(t / g))
            for name, (n, t, devs) in sorted(by.items(), key=lambda kv: (-kv[1][1], kv[0]))
            for g in [len(devs)]]
