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
    ops.csv      per instruction of the chosen program: kernels, GPU time and share
    lines.csv    per Python line (user frame): GPU time and share, kernels, instructions
    how.csv      per program and match class (then all): kernels, GPU time, share, and how much
                 of it rests on low-confidence placements
    kernel_names.csv  per kernel name (no matching involved): family, kernels, GPU time, share
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
import contextlib
import gc
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SIBLING = next((p for p in (HERE.parent / "analyzing-jax-launch-overhead" / "scripts",
                            HERE.parent.parent / "analyzing-jax-launch-overhead" / "scripts")
                if (p / "capture_inputs.py").is_file()), None)
sys.path[:0] = [str(HERE)] + ([str(SIBLING)] if SIBLING else [])

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
PROGRAM_FILE_RE = re.compile(r"^(.*)\((\d+)\)\.hlo_proto\.pb$")


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

@contextlib.contextmanager
def quiet_stderr():
    """XProf's C++ code logs to file descriptor 2; keep its lines out of the user's terminal."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)


def copy_and_convert(xplane: Path, out: Path, use_xprof: bool) -> tuple[Path, dict, float]:
    """Copy the xplane to out/attribution/xplane/ and have XProf write the HLO protos there.
    Returns the copy, {program id: (module name, HloModuleProto bytes)} and XProf's seconds."""
    dest = out / "attribution" / "xplane"
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
            with quiet_stderr():
                raw_to_tool_data.xspace_to_tool_names([str(copy)])
        except Exception as exc:  # noqa: BLE001 - XProf's own failure, said in one sentence
            raise UsageError(f"XProf could not read {xplane.name}: {exc}") from exc
        seconds = time.perf_counter() - t
        import xprotos
        hlo_cls = xprotos.classes()["HloProto"]
        for f in sorted(dest.glob("*.hlo_proto.pb")):
            m = PROGRAM_FILE_RE.match(f.name)
            if m:
                module = hlo_cls.FromString(f.read_bytes()).hlo_module
                protos[int(m.group(2))] = (m.group(1), module)
    return copy, protos, seconds


def load(copy: Path, protos: dict):
    import xplane_reader
    space = xplane_reader.load_space(copy)
    if not protos:
        for pid, (name, blob) in space.hlo_protos().items():
            protos[pid] = (name.rsplit("(", 1)[0], xplane_reader.parse_hlo(blob))
    return space, protos


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
    for line in host.lines:
        for ev in line.events(KERNEL_STATS):
            st = ev.stats
            if "hlo_op" in st and "program_id" in st:
                kernels.append(KernelRow("CPU", line.id, ev.start_ps, ev.duration_ps, ev.name,
                                         st.get("correlation_id"), st.get("hlo_op"),
                                         st.get("program_id"), "cuda_graph_id" in st,
                                         "memcpy_details" in st, cpu=True))
    return kernels, True


# ---------------------------------------------------------------- analyses

def module_fingerprint(module) -> bytes:
    """The module's bytes with its id cleared: equal for one program saved under two ids."""
    copy = type(module)()
    copy.CopyFrom(module)
    copy.id = 0
    return copy.SerializeToString(deterministic=True)


def choose_program(kernels, programs, requested) -> tuple[int, list[str], dict]:
    gpu_time: dict[int, int] = {}
    for k in kernels:
        if k.own_program and k.program_id in programs:
            gpu_time[k.program_id] = gpu_time.get(k.program_id, 0) + k.dur
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


def attribute(kernels, programs, chosen, notes: list) -> dict:
    """Match every kernel; return per-program lookups of instruction source."""
    from hlo_program import Program
    wrapped = {}
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
        km.match(plan, ks)
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
        with quiet_stderr():
            out = raw_to_tool_data.xspace_to_tool_data([str(copy)], "hlo_stats",
                                                       {"use_saved_result": False})
    except Exception as exc:  # noqa: BLE001 - reported, not fatal
        return None, time.perf_counter() - t, f"XProf's hlo_stats failed: {exc}"
    seconds = time.perf_counter() - t
    data = out[0] if isinstance(out, tuple) else out
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
    with open(path, "w", newline="") as fh:
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
    args = ap.parse_args(argv)
    try:
        user_re = re.compile(args.user_re) if args.user_re else None
    except re.error as exc:
        ap.error(f"--user-re is not a regular expression: {exc}")
    if km is None:
        print(f"attribute_kernels: a package is missing ({KM_ERROR}); {INSTALL}",
              file=sys.stderr)
        return 3
    gc.disable()  # many small objects, no cycles (see skip_stats.py)
    t0 = time.perf_counter()
    try:
        files = capture_inputs.resolve(args.capture, run=args.run, host=args.host)
        if files.xplane is None:
            raise UsageError(f"no <host>.xplane.pb for host {files.host} in {files.run_dir}; "
                             "attribution reads the xplane (the trace.json has no HLO)")
        copy, protos, xprof_names_s = copy_and_convert(files.xplane, args.out,
                                                        not args.no_xprof)
        space, protos = load(copy, protos)
        kernels, cpu = collect_kernels(space)
        if not protos:
            raise UsageError(f"{files.xplane.name} holds no HLO programs (no /host:metadata): "
                             "kernels cannot be attributed to instructions or lines")
        if not kernels:
            raise UsageError(f"{files.xplane.name} has no GPU stream events and no XLA:CPU "
                             "thunk events: there are no kernels to attribute")
        chosen, notes, gpu_time = choose_program(kernels, protos, args.program)
    except (capture_inputs.CaptureError, UsageError) as exc:
        print(f"attribute_kernels: {exc}", file=sys.stderr)
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
            print(f"attribute_kernels: {exc}", file=sys.stderr)
            return 1
        raise
    for n in files.notes:
        print(f"attribute_kernels: {n}", file=sys.stderr)
    programs = attribute(kernels, protos, chosen, notes)
    control = sum(1 for k in kernels if k.match == "control")
    kernels = [k for k in kernels if k.match != "control"]
    sources = Sources(programs, user_re)
    t_match = time.perf_counter() - t0
    out = args.out / "attribution"
    written = []
    # kernels.csv
    kernels.sort(key=lambda k: (str(k.device), k.stream, k.start))
    written.append(("kernels.csv", write_kernels(out / "kernels.csv", kernels, sources)))
    # ops.csv and lines.csv: the chosen program's attributed kernels
    mine = [k for k in kernels if k.program_id == chosen and k.instruction]
    attributed = sum(k.dur for k in mine)
    ops: dict[str, list] = {}
    for k in mine:
        o = ops.setdefault(k.instruction, [0, 0, k.category])
        o[0] += 1
        o[1] += k.dur
    prog = programs[chosen]
    op_rows = []
    for name, (n, t, cat) in sorted(ops.items(), key=lambda kv: (-kv[1][1], kv[0])):
        opn, src, user = sources.get(chosen, name)
        op_rows.append((chosen, name, prog.by_name[name].opcode if name in prog.by_name else "",
                        cat, n, us(t), pct(t, attributed), opn, src, user))
    written.append(("ops.csv", write_csv(out / "ops.csv", [
        "program_id", "instruction", "opcode", "category", "kernels", "gpu_us", "gpu_pct",
        "op_name", "source", "user_frame"], op_rows)))
    lines: dict[str, list] = {}
    for ins_name, (n, t, _) in ops.items():  # per instruction, then per line
        user = sources.get(chosen, ins_name)[2]
        entry = lines.setdefault(user, [0, 0, set()])
        entry[0] += n
        entry[1] += t
        entry[2].add(ins_name)
    line_rows = [(u, us(t), pct(t, attributed), n, len(ins))
                 for u, (n, t, ins) in sorted(lines.items(), key=lambda kv: (-kv[1][1], kv[0]))]
    written.append(("lines.csv", write_csv(out / "lines.csv", [
        "user_frame", "gpu_us", "gpu_pct", "kernels", "instructions"], line_rows)))
    # how.csv
    classes = ("exact", "name", "order", "none")
    how_rows = []
    groups: dict = {}
    for k in kernels:
        low = bool(k.instruction) and k.confidence < km.LOW_CONFIDENCE
        for key in (k.program_id, "all"):
            g = groups.get(key)
            if g is None:
                g = groups[key] = {c: [0, 0, 0, 0] for c in classes}
            e = g[k.match]
            e[0] += 1
            e[1] += k.dur
            if low:
                e[2] += 1
                e[3] += k.dur
    for key in sorted((g for g in groups if g != "all"), key=str) + ["all"]:
        g = groups[key]
        total = sum(v[1] for v in g.values())
        for c in classes:
            how_rows.append((key, c, g[c][0], us(g[c][1]), pct(g[c][1], total), g[c][2],
                             us(g[c][3]), pct(g[c][3], total)))
    written.append(("how.csv", write_csv(out / "how.csv", [
        "program_id", "match", "kernels", "gpu_us", "gpu_pct", "low_confidence_kernels",
        "low_confidence_us", "low_confidence_pct"], how_rows)))
    # kernel_names.csv: by kernel name alone, no matching involved
    name_rows = kernel_name_rows(kernels, plans_names(programs))
    written.append(("kernel_names.csv", write_csv(out / "kernel_names.csv", [
        "kernel", "family", "kernels", "gpu_us", "gpu_pct", "gpus", "kernels_per_gpu",
        "gpu_us_per_gpu"], name_rows)))
    # the chosen program's HLO text
    name = protos[chosen][0]
    hlo_txt = out / f"{name}({chosen}).hlo.txt"
    try:
        import hlo_text
        n_lines = hlo_text.write_hlo_text(protos[chosen][1], hlo_txt)
        written.append((hlo_txt.name, n_lines))
    except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
        hlo_txt.unlink(missing_ok=True)
        hlo_txt = None
        notes.append(f"the HLO text was not written: the program could not be printed ({exc})")
    # summary
    total = sum(k.dur for k in kernels)
    coverage = None
    xprof_s = 0.0
    if not args.no_xprof:
        coverage, xprof_s, err = xprof_coverage(copy)
        if err:
            notes.append(err)
    g = groups["all"]
    s = [f"program: {n}" for n in notes]
    if cpu:
        s.append(f"device: CPU capture: {len(kernels)} XLA:CPU thunk events (with hlo_op and "
                 "program_id) on /host:CPU are the kernels; "
                 f"{control} thunks of control instructions (while, call, conditional) contain "
                 "others and are left out")
    s.append(f"kernels: {len(kernels)} on {len({k.device for k in kernels})} device(s), "
             f"{total / 1e6:,.1f} us of kernel time; {sum(1 for k in kernels if k.graph)} "
             "launched inside graphs (command buffers)")
    s.append("match classes (all programs): " + ", ".join(
        f"{c} {g[c][0]} kernels {pct(g[c][1], total)}% of time" for c in classes))
    cg = groups.get(chosen)
    if cg:
        ct = sum(v[1] for v in cg.values())
        s.append(f"match classes ({name}({chosen})): " + ", ".join(
            f"{c} {cg[c][0]} kernels {pct(cg[c][1], ct)}% of time" for c in classes))
    unsaved = [k for k in kernels if k.program_id not in protos]
    if unsaved:
        s.append(f"no HLO: {len(unsaved)} kernels ({pct(sum(k.dur for k in unsaved), total)}% of "
                 f"kernel time) belong to programs {sorted({k.program_id for k in unsaved})} "
                 "whose HLO the capture does not hold: class none")
    for why, label in (("outside", "launched outside any instruction (no hlo_op, a launch of "
                                   "their own: argument copies and the like)"),
                       ("no slot", "no candidate left in their window"),
                       ("", "not matched")):
        none = [k for k in kernels if k.match == "none" and k.why == why]
        if not none:
            continue
        top: dict[str, list] = {}
        for k in none:
            e = top.setdefault(k.name, [0, 0])
            e[0] += 1
            e[1] += k.dur
        s.append(f"none: {len(none)} kernels, {sum(k.dur for k in none) / 1e6:,.1f} us, {label}; "
                 "largest: " + "; ".join(f"{n} x{c} {t / 1e6:,.1f} us" for n, (c, t) in sorted(
                     top.items(), key=lambda kv: -kv[1][1])[:5]))
    attributed_all = [k for k in kernels if k.instruction]
    t_att = sum(k.dur for k in attributed_all)
    low = [k for k in attributed_all if k.confidence < km.LOW_CONFIDENCE]
    t_low = pct(sum(k.dur for k in low), t_att) or "0"
    s.append(f"confidence: {len(low)} attributed kernels, {t_low}% of attributed GPU time, "
             "rest on placements below confidence "
             f"{km.LOW_CONFIDENCE} (weak local agreement with the schedule; kernels.csv "
             "column confidence)")
    n_nouser = n_noframe = t_nouser = t_noframe = 0
    for ins_name, (n, t, _) in ops.items():
        _, src, user = sources.get(chosen, ins_name)
        if not user:
            n_nouser += n
            t_nouser += t
            if not src:
                n_noframe += n
                t_noframe += t
    t_library = t_nouser - t_noframe
    s.append(f"source: {len(mine) - n_nouser} of {len(mine)} attributed kernels of "
             f"{name}({chosen}) have a user frame; {n_noframe} kernels "
             f"({pct(t_noframe, attributed) or '0'}% of its attributed time) belong to "
             "instructions with no source in the HLO, and "
             f"{n_nouser - n_noframe} ({pct(t_library, attributed) or '0'}%) have frames "
             "but none that counts as user code (see --user-re); counted, not guessed")
    ours = pct(total - g["none"][1], total)
    if coverage is not None and total:
        theirs = 100.0 * coverage * 1e6 / total
        verdict = ("ours is not lower" if float(ours) + COVERAGE_TOLERANCE_PCT >= theirs else
                   f"OURS IS LOWER by {theirs - float(ours):.2f} points: see the none lines")
        s.append(f"coverage: XProf's hlo_stats attributes {theirs:.2f}% of this capture's "
                 f"kernel time to HLO ops; this script attributes {ours}% to an instruction "
                 f"(exact + name + order); {verdict}")
    elif args.no_xprof:
        s.append(f"coverage: this script attributes {ours}% of kernel time to an instruction; "
                 "XProf's hlo_stats cross-check skipped (--no-xprof)")
    s.append(f"timing: matching {t_match:.2f} s (XProf's HLO extraction {xprof_names_s:.2f} s of "
             f"it); XProf hlo_stats cross-check {xprof_s:.2f} s")
    s.append(f"hlo text: {hlo_txt.name}" if hlo_txt is not None else
             "hlo text: not written (see the program: lines)")
    (out / "summary.txt").write_text("\n".join(s) + "\n")
    written.insert(0, ("summary.txt", len(s)))
    for f, n in written:
        print(f"wrote {out / f} ({n} {'lines' if f.endswith('.txt') else 'rows'})")
    print(s[0])
    print("Next: how.csv for the class shares, then ops.csv and lines.csv for the top "
          "instructions and Python lines (SKILL.md step 4).")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
