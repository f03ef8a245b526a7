"""The records a capture becomes, on any device: the one model the steps build and read.

A reader fills them from what the capture holds; an analysis reads them and never asks which
device made them (a device's own facts come through its adapter, jaxperf.device.adapters).
Between steps they travel as the scratch folder's declared tables (tracekit/scratch.toml).

Each record, what fills it on a GPU and on a TPU, and the table that carries it:
- `Device`, the chip (kind, model, cores, peaks each with its source, versions): a GPU's named
  from its device stats, its peaks a datasheet's (jaxperf.gpu); a TPU's read from the plane
  (jaxperf.tpu.chip). capture_info.json `device`.
- `Step`, one step (its window, how it was framed, its program runs): step_framing on both; a
  TPU's Steps line where it counts steps. steps.csv.
- `ProgramRun`, one dispatch of one program (module, window, the host threads that ran it): a
  GPU's host execution events; a TPU's `XLA Modules` run joined to its dispatch
  (tracekit.tpu.join_runs). steps.csv `executions`, attribution/programs.csv.
- `OpRun`, one run of device work on a lane (device, lane, name, start, duration, category): a
  GPU's kernel, memcpy or memset on a stream, its instruction matched (jaxperf.match); a TPU's
  `XLA Ops` event, its instruction itself. rows.csv, attribution/kernels.csv; the GPU-only
  columns (correlation id, graph, launch) in their child tables rows_gpu.csv and
  attribution/kernels_gpu.csv.
- `HostCall`, one host event (a dispatch, a launch, a sync): the trace's host threads on both.
  rows.csv's launch columns, gaps.csv `host_events`.

A step extends an op run with what it learns (no call up: every field set in its constructor):
step 1 its host call and step (gpu_events.TraceEvent), step 4 its instruction, how it was known
and how sure (kernel_match.Kernel). Host calls stay the trace reader's dicts (millions: a class
would cost the read its mark); `HostCall` declares their keys.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NotRequired, TypedDict


class Device(TypedDict):
    """The device a capture ran on: `kind` GPU, TPU or CPU (None: not known), `model`, `cores`
    (device planes), `peaks` (name -> {value, unit, label, source}; None where the capture
    holds none and step 5 takes a datasheet's), `versions` (jax, jaxlib, the runtime; None);
    a TPU's `generation` and `megacore` besides."""
    kind: str | None
    model: str | None
    cores: int
    peaks: dict | None
    versions: dict | None
    generation: NotRequired[str | None]
    megacore: NotRequired[bool]


class HostCall(TypedDict):
    """One host event as the trace reader gives it: `name`, `start` and `dur` (integer
    picoseconds), `thread` ((pid, tid)), `args` (the event's own)."""
    name: str
    start: int
    dur: int
    thread: tuple
    args: dict


class OpRun:
    """One run of device work on a lane: where it ran (`device`, `lane`: a GPU's stream, a
    TPU's op line), what it was (`name`), when (`start`, `dur`: integer picoseconds), its
    `category` (compute, collective or memcpy) and whether a graph launched it (`graph`: a
    GPU's CUDA or HIP graph; False on a TPU)."""
    __slots__ = ("device", "lane", "name", "start", "dur", "category", "graph")


@dataclass(slots=True)
class ProgramRun:
    """One dispatch of one program: its `module`, window (`start`, `end`: ps), the host
    `thread` that ran it and every thread that did (`threads`: a program on several GPUs runs
    one execution thread a GPU), its `program_id` and device `ordinal` where the event names
    them."""
    module: str
    start: int
    end: int
    thread: object
    program_id: int | None = None
    ordinal: int | None = None
    threads: set = field(default_factory=set)

    def __post_init__(self):
        self.threads.add(self.thread)


@dataclass
class Step:
    """One step: `number`, window (`start`, `end`: ps), how it was framed (`source`), cut by the
    capture (`partial`), when the host ended dispatching it (`launched`, program-cycle steps),
    its program runs (`executions`) and those outside the repeating cycle (`extra`)."""
    number: int
    start: int
    end: int
    source: str
    partial: bool = False
    launched: int | None = None
    executions: list = field(default_factory=list)
    extra: int = 0
