"""Generate a capture as XLA would write it from a real GPU program, with its ground truth.

    from capgen.generate import Scenario, generate
    result = generate(Scenario(name="rocm-off"), out_dir)

writes `out_dir/plugins/profile/2026_01_01_00_00_00/<host>.xplane.pb` and `<host>.trace.json.gz`
(the json made from that xplane by jaxlib's own exporter, so it is exactly what XLA writes) and
`out_dir/truth/` (kernels.csv, steps.csv, defects.csv, iterations.csv, programs.csv,
scenario.json; schema in tests/README.md).

The simulation: each step runs the program's thunks (programs.expand) on every GPU, or, with a
`Plan`, the plan's program executions in dispatch order, each on its own GPUs with the host's
Python time before it (`_run_iteration`). A host thread
per GPU issues launches (TraceMe per thunk, a launch event inside it on the GPU's `Host Threads`
line); kernels start when both their launch has ended (plus a queue latency) and their stream is
free; collectives run on their own stream and finish together on all GPUs, so a GPU that arrives
early waits inside the collective kernel; `*-done` makes the compute stream wait for its
collective. Command buffers group thunks into graphs: one launch, one correlation id, kernels
back to back, `hlo_op` = the command buffer's label; only thunks XLA can record as commands join a
graph (programs.command_type). Fusions with identical fused computations launch the kernel of the
first of them (XLA's kernel reuse cache, programs.kernel_reuse_names). Deterministic for a seed.
"""

from __future__ import annotations

import csv
import gzip
import json
import random
import shutil
import tempfile
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from capgen import flavours
from capgen.programs import (
    PARTITIONS,
    KernelSpec,
    Options,
    Thunk,
    expand,
    kernel_reuse_names,
    load_program,
    sanitize,
    variant,
)
from jaxperf.read import xprotos

RUN = "2026_01_01_00_00_00"
US = 1_000_000  # picoseconds per microsecond
PROFILE_EPOCH_NS = 1_790_000_000_000_000_000
# The command types XLA records into command buffers by default (xla/debug_options_flags.cc, the
# default DebugOptions: FUSION, CUBLAS, CUBLASLT, CUSTOM_CALL, CUDNN; graph min size 5).
DEFAULT_COMMANDS = frozenset({"FUSION", "CUBLAS", "CUBLASLT", "CUSTOM_CALL", "CUDNN"})
# Host time of one traced Python call or return (the Python tracer's events of a plan): about what
# CPython spends entering and leaving a small function with the profiler's hook on.
PYTHON_CALL_PS = US // 2
# A stream waiting on an event that another GPU's stream records resumes a little after the event
# fires (the event is polled across devices): a few microseconds.
CROSS_GPU_WAIT_PS = 3 * US


@dataclass(frozen=True)
class ProgramDef:
    """A program a plan runs: `source` is a programs.load_program name (a compiled fixture, a
    real capture's program, or `small:<name>`, one of small_programs.BUILDERS), written into the
    capture under `program_id`."""
    key: str
    source: str
    program_id: int
    function: str = ""  # the jitted function's name; default: the module's name without "jit_"


@dataclass(frozen=True)
class Execution:
    """One execution of a program in a plan's iteration, as jax dispatches it."""
    program: str                  # a ProgramDef key
    gpus: tuple = (0,)            # the GPUs it runs on (one: on the python thread)
    host_before_ps: int = 20 * US  # Python time on the python thread before its dispatch
    # the traced Python calls open at its dispatch, outermost first (`$file.py:<def line> fn`);
    # `#<tag>` ends a call's key without being written: consecutive executions with equal keys
    # are inside one call, so two calls of one function in a row need two tags
    python: tuple = ()
    argument_copies: int = 0      # host-to-device copies of its arguments, outside the program
    copy_gpus: tuple | None = None  # the GPUs those copies land on (None: its own GPUs)
    copy_bytes: int = 65536
    after: int | None = None      # an earlier execution (index in the iteration) whose result,
    #                               made on another GPU, this one reads: it starts after it ends


@dataclass(frozen=True)
class Plan:
    """Several programs per step: the programs, and one iteration's executions in dispatch
    order; every step repeats the iteration."""
    programs: tuple
    iteration: tuple
    dispatch_bound: bool = False  # planted: the GPU idles between programs, waiting for the host


@dataclass
class Scenario:
    name: str
    program: str = "minigpt-1gpu"
    vendor: str = "rocm"
    gpus: int = 1
    steps: int = 4
    step_annotations: bool = True
    # off | partial | all | while_bodies | profiling_fallback | xla (runs of commands, as XLA's
    # command_buffer_scheduling pass forms them: same computation, >= graph_min_size commands)
    command_buffers: str = "off"
    graph_label: str = "command_buffer"  # graph kernels' hlo_op: command_buffer_<k> or call.<k>
    program_id: int = 17
    host: str = "gen-host"
    seed: int = 0
    # host costs (picoseconds)
    launch_ps: int = 4 * US           # one launch API call
    thunk_host_ps: int = 2 * US       # host work per thunk besides its launches
    step_python_ps: int = 60 * US     # Python between steps, on the python thread
    # the user's loop between one step's end (its sync) and the next step's annotation: the GPU
    # idles; what the host records there: "none" (nothing traced), "input_pipeline" (an
    # iterator's get-next, then the batch's device_put), "python" (other Python work)
    between_steps_ps: int = 0
    between_host: str = "none"
    queue_latency_ps: int = 2 * US    # launch end -> earliest kernel start
    # device costs
    work_scale: float = 1.0           # multiplies every kernel's duration
    straggler_gpu: int | None = None
    straggler_factor: float = 1.5
    # program variations
    kernel_reuse: float = 0.0         # share of fusions that run another fusion's kernel (random)
    # XLA's kernel reuse cache: fusions with identical fused computations launch the first one's
    # kernel. None: on for nvidia unless kernel_reuse > 0, off for rocm.
    kernel_reuse_cache: bool | None = None
    split_k: float = 0.0              # share of GEMMs that add a split-K reduction kernel
    reduce_init: float = 0.0          # share of reduction fusions that memset their output first
    collective_label: str = "instruction"  # or "pre_async": label absent from the saved HLO
    duplicate_program_id: int | None = None  # first step runs under this second id
    same_name_programs: int = 0       # extra programs sharing the main module's name
    argument_copies: int = 1          # H2D argument copies before each execution (no hlo_op)
    # XLA versions and flags (programs.Options, programs.variant, programs.command_type)
    dsf_copy_label: str = "fusion"    # hlo_op of a copy-hero dynamic-slice fusion: fusion | hero
    static_slice_memcpy: bool = False  # newest XLA: static-slice fusions run as memcpys
    dynamic_memcpy_fusions: bool = False  # older XLA: `__dynamic_memcpy` loop fusions
    unknown_trip_counts: bool = False  # while loops without known_trip_count
    plant_ids: bool = False           # partition-id, replica-id and a no-op custom call
    graph_commands: tuple = ()        # command types enabled besides DEFAULT_COMMANDS
    graph_min_size: int = 5           # xla_gpu_graph_min_graph_size (command_buffers="xla")
    api_launch_names: bool = False    # memcpy/memset host events named after the driver call
    # planted defects
    drop_graph_kernels: int = 0       # graph replays under-recorded
    json_drop_gpu_events: int = 0     # the json disagrees with its xplane
    non_launch_correlations: int = 0  # kernels whose id joins a hipStreamWaitEvent
    # the device trace starts after the host's: the first N program executions' GPU events are
    # absent while the host keeps their execution events and launch calls (as on an older ROCm
    # tracer, whose host records 29 executions where the GPU shows 5)
    device_trace_late: int = 0
    # with it, the host's launch calls of those executions carry the correlation ids of the
    # executions the device trace holds (a tracer whose ids restart): each such execution seems
    # to own captured GPU events
    late_ids_reused: bool = False
    expected_verdict: str = ""
    # several programs per step (None: one execution of `program` on every GPU per step); the
    # plan's programs replace `program` and `program_id`
    plan: Plan | None = None
    # collectives that span hosts (generate_hosts(..., cross_host=True)): for each collective of
    # a step, ((step, instruction, occurrence), ps) the latest any other host's GPU arrives at
    # it; the collective ends `transfer` after the last participant of every host arrives
    # (NCCL/RCCL: an all-reduce completes on no rank before every rank has contributed)
    peer_arrivals: tuple = ()


@dataclass(slots=True)
class Planted:
    device: int
    stream: int
    correlation_id: int
    start_ps: int
    dur_ps: int
    kernel: str
    spec: KernelSpec
    program_id: int
    module: str
    instruction: str
    hlo_op_label: str | None
    op_name: str
    graph_id: int = 0
    graph_node: int = 0
    scope_range_id: int = 0
    step: int | None = None
    launch_start_ps: int | None = None
    launch_end_ps: int | None = None
    inner: str = ""  # the instruction inside the fusion that hlo_op names (truth)
    execution: int | None = None  # the execution that launched it (index in _Sim.executions)


@dataclass
class HostEvent:
    line: str
    name: str
    start_ps: int
    dur_ps: int
    stats: list = field(default_factory=list)


@dataclass
class Result:
    run_dir: Path
    xplane: Path
    trace: Path
    truth_dir: Path
    kernels: list
    steps: list
    defects: list
    iterations: list = field(default_factory=list)
    programs: list = field(default_factory=list)
    # (step, instruction, occurrence) -> ps this host's last GPU arrived at that collective
    arrivals: dict = field(default_factory=dict)


class _Compiled:
    """One program as the simulation runs it: its thunks (programs.expand), the scenario's extra
    kernels (split-K, memset-first reductions), its command buffers and its kernel reuse."""

    def __init__(self, sc: Scenario, enabled: frozenset, program, options: Options,
                 program_id: int, function: str = ""):
        self.sc = sc
        self.enabled = enabled
        self.program = program
        self.options = options
        self.program_id = program_id
        self.module = program.name
        # the jitted Python function (PjitFunction(<function>)): jax names a module jit_<function>
        self.function = function or self.module.removeprefix("jit_")
        self.thunks = expand(program, options=options)
        self._reuse = self._plan_reuse()
        self._split = {t.instruction for t in self.thunks
                       if any(k.role == "gemm" for k in t.kernels)
                       and self._chance("split", t.instruction, sc.split_k)}
        self._init = {t.instruction for t in self.thunks
                      if t.opcode == "fusion" and self._reduces(t.instruction)
                      and self._chance("init", t.instruction, sc.reduce_init)}
        self.segments = self._plan_graphs()

    def _reduces(self, name: str) -> bool:
        ins = self.program.by_name[name]
        return any(i.opcode in ("reduce", "reduce-window", "scatter")
                   for c in ins.called_computation_ids
                   for i in self.program.computations[c].instructions)

    def _specs(self, th: Thunk) -> list[KernelSpec]:
        """The kernels one thunk launches, with the scenario's extra kernels."""
        specs = list(th.kernels)
        if th.instruction in self._split:
            specs.append(KernelSpec("splitk_reduce", "compute", 0.0, specs[0].bytes / 4))
        if th.instruction in self._init:
            specs.insert(0, KernelSpec("memset", "memset", 0.0, specs[0].bytes / 8))
        return specs

    # -- deterministic choices keyed on names, so every step makes the same ones
    def _chance(self, what: str, key: str, p: float) -> bool:
        return p > 0 and random.Random(f"{self.sc.seed}/{what}/{key}").random() < p

    def _plan_reuse(self) -> dict[str, str]:
        cache = self.sc.kernel_reuse_cache
        if cache is None:
            cache = self.sc.vendor == "nvidia" and self.sc.kernel_reuse == 0
        if cache:
            return kernel_reuse_names(self.program, self.options)
        out = {}
        seen: dict[str, str] = {}
        for t in self.thunks:
            if t.opcode != "fusion" or not t.kernels or t.kernels[0].role != "compute":
                continue
            kind = t.instruction.split("_")[0]
            if kind in seen and seen[kind] != t.instruction and \
                    self._chance("reuse", t.instruction, self.sc.kernel_reuse):
                out[t.instruction] = seen[kind]
            seen.setdefault(kind, t.instruction)
        return out

    def _graphable(self, t: Thunk) -> bool:
        """Whether XLA can record this thunk into a command buffer under the scenario's flags.
        A while condition evaluated by the host loop never is: only a WHILE command puts it in a
        graph, and WHILE is not enabled by default (xla/debug_options_flags.cc)."""
        return not t.condition and t.cmd is not None and t.cmd in self.enabled

    def _plan_graphs(self) -> list[int | None]:
        """Segment number of each thunk (None: launched op by op)."""
        mode = self.sc.command_buffers
        n = len(self.thunks)
        seg: list[int | None] = [None] * n
        if mode in ("off", "profiling_fallback"):
            return seg
        ok = [bool(t.kernels) and self._graphable(t) for t in self.thunks]
        k = 0
        if mode == "all":
            i = 0
            while i < n:
                if not ok[i]:
                    i += 1
                    continue
                while i < n and ok[i]:
                    seg[i] = k
                    i += 1
                k += 1
            return seg
        if mode == "while_bodies":
            prev = None
            for i, t in enumerate(self.thunks):
                if t.loop and ok[i] and not t.collective:
                    key = t.loop
                    if key != prev:
                        k += 1
                        prev = key
                    seg[i] = k
                else:
                    prev = None
            return seg
        if mode == "partial":
            i = 0
            while i < n:
                j = i
                while j < n and self.thunks[j].opcode == "fusion" and ok[j] and \
                        self.thunks[j].loop == self.thunks[i].loop:
                    j += 1
                if j - i >= 3:
                    for x in range(i, j):
                        seg[x] = k
                    k += 1
                i = max(j, i + 1)
            return seg
        if mode == "xla":
            return self._plan_xla_graphs(ok)
        raise ValueError(f"unknown command-buffer mode {mode!r}")

    def _plan_xla_graphs(self, ok: list[bool]) -> list[int | None]:
        """Runs of consecutive commands of one computation (one loop iteration), kept when they
        hold at least graph_min_size commands; an async collective joins only with everything up
        to its done (xla/service/gpu/transforms/command_buffer_scheduling.cc
        CollectCommandBufferSequences: collect_async_region / check_async_region)."""
        th = self.thunks
        n = len(th)
        seg: list[int | None] = [None] * n
        run: list[int] = []
        k = 0

        def flush() -> None:
            nonlocal k
            if sum(1 for x in run if th[x].kernels) >= max(1, self.sc.graph_min_size):
                for x in run:
                    seg[x] = k
                k += 1
            run.clear()

        i = 0
        while i < n:
            t = th[i]
            if run and (t.comp, t.loop) != (th[run[0]].comp, th[run[0]].loop):
                flush()
            if t.wait_for is not None or not ok[i]:
                flush()
                i += 1
                continue
            if t.collective and t.opcode.endswith("start"):
                j = next((x for x in range(i + 1, n) if th[x].wait_for == t.instruction and
                          th[x].loop == t.loop), None)
                region = range(i, j + 1) if j is not None else range(0)
                if j is not None and all(
                        (ok[x] or (th[x].wait_for is not None and "COLLECTIVES" in self.enabled))
                        and (th[x].comp, th[x].loop) == (t.comp, t.loop) for x in region):
                    run.extend(region)
                    i = j + 1
                    continue
                flush()
                i += 1
                continue
            run.append(i)
            i += 1
        flush()
        return seg

    def _hlo_label(self, t: Thunk) -> str:
        if t.collective and self.sc.collective_label == "pre_async":
            base = t.instruction.replace("-start", "")
            label = base if base != t.instruction else t.instruction + ".pre"
            while label in self.program.by_name:
                label += "_"
            return label
        return t.instruction

    def _kernel_spec(self, th: Thunk, spec: KernelSpec) -> KernelSpec:
        """The spec named as the kernel that really runs: a fusion whose kernel was reused runs
        the kernel named after the first fusion of its kind."""
        first = self._reuse.get(th.instruction)
        if first is not None and spec.role in ("compute", "gemm") and \
                spec.name == sanitize(th.instruction):
            return replace(spec, name=sanitize(first))
        return spec

    def _op_name(self, instruction: str) -> str:
        ins = self.program.by_name.get(instruction)
        return ins.metadata.op_name if ins is not None else ""


class _Sim:
    def __init__(self, sc: Scenario):
        self.sc = sc
        self.fl = flavours.FLAVOURS[sc.vendor]
        self.coll_seen: dict[tuple, int] = {}
        self.arrivals: dict[tuple, int] = {}
        self.peer_arrivals = dict(sc.peer_arrivals)
        self.rng = random.Random(sc.seed)
        self.enabled = DEFAULT_COMMANDS | set(sc.graph_commands) | (
            {"COLLECTIVES"} if sc.command_buffers == "all" else set())
        self.kernels: list[Planted] = []
        self.host: list[HostEvent] = []
        self.correlation = 1000
        self.scope = 1
        self.labels: dict[tuple, str] = {}
        self.graph_ids: dict[str, int] = {}
        self.steps = []
        self.executions: list[dict] = []  # every program execution, in dispatch order (truth)
        self.compute_stream = {g: 13 + 4 * g for g in range(sc.gpus)}
        self.collective_stream = {g: 14 + 4 * g for g in range(sc.gpus)}
        self.copy_stream = {g: 15 + 4 * g for g in range(sc.gpus)}
        if sc.plan is None:
            trips: dict = {}
            if sc.unknown_trip_counts or sc.plant_ids or sc.dynamic_memcpy_fusions:
                program, trips = variant(sc.program, unknown_trip_counts=sc.unknown_trip_counts,
                                         plant_ids=sc.plant_ids,
                                         dynamic_memcpy=sc.dynamic_memcpy_fusions)
            else:
                program = load_program(sc.program)
            options = Options(dsf_copy_label=sc.dsf_copy_label,
                              static_slice_memcpy=sc.static_slice_memcpy, trip_counts=trips)
            self.main = _Compiled(sc, self.enabled, program, options, sc.program_id,
                                  "train_step")
            self.compiled = {"": self.main}
        else:
            used = {g for ex in sc.plan.iteration for g in (*ex.gpus, *(ex.copy_gpus or ()))}
            if max(used) >= sc.gpus:
                raise ValueError(f"scenario {sc.name}: its plan uses GPU {max(used)}, but the "
                                 f"scenario has {sc.gpus} GPU(s)")
            options = Options(dsf_copy_label=sc.dsf_copy_label,
                              static_slice_memcpy=sc.static_slice_memcpy)
            loaded: dict[str, object] = {}
            self.compiled = {}
            for d in sc.plan.programs:
                if d.source not in loaded:
                    loaded[d.source] = load_program(d.source)
                self.compiled[d.key] = _Compiled(sc, self.enabled, loaded[d.source], options,
                                                 d.program_id, d.function)
            self.main = self.compiled[sc.plan.programs[0].key]
        self.by_id = {c.program_id: c for c in self.compiled.values()}
        # the first (or only) program, under the names the writer and the truth read
        self.program = self.main.program
        self.module = self.main.module

    def program_of(self, program_id: int) -> _Compiled:
        """The program that runs under an id; ids of the single-program scenarios' extra
        programs (a second id, same-name programs) map to the main program, as they always
        have for the truth's source columns."""
        return self.by_id.get(program_id, self.main)

    def _label(self, thunk_names: tuple) -> str:
        if thunk_names not in self.labels:
            k = len(self.labels)
            self.labels[thunk_names] = (f"call.{k}" if self.sc.graph_label == "call"
                                        else f"command_buffer_{k}")
        return self.labels[thunk_names]

    def _duration(self, spec: KernelSpec, g: int) -> int:
        dev = self.fl.device
        seconds = 1.5e-6 + spec.bytes / dev.hbm_bytes_per_s + spec.flops / dev.peak_flops
        if spec.role == "collective":
            seconds = 8e-6 + spec.bytes / 50e9
        factor = self.sc.work_scale * (self.sc.straggler_factor if g == self.sc.straggler_gpu
                                       else 1.0)
        return max(1000, int(seconds * 1e12 * factor * self.rng.uniform(0.97, 1.03)))

    def run(self):
        sc = self.sc
        t = 1_000 * US  # the first step begins 1 ms into the profile
        if sc.plan is not None:
            self.extra = []
            t += 400 * US
            self.compute_free = {g: 0 for g in range(sc.gpus)}
            self.coll_free = {g: 0 for g in range(sc.gpus)}
            self.copy_free = {g: 0 for g in range(sc.gpus)}
            for step in range(sc.steps):
                t = self._run_iteration(step, t)
            self.end_ps = t + 100 * US
            return
        self._run_extra_programs(t)
        t += 400 * US
        for step in range(sc.steps):
            pid = sc.duplicate_program_id if (sc.duplicate_program_id and step == 0) \
                else sc.program_id
            t = self._run_step(step, t, pid)
        self.end_ps = t + 100 * US

    def _run_extra_programs(self, t: int) -> None:
        """Small programs sharing the main module's name, run once before the steps."""
        self.extra = []
        for i in range(self.sc.same_name_programs):
            pid = self.sc.program_id + 100 + i
            self.extra.append(pid)
            g = 0
            start = t + i * 50 * US
            corr = self._next_corr()
            spec = KernelSpec("wrapped_broadcast", "compute", 0.0, 4096.0)
            launch_line = f"Host Threads/{self.fl.launch_thread_base + g}"
            k = Planted(g, self.compute_stream[g], corr, start + 10 * US, 2 * US,
                        self.fl.kernel_name(spec, 0), spec, pid, self.module,
                        "wrapped_broadcast", "wrapped_broadcast", "",
                        scope_range_id=self._next_scope(),
                        launch_start_ps=start, launch_end_ps=start + self.sc.launch_ps)
            self.kernels.append(k)
            self.host.append(HostEvent(launch_line, self.fl.launch_name(spec), start,
                                       self.sc.launch_ps, self.fl.launch_stats(k, True, g)))
            self._record_execution(None, pid, self.module, [g], [], [k])

    def _next_corr(self) -> int:
        self.correlation += 1
        return self.correlation

    def _next_scope(self) -> int:
        self.scope += 1
        return self.scope

    def _record_execution(self, step, program_id, module, gpus, copy_gpus, kernels) -> None:
        seq = len(self.executions)
        for k in kernels:
            k.execution = seq
        self.executions.append({"execution": seq, "step": step, "program_id": program_id,
                                "module": module, "gpus": list(gpus),
                                "copy_gpus": list(copy_gpus)})

    def _run_step(self, step: int, t0: int, program_id: int) -> int:
        """One step of a single-program scenario: one execution of the program on every GPU."""
        sc = self.sc
        gpus = range(sc.gpus)
        python = "python"
        # Python work before dispatch (the launch-bound scenario makes this long)
        busy = [HostEvent(python, f"$minigpt.py:{120 + i} {n}", t0 + i * sc.step_python_ps // 3,
                          sc.step_python_ps // 3 - 1000)
                for i, n in enumerate(("batch", "shard_batch", "train_loop"))]
        self.host.extend(busy)
        dispatch = t0 + sc.step_python_ps
        exec_line = {g: python if sc.gpus == 1 else f"py_xla_execute/{-7_000_000_000 - 97 * g}"
                     for g in gpus}
        step_kernels: list[Planted] = []
        copy_spec = KernelSpec("copy", "copy_h2d", 0.0, 65536.0, size=65536)
        cursor = self._execute(self.main, program_id, step, list(gpus), list(gpus),
                               sc.argument_copies, copy_spec, dispatch, exec_line,
                               {g: 0 for g in gpus}, {g: 0 for g in gpus}, None, step_kernels,
                               flow=200 + 8 * step)
        self._record_execution(step, program_id, self.module, gpus, gpus, step_kernels)
        step_end = max(k.start_ps + k.dur_ps for k in step_kernels)
        pjit_end = max(cursor.values()) + 10 * US
        self.host.append(HostEvent(python, "PjitFunction(train_step)", dispatch,
                                   pjit_end - dispatch))
        sync_end = max(step_end, pjit_end) + 5 * US
        self.host.append(HostEvent(python, "CommonPjRtBuffer::Await", pjit_end + US,
                                   sync_end - pjit_end - US))
        if sc.step_annotations:
            self.host.append(HostEvent(python, "train", t0, sync_end - t0 + US,
                                       [("step_num", flavours.I64, step)]))
        self._truth_steps(step, t0, step_kernels, gpus)
        gap0, gap = sync_end + 20 * US, sc.between_steps_ps
        if gap and sc.between_host == "input_pipeline":
            self.host.append(HostEvent(python, "IteratorGetNext", gap0 + US, gap * 2 // 3))
            self.host.append(HostEvent(python, "device_put", gap0 + US + gap * 2 // 3,
                                       gap // 4))
        elif gap and sc.between_host == "python":
            self.host.append(HostEvent(python, "$train.py:212 log_metrics", gap0 + US,
                                       gap - 2 * US))
        return gap0 + gap

    def _run_iteration(self, step: int, t0: int) -> int:
        """One iteration of a plan: its executions in dispatch order, each its own dispatch
        (PjitFunction) on the python thread after the Python time before it, the traced Python
        calls open around them, then the user's sync on the last result (and the step
        annotation around all of it when the scenario has one). jax dispatches asynchronously:
        the host goes on to the next execution without waiting for the GPU."""
        sc, plan = self.sc, self.sc.plan
        python = "python"
        t = t0
        open_calls: list[tuple[str, int]] = []
        step_kernels: list[Planted] = []
        ends: dict[int, int] = {}
        for index, ex in enumerate(plan.iteration):
            t = self._python_calls(open_calls, ex.python, t)
            t += ex.host_before_ps
            prog = self.compiled[ex.program]
            gpus = list(ex.gpus)
            copy_gpus = list(ex.copy_gpus if ex.copy_gpus is not None else ex.gpus)
            # xla/pjrt/pjrt_stream_executor_client.cc (PjRtStreamExecutorLoadedExecutable::
            # Execute): one addressable device runs on the calling thread, several each on a
            # thread of the client's pool
            exec_line = {g: python if len(gpus) == 1 else
                         f"py_xla_execute/{-7_000_000_000 - 97 * g}" for g in gpus}
            # an input made by an earlier execution on another GPU: the program's stream waits
            # for that buffer's definition event (ExecuteHelper ->
            # xla/pjrt/tracked_device_buffer.cc WaitForBufferDefinitionEventsOnStream)
            ready = ends[ex.after] + CROSS_GPU_WAIT_PS if ex.after is not None else 0
            copy_spec = KernelSpec("copy", "copy_h2d", 0.0, float(ex.copy_bytes),
                                   size=ex.copy_bytes)
            mine: list[Planted] = []
            cursor = self._execute(prog, prog.program_id, step, gpus, copy_gpus,
                                   ex.argument_copies, copy_spec, t, exec_line,
                                   self.compute_free, self.coll_free, self.copy_free, mine,
                                   flow=200 + 8 * len(self.executions), ready=ready)
            self._record_execution(step, prog.program_id, prog.module, gpus,
                                   copy_gpus if ex.argument_copies else [], mine)
            ends[index] = max(k.start_ps + k.dur_ps for k in mine)
            step_kernels.extend(mine)
            pjit_end = max(cursor.values()) + 10 * US
            self.host.append(HostEvent(python, f"PjitFunction({prog.function})", t,
                                       pjit_end - t))
            t = pjit_end + US
        t = self._python_calls(open_calls, (), t)
        step_end = max(k.start_ps + k.dur_ps for k in step_kernels)
        sync_end = max(step_end, t + US) + 5 * US
        # the user's sync on the last result, as the Python tracer shows it (seen in the real
        # MI355X capture: `$api.py:3105 block_until_ready`)
        self.host.append(HostEvent(python, "$api.py:3105 block_until_ready", t,
                                   sync_end - t + PYTHON_CALL_PS))
        self.host.append(HostEvent(python, "CommonPjRtBuffer::Await", t + US,
                                   sync_end - t - US))
        if sc.step_annotations:
            self.host.append(HostEvent(python, "train", t0, sync_end - t0 + US,
                                       [("step_num", flavours.I64, step)]))
        active = sorted({k.device for k in step_kernels})
        self._truth_steps(step, t0, step_kernels, active)
        return sync_end + 20 * US + sc.between_steps_ps

    def _python_calls(self, open_calls: list, stack: tuple, t: int) -> int:
        """Close the traced Python calls that `stack` (outermost first) no longer holds, innermost
        first, and open the new ones; each call or return costs the host PYTHON_CALL_PS. A call's
        key is its text; `#<tag>` ends a key without being written (two calls of one function in
        a row are two calls; a function that calls itself nests in itself)."""
        keep = 0
        while keep < min(len(open_calls), len(stack)) and open_calls[keep][0] == stack[keep]:
            keep += 1
        while len(open_calls) > keep:
            key, start = open_calls.pop()
            t += PYTHON_CALL_PS
            self.host.append(HostEvent("python", key.split("#")[0], start, t - start))
        for key in stack[keep:]:
            open_calls.append((key, t))
            t += PYTHON_CALL_PS
        return t

    def _execute(self, prog: _Compiled, program_id: int, step, gpus: list, copy_gpus: list,
                 copies: int, copy_spec: KernelSpec, dispatch: int, exec_line: dict,
                 compute_free: dict, coll_free: dict, copy_free: dict | None,
                 step_kernels: list, flow: int, ready: int = 0) -> dict:
        """One execution of `prog` on `gpus`, dispatched at `dispatch`: its argument copies on
        `copy_gpus` (host to device, outside the program: no hlo_op), then its thunks, and the
        execution chain around them on each GPU's `exec_line` (xla/service/gpu/gpu_executable.cc
        ExecuteThunks: a `<module>:XLA GPU module` TraceMe around one annotation per thunk).
        With `copy_free` (plans) the copies queue on their own stream and the program's first
        kernel waits for its arguments (and for `ready`, an input another GPU makes); without
        it (single-program scenarios, as they always were) the copies only queue behind the
        compute stream. Returns each GPU's host cursor at the end of its chain."""
        sc, fl = self.sc, self.fl
        order = sorted(set(gpus) | set(copy_gpus))
        cursor = {g: dispatch + 12 * US + order.index(g) * 3 * US for g in order}
        coll_end: dict[tuple, int] = {}
        first_launch = {}
        chain_start = dict(cursor)
        arrived: dict[int, int] = {}
        for g in copy_gpus:
            for _ in range(copies):
                corr = self._next_corr()
                ls = cursor[g]
                dur = self._duration(copy_spec, g)
                if copy_free is None:
                    start = max(ls + sc.launch_ps + sc.queue_latency_ps, compute_free[g])
                else:
                    start = max(ls + sc.launch_ps + sc.queue_latency_ps, copy_free[g])
                    copy_free[g] = start + dur
                    arrived[g] = start + dur
                k = Planted(g, self.copy_stream[g], corr, start, dur,
                            fl.kernel_name(copy_spec, 0), copy_spec, program_id, prog.module, "",
                            None, "", scope_range_id=self._next_scope(), step=step,
                            launch_start_ps=ls, launch_end_ps=ls + sc.launch_ps)
                self.kernels.append(k)
                step_kernels.append(k)
                stats = fl.launch_stats(k, False, g)
                self.host.append(HostEvent(f"Host Threads/{fl.launch_thread_base + 40 + g}",
                                           fl.launch_name(copy_spec, sc.api_launch_names), ls,
                                           sc.launch_ps, stats))
                cursor[g] = ls + sc.launch_ps + US
        if copy_free is not None:
            for g in gpus:
                compute_free[g] = max(compute_free[g], arrived.get(g, 0), ready)
        module_start = {g: cursor[g] for g in gpus}
        for g in gpus:
            cursor[g] += 3 * US
        thunks, segments = prog.thunks, prog.segments
        i = 0
        n = len(thunks)
        while i < n:
            th = thunks[i]
            seg = segments[i]
            if seg is not None:
                j = i
                while j < n and segments[j] == seg:
                    j += 1
                group = thunks[i:j]
                label = self._label(tuple(x.instruction for x in group))
                for g in gpus:
                    self._graph_launch(prog, g, group, label, step, program_id, cursor,
                                       compute_free, exec_line[g], step_kernels, first_launch)
                i = j
                continue
            if th.wait_for is not None:
                for g in gpus:
                    end = coll_end.get((g, th.wait_for))
                    if end is not None:
                        compute_free[g] = max(compute_free[g], end)
                    self.host.append(HostEvent(exec_line[g], th.instruction, cursor[g], US // 2))
                    cursor[g] += US
                i += 1
                continue
            if th.collective:
                starts = {}
                for g in gpus:
                    ls = cursor[g] + sc.thunk_host_ps
                    starts[g] = max(ls + sc.launch_ps + sc.queue_latency_ps, coll_free[g],
                                    compute_free[g])
                transfer = max(self._duration(k, 0) for k in th.kernels)
                nth = self.coll_seen.get((step, th.instruction), 0)  # (n: the thunks)
                self.coll_seen[(step, th.instruction)] = nth + 1
                self.arrivals[(step, th.instruction, nth)] = max(starts.values())
                # every participant, this host's GPUs and (cross_host) every other host's
                end = max(max(starts.values()),
                          self.peer_arrivals.get((step, th.instruction, nth), 0)) + transfer
                for g in gpus:
                    ls = cursor[g] + sc.thunk_host_ps
                    self._op_launch(prog, g, th, th.kernels[0], ls, starts[g], end - starts[g],
                                    self.collective_stream[g], step, program_id, exec_line[g],
                                    step_kernels, first_launch)
                    coll_free[g] = end
                    coll_end[(g, th.instruction)] = end
                    cursor[g] = ls + sc.launch_ps + US
                i += 1
                continue
            for g in gpus:
                ls = cursor[g] + sc.thunk_host_ps
                trace_start = cursor[g]
                specs = prog._specs(th)
                corr_scope = self._next_scope()
                for spec in specs:
                    start = max(ls + sc.launch_ps + sc.queue_latency_ps, compute_free[g])
                    dur = self._duration(spec, g)
                    self._op_launch(prog, g, th, spec, ls, start, dur, self.compute_stream[g],
                                    step, program_id, None, step_kernels, first_launch,
                                    corr_scope)
                    if spec.inner:
                        # the embedded thunk's own TraceMe, inside the fusion's
                        # (xla/backends/gpu/runtime/thunk_executor.cc)
                        self.host.append(HostEvent(exec_line[g], spec.inner, ls - US // 4,
                                                   sc.launch_ps + US // 2))
                    compute_free[g] = start + dur
                    ls += sc.launch_ps + US // 2
                    if th.host_sync:
                        # the while loop waits for its predicate on the host
                        # (while_thunk.cc: stream.BlockHostUntilDone after the copy)
                        ls = max(ls, start + dur + US // 2)
                self.host.append(HostEvent(exec_line[g], th.instruction, trace_start,
                                           ls - trace_start))
                cursor[g] = ls + US // 2
            i += 1
        # the execution chain around the thunks, per GPU
        for g in gpus:
            line = exec_line[g]
            end = cursor[g] + 2 * US
            self.host.append(HostEvent(line, "PjRtStreamExecutorLoadedExecutable::Execute",
                                       chain_start[g] - 4 * US, end - chain_start[g] + 8 * US,
                                       [("_pt", flavours.I64, 5),
                                        ("_p", flavours.I64, flow + g)]))
            self.host.append(HostEvent(line, "Thunks::Prepare", module_start[g] + US,
                                       US // 2))
            self.host.append(HostEvent(line, "Thunks::Initialize", module_start[g] + 2 * US,
                                       US // 2))
            self.host.append(HostEvent(line, "GpuExecutable::ExecuteThunks", module_start[g],
                                       end - module_start[g] + US,
                                       [("module_name", flavours.REF, prog.module)]))
            self.host.append(HostEvent(line, f"{prog.module}:XLA GPU module",
                                       module_start[g] + US // 2, end - module_start[g]))
        return cursor

    def _op_launch(self, prog: _Compiled, g, th: Thunk, spec: KernelSpec, ls, start, dur,
                   stream, step, program_id, trace_line, step_kernels, first_launch, scope=None):
        sc, fl = self.sc, self.fl
        corr = self._next_corr()
        kernel_spec = prog._kernel_spec(th, spec)
        k = Planted(g, stream, corr, start, dur, fl.kernel_name(kernel_spec, len(self.kernels)),
                    spec, program_id, prog.module, th.instruction,
                    spec.inner or prog._hlo_label(th), prog._op_name(th.instruction),
                    inner=spec.inner, scope_range_id=scope or self._next_scope(),
                    step=step, launch_start_ps=ls, launch_end_ps=ls + sc.launch_ps)
        self.kernels.append(k)
        step_kernels.append(k)
        self.host.append(HostEvent(f"Host Threads/{fl.launch_thread_base + g}",
                                   fl.launch_name(kernel_spec, sc.api_launch_names), ls,
                                   sc.launch_ps, fl.launch_stats(k, True, g)))
        if trace_line is not None:
            self.host.append(HostEvent(trace_line, th.instruction, ls - sc.thunk_host_ps,
                                       sc.thunk_host_ps + sc.launch_ps + US // 2))

    def _graph_launch(self, prog: _Compiled, g, group, label, step, program_id, cursor,
                      compute_free, trace_line, step_kernels, first_launch):
        sc, fl = self.sc, self.fl
        corr = self._next_corr()
        gid = self.graph_ids.setdefault(label, 4000 + len(self.graph_ids))
        ls = cursor[g] + sc.thunk_host_ps
        t = max(ls + sc.launch_ps + sc.queue_latency_ps, compute_free[g])
        node = 0
        for th in group:
            for spec in prog._specs(th):
                node += 1
                dur = self._duration(spec, g)
                kernel_spec = prog._kernel_spec(th, spec)
                stream = self.collective_stream[g] if spec.role == "collective" else \
                    self.compute_stream[g]
                # the truth keeps the graph launch's times: every node was queued by it
                k = Planted(g, stream, corr, t, dur, fl.kernel_name(kernel_spec, node), spec,
                            program_id, prog.module, th.instruction, label, "", gid, node,
                            self._next_scope(), step, ls, ls + sc.launch_ps)
                self.kernels.append(k)
                step_kernels.append(k)
                t += dur + 300_000  # 0.3 us between graph nodes
        compute_free[g] = t
        name = fl.graph_launch_name if fl.name == "rocm" else \
            f"{fl.graph_launch_name} (CudaGraph:{gid})"
        stub = Planted(g, 0, corr, 0, 0, "", KernelSpec("graph", "compute", 0, 0), program_id,
                       prog.module, "", label, "", gid)
        stats = fl.launch_stats(stub, True, g) + fl.graph_stats(gid)
        self.host.append(HostEvent(f"Host Threads/{fl.launch_thread_base + g}", name, ls,
                                   sc.launch_ps, stats))
        self.host.append(HostEvent(trace_line, label, cursor[g], sc.thunk_host_ps +
                                   sc.launch_ps + US // 2))
        cursor[g] = ls + sc.launch_ps + US

    def _truth_steps(self, step, t0, step_kernels, gpus):
        for g in gpus:
            mine = sorted((k for k in step_kernels if k.device == g), key=lambda k: k.start_ps)
            end = max(k.start_ps + k.dur_ps for k in mine)
            busy = _union((k.start_ps, k.start_ps + k.dur_ps) for k in mine)
            # the compute stream, or the copy stream of a GPU that only receives copies
            critical = self.compute_stream[g] if any(
                k.stream == self.compute_stream[g] for k in mine) else self.copy_stream[g]
            crit = [k for k in mine if k.stream == critical]
            host_wait = 0
            prev_end = t0
            for k in crit:
                if k.start_ps > prev_end:
                    ready = (k.launch_end_ps + self.sc.queue_latency_ps) if k.launch_end_ps \
                        is not None else None
                    if ready is None or ready >= k.start_ps:
                        host_wait += k.start_ps - prev_end
                prev_end = max(prev_end, k.start_ps + k.dur_ps)
            self.steps.append({"step": step, "device": g, "start_ps": t0, "end_ps": end,
                               "busy_ps": busy, "idle_ps": end - t0 - busy,
                               "host_ps": host_wait, "device_ps": end - t0 - host_wait,
                               "critical_stream": critical})


def _union(intervals) -> int:
    total = 0
    cur_s = cur_e = None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


# ---------------------------------------------------------------- writing the XSpace

class _PlaneWriter:
    def __init__(self, plane):
        self.plane = plane
        self.stat_ids: dict[str, int] = {}
        self.event_ids: dict[str, int] = {}

    def stat_id(self, name: str) -> int:
        sid = self.stat_ids.get(name)
        if sid is None:
            sid = len(self.stat_ids) + 1
            self.stat_ids[name] = sid
            md = self.plane.stat_metadata[sid]
            md.id = sid
            md.name = name
        return sid

    def event_id(self, name: str) -> int:
        eid = self.event_ids.get(name)
        if eid is None:
            eid = len(self.event_ids) + 1
            self.event_ids[name] = eid
            md = self.plane.event_metadata[eid]
            md.id = eid
            md.name = name
        return eid

    def add_stats(self, target, stats) -> None:
        for key, kind, value in stats:
            st = target.add()
            st.metadata_id = self.stat_id(key)
            if kind == flavours.REF:
                st.ref_value = self.stat_id(value)
            elif kind == flavours.U64:
                st.uint64_value = value
            elif kind == flavours.I64:
                st.int64_value = value
            elif kind == flavours.F64:
                st.double_value = value
            elif kind == "bytes":
                st.bytes_value = value
            else:
                st.str_value = value

    def line(self, line_id: int, name: str, events) -> None:
        """events: (name, start_ps, dur_ps, stats) sorted by start."""
        if not events:
            return
        ln = self.plane.lines.add()
        ln.id = line_id
        ln.name = name
        ln.display_name = name if self.plane.name.startswith("/host") else ""
        base_ns = events[0][1] // 1000
        ln.timestamp_ns = base_ns
        base_ps = base_ns * 1000
        for ev_name, start, dur, stats in events:
            ev = ln.events.add()
            ev.metadata_id = self.event_id(ev_name)
            ev.offset_ps = start - base_ps
            ev.duration_ps = dur
            if stats:
                self.add_stats(ev.stats, stats)


def _write_xspace(sim: _Sim, sc: Scenario, kernels: list[Planted]) -> bytes:
    cls = xprotos.classes()
    space = cls["XSpace"]()
    space.hostnames.append(sc.host)
    fl = sim.fl
    # /host:metadata: the program (and its second id / same-name programs)
    md = _PlaneWriter(space.planes.add())
    md.plane.name = "/host:metadata"
    hlo = cls["HloProto"]()
    blobs = {}
    names = {}
    if sc.plan is None:
        hlo.hlo_module.CopyFrom(sim.program.module)
        ids = [sc.program_id] + ([sc.duplicate_program_id] if sc.duplicate_program_id else [])
        for pid in ids:
            hlo.hlo_module.id = pid
            blobs[pid] = hlo.SerializeToString()
        for pid in getattr(sim, "extra", []):
            blobs[pid] = _tiny_program(sim.module, pid).SerializeToString()
        names = {pid: sim.module for pid in blobs}
    else:  # every program of the plan, each under its own id (names may repeat)
        for prog in sim.compiled.values():
            hlo.hlo_module.CopyFrom(prog.program.module)
            hlo.hlo_module.id = prog.program_id
            blobs[prog.program_id] = hlo.SerializeToString()
            names[prog.program_id] = prog.module
    for pid, blob in sorted(blobs.items()):
        em = md.plane.event_metadata[pid]
        em.id = pid
        em.name = f"{names[pid]}({pid})"
        md.add_stats(em.stats, [("Hlo Proto", "bytes", blob)])
    # GPU planes: all 8 ordinals exist, as in the real captures; idle ones have no lines
    by_device: dict[int, dict[int, list]] = {}
    for k in kernels:
        by_device.setdefault(k.device, {}).setdefault(k.stream, []).append(k)
    for ordinal in range(max(8, sc.gpus)):
        pw = _PlaneWriter(space.planes.add())
        pw.plane.name = f"/device:GPU:{ordinal}"
        pw.plane.id = ordinal
        if ordinal in by_device or ordinal < sc.gpus:
            pw.add_stats(pw.plane.stats, fl.device_stats(fl.device))
        for stream, ks in sorted(by_device.get(ordinal, {}).items()):
            ks.sort(key=lambda k: k.start_ps)
            events = [(k.kernel, k.start_ps, k.dur_ps,
                       fl.gpu_kernel_stats(k, k.hlo_op_label is not None)) for k in ks]
            pw.line(stream, fl.stream_name(stream, {k.spec.role for k in ks}), events)
    # /host:CPU
    hp = _PlaneWriter(space.planes.add())
    hp.plane.name = "/host:CPU"
    lines: dict[str, list] = {}
    for e in sim.host:
        lines.setdefault(e.line, []).append((e.name, e.start_ps, e.dur_ps, e.stats))
    for name in sorted(lines):
        evs = sorted(lines[name], key=lambda e: (e[1], -e[2]))
        if name.startswith("Host Threads/"):
            line_id = int(name.split("/")[1])
        elif name.startswith("py_xla_execute/"):
            line_id = int(name.split("/")[1])
        else:
            line_id = 6_300_611_701_581_713_424
        hp.line(line_id, name, evs)
    env = _PlaneWriter(space.planes.add())
    env.plane.name = "Task Environment"
    env.add_stats(env.plane.stats, [
        ("profile_start_time", flavours.U64, PROFILE_EPOCH_NS),
        ("profile_stop_time", flavours.U64, PROFILE_EPOCH_NS + sim.end_ps // 1000)])
    return space.SerializeToString()


def _tiny_program(module_name: str, pid: int):
    """A one-fusion program named like the main one (several programs sharing a module name)."""
    cls = xprotos.classes()
    hlo = cls["HloProto"]()
    m = hlo.hlo_module
    m.name = module_name
    m.id = pid
    m.entry_computation_id = 1
    fused = m.computations.add(name="fused_broadcast", id=2)
    c = fused.instructions.add(name="constant.1", opcode="constant", id=10)
    c.shape.element_type = 11
    b = fused.instructions.add(name="broadcast.1", opcode="broadcast", id=11, operand_ids=[10])
    b.shape.element_type = 11
    b.shape.dimensions.extend([1024])
    fused.root_id = 11
    entry = m.computations.add(name="main", id=1)
    f = entry.instructions.add(name="wrapped_broadcast", opcode="fusion", id=1,
                               called_computation_ids=[2], fusion_kind="kLoop")
    f.shape.element_type = 11
    f.shape.dimensions.extend([1024])
    entry.root_id = 1
    m.entry_computation_id = 1
    m.schedule.sequences[1].instruction_ids.append(1)
    return hlo


def export_trace_json(xspace_bytes: bytes) -> bytes:
    """jaxlib's own converter: the same code jax.profiler uses to write <host>.trace.json.gz."""
    from jax._src.lib import _profiler
    with tempfile.TemporaryDirectory() as tmp:
        _profiler.ProfilerSession().export(xspace_bytes, tmp)
        (json_gz,) = Path(tmp).glob("plugins/profile/*/*.trace.json.gz")
        return json_gz.read_bytes()


def _apply_json_defect(json_gz: bytes, drop: int, ordinal: int = 0) -> bytes:
    doc = json.loads(gzip.decompress(json_gz))
    pid = next(e["pid"] for e in doc["traceEvents"] if e.get("ph") == "M" and
               e.get("name") == "process_name" and e["args"]["name"] == f"/device:GPU:{ordinal}")
    kept, dropped = [], 0
    for e in doc["traceEvents"]:
        if dropped < drop and e.get("ph") == "X" and e.get("pid") == pid:
            dropped += 1
            continue
        kept.append(e)
    doc["traceEvents"] = kept
    return gzip.compress(json.dumps(doc, separators=(",", ":")).encode(), mtime=0)


def generate(sc: Scenario, out_dir) -> Result:
    out_dir = Path(out_dir)
    sim = _Sim(sc)
    sim.run()
    defects = []
    kernels = list(sim.kernels)
    if sc.drop_graph_kernels:
        graph = [k for k in kernels if k.graph_id]
        victims = set(id(k) for k in random.Random(sc.seed).sample(
            graph, min(sc.drop_graph_kernels, len(graph))))
        kernels = [k for k in kernels if id(k) not in victims]
        defects.append({"defect_id": "D1", "kind": "graph_replay_missing", "device": "",
                        "stream": "", "correlation_id": "", "count": len(victims),
                        "description": "graph kernels absent from the capture"})
    if sc.non_launch_correlations:
        # As in the real conv3d capture: consecutive kernels of one step, without hlo_op, share
        # one correlation id, which belongs to a stream-wait host event, not a launch.
        cands = [k for k in kernels if k.launch_start_ps is not None and k.device == 0 and
                 not k.graph_id and k.step == 0 and
                 k.hlo_op_label is not None and k.spec.role == "compute"]
        group = cands[2:2 + sc.non_launch_correlations]
        if group:
            cid = group[0].correlation_id
            dropped = {k.correlation_id for k in group[1:]}
            for e in sim.host:
                ids = [st[2] for st in e.stats if st[0] == "correlation_id"]
                if ids and ids[0] == cid:
                    e.name = "hipStreamWaitEvent" if sc.vendor == "rocm" else \
                        "cuStreamWaitEvent"
                    e.stats = [st for st in e.stats if st[0] in ("correlation_id", "device_id")]
            sim.host = [e for e in sim.host if not any(
                st[0] == "correlation_id" and st[2] in dropped for st in e.stats)]
            for k in group:
                k.hlo_op_label = None
                k.correlation_id = cid
            defects.append({"defect_id": "D2", "kind": "correlation_joins_non_launch",
                            "device": 0, "stream": group[0].stream, "correlation_id": cid,
                            "count": len(group), "description": "kernels without hlo_op whose "
                            "shared correlation id belongs to a stream-wait host event"})
    if sc.device_trace_late:
        late = {e["execution"] for e in sim.executions[:sc.device_trace_late]}
        if sc.late_ids_reused:
            ids: dict = {}
            for k in sim.kernels:
                ids.setdefault(k.execution, set()).add(k.correlation_id)
            order = [sorted(ids.get(e["execution"], ())) for e in sim.executions]
            kept = order[len(late)]
            reuse = {c: kept[i % len(kept)] for n in sorted(late) for i, c in enumerate(order[n])}
            for e in sim.host:
                e.stats = [(st[0], st[1], reuse.get(st[2], st[2]))
                           if st[0] == "correlation_id" else st for st in e.stats]
        kernels = [k for k in kernels if k.execution not in late]
        defects.append({"defect_id": "D3", "kind": "device_trace_late", "device": "",
                        "stream": "", "correlation_id": "", "count": len(late),
                        "description": "program executions recorded on the host whose GPU "
                                       "events the device trace does not hold"})
    if sc.straggler_gpu is not None:
        defects.append({"defect_id": "S1", "kind": "straggler", "device": sc.straggler_gpu,
                        "stream": "", "correlation_id": "", "count": "",
                        "description": f"kernels {sc.straggler_factor}x slower"})
    parts = PARTITIONS.get(sc.program) if sc.plan is None else None
    if parts and sc.gpus < parts:
        defects.append({"defect_id": "P1", "kind": "incomplete_capture", "device": "",
                        "stream": "", "correlation_id": "", "count": parts - sc.gpus,
                        "description": f"a program sharded over {parts} devices recorded on "
                                       f"{sc.gpus} GPUs"})
    if sc.expected_verdict in ("launch-bound", "device-bound"):
        defects.append({"defect_id": "V1", "kind": sc.expected_verdict.replace("-", "_"),
                        "device": "", "stream": "", "correlation_id": "", "count": "",
                        "description": "planted by the scenario's host and device costs"})
    xspace = _write_xspace(sim, sc, kernels)
    json_gz = export_trace_json(xspace)
    if sc.json_drop_gpu_events:
        json_gz = _apply_json_defect(json_gz, sc.json_drop_gpu_events)
        defects.append({"defect_id": "J1", "kind": "json_disagrees", "device": 0, "stream": "",
                        "correlation_id": "", "count": sc.json_drop_gpu_events,
                        "description": "GPU events dropped from the trace json only"})
    run_dir = out_dir / "plugins" / "profile" / RUN
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    xplane = run_dir / f"{sc.host}.xplane.pb"
    xplane.write_bytes(xspace)
    trace = run_dir / f"{sc.host}.trace.json.gz"
    trace.write_bytes(json_gz)
    truth = out_dir / "truth"
    truth.mkdir(exist_ok=True)
    kernel_rows = _truth_kernels(sim, kernels)
    _write_csv(truth / "kernels.csv", kernel_rows)
    _write_csv(truth / "steps.csv", sim.steps)
    _write_csv(truth / "defects.csv", defects, ["defect_id", "kind", "device", "stream",
                                                "correlation_id", "count", "description"])
    iterations = _truth_iterations(sim, kernels)
    _write_csv(truth / "iterations.csv", iterations, ITERATION_COLUMNS)
    programs = _truth_programs(sim, sc, kernels)
    _write_csv(truth / "programs.csv", programs, PROGRAM_COLUMNS)
    meta = asdict(sc)
    # the other hosts' arrivals (cross_host) are a simulation input, said by their count
    for planted in ("device_trace_late", "late_ids_reused"):  # said only where planted
        if not meta[planted]:
            del meta[planted]
    arrivals = meta.pop("peer_arrivals")
    if arrivals:
        meta["peer_arrivals"] = len(arrivals)
    meta.update({"module": sim.module, "labels": {v: list(k) for k, v in sim.labels.items()},
                 "extra_program_ids": getattr(sim, "extra", []),
                 "compute_streams": sim.compute_stream,
                 "collective_streams": sim.collective_stream})
    if sc.plan is None:
        del meta["plan"]  # the single-program scenarios' scenario.json stays as it always was
    else:
        meta["programs"] = {str(pid): name for pid, name in _program_names(sim, sc).items()}
        meta["planted"] = {"dispatch_bound": sc.plan.dispatch_bound,
                           "straggler": sc.straggler_gpu is not None}
    (truth / "scenario.json").write_text(json.dumps(meta, indent=1, sort_keys=True, default=str))
    return Result(run_dir, xplane, trace, truth, kernel_rows, sim.steps, defects, iterations,
                  programs, sim.arrivals)


ITERATION_COLUMNS = ["iteration", "device", "start_ps", "end_ps", "first_launch_ps", "busy_ps",
                     "executions", "kernels", "argument_copies", "programs"]
PROGRAM_COLUMNS = ["program_id", "module", "executions", "executions_per_iteration",
                   "kernels_per_execution", "gpus", "gpu_ps"]


def _program_names(sim: _Sim, sc: Scenario) -> dict[int, str]:
    """Every program written into /host:metadata: id -> module name."""
    if sc.plan is not None:
        return {c.program_id: c.module for c in sim.compiled.values()}
    ids = [sc.program_id] + ([sc.duplicate_program_id] if sc.duplicate_program_id else []) + \
        list(getattr(sim, "extra", []))
    return {pid: sim.module for pid in sorted(ids)}


def _truth_iterations(sim: _Sim, kernels: list[Planted]) -> list[dict]:
    """One row per iteration (step) x GPU with GPU events in it: its first and last GPU
    activity, the host's first launch for it, and the programs whose work ran there, in
    execution order."""
    by: dict[tuple, list[Planted]] = {}
    for k in kernels:
        if k.step is not None:
            by.setdefault((k.step, k.device), []).append(k)
    execs = {e["execution"]: e for e in sim.executions}
    rows = []
    for (step, device), ks in sorted(by.items()):
        ran = sorted({k.execution for k in ks if k.instruction})
        rows.append({
            "iteration": step, "device": device,
            "start_ps": min(k.start_ps for k in ks),
            "end_ps": max(k.start_ps + k.dur_ps for k in ks),
            "first_launch_ps": min(k.launch_start_ps for k in ks),
            "busy_ps": _union((k.start_ps, k.start_ps + k.dur_ps) for k in ks),
            "executions": len(ran), "kernels": len(ks),
            "argument_copies": sum(1 for k in ks if not k.instruction),
            "programs": ";".join(f"{execs[x]['module']}({execs[x]['program_id']})"
                                 for x in ran)})
    return rows


def _truth_programs(sim: _Sim, sc: Scenario, kernels: list[Planted]) -> list[dict]:
    """One row per program written: how often it runs, the GPU events one execution launches on
    one GPU (planted, so before any planted defect), where its work ran and for how long (as
    written). Argument copies are outside every program: not counted."""
    steps = sorted({e["step"] for e in sim.executions if e["step"] is not None})
    rows = []
    for pid, module in _program_names(sim, sc).items():
        execs = [e for e in sim.executions if e["program_id"] == pid]
        per_step = [sum(1 for e in execs if e["step"] == s) for s in steps]
        launched = Counter((k.execution, k.device) for k in sim.kernels
                           if k.program_id == pid and k.instruction)
        mine = [k for k in kernels if k.program_id == pid and k.instruction]
        rows.append({
            "program_id": pid, "module": module, "executions": len(execs),
            "executions_per_iteration": ";".join(map(str, per_step)) if len(set(per_step)) > 1
            else (per_step[0] if per_step else 0),
            "kernels_per_execution": ";".join(map(str, sorted(set(launched.values())))),
            "gpus": ";".join(map(str, sorted({k.device for k in mine}))),
            "gpu_ps": sum(k.dur_ps for k in mine)})
    return rows


def _truth_kernels(sim: _Sim, kernels: list[Planted]) -> list[dict]:
    rows = []
    frames: dict[tuple, tuple[str, str]] = {}
    for k in sorted(kernels, key=lambda k: (k.device, k.stream, k.start_ps)):
        program = sim.program_of(k.program_id).program
        key = (id(program), k.instruction)
        if key not in frames:
            ins = program.by_name.get(k.instruction)
            fr = program.frames(ins) if ins is not None else []
            user = program.user_frame(ins) if ins is not None else None
            frames[key] = (str(fr[0]) if fr else "", f"{user} {user.function}" if user else "")
        source, user = frames[key]
        rows.append({"device": k.device, "stream": k.stream, "correlation_id": k.correlation_id,
                     "start_ps": k.start_ps, "dur_ps": k.dur_ps, "kernel": k.kernel,
                     "program_id": k.program_id, "instruction": k.instruction,
                     "source": source, "user_frame": user, "graph": 1 if k.graph_id else 0,
                     "step": "" if k.step is None else k.step, "inner_instruction": k.inner})
    return rows


def _write_csv(path: Path, rows: list[dict], columns: list[str] | None = None) -> None:
    columns = columns or (list(rows[0]) if rows else [])
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=columns, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)


def generate_hosts(sc: Scenario, out_dir, hosts: int, slow_host: int | None = None,
                   slow_factor: float = 1.5, cross_host: bool = False) -> list[Result]:
    """A multi-host run as a multi-host job writes it: one `<host>.xplane.pb` and
    `<host>.trace.json.gz` per host in the same run folder (jax.profiler on each process writes
    its own host's files, named after the host; xprof's profile plugin lists a run's hosts from
    those file names). Host i is `sc` with its own name (`<sc.host>-<i>`) and seed; host
    `slow_host` runs every kernel `slow_factor` times slower. Each host's truth goes to
    truth/<host>/ and truth/hosts.csv names the hosts and the planted slow one.
    `cross_host`: the collectives span hosts (one all-reduce over every host's GPUs, as a
    data-parallel job across hosts runs it): each ends `transfer` after the last participant of
    every host arrives, so one slow host makes every host wait inside its collectives and every
    host's step as long as its own. The hosts are simulated together by fixed point: each pass
    gives every host the latest arrival of the others at each collective from the pass before,
    until no arrival moves (arrivals only grow, bounded by the slowest host's). Without it each
    host's collectives wait only for its own GPUs."""
    out_dir = Path(out_dir)
    specs = [replace(sc, host=f"{sc.host}-{i}", seed=sc.seed + i,
                     work_scale=sc.work_scale * (slow_factor if i == slow_host else 1.0))
             for i in range(hosts)]
    peers: list[dict] = [{} for _ in specs]
    for _ in range(MAX_HOST_PASSES if cross_host else 1):
        with tempfile.TemporaryDirectory() as tmp:
            arrivals = [generate(replace(h, peer_arrivals=tuple(sorted(peers[i].items()))),
                                 Path(tmp) / str(i)).arrivals for i, h in enumerate(specs)]
        new = [{k: max(a.get(k, 0) for j, a in enumerate(arrivals) if j != i)
                for k in arrivals[i]} for i in range(len(specs))]
        if not cross_host or new == peers:
            break
        peers = new
    return _write_hosts(specs, peers, out_dir, slow_host)


MAX_HOST_PASSES = 20  # fixed-point passes of a cross-host run (a few suffice: 2 to 4 seen)


def _write_hosts(specs: list, peers: list, out_dir: Path, slow_host) -> list[Result]:
    run_dir = out_dir / "plugins" / "profile" / RUN
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    truth = out_dir / "truth"
    if truth.exists():
        shutil.rmtree(truth)
    truth.mkdir()
    results, rows = [], []
    for i, hsc in enumerate(specs):
        with tempfile.TemporaryDirectory() as tmp:
            r = generate(replace(hsc, peer_arrivals=tuple(sorted(peers[i].items()))), tmp)
            xplane = run_dir / r.xplane.name
            trace = run_dir / r.trace.name
            shutil.move(r.xplane, xplane)
            shutil.move(r.trace, trace)
            host_truth = truth / hsc.host
            shutil.move(r.truth_dir, host_truth)
        results.append(Result(run_dir, xplane, trace, host_truth, r.kernels, r.steps, r.defects))
        rows.append({"host": hsc.host, "work_scale": hsc.work_scale,
                     "slow": 1 if i == slow_host else 0})
    _write_csv(truth / "hosts.csv", rows)
    return results
