"""Every GPU kernel -> HLO instruction -> op_name -> Python line, command buffers included: the
analysis. Its door, with the command line and what it writes, is scripts/attribute_kernels.py."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import operator
import os
import re
import shutil
import time
from collections import Counter
from pathlib import Path

from jaxperf.read import xprof_figures  # XProf's conversions, each in a child process
from tracekit import gpu as gpu_rules
from tracekit import scratch, step_cli
from tracekit import trace_rules as rules  # the classification rules
from tracekit.forked import Exchange, Forked, can_fork
from tracekit.step_cli import progress
from tracekit.trace_rules import CONTROL_OPCODES, pct, us

try:
    import numpy as np  # installed with jax

    from jaxperf.match import kernel_match as km
    from jaxperf.match.executions import (
        OUTSIDE,
        assign_programs,
        collect_kernels,
        count_executions,
        host_record,
        mark_graph_launches,
    )
    from jaxperf.match.families import (
        family_rows,
        kernel_name_rows,
        plans_names,
        split_k_reductions,
    )
except ImportError as _exc:  # said in one sentence by main(), exit 3
    km = None
    KM_ERROR = _exc


def require_matcher() -> None:
    """A MissingPackage (exit 3) where the matcher's packages did not import."""
    if km is None:
        raise step_cli.MissingPackage(f"a package is missing ({KM_ERROR}); {INSTALL}")


INSTALL = "pip install -r requirements.txt (jax, jaxlib, xprof, protobuf, numpy)"

# XProf's hlo_stats sums self times rounded to its own precision: differences below this are
# rounding, not coverage.
COVERAGE_TOLERANCE_PCT = 0.01


# ---------------------------------------------------------------- load

def xplane_copy(xplane: Path, folder: Path) -> Path:
    """Copy the xplane to folder/xplane/ for XProf's hlo_stats (its device planes' events and
    every plane's metadata: xprof_figures.device_copy); returns the copy."""
    dest = folder / "xplane"
    if dest.exists():
        shutil.rmtree(dest)  # XProf would reuse the saved results of another capture
    dest.mkdir(parents=True)
    copy = dest / xplane.name
    xprof_figures.device_copy(xplane, copy)  # XProf reads the device planes' events only
    return copy


def load(metadata_protos: dict):
    """The programs of the capture's /host:metadata (`metadata_protos`: Space.hlo_protos), each
    parsed and checked (hlo_program.load). XProf's own extraction of them was dropped: on
    every shared capture its protos parse equal to these, and it decoded the xplane again.
    Returns {id: (name, module)} and {id: Program} of the readable programs, and {id: (name,
    why)} of the others (a refusal each, not the loss of the run)."""
    from jaxperf.program.hlo_program import ProgramError
    from jaxperf.program.hlo_program import load as load_program
    protos, built, unreadable = {}, {}, {}
    for pid, (name, blob) in sorted(metadata_protos.items()):
        name = name.rsplit("(", 1)[0]
        try:
            prog = load_program(blob, pid)
        except ProgramError as exc:
            unreadable[pid] = (name, rules.printable(exc))
            continue
        protos[pid] = (name, prog.module)
        built[pid] = prog
    return protos, built, unreadable


# ---------------------------------------------------------------- analyses

def module_fingerprint(module) -> bytes:
    """The module's bytes with its id cleared: equal for one program saved under two ids."""
    copy = type(module)()
    copy.CopyFrom(module)
    copy.id = 0
    return copy.SerializeToString(deterministic=True)


def kernel_times(kernels) -> tuple[dict, int]:
    """program id -> the summed duration of the events the capture gave that program id; and
    the duration of every event (choose_program's figures, summed over the shares)."""
    all_time: dict = {}
    for k in kernels:
        if k.own_program:
            all_time[k.program_id] = all_time.get(k.program_id, 0) + k.dur
    return all_time, sum(k.dur for k in kernels)


def choose_program(all_time: dict, total: int, programs, requested,
                   unreadable=None) -> tuple[int, list[str]]:
    """The program whose HLO the later steps read, and the notes saying why (`all_time`,
    `total`: kernel_times')."""
    unreadable = unreadable or {}
    device_time = {pid: ps for pid, ps in all_time.items() if pid in programs}
    readable = ", ".join(f"{n}({i})" for i, (n, _) in sorted(programs.items()))
    if requested is not None and requested in unreadable:
        raise step_cli.StepError(f"--program {requested} cannot be attributed: "
                                 f"{unreadable[requested][1]}; readable programs: {readable}")
    top = max(sorted(all_time, key=str), key=lambda p: all_time[p]) if all_time else None
    if requested is None and top in unreadable:
        share = 100.0 * all_time[top] / (total or 1)
        raise step_cli.StepError(f"cannot attribute the program with the most kernel time "
                                 f"({share:.1f}%): {unreadable[top][1]}; pass --program ID to "
                                 f"attribute another ({readable})")
    notes = []
    alike: dict[tuple, list[int]] = {}  # only programs alike in these can be identical
    for pid, (_, module) in programs.items():
        alike.setdefault((module.name, tuple(len(c.instructions) for c in module.computations)),
                         []).append(pid)
    groups: dict[bytes, list[int]] = {}
    for pid in (pid for g in alike.values() if len(g) > 1 for pid in g):
        groups.setdefault(module_fingerprint(programs[pid][1]), []).append(pid)
    same = {pid: sorted(g) for g in groups.values() if len(g) > 1 for pid in g}
    if requested is not None:
        if requested not in programs:
            raise step_cli.StepError(f"--program {requested} is not a program of this capture; "
                                     f"programs: {readable}")
        chosen = requested
        notes.append(f"{programs[chosen][0]}({chosen}) chosen by --program")
    elif device_time:
        chosen = max(sorted(device_time), key=lambda p: device_time[p])
        notes.append(f"{programs[chosen][0]}({chosen}) chosen: the most kernel time, "
                     f"{100.0 * device_time[chosen] / (total or 1):.1f}% of all kernel time")
    else:
        chosen = max(programs, key=lambda p: sum(len(c.instructions)
                                                 for c in programs[p][1].computations))
        notes.append(f"no kernel carries a program id: program {programs[chosen][0]}({chosen}), "
                     "the largest, is used for every kernel")
    if chosen in same:
        others = [p for p in same[chosen] if p != chosen]
        ids = ", ".join(map(str, same[chosen]))
        notes.append(f"program {chosen} is saved under several ids ({ids}, identical HLO); "
                     f"{chosen} has the most kernel time; kernels of "
                     f"{', '.join(map(str, others))} are matched within their own id")
    return chosen, notes


@dataclasses.dataclass
class Part:
    """What one share of the GPUs' events gives back once matched (match_part), before it
    writes its rows of kernels.csv."""
    rows: int           # its rows of kernels.csv (a CPU capture's control thunks left out)
    control: int        # control thunks left out
    counted: dict       # (program id, device) -> match_part's counts, in group order
    launched: dict      # (program id, device) -> the correlation ids of its events
    unsaved: dict       # the same, of the events of programs without HLO
    totals: dict        # event_totals of its events, in kernels.csv's order
    starts: dict        # (device, program id) -> its events' starts (program_rows' steps)
    collectives: tuple  # collective_durations of its events


def match_part(space, ordinals, user_re, own: bool):
    """Step 4's matching of one share of the events, in the process that holds it: the GPUs
    `ordinals` (None: every event of the capture, a CPU capture's thunks included); with
    `own`, a process of its own, which decodes and checks these GPUs' planes itself (the
    step's process checks the others).
    A generator (tracekit.forked.Exchange), in four steps:
    - collects the events (collect_kernels) and yields (events, whether a CPU capture,
      kernel_times, the check of its planes (xplane_reader.Checked) and their stream_totals,
      where `own`); it is answered the program chosen (choose_program), the host's graph
      launches (host_record) and the programs (load's protos and built; None: those it read
      itself, where `own`);
    - gives each event its program, groups them by (device, program) and yields label_counts;
      it is answered (plans, or None where it builds them from the merged labels, the labels
      of every share merged);
    - matches each (GPU, program) group with its program's plan (the events put in launch
      order first), answers a CPU capture's thunks, sorts the events by device, stream and
      start and yields its Part: its counts (`counted`: per (program id, device): "launches"
      the executions from the launches or None, "covered" the executions the alignment
      covered, "events" the events launched by the program, "expected_min", "expected_max"
      the events one execution expects) and what the tables sum; it is answered the path of
      its rows of kernels.csv (or None) and whether they start with the header;
    - writes them."""
    checked = streams = None
    if own:
        from jaxperf.read import xplane_reader
        mine = set(ordinals)
        checked = space.checked([p for p in space.gpu_planes() if p.gpu_ordinal in mine])
        if checked.corrupt or checked.bad_time:  # said by the step, with the others' checks
            yield 0, False, {}, 0, checked, []
            return None
        streams = xplane_reader.stream_totals(space, ordinals)
    kernels, cpu = collect_kernels(space, ordinals)
    mine = load(space.hlo_protos())[:2] if own else None  # while the step reads the host's
    chosen, graph_launches, programs = yield (len(kernels), cpu, *kernel_times(kernels),
                                              checked, streams)
    protos, built = programs or mine
    if not cpu:
        mark_graph_launches(kernels, graph_launches)
    assign_programs(kernels, protos, chosen)
    by, unsaved, outside = by_device_and_program(kernels, protos)
    gpu = []
    for (dev, pid), ks in sorted(by.items(), key=lambda kv: str(kv[0])):
        if ks[0].cpu:
            answer_cpu_thunks(ks, built[pid])
        else:
            gpu.append(((dev, pid), ks))
    plans, merged = yield label_counts(gpu)
    if plans is None:
        plans = {pid: program_plan(built[pid], pid, *merged[pid], []) for pid in
                 {pid for (_, pid), _ in gpu}}
    counted, launched = {}, {}
    done, total = 0, sum(len(ks) for _, ks in gpu)
    for (dev, pid), ks in gpu:
        progress("matching kernels to instructions", done, total, "kernels")
        done += len(ks)
        in_launch_order(ks)
        plan = plans[pid]
        covered = km.match(plan, ks)
        counted[(pid, dev)] = {
            "launches": km.launch_executions(plan, ks), "covered": covered,
            "events": sum(1 for k in ks if k.why != "outside"),
            "expected_min": sum(1 for e in plan.events if not e.optional),
            "expected_max": len(plan.events)}
        launched[(pid, dev)] = {k.corr for k in ks} - {None}
    control = 0
    unsaved_ids: dict = {}
    for k in unsaved:
        ids = unsaved_ids.setdefault((k.program_id, k.device), set())
        if k.corr is not None:
            ids.add(k.corr)
    if cpu:  # control thunks (a while's, a call's) are left out: their bodies' count
        control = sum(1 for k in kernels if k.match == "control")
        kernels = [k for k in kernels if k.match != "control"]
        launched = {(k.program_id, k.device): set() for k in kernels
                    if k.program_id is not None}
        unsaved_ids = {}
    kernels.sort(key=lambda k: (str(k.device), k.lane, k.start))
    starts: dict = {}  # (device, program id) -> its events' starts, from the groups at once
    for k in kernels if cpu else [*unsaved, *outside]:
        starts.setdefault((k.device, k.program_id), []).append(k.start)
    starts = {key: np.array(v, np.int64) for key, v in starts.items()}
    if not cpu:
        starts.update((key, np.fromiter(map(_start, ks), np.int64, len(ks)))
                      for key, ks in by.items())
    path, header, first = yield Part(
        len(kernels), control, counted, launched, unsaved_ids, event_totals(kernels), starts,
        collective_durations(kernels))
    if path is not None:
        write_kernels(path, kernels, Sources(built, user_re), header, first)


_start = operator.attrgetter("start")


def label_counts(gpu: list) -> dict:
    """program id -> [its labels counted in the order first seen, the events it launched
    (argument copies left out)] over the (GPU, program) groups `gpu`, in their order: a Plan's
    figures (program_plan), summed over the shares in their order (merge_labels)."""
    out: dict = {}
    for (_, pid), ks in gpu:
        labels, placed = out.setdefault(pid, [Counter(), 0])
        ops = [k.hlo_op for k in ks]
        labelled = [op for op in ops if op]
        labels.update(labelled)
        placed += len(labelled)
        if len(labelled) < len(ks):  # unlabelled: in a graph, or a launch of several events
            ids = Counter(k.corr for k in ks)
            placed += sum(1 for k, op in zip(ks, ops, strict=True) if not op and (
                k.graph or (k.corr is not None and ids[k.corr] > 1)))
        out[pid][1] = placed
    return out


def merge_labels(shares: list) -> dict:
    """label_counts of the shares, in their order, summed."""
    out: dict = {}
    for share in shares:
        for pid, (labels, placed) in share.items():
            mine = out.setdefault(pid, [Counter(), 0])
            mine[0].update(labels)
            mine[1] += placed
    return out


def by_device_and_program(kernels, programs) -> tuple[dict, list, list]:
    """(device, program id) -> its events, for the events of a program whose HLO the capture
    holds; the events of the programs without it, answered none ("no hlo") here; and the
    argument copies, of no program, left as they are."""
    by: dict[tuple, list] = {}
    unsaved, outside = [], []
    for k in kernels:
        if k.program_id is None:
            outside.append(k)  # an argument copy: launched by no program
            continue
        if k.program_id not in programs:
            k.match, k.why = "none", "no hlo"  # its program's HLO is not in the capture
            unsaved.append(k)
            continue
        by.setdefault((k.device, k.program_id), []).append(k)
    return by, unsaved, outside


def answer_cpu_thunks(ks, prog) -> None:
    """A CPU capture's thunk events of one program: exact by their hlo_op, or class control
    where it names a while/call/conditional (its body's thunks are counted)."""
    for k in ks:
        ins = prog.by_name.get(k.hlo_op)
        k.category = "compute"
        if ins is not None and ins.opcode in CONTROL_OPCODES:
            k.match = "control"  # a while/call thunk: its body's thunks are counted
        elif ins is not None:
            k.instruction, k.match, k.confidence = k.hlo_op, "exact", 1.0


def in_launch_order(ks) -> None:
    """Sort one device's events of one program into launch order (correlation id, then start)
    and fill what the matcher reads besides the capture's fields: kind, category and group."""
    shared = Counter(k.corr for k in ks if k.corr is not None)
    ks.sort(key=lambda k: (_as_int(k.corr), k.start))
    kind_of = gpu_rules.kernel_kind
    for k in ks:
        k.kind = kind = kind_of(k.name, k.hlo_op, k.category == "memcpy")
        k.category = gpu_rules.CATEGORY_OF_KIND.get(kind, "compute")
        # one launch for the matcher: a graph, or events sharing a correlation id
        k.group = k.graph or (k.corr is not None and shared[k.corr] > 1)


def program_plan(prog, pid, labels: Counter, placed: int, notes: list):
    """The program's kernel_match.Plan, from its events on every device (`labels`, `placed`:
    merge_labels'); a note per while loop whose iterations were inferred."""
    plan = km.Plan(prog, labels, placed)
    for w, n in sorted(plan.inferred_trips.items()):
        notes.append(f"program {pid}: while loop {w} has no known trip count; "
                     f"{n} iterations per execution inferred from the labels")
    if plan.cut:
        notes.append(f"program {pid}: its while loops of unknown trip count expand past "
                     f"{km.MAX_PLAN_EVENTS:,} events per execution; the iterations past that "
                     "were left out of its schedule, so the kernels they launched stay "
                     "unmatched")
    return plan


def _as_int(v) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return -1


class Sources:
    """op_name, innermost source and user frame per (program, instruction), cached."""

    def __init__(self, programs, user_re):
        self.programs = programs
        self.user_re = user_re
        self.cache: dict = {}

    def get(self, pid, instruction) -> tuple[str, str, str]:
        key = (pid, instruction)
        if (out := self.cache.get(key)) is None:
            prog = self.programs.get(pid)
            ins = prog.by_name.get(instruction) if prog and instruction else None
            if ins is None:
                out = ("", "", "")
            else:
                frames = prog.frames(ins)
                user = prog.user_frame(ins, self.user_re)
                out = (op_name(prog, ins), str(frames[0]) if frames else "",
                       f"{user} {user.function}".strip() if user else "")
            self.cache[key] = out
        return out

    def framework(self, pid, instruction) -> str:
        """The instruction's innermost modelling-framework frame (hlo_program.framework_frame),
        "" where none."""
        key = ("framework", pid, instruction)
        if (out := self.cache.get(key)) is None:
            prog = self.programs.get(pid)
            ins = prog.by_name.get(instruction) if prog and instruction else None
            out = self.cache[key] = prog.framework_frame(ins) if ins is not None else ""
        return out


def op_name(prog, ins) -> str:
    return ins.metadata.op_name or next(
        (inner.metadata.op_name for cid in ins.called_computation_ids
         if (comp := prog.computations.get(cid)) is not None
         for inner in reversed(comp.instructions) if inner.metadata.op_name), "")


def xprof_coverage(pending, copy: Path) -> tuple[float | None, float, str]:
    """XProf's hlo_stats total self time (us) on this capture (`pending`: its conversion,
    started once the copy was made), and the seconds this step waited for it."""

    t = time.perf_counter()
    try:
        data = pending.result()
    except ImportError as exc:
        raise step_cli.MissingPackage(
            f"the xprof package is not installed ({exc}); {INSTALL}") from exc
    except xprof_figures.XProfError as exc:  # reported, not fatal
        return None, time.perf_counter() - t, f"XProf's hlo_stats failed: {exc}"
    seconds = time.perf_counter() - t
    try:
        table = json.loads(data if isinstance(data, str) else "")
    except ValueError as exc:  # XProf read a corrupt xplane into no JSON: nothing kept
        return None, seconds, f"XProf's hlo_stats is not JSON: {exc}"
    # kept beside the copy for the roofline step, which would otherwise convert it again
    (copy.parent / XPROF_HLO_STATS).write_text(data, encoding="utf-8", errors="replace")
    try:
        cols = [c["id"] for c in table["cols"]]
        i = cols.index("total_self_time")
        total = sum(float(r["c"][i]["v"] or 0) for r in table["rows"])
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        return None, seconds, f"XProf's hlo_stats had an unexpected shape: {exc}"
    return total, seconds, ""


# ---------------------------------------------------------------- writers

def write_kernels(path: Path, kernels, sources, header: bool = True, first: int = 0) -> int:
    """kernels.csv's rows of `kernels` (its header first, with `header`), the large table, and
    their GPU-only cells (a correlation id, a graph) in its child table beside it (gpu_part;
    `first`: the row of the whole table these rows start at): strings repeat, so each is quoted
    once, and the cells after the name, which the events of one kernel name and instruction
    share, are formatted once for them."""
    q = functools.cache(scratch.quote)  # each string quoted once
    rests: dict = {}  # what decides the cells after the name -> those cells
    with open(path, "w", newline="", encoding="utf-8") as fh, \
            open(gpu_part(path), "w", newline="", encoding="utf-8") as gpu_fh:
        if header:
            fh.write(scratch.header("attribution/kernels.csv"))  # the row below, in its order
            gpu_fh.write(scratch.header("attribution/kernels_gpu.csv"))  # its child's
        buf, gpu_buf = [], []
        for n, k in enumerate(kernels, first):
            ins = k.instruction
            key = (k.hlo_op, k.program_id, ins, k.inner, k.match,
                   k.confidence if ins else None, k.category)
            if (rest := rests.get(key)) is None:
                opn, source, user = sources.get(k.program_id, ins)
                rest = rests[key] = (
                    f",{q(k.hlo_op or '')},{'' if k.program_id is None else k.program_id},"
                    f"{q(ins)},{q(k.inner)},{k.match},{f'{k.confidence:.3f}' if ins else '0'},"
                    f"{q(opn)},{q(source)},{q(user)},{k.category}\n")
            buf.append(f"{k.device},{k.lane},{k.start / 1e6:.3f},{k.dur / 1e6:.3f},"
                       f"{q(k.name)}{rest}")
            if k.corr is not None or k.graph:
                gpu_buf.append(f"{n},{'' if k.corr is None else k.corr},"
                               f"{1 if k.graph else 0}\n")
            if len(buf) >= 10_000:
                fh.write("".join(buf))
                buf.clear()
                gpu_fh.write("".join(gpu_buf))
                gpu_buf.clear()
        fh.write("".join(buf))
        gpu_fh.write("".join(gpu_buf))
    return len(kernels)


def gpu_part(path: Path) -> Path:
    """The child table's part beside a part of kernels.csv (kernels.csv.1 -> kernels_gpu.csv.1)."""
    return path.with_name(path.name.replace("kernels.csv", "kernels_gpu.csv", 1))


CLASSES = ("exact", "name", "order", "none")

NONE_REASONS = (("outside", "launched outside any instruction (no hlo_op, a launch of their own: "
                 "argument copies and the like)"),
                ("no slot", "no candidate left in their window"),
                ("", "not matched"))

RESULT_FILE = "attribute_kernels.json"

ATT = "attribution"  # the scratch sub-folder of this step (built in a temporary copy, swapped in)

# HLO text files written: one per program with kernel time, the ones with the most GPU time
# first. Each is the program printed whole (the largest real ones run to tens of MB); a capture
# of an op-by-op loop holds dozens of tiny programs, whose text adds little beside ops.csv.
MAX_HLO_TEXTS = 10

# From this many GPU events on, where a second core is free, a forked child does the later
# GPUs' events (CHILD_SHARE), from decoding their planes to their rows of kernels.csv, while
# this process does the others (match_part; the two trade the program chosen and the labels
# counted on the way): at the seed's size (125,440 events on 8 GPUs) the matching alone takes
# 0.34 s, and the child hands back sums, not events.
FORK_MATCH_MIN = 50_000

# The child's share of the events at most: this process also reads the host's plane, chooses
# the program and writes the tables, so the child takes the larger share. At the seed's size
# (five medians of the whole step): half, four GPUs of eight, 1.23 s; five, 1.11 s; six, 1.24 s.
CHILD_SHARE = 0.625

# a program whose HLO text a child writes while this process writes the tables (about 0.1 s
# of printing per 10,000 instructions; a fork costs a few ms)
HLO_TEXT_FORK_MIN = 5_000

XPROF_HLO_STATS = "hlo_stats.json"  # XProf's hlo_stats output, in attribution/xplane/


@dataclasses.dataclass
class Options:
    program: int | None = None
    user_re: re.Pattern | None = None
    use_xprof: bool = True
    steps_when_told: bool = False  # step 1 runs beside this step (investigate.py)
    own_process: bool = False      # the command line: the decoded xplane is let go once read


# What a program's name may keep in a file name: the rest becomes "_" (a name from a capture
# could hold "/" or "..", which must never lead outside attribution/), and 100 characters.
UNSAFE_FILE_CHARS_RE = re.compile(r"[^A-Za-z0-9_.+=-]")

MAX_FILE_STEM = 100


def safe_file_name(name: str) -> str:
    """A program's name as part of a file name in attribution/: letters, digits and _.+=-,
    never starting with a dot, at most MAX_FILE_STEM characters."""
    return UNSAFE_FILE_CHARS_RE.sub("_", name)[:MAX_FILE_STEM].lstrip(".") or "program"


@contextlib.contextmanager
def parts_ended(x):
    """The xplane's reading parts (read_xplane's forked children) ended where the body fails
    or is stopped."""
    try:
        yield
    except BaseException:
        for part in x.parts if x is not None else ():
            part.abort()
        raise


def run(capture, out: Path, opts: Options) -> tuple[dict, list]:
    """Step 4 on a capture (capture_inputs.Capture, shared with the other steps of this process):
    writes out/attribution/ whole or not at all; returns the result (also written as
    attribute_kernels.json) and the (file, rows) written."""
    files = capture.files
    if files.xplane is None:
        raise step_cli.StepError(f"no <host>.xplane.pb for host {files.host} in {files.run_dir}; "
                                 "attribution reads the xplane (the trace.json has no HLO)")
    t0 = time.perf_counter()
    from jaxperf.read import xplane_reader
    from jaxperf.tpu import op_runs
    space = xplane_reader.space_of(capture, lazy=True)
    # a TPU's op runs are its instructions: read, not matched (op_runs)
    x = None if op_runs.tpu_planes(space) else read_xplane(capture, opts.user_re, opts.own_process)
    # the parts end before the folder goes (a part writes its kernels into it)
    with rules.atomic_folder(out / "attribution") as tmp, parts_ended(x):
        copy = pending = None

        def meanwhile():  # the copy XProf reads, and its hlo_stats for the coverage
            nonlocal copy, pending  # check, converted in its own process
            copy = xplane_copy(files.xplane, tmp)
            pending = xprof_figures.Pending(copy, "hlo_stats", background=True) \
                if opts.use_xprof else None
        try:
            m = match_capture(capture, x, opts, tmp, meanwhile) if x is not None else \
                match_tpu(capture, space, opts, tmp, meanwhile)
            t_match = time.perf_counter() - t0
            progress("writing the tables", m.rows, unit="kernels")
            try:
                tables = write_tables(tmp, m, opts)
                if opts.steps_when_told:  # step 1 writes steps.csv meanwhile: its end
                    step_cli.wait_until_told("step 1's steps.csv")
                add_programs(tmp, m, tables, read_steps(Path(out), files))
                refusals = [f"cannot attribute the kernels of program {n}({p}) because "
                            f"{why}" for p, (n, why) in sorted(m.unreadable.items())]
                hlo_names = write_hlo_texts(tmp, m, tables, opts, refusals)
                join_kernels(tmp, m)
                tables.written[:0] = [("kernels.csv", m.rows), ("kernels_gpu.csv", None)]
            except BaseException:
                if m.chosen_text is not None:
                    m.chosen_text.abort()
                raise
            coverage, xprof_s = None, 0.0
            if pending is not None:
                progress("XProf: its hlo_stats, for the coverage check")
                coverage, xprof_s, err = xprof_coverage(pending, copy)
                pending = None
                if err:  # XProf's message, the copy's path put back to the user's file
                    m.notes.append(rules.printable(
                        err.replace(str(copy), str(files.xplane)).strip()))
        finally:
            if pending is not None:
                pending.cancel()
        result = build_result(
            files=files, m=m, tables=tables, coverage=coverage, opts=opts,
            refusals=refusals, hlo_names=hlo_names,
            timing={"matching": round(t_match, 3), "xprof_hlo_stats": round(xprof_s, 3)})
        written = write_result(tmp, result, tables.written)
    # the per-stream totals steps 0 and 2 would otherwise decode the xplane's GPU planes for
    if x is not None:
        scratch.handoff_put(out, "xplane_streams", [files.xplane], {"streams": x.streams})
    return result, written


def match_tpu(capture, space, opts: Options, folder: Path | None = None, meanwhile=None) -> Matched:
    """Step 4 on a TPU capture: every op run is its instruction (jaxperf.tpu.op_runs), so
    nothing is matched; the program with the most op time is chosen, kernels.csv written (with
    `folder`) and the chosen program's HLO text."""
    from jaxperf.tpu import op_runs
    files = capture.files
    space.raise_first([space.checked(space.planes)])
    metadata = space.hlo_protos()
    if not metadata:
        raise step_cli.StepError(f"{files.xplane} holds no HLO programs (no /host:metadata): "
                                 "its ops cannot be placed in their programs' source lines")
    protos, built, unreadable = load(metadata)
    kernels, execs, starts, counts = op_runs.collect(space, built)
    if not kernels:
        raise step_cli.StepError(f"{files.xplane} has TPU planes but no op runs on their "
                                 f"'{op_runs.OP_LINE}' lines: there are no instructions to "
                                 "attribute")
    if not protos:
        _, why = next(iter(unreadable.values()))
        raise step_cli.StepError(f"no program in {files.xplane} can be read: {why}")
    chosen, notes = choose_program(*kernel_times(kernels), protos, opts.program, unreadable)
    notes.append(f"TPU: {len(kernels):,} op runs, each named by its instruction on the device "
                 f"(class exact, nothing matched); times are self times ({counts['nested']:,} "
                 f"ops hold others, a loop its body); {counts['async']:,} events of "
                 f"'{op_runs.ASYNC_LINE}' (asynchronous copies, start to done) are not op time")
    if meanwhile is not None:
        meanwhile()
    sources = Sources(built, opts.user_re)
    text = None
    if folder is not None:
        write_kernels(kernels_part(folder, 0), kernels, sources)
        text = Forked(hlo_text_file, folder, chosen, *protos[chosen], here=True,
                      what="the HLO text")
    totals = event_totals(kernels)
    runs: dict = {}
    for (pid, ins, *_), (n, _) in totals.items():
        if ins:
            runs[(pid, ins)] = runs.get((pid, ins), 0) + n
    return Matched(len(kernels), False, 0, protos, unreadable, built, {}, chosen, notes, {},
                   execs, {pid: name for pid, (name, _) in protos.items()}, sources, totals,
                   starts, [collective_durations(kernels)], [], text, runs)


@dataclasses.dataclass
class XPlaneRead:
    """What step 4 reads of the xplane: the programs' HLO (load's protos, built, unreadable),
    the host plane's executions and launch calls (host_record), and the events collected by
    the shares of the GPUs (`parts`: match_part's, each run by an Exchange, in kernels.csv's
    order; the first in this process)."""
    parts: list
    events: int
    cpu: bool
    times: tuple  # kernel_times' summed over the shares
    host: tuple   # host_record's executions and launch calls
    graph_launches: set  # ... and the correlation ids of its graph launches
    protos: dict
    built: dict
    unreadable: dict
    streams: list  # xplane_reader.stream_totals: handed on for steps 0 and 2


def read_xplane(capture, user_re=None, let_go: bool = False) -> XPlaneRead:
    """The capture's programs and events, read through our own reader first: a file that is
    not a sound xplane is said in one sentence naming it, before anything is copied or XProf
    reads it; one without programs or events is refused (a StepError). The events are
    collected by match_part in this process, and where they are many (FORK_MATCH_MIN) and a
    second core is free, those of the later GPUs by a forked child meanwhile (gpu_shares),
    which also decodes and checks their planes; the sentence said is the one a reading in one
    process says (xplane_reader's Space.raise_first, then the refusals in its order).
    `user_re`: the user frame's pattern for their kernels.csv rows. With `let_go` (a process
    of its own) the decoded xplane is let go once collected: at ten times the seed's size it
    is 1.4 GB, held through the matching and the tables before."""
    from jaxperf.read import xplane_reader
    files = capture.files
    space = xplane_reader.space_of(capture, lazy=True)
    shares = gpu_shares(space)
    theirs = {o for share in shares[1:] for o in share}
    parts: list = []
    try:
        for i in reversed(range(len(shares))):  # a child first: it decodes and collects meanwhile
            parts.insert(0, Exchange(match_part, space, shares[i], user_re, i > 0, here=i == 0,
                                     what="the matching of the later GPUs"))
        checked = [space.checked([p for p in space.planes if p.gpu_ordinal not in theirs])]
        refused: list = []  # said once the file's own checks and its programs are
        firsts: list = [None] * len(parts)
        if not (checked[0].corrupt or checked[0].bad_time):
            try:
                host = host_record(space)
                firsts[0] = parts[0].get()
            except step_cli.StepError as exc:
                refused.append(exc)
        metadata = space.hlo_protos()
        protos, built, unreadable = load(metadata)  # while a child may still be collecting
        for i in range(1, len(parts)):
            try:
                firsts[i] = parts[i].get()
                checked.append(firsts[i][4])
            except step_cli.StepError as exc:  # its planes passed their checks: it collected
                refused.append(exc)
        space.raise_first(checked)
        if not metadata:
            raise step_cli.StepError(f"{files.xplane} holds no HLO programs (no "
                                     "/host:metadata): kernels cannot be attributed to "
                                     "instructions or lines")
        if refused:
            raise refused[0]
        events = sum(f[0] for f in firsts)
        if not events:
            raise step_cli.StepError(f"{files.xplane} has no GPU stream events and no XLA:CPU "
                                     "thunk events: there are no kernels to attribute")
        all_time = Counter()
        for f in firsts:
            all_time.update(f[2])
        streams = sorted(xplane_reader.stream_totals(space, None if not theirs else [
            o for o in shares[0]]) + [row for f in firsts[1:] for row in f[5]],
            key=lambda row: row[0])  # by GPU, each GPU's lines in their order
        read = XPlaneRead(parts, events, firsts[0][1], (all_time, sum(f[3] for f in firsts)),
                          host[:2], host[2], protos, built, unreadable, streams)
    except BaseException:
        for part in parts:
            part.abort()
        raise
    if let_go:
        capture.cache.pop("space", None)
        space.let_go()
    return read


def gpu_shares(space) -> list:
    """The GPU ordinals of each share of the events (match_part), in kernels.csv's order (by
    the ordinal's text): from FORK_MATCH_MIN events on GPU streams, where a second core is
    free, the first GPUs and the later ones, at most CHILD_SHARE of the events; else one
    share, of every event (None)."""
    sizes: dict = {}
    for plane in space.gpu_planes():
        sizes[plane.gpu_ordinal] = sizes.get(plane.gpu_ordinal, 0) + sum(
            len(line) for line in plane.lines if line.name.startswith("Stream #"))
    order = sorted(sizes, key=str)
    events = sum(sizes.values())
    cut, later = len(order), 0
    if events >= FORK_MATCH_MIN and can_fork():
        while cut > 1 and later + sizes[order[cut - 1]] <= events * CHILD_SHARE:
            cut -= 1
            later += sizes[order[cut]]
    return [None] if cut == len(order) else [order[:cut], order[cut:]]


@dataclasses.dataclass
class Matched:
    """A capture's events matched: what step 4's tables and result are written from."""
    rows: int           # kernels.csv's rows (a CPU capture's control thunks left out)
    cpu: bool           # a CPU capture: XLA:CPU thunk events are the kernels
    control: int        # control thunks left out
    protos: dict        # program id -> (name, HloModuleProto) of each readable program
    unreadable: dict    # program id -> (name, why) of the others
    programs: dict      # program id -> hlo_program.Program
    plans: dict         # program id -> kernel_match.Plan of each program with events
    chosen: int         # the program chosen (choose_program)
    notes: list         # what the summary's program: lines say, in order
    counted: dict       # (program id, device) -> match_part's counts
    execs: dict         # (program id, device) -> count_executions' entry
    names: dict         # program id -> module name
    sources: Sources
    totals: dict        # event_totals of every event, in kernels.csv's order
    starts: dict        # (device, program id) -> its events' starts
    collectives: list   # each share's collective_durations
    writing: list       # the later shares, writing their rows of kernels.csv (join_kernels)
    chosen_text: Forked | None = None  # the chosen program's HLO text, written meanwhile
    runs: dict | None = None  # (program id, instruction) -> its runs, where counted (a TPU's)


def match_capture(capture, x: XPlaneRead, opts: Options, folder: Path | None = None,
                  meanwhile=None) -> Matched:
    """Choose a program, match every event (match_part, in each share's process) and count each
    program's executions. With `folder`, kernels.csv is written there (each share its rows,
    joined here), and the chosen program's HLO text meanwhile (a forked child for a program of
    HLO_TEXT_FORK_MIN instructions or more: a second core). `meanwhile()` is called once the
    program is chosen, while the shares group their events."""
    files = capture.files
    protos, parts = x.protos, x.parts
    text = None
    try:
        if not protos:
            _, why = next(iter(x.unreadable.values()))
            raise step_cli.StepError(f"no program in {files.xplane} can be attributed: {why}" +
                                     (f" (and {len(x.unreadable) - 1} more unreadable)"
                                      if len(x.unreadable) > 1 else ""))
        chosen, notes = choose_program(*x.times, protos, opts.program, x.unreadable)
        for i in range(len(parts) - 1, -1, -1):  # a child reads the programs itself
            parts[i].put((chosen, x.graph_launches, (protos, x.built) if i == 0 else None))
        if meanwhile is not None:
            meanwhile()
        merged = merge_labels([part.get() for part in parts])
        for part in parts[1:]:
            part.put((None, merged))
        plans = {pid: program_plan(x.built[pid], pid, *merged[pid], notes) for pid in merged}
        parts[0].put((plans, merged))
        done = []
        for i, part in enumerate(parts):  # this share's rows are written before the child's
            done.append(part.get())       # sums are taken: the child writes during the tables
            part.put((None if folder is None else kernels_part(folder, i), i == 0,
                      sum(p.rows for p in done[:-1])))
            if i == 0:
                part.get()
        if folder is not None:
            size = sum(len(c.instructions) for c in protos[chosen][1].computations)
            text = Forked(hlo_text_file, folder, chosen, *protos[chosen],
                          here=size < HLO_TEXT_FORK_MIN, what="the HLO text")
        if folder is None:  # nothing to write: the children end at once
            for part in parts[1:]:
                part.get()
    except BaseException:
        for child in [text, *parts]:
            if child is not None:
                child.abort()
        raise
    launched, counted, totals, starts = {}, {}, {}, {}
    for part in done:
        launched.update(part.launched)
        counted.update(part.counted)
        starts.update(part.starts)
        for key, (n, ps) in part.totals.items():
            e = totals.setdefault(key, [0, 0])
            e[0] += n
            e[1] += ps
    for part in done:
        for key, ids in part.unsaved.items():
            launched.setdefault(key, set()).update(ids)
    names = {pid: name for pid, (name, _) in protos.items()}
    execs = count_executions(x.host, launched, names,
                             {key: c["launches"] for key, c in counted.items()},
                             {key: c["covered"] for key, c in counted.items()})
    return Matched(sum(p.rows for p in done), x.cpu, sum(p.control for p in done), protos,
                   x.unreadable, x.built, plans, chosen, notes, counted, execs, names,
                   Sources(x.built, opts.user_re), totals, starts,
                   [p.collectives for p in done], parts[1:] if folder else [], text)


def kernels_part(folder: Path, i: int) -> Path:
    """Where share i writes its rows of kernels.csv (the first share: the table itself)."""
    return folder / ("kernels.csv" if i == 0 else f"kernels.csv.{i}")


def join_kernels(folder: Path, m: Matched) -> None:
    """kernels.csv whole: the later shares' rows, once written, appended in their order."""
    with open(kernels_part(folder, 0), "ab") as fh, open(gpu_part(kernels_part(folder, 0)),
                                                          "ab") as gpu_fh:
        for i, part in enumerate(m.writing, 1):
            part.get()
            append_file(fh, kernels_part(folder, i))
            append_file(gpu_fh, gpu_part(kernels_part(folder, i)))
    m.writing = []


def append_file(fh, path: Path) -> None:
    """The file at `path` appended to the open file `fh`, then removed."""
    with open(path, "rb") as more:
        try:  # in the kernel, where it can: no copy through this process
            while os.sendfile(fh.fileno(), more.fileno(), None, 1 << 30):
                pass
        except (AttributeError, OSError):
            fh.seek(0, os.SEEK_END)
            more.seek(0)
            shutil.copyfileobj(more, fh, 1 << 20)
    path.unlink()


@dataclasses.dataclass
class Tables:
    """The tables written into attribution/ and what the result reads of them."""
    written: list       # (file, rows), in the order written
    ops: dict           # op_totals
    progs: list         # program_rows
    groups: dict        # class_totals
    steps_note: str     # read_steps' note


def declared_kernel_names(programs) -> frozenset:
    """The kernel names the programs' custom calls declare in their backend configs (a Pallas
    call's `name`, its kernel function: kernel_names.csv's family for them)."""
    from jaxperf.cost.custom_costs import attributes
    return frozenset(name for prog in programs.values() for ins in prog.by_name.values()
                     if ins.opcode == "custom-call" and ins.backend_config
                     and isinstance(name := attributes(ins.backend_config).get("name"), str)
                     and name)


def write_tables(folder: Path, m: Matched, opts: Options) -> Tables:
    """ops.csv, lines.csv, how.csv, kernel_names.csv and families.csv, which need no steps
    (kernels.csv is match_part's; programs.csv add_programs', once steps.csv is there)."""
    totals = m.totals
    ops = op_totals(totals, opts.program)
    split_k = split_k_reductions(m.programs)
    written = write_op_and_line_tables(folder, ops, m.programs, m.sources,
                                        sum(ps for _, ps in totals.values()),
                                        instruction_runs(m.plans, m.execs)
                                        if m.runs is None else m.runs, m.plans, split_k)
    groups = class_totals(totals)
    written.append(_table(folder, "how.csv", how_rows(groups)))
    name_rows = kernel_name_rows(totals, plans_names(m.programs), declared_kernel_names(m.programs))
    written.append(_table(folder, "kernel_names.csv", name_rows))
    written.append(_table(folder, "families.csv", family_rows(totals, name_rows, split_k)))
    return Tables(written, ops, [], groups, "")


def _table(folder: Path, name: str, rows) -> tuple[str, int]:
    """(name, rows written) of one table of attribution/ (scratch.write_table)."""
    return name, scratch.write_table(folder, f"{ATT}/{name}", rows, stands_for=ATT)


def add_programs(folder: Path, m: Matched, tables: Tables, steps: tuple) -> None:
    """programs.csv, with each program's steps (`steps`: read_steps'), placed in
    tables.written after ops.csv and lines.csv."""
    tables.progs = program_rows(m.starts, m.totals, m.names, m.execs, steps[0])
    for r in tables.progs:
        p = m.programs.get(r["program_id"])
        r["partitions"] = p.partitions() if p is not None else None
        r["arguments"], r["f64_argument_pct"] = p.arguments() if p is not None else (None, None)
    tables.steps_note = steps[1]
    at = next(i for i, (f, _) in enumerate(tables.written) if f == "how.csv")
    tables.written.insert(at, _table(folder, "programs.csv", programs_csv_rows(tables.progs)))


def write_hlo_texts(folder: Path, m: Matched, tables: Tables, opts: Options,
                    refusals: list) -> dict:
    """The HLO text of the programs with the most GPU time, the chosen one first (at most
    MAX_HLO_TEXTS; --program: that one alone), each added to tables.written; a program that
    cannot be printed is a note and a refusal. Returns program id -> file name written."""
    protos, chosen = m.protos, m.chosen
    texts = [chosen] + [r["program_id"] for r in tables.progs
                        if r["program_id"] in protos and r["program_id"] != chosen
                        and opts.program is None][:MAX_HLO_TEXTS - 1]
    hlo_names: dict = {}
    for pid in texts:
        pname = protos[pid][0]
        fname, rows, why = None, None, None
        if pid == chosen and m.chosen_text is not None:
            with contextlib.suppress(OSError):  # the child said nothing: written here instead
                fname, rows, why = m.chosen_text.wait()
        if fname is None:
            fname, rows, why = hlo_text_file(folder, pid, *protos[pid])
        if why is None:
            tables.written.append((fname, rows))
            hlo_names[pid] = fname
        else:
            m.notes.append(f"the HLO text of {pname}({pid}) was not written: the program "
                           f"could not be printed ({why})")
            refusals.append(f"cannot write the HLO text of {pname}({pid}) because the "
                            f"program could not be printed ({why})")
    with_time = sum(1 for r in tables.progs if r["program_id"] in protos)
    if opts.program is None and with_time > len(texts):
        m.notes.append(f"HLO text written for the {len(texts)} programs with the most GPU "
                       f"time of {with_time} with kernel time (at most {MAX_HLO_TEXTS}); "
                       "--program ID writes another's")
    return hlo_names


def hlo_text_file(folder: Path, pid: int, pname: str, module) -> tuple[str, int | None, str | None]:
    """One program's HLO text as folder/<name>(<id>).hlo.txt: (file name, lines, None), or
    (file name, None, why) where the program cannot be printed (no file left)."""
    fname = f"{safe_file_name(pname)}({pid}).hlo.txt"
    try:
        from jaxperf.program import hlo_text
        return fname, hlo_text.write_hlo_text(module, folder / fname), None
    except (OSError, ValueError, KeyError, IndexError, TypeError, RecursionError) as exc:
        (folder / fname).unlink(missing_ok=True)
        return fname, None, str(exc)


def write_result(folder: Path, result: dict, written: list) -> list:
    """summary.txt and attribute_kernels.json (the result with its `tables`); returns every
    (file, rows) written, those two first."""
    result["tables"] = {f: n for f, n in written}
    lines = render_summary(result)
    (folder / "summary.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    scratch.write_result(folder, "attribution/" + RESULT_FILE, result, stands_for=ATT)
    return [("summary.txt", len(lines)), (RESULT_FILE, None)] + written


def event_totals(kernels) -> dict:
    """The events summed by all that the tables and the result tell apart: (program id,
    instruction, kernel name, device, category, match class, why, placed with low confidence,
    in a graph) -> [events, ps], each key where its first event is. One pass over the events:
    every table but kernels.csv is a sum over these (a few thousand keys at the seed's size)."""
    out: dict[tuple, list] = {}
    low_conf = km.LOW_CONFIDENCE
    for k in kernels:
        ins = k.instruction
        key = (k.program_id, ins, k.name, k.device, k.category, k.match, k.why,
               bool(ins) and k.confidence < low_conf, k.graph)
        if (e := out.get(key)) is None:
            out[key] = [1, k.dur]
        else:
            e[0] += 1
            e[1] += k.dur
    return out


def op_totals(totals: dict, only=None) -> dict:
    """(program id, instruction) -> [kernels, GPU ps, category] over the attributed kernels of
    every program (of program `only` where given; `totals`: event_totals'); the category is that
    of the kernels holding most of the instruction's time (a fused-attention call's fill kernel
    does not make it a copy)."""
    ops: dict[tuple, list] = {}
    by_category: dict[tuple, dict] = {}
    for (pid, ins, _, _, category, *_), (n, ps) in totals.items():
        if ins and (only is None or pid == only):
            key = (pid, ins)
            if (o := ops.get(key)) is None:
                o = ops[key] = [0, 0, category]
                by_category[key] = {}
            o[0] += n
            o[1] += ps
            cats = by_category[key]
            cats[category] = cats.get(category, 0) + ps
    for key, cats in by_category.items():
        if len(cats) > 1:
            ops[key][2] = max(sorted(cats), key=lambda c: cats[c])
    return ops


def instruction_runs(plans: dict, execs: dict) -> dict:
    """(program id, instruction) -> its executions: the program's executions on each GPU times
    the instruction's runs per execution (its slots in the schedule: trip counts of the loops
    around it, known or inferred), summed over GPUs."""
    per_program: dict = {}
    for (pid, _), e in execs.items():
        per_program[pid] = per_program.get(pid, 0) + e["executions"]
    return {(pid, ins): per_program[pid] * len(starts) for pid, plan in plans.items()
            if pid in per_program for ins, starts in plan.positions.items()}


def write_op_and_line_tables(folder: Path, ops: dict, programs: dict, sources, device_time: int,
                             runs: dict, plans: dict, split_k: dict) -> list:
    """ops.csv and lines.csv over the programs in `ops`, each share twice: of the table's
    attributed kernel time (`pct_of_attributed`: every program's, or the --program one's) and
    of all GPU event time (`pct_of_device_time`, as kernel_names.csv). A fusion's fingerprint
    comes from its program's plan (`plans`), which has taken it already; a split-K reduction
    names its GEMM (`split_k`: split_k_reductions')."""
    attributed = sum(t for _, t, _ in ops.values())
    op_rows = []
    structures = {pid: plans[pid].structure if pid in plans else km.Structure(prog)
                  for pid, prog in programs.items() if prog is not None}
    for (pid, name), (n, t, cat) in sorted(ops.items(),
                                           key=lambda kv: (-kv[1][1], str(kv[0][0]), kv[0][1])):
        opn, src, user = sources.get(pid, name)
        fw = sources.framework(pid, name)
        prog = programs.get(pid)
        ins = prog.by_name.get(name) if prog is not None else None
        op_rows.append((pid, name, ins.opcode if ins is not None else "", cat, n, us(t),
                        pct(t, attributed), pct(t, device_time), opn, src, user,
                        prog.name if prog is not None else "", runs.get((pid, name), ""), fw,
                        structures[pid].fusion_digest(ins) if ins is not None else "",
                        rules.phase(opn, fw), split_k.get((pid, name), ""),
                        prog.moves_layout(ins) if ins is not None else "",
                        prog.independent_loop(ins) if ins is not None else "",
                        (prog.invariant_bytes(ins) or "") if ins is not None else "",
                        prog.argument_layout(ins) if ins is not None else "",
                        prog.random_bits(ins) if ins is not None else ""))
    lines: dict[tuple, list] = {}
    for (pid, ins_name), (n, t, _) in ops.items():  # per instruction, then per line
        user = sources.get(pid, ins_name)[2]
        fw = sources.framework(pid, ins_name)
        key = (user, "" if user else fw)  # no user frame: one row per framework frame
        entry = lines.setdefault(key, [0, 0, set(), {}, set()])
        entry[0] += n
        entry[1] += t
        entry[2].add((pid, ins_name))
        entry[3][fw] = entry[3].get(fw, 0) + t
        entry[4].add(pid)
    line_rows = []
    for (user, _), (n, t, ins, fws, pids) in sorted(
            lines.items(), key=lambda kv: (-kv[1][1], kv[0])):
        fw = max(sorted(fws), key=lambda f: fws[f])  # the framework frame with the most time
        line_rows.append((user, us(t), pct(t, attributed), pct(t, device_time), n, len(ins), fw,
                          len(pids)))
    return [_table(folder, "ops.csv", op_rows),
            _table(folder, "phases.csv", phase_rows(op_rows, ops, attributed, device_time)),
            _table(folder, "lines.csv", line_rows)]


def phase_rows(op_rows: list, ops: dict, attributed: int, device_time: int) -> list[tuple]:
    """phases.csv: each of trace_rules.PHASES with its instructions, kernels and GPU time (a
    row even where none ran), and a sentence where a phase's absence says what the program is."""
    at = {p: [0, 0, 0, set()] for p in rules.PHASES}
    modules: dict = {}  # phase -> module -> its instructions' time
    for r in op_rows:
        n, t, _ = ops[(r[0], r[1])]
        a = at[r[15]]  # its phase
        a[0] += 1
        a[1] += n
        a[2] += t
        a[3].add(r[0])
        mine = modules.setdefault(r[15], {})
        mine[r[11]] = mine.get(r[11], 0) + t
    fwd, bwd, opt, out, _ = (at[p] for p in rules.PHASES)
    said = {}
    if not fwd[0] and not bwd[0]:
        said["forward"] = ("no instruction is under differentiation (no jvp or transpose in any "
                           "op_name): inference, evaluation, or gradients taken outside jax's "
                           "autodiff")
    elif fwd[0] and not bwd[0]:
        said["backward"] = ("no backward: the programs differentiate (jvp) without transposing "
                            "(forward mode or a linearization only)")
    if bwd[0] and not opt[0]:
        said["optimizer"] = (
            "no optimizer update in these programs: they compute a loss and its gradients only "
            "(an update in a program the capture lacks, or on the host, is not seen)"
            if not out[0] else
            f"no instruction has an optimizer's frame (optax, flax's train state, keras) or "
            f"name scope; the {out[0]} instructions outside differentiation ({us(out[2])} us, "
            f"in {rules.plural(len(out[3]), 'program')}, the most time in "
            + ", ".join(sorted(modules["outside"], key=lambda m: -modules["outside"][m])[:4])
            + ") may hold an update written by hand, or a forward pass run apart from its "
            "gradients (a loss computed in a program of its own), or other work (metrics, "
            "eager ops between programs)")
    return [(p, a[0], a[1], us(a[2]), pct(a[2], attributed), pct(a[2], device_time), len(a[3]),
             said.get(p, "")) for p, a in at.items()]


def program_rows(starts: dict, totals: dict, programs_names: dict, execs: dict,
                 steps) -> list[dict]:
    """One entry per program with GPU events, and one for the events of no program (OUTSIDE),
    by GPU time descending (programs.csv; attribute_kernels.json `programs`). `totals`:
    event_totals'; `starts`: (device, program id) -> its events' starts, read only for the
    steps they start in."""
    total = sum(ps for _, ps in totals.values())
    by: dict = {}
    for (pid, ins, _, dev, *_), (n, ps) in totals.items():
        e = by.setdefault(pid, {"kernels": 0, "ps": 0, "attributed": 0, "gpus": set(),
                                "steps": set()})
        e["kernels"] += n
        e["ps"] += ps
        if ins:
            e["attributed"] += ps
        e["gpus"].add(dev)
    for (dev, pid), at in starts.items() if steps is not None else ():
        st = steps.get(dev)
        if st:  # the step each event starts in: the last to start at or before it, if not over
            i = np.searchsorted(np.array(st[0], np.int64), at, side="right") - 1
            ends = np.array([end for _, end in st[1]], np.int64)
            inside = (i >= 0) & (at < ends[np.maximum(i, 0)])
            by[pid]["steps"].update(st[1][j][0] for j in np.unique(i[inside]).tolist())
    out = []
    for pid, e in by.items():
        gpus = sorted(e["gpus"], key=str)
        per = {str(d): execs[(pid, d)]["executions"] for d in gpus if (pid, d) in execs}
        n = sum(per.values())
        froms = sorted({execs[(pid, d)]["from"] for d in gpus if (pid, d) in execs})
        host = [execs[(pid, d)]["host_ps"] for d in gpus if (pid, d) in execs]
        host_ps = sum(h for h in host if h is not None) if any(
            h is not None for h in host) else None
        out.append({
            "program_id": OUTSIDE if pid is None else pid,
            "module": OUTSIDE if pid is None else programs_names.get(pid, ""),
            "executions": n if pid is not None else None,
            "devices": gpus, "executions_per_device": per if pid is not None else {},
            "executions_from": " + ".join(froms),
            "kernels": e["kernels"],
            "kernels_per_execution": round(e["kernels"] / n, 2) if pid is not None and n
            else None,
            "device_us": rules.us_value(e["ps"]),
            "pct_of_device_time": round(100.0 * e["ps"] / total, 2) if total else 0.0,
            "attributed_us": rules.us_value(e["attributed"]),
            "host_dispatch_us": rules.us_value(host_ps),
            "host_dispatch": "measured" if host_ps is not None else (
                "not recorded" if pid is not None else ""),
            "steps": sorted(e["steps"]) if steps is not None else None,
            "_ps": e["ps"]})
    out.sort(key=lambda r: (-r["_ps"], str(r["program_id"])))
    for r in out:
        del r["_ps"]
    return out


def programs_csv_rows(progs: list[dict]) -> list[tuple]:
    return [(r["program_id"], r["module"], "" if r["executions"] is None else r["executions"],
             " ".join(map(str, r["devices"])),
             " ".join(f"{d}={n}" for d, n in r["executions_per_device"].items()),
             r["executions_from"], r["kernels"],
             "" if r["kernels_per_execution"] is None else f"{r['kernels_per_execution']:.2f}",
             f"{r['device_us']:.3f}", f"{r['pct_of_device_time']:.2f}",
             f"{r['attributed_us']:.3f}",
             "" if r["host_dispatch_us"] is None else f"{r['host_dispatch_us']:.3f}",
             r["host_dispatch"], "" if r["steps"] is None else rules.format_ranges(r["steps"]),
             r.get("partitions") or "", "" if r.get("arguments") is None else r["arguments"],
             "" if r.get("f64_argument_pct") is None else f"{r['f64_argument_pct']:.2f}")
            for r in progs]


def read_steps(out: Path, files) -> tuple[dict | None, str]:
    """Step 1's steps.csv in the scratch folder, when it was written for this capture's host:
    device -> ([starts in ps], [(step, end ps)]), and a note; (None, why) otherwise."""
    folder = scratch.Scratch(out)
    try:
        rows = folder.typed("steps.csv", need=("step", "device", "start_us", "end_us"))
    except scratch.TableError as exc:
        return None, f"steps not given: {exc}"
    if rows is None:
        return None, ("steps not given: no steps.csv in the scratch folder (run step 1, "
                      "skip_stats.py, first)")
    was = (folder.json("skip_stats.json") or {}).get("capture")
    if not scratch.written_for(was, files.trace, base=folder.folder):
        return None, (f"steps not given: steps.csv was written for "
                      f"{scratch.recorded_file(was)}, not {files.trace}")
    by: dict = {}
    for r in rows:
        by.setdefault(r["device"], []).append((round(r["start_us"] * 1e6),
                                               round(r["end_us"] * 1e6), r["step"]))
    for rs in by.values():
        rs.sort()
    steps = {dev: ([r[0] for r in rs], [(r[2], r[1]) for r in rs]) for dev, rs in by.items()}
    return steps, "steps from steps.csv (step 1): a program appears in a step when one of " \
        "its GPU events starts inside that step's window on its GPU"


def class_totals(totals: dict) -> dict:
    """program id (and "all") -> class -> [kernels, ps, low-confidence kernels, their ps]
    (`totals`: event_totals')."""
    groups: dict = {}
    for (pid, _, _, _, _, match, _, low, _), (n, ps) in totals.items():
        for key in (OUTSIDE if pid is None else pid, "all"):
            e = groups.setdefault(key, {c: [0, 0, 0, 0] for c in CLASSES})[match]
            e[0] += n
            e[1] += ps
            if low:
                e[2] += n
                e[3] += ps
    return groups


def how_rows(groups) -> list[tuple]:
    keys = sorted((g for g in groups if g not in ("all", OUTSIDE)), key=str) + \
        [g for g in (OUTSIDE, "all") if g in groups]
    return [(key, c, g[c][0], us(g[c][1]), pct(g[c][1], total), g[c][2], us(g[c][3]),
             pct(g[c][3], total)) for key in keys
            for g in [groups[key]] for total in [sum(v[1] for v in g.values())] for c in CLASSES]


def _classes_json(g) -> dict:
    total = sum(v[1] for v in g.values())
    return {c: {"kernels": g[c][0], "device_us": rules.us_value(g[c][1]),
                "pct_of_group": round(100.0 * g[c][1] / total, 2) if total else 0.0}
            for c in CLASSES}


def build_result(*, files, m: Matched, tables: Tables, coverage, opts, refusals: list,
                 hlo_names: dict, timing: dict) -> dict:
    """Everything summary.txt says, and more, as data (fields: references/scratch-layout.md).
    Adds a refusal for the kernels of programs whose HLO the capture does not hold."""
    totals, groups, chosen = m.totals, tables.groups, m.chosen
    total = sum(ps for _, ps in totals.values())
    fig = kernel_figures(totals, groups["all"], total)
    cov, check = coverage_check(fig, coverage, total, opts)
    unsaved = [(key[0], n, ps) for key, (n, ps) in totals.items()
               if key[0] is not None and key[0] not in m.protos]
    if missing := [u for u in unsaved if u[0] not in m.unreadable]:
        refusals.append(f"cannot attribute {sum(u[1] for u in missing)} kernels because their "
                        f"programs {sorted({u[0] for u in missing})} have no HLO in the capture")
    return {
        "step": "attribute_kernels", "status": "done",
        "capture": {"xplane": scratch.identity(files.xplane), "host": files.host,
                    "run": files.run_dir.name},
        "program": {"id": chosen, "name": m.protos[chosen][0], "notes": m.notes},
        "device": "CPU" if m.cpu else "TPU" if m.runs is not None else "GPU",  # runs: a TPU's
        "control_thunks_left_out": m.control,
        "figures": fig,
        "classes": {"all": _classes_json(groups["all"]),
                    **({str(chosen): _classes_json(groups[chosen])} if chosen in groups else {})},
        "none": none_entries(totals),
        "no_hlo": {"kernels": sum(u[1] for u in unsaved),
                   "pct_of_device_time": round(100.0 * sum(u[2] for u in unsaved) / total, 2)
                   if total else 0,
                   "programs": sorted({u[0] for u in unsaved})} if unsaved else None,
        "collectives_by_order": collectives_by_order(m.collectives),
        "source": source_counts(tables.ops, m.sources),
        "coverage": cov, "checks": [check], "refusals": refusals,
        "low_confidence_below": km.LOW_CONFIDENCE,
        "timing_s": timing, "hlo_text": hlo_names.get(chosen),
        "hlo_texts": {str(p): f for p, f in hlo_names.items()},
        "scope": {"programs": "one" if opts.program is not None else "all",
                  "program_ids": sorted({p for p, _ in tables.ops}, key=str)},
        "executions": {str(d): {"executions": e["executions"], "from": e["from"],
                                **{f: m.counted[(pid, d)][f] for f in (
                                    "events", "expected_min", "expected_max")
                                   if (pid, d) in m.counted}}
                       for (pid, d), e in sorted(m.execs.items(), key=lambda kv: str(kv[0][1]))
                       if pid == chosen},
        "programs": tables.progs,
        "steps_note": tables.steps_note,
    }


def collective_durations(kernels) -> tuple[list, set]:
    """The durations, in order, and the labels of the collective kernels outside graphs whose
    tracer label names no instruction of the saved HLO (matched other than exactly: their
    instruction comes from the collective-start matched by order), among `kernels`."""
    durs, labels = [], set()
    for k in kernels:
        if k.category == "collective" and not k.graph and k.hlo_op and k.match != "exact":
            durs.append(k.dur)
            labels.add(k.hlo_op)
    return durs, labels


def collectives_by_order(shares: list) -> dict:
    """The collective kernels of collective_durations (`shares`: each share's, in kernels.csv's
    order): `kernels`, `device_us` (their kernels.csv dur_us cells summed in its row order, as a
    reader of the table would) and their `labels`; step 7 reads these instead of scanning
    kernels.csv again."""
    n, us, labels = 0, 0.0, set()
    for durs, mine in shares:
        n += len(durs)
        for dur in durs:
            us += float(f"{dur / 1e6:.3f}")
        labels |= mine
    return {"kernels": n, "device_us": us, "labels": sorted(labels)}


def kernel_figures(totals: dict, g: dict, total: int) -> dict:
    """The result's figures on every event (`totals`: event_totals'): counts, kernel time, the
    share attributed to an instruction (`g`: class_totals' "all" group; total: every event's
    ps) and the attributed kernels placed with low confidence."""
    none_ps = g["none"][1]
    ours = round(100.0 * (total - none_ps) / total, 2) if total else 0.0
    fig = {
        "kernels": scratch.figure(sum(n for n, _ in totals.values()), "count", "measured"),
        "devices": scratch.figure(len({key[3] for key in totals}), "count", "measured"),
        "kernel_time_us": scratch.figure(rules.us_value(total), "us", "measured"),
        "graph_kernels": scratch.figure(sum(n for key, (n, _) in totals.items() if key[8]),
                                        "count", "measured"),
        "attributed_pct_of_device_time": scratch.figure(ours, "pct", "inferred"),
    }
    t_att = sum(ps for key, (_, ps) in totals.items() if key[1])
    low = [(n, ps) for key, (n, ps) in totals.items() if key[1] and key[7]]
    fig["low_confidence_kernels"] = scratch.figure(sum(n for n, _ in low), "count", "inferred")
    fig["low_confidence_pct_of_all_attributed"] = scratch.figure(
        round(100.0 * sum(ps for _, ps in low) / t_att, 2) if t_att else 0.0, "pct",
        "inferred")
    return fig


def coverage_check(fig: dict, coverage, total: int, opts) -> tuple[dict, dict]:
    """Our attributed share next to XProf's hlo_stats (`coverage`: its total self time in us,
    None where not run or not read): the result's `coverage` and its check; XProf's share is
    added to `fig`."""
    ours = fig["attributed_pct_of_device_time"]["value"]
    cov = {"ours_pct_of_device_time": ours, "xprof_pct_of_device_time": None, "verdict": None}
    if coverage is None or not total:
        return cov, {"name": "coverage at least XProf's hlo_stats", "status": "not checkable",
                     "detail": "--no-xprof" if not opts.use_xprof else
                     "XProf's hlo_stats gave no figure"}
    theirs = round(100.0 * coverage * 1e6 / total, 2)
    lower = ours + COVERAGE_TOLERANCE_PCT < theirs
    cov.update(xprof_pct_of_device_time=theirs, verdict=(
        f"OURS IS LOWER by {theirs - ours:.2f} points: see the none lines" if lower
        else "ours is not lower"))
    fig["xprof_hlo_stats_pct_of_device_time"] = scratch.figure(theirs, "pct", "read")
    return cov, {"name": "coverage at least XProf's hlo_stats",
                 "status": "fail" if lower else "pass",
                 "detail": f"ours {ours:.2f}%, XProf's {theirs:.2f}%"}


def none_entries(totals: dict) -> list[dict]:
    """Per reason an event was left unattributed (NONE_REASONS): its kernels, time and the
    five kernel names with the most time (`totals`: event_totals')."""
    none = []
    for why, label in NONE_REASONS:
        top: dict[str, list] = {}
        for (_, _, name, _, _, match, reason, *_), (n, ps) in totals.items():
            if match == "none" and reason == why:
                e = top.setdefault(name, [0, 0])
                e[0] += n
                e[1] += ps
        if not top:
            continue
        none.append({"why": why or "unmatched", "label": label,
                     "kernels": sum(n for n, _ in top.values()),
                     "device_us": rules.us_value(sum(ps for _, ps in top.values())),
                     "largest": [{"kernel": n, "count": c, "device_us": rules.us_value(t)}
                                 for n, (c, t) in sorted(top.items(),
                                                         key=lambda kv: -kv[1][1])[:5]]})
    return none


def source_counts(ops: dict, sources) -> dict:
    """The attributed kernels of ops.csv's programs with a user frame, with no source at all,
    and with frames none of which is user code (each with its share of the attributed time)."""
    attributed = sum(t for _, t, _ in ops.values())
    n_nouser = n_noframe = t_nouser = t_noframe = 0
    for (pid, ins_name), (n, t, _) in ops.items():
        _, src, user = sources.get(pid, ins_name)
        if not user:
            n_nouser += n
            t_nouser += t
            if not src:
                n_noframe += n
                t_noframe += t
    n_mine = sum(n for n, _, _ in ops.values())
    return {"kernels": n_mine, "with_user_frame": n_mine - n_nouser,
            "no_source_kernels": n_noframe,
            "no_source_pct_of_attributed": round(100.0 * t_noframe / attributed, 2)
            if attributed else 0,
            "library_only_kernels": n_nouser - n_noframe,
            "library_only_pct_of_attributed": round(
                100.0 * (t_nouser - t_noframe) / attributed, 2)
            if attributed else 0}


def _p(v) -> str:
    return f"{v:.2f}"


def render_summary(r: dict) -> list[str]:
    """summary.txt: a rendering of the result, nothing computed here."""
    f = r["figures"]
    prog = f"{r['program']['name']}({r['program']['id']})"
    s = [f"program: {n}" for n in r["program"]["notes"]]
    if r["device"] == "CPU":
        s.append(f"device: CPU capture: {f['kernels']['value']} XLA:CPU thunk events (with "
                 "hlo_op and program_id) on /host:CPU are the kernels; "
                 f"{r['control_thunks_left_out']} thunks of control instructions (while, call, "
                 "conditional) contain others and are left out")
    s.append(f"kernels: {f['kernels']['value']} on {f['devices']['value']} device(s), "
             f"{f['kernel_time_us']['value']:,.1f} us of kernel time; "
             f"{f['graph_kernels']['value']} launched inside graphs (command buffers)")
    for key, label in (("all", "all programs"), (str(r["program"]["id"]), prog)):
        if c := r["classes"].get(key):
            s.append(f"match classes ({label}): " + ", ".join(
                f"{k} {c[k]['kernels']} kernels {_p(c[k]['pct_of_group'])}% of time"
                for k in CLASSES))
    if nh := r["no_hlo"]:
        s.append(f"no HLO: {nh['kernels']} kernels ({_p(nh['pct_of_device_time'])}% of kernel "
                 f"time) belong to programs {nh['programs']} whose HLO the capture does not "
                 "hold: class none")
    for n in r["none"]:
        s.append(f"none: {n['kernels']} kernels, {n['device_us']:,.1f} us, {n['label']}; "
                 "largest: " + "; ".join(f"{e['kernel']} x{e['count']} {e['device_us']:,.1f} us"
                                         for e in n["largest"]))
    s.append(f"confidence: {f['low_confidence_kernels']['value']} attributed kernels "
             f"({_p(f['low_confidence_pct_of_all_attributed']['value'])}% of the attributed "
             f"GPU time) are placed with confidence below {r['low_confidence_below']} (weak "
             "local agreement with the schedule; kernels.csv column confidence, how.csv "
             "low_confidence_*); the rest at or above it")
    src = r["source"]
    scope = r.get("scope") or {}
    if progs := [p for p in r.get("programs") or [] if p["program_id"] != OUTSIDE]:
        top = progs[0]
        s.append(f"programs: {len(progs)} ran GPU events; the most GPU time: "
                 f"{top['module']}({top['program_id']}) {_p(top['pct_of_device_time'])}% of it, "
                 f"{top['executions']} executions ({top['executions_from']}); programs.csv "
                 "lists every one")
    where = prog if scope.get("programs") == "one" else "all programs"
    s.append(f"source: {src['with_user_frame']} of {src['kernels']} attributed kernels of "
             f"{where} have a user frame; {src['no_source_kernels']} kernels "
             f"({_p(src['no_source_pct_of_attributed'])}% of its attributed time) belong to "
             f"instructions with no source in the HLO, and {src['library_only_kernels']} "
             f"({_p(src['library_only_pct_of_attributed'])}%) have frames but none that counts "
             "as user code (see --user-re); counted, not guessed")
    cov = r["coverage"]
    if cov["xprof_pct_of_device_time"] is not None:
        s.append(f"coverage: XProf's hlo_stats attributes "
                 f"{_p(cov['xprof_pct_of_device_time'])}% of this capture's kernel time to HLO "
                 f"ops; this script attributes {_p(cov['ours_pct_of_device_time'])}% to an "
                 f"instruction (exact + name + order); {cov['verdict']}")
    else:
        s.append(f"coverage: this script attributes {_p(cov['ours_pct_of_device_time'])}% of "
                 "kernel time to an instruction; XProf's hlo_stats cross-check skipped "
                 "(--no-xprof)")
    t = r["timing_s"]
    s.append(f"timing: matching {t['matching']:.2f} s; XProf hlo_stats cross-check "
             f"{t['xprof_hlo_stats']:.2f} s waited for (it converts while the step matches)")
    s.append(f"hlo text: {r['hlo_text']}" if r["hlo_text"] else
             "hlo text: not written (see the program: lines)")
    # names come from the capture: a newline or an escape in one must not split or hide a line
    if r["device"] == "TPU":
        s = [rules.tpu_words(line) for line in s]
    return [rules.printable(line) for line in s]
