"""Read XLA's ``<host>.trace.json.gz`` (or a plain ``.json``) with the standard library alone.

The file is Chrome trace JSON written by XLA from the XSpace:
``{"displayTimeUnit": "ns", "metadata": {...}, "traceEvents": [..., {}]}``.
- Processes and threads are known by the names in their ``ph: "M"`` events (``process_name`` is
  the xplane plane name, ``thread_name`` the line name), never by pid number.
- ``ts``/``dur`` are microseconds as floats; ``ps()`` turns them into integer picoseconds, which
  recovers the xplane's integer times exactly for captures up to about 1,000 s long.
- Complete events (``ph: "X"``) are kept as the dicts ``json`` made; nothing is copied.

What the reader guarantees to every step (anything else is a TraceError: one sentence naming
the file, the entry and what was expected):
- the text is at most ``MAX_GZIP_RATIO`` times its gzip's size (at least
  ``MIN_DECOMPRESSED_CAP``, never over ``MAX_TRACE_BYTES``), UTF-8, strict JSON (no NaN or
  Infinity) nested less deep than the interpreter's recursion limit, of at most
  ``MAX_TRACE_EVENTS`` events (counted in the text before it is parsed);
- every complete event has an integer ``pid`` and ``tid``, a string ``name``, and ``ts`` and
  ``dur`` that are JSON numbers (never strings) with ``|ts|`` and ``dur`` in 0 ..
  ``trace_rules.MAX_TIME_PS`` (in picoseconds): finite, a duration never negative;
- no event outlasts the profile: none ends after every event's start by more than the
  capture's own length and a minute (``trace_rules.runs_past_capture``);
- ``args``, where present, is an object whose values are strings (XLA writes every value so;
  a finite number is taken as its decimal text, anything else refused), and whose ids
  (``INTEGER_ARGS``: the correlation id, device, step, graph and program ids) are integers
  written in decimal, as XLA writes them (a table may write them unquoted);
- metadata events name a process or thread with a string, and no two processes share a
  ``/device:GPU:<n>`` name (nor one pid two names);
- a lone surrogate escape (``\\ud800``: no character, so not writable as UTF-8) in any string
  is replaced by U+FFFD, and said in ``Trace.notes``.
"""

from __future__ import annotations

import json
import marshal
import math
import os
import re
import sys
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from tracekit import tpu
from tracekit.base import StepError, progress
from tracekit.forked import Exchange
from tracekit.trace_rules import MAX_NAME_CHARS, MAX_TIME_PS, cut_name, runs_past_capture

GPU_PROCESS_RE = re.compile(r"^/device:(?:GPU|TPU):(\d+)$")  # a TPU core is a device too
HOST_CPU_PROCESS = "/host:CPU"
GZIP_MAGIC = b"\x1f\x8b"

# A gzip may expand to at most this many times its own size. XLA's traces compress 9x to 21x
# (measured on every shared and generated capture: 9.3x MI300X elementwise, 21.0x TF BERT V100);
# 64x is three times the most compressible one seen, and stops a gzip bomb (1 MB of gzip holding
# 1 GiB of zeros) after 64 MB instead of after the whole GiB.
MAX_GZIP_RATIO = 64
# ... but a small gzip may always expand to this much: a trace of a few events compresses less
# predictably, and 64 MiB of text costs well under a second and a few hundred MiB to parse.
MIN_DECOMPRESSED_CAP = 64 << 20
# No trace text is read past this size, gzip or plain. XLA's exporter keeps at most 1,000,000
# events, about 0.7 kB each with their args (the 156,800-kernel MaxText trace is 109 MB of text
# for 390,000 events): 4 GiB is five times that, and more than a 24 GiB machine can parse.
MAX_TRACE_BYTES = 4 << 30
# No trace of more events than this is read: set from the memory the project holds a process to
# (2 GiB), not from what a machine might survive. Step 1, the largest reader, peaks at about
# 1.33 kB per event of XLA's (1,000,117 events of the 70-step MaxText capture: 1,329 MiB) and
# less for tiny ones (1,950,000: 1,375 MiB host events, 1,428 MiB half kernels), so 1,500,000
# real events stay under 2 GiB. XLA's exporter writes at most 1,000,000 for one capture. The
# count is taken from the text before it is parsed (each event's "ph" key), so a larger trace
# is refused before its memory is spent.
MAX_TRACE_EVENTS = 1_500_000
READ_CHUNK = 1 << 20
MAX_TIME_US = MAX_TIME_PS / 1e6
_NUMBER = (int, float)
# args that XLA writes as decimal integers (every shared capture: no exception)
INTEGER_ARGS = frozenset({"correlation_id", "device_id", "step_num", "cuda_graph_id",
                          "hip_graph_id", "graph_id", "program_id", "group_id"})
MAX_ID_DIGITS = 20  # a 64-bit integer
_SURROGATE_RE = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE_RE = re.compile(r"\\u[dD][89a-fA-F]")


class TraceError(StepError):
    """The file is not a readable XLA trace; the message is one sentence for the user (exit 1)."""


@dataclass
class Trace:
    path: Path
    metadata: dict
    display_time_unit: str | None
    processes: dict[int, str]            # pid -> process_name
    threads: dict[tuple[int, int], str]  # (pid, tid) -> thread_name
    events: list[dict]                   # ph "X" events, in file order
    phase_counts: dict[str, int] = field(default_factory=dict)
    entry_count: int = 0                 # every traceEvents entry, the trailing {} included
    notes: list[str] = field(default_factory=list)  # what the reader repaired, as sentences
    # load_trace's `digest` of the events, one per part of the text read by one process, in
    # file order; the events are then not kept (None: no digest was asked for)
    digests: list | None = None

    @property
    def complete(self) -> int:
        """How many complete events the trace holds (kept, or digested)."""
        return len(self.events) if self.digests is None else self.phase_counts.get("X", 0)

    def gpu_pids(self) -> dict[int, int]:
        """GPU ordinal -> pid, from ``/device:GPU:n`` process names (one pid each: checked)."""
        return gpu_ordinals(self.processes)

    def host_pids(self) -> list[int]:
        return sorted(pid for pid, n in self.processes.items() if n == HOST_CPU_PROCESS)


def gpu_ordinals(processes: dict) -> dict[int, int]:
    """GPU ordinal -> pid, from ``/device:GPU:n`` process names."""
    out = {int(m.group(1)): pid for pid, name in processes.items()
           if (m := GPU_PROCESS_RE.match(name))}
    return dict(sorted(out.items()))


def device_kinds(processes: dict) -> dict[int, str]:
    """pid -> its device's kind (GPU, TPU) for every device process: the one place the kind is
    read from a process's name."""
    return {pid: "TPU" if tpu.is_tpu(name) else "GPU" for pid, name in processes.items()
            if GPU_PROCESS_RE.match(name)}


def device_lanes(processes: dict, threads: dict) -> set:
    """The (pid, tid) of every device lane: a GPU's `Stream #` lines, a TPU core's op line
    (tracekit.tpu.OP_LINES: its events are the instructions' runs)."""
    tpu_pids = {pid for pid, kind in device_kinds(processes).items() if kind == "TPU"}
    return {k for k, name in threads.items()
            if name.startswith("Stream #") or (k[0] in tpu_pids and name in tpu.OP_LINES)}


def ps(us) -> int:
    """Microseconds (the json's float) -> integer picoseconds."""
    return round(us * 1_000_000)


# ---------------------------------------------------------------- bytes -> text

def _gunzip(path: Path, fh, size: int):
    """The gzip's members, decompressed a piece at a time; refused past the cap (a bomb) or
    when cut short."""
    cap = min(max(size * MAX_GZIP_RATIO, MIN_DECOMPRESSED_CAP), MAX_TRACE_BYTES)
    total = 0
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    pending = b""
    while True:
        chunk = pending or fh.read(READ_CHUNK)
        pending = b""
        if not chunk:
            break
        while True:
            # at most READ_CHUNK out per call: no temporary as large as the cap
            piece = d.decompress(chunk, min(READ_CHUNK, cap + 1 - total))
            total += len(piece)
            if total > cap:
                raise TraceError(
                    f"{path} expands past {cap:,} bytes ({MAX_GZIP_RATIO} times its "
                    f"{size:,} bytes, or the {MAX_TRACE_BYTES >> 30} GiB ceiling): XLA's traces "
                    "compress about 10 to 20 times, so this is not one (a gzip bomb?)")
            if piece:
                yield piece
            chunk = d.unconsumed_tail
            if d.eof:  # the end of one member: another may follow (gzip allows several)
                rest = d.unused_data + chunk
                if rest.startswith(GZIP_MAGIC):
                    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
                    chunk = rest
                    continue
                if rest.strip(b"\x00"):
                    raise TraceError(f"{path} has {len(rest):,}+ bytes of something else after "
                                     "its gzip data; the file is corrupt")
                chunk = b""
            if not chunk and len(piece) < READ_CHUNK:
                break  # this input is used up and nothing more is pending
    if not d.eof:
        raise TraceError(f"{path} is not a complete gzip file (truncated or corrupt: its "
                         "compressed data ends early)")


def _pieces(path: Path):
    """The file's text as bytes, a piece at a time (gunzipped where it is gzip); every way of
    failing is a TraceError."""
    try:
        with open(path, "rb") as fh:
            size = _size(fh)
            head = fh.read(2)
            if not head:
                raise TraceError(f"{path} is empty; expected XProf's <host>.trace.json.gz")
            fh.seek(0)
            if head == GZIP_MAGIC:
                yield from _gunzip(path, fh, size)
            elif path.name.endswith(".gz"):
                raise TraceError(f"{path} is named .gz but is not gzip data")
            else:
                if size > MAX_TRACE_BYTES:
                    raise TraceError(f"{path} is {size:,} bytes, over the "
                                     f"{MAX_TRACE_BYTES >> 30} GiB a trace may hold")
                total = 0
                while total <= MAX_TRACE_BYTES and (piece := fh.read(READ_CHUNK)):
                    total += len(piece)
                    yield piece
    except (zlib.error, EOFError) as exc:
        raise TraceError(f"{path} is not a complete gzip file (truncated or corrupt: {exc})") \
            from exc
    except OSError as exc:
        raise TraceError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except MemoryError as exc:
        raise TraceError(f"{path} is too large to read into this machine's memory") from exc


def _read_text(path: Path) -> str:
    raw = bytearray()
    for piece in _pieces(path):
        raw += piece
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TraceError(f"{path} is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset "
                         f"{exc.start:,}), so not a JSON trace") from exc


def _size(fh) -> int:
    return os.fstat(fh.fileno()).st_size


# ---------------------------------------------------------------- text -> document

class _Constant(ValueError):
    pass


def no_constant(token):
    raise _Constant(token)


def _parse(path: Path, text: str):
    try:
        return json.loads(text, parse_constant=no_constant)
    except json.JSONDecodeError as exc:
        raise TraceError(f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}: "
                         f"{exc.msg}); the file may be truncated") from exc
    except _Constant as exc:
        raise TraceError(f"{path} holds {exc}, which is not a JSON number (XLA writes only "
                         "finite numbers)") from exc
    except RecursionError as exc:
        raise TraceError(f"{path} nests JSON more than {sys.getrecursionlimit():,} levels deep; "
                         "XLA's traces nest 4 levels") from exc
    except ValueError as exc:  # an integer of more digits than int() converts
        raise TraceError(f"{path} holds a number that cannot be read ({exc}); XLA writes "
                         "times and ids of a few digits") from exc
    except MemoryError as exc:
        raise TraceError(f"{path} is too large to parse in this machine's memory") from exc


# The exporter writes {..., "traceEvents":[{...},{...},...]} with nothing between events: the
# events are parsed this much text at a time, cut where one event ends and the next begins, so
# the whole text is never held beside the parsed events (1,000,117 events: 1,459 -> 1,128 MiB,
# and 0.2 s faster than the whole text's parse with its checks). A cut inside a string leaves
# its piece unparseable (the string is never closed), so no cut can change what is read: that
# text is then parsed whole.
PARSE_PIECE = 2 << 20
_EVENTS_OPEN = re.compile(rb'"traceEvents"\s*:\s*\[')
_BETWEEN_EVENTS = (b"},{", b"}, {")  # the exporter's, and Python's json.dump's
_JSON_SPACE = b" \t\r\n"


class _OtherShape(Exception):
    """The text is not of the exporter's shape: it is parsed whole."""


# The exporter's object before its events is a few fields ("displayTimeUnit", "metadata"): a
# text with no "traceEvents" array in its first HEAD_MAX bytes is not of its shape (parsed
# whole, or refused there: the search is not run again over a growing text).
HEAD_MAX = 8 << 20


def _runs(pieces):
    """The document's object before its events (a dict) first, then each run of whole events as
    the bytes of a JSON array, with how much text had been read when it was cut (the same for
    every process reading the same file). Raises _OtherShape for a text of another shape, and
    ValueError where its head is not JSON."""
    head, parts, size, read = None, [], 0, 0
    while True:
        piece = next(pieces, None)
        if piece is not None:
            parts.append(piece)
            size += len(piece)
            read += len(piece)
            if size < PARSE_PIECE:
                continue
        buf = bytearray().join(parts)
        if head is None:
            if (opening := _EVENTS_OPEN.search(buf)) is None:
                if piece is None or len(buf) > HEAD_MAX:
                    raise _OtherShape
                parts, size = [buf], len(buf)
                continue
            head = json.loads(buf[:opening.start()].decode() + '"traceEvents":[]}',
                              parse_constant=no_constant)
            if type(head) is not dict:
                raise _OtherShape
            yield head
            del buf[:opening.end() - 1]  # from the events' '['
        else:
            buf[0] = 0x5B  # the ',' before this piece's first event becomes its '['
        if piece is None:
            end = len(buf.rstrip(_JSON_SPACE)) - 1  # the document's closing '}'
            if end < 1 or buf[end] != 0x7D or buf[end - 1] != 0x5D:
                raise _OtherShape
            yield memoryview(buf)[:end], read
            return
        # the ',' after this piece's last event
        end = buf.rfind(_BETWEEN_EVENTS[0]) + 1 or buf.rfind(_BETWEEN_EVENTS[1]) + 1
        if not end:
            parts, size = [buf], len(buf)
            continue
        parts = [buf[end:]]
        size = len(parts[0])
        buf[end] = 0x5D  # ... becomes its ']'
        yield memoryview(buf)[:end + 1], read


class _Events:
    """Entries parsed from runs of whole events, up to the cap (MAX_TRACE_EVENTS): past it no
    other run is parsed (one run, 2 MiB of text, may take them past it) and the rest are only
    counted ('"ph":' keys), for the refusal. Counting every run's keys before parsing it was a
    scan of the whole text for the refusal alone (0.24 s of a 1,000,117-event trace's 2.7 s
    read)."""

    def __init__(self):
        self.entries: list | None = []
        self.counted = 0
        self.surrogates = False  # whether an escape may be a lone surrogate

    def add(self, run) -> None:
        text = str(run, "utf-8")
        if self.entries is None:
            self.counted += text.count('"ph":')
            return
        self.surrogates = self.surrogates or _SURROGATE_ESCAPE_RE.search(text) is not None
        before = len(self.entries)
        self.entries += json.loads(text, parse_constant=no_constant)
        if len(self.entries) > MAX_TRACE_EVENTS:  # this run took them past the cap
            counted = before + text.count('"ph":')
            self.counted = counted if counted > MAX_TRACE_EVENTS else len(self.entries)
            self.entries = None

    @property
    def count(self) -> int:
        return self.counted if self.entries is None else len(self.entries)


def _parse_in_pieces(path: Path, digest=None):
    """(document, whether an escape may be a lone surrogate, the _Tail reading the text's second
    half or None) for a text of the exporter's shape, its events parsed a run at a time; None
    for any other text, or any the runs cannot read, which load_trace then parses whole (the
    same document, or its precise error). From SPLIT_MIN bytes of text, where this process may
    fork, a forked child parses and checks the text's second half meanwhile (_Tail); the
    document then holds the first half's entries."""
    size = _text_size(path)
    tail = None
    if size >= SPLIT_MIN and hasattr(os, "fork"):
        try:
            tail = _Tail(path, size // 2, digest)
        except OSError:  # no process to spare: this one reads it all
            tail = None
    mine = _Events()
    pieces = _pieces(path)
    try:
        runs = _runs(pieces)
        head = next(runs)
        for run, read in runs:
            mine.add(run)
            if tail is not None and read >= size // 2:
                break  # the rest is the child's
        if tail is not None and not tail.parsed():
            return None
        _check_size(path, mine.count + (tail.count if tail else 0))
    except BaseException as exc:
        if tail is not None:
            tail.abort()
        if isinstance(exc, (_OtherShape, ValueError, RecursionError)):  # JSON, UTF-8, constant
            return None
        if isinstance(exc, MemoryError):
            raise TraceError(f"{path} is too large to parse in this machine's memory") from exc
        raise
    finally:
        pieces.close()
    head["traceEvents"] = mine.entries
    return head, mine.surrogates, tail


def _text_size(path: Path) -> int:
    """The text's length as the file gives it: a gzip's last four bytes (its last member's
    length, modulo 4 GiB; at most what the gzip may expand to, as a cut file's last bytes are
    anything), else the file's size; 0 where it cannot be read. Only where the text is cut in
    two depends on it."""
    try:
        with open(path, "rb") as fh:
            size = _size(fh)
            if fh.read(2) != GZIP_MAGIC:
                return size
            fh.seek(-4, os.SEEK_END)
            return min(int.from_bytes(fh.read(4), "little"), size * MAX_GZIP_RATIO)
    except OSError:
        return 0


# From this many bytes of text (a 1,000,117-event trace is 337 MiB), a forked child parses and
# checks the text's second half while this process parses and checks the first, and hands its
# events back marshalled, HAND_BACK at a time (digested where the reader digests: step 1): on two
# cores in half the time, and on one (step 1 beside step 4 in the whole job) with half the
# events' dicts held at once (a 667,914-event TPU trace: 405 MiB at the peak against 550).
SPLIT_MIN = 64 << 20
HAND_BACK = 50_000


class _Tail:
    """The text's second half, from the first run cut after `half` bytes of text, parsed by a
    forked child (`_tail_work`, run by forked.Exchange) while this process parses the first.
    `parsed()`: whether the child read it (False: parse the text whole; a TraceError of the
    child's is raised); `start_check(offset)`: the child checks its entries, numbered from
    `offset`, while this process checks its own; `checked()`: the child's _Checked, its events
    handed back (with a `digest`, kept there: `start_digest(processes, threads)` gives the
    child the whole trace's names and `digested()` its digest of its events); `abort()`: the
    child is stopped."""

    def __init__(self, path: Path, half: int, digest=None):
        self.path = path
        self.digest = digest
        self.count = 0
        self.surrogates = False
        self.child = Exchange(_tail_work, path, half, digest, what="the trace's second half",
                              memory=True)

    def _get(self):
        try:
            return self.child.get()
        except OSError as exc:  # killed, out of memory, or an error of its own
            self.abort()
            raise TraceError(f"{self.path}: the process reading the second half of its text "
                             f"ended without handing it back ({exc})") from None

    def parsed(self) -> bool:
        said = self._get()
        if not said or said[0] != "parsed":
            self.abort()
            return False  # parsed whole here instead
        self.count, self.surrogates = said[1], said[2]
        return True

    def start_check(self, offset: int) -> None:
        self.child.put(offset)

    def checked(self) -> _Checked:
        """The child's check of its half; its events with it where there is no digest (the
        child then ends), else kept by the child for `digested`."""
        c = self._get()
        if self.digest is not None:
            return c
        self.child.put(None)
        while (part := self._get()) is not None:
            self.child.put(None)  # the child marshals the next part while this one is loaded
            c.events += marshal.loads(part)
        return c

    def start_digest(self, processes: dict, threads: dict) -> None:
        """The whole trace's names, for the child's digest of its events."""
        self.child.put((processes, threads))

    def digested(self):
        """The child's digest of its events."""
        return marshal.loads(self._get())

    def abort(self) -> None:
        self.child.abort()


def _tail_work(path: Path, half: int, digest):
    """A _Tail's work (a generator, for forked.Exchange): parses the runs after the first one
    cut after `half` bytes and yields how that went; given its entries' first number, checks
    them (_check) and yields its _Checked; then yields its events marshalled, HAND_BACK at a
    time, or, with a `digest`, given the whole trace's names, returns their digest marshalled.
    A TraceError of its own is raised in the parent as it is."""
    theirs = _Events()
    pieces = _pieces(path)
    try:
        runs = _runs(pieces)
        next(runs)
        for _, read in runs:
            if read >= half:
                break  # the parent's last run
        for run, _ in runs:
            theirs.add(run)
    except (_OtherShape, ValueError, RecursionError, StopIteration):
        return ("whole",)
    except MemoryError:
        raise TraceError(f"{path} is too large to parse in this machine's memory") from None
    finally:
        pieces.close()
    offset = yield ("parsed", theirs.count, theirs.surrogates)
    if theirs.entries is None:
        return None
    c = _check(path, theirs.entries, offset, theirs.surrogates)
    theirs.entries = None
    events, c.events = c.events, []
    names = yield c
    if digest is None:
        for i in range(0, len(events), HAND_BACK):
            yield marshal.dumps(events[i:i + HAND_BACK])
        return None
    return marshal.dumps(digest(path, events, *names, True))


def _parse_whole(path: Path):
    """(document, whether an escape may be a lone surrogate) from the whole text: any text the
    pieces do not read, and the precise sentence of what is wrong with it."""
    text = _read_text(path)
    if not text.strip():
        raise TraceError(f"{path} holds no data; expected XProf's trace JSON")
    # a lone surrogate can only be an escape (\ud800 to \udfff): look for one first (fast)
    surrogates = _SURROGATE_ESCAPE_RE.search(text) is not None
    _check_size(path, text.count('"ph":'))  # each event's key (never a value's: no ':')
    return _parse(path, text), surrogates


def _kind(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, str):
        return f"the string {_show(v)}"
    if isinstance(v, (int, float)):
        return _show(v)
    return "an array" if isinstance(v, list) else "an object"


def _show(v) -> str:
    s = repr(v)
    return s if len(s) <= 40 else s[:30] + f"... ({len(s):,} characters)"


def _bad_complete(ev: dict) -> str:
    """Why a complete event is refused (the slow path: only for the first bad one)."""
    for key in ("pid", "tid"):
        v = ev.get(key)
        if type(v) is not int:
            return f"{key} is {_kind(v) if key in ev else 'missing'}; expected an integer"
    if type(ev.get("name")) is not str:
        return (f"name is {_kind(ev['name'])}" if "name" in ev else "name is missing") + \
            "; expected a string"
    for key, low in (("ts", -MAX_TIME_US), ("dur", 0)):
        v = ev.get(key)
        if key not in ev:
            return f"{key} is missing; expected a number of microseconds"
        if type(v) not in _NUMBER:
            return f"{key} is {_kind(v)}; expected a JSON number of microseconds, not a string"
        if not (low <= v <= MAX_TIME_US):
            return (f"{key} is {_show(v)}; expected a number of microseconds from "
                    f"{low:g} to {MAX_TIME_US:g}")
    args = ev.get("args")
    if args is not None and type(args) is not dict:
        return f"args is {_kind(args)}; expected an object"
    for k, v in (args or {}).items():
        if type(v) is not str and (type(v) not in _NUMBER or not math.isfinite(v)):
            return f"args.{k} is {_kind(v)}; expected a string"
        if k in INTEGER_ARGS and not _integer_text(str(v)):
            return f"args.{k} is {_kind(v)}; expected a decimal integer"
    return "not readable"


def _integer_text(v) -> bool:
    """A decimal integer of at most MAX_ID_DIGITS digits, with an optional minus sign."""
    digits = v[1:] if v[:1] == "-" else v
    return 0 < len(digits) <= MAX_ID_DIGITS and digits.isascii() and digits.isdigit()


def _ids_ok(args: dict) -> bool:
    return INTEGER_ARGS.isdisjoint(args) or all(
        _integer_text(args[k]) for k in INTEGER_ARGS.intersection(args))


def _args_text(args: dict) -> bool:
    """Finite numbers among args values become their decimal text, as XLA writes every value;
    False (nothing changed) when a value is neither a string nor a finite number."""
    if any(type(v) is not str and (type(v) not in _NUMBER or not math.isfinite(v))
           for v in args.values()):
        return False
    for k, v in args.items():
        if type(v) is not str:
            args[k] = str(v)
    return True


def _clean(s: str) -> str:
    return _SURROGATE_RE.sub("\ufffd", s) if _SURROGATE_RE.search(s) else s


def _clean_event(ev: dict) -> int:
    """Replace lone surrogates in an event's strings; the number of strings changed."""
    n = 0
    for k, v in list(ev.items()):
        if type(v) is str and _SURROGATE_RE.search(v):
            ev[k] = _clean(v)
            n += 1
    args = ev.get("args")
    if type(args) is dict:
        for k, v in list(args.items()):
            ck = _clean(k)
            cv = _clean(v) if type(v) is str else v
            if ck != k or cv is not v:
                n += 1
                if ck != k:
                    del args[k]
                args[ck] = cv
    return n


def _mib(path: Path) -> int:
    try:
        return path.stat().st_size >> 20
    except OSError:
        return 0


def load_trace(path, digest=None) -> Trace:
    """Load a trace; raise TraceError with one sentence when it is not XLA's trace JSON.
    `digest(path, events, processes, threads, release)`, where given, is applied to the
    checked complete events by the process that holds them (the text's second half, where a
    child reads it, digested there and handed back marshalled: its value must be plain
    values); the Trace then keeps the digests (`digests`, in file order), not the events."""
    path = Path(path)
    progress("reading the trace", _mib(path), unit="MiB")
    doc, surrogates, tail = _parse_in_pieces(path, digest) or (*_parse_whole(path), None)
    try:
        if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
            shape = type(doc).__name__ if not isinstance(doc, dict) else \
                "an object without a traceEvents list"
            raise TraceError(f"{path} is JSON but {shape}; expected XProf's trace object "
                             '{"traceEvents": [...]}')
        entries = doc["traceEvents"]
        _check_size(path, len(entries) + (tail.count if tail else 0))
        if tail is not None:
            tail.start_check(len(entries))  # its entries follow these
        c = _check(path, entries, 0, surrogates)
        if c.fatal is not None:
            raise TraceError(c.fatal)
        if tail is not None:
            c = _joined(path, c, tail.checked())
        _refuse(path, c)
        digests = None
        if digest is not None:
            del entries[:], doc["traceEvents"]
            if tail is not None:
                tail.start_digest(c.processes, c.threads)
            digests = [digest(path, c.events, c.processes, c.threads, True)]
            if tail is not None:
                digests.append(tail.digested())
            c.events = []
        tail = None
    except BaseException:
        if tail is not None:
            tail.abort()
        raise
    metadata = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    unit = doc.get("displayTimeUnit")
    return Trace(path, metadata, unit if isinstance(unit, str) else None, c.processes,
                 c.threads, c.events, c.phases, c.entries, _repairs(c.long_names, c.cleaned),
                 digests)


def _refuse(path: Path, c: _Checked) -> None:
    """What the check of every entry found that refuses the trace, as one sentence."""
    if not c.processes and (c.events or c.first_bad):
        raise TraceError(f"{path} has events but no process_name metadata; it was not written "
                         "by XLA's trace exporter")
    if c.first_bad is not None:
        i, ev = c.first_bad
        # the first field every complete event of XLA's has that this one lacks
        key = next((k for k in ("pid", "tid", "ts", "dur", "name") if k not in ev), None)
        if key:
            raise TraceError(f"{path} has a complete event without '{key}' (traceEvents entry "
                             f"{i:,}); pid, tid, ts, dur and name are always there in XLA's "
                             "traces")
        raise TraceError(f"{path} has a complete event (traceEvents entry {i:,}) whose "
                         f"{_bad_complete(ev)}; the file is corrupt or not XLA's trace")
    if c.last is not None:
        _check_extent(path, c.last[1], c.last[0], c.first_ts, c.last_ts)
    _check_gpu_processes(path, c.processes)


@dataclass
class _Checked:
    """What the check of a run of traceEvents entries found (`_check`)."""
    events: list            # the complete events, in file order
    processes: dict
    threads: dict
    meta: list              # (entry number, event) of each metadata event, in file order
    phases: dict
    entries: int
    first_bad: tuple | None  # (entry number, event) of the first complete event refused
    fatal: str | None       # the sentence of the first entry no reading takes (raised at once)
    first_ts: float
    last_ts: float
    last: tuple | None      # (entry number, event) of the event that ends last (the first such)
    last_end: float
    long_names: int
    cleaned: int


def _check(path: Path, entries: list, offset: int, surrogates: bool) -> _Checked:
    """Check traceEvents entries numbered from `offset` (what the reader guarantees: the
    module's docstring), repairing what it says it repairs; the first fatal entry ends the
    check (its sentence in `fatal`, for the caller to raise)."""
    processes: dict[int, str] = {}
    threads: dict[tuple[int, int], str] = {}
    events: list[dict] = []
    meta: list = []
    phases: dict[str, int] = {}
    append = events.append
    first_bad = fatal = None
    cleaned = 0
    lo, hi = -MAX_TIME_US, MAX_TIME_US
    id_args = INTEGER_ARGS
    long_names = 0
    first_ts, last_ts, last_end, last_i = hi, lo, lo, -1  # the capture's extent
    progress("checking the trace's events", 0, len(entries), "events")
    for i, ev in enumerate(entries, offset):
        if not i & 0xFFFF:
            progress("checking the trace's events", i - offset, len(entries), "events")
        if type(ev) is not dict:
            fatal = f"{path} has traceEvents entry {i:,} that is {_kind(ev)}, not an object"
            break
        if surrogates:
            cleaned += _clean_event(ev)
        ph = ev.get("ph")
        if ph == "X":
            ts, dur, args = ev.get("ts"), ev.get("dur"), ev.get("args")
            if (type(ev.get("pid")) is int and type(ev.get("tid")) is int
                    and type(ev.get("name")) is str and type(ts) in _NUMBER
                    and type(dur) in _NUMBER and lo <= ts <= hi and 0 <= dur <= hi):
                if args is not None:
                    if type(args) is not dict:
                        first_bad = first_bad or (i, ev)
                        continue
                    for k, v in args.items():
                        if type(v) is str:
                            if k in id_args and not (v.isdigit() and v.isascii() and
                                                     len(v) <= MAX_ID_DIGITS) \
                                    and not _integer_text(v):
                                first_bad = first_bad or (i, ev)
                                break
                        else:  # numbers become their text; anything else is refused
                            if not (_args_text(args) and _ids_ok(args)):
                                first_bad = first_bad or (i, ev)
                            break
                if len(ev["name"]) > MAX_NAME_CHARS:
                    ev["name"] = cut_name(ev["name"])
                    long_names += 1
                append(ev)
                if ts > last_ts:
                    last_ts = ts
                if ts < first_ts:
                    first_ts = ts
                if ts + dur > last_end:
                    last_end, last_i = ts + dur, i
            elif first_bad is None:
                first_bad = (i, ev)
        elif ph == "M":
            try:
                _metadata(path, i, ev, processes, threads)
            except TraceError as exc:
                fatal = str(exc)
                break
            meta.append((i, ev))
        elif ph is not None and type(ph) is not str:
            fatal = (f"{path} has traceEvents entry {i:,} whose ph is {_kind(ph)}; expected a "
                     "one-letter string such as \"X\"")
            break
        if ph is not None:
            phases[ph] = phases.get(ph, 0) + 1
    last = (last_i, entries[last_i - offset]) if last_i >= 0 else None
    return _Checked(events, processes, threads, meta, phases, len(entries), first_bad, fatal,
                    first_ts, last_ts, last, last_end, long_names, cleaned)


def _joined(path: Path, first: _Checked, second: _Checked) -> _Checked:
    """The check of the text's first half and of its second (a _Tail's) as one check of the
    whole: the second half's metadata applied after the first's (a name given twice across the
    halves is refused there), its fatal entry raised, the rest added up."""
    for i, ev in second.meta:
        _metadata(path, i, ev, first.processes, first.threads)
    if second.fatal is not None:
        raise TraceError(second.fatal)
    first.events += second.events
    for ph, n in second.phases.items():
        first.phases[ph] = first.phases.get(ph, 0) + n
    first.entries += second.entries
    first.first_bad = first.first_bad or second.first_bad
    first.first_ts = min(first.first_ts, second.first_ts)
    first.last_ts = max(first.last_ts, second.last_ts)
    if second.last_end > first.last_end:
        first.last, first.last_end = second.last, second.last_end
    first.long_names += second.long_names
    first.cleaned += second.cleaned
    return first


def _check_size(path: Path, events: int) -> None:
    """At most MAX_TRACE_EVENTS events."""
    if events > MAX_TRACE_EVENTS:
        raise TraceError(f"{path} holds {events:,} events, more than the {MAX_TRACE_EVENTS:,} "
                         "these tools take (each costs about 1.3 kB of memory here); XLA's "
                         "exporter writes at most 1,000,000 for one capture, so this one is "
                         "merged or another tool's: profile fewer steps (a shorter window "
                         "between jax.profiler's start and stop) and analyse that capture")


def _repairs(long_names: int, cleaned: int) -> list[str]:
    """The notes saying what the reader changed as it read."""
    notes = []
    if long_names:
        notes.append(f"the trace has {long_names:,} event name(s) longer than "
                     f"{MAX_NAME_CHARS:,} characters; each was cut to that length (its end "
                     "says how many more it had)")
    if cleaned:
        notes.append(f"the trace has {cleaned} string(s) holding a lone surrogate escape "
                     "(\\ud800 to \\udfff: no character); each was replaced by U+FFFD")
    return notes


def _check_extent(path: Path, ev: dict, i: int, first_ts, last_ts) -> None:
    """The event that ends last (entry i) does not outlast the profile."""
    last_end = ev["ts"] + ev["dur"]
    if runs_past_capture(ps(first_ts), ps(last_ts), ps(last_end)):
        raise TraceError(f"{path} has a complete event (traceEvents entry {i:,}, "
                         f"{_show(ev['name'])}) lasting {ev['dur']:,.0f} us, to "
                         f"{last_end - last_ts:,.0f} us after the last event starts, while all "
                         f"start within {last_ts - first_ts:,.0f} us: it outlasts the profile "
                         "that recorded it, so the file is corrupt")


def _check_gpu_processes(path: Path, processes: dict) -> None:
    """One process per GPU ordinal (/device:GPU:0 and /device:GPU:00 are one GPU twice)."""
    gpu_pids: dict[int, tuple[int, str]] = {}
    for pid, name in sorted(processes.items()):
        if m := GPU_PROCESS_RE.match(name):
            o = int(m.group(1))
            if o in gpu_pids:
                raise TraceError(f"{path} names two processes for GPU {o} ({gpu_pids[o][1]}, pid "
                                 f"{gpu_pids[o][0]}, and {name}, pid {pid}); XLA names each "
                                 "GPU's process once, so the file is corrupt or merged")
            gpu_pids[o] = (pid, name)


def _metadata(path: Path, i: int, ev: dict, processes: dict, threads: dict) -> None:
    """A process_name or thread_name event, checked; other metadata events are left alone."""
    name = ev.get("name")
    if name not in ("process_name", "thread_name"):
        return
    pid, args = ev.get("pid"), ev.get("args")
    what = None
    if type(pid) is not int:
        what = f"pid is {_kind(pid) if 'pid' in ev else 'missing'}; expected an integer"
    elif name == "thread_name" and type(ev.get("tid")) is not int:
        what = (f"tid is {_kind(ev['tid'])}" if "tid" in ev else "tid is missing") + \
            "; expected an integer"
    elif type(args) is not dict or type(args.get("name", "")) is not str:
        what = "args.name is not a string"
    if what:
        raise TraceError(f"{path} has a {name} event (traceEvents entry {i:,}) whose {what}; "
                         "the file is corrupt or not XLA's trace")
    label = args.get("name", "")
    if name == "process_name":
        old = processes.get(pid)
        if old is not None and old != label:
            raise TraceError(f"{path} names process {pid} twice ({_show(old)} and "
                             f"{_show(label)}); the file is corrupt or merged")
        processes[pid] = label
    else:
        threads[(pid, ev["tid"])] = label
