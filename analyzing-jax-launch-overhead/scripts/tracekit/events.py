"""The one record of a GPU event, shared by every step that reads events."""

from __future__ import annotations


class GpuEvent:
    """One GPU stream event (a kernel, memcpy or memset; on a CPU capture an XLA:CPU thunk
    event): where it ran (`device`, `stream`), what it was (`name`), when (`start`, `dur`:
    integer picoseconds), its `category` (gpu.category: compute, collective or memcpy)
    and whether it ran inside a graph (`graph`). A step that learns more of an event extends
    this record with slots of its own and sets every field in its own constructor (no call up:
    a capture holds hundreds of thousands of events): step 1 its host call and step
    (gpu_events.TraceEvent), step 4 its instruction (kernel_match.Kernel)."""
    __slots__ = ("device", "stream", "name", "start", "dur", "category", "graph")
