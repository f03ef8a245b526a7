"""Read a ``<host>.xplane.pb`` into plain Python values (needs only the protobuf runtime).

- Planes are found by name (plane ids are not unique: the host planes all have id 0).
- An event's stats are its event-metadata stats merged with its own (its own win); a string
  stat stored as ``ref_value`` is resolved to the name of the stat-metadata entry it points at.
  Where a key repeats on one event, the first value is kept and the event is counted in
  ``Space.repeated_stat_events``.
- Times are integer picoseconds from the profile start:
  ``line.timestamp_ns * 1000 + event.offset_ps``.
- Events are columns: protobuf parses the file with every line's events left as bytes
  (``xprotos.BULK``); the events of all lines are then decoded at once (``wire``: a field at a
  time across all of them) into metadata ids, offsets and durations, and a line's stats when it
  is first read. ``Line.columns(only)`` gives numpy columns and one list per stat asked for;
  ``Line.events()`` the same one event at a time, for small uses. A test holds the decoding
  equal to protobuf's own parser on every shared capture.
- ``/host:metadata`` holds one serialized ``xla.HloProto`` per program, keyed by program id.

What the reader guarantees (anything else is an XPlaneError: one sentence naming the file):
- the file is at most ``MAX_XPLANE_BYTES`` and parses as an XSpace with planes; no two planes
  share a ``/device:GPU:<n>``, ``/host:CPU`` or ``/host:metadata`` name;
- every event's start and duration are within ``trace_rules.MAX_TIME_PS``, the duration never
  negative, and no event outlasts the profile (``trace_rules.runs_past_capture``: none ends
  after every event's start by more than the capture's own length and a minute), checked for
  every event when the file is loaded (or, read lazily, when a plane is first read; step 4
  checks each share of the planes in the process that decodes it, ``Space.checked``, and says
  what a reading in one process would, ``Space.raise_first``);
- every stat the bundle reads (``STAT_KINDS``) holds the kind XLA writes it as: an integer
  (never negative) or a string, or bytes for ``Hlo Proto``; checked where stats are decoded.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from jaxperf.read import wire, xprotos
from tracekit import tpu
from tracekit.step_cli import StepError, progress
from tracekit.trace_rules import MAX_TIME_PS, cut_name, runs_past_capture

GPU_PLANE_RE = re.compile(r"^/device:GPU:(\d+)$")
TPU_PLANE_RE = re.compile(r"^/device:TPU:(\d+)$")
METADATA_PLANE = "/host:metadata"
TASK_ENV_PLANE = "Task Environment"
# a program id is a 64-bit integer, unsigned on a TPU (a fingerprint: 20 digits)
PROGRAM_NAME_RE = re.compile(r"^(.*)\((\d{1,20})\)$")
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
_I64_MAX = (1 << 63) - 1


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


@dataclass(slots=True)
class Columns:
    """Some of a line's events as columns: metadata ids, starts and durations (int64 arrays,
    ps from the profile start) and, per stat name asked for, a list of each event's value
    (None where it has none): its own stat, else its metadata's."""
    mid: np.ndarray
    start: np.ndarray
    dur: np.ndarray
    stats: dict
    present: dict  # stat name -> bool array: the event has a value
    plane: Plane

    def names(self) -> list:
        """Each event's name (its metadata's; "" where it has none)."""
        return _mapped(self.mid, self.plane.event_names, "").tolist()


# XStat's value fields: (field number, wire type) of double, uint64, int64, str, bytes, ref
_VALUE_FIELDS = ((2, 1), (3, 0), (4, 0), (5, 2), (6, 2), (7, 0))


class _Events:
    """Every event of a plane decoded at once, in bulk (wire.fields), lines back to back: the
    metadata id, offset and duration of each; its stats' spans, kept per lockstep round
    (event indices ascending in each) and decoded for a line each time it is read (`stats`).
    `data`: the events' bytes, where string and bytes stats are read."""

    def __init__(self, lines: list):
        raw = [e for ln in lines for e in ln.events]
        self.buf, self.data, starts, ends = wire.spans(raw)
        n = len(raw)
        del raw  # one bytes object per event: let go before the decoding's own arrays
        cols = {8: np.zeros(n, np.int64), 16: np.zeros(n, np.int64), 24: np.zeros(n, np.int64)}
        self.rounds = []  # (event indices, payload positions, lengths) of the stats, per round
        for idx, number, wt, val, length in wire.fields(self.buf, starts, ends):
            tag = number << 3 | wt
            for code, col in cols.items():  # metadata_id, offset_ps, duration_ps
                m = tag == code
                col[idx[m]] = wire.signed(val[m])
            cols[16][idx[tag == 40]] = 0  # num_occurrences: offset_ps's oneof
            m = tag == 34  # a file is under 2 GiB: int32 holds every index and position
            if m.any():
                self.rounds.append((idx[m], val[m].astype(np.int32), length[m]))
        self.mid, self.off, self.dur = cols[8], cols[16], cols[24]

    def stats(self, lo: int, hi: int) -> _Stats:
        """The stats of events lo..hi-1, decoded."""
        parts = []
        for idx, at, length in self.rounds:
            a, b = np.searchsorted(idx, (lo, hi)).tolist()
            if b > a:
                parts.append((idx[a:b], at[a:b], length[a:b]))
        return _Stats(self, parts, lo)


class _Stats:
    """A line's stats, in the order written on each event: its event (within the line), stat
    metadata id, value field (XStat's field number; 0: none), value bits or payload position,
    payload length; `data`: the bytes the payloads are in."""
    __slots__ = ("event", "key", "kind", "val", "len", "data")

    def __init__(self, events: _Events, parts: list, lo: int):
        self.data = events.data
        cat = (lambda i: np.concatenate([p[i] for p in parts]).astype(np.int64)) if parts \
            else (lambda i: np.zeros(0, np.int64))
        self.event, at, ln = cat(0) - lo, cat(1), cat(2)
        ns = at.size
        self.key, self.kind = np.zeros(ns, np.int64), np.zeros(ns, np.int8)
        self.val, self.len = np.zeros(ns, np.uint64), np.zeros(ns, np.int32)
        for idx, number, wt, val, length in wire.fields(events.buf, at, at + ln):
            tag = number << 3 | wt
            m = tag == 8
            self.key[idx[m]] = wire.signed(val[m])
            for f, w in _VALUE_FIELDS:
                m = tag == (f << 3 | w)
                if m.any():
                    i = idx[m]
                    self.kind[i], self.val[i], self.len[i] = f, val[m], length[m]


@dataclass
class Line:
    id: int
    name: str
    timestamp_ns: int
    plane: Plane = field(repr=False)
    _lo: int = field(repr=False)
    _hi: int = field(repr=False)
    _counted: set = field(default_factory=set, repr=False)  # stat names whose repeats are counted

    def __len__(self) -> int:
        return self._hi - self._lo

    @property
    def _events(self) -> _Events:
        return self.plane.events

    # the line's part of its plane's decoded metadata ids, offsets and durations
    mid, off, dur = (property(lambda self, c=c: getattr(self._events, c)[self._lo:self._hi])
                     for c in ("mid", "off", "dur"))

    def columns(self, only: frozenset | None = None, metadata_ids=None) -> Columns:
        """The events as columns with the stats named in `only` (None: every stat); with
        `metadata_ids`, only the events whose metadata id is one of them. The line's stats are
        decoded for the call and let go after it (at ten times the seed's size the stats of
        every line together are 15 million): ask for every stat needed in one call."""
        plane, mid = self.plane, self.mid
        keep = None if metadata_ids is None else np.flatnonzero(
            np.isin(mid, np.fromiter(metadata_ids, np.int64, len(metadata_ids))))
        # checked at load: with events, every start is within MAX_TIME_PS (int64)
        start = self.off + (self.timestamp_ns * 1000 if len(self) else 0)
        cols = Columns(mid if keep is None else mid[keep], start if keep is None else
                       start[keep], self.dur if keep is None else self.dur[keep], {}, {}, plane)
        names = plane.stat_names
        wanted = set(names.values()) if only is None else only
        try:
            stats = self._events.stats(self._lo, self._hi) if wanted else None
        except wire.WireError as exc:  # a decoder's error is the capture's: one sentence
            raise XPlaneError(f"{plane._space.path} is not a readable XSpace protobuf: the "
                              f"stats of line {_name(self.name)} on plane {_name(plane.name)} "
                              f"are corrupt ({exc})") from None
        for key in sorted(wanted):
            values, has = self._stat(stats, key, [k for k, n in names.items() if n == key])
            cols.stats[key] = (values if keep is None else values[keep]).tolist()
            cols.present[key] = has if keep is None else has[keep]
        return cols

    def _stat(self, ev: _Stats, key: str, ids: list) -> tuple[np.ndarray, np.ndarray]:
        """Each event's value of stat `key` (stat metadata ids `ids`) among the line's decoded
        stats `ev`: its own first, else its metadata's; None where neither (an object array),
        and where it has one."""
        plane, mid = self.plane, self.mid
        n = mid.size
        col = np.full(n, None, dtype=object)
        has = np.zeros(n, bool)
        sel = np.flatnonzero(np.isin(ev.key, ids)) if ids else np.zeros(0, np.int64)
        if sel.size:
            events, first = np.unique(ev.event[sel], return_index=True)
            if events.size < sel.size and key not in self._counted:
                plane._space.repeated_stat_events += sel.size - events.size
            self._counted.add(key)
            sel = sel[first]  # a repeated key: the first value is kept
            col[events] = plane.values(key, ev, sel)
            has[events] = True
        if meta := {m: st[key] for m, st in plane.metadata_stats.items() if key in st}:
            ids_ = np.array(sorted(meta), np.int64)
            at = np.minimum(np.searchsorted(ids_, mid), ids_.size - 1)
            fill = (ids_[at] == mid) & ~has
            values = np.empty(ids_.size, object)
            values[:] = [meta[m] for m in ids_.tolist()]
            col[fill] = values[at[fill]]
            has |= fill
        return col, has

    def events(self, only: frozenset | None = None) -> Iterator[Event]:
        """The events one by one, with the stats named in `only` (None: all)."""
        c = self.columns(only)
        keys = list(c.stats)
        rows = zip(*c.stats.values(), strict=True) if keys else itertools.repeat(())
        for name, start, dur, values in zip(c.names(), c.start.tolist(), c.dur.tolist(), rows,
                                            strict=bool(keys)):
            yield Event(name, start, dur,
                        {k: v for k, v in zip(keys, values, strict=True) if v is not None})


class Plane:
    def __init__(self, proto, space: Space):
        self._proto = proto
        self._space = space
        self._events = None
        self.id = proto.id
        self.name = proto.name
        self.stat_names = {k: v.name for k, v in proto.stat_metadata.items()}
        # a name past trace_rules.MAX_NAME_CHARS is cut, as the trace reader cuts it
        self.event_names = {k: cut_name(v.name) for k, v in proto.event_metadata.items()}
        self.metadata_stats = {k: self.decode_stats(md.stats)
                               for k, md in proto.event_metadata.items() if md.stats}
        self.stats = self.decode_stats(proto.stats)
        self.lines = []
        first = 0
        for ln in proto.lines:
            self.lines.append(Line(ln.id, ln.name, ln.timestamp_ns, self, first,
                                   first + len(ln.events)))
            first += len(ln.events)

    @property
    def events(self) -> _Events:
        """The plane's events, decoded in bulk and checked when first read (Space.decode)."""
        if self._events is None:
            self._space.decode([self])
        return self._events

    def __repr__(self) -> str:
        return f"Plane({self.name!r}, lines={len(self.lines)})"

    def decode_stats(self, stats) -> dict:
        names = self.stat_names
        out = {}
        for st in stats:
            key = names.get(st.metadata_id, str(st.metadata_id))
            kind = st.WhichOneof("value")
            value = names.get(st.ref_value, "") if kind == "ref_value" else \
                None if kind is None else getattr(st, kind)
            if key in out:
                self._space.repeated_stat_events += 1
                continue
            want = STAT_KINDS.get(key)
            if want is not None and (type(value) is not want or (want is int and value < 0)):
                self.bad_stat(key, value)
            out[key] = value
        return out

    def values(self, key: str, ev: _Stats, sel: np.ndarray) -> list:
        """The values of the stats at `sel` of a line's decoded events, as Python values (a ref
        is the name of the stat-metadata entry it points at), each of the kind STAT_KINDS gives
        `key`, else bad_stat."""
        kind, val, length = ev.kind[sel], ev.val[sel], ev.len[sel]
        out = np.full(sel.size, None, dtype=object)
        for k in np.unique(kind).tolist():
            m = np.flatnonzero(kind == k)
            v = val[m]
            if k == 2:
                out[m] = v.view(np.float64).tolist()
            elif k in (3, 4):
                out[m] = (wire.signed(v) if k == 4 else v).tolist()
            elif k == 7:
                out[m] = _mapped(v, self.stat_names, "")
            elif k in (5, 6):
                data, seen = ev.data, {}
                at = v.astype(np.int64)
                for i, a, b in zip(m.tolist(), at.tolist(), (at + length[m]).tolist(),
                                   strict=True):
                    raw = data[a:b]
                    if (text := seen.get(raw)) is None:
                        try:
                            text = seen[raw] = raw.decode() if k == 5 else raw
                        except UnicodeDecodeError:
                            raise XPlaneError(f"{self._space.path} has a {key} stat on plane "
                                              f"{_name(self.name)} that is not UTF-8 text, so "
                                              "the file is corrupt") from None
                    out[i] = text
        want = STAT_KINDS.get(key)
        if want is not None:
            ok = {int: (3, 4), str: (5, 7), bytes: (6,)}[want]
            bad = ~np.isin(kind, ok)
            if want is int:
                bad |= (kind == 4) & (wire.signed(val) < 0)
            if bad.any():
                self.bad_stat(key, out[int(np.flatnonzero(bad)[0])])
        return out.tolist()

    def bad_stat(self, key: str, value) -> None:
        """Raise the one sentence for a stat of the wrong kind."""
        shown = repr(value)
        shown = shown if len(shown) <= 40 else shown[:30] + "..."
        raise XPlaneError(f"{self._space.path} has a {key} stat on plane {_name(self.name)} "
                          f"holding {type(value).__name__} {shown}; XLA writes it as "
                          f"{_KIND_WORDS[STAT_KINDS[key]]}, so the file is corrupt")

    def event_count(self) -> int:
        return sum(len(ln) for ln in self.lines)

    @functools.cached_property
    def gpu_ordinal(self) -> int | None:
        m = GPU_PLANE_RE.match(self.name)
        return int(m.group(1)) if m else None

    def event_metadata_items(self) -> Iterator[tuple[int, str, dict]]:
        """(id, name, merged stats) for each event-metadata entry, in id order."""
        for k in sorted(self._proto.event_metadata):
            md = self._proto.event_metadata[k]
            yield k, md.name, self.metadata_stats.get(k, {})


def _mapped(keys: np.ndarray, table: dict, default) -> np.ndarray:
    """table[key] (else `default`) for each key, looked up once per distinct key."""
    distinct, where = np.unique(keys, return_inverse=True)
    values = np.empty(distinct.size, object)
    values[:] = [table.get(k, default) for k in distinct.tolist()]
    return values[where.reshape(-1)]


def _name(text: str) -> str:
    """A plane or line name for a sentence: control characters escaped, cut at 60."""
    shown = repr(text)[1:-1]
    return shown if len(shown) <= 60 else shown[:57] + "..."


class Space:
    """A parsed xplane: its planes and lines at once; a plane's events decoded and checked when
    first read, or every plane's at once where not `lazy` (Space.decode). A step reads only the
    planes it needs: one that reads no event (the metadata plane's programs, the planes' stats)
    decodes none."""

    def __init__(self, proto, path: Path, lazy: bool = False):
        self.path = path
        self.repeated_stat_events = 0
        self.hostnames = list(proto.hostnames)
        seen: set = set()
        self._checked: set = set()  # ids of the planes decode has checked
        self._extremes: list = []   # their extents' extremes (_extremes): all an extent check needs
        self.planes = []
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
            self.planes.append(Plane(p, self))
        self._at = {id(p): i for i, p in enumerate(self.planes)}  # each plane's place in the file
        if not lazy:
            self.decode(self.planes)

    def decode(self, planes: list) -> None:
        """Decode the events of `planes` in bulk and check them: each start and duration, and
        that none outlasts the profile the planes decoded so far recorded (every plane's: the
        whole file's); XPlaneError with the sentence of the first that is not readable, the
        planes then left undecoded. Each plane is checked once: the planes checked before are
        kept as the extremes of their extents, so decoding planes one by one costs what
        decoding them at once does."""
        todo = [p for p in planes if id(p) not in self._checked]
        if not todo:
            return
        try:
            new = self.checked(todo)
            self.raise_first([new, Checked(None, None, self._extremes)])
        except XPlaneError:
            for p in todo:
                p._events = None  # read again, they say the same
            raise
        self._extremes = _extremes(self._extremes + new.extents)
        self._checked.update(id(p) for p in todo)

    def checked(self, planes: list, times: list | None = None) -> Checked:
        """Decode the events of `planes` (those not decoded yet) and check the times of those
        of `times` (default: `planes`), as decode does, but saying what it finds instead of
        raising it: a share of the planes whose other shares another process checks
        (raise_first joins them)."""
        at = self._at
        for p in planes:
            if p._events is None:
                try:
                    p._events = _Events(p._proto.lines)
                except wire.WireError as exc:
                    return Checked((at[id(p)], f"{self.path} is not a readable XSpace "
                                    f"protobuf: its events are corrupt ({exc})"), None, [])
        extents: list = []
        for p in planes if times is None else times:
            try:
                extents += _check_times(self.path, p, at[id(p)])
            except XPlaneError as exc:
                return Checked(None, (at[id(p)], str(exc)), [])
        return Checked(None, None, extents)

    def raise_first(self, shares: list) -> None:
        """The XPlaneError a decoding of every share's planes at once raises (`shares`: each
        share's Checked): the first corrupt plane in the file's order, else the first event out
        of time, else one that outlasts the profile (every share's extents together)."""
        for found in ([c.corrupt for c in shares if c.corrupt],
                      [c.bad_time for c in shares if c.bad_time]):
            if found:
                raise XPlaneError(min(found)[1])
        _check_extent(self.path, [e for c in shares for e in c.extents])

    def let_go(self) -> None:
        """Free what the planes hold (protos, decoded events, lines) now: the planes and their
        lines refer to each other, so without this only a collection of every object in the
        process (0.04 s at the seed's size, with step 4's events alive) would free them."""
        for p in self.planes:
            p._proto = p._events = None
            p.lines = []
        self.planes = []

    def plane(self, name: str) -> Plane | None:
        return next((p for p in self.planes if p.name == name), None)

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
                out[int(m.group(2)) if m and int(m.group(2)) < 1 << 64 else mid] = (name, blob)
        return dict(sorted(out.items()))

    def profile_times_ns(self) -> tuple[int | None, int | None]:
        env = self.plane(TASK_ENV_PLANE)
        if env is None:
            return None, None
        return env.stats.get("profile_start_time"), env.stats.get("profile_stop_time")


@dataclass
class Checked:
    """A share of the planes decoded and checked (Space.checked): its first corrupt plane and
    its first event out of time, each (the plane's index in the file, the sentence), and each
    of its lines' extents (_check_times)."""
    corrupt: tuple | None
    bad_time: tuple | None
    extents: list


def _check_times(path: Path, plane: Plane, index: int) -> list:
    """Every event of the plane (the file's `index`th) starts within MAX_TIME_PS of the profile
    start and lasts 0 to MAX_TIME_PS; else the sentence names the first event that does not.
    Returns each line's extent: (first start, last start, last end, the plane's index, the
    line's, the plane's name, the line's, the event that ends last, its duration)."""
    extents = []
    for n, ln in enumerate(plane.lines):
        if not len(ln):
            continue
        base = ln.timestamp_ns * 1000
        off, dur = ln.off, ln.dur
        # the start base + offset within +-MAX_TIME_PS, compared without leaving int64
        lo, hi = -MAX_TIME_PS - base, MAX_TIME_PS - base
        bad = (dur < 0) | (dur > MAX_TIME_PS)
        if lo > _I64_MAX or hi < -_I64_MAX:
            bad[:] = True
        else:
            bad |= (off < max(lo, -_I64_MAX)) | (off > min(hi, _I64_MAX))
        i = int(np.argmax(bad)) if bad.any() else None
        if i is None:  # every start within +-MAX_TIME_PS, so base fits and nothing wraps
            starts = off + np.int64(base)
            ends = starts + dur
            last = int(np.argmax(ends))
            extents.append((int(starts.min()), int(starts.max()), int(ends[last]), index, n,
                            plane.name, ln.name, last, int(dur[last])))
            continue
        o, d = int(off[i]), int(dur[i])
        what = f"a duration of {d:,} ps" if d < 0 or d > MAX_TIME_PS else \
            f"a start {base + o:,} ps from the profile start"
        raise XPlaneError(f"{path} has an event (number {i:,} of line {_name(ln.name)} on "
                          f"plane {_name(plane.name)}) with {what}; expected 0 to "
                          f"{MAX_TIME_PS:,} ps, so the file is corrupt")
    return extents


def _latest_end(e: tuple) -> tuple:
    """The order in which an extent ends last: by its end; of several, the first in the file."""
    return e[2], -e[3], -e[4]


def _extremes(extents: list) -> list:
    """The extents _check_extent reads of `extents`: the first start, the last start and the
    latest end (at most three; the same check on them as on all)."""
    if not extents:
        return []
    return [min(extents, key=lambda e: e[0]), max(extents, key=lambda e: e[1]),
            max(extents, key=_latest_end)]


def _check_extent(path: Path, extents: list) -> None:
    """No event outlasts the capture (trace_rules.runs_past_capture)."""
    if not extents:
        return
    first, last = min(e[0] for e in extents), max(e[1] for e in extents)
    # the line that ends last; of several, the first in the file
    _, _, end, _, _, plane, line, i, dur = max(extents, key=_latest_end)
    if runs_past_capture(first, last, end):
        raise XPlaneError(f"{path} has an event (number {i:,} of line {_name(line)} on "
                          f"plane {_name(plane)}) lasting {dur:,} "
                          f"ps, to {(end - last) / 1e6:,.0f} us after the last event starts, "
                          f"while all start within {(last - first) / 1e6:,.0f} us: it "
                          "outlasts the profile that recorded it, so the file is corrupt")


def stream_totals(space: Space, ordinals=None) -> list[list[int]]:
    """[device, stream line id, events, summed duration ps] of every GPU plane's (of the GPUs
    `ordinals` where given) "Stream #" line, in plane and line order (step 2's check 1 against
    the trace's)."""
    ordinals = None if ordinals is None else set(ordinals)  # looked up once a plane
    out = [[plane.gpu_ordinal, line.id, len(line), sum(line.dur.tolist())]
           for plane in space.gpu_planes() if ordinals is None or plane.gpu_ordinal in ordinals
           for line in plane.lines if line.name.startswith("Stream #")]
    for plane in space.planes:  # a TPU's op line is its lane (tracekit.tpu)
        m = TPU_PLANE_RE.match(plane.name)
        if m and (ordinals is None or int(m.group(1)) in ordinals):
            out += [[int(m.group(1)), line.id, len(line), sum(line.dur.tolist())]
                    for line in plane.lines if line.name in tpu.OP_LINES]
    return out


def load_space(path, lazy: bool = False) -> Space:
    """Parse an xplane.pb file; raise XPlaneError with one sentence when it cannot be read.
    `lazy`: its events decoded and checked when first read (Space)."""
    path = Path(path)
    classes = xprotos.classes()
    try:
        size = path.stat().st_size
        if size > MAX_XPLANE_BYTES:
            raise XPlaneError(f"{path} is {size:,} bytes, over the 2 GiB protobuf can parse; "
                              "it is not an xplane XProf wrote")
        with open(path, "rb") as fh:  # a field's first tag, before the whole is read
            first = fh.read(1)
        if first and (first[0] >> 3 == 0 or first[0] & 7 not in (0, 1, 2, 5)):
            raise XPlaneError(f"{path} is not a readable XSpace protobuf: its first byte "
                              f"(0x{first[0]:02x}) starts no protobuf field (a file of zeros, "
                              "or another format)")
        progress("reading the xplane", size >> 20, unit="MiB")
        data = path.read_bytes()
    except OSError as exc:
        raise XPlaneError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except MemoryError as exc:
        raise XPlaneError(f"{path} is too large to read into this machine's memory") from exc
    if not data:
        raise XPlaneError(f"{path} is empty; expected a serialized XSpace from XProf")
    try:
        proto = classes[f"{xprotos.BULK}.XSpace"].FromString(data)
    except Exception as exc:  # the runtime raises DecodeError or RuntimeError by backend
        raise XPlaneError(
            f"{path} is not a readable XSpace protobuf (truncated or another format): {exc}"
        ) from exc
    del data  # the parsed copy holds what is needed: the file's bytes are not kept meanwhile
    if not proto.planes:
        raise XPlaneError(f"{path} parsed but holds no planes; expected XProf's xplane.pb")
    return Space(proto, path, lazy)


def space_of(capture, lazy: bool = False) -> Space:
    """The capture's xplane, decoded once per process (kept in `capture_inputs.Capture`);
    `lazy`: its events when first read (Space)."""
    if capture.files.xplane is None:
        raise XPlaneError(f"no <host>.xplane.pb for host {capture.files.host} in "
                          f"{capture.files.run_dir}")
    return capture.cached("space", lambda: load_space(capture.files.xplane, lazy))


def parse_hlo(blob: bytes):
    """Parse a serialized ``xla.HloProto`` and return its ``HloModuleProto``."""
    return xprotos.classes()["HloProto"].FromString(blob).hlo_module
