"""What step 4 reads of a capture before matching: its GPU events as kernel_match.Kernel records
(`collect_kernels`; on a CPU capture its XLA:CPU thunk events), the program each event belongs
to (`assign_programs`), the host's execution events (`host_record`), the program and GPU each
execution ran (`map_executions`) and how many times each program ran on each GPU
(`count_executions`)."""

from __future__ import annotations

import bisect
import itertools
import re

import numpy as np

from jaxperf.match.kernel_match import Kernel
from tracekit import gpu as gpu_rules
from tracekit import step_cli, trace_rules
from tracekit.records import ProgramRun
from tracekit.step_cli import progress

KERNEL_STATS = frozenset({"correlation_id", "hlo_op", "program_id", "memcpy_details",
                          "hlo_module"}) | \
    gpu_rules.GRAPH_ID_STATS


def _stream_kernels(ordinal, line) -> list:
    """One stream's events as kernel_match.Kernel records, built from the line's columns."""
    c = line.columns(KERNEL_STATS)
    st, has = c.stats, c.present
    graph = np.zeros(len(c.mid), bool)
    for k in gpu_rules.GRAPH_ID_STATS:
        graph |= has[k]
    return list(map(Kernel, itertools.repeat(ordinal), itertools.repeat(line.id),
                    c.start.tolist(), c.dur.tolist(), c.names(), st["correlation_id"],
                    st["hlo_op"], st["program_id"], graph.tolist(),
                    has["memcpy_details"].tolist(), st["hlo_module"]))


def collect_kernels(space, ordinals=None) -> tuple[list, bool]:
    """GPU stream events (of the GPUs `ordinals` alone where given: a share of a GPU capture);
    for a CPU capture, XLA:CPU thunk events (control thunks left out)."""
    kernel = Kernel
    kernels = []
    ordinals = None if ordinals is None else set(ordinals)  # looked up once a plane
    for plane in space.gpu_planes():
        if ordinals is not None and plane.gpu_ordinal not in ordinals:
            continue
        progress("collecting each GPU's kernels", len(kernels), unit="kernels so far")
        for line in plane.lines:
            if line.name.startswith("Stream #"):
                kernels += _stream_kernels(plane.gpu_ordinal, line)
    if kernels or ordinals is not None:
        return kernels, False
    host = space.plane("/host:CPU")
    if host is None:
        return [], False
    runtime_calls = 0
    for line in host.lines:
        for ev in line.events(KERNEL_STATS):
            st = ev.stats
            if gpu_rules.is_cpu_thunk(st):
                kernels.append(kernel("CPU", line.id, ev.start_ps, ev.duration_ps, ev.name,
                                      st.get("correlation_id"), st.get("hlo_op"),
                                      st.get("program_id"), "cuda_graph_id" in st,
                                      "memcpy_details" in st, st.get("hlo_module"), cpu=True))
            elif gpu_rules.is_gpu_runtime_call(st):
                runtime_calls += 1
    if runtime_calls and not kernels:
        raise step_cli.StepError(
            f"{space.path} has {runtime_calls:,} GPU runtime calls on /host:CPU (events with a "
            "correlation id: launches, memcpys) but no GPU stream events: its /device:GPU "
            "planes are missing or empty, so there are no kernels to attribute (it is not a "
            "CPU capture)")
    return kernels, True


# ---------------------------------------------------------------- executions

OUTSIDE = "(outside programs)"  # how.csv / programs.csv key of events launched by no program
# The host's execution events (XLA's GPU runtime, one per execution per GPU): the thunk loop,
# `[<ordinal>] GpuExecutable::ExecuteThunks` (stat module_name), and inside it
# `<module>:XLA GPU module`; either may be alone (capture-format.md, execution chain).
EXECUTE_THUNKS_RE = re.compile(r"^(?:\[(\d+)\] )?GpuExecutable::ExecuteThunks$")
MODULE_EVENT_SUFFIX = ":XLA GPU module"
EXECUTION_STATS = frozenset({"module_name", "program_id", "correlation_id"})


def mark_graph_launches(kernels, launched: set) -> None:
    """A GPU event is in a graph where it carries a graph id or the host launched its
    correlation id as a graph (`launched`: host_record's)."""
    if launched:
        for k in kernels:
            k.graph = gpu_rules.in_graph(k.graph, k.corr in launched)


def assign_programs(kernels, programs, chosen) -> None:
    """Give each event without a program id its program: an argument copy (a memcpy with no
    hlo_op, no hlo_module, not in a graph: trace_rules.is_argument_copy) belongs to none
    (program_id None: OUTSIDE, class none, why outside); another takes the one program its
    hlo_module names, else the chosen program."""
    by_name: dict[str, list] = {}
    for pid, (name, _) in programs.items():
        by_name.setdefault(name, []).append(pid)
    for k in kernels:
        if k.program_id is not None:
            continue
        if not k.cpu:
            kind = gpu_rules.kernel_kind(k.name, k.hlo_op, k.category == "memcpy")
            category = gpu_rules.CATEGORY_OF_KIND.get(kind, "compute")
            if not k.module and trace_rules.is_argument_copy(category, k.hlo_op, k.graph):
                k.category, k.match, k.why = category, "none", "outside"
                continue
        ids = by_name.get(k.module) if k.module else None
        k.program_id = ids[0] if ids and len(ids) == 1 else chosen


def host_record(space) -> tuple[list[ProgramRun], list[tuple], set]:
    """One pass over the host plane: every execution it recorded (per host line, each
    ExecuteThunks event, and each `<module>:XLA GPU module` event that no ExecuteThunks of its
    line holds: the same execution), (start, line, correlation id) of every event with a
    correlation id (the runtime calls that launch GPU events), by start, and the correlation
    ids of the graph launches (cuGraphLaunch, hipGraphLaunch)."""
    host = space.plane("/host:CPU")
    out: list[ProgramRun] = []
    calls: list[tuple] = []
    launched: set = set()
    if host is None:
        return out, calls, launched
    thunk_ids, module_ids = {}, {}
    graph_ids = np.array([m for m, n in host.event_names.items() if gpu_rules.is_graph_launch(n)],
                         np.int64)
    for mid, name in host.event_names.items():
        if m := EXECUTE_THUNKS_RE.match(name):
            thunk_ids[mid] = int(m.group(1)) if m.group(1) else None
        elif name.endswith(MODULE_EVENT_SUFFIX):
            module_ids[mid] = name[:-len(MODULE_EVENT_SUFFIX)]
    for line in host.lines:
        c = line.columns(EXECUTION_STATS)
        st = c.stats
        starts = c.start.tolist()
        corr = st["correlation_id"]
        calls += [(t, line.id, x) for t, x in zip(starts, corr, strict=True) if x is not None]
        launched.update(corr[i] for i in np.flatnonzero(np.isin(c.mid, graph_ids)).tolist())
        thunks, mods = [], []
        for i in np.flatnonzero(np.isin(c.mid, list(thunk_ids) + list(module_ids))).tolist():
            mid, start = int(c.mid[i]), starts[i]
            pid = st["program_id"][i]
            e = ProgramRun("", start, start + int(c.dur[i]), line.id,
                           pid if isinstance(pid, int) else None)
            if mid in thunk_ids:
                e.module, e.ordinal = str(st["module_name"][i] or ""), thunk_ids[mid]
                thunks.append(e)
            else:
                e.module = module_ids[mid]
                mods.append(e)
        thunks.sort(key=lambda e: e.start)
        starts = [t.start for t in thunks]
        for m in mods:
            i = bisect.bisect_right(starts, m.start) - 1
            if i >= 0 and thunks[i].end >= m.end:
                t = thunks[i]
                t.module = t.module or m.module
                if t.program_id is None:
                    t.program_id = m.program_id
                continue
            out.append(m)
        out.extend(thunks)
    out.sort(key=lambda e: (e.start, e.thread))
    calls.sort(key=lambda t: (t[0], t[1]))
    launched.discard(None)
    return out, calls, launched


def map_executions(execs, launches, owner, names) -> list:
    """Each host execution's (program id, device), or None where it cannot be told. `owner`:
    (first, more): correlation id -> the (program id, device) of the events it launched, and of
    the ids that launched events of several, their set; `names`: program id -> module name. An
    execution is the one program of its module name among the launch calls that start inside
    it; where executions of other threads run at the same time, only the launch threads seen
    serving this execution thread alone elsewhere count (the runtime launches from the
    executing thread, or on ROCm from a thread of its own per GPU)."""
    n = len(launches)
    starts, lines, corrs = (list(col) for col in zip(*launches, strict=True)) if n else ([], [], [])
    starts, lines = np.array(starts, np.int64), np.array(lines, np.int64)
    # each call's owners as a code: most calls share one of a few sets
    first, more = owner
    keys = [frozenset(more[c]) if c in more else first.get(c) for c in corrs] if more else \
        list(map(first.get, corrs))
    code_of: dict = {}
    codes = np.array([code_of.setdefault(key, len(code_of)) for key in keys], np.int64)
    table = [set(key) if isinstance(key, frozenset) else {key} if key is not None else set()
             for key in code_of]

    def owners(e, sel):
        found = set().union(*[table[c] for c in np.unique(codes[sel]).tolist()])
        return {(pid, dev) for pid, dev in found
                if (pid == e.program_id if e.program_id is not None
                    else names.get(pid) == e.module)
                and (e.ordinal is None or not isinstance(dev, int) or dev == e.ordinal)}

    out: list = [None] * len(execs)
    votes: dict[tuple, int] = {}
    pending = []
    for i, e in enumerate(execs):
        # the calls that start inside it
        calls = np.arange(int(np.searchsorted(starts, e.start, "left")),
                          int(np.searchsorted(starts, e.end, "right")))
        own = calls[lines[calls] == e.thread]  # launched from the executing thread
        sel = own if own.size else calls
        found = owners(e, sel)
        if len(found) == 1:
            out[i] = next(iter(found))
            ok = [c for c in np.unique(codes[sel]).tolist() if out[i] in table[c]]
            voted, counts = np.unique(lines[sel[np.isin(codes[sel], ok)]], return_counts=True)
            for ln, k in zip(voted.tolist(), counts.tolist(), strict=True):
                votes[(ln, e.thread)] = votes.get((ln, e.thread), 0) + k
        else:
            pending.append((i, e, calls))
    serves: dict[int, int] = {}  # launch line -> the execution line it serves most
    for (ln, el), k in sorted(votes.items()):
        if k > votes.get((ln, serves.get(ln)), 0):
            serves[ln] = el
    for i, e, calls in pending:
        served = [ln for ln, el in serves.items() if el == e.thread]
        found = owners(e, calls[np.isin(lines[calls], served)])
        if len(found) == 1:
            out[i] = next(iter(found))
    return out


def count_executions(host: tuple, launched: dict, names: dict, launches_counted: dict,
                     covered: dict) -> dict:
    """(program id, device) -> {executions, from, host_us, host_executions}: from the host's
    execution events where they map to the program (`host execution events`), else from its
    launches (`launches`: kernel_match.launch_executions), else from the alignment's coverage
    of the schedule (`alignment`, the weakest). Where the host's count differs from the
    executions the GPU events show (launches, else coverage), the GPU's count is used (`GPU
    events (the host recorded N)`): FLOPs and bytes are set against the kernels' time, and a
    host can record executions whose kernels fall outside the device trace. host_us: the
    mapped events' summed duration (ExecuteThunks where recorded, else the module event; None:
    not recorded)."""
    first: dict = {}  # correlation id -> the (program id, device) of its events
    more: dict = {}   # ... and where it launched events of several, their set
    for key, ids in launched.items():
        twice = ids & first.keys()
        for c in twice:
            more.setdefault(c, {first[c]}).add(key)
        first.update(dict.fromkeys(ids - twice if twice else ids, key))
    execs, calls = host  # host_record
    # the runtime calls that launched the capture's GPU events
    mapped = map_executions(execs, [c for c in calls if c[2] in first], (first, more),
                            names) if execs else []
    host: dict = {}
    for e, key in zip(execs, mapped, strict=True):
        if key is not None:
            h = host.setdefault(key, [0, 0])
            h[0] += 1
            h[1] += e.end - e.start
    out: dict = {}
    for key in launched:
        gpu = launches_counted.get(key) or round(covered.get(key) or 0)
        if key in host and gpu and host[key][0] != gpu:
            # the host recorded executions whose kernels the device trace does not hold (it
            # started before the device trace), or fewer than ran: the kernels' time is that of
            # the executions seen on the GPU
            n, ps = host[key]
            out[key] = {"executions": gpu, "from": f"GPU events (the host recorded {n})",
                        "host_ps": ps}
        elif key in host:
            n, ps = host[key]
            out[key] = {"executions": n, "from": "host execution events", "host_ps": ps}
        elif launches_counted.get(key):
            out[key] = {"executions": launches_counted[key], "from": "launches", "host_ps": None}
        else:
            out[key] = {"executions": round(covered.get(key) or 0), "from": "alignment",
                        "host_ps": None}
    return out
