"""Read a ``<host>.xplane.pb`` into plain Python values (needs only the protobuf runtime).

- Planes are found by name (plane ids are not unique: the host planes all have id 0).
- An event's stats are its event-metadata stats merged with its own (its own win); a string
  stat stored as ``ref_value`` is resolved to the name of the stat-metadata entry it points at.
  Where a key repeats on one event, the first value is kept and the event is counted in
  ``Space.repeated_stat_events``.
- Times are integer picoseconds from the profile start:
  ``line.timestamp_ns * 1000 + event.offset_ps``.
- ``/host:metadata`` holds one serialized ``xla.HloProto`` per program, keyed by program id.

What the reader guarantees (anything else is an XPlaneError: one sentence naming the file):
- the file is at most ``MAX_XPLANE_BYTES`` and parses as an XSpace with planes; no two planes
  share a ``/device:GPU:<n>``, ``/host:CPU`` or ``/host:metadata`` name;
- every event's start and duration are within ``trace_rules.MAX_TIME_PS``, the duration never
  negative, and no event outlasts the profile (``trace_rules.runs_past_capture``: none ends
  after every event's start by more than the capture's own length and a minute), checked for
  every event when the file is loaded;
- every stat the bundle reads (``STAT_KINDS``) holds the kind XLA writes it as: an integer
  (never negative) or a string, or bytes for ``Hlo Proto``; checked where stats are decoded.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from jaxperf.read import xprotos
from tracekit.step_cli import StepError, progress
from tracekit.trace_rules import MAX_TIME_PS, cut_name, runs_past_capture

GPU_PLANE_RE = re.compile(r"^/device:GPU:(\d+)$")
METADATA_PLANE = "/host:metadata"
TASK_ENV_PLANE = "Task Environment"
PROGRAM_NAME_RE = re.compile(r"^(.*)\((\d{1,19})\)$")  # a program id is a 64-bit integer
# protobuf cannot parse a message over 2 GiB, so no xplane can be larger.
MAX_XPLANE_BYTES = (2 << 30) - 1
# The stats this bundle reads and the kind XLA writes each as (int: int64, uint64; str: a
# string, or a ref_value naming one; bytes). Measured on every shared capture: no exception.
_INT_STATS = ("correlation_id", "program_id", "cuda_graph_id", "hip_graph_id", "graph_id",
              "device_id", "group_id", "step_num", "clock_rate", "core_count",
              "memory_bandwidth", "memory_size", "compute_cap_major", "compute_cap_minor",
              "profile_start_time", "profile_stop_time")
_STR_STATS = ("hlo_op", "hlo_module", "module_name", "memcpy_details", "device_vendor",
              "gpu_device_name")
STAT_KINDS = {**{k: int for k in _INT_STATS}, **{k: str for k in _STR_STATS},
              "Hlo Proto": bytes}
_KIND_WORDS = {int: "a non-negative integer", str: "a string", bytes: "bytes"}
UNIQUE_PLANES = ("/host:CPU", "/host:metadata")


class XPlaneError(StepError):
    """The file is not a readable XSpace (exit 1)."""


@dataclass(slots=True)
class Event:
    name: str
    start_ps: int
    duration_ps: int
    stats: dict

    @property
    def end_ps(self) -> int:
        return self.start_ps + self.duration_ps


@dataclass
class Line:
    id: int
    name: str
    timestamp_ns: int
    plane: Plane = field(repr=False)
    _proto: object = field(repr=False)

    def __len__(self) -> int:
        return len(self._proto.events)

    def events(self, only: frozenset | None = None) -> Iterator[Event]:
        """Decode this line's events one by one (nothing is cached). `only`: the stat names to
        decode (others are skipped unread: much faster on large captures)."""
        plane = self.plane
        names = plane.event_names
        meta_stats = plane.metadata_stats
        decode = plane.decode_stats
        ids = None
        if only is not None:
            ids = frozenset(k for k, n in plane.stat_names.items() if n in only)
            meta_stats = {m: {k: v for k, v in st.items() if k in only}
                          for m, st in meta_stats.items()}
        base_ps = self.timestamp_ns * 1000
        for ev in self._proto.events:
            mid = ev.metadata_id
            own = decode(ev.stats, ids) if ev.stats else None
            shared = meta_stats.get(mid)
            if shared and own:
                stats = dict(shared)
                stats.update(own)
            else:
                stats = dict(own or shared or ())
            yield Event(names.get(mid, ""), base_ps + ev.offset_ps, ev.duration_ps, stats)


    def tuples(self, only: frozenset) -> Iterator[tuple]:
        """(name, start_ps, duration_ps, stats) per event, decoding only the stats named in
        `only`: the fast path for large captures (no Event objects, no merging of unneeded
        metadata stats)."""
        plane = self.plane
        names = plane.event_names
        stat_names = plane.stat_names
        ids = {k: n for k, n in stat_names.items() if n in only}
        meta = {m: {k: v for k, v in st.items() if k in only}
                for m, st in plane.metadata_stats.items()}
        meta = {m: st for m, st in meta.items() if st}
        base_ps = self.timestamp_ns * 1000
        kinds = STAT_KINDS
        for ev in self._proto.events:
            mid = ev.metadata_id
            own = {}
            for st in ev.stats:
                key = ids.get(st.metadata_id)
                if key is None or key in own:  # a repeated key: the first value is kept
                    continue
                kind = st.WhichOneof("value")
                value = own[key] = stat_names.get(st.ref_value, "") if kind == "ref_value" \
                    else getattr(st, kind) if kind else None
                want = kinds.get(key)
                if want is not None and (type(value) is not want or
                                         (want is int and value < 0)):
                    plane.bad_stat(key, value)
            shared = meta.get(mid)
            yield (names.get(mid, ""), base_ps + ev.offset_ps, ev.duration_ps,
                   {**shared, **own} if shared else own)


    def select(self, metadata_ids: frozenset, only: frozenset) -> Iterator[tuple]:
        """`tuples()` for the events whose metadata id is in `metadata_ids` only (the others
        are skipped without decoding a stat)."""
        if not metadata_ids:
            return
        plane = self.plane
        names = plane.event_names
        decode = plane.decode_stats
        ids = frozenset(k for k, n in plane.stat_names.items() if n in only)
        meta = plane.metadata_stats
        base_ps = self.timestamp_ns * 1000
        for ev in self._proto.events:
            mid = ev.metadata_id
            if mid not in metadata_ids:
                continue
            stats = {k: v for k, v in meta.get(mid, {}).items() if k in only}
            stats.update(decode(ev.stats, ids))
            yield names.get(mid, ""), base_ps + ev.offset_ps, ev.duration_ps, stats


class Plane:
    def __init__(self, proto, space: Space):
        self._proto = proto
        self._space = space
        self.id = proto.id
        self.name = proto.name
        self.stat_names = {k: v.name for k, v in proto.stat_metadata.items()}
        # a name past trace_rules.MAX_NAME_CHARS is cut, as the trace reader cuts it
        self.event_names = {k: cut_name(v.name) for k, v in proto.event_metadata.items()}
        self.metadata_stats = {}
        for k, md in proto.event_metadata.items():
            if md.stats:
                self.metadata_stats[k] = self.decode_stats(md.stats)
        self.stats = self.decode_stats(proto.stats)
        self.lines = [
            Line(ln.id, ln.name, ln.timestamp_ns, self, ln)
            for ln in proto.lines
        ]

    def __repr__(self) -> str:
        return f"Plane({self.name!r}, lines={len(self.lines)})"

    def decode_stats(self, stats, ids: frozenset | None = None) -> dict:
        names = self.stat_names
        out = {}
        for st in stats:
            if ids is not None and st.metadata_id not in ids:
                continue
            key = names.get(st.metadata_id, str(st.metadata_id))
            kind = st.WhichOneof("value")
            if kind == "ref_value":
                value = names.get(st.ref_value, "")
            elif kind is None:
                value = None
            else:
                value = getattr(st, kind)
            if key in out:
                self._space.repeated_stat_events += 1
                continue
            want = STAT_KINDS.get(key)
            if want is not None and (type(value) is not want or (want is int and value < 0)):
                self.bad_stat(key, value)
            out[key] = value
        return out

    def bad_stat(self, key: str, value) -> None:
        """Raise the one sentence for a stat of the wrong kind."""
        shown = repr(value)
        shown = shown if len(shown) <= 40 else shown[:30] + "..."
        raise XPlaneError(f"{self._space.path} has a {key} stat on plane {_name(self.name)} "
                          f"holding {type(value).__name__} {shown}; XLA writes it as "
                          f"{_KIND_WORDS[STAT_KINDS[key]]}, so the file is corrupt")

    def event_count(self) -> int:
        return sum(len(ln) for ln in self.lines)

    @property
    def gpu_ordinal(self) -> int | None:
        m = GPU_PLANE_RE.match(self.name)
        return int(m.group(1)) if m else None

    def event_metadata_items(self) -> Iterator[tuple[int, str, dict]]:
        """(id, name, merged stats) for each event-metadata entry, in id order."""
        for k in sorted(self._proto.event_metadata):
            md = self._proto.event_metadata[k]
            yield k, md.name, self.metadata_stats.get(k, {})


def _name(text: str) -> str:
    """A plane or line name for a sentence: control characters escaped, cut at 60."""
    shown = repr(text)[1:-1]
    return shown if len(shown) <= 60 else shown[:57] + "..."


class Space:
    def __init__(self, proto, path: Path):
        self.path = path
        self.repeated_stat_events = 0
        self.hostnames = list(proto.hostnames)
        self.errors = list(proto.errors)
        self.warnings = list(proto.warnings)
        seen: set = set()
        extents: list = []
        for i, p in enumerate(proto.planes):
            progress("checking the xplane's planes", i, len(proto.planes), "planes")
            # a GPU plane by its ordinal: /device:GPU:0 and /device:GPU:00 are one GPU twice
            m = GPU_PLANE_RE.match(p.name)
            key = ("GPU", int(m.group(1))) if m else p.name
            if (p.name in UNIQUE_PLANES or m) and key in seen:
                raise XPlaneError(f"{path} holds two planes for {_name(p.name)}"
                                  f"{' (GPU ' + str(key[1]) + ')' if m else ''}; XProf writes "
                                  "each once, so the file is corrupt or merged")
            seen.add(key)
            extents.extend(_check_times(path, p))
        _check_extent(path, extents)
        self.planes = [Plane(p, self) for p in proto.planes]

    def plane(self, name: str) -> Plane | None:
        for p in self.planes:
            if p.name == name:
                return p
        return None

    def gpu_planes(self) -> list[Plane]:
        """``/device:GPU:n`` planes sorted by ordinal (idle GPUs included, with no lines)."""
        gpus = [p for p in self.planes if p.gpu_ordinal is not None]
        return sorted(gpus, key=lambda p: p.gpu_ordinal)

    def hlo_protos(self) -> dict[int, tuple[str, bytes]]:
        """program id -> (``<module>(<id>)`` entry name, serialized ``xla.HloProto``).

        The program id is the ``(<id>)`` of the entry's name. The entry's own metadata id equals
        it in the ROCm captures but not in jax 0.10.2 CPU captures (there it counts 1, 2, ...),
        so it is used only when the name carries no id."""
        md = self.plane(METADATA_PLANE)
        out = {}
        if md is None:
            return out
        for mid, name, stats in md.event_metadata_items():
            blob = stats.get("Hlo Proto")
            if isinstance(blob, bytes) and blob:
                m = PROGRAM_NAME_RE.match(name)
                out[int(m.group(2)) if m else mid] = (name, blob)
        return dict(sorted(out.items()))

    def profile_times_ns(self) -> tuple[int | None, int | None]:
        env = self.plane(TASK_ENV_PLANE)
        if env is None:
            return None, None
        return env.stats.get("profile_start_time"), env.stats.get("profile_stop_time")


def _check_times(path: Path, plane) -> list:
    """Every event of the plane starts within MAX_TIME_PS of the profile start and lasts 0 to
    MAX_TIME_PS; else the sentence names the first event that does not. Returns each line's
    extent: (first start, last start, last end, the plane, the line, its timestamp in ps)."""
    extents = []
    for ln in plane.lines:
        evs = ln.events
        if not evs:
            continue
        base = ln.timestamp_ns * 1000
        offs = [e.offset_ps for e in evs]
        durs = [e.duration_ps for e in evs]
        if (min(durs) >= 0 and max(durs) <= MAX_TIME_PS and base + min(offs) >= -MAX_TIME_PS
                and base + max(offs) <= MAX_TIME_PS):
            extents.append((base + min(offs), base + max(offs),
                            base + max(map(operator.add, offs, durs)), plane, ln, base))
            continue
        for i, (o, d) in enumerate(zip(offs, durs, strict=True)):
            if d < 0 or d > MAX_TIME_PS:
                what = f"a duration of {d:,} ps"
            elif abs(base + o) > MAX_TIME_PS:
                what = f"a start {base + o:,} ps from the profile start"
            else:
                continue
            raise XPlaneError(f"{path} has an event (number {i:,} of line {_name(ln.name)} on "
                              f"plane {_name(plane.name)}) with {what}; expected 0 to "
                              f"{MAX_TIME_PS:,} ps, so the file is corrupt")
    return extents


def _check_extent(path: Path, extents: list) -> None:
    """No event outlasts the capture (trace_rules.runs_past_capture)."""
    if not extents:
        return
    first, last = min(e[0] for e in extents), max(e[1] for e in extents)
    _, _, end, plane, ln, base = max(extents, key=lambda e: e[2])
    if runs_past_capture(first, last, end):
        i = next(i for i, e in enumerate(ln.events)
                 if base + e.offset_ps + e.duration_ps == end)
        raise XPlaneError(f"{path} has an event (number {i:,} of line {_name(ln.name)} on "
                          f"plane {_name(plane.name)}) lasting {ln.events[i].duration_ps:,} "
                          f"ps, to {(end - last) / 1e6:,.0f} us after the last event starts, "
                          f"while all start within {(last - first) / 1e6:,.0f} us: it "
                          "outlasts the profile that recorded it, so the file is corrupt")


def stream_totals(space: Space) -> list[list[int]]:
    """[device, stream line id, events, summed duration ps] of every GPU plane's "Stream #"
    line, in plane and line order (step 2's check 1 against the trace's)."""
    out = []
    for plane in space.gpu_planes():
        for line in plane.lines:
            if line.name.startswith("Stream #"):
                n = total = 0
                for ev in line._proto.events:
                    n += 1
                    total += ev.duration_ps
                out.append([plane.gpu_ordinal, line.id, n, total])
    return out


def load_space(path) -> Space:
    """Parse an xplane.pb file; raise XPlaneError with one sentence when it cannot be read."""
    path = Path(path)
    classes = xprotos.classes()
    try:
        size = path.stat().st_size
        if size > MAX_XPLANE_BYTES:
            raise XPlaneError(f"{path} is {size:,} bytes, over the 2 GiB protobuf can parse; "
                              "it is not an xplane XProf wrote")
        progress("reading the xplane", size >> 20, unit="MiB")
        data = path.read_bytes()
    except OSError as exc:
        raise XPlaneError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except MemoryError as exc:
        raise XPlaneError(f"{path} is too large to read into this machine's memory") from exc
    if not data:
        raise XPlaneError(f"{path} is empty; expected a serialized XSpace from XProf")
    try:
        proto = classes["XSpace"].FromString(data)
    except Exception as exc:  # the runtime raises DecodeError or RuntimeError by backend
        raise XPlaneError(
            f"{path} is not a readable XSpace protobuf (truncated or another format): {exc}"
        ) from exc
    if not proto.planes:
        raise XPlaneError(f"{path} parsed but holds no planes; expected XProf's xplane.pb")
    return Space(proto, path)


def space_of(capture) -> Space:
    """The capture's xplane, decoded once per process (kept in `capture_inputs.Capture`)."""
    if capture.files.xplane is None:
        raise XPlaneError(f"no <host>.xplane.pb for host {capture.files.host} in "
                          f"{capture.files.run_dir}")
    return capture.cached("space", lambda: load_space(capture.files.xplane))


def parse_hlo(blob: bytes):
    """Parse a serialized ``xla.HloProto`` and return its ``HloModuleProto``."""
    return xprotos.classes()["HloProto"].FromString(blob).hlo_module
