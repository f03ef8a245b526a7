"""Step 5: a roofline per instruction, with per-dtype ceilings whose provenance is kept: the
analysis. Its door, with the command line and what it writes, is scripts/roofline.py."""

from __future__ import annotations

import bisect
import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

from jaxperf.cost.ceilings import Ceiling, ceiling_key  # the ceiling of an instruction
from jaxperf.cost.hlo_costs import Cost, Costs, dtype_name  # FLOPs and bytes per instruction
from jaxperf.device import adapters  # the device's record, ceilings and own costs
from jaxperf.read import xprof_figures  # XProf's own figures, shown beside ours
from jaxperf.report import svg  # SVG elements and text widths, shared with swimlanes.py
from tracekit import scratch, step_cli
from tracekit import trace_rules as rules
from tracekit.trace_rules import pct  # shared rules

RESULT_FILE = "roofline.json"

TABLE = "roofline.csv"

PLOT = "roofline.svg"

INSTALL = "pip install -r requirements.txt (protobuf)"


COLUMNS = scratch.columns(TABLE)

# a ceiling read from a record (the vendor's, a mirror of it, a secondary source, the capture's
# own device plane); any other (derived) is inferred
READ_TAGS = ("vendor", "vendor-mirror", "secondary", "capture")

PALLAS_TARGET = "tpu_custom_call"  # a Pallas kernel's custom call on a TPU


# ---------------------------------------------------------------- the analysis

def _g(x) -> str:
    """A figure in a table cell: six significant digits, empty for None."""
    return "" if x is None else f"{x:.6g}"


def read_attribution(out: Path, capture) -> tuple[list[dict], dict]:
    """Step 4's ops.csv rows and attribute_kernels.json from out/attribution/; a StepError where
    they are missing, unreadable, or were written for another capture."""
    folder = out / "attribution"
    ops, result = folder / "ops.csv", folder / "attribute_kernels.json"
    if not ops.is_file() or not result.is_file():
        raise step_cli.StepError(
            f"cannot build the roofline because {ops} is missing; run step 4 first: python3 -P "
            f"scripts/attribute_kernels.py {capture.files.xplane or capture.files.run_dir} "
            f"--out {out}")
    tables = scratch.Scratch(out)
    res, rows = tables.json("attribution/attribute_kernels.json"), tables.rows(
        "attribution/ops.csv")
    if res is None or rows is None:
        raise step_cli.StepError(f"cannot read step 4's tables in {folder}: run step 4 again")
    recorded = res.get("capture")
    was = recorded.get("xplane") if isinstance(recorded, dict) else recorded
    if not scratch.written_for(was, capture.files.xplane, base=out):
        raise step_cli.StepError(f"cannot build the roofline because {folder} was written for "
                                 f"{scratch.recorded_file(was)}, not {capture.files.xplane}; "
                                 "rerun attribute_kernels.py on this capture")
    return rows, res


def program_executions(res: dict) -> dict:
    """program id (str) -> (executions summed over GPUs, GPUs) as step 4 counted them
    (attribute_kernels.json `programs`; an older result: the chosen program's `executions`)."""
    out = {str(p.get("program_id")): (p["executions"], len(p.get("devices") or []))
           for p in res.get("programs") or []
           if isinstance(p, dict) and isinstance(p.get("executions"), int)}
    if not out and res.get("program"):
        devices = (res.get("figures", {}).get("devices") or {}).get("value")
        out[str(res["program"].get("id"))] = (
            sum(int(e.get("executions") or 0) for e in (res.get("executions") or {}).values()),
            devices or 0)
    return out


def analyse(rows, res, programs, gpu: dict, peaks: dict,
            user=None, tpu_costs: dict | None = None) -> tuple[list[list], dict]:
    """roofline.csv rows and the figures of the result. `programs`: program id (str) ->
    Program (a single Program: every row is that program's); `user`: the --costs table;
    `tpu_costs`: a TPU capture's own costs (jaxperf.tpu.op_runs.costs), used instead of the
    HLO's."""
    if not isinstance(programs, dict):
        programs = {str(programs.id): programs}
    counts = program_executions(res)
    costs = {pid: Costs(p, group_size=g if (g := counts.get(pid, (0, 0))[1]) > 1 else None,
                        user=user) for pid, p in programs.items()}
    ceilings = peaks.get(gpu["model"] or "", {})
    placed, used, no_cost = [], {}, []
    total_ps = no_cost_ps = no_ceiling_ps = 0
    for r in rows:
        ps = round(float(r["device_us"] or 0) * 1e6)
        total_ps += ps
        c, ins, runs = row_cost(r, programs, costs, counts)
        if tpu_costs is not None:  # the HLO's dtype and kind of work, whatever its runs
            hlo = costs[str(r.get("program_id"))].checked_cost(ins) if ins is not None else c
            c, runs = capture_cost(r, hlo, ins, tpu_costs)
        if c.why is not None:
            spot = Placement(why=f"FLOPs or bytes not computable: {c.why}")
            no_cost_ps += ps
            no_cost.append((ps, r["instruction"], c.why))
        else:
            spot = place(c, runs, ps, r["category"], gpu["model"], ceilings,
                         vector_memory=tpu_costs is not None)
            used.update((x.key, x) for x in spot.used)
        if spot.why:
            no_ceiling_ps += ps
        placed.append((r, c, ins, runs, spot, ps))
    targets = same_work_targets(placed)
    out_rows = [table_row(r, c, ins, runs, spot, ceilings.get("hbm_bandwidth"), targets[n])
                for n, (r, c, ins, runs, spot, _) in enumerate(placed)]
    figures = {
        "device_time_us": scratch.figure(rules.us_value(total_ps), "us", "measured"),
        "not_computable_us": scratch.figure(rules.us_value(no_cost_ps), "us", "measured"),
        "not_computable_pct_of_attributed": scratch.figure(
            float(pct(no_cost_ps, total_ps) or 0), "pct", "inferred"),
        "no_ceiling_us": scratch.figure(rules.us_value(no_ceiling_ps), "us", "measured"),
        "executions": scratch.figure(counts.get(str((res.get("program") or {}).get("id")),
                                                (0, 0))[0], "count", "measured"),
        "executions_all_programs": scratch.figure(sum(n for n, _ in counts.values()), "count",
                                                  "measured"),
    }
    withheld = [f"{r['instruction']}: {spot.why}" for r, _, _, _, spot, _ in placed
                if spot.why and spot.why.startswith(WITHHELD)]
    return out_rows, {"figures": figures, "trust": not_computable_trust(no_cost, total_ps)
                      + without_point_trust(placed, total_ps) + withheld_trust(withheld),
                      "used": used}


# Every instruction holding at least this share of the attributed time gets a roofline point or
# a sentence on the trust list saying what is missing
POINT_MIN_PCT = 1.0

WITHHELD = "withheld:"


def same_work_targets(placed: list) -> list[tuple]:
    """Per placed row, its measured target: the best share of its ceiling that other work of
    the same kind (the `work` kind, ceiling dtype and binding) of a similar size
    (trace_rules.SAME_SIZE_FACTOR) reaches in this capture: (pct, instruction), or (None, "")
    where none does. Never itself nor a twin (the same FLOPs and bytes a run: the same
    computation again, e.g. in another layer, whose rate says nothing of another way to run
    it)."""
    groups: dict = {}
    for n, (_, c, _, _, spot, _) in enumerate(placed):
        if spot.share is None:
            continue
        size = c.flops if spot.binding == "compute" else c.bytes
        groups.setdefault((c.kind, spot.key, spot.binding), []).append((size or 0, n))
    out: list[tuple] = [(None, "")] * len(placed)

    def run(m: int) -> tuple:
        return placed[m][1].flops, placed[m][1].bytes

    def named(m: int, n: int) -> str:  # with its program where that is another's
        r, mine = placed[m][0], placed[n][0]
        if r.get("program_id") == mine.get("program_id"):
            return r["instruction"]
        return f"{r.get('module', '')}({r.get('program_id', '')}) {r['instruction']}"

    for members in groups.values():
        members.sort()
        sizes = [m[0] for m in members]
        for size, n in members:
            lo = bisect.bisect_left(sizes, size / rules.SAME_SIZE_FACTOR)
            hi = bisect.bisect_right(sizes, size * rules.SAME_SIZE_FACTOR)
            best = max(((placed[m][4].share, m) for _, m in members[lo:hi]
                        if run(m) != run(n)), default=None)
            out[n] = (best[0], named(best[1], n)) if best else (None, "")
    return out


def row_cost(r: dict, programs: dict, costs: dict, counts: dict) -> tuple[Cost, object, int | None]:
    """One ops.csv row: the FLOPs and bytes of one run of its instruction (not computable, with
    why, where the capture lacks its program or instruction, or its runs are unknown), the
    instruction (None where missing) and its runs (the program's executions x the trip counts
    of the loops around it)."""
    pid = str(r.get("program_id"))
    program = programs.get(pid)
    ins = program.by_name.get(r["instruction"]) if program is not None else None
    if program is None:
        c = Cost(None, None, "not computable",
                 why=f"the capture holds no readable HLO of program {pid}")
    elif ins is None:
        c = Cost(None, None, "not computable",
                 why=f"instruction {r['instruction']} is not in program {program.id}")
    else:
        c = costs[pid].checked_cost(ins)
    per_exec = costs[pid].runs_per_execution(ins) if ins is not None else None
    executions = counts.get(pid, (0, 0))[0]
    runs = per_exec * executions if per_exec is not None and executions else None
    if c.why is None and runs is None:
        c = Cost(None, None, "not computable", why=(
            "a while loop around it has no known trip count" if per_exec is None
            else "step 4 counted no executions of the program"))
    return c, ins, runs


# the opcodes that start an asynchronous op (their done is one of trace_rules.WAIT_OPCODES)
ASYNC_STARTS = frozenset({"copy-start", "async-start", "send", "recv", "all-reduce-start",
                          "all-gather-start", "collective-permute-start"})


def capture_cost(r: dict, c: Cost, ins, tpu_costs: dict) -> tuple[Cost, int]:
    """A TPU op's FLOPs and bytes of one run as the capture states them (XLA's cost model; a
    Pallas call's own cost estimate; where it states none, the user's --costs table for a
    custom call), with the HLO's dtype and kind of work where it has them (`c`: the HLO's
    cost, the user's table's for a custom call it matches), and its runs: the op runs step 4
    counted (each run is one)."""
    runs = int(r["kernels"] or 0)
    got = tpu_costs.get((int(r["program_id"]), r["instruction"])) \
        if str(r.get("program_id", "")).isdigit() else None
    if c.why is None and c.method.startswith("costs table") and (
            got is None or not (got[0] or got[2])):  # the capture has none: the user's --costs
        return dataclasses.replace(c, backend="TPU"), runs
    if got is None:
        return Cost(None, None, "not computable",
                    why="the capture gives no cost for this instruction"), runs
    flops, model_flops, nbytes, category, hbm = got
    if ins is not None and (ins.opcode in rules.WAIT_OPCODES or ins.opcode in ASYNC_STARTS):
        return Cost(None, None, "not computable", why=(
            f"one half of an asynchronous {ins.opcode.rsplit('-', 1)[0]}: its bytes move "
            "between its start and its done, beside other ops; its own time is the start's "
            "issue or the done's wait, no measure of a rate")), runs
    custom = category == "custom-call"
    pallas = custom and ins is not None and ins.custom_call_target == PALLAS_TARGET
    if not flops and not nbytes:
        return Cost(None, None, "not computable", why=(
            "a Pallas call without a cost estimate: the capture gives it no FLOPs or bytes "
            "(pallas_call's cost_estimate sets them; a --costs row matching its kernel's name "
            "gives them here)" if pallas else
            f"the capture gives this {'custom call' if custom else 'op'} no FLOPs and no bytes "
            "(a wait, a copy's start, a relabelling, or bookkeeping)")), runs
    method = "capture: the call's cost estimate" if custom else "capture: XLA's cost model"
    if model_flops is not None and model_flops != flops:
        method += f" (model_flops {model_flops:,})"
    hlo = c.why is None
    dtype = c.matrix_dtype if hlo else None
    if custom and flops and dtype is None and ins is not None:
        dtype = dtype_name(ins.shape)  # a Pallas kernel's arithmetic: its result's dtype
    passes = None
    if dtype == "f32" and hlo and not c.tf32_allowed:  # HIGH or HIGHEST: bf16 passes on the MXU
        passes = round(flops / model_flops) if model_flops and flops else 0
        if passes < 2:  # the FLOPs count no passes: the MXU's peak does not bound them
            dtype, passes = None, None
    if hbm is not None:  # the roof is HBM's: bytes kept on chip (VMEM, CMEM) are not its load
        method += f"; HBM bytes {hbm:,} of {nbytes or 0:,} accessed"
        if 100 * hbm < (nbytes or 0) and dtype is None:  # under 1%: HBM's roof says nothing
            return Cost(None, None, "not computable", why=(
                f"it works in on-chip memory (HBM bytes {hbm:,} of {nbytes:,} accessed, under "
                "1%) and the plane gives no ceiling for vector work")), runs
        nbytes = hbm
    return Cost(flops or 0, nbytes or 0, method, matrix_dtype=dtype, passes=passes,
                tf32_allowed=c.tf32_allowed if hlo else custom,
                kind=c.kind if hlo else (category or "other"), backend="TPU"), runs


@dataclass
class Placement:
    """Where one instruction sits on the roofline; empty (no ceiling, `why` says so) where its
    FLOPs or bytes are not computable."""
    total_flops: int | None = None       # over all its runs
    total_bytes: int | None = None
    intensity: float | None = None       # FLOP per byte
    flop_per_s: float | None = None      # achieved in its measured time
    bytes_per_s: float | None = None
    key: str | None = None               # the peaks.csv row bounding its arithmetic
    compute: Ceiling | None = None  # that row's ceiling (value None: unconfirmed)
    binding: str = ""                    # "compute" or "memory"
    attainable: float | None = None      # FLOP/s: min(compute ceiling, intensity x bandwidth)
    share: float | None = None           # percent of the binding ceiling reached
    why: str | None = None               # why it has no ceiling
    used: tuple = ()                     # the ceilings it was held against


def place(c: Cost, runs: int, ps: int, category: str, model: str | None,
          ceilings: dict, vector_memory: bool = False) -> Placement:
    """One instruction with computable FLOPs and bytes on the device's roofline (`ceilings`:
    its peaks.csv rows, or a TPU's read from its plane): its totals over `runs`, intensity and
    what it achieved in `ps`; then the binding ceiling and the share of it reached, or why it
    has none. `vector_memory`: vector work has no compute ceiling, memory alone bounds it (a
    TPU: its plane gives no VPU peak)."""
    hbm = ceilings.get("hbm_bandwidth")
    total_flops, total_bytes = c.flops * runs, c.bytes * runs
    secs = ps / 1e12
    key = ceiling_key(c, c.flops, ceilings)
    if vector_memory and key and key.endswith("_vector") and key not in ceilings:
        key = None  # vector work: memory alone bounds it; matrix work without a ceiling has none
    spot = Placement(total_flops, total_bytes, c.flops / c.bytes if c.bytes else None,
                     total_flops / secs if secs else None, total_bytes / secs if secs else None,
                     key, ceilings.get(key) if key else None)
    comp_c = spot.compute
    spot.why = no_ceiling_why(model, category, secs, hbm, key, comp_c)
    if spot.why:
        return spot
    if not key:
        spot.binding, spot.used = "memory", (hbm,)
        spot.share = 100.0 * spot.bytes_per_s / hbm.value
        return past_limit(spot, hbm.value)
    mem_roof = spot.intensity * hbm.value if spot.intensity is not None else math.inf
    spot.attainable = min(comp_c.value, mem_roof)
    spot.binding = "compute" if comp_c.value <= mem_roof else "memory"
    spot.share = 100.0 * spot.flop_per_s / spot.attainable
    spot.used = (hbm, comp_c)
    return past_limit(spot, hbm.value)


def past_limit(spot: Placement, hbm: float) -> Placement:
    """The placement with its share withheld (`why` says so) where it passes a physical limit:
    above 100% of its ceiling, or moving its bytes faster than the GPU's memory. Either is a
    counting error (runs, FLOPs or bytes) or data served from a cache, never a rate to publish;
    the rates stay in the row for finding which."""
    over = []
    if spot.share is not None and spot.share > 100.0:
        over.append(f"{spot.share:.1f}% of its {spot.binding} ceiling")
    if spot.bytes_per_s is not None and spot.bytes_per_s > hbm:
        over.append(f"{spot.bytes_per_s / hbm:.2f}x the memory bandwidth")
    if over:
        spot.why = (f"{WITHHELD} its measured time gives {' and '.join(over)}: a run count, "
                    "FLOP or byte count too high, or data served from a cache; not published")
        spot.share = spot.attainable = None
    return spot


def no_ceiling_why(model, category: str, secs: float, hbm, key, comp_c) -> str | None:
    """Why an instruction gets no ceiling (the GPU, a collective, no time, a ceiling peaks.csv
    does not confirm), or None when it has one."""
    if not model:
        return "GPU not identified"
    if category == "collective":
        return "collectives are bound by the interconnect, which has no ceiling here"
    if not secs:
        return "no measured time"
    if hbm is None or hbm.value is None:
        return f"HBM bandwidth of {model} is {hbm.tag if hbm else 'absent'}"
    if key and (comp_c is None or comp_c.value is None):
        return f"{key} of {model} is {comp_c.tag if comp_c else 'not in peaks.csv'}"
    return None


def table_row(r: dict, c: Cost, ins, runs: int | None, spot: Placement, hbm, target: tuple) -> list:
    """One roofline.csv row (COLUMNS up to best_same_work; add_xprof adds XProf's); `target`:
    same_work_targets' (pct, instruction)."""
    comp_c = spot.compute
    show_c = comp_c if comp_c is not None and comp_c.value is not None else None
    method = f"not computable: {c.why}" if c.why is not None else c.method
    return [
        r["program_id"], r["instruction"], r["opcode"], r["category"], r["kernels"],
        runs if runs is not None else "", r["device_us"],
        c.flops if c.flops is not None else "", c.bytes if c.bytes is not None else "",
        spot.total_flops if spot.total_flops is not None else "",
        spot.total_bytes if spot.total_bytes is not None else "", method,
        c.matrix_dtype or (dtype_name(ins.shape) if ins is not None else ""), spot.key or "",
        c.passes or "", _g(spot.intensity), _g(spot.flop_per_s), _g(spot.bytes_per_s),
        _g(show_c.value) if show_c else "", comp_c.tag if comp_c else "",
        comp_c.source if comp_c else "",
        _g(hbm.value) if hbm and hbm.value else "", hbm.tag if hbm else "",
        hbm.source if hbm else "", spot.binding, _g(spot.attainable),
        f"{spot.share:.2f}" if spot.share is not None else "", spot.why or "",
        c.kind if c.why is None else "", c.backend if c.why is None else "",
        f"{target[0]:.2f}" if target[0] is not None else "", target[1],
    ]


def not_computable_trust(no_cost: list, total_ps: int) -> list[str]:
    """The trust-list sentence for the instructions whose FLOPs or bytes are not computable
    (`no_cost`: (ps, instruction, why)); none when there are none."""
    if not (no_cost_ps := sum(ps for ps, _, _ in no_cost)):
        return []
    top = ", ".join(f"{n} ({w})" for _, n, w in sorted(no_cost, reverse=True)[:3])
    return [f"FLOPs or bytes are not computable for {len(no_cost)} instructions with "
            f"{no_cost_ps / 1e6:.3f} us of GPU time ({pct(no_cost_ps, total_ps)}% of "
            f"the program's attributed time); largest: {top}."]


def without_point_trust(placed: list, total_ps: int) -> list[str]:
    """The trust-list sentence naming every instruction of at least POINT_MIN_PCT of the
    attributed time without a roofline point, each with what is missing; none when every one
    has its point."""
    missing = [(ps, r["instruction"], spot.why) for r, _, _, _, spot, ps in placed
               if spot.share is None and total_ps and 100.0 * ps / total_ps >= POINT_MIN_PCT]
    if not missing:
        return []
    missing.sort(key=lambda m: (-m[0], m[1]))
    return [f"{len(missing)} instructions of {POINT_MIN_PCT:g}% or more of the attributed time "
            "have no roofline point: " + "; ".join(
                f"{n} ({pct(ps, total_ps)}%: {why})" for ps, n, why in missing) + "."]


def withheld_trust(withheld: list) -> list[str]:
    """The trust-list sentence for the shares withheld past a physical limit."""
    if not withheld:
        return []
    return [f"{len(withheld)} roofline shares are withheld past a physical limit: "
            + "; ".join(withheld[:5]) + (" ..." if len(withheld) > 5 else "") + "."]


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
        row.extend([_g(x[0]), _g(x[1]), *(
            f"{100.0 * (theirs - ours) / ours:.1f}" if isinstance(ours, int) and ours else ""
            for ours, theirs in ((row[col["run_flops"]], x[0]), (row[col["run_bytes"]], x[1])))])
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
        "step": "roofline", "status": "refused", "capture": capture_json(capture),
        "program": None, "gpu": gpu_json(gpu), "ceilings": [],
        "figures": {"device_time_us": scratch.figure(rules.us_value(busy_ps), "us", "measured"),
                    "not_computable_us": scratch.figure(rules.us_value(busy_ps), "us", "measured")},
        "trust_list": refusals, "refusals": refusals, "tables": {TABLE: 0},
    }
    return result, _write_all(out, [], result, None)


def read_costs(path: Path | None):
    """The user's --costs table (custom_costs.UserCosts), None without one; a StepError where
    it cannot be used."""
    if path is None:
        return None
    from jaxperf.cost import custom_costs
    try:
        return custom_costs.UserCosts(path)
    except custom_costs.CostsTableError as exc:
        raise step_cli.StepError(str(exc)) from exc


def run(capture, out: Path, use_xprof: bool = True,
        costs: Path | None = None) -> tuple[dict, list[tuple[str, int]]]:
    """Step 5 on a capture_inputs.Capture, after step 4 wrote into `out`: roofline.csv,
    roofline.json and roofline.svg (the refusal alone where the capture holds no HLO). Returns
    the result and the (file, rows) written. Raises StepError (MissingPackage among them)."""
    out = Path(out)
    user = read_costs(costs)
    space = read_space(capture, lazy=checked_by_step4(out, capture))
    # the device's record, its ceilings and, where it records them, its own costs (a TPU's)
    gpu, peaks, tpu_costs = adapters.of_space(space).environment(space)
    if not space.hlo_protos():
        return refuse_without_hlo(capture, out, space, gpu)
    rows, res = read_attribution(out, capture)
    pid, programs = load_programs(space, rows, res)
    step_cli.progress("costing each instruction and placing it under its ceiling", len(rows),
                      unit="instructions")
    table, a = analyse(rows, res, programs, gpu, peaks, user, tpu_costs)
    xprof = add_xprof_figures(table, programs, out, use_xprof)
    refusals = [gpu["why"]] if gpu["why"] else []
    result = {
        "step": "roofline", "status": "done", "capture": capture_json(capture),
        "program": {"id": pid, "name": programs[str(pid)].name}, "gpu": gpu_json(gpu),
        "ceilings": [{"ceiling": c.key, "value": c.value, "unit": c.unit, "tag": c.tag,
                      "source": c.source, "other_values": c.other_values,
                      "label": "read" if c.tag in READ_TAGS else "inferred"}
                     for c in sorted(a["used"].values(), key=lambda c: c.key)],
        "xprof_ceiling": {
            "capture_memory_bandwidth_bytes_per_s": gpu.get("xprof_memory_bandwidth_bytes_per_s"),
            "capture_note": "the capture's memory_bandwidth stat (2 x memory clock x bus width "
                            "/ 8); never used (about half the datasheet on AMD)",
            **(xprof_figures.peaks(out, space) if use_xprof else
               {"note": "XProf's ceilings skipped (--no-xprof)"}),
            "label": "read"},
        "figures": a["figures"],
        "trust_list": a["trust"] + refusals,
        "refusals": refusals,
        "notes": ["FLOPs: dots and convolutions 2 x output elements x contracted size; other "
                  "arithmetic one FLOP per output element (transcendentals as one).",
                  "Bytes: operands read plus results written; slices count as sliced, in-place "
                  "updates as the update; collectives as ring-algorithm bytes per GPU."],
        "tables": {TABLE: len(table)},
        "xprof": xprof,
    }
    return result, _write_all(out, table, result, render_svg(table, result))


def checked_by_step4(out: Path, capture) -> bool:
    """Whether step 4's result in `out` records this very xplane (its path, size and time): step
    4 decoded and checked each of its events, and this step reads none (the programs and the
    planes' stats), so they are not decoded again (about 1 s at five times the seed's size)."""
    res = scratch.Scratch(out).json("attribution/attribute_kernels.json")
    recorded = res.get("capture") if isinstance(res, dict) else None
    was = recorded.get("xplane") if isinstance(recorded, dict) else None
    return isinstance(was, dict) and scratch.written_for(was, capture.files.xplane, base=out)


def read_space(capture, lazy: bool = False):
    """The capture's xplane (`lazy`: its events decoded when first read); a StepError where it
    cannot be read (XPlaneError), a MissingPackage where protobuf is missing."""
    try:
        from jaxperf.read import xplane_reader
        return xplane_reader.space_of(capture, lazy)
    except ImportError as exc:  # protobuf (xprotos.MissingDependency is one)
        raise step_cli.MissingPackage(f"a package is missing ({exc}); {INSTALL}") from exc


def load_programs(space, rows: list[dict], res: dict) -> tuple[int, dict]:
    """The id of the program step 4 chose, and program id (str) -> Program for it and every
    other program with rows in ops.csv that the capture holds readable (the others' rows say
    "not computable" with the reason). a StepError where the chosen one cannot be read."""
    from jaxperf.program.hlo_program import ProgramError, load
    pid = int((res.get("program") or {}).get("id"))
    protos = space.hlo_protos()
    if pid not in protos:
        raise step_cli.StepError(f"cannot build the roofline because the capture holds no HLO "
                                 f"for program {pid} (the one step 4 chose)")
    try:
        programs = {str(pid): load(protos[pid][1], pid)}
    except ProgramError as exc:
        raise step_cli.StepError(f"cannot build the roofline because {exc}") from exc
    for other in sorted({r.get("program_id") for r in rows} - {str(pid)}, key=str):
        try:
            programs[other] = load(protos[int(other)][1], int(other))
        except (KeyError, ValueError, ProgramError):
            continue
    return pid, programs


def add_xprof_figures(table: list[list], programs: dict, out: Path, use_xprof: bool) -> dict:
    """XProf's FLOPs and bytes added to the table's rows (add_xprof); the result's `xprof`:
    the rows that got them and a note on the others."""
    if use_xprof:
        step_cli.progress("XProf: its own FLOPs and bytes per instruction")
    xcosts, xnote = xprof_figures.costs(out) if use_xprof else ({}, "XProf's figures skipped "
                                                                   "(--no-xprof)")
    with_xprof = add_xprof(table, xcosts, programs)
    if xcosts and with_xprof < len(table):
        xnote = (f"{len(table) - with_xprof} of {len(table)} instructions have no XProf figures: "
                 f"XProf's hlo_stats does not list them (graph kernels, or instructions it "
                 f"records under another name)")
    return {"rows_with_xprof": with_xprof, "note": xnote or None}


def capture_json(capture) -> dict:
    """The result's `capture`: the xplane, the host and the run folder's name."""
    return {"xplane": str(capture.files.xplane), "host": capture.files.host,
            "run": Path(capture.files.run_dir).name if capture.files.run_dir else None}


def gpu_json(gpu: dict) -> dict:
    """The result's `gpu`: the model identified (or why none) and its evidence."""
    tpu = gpu.get("kind") == "TPU"  # a TPU names itself: read, not identified by a match
    return {"model": gpu["model"], "basis": gpu["basis"], "devices": gpu.get("devices"),
            "evidence": gpu["evidence"], "why": gpu["why"], "label": "read" if tpu else
            "inferred", **({"kind": "TPU"} if tpu else {})}


def _write_all(out: Path, table, result, svg) -> list[tuple[str, int]]:
    """Each file to a temporary name in `out`, then renamed: whole or not at all."""
    with rules.replace_files(out, ".roofline.") as tmp:
        n = scratch.write_table(tmp, TABLE, table)
        scratch.write_result(tmp, RESULT_FILE, result)
        if svg is not None:
            (tmp / PLOT).write_text(svg, encoding="utf-8")
    if svg is None:  # nothing to draw: an older plot must not stay behind as if it were this one
        (out / PLOT).unlink(missing_ok=True)
        return [(TABLE, n), (RESULT_FILE, None)]
    return [(TABLE, n), (PLOT, len(svg.encode())), (RESULT_FILE, None)]


# ---------------------------------------------------------------- the plot

W, H, LEFT, RIGHT, TOP, BOTTOM = 900, 620, 90, 30, 40, 150

APOS = "&#x27;"  # roofline.svg writes an apostrophe as html.escape does

CATEGORY_COLOURS = {"compute": "#1f77b4", "collective": "#d62728", "memcpy": "#2ca02c"}

DTYPE_COLOURS = ("#444444", "#9467bd", "#ff7f0e", "#8c564b", "#17becf", "#e377c2", "#bcbd22")

CAPTION_CHARS = 140  # caption lines are wrapped to stay inside the plot's width

LABELLED_POINTS = 8  # the instructions with the most GPU time get a text label on the plot


@dataclass(frozen=True)
class LogAxes:
    """The plot's log-log scales: intensity (FLOP/byte) across, FLOP/s up, from the lowest to
    the highest power of ten drawn."""
    xlo: float
    xhi: float
    ylo: float
    yhi: float

    def x(self, v: float) -> float:
        return LEFT + (math.log10(v) - math.log10(self.xlo)) / (
            math.log10(self.xhi) - math.log10(self.xlo)) * (W - LEFT - RIGHT)

    def y(self, v: float) -> float:
        return H - BOTTOM - (math.log10(v) - math.log10(self.ylo)) / (
            math.log10(self.yhi) - math.log10(self.ylo)) * (H - TOP - BOTTOM)


def render_svg(table, result) -> str:
    """roofline.svg: a rendering of the table's rows and the result's ceilings, drawn in layers:
    the log-log axes, a roof per compute ceiling, the legend, the instructions as points sized by
    GPU time with the largest labelled, the caption."""
    pts = plot_points(table)
    ceilings = {c["ceiling"]: c for c in result["ceilings"]}
    hbm = ceilings.get("hbm_bandwidth")
    computes = [c for k, c in sorted(ceilings.items()) if k != "hbm_bandwidth"]
    axes = log_axes(pts, hbm, computes)
    caption = svg.wrap(caption_lines(table, result, pts), CAPTION_CHARS, "  ")
    height = max(H, H - BOTTOM + 58 + 13 * len(caption) + 8)
    title = f"Roofline: {result['program']['name']} ({result['program']['id']})"
    s = [svg.start("svg", xmlns="http://www.w3.org/2000/svg", width=W, height=height,
                   font_family="sans-serif", font_size=svg.FONT_PX),
         svg.element("rect", width=W, height=H, fill="white"),
         svg.text(W / 2, 20, title, apos=APOS, text_anchor="middle", font_size=14)]
    s += draw_axes(axes)
    if hbm:
        s += draw_roofs(axes, hbm, computes)
    legend, placed = draw_legend(hbm, computes)
    s += legend + draw_points(axes, pts) + draw_labels(axes, pts, placed)
    s += [svg.text(LEFT, H - BOTTOM + 58 + 13 * n, line, apos=APOS)
          for n, line in enumerate(caption)]
    s.append("</svg>\n")
    return "\n".join(s)


def plot_points(table) -> list[tuple]:
    """(intensity, achieved FLOP/s, GPU us, category, instruction) of each row with both above
    zero: the rows a log-log plot can draw."""
    col = {c: i for i, c in enumerate(COLUMNS)}
    return [(float(i), float(f), float(r[col["device_us"]]), r[col["category"]],
             r[col["instruction"]]) for r in table
            for f, i in [(r[col["achieved_flop_per_s"]], r[col["intensity_flop_per_byte"]])]
            if f and i and float(f) > 0 and float(i) > 0]


def log_axes(pts: list[tuple], hbm: dict | None, computes: list[dict]) -> LogAxes:
    """Scales holding every point and every ridge (compute ceiling / bandwidth), with a decade
    of room to the right and below, and a factor 2 above the highest ceiling."""
    xs = [p[0] for p in pts] + ([c["value"] / hbm["value"] for c in computes] if hbm else [])
    ys = [p[1] for p in pts] + [c["value"] for c in computes]
    return LogAxes(xlo=10 ** math.floor(math.log10(min(xs))) if xs else 1e-2,
                   xhi=10 ** math.ceil(math.log10(max(xs) * 10)) if xs else 1e4,
                   ylo=10 ** math.floor(math.log10(min(ys) / 10)) if ys else 1e9,
                   yhi=10 ** math.ceil(math.log10(max(ys) * 2)) if ys else 1e16)


def draw_axes(axes: LogAxes) -> list[str]:
    """A grid line and a label per power of ten on each axis, and the axes' names."""
    out = []
    for k in range(round(math.log10(axes.xlo)), round(math.log10(axes.xhi)) + 1):
        x = axes.x(10 ** k)
        out.append(svg.element("line", x1=x, y1=TOP, x2=x, y2=H - BOTTOM, stroke="#eee")
                   + svg.text(x, H - BOTTOM + 15, f"1e{k}", text_anchor="middle"))
    for k in range(round(math.log10(axes.ylo)), round(math.log10(axes.yhi)) + 1):
        y = axes.y(10 ** k)
        out.append(svg.element("line", x1=LEFT, y1=y, x2=W - RIGHT, y2=y, stroke="#eee")
                   + svg.text(LEFT - 5, y + 4, f"1e{k}", text_anchor="end"))
    out.append(svg.text((LEFT + W - RIGHT) / 2, H - BOTTOM + 35,
                        "arithmetic intensity (FLOP/byte, log)", text_anchor="middle")
               + svg.element("text", "achieved FLOP/s (log)",
                             transform=f"translate(20,{(TOP + H - BOTTOM) / 2}) rotate(-90)",
                             text_anchor="middle"))
    return out


def draw_roofs(axes: LogAxes, hbm: dict, computes: list[dict]) -> list[str]:
    """Per compute ceiling, in its colour: the memory slope up to the ridge, then the flat
    roof, and a dot at the ridge."""
    out = []
    for n, c in enumerate(computes):
        colour = DTYPE_COLOURS[n % len(DTYPE_COLOURS)]
        ridge = c["value"] / hbm["value"]
        x0 = max(axes.xlo, axes.ylo / hbm["value"])
        points = (f'{axes.x(x0):.1f},{axes.y(x0 * hbm["value"]):.1f} '
                  f'{axes.x(ridge):.1f},{axes.y(c["value"]):.1f} '
                  f'{axes.x(axes.xhi):.1f},{axes.y(c["value"]):.1f}')
        out.append(svg.element("polyline", fill="none", stroke=colour, stroke_width=1.5,
                               points=points)
                   + svg.element("circle", cx=axes.x(ridge), cy=axes.y(c["value"]), r=3,
                                 fill=colour))
    return out


def draw_legend(hbm: dict | None, computes: list[dict]) -> tuple[list[str], list[tuple]]:
    """The ceilings with their tags and sources, top left (above the memory slope no
    instruction can be drawn); returns the texts and the boxes they take."""
    legend = ([(f"HBM {hbm['value'] / 1e12:.2f} TB/s [{hbm['tag']} {hbm['source']}] "
                f"(the slope)", "#333")] if hbm else []) + [
        (f"{c['ceiling']} {c['value'] / 1e12:.1f} TFLOP/s [{c['tag']} {c['source']}], ridge "
         f"{c['value'] / hbm['value']:.0f} FLOP/B", DTYPE_COLOURS[n % len(DTYPE_COLOURS)])
        for n, c in enumerate(computes) if hbm]
    out, placed = [], []
    for n, (text, colour) in enumerate(legend):
        y = TOP + 14 + 14 * n
        out.append(svg.text(LEFT + 8, y, text, apos=APOS, fill=colour))
        placed.append((LEFT, y - 11, LEFT + 8 + svg.text_px(text), y + 3))
    return out, placed


def draw_points(axes: LogAxes, pts: list[tuple]) -> list[str]:
    """A circle per instruction, largest GPU time first, its area by GPU time and its colour
    by category; the tooltip gives its figures."""
    tmax = max((p[2] for p in pts), default=1) or 1
    return [svg.element("circle", tip=f"{name}: {t:.3f} us, {i:.3g} FLOP/B, {f:.3g} FLOP/s",
                        apos=APOS, cx=axes.x(i), cy=axes.y(f), r=2 + 14 * math.sqrt(t / tmax),
                        fill_opacity="0.6", fill=CATEGORY_COLOURS.get(cat, "#7f7f7f"))
            for i, f, t, cat, name in sorted(pts, key=lambda p: -p[2])]


def draw_labels(axes: LogAxes, pts: list[tuple], placed: list[tuple]) -> list[str]:
    """The names of the LABELLED_POINTS instructions with the most GPU time, each beside its
    point where it overlaps no legend line or earlier label (`placed`, extended); unlabelled
    where every place is taken."""
    out = []
    for i, f, _t, _cat, name in sorted(pts, key=lambda p: -p[2])[:LABELLED_POINTS]:
        w = svg.text_px(name)
        right = axes.x(i) + 6 + w <= W - 4
        for dy in (-6, 14, -20, 28):  # above the point, below it, further up, further down
            x0, y0 = ((axes.x(i) + 6, axes.y(f) + dy) if right
                      else (axes.x(i) - 6 - w, axes.y(f) + dy))
            box = (x0, y0 - 10, x0 + w, y0 + 2)
            if not any(box[0] < b[2] and b[0] < box[2] and box[1] < b[3] and b[1] < box[3]
                       for b in placed):
                placed.append(box)
                out.append(svg.text(x0, y0, name, apos=APOS))
                break
    return out


def caption_lines(table, result, pts: list[tuple]) -> list[str]:
    """The caption under the plot: the GPU and its evidence, the ceilings with their sources,
    how to read the points, XProf's own ceilings, and the rows not drawn."""
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
    return lines
