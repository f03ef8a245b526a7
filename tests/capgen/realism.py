"""The structure of a capture as a set of features, to compare generated captures with real ones.

A feature is a hashable tuple: plane names, line-name patterns, the stat names and value kinds of
each kind of event, which string stats are refs, and the layout of the trace json. Names are
normalized (numbers -> N, module names -> <module>) so that two captures of different programs
compare on their structure.
"""

from __future__ import annotations

import gzip
import json
import re

from jaxperf.read import xprotos

NUM = re.compile(r"-?\d+")
CHAIN_EVENTS = ("GpuExecutable::ExecuteThunks", "PjRtStreamExecutorLoadedExecutable::Execute",
                "Thunks::Prepare", "Thunks::Initialize")
LAUNCH_LINE = re.compile(r"^Host Threads/\d+$")


def _norm(name: str) -> str:
    return NUM.sub("N", name)


def _plane_kind(name: str) -> str:
    return _norm(name)


def _kinds(plane, stats) -> frozenset:
    names = {k: v.name for k, v in plane.stat_metadata.items()}
    return frozenset((names.get(s.metadata_id, "?"), s.WhichOneof("value")) for s in stats)


def xplane_features(data: bytes) -> set:
    space = xprotos.classes()["XSpace"].FromString(data)
    out = set()
    for plane in space.planes:
        pk = _plane_kind(plane.name)
        out.add(("plane", pk))
        for name, kind in _kinds(plane, plane.stats):
            out.add(("plane_stat", pk, name, kind))
        ev_names = {k: v.name for k, v in plane.event_metadata.items()}
        meta_kinds = {k: _kinds(plane, v.stats) for k, v in plane.event_metadata.items()}
        if plane.name == "/host:metadata":
            for k, v in plane.event_metadata.items():
                out.add(("program_entry_named_with_id", bool(re.match(r".*\(\d+\)$", v.name))))
                for s in meta_kinds[k]:
                    out.add(("metadata_stat",) + s)
        for line in plane.lines:
            lk = _norm(line.name)
            out.add(("line", pk, lk))
            out.add(("line_display_is_name", pk, lk, line.display_name == line.name))
            gpu = pk == "/device:GPU:N"
            launch = LAUNCH_LINE.match(line.name) is not None
            for ev in line.events:
                name = ev_names.get(ev.metadata_id, "")
                kinds = _kinds(plane, ev.stats) | meta_kinds.get(ev.metadata_id, frozenset())
                if gpu:
                    out.add(("gpu_event_stats", tuple(sorted(kinds))))
                elif launch:
                    out.add(("launch_event_stats", name, tuple(sorted(kinds))))
                elif name in CHAIN_EVENTS:
                    out.add(("chain_event", name, tuple(sorted(kinds))))
                elif name.endswith(":XLA GPU module"):
                    out.add(("chain_event", "<module>:XLA GPU module", tuple(sorted(kinds))))
    return out


def trace_features(json_gz: bytes) -> set:
    doc = json.loads(gzip.decompress(json_gz))
    out = {("json_top_keys", tuple(sorted(doc))), ("json_time_unit", doc.get("displayTimeUnit")),
           ("json_metadata_keys", tuple(sorted(doc.get("metadata", {}))))}
    events = doc["traceEvents"]
    out.add(("json_trailing_empty", events[-1] == {}))
    names = {}
    for e in events:
        if e.get("ph") == "M":
            out.add(("json_meta_event", e.get("name")))
            if e.get("name") == "process_name":
                names[e["pid"]] = e["args"]["name"]
                out.add(("json_process", _norm(e["args"]["name"])))
    for e in events:
        if e.get("ph") == "X":
            out.add(("json_x_keys", tuple(sorted(k for k in e if k != "args"))))
            args = e.get("args", {})
            out.add(("json_args_all_strings", all(isinstance(v, str) for v in args.values())))
            if names.get(e["pid"], "").startswith("/device:GPU"):
                out.add(("json_gpu_arg_keys", tuple(sorted(args))))
        elif e:
            out.add(("json_phase", e.get("ph")))
    return out
