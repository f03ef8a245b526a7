"""What step 7 (the trust list) reads of step 1's rows.csv, summarised in one pass (standard
library only): by the child that writes rows.csv, row by row as it writes them (handed on beside
the table, keyed to it), or by step 7 from the table itself where nothing was handed on. One
rule for both: `Summary.add` takes each row as rows.csv's cells (text), in the table's order."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from tracekit import scratch
from tracekit.scratch import number

# The hand-off's name (scratch.handoff_put), keyed to rows.csv as it was written.
HANDOFF = "row_facts"
# The rows.csv columns a Summary reads, in the order `Summary.add` takes them.
COLUMNS = ["device", "dur_us", "graph", "category", "join", "launch_name", "step",
           "correlation_id", "hlo_op"]
# A graph is known by the id in its launch call's name ("cuGraphLaunch (CudaGraph:7)") or by the
# hlo_op label its kernels carry (command_buffer_<k>, call.<k>): replays of one graph must record
# the same number of kernels. hipGraphLaunch names carry no id; without a label such launches
# cannot be told apart, and are left out (said in a note).
GRAPH_ID_IN_NAME = re.compile(r"Graph:\s*\d+")
# ROCm memcpy launch calls; their records carry `memcpy_details kind:Unknown size:0`
# (references/capture-facts.md, all shared MI300X captures), so direction and size are unknown.
ROCM_MEMCPY_LAUNCH = re.compile(r"^hipMemcpy", re.I)


@dataclass
class RowFacts:
    """rows.csv in one pass: GPU time, graph events, collectives, the memcpys launched by
    hipMemcpy* calls ([device, us] in the table's order: counted on the GPUs step 0 finds AMD,
    `rocm_memcpys`), and the kernels each graph replay recorded (replays inside analysed steps
    only: a replay cut by the capture's start or end is not short)."""
    device_us: float = 0.0
    graph_events: int = 0
    graph_us: float = 0.0
    collective_events: int = 0
    collective_us: float = 0.0
    hip_memcpys: list = field(default_factory=list)
    missing_replays: dict = field(default_factory=dict)  # device -> kernels
    replay_graphs: dict = field(default_factory=dict)    # device -> graphs short
    unidentified_launches: int = 0

    def rocm_memcpys(self, amd_devices: set) -> tuple[int, float]:
        """How many of the hipMemcpy*-launched memcpys ran on the AMD GPUs, and their us."""
        mine = [dur for device, dur in self.hip_memcpys if device in amd_devices]
        return len(mine), sum(mine, 0.0)

    @classmethod
    def from_json(cls, d: dict) -> RowFacts:
        """The facts handed on (KeyError, TypeError or ValueError where they are not these)."""
        f = cls(**d)
        kinds = {"device_us": float, "graph_us": float, "collective_us": float, "graph_events": int,
                 "collective_events": int, "unidentified_launches": int, "hip_memcpys": list,
                 "missing_replays": dict, "replay_graphs": dict}
        if any(type(getattr(f, k)) is not t for k, t in kinds.items()) or not all(
                type(x) is list and len(x) == 2 and type(x[0]) is str and type(x[1]) is float
                for x in f.hip_memcpys):
            raise ValueError("not the facts of rows.csv")
        return f


def handed_on(folder: Path) -> RowFacts | None:
    """The facts step 1 handed on for rows.csv in `folder` as it is now; None where there are
    none, or the table has changed since."""
    return scratch.handoff_get(folder, HANDOFF, [Path(folder) / "rows.csv"], RowFacts.from_json)


class Summary:
    """RowFacts, a row at a time (`add`, rows.csv's cells), then `facts()`."""

    def __init__(self):
        self.f = RowFacts()
        self.launches: dict = {}  # (device, correlation id) -> [launch name, labels, events]

    def add(self, device, dur_us, graph, category, join, launch_name, step, corr, hlo_op):
        f = self.f
        dur = number(dur_us, 0.0)
        f.device_us += dur
        if graph == "1":
            f.graph_events += 1
            f.graph_us += dur
        if category == "collective":
            f.collective_events += 1
            f.collective_us += dur
        if category == "memcpy" and join == "launch" and ROCM_MEMCPY_LAUNCH.match(launch_name):
            f.hip_memcpys.append([device, dur])
        if join == "graph_launch" and step != "":
            if (e := self.launches.get((device, corr))) is None:
                e = self.launches[(device, corr)] = [launch_name, set(), 0]
            if hlo_op:
                e[1].add(hlo_op)
            e[2] += 1

    def facts(self) -> RowFacts:
        f = self.f
        graphs: dict = {}
        for (device, _), (name, labels, n) in self.launches.items():
            label = min(labels) if labels else ""
            if not label and not GRAPH_ID_IN_NAME.search(name):
                f.unidentified_launches += 1
                continue
            graphs.setdefault((device, name, label), []).append(n)
        for (device, name, label), counts in sorted(graphs.items()):
            if short := sum(max(counts) - n for n in counts):
                f.missing_replays[device] = f.missing_replays.get(device, 0) + short
                f.replay_graphs.setdefault(device, []).append(
                    f"{name}{' ' + label if label else ''}: "
                    f"{sum(1 for n in counts if n < max(counts))} of {len(counts)} replays short, "
                    f"{short} kernels")
        return f


def summarise(rows) -> RowFacts:
    """RowFacts of rows.csv's rows (tuples of the COLUMNS cells, scratch.stream)."""
    s = Summary()
    for row in rows:
        s.add(*row)
    return s.facts()
