"""Events for the matcher as the robustness tests build them: kernel_match.Kernel with the
fields attribute_kernels fills before matching, and each event's place in the unperturbed list,
so that a test can compare the answers on a perturbed list with the original ones."""

from __future__ import annotations

from jaxperf.match import kernel_match as km


class Event(km.Kernel):
    """kernel_match.Kernel with `index`: its place in the unperturbed list (-1: an inserted
    event)."""
    __slots__ = ("index",)


def event(index: int, name: str, kind: str, hlo_op: str | None, group: bool, corr,
          start: int | None = None, dur: int | None = None, stream=None) -> Event:
    """An event ready for kernel_match.match: its kind and launch grouping given, no answer."""
    e = Event(0, stream, start, dur, name, corr, hlo_op, None, False, False)
    e.index, e.kind, e.group = index, kind, group
    return e


def fresh(x: Event) -> Event:
    """A copy of x without the matcher's answer."""
    return event(x.index, x.name, x.kind, x.hlo_op, x.group, x.corr, x.start, x.dur, x.lane)
