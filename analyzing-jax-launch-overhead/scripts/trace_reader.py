"""Read XLA's ``<host>.trace.json.gz`` (or a plain ``.json``) with the standard library alone.

The file is Chrome trace JSON written by XLA from the XSpace:
``{"displayTimeUnit": "ns", "metadata": {...}, "traceEvents": [..., {}]}``.
- Processes and threads are known by the names in their ``ph: "M"`` events (``process_name`` is
  the xplane plane name, ``thread_name`` the line name), never by pid number.
- ``ts``/``dur`` are microseconds as floats; ``ps()`` turns them into integer picoseconds, which
  recovers the xplane's integer times exactly for captures up to about 1,000 s long.
- Complete events (``ph: "X"``) are kept as the dicts ``json`` made; nothing is copied.
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path

GPU_PROCESS_RE = re.compile(r"^/device:GPU:(\d+)$")
HOST_CPU_PROCESS = "/host:CPU"
GZIP_MAGIC = b"\x1f\x8b"


class TraceError(Exception):
    """The file is not a readable XLA trace; the message is one sentence for the user."""


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

    def pids_named(self, name: str) -> list[int]:
        return sorted(pid for pid, n in self.processes.items() if n == name)

    def gpu_pids(self) -> dict[int, int]:
        """GPU ordinal -> pid, from ``/device:GPU:n`` process names."""
        out = {}
        for pid, name in self.processes.items():
            m = GPU_PROCESS_RE.match(name)
            if m:
                out[int(m.group(1))] = pid
        return dict(sorted(out.items()))

    def host_pids(self) -> list[int]:
        return self.pids_named(HOST_CPU_PROCESS)


def ps(us) -> int:
    """Microseconds (the json's float) -> integer picoseconds."""
    return round(us * 1_000_000)


def _read_text(path: Path) -> str:
    try:
        with open(path, "rb") as fh:
            head = fh.read(2)
    except OSError as exc:
        raise TraceError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if not head:
        raise TraceError(f"{path} is empty; expected XProf's <host>.trace.json.gz")
    try:
        if head == GZIP_MAGIC:
            with gzip.open(path, "rb") as fh:
                raw = fh.read()
        else:
            if path.name.endswith(".gz"):
                raise TraceError(f"{path} is named .gz but is not gzip data")
            raw = path.read_bytes()
    except (EOFError, OSError, zlib.error) as exc:
        raise TraceError(f"{path} is not a complete gzip file (truncated or corrupt: {exc})") \
            from exc
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TraceError(f"{path} is not UTF-8 text, so not a JSON trace") from exc


def load_trace(path) -> Trace:
    """Load a trace; raise TraceError with one sentence when it is not XLA's trace JSON."""
    path = Path(path)
    text = _read_text(path)
    if not text.strip():
        raise TraceError(f"{path} holds no data; expected XProf's trace JSON")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceError(f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}: "
                         f"{exc.msg}); the file may be truncated") from exc
    del text
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        shape = type(doc).__name__ if not isinstance(doc, dict) else \
            "an object without a traceEvents list"
        raise TraceError(f"{path} is JSON but {shape}; expected XProf's trace object "
                         '{"traceEvents": [...]}')
    processes: dict[int, str] = {}
    threads: dict[tuple[int, int], str] = {}
    events: list[dict] = []
    phases: dict[str, int] = {}
    append = events.append
    for ev in doc["traceEvents"]:
        if not isinstance(ev, dict):
            raise TraceError(f"{path} has a traceEvents entry that is not an object")
        ph = ev.get("ph")
        if ph == "X":
            append(ev)
        elif ph == "M":
            name = ev.get("name")
            args = ev.get("args") or {}
            if name == "process_name":
                processes[ev.get("pid")] = args.get("name", "")
            elif name == "thread_name":
                threads[(ev.get("pid"), ev.get("tid"))] = args.get("name", "")
        if ph is not None:
            phases[ph] = phases.get(ph, 0) + 1
    if not processes and events:
        raise TraceError(f"{path} has events but no process_name metadata; it was not written "
                         "by XLA's trace exporter")
    metadata = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    return Trace(path, metadata, doc.get("displayTimeUnit"), processes, threads, events, phases,
                 len(doc["traceEvents"]))
