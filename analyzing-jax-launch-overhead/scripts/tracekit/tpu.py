"""What a TPU capture's trace holds, and how its device events become op runs (standard library).

On a TPU the device events are the HLO instructions themselves: no kernels, no streams, no
correlation ids. XLA's trace of a TPU (`/device:TPU:<n>`) has these lines:
- `XLA Ops`: one event per run of an instruction, named by it, with its `hlo_category`, FLOPs
  and bytes (XLA's cost model), `source`, `source_stack` and `tf_op` (the JAX name stack): the
  op runs, the device's lane (a GPU's stream); `Async XLA Ops` (the xplane's alone) spans each
  asynchronous op from its start to its done, overlapping them, and is left out.
- `XLA Modules`: one event per program run, named `<module>(<program id>)` (where the trace
  holds no event on a core's op line, these stand for its ops: gpu_events._merged).
- `Steps`: the device's step counter (it may count each program as a step: only said).
The host (`/host:CPU`) dispatches each program run with one call (`DISPATCH_NAMES`). An op run
is joined to its program run (the module event on its device that holds it in time) and that run
to its dispatch, in order (pair_runs): join kind `dispatch`, its `launch` that call with the
run's start (`run_start`), as a graph launch queues a graph's kernels on a GPU. A gap before a
run's first op is the host's (no program until the host dispatches it); a gap between the ops
of one run is the device's (gap_causes.gap_parts).
"""

from __future__ import annotations

import bisect
import re
import statistics
from collections import Counter

TPU_PROCESS_RE = re.compile(r"^/device:TPU:(\d+)$")
OP_LINES = frozenset({"XLA Ops"})
# the asynchronous ops' spans (start to done), recorded in the xplane beside the op runs; not
# device time of their own (the trace json leaves the line out)
ASYNC_LINE = "Async XLA Ops"
MODULE_LINE = "XLA Modules"
STEPS_LINE = "Steps"
MODULE_NAME_RE = re.compile(r"^(.*)\((\d+)\)$")

# The host calls that dispatch one program run, most specific first: the PJRT C API's execute
# (a TPU runs through the plugin; the Python thread's call, then the runtime thread's), then the
# in-process clients'. The first name the capture holds is the one joined.
DISPATCH_NAMES = ("PjRtCApiLoadedExecutable::Execute", "PJRT_LoadedExecutable_Execute",
                  "PjRtStreamExecutorLoadedExecutable::Execute", "TfrtTpuExecutable::Execute",
                  "TpuExecutable::Execute")

# The most runs or dispatches at the capture's start that pair_runs lets go unpaired at once.
MAX_SHIFT = 3

# hlo_category values (XProf's) that are collectives, and those that move data to or from the
# host; every other category is compute on the chip.
COLLECTIVE_CATEGORY_RE = re.compile(
    r"all-reduce|all-gather|reduce-scatter|all-to-all|collective|send|recv|megascale", re.I)
HOST_TRANSFER_CATEGORY_RE = re.compile(r"infeed|outfeed|host", re.I)


# A copy from the host to the chip, as the runtime records it on the host: its host-side work
# (the host buffer laid out for the chip, `Linearize`, by host transposes on worker threads),
# then the transfer, one `tpu::System::TransferToDevice` event with its `size` in bytes, which
# lands when the program that reads it starts (on a TPU v5e, a 64 MiB weight passed as a numpy
# array at every call: 3.4 ms of XlaLinearize and Transpose::ExecuteChunk on 14 threads, then
# 4.7 ms until the program ran: the lab's h2d_copy)
HOST_COPY_WORK_RE = re.compile(r"^(Xla)?Linearize$|^Transpose::Execute")
TRANSFER_RE = re.compile(r"^tpu::System::TransferToDevice$|^TransferToDevice$")


def host_copies(host_threads: dict) -> dict:
    """The host's copies to the chip, sorted: `work` [(start, end, name)] of their host-side
    work, `transfers` [(start, bytes)] (0 bytes: no size given; none of a size 0)."""
    work, transfers, kind = [], [], {}  # kind: each name's, judged once
    for events in host_threads.values():
        for h in events:
            name = h["name"]
            k = kind.get(name)
            if k is None:
                k = kind[name] = 1 if HOST_COPY_WORK_RE.search(name) else \
                    2 if TRANSFER_RE.match(name) else 0
            if k == 1:
                work.append((h["start"], h["start"] + h["dur"], name))
            elif k == 2 and (size := str((h.get("args") or {}).get("size", ""))) != "0":
                transfers.append((h["start"], int(size) if size.isdigit() else 0))  # "0": a token
    return {"work": sorted(work), "transfers": sorted(transfers)}


def is_tpu(process_name: str) -> bool:
    return bool(TPU_PROCESS_RE.match(process_name))


def category(hlo_category: str) -> str:
    """compute, collective or memcpy (a transfer to or from the host), from the op's category."""
    if not hlo_category:
        return "compute"
    if HOST_TRANSFER_CATEGORY_RE.search(hlo_category):
        return "memcpy"
    if COLLECTIVE_CATEGORY_RE.search(hlo_category):
        return "collective"
    return "compute"


def op_category(args: dict) -> str:
    """An op run's category from its trace args (its `hlo_category`)."""
    hc = args.get("hlo_category", "")
    return category(hc if type(hc) is str else "")


# instructions the MXU runs (a TPU's matrix unit), by the instruction's name
MATRIX_INSTRUCTION_RE = re.compile(r"^%?(convolution|dot)\b")


def op_kind(name: str, hlo_op: str | None = None, memcpy: bool = False) -> str:
    """An op run's kind as a lane draws it (tracekit.gpu.kernel_kind's kinds): copy (a transfer
    to or from the host), collective, gemm (a convolution or dot: the MXU) or compute."""
    op = hlo_op or name
    if memcpy:
        return "copy"
    if COLLECTIVE_CATEGORY_RE.search(op):
        return "collective"
    return "gemm" if MATRIX_INSTRUCTION_RE.match(op) else "compute"


def module_name(run_name: str) -> tuple[str, str]:
    """`jit_step(123)` -> ("jit_step", "123"); a name without an id -> (name, "")."""
    m = MODULE_NAME_RE.match(run_name)
    return (m.group(1), m.group(2)) if m else (run_name, "")


def dispatches(host_threads: dict) -> list[dict]:
    """The host's program dispatches in start order: the events of the first of DISPATCH_NAMES
    that the host holds (one name, so that a dispatch nested in another is not counted twice)."""
    found: dict[str, list] = {}
    wanted = set(DISPATCH_NAMES)
    for events in host_threads.values():
        for h in events:
            if h["name"] in wanted:
                found.setdefault(h["name"], []).append(h)
    for name in DISPATCH_NAMES:
        if name in found:
            return sorted(found[name], key=lambda h: h["start"])
    return []


def steps_line_notes(device_steps: list, runs: list, annotated: int) -> tuple[list, bool]:
    """What the device's `Steps` line says beside the host's step annotations and the program
    runs (`device_steps`, `runs`: (device, start, dur, name) of each event; `annotated`: the
    annotated steps): notes, and whether the line counts steps (one event per step: it may
    frame them where the host has no annotation). A line with one event per program run while
    a step holds several runs counts programs, not steps."""
    if not device_steps:
        return [], False
    per_dev = Counter(d for d, *_ in device_steps)
    d0 = min(per_dev)
    n_steps = per_dev[d0]
    n_runs = sum(1 for r in runs if r[0] == d0)
    if annotated and n_steps > annotated and n_steps == n_runs:
        return [f"TPU: the device's Steps line counts {n_steps} 'steps', one per program run "
                f"({n_runs} runs), where the host annotated {annotated} steps: it counts "
                "programs, not steps, and is not used"], False
    if annotated and n_steps != annotated:
        return [f"TPU: the device's Steps line counts {n_steps} steps, the host's annotations "
                f"{annotated}: the annotations frame the steps"], False
    if annotated:
        return [f"TPU: the device's Steps line agrees with the host's annotations "
                f"({n_steps} steps)"], True
    programs = {module_name(r[3])[0] for r in runs if r[0] == d0}
    if n_steps == n_runs and len(programs) > 1:
        return [f"TPU: no step annotation on the host, and the device's Steps line counts one "
                f"'step' per program run ({n_runs} runs of {len(programs)} programs): it "
                "counts programs, not steps, and is not used"], False
    return [f"TPU: no step annotation on the host; the device's Steps line ({n_steps} steps, "
            f"{n_runs} program runs) frames the steps"], True


def steps_from_line(device_steps: list, joined: dict) -> list[tuple]:
    """Steps from the device's Steps line (its first device's), where the host has no
    annotation: (number, start, end) each, a step starting at the dispatch of its first program
    run (the host's part of the step), else at the line's event; `joined`: join_runs' `runs`
    (device -> [(run start, dispatch or None)])."""
    d0 = min(d for d, *_ in device_steps)
    mine = sorted((s, s + dur, name) for d, s, dur, name in device_steps if d == d0)
    runs = joined.get(d0, [])
    run_starts = [r[0] for r in runs]
    out = []
    for i, (s, e, name) in enumerate(mine):
        j = bisect.bisect_left(run_starts, s)
        first = runs[j][1] if j < len(runs) and runs[j][0] < e else None
        start = min(s, first["start"]) if first is not None else s
        try:
            number = int(name)
        except ValueError:
            number = i
        out.append((number, start, e))
    for k in range(len(out) - 1):  # a step ends where the next one's host part begins
        n, st, en = out[k]
        out[k] = (n, st, min(en, out[k + 1][1]) if out[k + 1][1] > st else en)
    return out


def pair_runs(run_starts: list, dispatch_starts: list) -> list:
    """Each program run's dispatch on one device (both lists in start order): runs execute in
    dispatch order, so run i pairs with dispatch i - shift: 0 where the counts are equal, else 0
    (the unpaired at the capture's end) or the difference (at its start: dispatched before it),
    whichever makes the runs' lags behind their dispatches most alike (a lag: the clocks'
    offset, aligned only roughly, -432 to +144 us on one v5e, plus the run's wait in the queue,
    up to tens of ms behind a transfer). Returns, per run, the dispatch's index or None."""
    n, m = len(run_starts), len(dispatch_starts)
    best = None
    for shift in sorted({0, max(-MAX_SHIFT, min(MAX_SHIFT, n - m))}, key=abs):
        lags = [run_starts[i] - dispatch_starts[i - shift]
                for i in range(max(0, shift), min(n, m + shift))]
        if lags:
            mid = statistics.median(lags)
            spread = statistics.median(abs(x - mid) for x in lags)
            if best is None or spread < best[0]:
                best = (spread, shift)
    shift = best[1] if best else 0
    return [i - shift if 0 <= i - shift < m else None for i in range(n)]


def join_runs(ops: list, runs: list, host_threads: dict) -> dict:
    """Give each TPU op run (a step-1 event on a TPU's op line) its program (`module`: the
    module event on its device that holds its start) and its dispatch (`launch`, `join`
    "dispatch"); `runs`: (device, start ps, dur ps, name) of every `XLA Modules` event. Returns
    the counts (`dispatch`: ops joined; `no_run`: ops outside any program run; `runs`,
    `runs_dispatched`; `empty`: module -> its runs that hold no op), `executions`: (dispatch
    host event, module) per joined run, for step framing, and `runs_of`: device -> [(run start,
    its dispatch or None)]."""
    disp = dispatches(host_threads)
    starts = [h["start"] for h in disp]
    by_dev: dict[int, list] = {}
    for d, s, dur, name in runs:
        by_dev.setdefault(d, []).append((s, s + dur, name))
    run_of: dict[int, tuple] = {}  # device -> (starts, ends, module names, dispatch of each)
    joined: dict[int, list] = {}  # device -> [(run start, its dispatch or None)]
    executions: dict[int, tuple] = {}
    joined_runs = 0
    for d, lst in by_dev.items():
        lst.sort()
        launch = []
        for (s, _, name), k in zip(lst, pair_runs([r[0] for r in lst], starts), strict=True):
            h = None
            if k is not None:
                h = disp[k]
                joined_runs += 1
                executions.setdefault(id(h), (h, module_name(name)[0]))
                h = {**h, "run_start": s}  # the run's own view of its dispatch
            launch.append(h)
        run_of[d] = ([s for s, _, _ in lst], [e for _, e, _ in lst],
                     [module_name(n)[0] for _, _, n in lst], launch)
        joined[d] = list(zip(run_of[d][0], launch, strict=True))
    early = [h["start"] - s for lst in joined.values() for s, h in lst if h and s < h["start"]]
    late = sum(next((i for i, (_, h) in enumerate(v[::-1]) if h), len(v)) for v in joined.values())
    counts = {"dispatch": 0, "no_run": 0, "undispatched": 0, "runs": len(runs),
              "runs_dispatched": joined_runs, "dispatch_calls": len(disp),
              "early": (len(early), max(early, default=0)), "late": late}  # runs: see early
    held = set()  # (device, run) of the runs holding an op
    for ev in ops:
        r = run_of.get(ev.device)
        i = bisect.bisect_right(r[0], ev.start) - 1 if r else -1
        if i < 0 or ev.start >= r[1][i]:
            counts["no_run"] += 1
            continue
        held.add((ev.device, i))
        ev.module = r[2][i]
        h = r[3][i]
        if h is not None:
            ev.launch = h
            ev.join = "dispatch"
            counts["dispatch"] += 1
        else:
            counts["undispatched"] += 1
    empty: dict = {}  # module -> its runs that hold no op
    for d, r in run_of.items():
        for i, name in enumerate(r[2]):
            if (d, i) not in held:
                empty[name] = empty.get(name, 0) + 1
    counts["empty"] = empty
    counts["executions"] = sorted(executions.values(), key=lambda x: x[0]["start"])
    counts["runs_of"] = joined
    return counts
