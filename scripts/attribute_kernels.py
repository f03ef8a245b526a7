#!/usr/bin/env python3
"""Every GPU kernel -> HLO instruction -> op_name -> Python line, command buffers included.

Usage:
    python3 -P attribute_kernels.py <xplane.pb | run folder | log folder>
                                    [--program ID] [--user-re REGEX] [--no-xprof]
                                    [--out DIR] [--run NAME] [--host NAME]

Example:
    python3 -P $B/scripts/attribute_kernels.py ~/logs/plugins/profile/2026_02_20_13_54_10

Reads only the .xplane.pb. It first copies it to ./attribution/xplane/ and has XProf write the
`<module>(<id>).hlo_proto.pb` files beside the copy (the capture folder is never written to).
Writes into ./attribution/ (or DIR/attribution/):
    kernels.csv  every GPU event (kernels, memcpys, memsets): its instruction, the inner
                 instruction its label named, match class, confidence, op_name, source, user frame
    ops.csv      per instruction of the chosen program: kernels, GPU time, its share of the
                 program's attributed time and of all GPU time
    lines.csv    per Python line (user frame): GPU time, the same two shares, kernels,
                 instructions
    how.csv      per program and match class (then all): kernels, GPU time, share of the group,
                 and how much of it rests on low-confidence placements
    kernel_names.csv  per kernel name (no matching involved): family, kernels, GPU time, share
                 of all GPU time
    summary.txt  the program chosen and why, class shares, confidence, XProf's coverage next to
                 ours (and whether ours is lower)
    <module>(<id>).hlo.txt  the chosen program's HLO text, printed from the proto
The program with the most GPU time is chosen unless --program names one; every kernel is still
listed. Match classes: exact, name, order, none (SKILL.md step 4; references/attribution.md).
--user-re picks the frame that counts as user code (default: the first frame outside
site-packages and jax). --no-xprof skips the XProf coverage cross-check (and reads the HLO from
the capture directly).
A CPU capture is not an error: its XLA:CPU thunk events are the kernels of device "CPU".

Exit codes: 0 done; 1 the input cannot be used (one sentence says why); 2 usage;
3 a missing package (jax, xprof or protobuf; the message has the install line).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import re
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SIBLING = next((p for p in (HERE.parent / "analyzing-jax-launch-overhead" / "scripts",
                            HERE.parent.parent / "analyzing-jax-launch-overhead" / "scripts")
                if (p / "capture_inputs.py").is_file()), None)
sys.path[:0] = [str(HERE)] + ([str(SIBLING)] if SIBLING else [])

import per_host  # noqa: E402  (sibling skill: the per-host pass)
import trace_rules as rules  # noqa: E402  (sibling skill: the classification rules)
from trace_rules import CONTROL_OPCODES, pct, us, write_csv  # noqa: E402

import capture_inputs  # noqa: E402  (sibling skill)

try:
    import kernel_match as km  # numpy, installed with jax
except ImportError as _exc:  # said in one sentence by main(), exit 3
    km = None
    KM_ERROR = _exc

INSTALL = "pip install -r requirements.txt (jax, jaxlib, xprof, protobuf, numpy)"
# XProf's hlo_stats sums self times rounded to its own precision: differences below this are
# rounding, not coverage.
COVERAGE_TOLERANCE_PCT = 0.01
PROGRAM_FILE_RE = re.compile(r"^(.*)\((\d{1,19})\)\.hlo_proto\.pb$")


FAMILIES = (  # kernel families by name, first match wins (kind from kernel_match first)
    ("collective", "NCCL/RCCL collective"), ("copy", "memcpy"), ("memset", "memset"),
    ("gemm_aux", "split-K reduction"),
)
TRITON_RE = re.compile(r"^(triton|gemm_fusion|fusion_.*triton)")
CONV_RE = re.compile(r"Im2Col|Im3d2Col|cudnn|miopen|conv", re.IGNORECASE)
ATTENTION_RE = re.compile(r"fmha|flash|attn|attention|ck_tile", re.IGNORECASE)


class UsageError(Exception):
    """The input cannot be attributed; the message is one sentence."""


class MissingPackage(Exception):
    pass


# ---------------------------------------------------------------- load

def _user_path(exc, copy: Path, xplane: Path) -> str:
    """XProf's message with the copy's path put back to the user's file (one line)."""
    return rules.printable(str(exc).replace(str(copy), str(xplane)).strip() or
                           type(exc).__name__)


def copy_and_convert(xplane: Path, folder: Path, use_xprof: bool) -> tuple[Path, dict, float]:
    """Copy the xplane to folder/xplane/ and have XProf write the HLO protos there.
    Returns the copy, {program id: (module name, serialized HloProto)} and XProf's seconds."""
    dest = folder / "xplane"
    if dest.exists():
        shutil.rmtree(dest)  # stale protos of another capture would be reused by XProf
    dest.mkdir(parents=True)
    copy = dest / xplane.name
    shutil.copy2(xplane, copy)
    protos: dict[int, tuple[str, bytes]] = {}
    seconds = 0.0
    if use_xprof:
        try:
            from xprof.convert import raw_to_tool_data
        except ImportError as exc:
            raise MissingPackage(f"the xprof package is not installed ({exc}); {INSTALL}") \
                from exc
        t = time.perf_counter()
        try:
            with rules.quiet_fd2():
                raw_to_tool_data.xspace_to_tool_names([str(copy)])
        except Exception as exc:  # noqa: BLE001 - XProf's own failure, said in one sentence
            raise UsageError(f"XProf could not read {xplane}: "
                             f"{_user_path(exc, copy, xplane)}") from exc
        seconds = time.perf_counter() - t
        for f in sorted(dest.glob("*.hlo_proto.pb")):
            m = PROGRAM_FILE_RE.match(f.name)
            if m:
                protos[int(m.group(2))] = (m.group(1), f.read_bytes())
    return copy, protos, seconds


def load(capture, blobs: dict):
    """The capture's xplane (decoded once per process) and its programs, each parsed and
    checked (hlo_program.load): XProf's protos where it wrote them, else the capture's own
    /host:metadata. Returns the space, {id: (name, module)} and {id: Program} of the readable
    programs, and {id: (name, why)} of the others (a refusal each, not the loss of the run)."""
    import xplane_reader
    from hlo_program import ProgramError
    from hlo_program import load as load_program
    space = xplane_reader.space_of(capture)
    if not blobs:
        blobs = {pid: (name.rsplit("(", 1)[0], blob)
                 for pid, (name, blob) in space.hlo_protos().items()}
    protos, built, unreadable = {}, {}, {}
    for pid, (name, blob) in sorted(blobs.items()):
        try:
            prog = load_program(blob, pid)
        except ProgramError as exc:
            unreadable[pid] = (name, rules.printable(exc))
            continue
        protos[pid] = (name, prog.module)
        built[pid] = prog
    return space, protos, built, unreadable


class KernelRow:
    __slots__ = ("device", "stream", "start", "dur", "name", "corr", "hlo_op", "program_id",
                 "own_program", "category", "graph", "instruction", "match", "cpu", "why",
                 "inner", "confidence", "kind", "group")

    def __init__(self, device, stream, start, dur, name, corr, hlo_op, program_id, graph,
                 memcpy, cpu=False):
        self.device = device
        self.stream = stream
        self.start = start
        self.dur = dur
        self.name = name
        self.corr = corr
        self.hlo_op = hlo_op
        self.own_program = program_id is not None
        self.program_id = program_id
        self.graph = graph
        self.category = "memcpy" if memcpy else ""
        self.instruction = ""
        self.match = "none"
        self.why = ""
        self.inner = ""
        self.confidence = 0.0
        self.kind = ""
        self.group = False
        self.cpu = cpu


KERNEL_STATS = frozenset({"correlation_id", "hlo_op", "program_id", "memcpy_details"}) | \
    rules.GRAPH_ID_STATS


def _flat(ordinal, line) -> list[tuple]:
    """One stream's events as the tuples KernelRow takes (without `cpu`)."""
    lid = line.id
    graph_ids = rules.GRAPH_ID_STATS
    return [(ordinal, lid, start, dur, name, st.get("correlation_id"), st.get("hlo_op"),
             st.get("program_id"), not graph_ids.isdisjoint(st), "memcpy_details" in st)
            for name, start, dur, st in line.tuples(KERNEL_STATS)]


def graph_launch_ids(space) -> set:
    """Correlation ids of the host's graph-launch calls (cuGraphLaunch, hipGraphLaunch)."""
    out: set = set()
    for plane in space.planes:
        if plane.name != "/host:CPU":
            continue
        mids = frozenset(m for m, n in plane.event_names.items() if rules.is_graph_launch(n))
        for line in plane.lines:
            for _, _, _, st in line.select(mids, frozenset({"correlation_id"})):
                if "correlation_id" in st:
                    out.add(st["correlation_id"])
    return out


def collect_kernels(space) -> tuple[list, bool]:
    """GPU stream events; for a CPU capture, XLA:CPU thunk events (control thunks left out)."""
    kernels = [KernelRow(*t) for plane in space.gpu_planes() for line in plane.lines
               if line.name.startswith("Stream #") for t in _flat(plane.gpu_ordinal, line)]
    if kernels:
        launched = graph_launch_ids(space)
        if launched:
            for k in kernels:
                k.graph = rules.in_graph(k.graph, k.corr in launched)
    if kernels:
        return kernels, False
    host = space.plane("/host:CPU")
    if host is None:
        return [], False
    runtime_calls = 0
    for line in host.lines:
        for ev in line.events(KERNEL_STATS):
            st = ev.stats
            if rules.is_cpu_thunk(st):
                kernels.append(KernelRow("CPU", line.id, ev.start_ps, ev.duration_ps, ev.name,
                                         st.get("correlation_id"), st.get("hlo_op"),
                                         st.get("program_id"), "cuda_graph_id" in st,
                                         "memcpy_details" in st, cpu=True))
            elif rules.is_gpu_runtime_call(st):
                runtime_calls += 1
    if runtime_calls and not kernels:
        raise UsageError(
            f"{space.path} has {runtime_calls:,} GPU runtime calls on /host:CPU (events with a "
            "correlation id: launches, memcpys) but no GPU stream events: its /device:GPU "
            "planes are missing or empty, so there are no kernels to attribute (it is not a "
            "CPU capture)")
    return kernels, True


# ---------------------------------------------------------------- analyses

def module_fingerprint(module) -> bytes:
    """The module's bytes with its id cleared: equal for one program saved under two ids."""
    copy = type(module)()
    copy.CopyFrom(module)
    copy.id = 0
    return copy.SerializeToString(deterministic=True)


def choose_program(kernels, programs, requested, unreadable=None) -> tuple[int, list[str], dict]:
    unreadable = unreadable or {}
    gpu_time: dict[int, int] = {}
    all_time: dict = {}
    for k in kernels:
        if k.own_program:
            all_time[k.program_id] = all_time.get(k.program_id, 0) + k.dur
            if k.program_id in programs:
                gpu_time[k.program_id] = gpu_time.get(k.program_id, 0) + k.dur
    readable = ", ".join(f"{n}({i})" for i, (n, _) in sorted(programs.items()))
    if requested is not None and requested in unreadable:
        raise UsageError(f"--program {requested} cannot be attributed: "
                         f"{unreadable[requested][1]}; readable programs: {readable}")
    top = max(sorted(all_time, key=str), key=lambda p: all_time[p]) if all_time else None
    if requested is None and top in unreadable:
        share = 100.0 * all_time[top] / (sum(k.dur for k in kernels) or 1)
        raise UsageError(f"cannot attribute the program with the most kernel time "
                         f"({share:.1f}%): {unreadable[top][1]}; pass --program ID to attribute "
                         f"another ({readable})")
    notes = []
    groups: dict[bytes, list[int]] = {}
    for pid, (_, module) in programs.items():
        groups.setdefault(module_fingerprint(module), []).append(pid)
    same = {pid: sorted(g) for g in groups.values() if len(g) > 1 for pid in g}
    if requested is not None:
        if requested not in programs:
            ids = ", ".join(f"{n}({i})" for i, (n, _) in sorted(programs.items()))
            raise UsageError(f"--program {requested} is not a program of this capture; "
                             f"programs: {ids}")
        chosen = requested
        notes.append(f"{programs[chosen][0]}({chosen}) chosen by --program")
    elif gpu_time:
        chosen = max(sorted(gpu_time), key=lambda p: gpu_time[p])
        total = sum(k.dur for k in kernels)
        notes.append(f"{programs[chosen][0]}({chosen}) chosen: the most kernel time, "
                     f"{100.0 * gpu_time[chosen] / total:.1f}% of all kernel time")
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
    return chosen, notes, gpu_time


def attribute(kernels, programs, chosen, notes: list, executions: dict,
              built: dict | None = None) -> dict:
    """Match every kernel; return per-program lookups of instruction source. Fills
    `executions`: per device, the chosen program's executions covered, its events, and the
    events one execution expects (required only, and all). `built`: the programs already
    wrapped (and checked) by load()."""
    from hlo_program import Program
    wrapped = dict(built or {})
    plans: dict = {}
    for k in kernels:
        if k.program_id is None:
            k.program_id = chosen
    by: dict[tuple, list] = {}
    for k in kernels:
        if k.program_id not in programs:
            k.match, k.why = "none", "no hlo"  # its program's HLO is not in the capture
            continue
        by.setdefault((k.device, k.program_id), []).append(k)
    for (_, pid), ks in sorted(by.items(), key=lambda kv: str(kv[0])):
        if pid not in wrapped:
            wrapped[pid] = Program(programs[pid][1], pid)
        prog = wrapped[pid]
        if ks[0].cpu:
            for k in ks:
                ins = prog.by_name.get(k.hlo_op)
                k.category = "compute"
                if ins is not None and ins.opcode in CONTROL_OPCODES:
                    k.match = "control"  # a while/call thunk: its body's thunks are counted
                elif ins is not None:
                    k.instruction, k.match, k.confidence = k.hlo_op, "exact", 1.0
            continue
        shared: dict = {}
        for k in ks:
            if k.corr is not None:
                shared[k.corr] = shared.get(k.corr, 0) + 1
        ks.sort(key=lambda k: (_as_int(k.corr), k.start))
        kind_of = rules.kernel_kind
        for k in ks:  # the fields the matcher reads (see kernel_match.Kernel)
            k.kind = kind = kind_of(k.name, k.hlo_op, k.category == "memcpy")
            k.category = rules.CATEGORY_OF_KIND.get(kind, "compute")
            # one launch for the matcher: a graph, or events sharing a correlation id
            k.group = k.graph or (k.corr is not None and shared[k.corr] > 1)
        plan = plans.get(pid)
        if plan is None:
            labels: dict[str, int] = {}
            placed = 0  # events launched by the program (argument copies left out)
            for (_, p2), ks2 in by.items():
                if p2 != pid:
                    continue
                ids: dict = {}
                for k2 in ks2:
                    ids[k2.corr] = ids.get(k2.corr, 0) + 1
                for k2 in ks2:
                    if k2.hlo_op:
                        labels[k2.hlo_op] = labels.get(k2.hlo_op, 0) + 1
                        placed += 1
                    elif k2.graph or (k2.corr is not None and ids[k2.corr] > 1):
                        placed += 1
            plan = plans[pid] = km.Plan(prog, labels, placed)
            for w, n in sorted(plan.inferred_trips.items()):
                notes.append(f"program {pid}: while loop {w} has no known trip count; "
                             f"{n} iterations per execution inferred from the labels")
        covered = km.match(plan, ks)
        if pid == chosen:
            required = sum(1 for e in plan.events if not e.optional)
            executions[ks[0].device] = {
                "executions": round(covered),
                "events": sum(1 for k in ks if k.why != "outside"),
                "expected_min": required, "expected_max": len(plan.events)}
    for pid in programs:
        if pid not in wrapped:
            wrapped[pid] = Program(programs[pid][1], pid)
    return wrapped


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
        out = self.cache.get(key)
        if out is None:
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


def op_name(prog, ins) -> str:
    if ins.metadata.op_name:
        return ins.metadata.op_name
    for cid in ins.called_computation_ids:
        comp = prog.computations.get(cid)
        if comp is None:
            continue
        for inner in reversed(comp.instructions):
            if inner.metadata.op_name:
                return inner.metadata.op_name
    return ""


def xprof_coverage(copy: Path) -> tuple[float | None, float, str]:
    """XProf's hlo_stats total self time (us) on this capture, and its seconds."""
    import json

    from xprof.convert import raw_to_tool_data
    t = time.perf_counter()
    try:
        with rules.quiet_fd2():
            out = raw_to_tool_data.xspace_to_tool_data([str(copy)], "hlo_stats",
                                                       {"use_saved_result": False})
    except Exception as exc:  # noqa: BLE001 - reported, not fatal
        return None, time.perf_counter() - t, f"XProf's hlo_stats failed: {exc}"
    seconds = time.perf_counter() - t
    data = out[0] if isinstance(out, tuple) else out
    if isinstance(data, bytes):
        data = data.decode("utf-8", "replace")
    # kept beside the copy for the roofline step, which would otherwise convert it again
    (copy.parent / XPROF_HLO_STATS).write_text(data if isinstance(data, str) else "",
                                               encoding="utf-8", errors="replace")
    try:
        table = json.loads(data)
        cols = [c["id"] for c in table["cols"]]
        i = cols.index("total_self_time")
        total = sum(float(r["c"][i]["v"] or 0) for r in table["rows"])
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        return None, seconds, f"XProf's hlo_stats had an unexpected shape: {exc}"
    return total, seconds, ""


def kernel_family(name: str, xla_names: set) -> str:
    """What kind of code a kernel name says it is (no matching involved)."""
    kind = rules.kernel_kind(name)
    for k, fam in FAMILIES:
        if kind == k:
            return fam
    norm = km.normalize_kernel_name(name)
    if TRITON_RE.match(norm):
        return "Triton kernel (XLA)"
    if kind == "gemm":
        return "library GEMM (cuBLAS / hipBLASLt)"
    if norm in xla_names or "fusion" in norm:
        return "XLA fusion"
    if CONV_RE.search(norm):
        return "convolution library"
    if ATTENTION_RE.search(norm):
        return "attention library"
    return "other kernel"


def plans_names(programs) -> set:
    """Sanitized names of every instruction of every program: what XLA's own kernels are called."""
    out = set()
    for prog in programs.values():
        out.update(km.sanitize(n) for n in prog.by_name)
    return out


def kernel_name_rows(kernels, xla_names: set) -> list[tuple]:
    total = sum(k.dur for k in kernels)
    by: dict[str, list] = {}
    for k in kernels:
        e = by.get(k.name)
        if e is None:
            e = by[k.name] = [0, 0, set()]
        e[0] += 1
        e[1] += k.dur
        e[2].add(k.device)
    rows = []
    for name, (n, t, devs) in sorted(by.items(), key=lambda kv: (-kv[1][1], kv[0])):
        g = len(devs)
        rows.append((name, kernel_family(name, xla_names), n, us(t), pct(t, total), g,
                     f"{n / g:.1f}", us(t / g)))
    return rows


# ---------------------------------------------------------------- writers

def write_kernels(path: Path, kernels, sources) -> int:
    """kernels.csv, the large table: strings repeat, so each is quoted once."""
    quoted: dict = {}

    def q(v):
        r = quoted.get(v)
        if r is None:
            r = quoted[v] = rules.quote(v)
        return r
    src: dict = {}
    with open(path, "w", newline="", encoding="utf-8") as fh:
        fh.write("device,stream,start_us,dur_us,kernel,correlation_id,hlo_op,program_id,"
                 "instruction,inner_instruction,match,confidence,op_name,source,user_frame,"
                 "category,graph\n")
        buf = []
        for k in kernels:
            key = (k.program_id, k.instruction)
            tail = src.get(key)
            if tail is None:
                opn, source, user = sources.get(k.program_id, k.instruction)
                tail = src[key] = (f"{q(k.instruction)},", f",{q(opn)},{q(source)},{q(user)}")
            conf = f"{k.confidence:.3f}" if k.instruction else "0"
            buf.append(f"{k.device},{k.stream},{k.start / 1e6:.3f},{k.dur / 1e6:.3f},"
                       f"{quoted.get(k.name) or q(k.name)},{'' if k.corr is None else k.corr},"
                       f"{quoted.get(k.hlo_op or '') or q(k.hlo_op or '')},{k.program_id},"
                       f"{tail[0]}{q(k.inner)},{k.match},{conf}{tail[1]},{k.category},"
                       f"{1 if k.graph else 0}\n")
            if len(buf) >= 10_000:
                fh.write("".join(buf))
                buf.clear()
        fh.write("".join(buf))
    return len(kernels)


CLASSES = ("exact", "name", "order", "none")
NONE_REASONS = (("outside", "launched outside any instruction (no hlo_op, a launch of their own: "
                 "argument copies and the like)"),
                ("no slot", "no candidate left in their window"),
                ("", "not matched"))
RESULT_FILE = "attribute_kernels.json"
XPROF_HLO_STATS = "hlo_stats.json"  # XProf's hlo_stats output, in attribution/xplane/


@dataclasses.dataclass
class Options:
    program: int | None = None
    user_re: re.Pattern | None = None
    use_xprof: bool = True


# What a program's name may keep in a file name: the rest becomes "_" (a name from a capture
# could hold "/" or "..", which must never lead outside attribution/), and 100 characters.
UNSAFE_FILE_CHARS_RE = re.compile(r"[^A-Za-z0-9_.+=-]")
MAX_FILE_STEM = 100


def safe_file_name(name: str) -> str:
    """A program's name as part of a file name in attribution/: letters, digits and _.+=-,
    never starting with a dot, at most MAX_FILE_STEM characters."""
    stem = UNSAFE_FILE_CHARS_RE.sub("_", name)[:MAX_FILE_STEM].lstrip(".")
    return stem or "program"


def figure(value, unit: str, label: str) -> dict:
    """One figure a report may quote: its value, unit and how it is known."""
    return {"value": value, "unit": unit, "label": label}


def run(capture, out: Path, opts: Options) -> tuple[dict, list]:
    """Step 4 on a capture (capture_inputs.Capture, shared with the other steps of this process):
    writes out/attribution/ whole or not at all; returns the result (also written as
    attribute_kernels.json) and the (file, rows) written."""
    files = capture.files
    if files.xplane is None:
        raise UsageError(f"no <host>.xplane.pb for host {files.host} in {files.run_dir}; "
                         "attribution reads the xplane (the trace.json has no HLO)")
    t0 = time.perf_counter()
    import xplane_reader
    # The user's file through our own reader first: a file that is not a sound xplane is said
    # in one sentence naming it, before anything is copied or XProf reads it.
    space = xplane_reader.space_of(capture)
    if not space.hlo_protos():
        raise UsageError(f"{files.xplane} holds no HLO programs (no /host:metadata): "
                         "kernels cannot be attributed to instructions or lines")
    kernels, cpu = collect_kernels(space)
    if not kernels:
        raise UsageError(f"{files.xplane} has no GPU stream events and no XLA:CPU "
                         "thunk events: there are no kernels to attribute")
    with rules.atomic_folder(out / "attribution") as tmp:
        copy, blobs, xprof_names_s = copy_and_convert(files.xplane, tmp, opts.use_xprof)
        space, protos, built, unreadable = load(capture, blobs)
        if not protos:
            _, why = next(iter(unreadable.values()))
            raise UsageError(f"no program in {files.xplane} can be attributed: {why}" +
                             (f" (and {len(unreadable) - 1} more unreadable)"
                              if len(unreadable) > 1 else ""))
        chosen, notes, _ = choose_program(kernels, protos, opts.program, unreadable)
        executions: dict = {}
        programs = attribute(kernels, protos, chosen, notes, executions, built)
        control = sum(1 for k in kernels if k.match == "control")
        kernels = [k for k in kernels if k.match != "control"]
        sources = Sources(programs, opts.user_re)
        t_match = time.perf_counter() - t0
        kernels.sort(key=lambda k: (str(k.device), k.stream, k.start))
        written = [("kernels.csv", write_kernels(tmp / "kernels.csv", kernels, sources))]
        ops = op_totals(kernels, chosen)
        written += write_op_and_line_tables(tmp, ops, chosen, programs[chosen], sources,
                                            sum(k.dur for k in kernels))
        groups = class_totals(kernels)
        written.append(("how.csv", write_csv(tmp / "how.csv", [
            "program_id", "match", "kernels", "gpu_us", "pct_of_group", "low_confidence_kernels",
            "low_confidence_us", "low_confidence_pct_of_group"], how_rows(groups))))
        written.append(("kernel_names.csv", write_csv(tmp / "kernel_names.csv", [
            "kernel", "family", "kernels", "gpu_us", "pct_of_gpu_time", "gpus", "kernels_per_gpu",
            "gpu_us_per_gpu"], kernel_name_rows(kernels, plans_names(programs)))))
        name = protos[chosen][0]
        hlo_name = f"{safe_file_name(name)}({chosen}).hlo.txt"
        refusals = [f"cannot attribute the kernels of program {n}({p}) because {why}"
                    for p, (n, why) in sorted(unreadable.items())]
        try:
            import hlo_text
            written.append((hlo_name, hlo_text.write_hlo_text(protos[chosen][1],
                                                              tmp / hlo_name)))
        except (OSError, ValueError, KeyError, IndexError, TypeError, RecursionError) as exc:
            (tmp / hlo_name).unlink(missing_ok=True)
            hlo_name = None
            notes.append(f"the HLO text was not written: the program could not be printed "
                         f"({exc})")
            refusals.append(f"cannot write the HLO text of {name}({chosen}) because the program "
                            f"could not be printed ({exc})")
        coverage, xprof_s = None, 0.0
        if opts.use_xprof:
            coverage, xprof_s, err = xprof_coverage(copy)
            if err:
                notes.append(_user_path(err, copy, files.xplane))
        result = build_result(
            files=files, kernels=kernels, cpu=cpu, control=control, chosen=chosen, name=name,
            notes=notes, protos=protos, groups=groups, ops=ops, sources=sources,
            coverage=coverage, opts=opts, hlo_name=hlo_name, refusals=refusals,
            unreadable=unreadable,
            executions=executions,
            timing={"matching": round(t_match, 3), "xprof_extraction": round(xprof_names_s, 3),
                    "xprof_hlo_stats": round(xprof_s, 3)})
        result["tables"] = {f: n for f, n in written}
        lines = render_summary(result)
        (tmp / "summary.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        (tmp / RESULT_FILE).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n",
                                       encoding="utf-8")
        written[:0] = [("summary.txt", len(lines)), (RESULT_FILE, 1)]
    return result, written


def op_totals(kernels, chosen) -> dict:
    """instruction -> [kernels, GPU ps, category] over the chosen program's attributed kernels."""
    ops: dict[str, list] = {}
    for k in kernels:
        if k.program_id == chosen and k.instruction:
            o = ops.get(k.instruction)
            if o is None:
                o = ops[k.instruction] = [0, 0, k.category]
            o[0] += 1
            o[1] += k.dur
    return ops


def write_op_and_line_tables(folder: Path, ops: dict, chosen, prog, sources,
                             gpu_time: int) -> list:
    """ops.csv and lines.csv, each share twice: of the chosen program's attributed kernel time
    (`pct_of_attributed`) and of all GPU event time (`pct_of_gpu_time`, as kernel_names.csv)."""
    attributed = sum(t for _, t, _ in ops.values())
    op_rows = []
    for name, (n, t, cat) in sorted(ops.items(), key=lambda kv: (-kv[1][1], kv[0])):
        opn, src, user = sources.get(chosen, name)
        op_rows.append((chosen, name, prog.by_name[name].opcode if name in prog.by_name else "",
                        cat, n, us(t), pct(t, attributed), pct(t, gpu_time), opn, src, user))
    lines: dict[str, list] = {}
    for ins_name, (n, t, _) in ops.items():  # per instruction, then per line
        entry = lines.setdefault(sources.get(chosen, ins_name)[2], [0, 0, set()])
        entry[0] += n
        entry[1] += t
        entry[2].add(ins_name)
    line_rows = [(u, us(t), pct(t, attributed), pct(t, gpu_time), n, len(ins))
                 for u, (n, t, ins) in sorted(lines.items(), key=lambda kv: (-kv[1][1], kv[0]))]
    return [
        ("ops.csv", write_csv(folder / "ops.csv", [
            "program_id", "instruction", "opcode", "category", "kernels", "gpu_us",
            "pct_of_attributed", "pct_of_gpu_time", "op_name", "source", "user_frame"], op_rows)),
        ("lines.csv", write_csv(folder / "lines.csv", [
            "user_frame", "gpu_us", "pct_of_attributed", "pct_of_gpu_time", "kernels",
            "instructions"], line_rows))]


def class_totals(kernels) -> dict:
    """program id (and "all") -> class -> [kernels, ps, low-confidence kernels, their ps]."""
    groups: dict = {}
    low_conf = km.LOW_CONFIDENCE
    for k in kernels:
        low = bool(k.instruction) and k.confidence < low_conf
        for key in (k.program_id, "all"):
            g = groups.get(key)
            if g is None:
                g = groups[key] = {c: [0, 0, 0, 0] for c in CLASSES}
            e = g[k.match]
            e[0] += 1
            e[1] += k.dur
            if low:
                e[2] += 1
                e[3] += k.dur
    return groups


def how_rows(groups) -> list[tuple]:
    rows = []
    for key in sorted((g for g in groups if g != "all"), key=str) + ["all"]:
        g = groups[key]
        total = sum(v[1] for v in g.values())
        for c in CLASSES:
            rows.append((key, c, g[c][0], us(g[c][1]), pct(g[c][1], total), g[c][2],
                         us(g[c][3]), pct(g[c][3], total)))
    return rows


def _classes_json(g) -> dict:
    total = sum(v[1] for v in g.values())
    return {c: {"kernels": g[c][0], "gpu_us": round(g[c][1] / 1e6, 3),
                "pct_of_group": round(100.0 * g[c][1] / total, 2) if total else 0.0}
            for c in CLASSES}


def build_result(*, files, kernels, cpu, control, chosen, name, notes, protos, groups, ops,
                 sources, coverage, opts, hlo_name, refusals, timing, executions,
                 unreadable=()) -> dict:
    """Everything summary.txt says, and more, as data (fields: references/scratch-layout.md)."""
    total = sum(k.dur for k in kernels)
    g = groups["all"]
    none_ps = g["none"][1]
    ours = round(100.0 * (total - none_ps) / total, 2) if total else 0.0
    fig = {
        "kernels": figure(len(kernels), "count", "measured"),
        "devices": figure(len({k.device for k in kernels}), "count", "measured"),
        "kernel_time_us": figure(round(total / 1e6, 3), "us", "measured"),
        "graph_kernels": figure(sum(1 for k in kernels if k.graph), "count", "measured"),
        "attributed_pct_of_gpu_time": figure(ours, "pct", "inferred"),
    }
    attributed_all = [k for k in kernels if k.instruction]
    t_att = sum(k.dur for k in attributed_all)
    low = [k for k in attributed_all if k.confidence < km.LOW_CONFIDENCE]
    fig["low_confidence_kernels"] = figure(len(low), "count", "inferred")
    fig["low_confidence_pct_of_all_attributed"] = figure(
        round(100.0 * sum(k.dur for k in low) / t_att, 2) if t_att else 0.0, "pct", "inferred")
    none = []
    for why, label in NONE_REASONS:
        ks = [k for k in kernels if k.match == "none" and k.why == why]
        if not ks:
            continue
        top: dict[str, list] = {}
        for k in ks:
            e = top.setdefault(k.name, [0, 0])
            e[0] += 1
            e[1] += k.dur
        none.append({"why": why or "unmatched", "label": label, "kernels": len(ks),
                     "gpu_us": round(sum(k.dur for k in ks) / 1e6, 3),
                     "largest": [{"kernel": n, "count": c, "gpu_us": round(t / 1e6, 3)}
                                 for n, (c, t) in sorted(top.items(),
                                                         key=lambda kv: -kv[1][1])[:5]]})
    unsaved = [k for k in kernels if k.program_id not in protos]
    attributed = sum(t for _, t, _ in ops.values())
    n_nouser = n_noframe = t_nouser = t_noframe = 0
    for ins_name, (n, t, _) in ops.items():
        _, src, user = sources.get(chosen, ins_name)
        if not user:
            n_nouser += n
            t_nouser += t
            if not src:
                n_noframe += n
                t_noframe += t
    n_mine = sum(n for n, _, _ in ops.values())
    checks = []
    cov = {"ours_pct_of_gpu_time": ours, "xprof_pct_of_gpu_time": None, "verdict": None}
    if coverage is not None and total:
        theirs = round(100.0 * coverage * 1e6 / total, 2)
        lower = ours + COVERAGE_TOLERANCE_PCT < theirs
        cov.update(xprof_pct_of_gpu_time=theirs, verdict=(
            f"OURS IS LOWER by {theirs - ours:.2f} points: see the none lines" if lower
            else "ours is not lower"))
        fig["xprof_hlo_stats_pct_of_gpu_time"] = figure(theirs, "pct", "read")
        checks.append({"name": "coverage at least XProf's hlo_stats",
                       "status": "fail" if lower else "pass",
                       "detail": f"ours {ours:.2f}%, XProf's {theirs:.2f}%"})
    else:
        checks.append({"name": "coverage at least XProf's hlo_stats", "status": "not checkable",
                       "detail": "--no-xprof" if not opts.use_xprof else
                       "XProf's hlo_stats gave no figure"})
    missing = [k for k in unsaved if k.program_id not in unreadable]
    if missing:
        refusals.append(f"cannot attribute {len(missing)} kernels because their programs "
                        f"{sorted({k.program_id for k in missing})} have no HLO in the capture")
    return {
        "step": "attribute_kernels", "status": "done",
        "capture": {"xplane": str(files.xplane), "host": files.host, "run": files.run_dir.name},
        "program": {"id": chosen, "name": name, "notes": notes},
        "device": "CPU" if cpu else "GPU", "control_thunks_left_out": control,
        "figures": fig,
        "classes": {"all": _classes_json(g),
                    **({str(chosen): _classes_json(groups[chosen])} if chosen in groups else {})},
        "none": none,
        "no_hlo": {"kernels": len(unsaved),
                   "pct_of_gpu_time": round(100.0 * sum(k.dur for k in unsaved) / total, 2)
                   if total else 0,
                   "programs": sorted({k.program_id for k in unsaved})} if unsaved else None,
        "source": {"kernels": n_mine, "with_user_frame": n_mine - n_nouser,
                   "no_source_kernels": n_noframe,
                   "no_source_pct_of_attributed": round(100.0 * t_noframe / attributed, 2)
                   if attributed else 0,
                   "library_only_kernels": n_nouser - n_noframe,
                   "library_only_pct_of_attributed": round(
                       100.0 * (t_nouser - t_noframe) / attributed, 2)
                   if attributed else 0},
        "coverage": cov, "checks": checks, "refusals": refusals,
        "low_confidence_below": km.LOW_CONFIDENCE,
        "timing_s": timing, "hlo_text": hlo_name,
        "executions": {str(d): e for d, e in sorted(executions.items(), key=lambda kv: str(kv[0]))},
    }


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
        c = r["classes"].get(key)
        if c:
            s.append(f"match classes ({label}): " + ", ".join(
                f"{k} {c[k]['kernels']} kernels {_p(c[k]['pct_of_group'])}% of time"
                for k in CLASSES))
    nh = r["no_hlo"]
    if nh:
        s.append(f"no HLO: {nh['kernels']} kernels ({_p(nh['pct_of_gpu_time'])}% of kernel "
                 f"time) belong to programs {nh['programs']} whose HLO the capture does not "
                 "hold: class none")
    for n in r["none"]:
        s.append(f"none: {n['kernels']} kernels, {n['gpu_us']:,.1f} us, {n['label']}; "
                 "largest: " + "; ".join(f"{e['kernel']} x{e['count']} {e['gpu_us']:,.1f} us"
                                         for e in n["largest"]))
    s.append(f"confidence: {f['low_confidence_kernels']['value']} attributed kernels "
             f"({_p(f['low_confidence_pct_of_all_attributed']['value'])}% of the attributed "
             f"GPU time) are placed with confidence below {r['low_confidence_below']} (weak "
             "local agreement with the schedule; kernels.csv column confidence, how.csv "
             "low_confidence_*); the rest at or above it")
    src = r["source"]
    s.append(f"source: {src['with_user_frame']} of {src['kernels']} attributed kernels of "
             f"{prog} have a user frame; {src['no_source_kernels']} kernels "
             f"({_p(src['no_source_pct_of_attributed'])}% of its attributed time) belong to "
             f"instructions with no source in the HLO, and {src['library_only_kernels']} "
             f"({_p(src['library_only_pct_of_attributed'])}%) have frames but none that counts "
             "as user code (see --user-re); counted, not guessed")
    cov = r["coverage"]
    if cov["xprof_pct_of_gpu_time"] is not None:
        s.append(f"coverage: XProf's hlo_stats attributes "
                 f"{_p(cov['xprof_pct_of_gpu_time'])}% of this capture's kernel time to HLO "
                 f"ops; this script attributes {_p(cov['ours_pct_of_gpu_time'])}% to an "
                 f"instruction (exact + name + order); {cov['verdict']}")
    else:
        s.append(f"coverage: this script attributes {_p(cov['ours_pct_of_gpu_time'])}% of "
                 "kernel time to an instruction; XProf's hlo_stats cross-check skipped "
                 "(--no-xprof)")
    t = r["timing_s"]
    s.append(f"timing: matching {t['matching']:.2f} s (XProf's HLO extraction "
             f"{t['xprof_extraction']:.2f} s of it); XProf hlo_stats cross-check "
             f"{t['xprof_hlo_stats']:.2f} s")
    s.append(f"hlo text: {r['hlo_text']}" if r["hlo_text"] else
             "hlo text: not written (see the program: lines)")
    # names come from the capture: a newline or an escape in one must not split or hide a line
    return [rules.printable(line) for line in s]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[1:]))
    ap.add_argument("capture")
    ap.add_argument("--program", type=int)
    ap.add_argument("--user-re", help="regular expression: frames whose file matches are user "
                    "code (default: the first frame outside site-packages and jax)")
    ap.add_argument("--no-xprof", action="store_true",
                    help="skip XProf (its HLO protos and its coverage cross-check)")
    ap.add_argument("--out", type=Path, default=Path("."))
    ap.add_argument("--run")
    ap.add_argument("--host")
    per_host.add_arguments(ap)
    args = ap.parse_args(argv)
    fanned = per_host.maybe_fan_out("attribute_kernels", __file__, argv, args.capture, args.run,
                                   args.host, args.out, args.jobs)
    if fanned is not None:
        return fanned
    try:
        user_re = re.compile(args.user_re) if args.user_re else None
    except re.error as exc:
        ap.error(f"--user-re is not a regular expression: {exc}")
    if km is None:
        print(f"attribute_kernels: a package is missing ({KM_ERROR}); {INSTALL}",
              file=sys.stderr)
        return 3
    gc.disable()  # many small objects, no cycles (see skip_stats.py)
    try:
        capture = capture_inputs.open_capture(args.capture, run=args.run, host=args.host)
        for n in capture.files.notes:
            print(f"attribute_kernels: {n}", file=sys.stderr)
        result, written = run(capture, args.out, Options(args.program, user_re,
                                                          not args.no_xprof))
    except (capture_inputs.CaptureError, UsageError) as exc:
        print(f"attribute_kernels: {rules.printable(exc)}", file=sys.stderr)
        return 1
    except OSError as exc:  # the scratch folder: permissions, a full disk
        print(f"attribute_kernels: cannot write into {rules.printable(args.out)}: "
              f"{exc.strerror or exc}", file=sys.stderr)
        return 1
    except MissingPackage as exc:
        print(f"attribute_kernels: {exc}", file=sys.stderr)
        return 3
    except ImportError as exc:
        print(f"attribute_kernels: a package is missing ({exc}); {INSTALL}", file=sys.stderr)
        return 3
    except Exception as exc:  # noqa: BLE001 - reader errors are one sentence
        import xplane_reader
        import xprotos
        if isinstance(exc, xprotos.MissingDependency):
            print(f"attribute_kernels: {exc}", file=sys.stderr)
            return 3
        if isinstance(exc, xplane_reader.XPlaneError):
            print(f"attribute_kernels: {rules.printable(exc)}", file=sys.stderr)
            return 1
        raise
    out = args.out / "attribution"
    for f, n in written:
        print(f"wrote {out / f} ({n} {'lines' if f.endswith('.txt') else 'rows'})")
    print(f"program: {rules.printable(result['program']['notes'][0])}")
    print("Next: how.csv for the class shares, then ops.csv and lines.csv for the top "
          "instructions and Python lines (SKILL.md step 4).")
    return 0


if __name__ == "__main__":
    raise SystemExit(rules.run_main("attribute_kernels", main))
