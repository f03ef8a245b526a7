"""XProf's own figures for step 5, shown beside the roofline's and never used for a ceiling: its
FLOPs and bytes per instruction (the hlo_stats tool) and its ceilings for the capture (the
roofline_model tool), read from the xplane copy step 4 left in attribution/xplane/ (the capture
is never touched). Each reader returns a note instead where XProf cannot give them."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# XProf's hlo_stats gives per op a FLOP rate in GFLOP/s and a memory bandwidth in GiB/s (found
# by comparison: its bytes came out 6.9% = 1 - 1e9/2^30 under ours on every row) over its
# average self time in us: per run, FLOPs = rate x time x 1e3, bytes = bandwidth x time x 2^30/1e6.
XPROF_FLOP_SCALE = 1e3
XPROF_BYTE_SCALE = 2 ** 30 / 1e6


def xplane_copies(out: Path) -> list[Path]:
    """The xplane copies step 4 left in out/attribution/xplane/, by name."""
    return sorted((out / "attribution" / "xplane").glob("*.xplane.pb"))


class XProfError(Exception):
    """XProf could not convert the xplane; the message is XProf's own."""


# XProf's conversions run in a child process: XProf holds the whole xplane in its own (C++)
# memory while it converts, 1.4 GiB at five times the seed's size; in the step's process that
# came on top of the step's own data (attribute_kernels peaked at 2.4 GiB, 1.06 without XProf).
# The child writes the tool's data on stdout; a failure is its last stderr line; exit 3 where
# xprof is not installed. XProf's C++ log goes to the child's stderr and is not shown.
_CHILD = r"""
import os, sys
if len(sys.argv) > 3 and hasattr(os, "nice"):
    os.nice(int(sys.argv[3]))  # a conversion beside the step's own work: the step goes first
try:
    from xprof.convert import raw_to_tool_data as r
except ImportError as exc:
    sys.stderr.write("\nXPROF-ERROR: " + str(exc) + "\n")
    sys.exit(3)
copy, tool = sys.argv[1], sys.argv[2]
try:
    data = r.xspace_to_tool_data([copy], tool, {"use_saved_result": False})
    data = data[0] if isinstance(data, tuple) else data
    if isinstance(data, str):
        data = data.encode("utf-8", "replace")
    sys.stdout.buffer.write(data or b"")
except Exception as exc:
    sys.stderr.write("\nXPROF-ERROR: " + (str(exc) or type(exc).__name__).replace("\n", " ")
                     + "\n")
    sys.exit(1)
"""


# A conversion whose data a step needs only at its end (step 4's coverage cross-check) runs at
# this much lower priority: where cores are fewer than the processes of a job (two, in the 5x
# scale check), the steps on the job's critical path get them first and the conversion takes
# what they leave (the job at 5x 16.8-17.4 -> 15.7-15.9 s, step 1 ending 14 -> 11.6 s); where
# cores are free it runs as fast as before.
BACKGROUND_NICE = 10


class Pending:
    """One XProf conversion (`tool`) running in its child process while the step goes on with
    its own work (the two use two cores where there are; `background`: at BACKGROUND_NICE):
    `result()` waits for its data, `cancel()` ends it."""

    def __init__(self, copy: Path, tool: str, background: bool = False):
        self._out = tempfile.TemporaryFile()
        self._err = tempfile.TemporaryFile()
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(copy), tool] +
            ([str(BACKGROUND_NICE)] if background else []),
            stdin=subprocess.DEVNULL, stdout=self._out, stderr=self._err)

    def result(self) -> str:
        """The tool's data (text). Raises ImportError where xprof is not installed, XProfError
        with XProf's message where it fails."""
        try:
            code = self._proc.wait()
            self._err.seek(0)
            err = self._err.read().decode("utf-8", "replace")
            if code:
                why = next((ln[len("XPROF-ERROR: "):] for ln in reversed(err.splitlines())
                            if ln.startswith("XPROF-ERROR: ")), f"exit {code}")
                raise (ImportError if code == 3 else XProfError)(why)
            self._out.seek(0)
            return self._out.read().decode("utf-8", "replace")
        finally:
            self._close()

    def cancel(self) -> None:
        """End the child (the step failed or was interrupted) and let its files go."""
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        self._close()

    def _close(self) -> None:
        self._out.close()
        self._err.close()


def convert(copy: Path, tool: str) -> str:
    """XProf on the xplane `copy` in a child process, waited for (Pending.result)."""
    return Pending(copy, tool).result()


def costs(out: Path) -> tuple[dict, str]:
    """(program id, instruction) -> (FLOPs, bytes) per run as XProf's hlo_stats computes them
    (step 4's saved conversion, hlo_stats.json, where it left one); and a note saying why there
    are none."""
    copies = xplane_copies(out)
    if not copies:
        return {}, "XProf's figures not shown: step 4 left no xplane copy in attribution/xplane/"
    saved = copies[0].parent / "hlo_stats.json"  # step 4's own XProf conversion, when it ran
    try:
        table = json.loads(saved.read_text() if saved.is_file() and saved.stat().st_size
                           else convert(copies[0], "hlo_stats"))
        cols = [c["id"] for c in table["cols"]]
        at = {k: cols.index(k) for k in ("program_id", "hlo_op_name", "avg_self_time",
                                         "model_flop_rate", "measured_memory_bw")}
    except Exception as exc:  # noqa: BLE001 - XProf's own failure, said in the note
        return {}, f"XProf's figures not shown: its hlo_stats could not be read ({exc})"
    out_costs = {}
    for r in table["rows"]:
        v = [c.get("v") if isinstance(c, dict) else None for c in r["c"]]
        try:
            t = float(v[at["avg_self_time"]] or 0)
            out_costs[(str(v[at["program_id"]]), str(v[at["hlo_op_name"]]))] = (
                float(v[at["model_flop_rate"]] or 0) * t * XPROF_FLOP_SCALE,
                float(v[at["measured_memory_bw"]] or 0) * t * XPROF_BYTE_SCALE)
        except (TypeError, ValueError, IndexError):
            continue
    return out_costs, ""


# XProf's conversion of step 4 (hlo_stats) reads the device planes'
# events and every plane's metadata; the host plane's events (as many again: each launch, each
# Python call) only cost XProf time and memory (its child held 3 GB at ten times the seed's
# size). `device_copy` writes the xplane without them, at the level of its bytes (XSpace field 1:
# planes; XPlane field 2: name, field 3: lines), never decoding an event; XProf's hlo_stats of
# it equals that of the whole xplane on every shared capture (tested).
_PLANES, _NAME, _LINES = 1, 2, 3
_COPY_CHUNK = 1 << 20


def _varint(fh) -> int:
    shift = value = 0
    while True:
        b = fh.read(1)
        if not b:
            raise ValueError("cut short")
        value |= (b[0] & 0x7F) << shift
        if b[0] < 0x80:
            return value
        shift += 7
        if shift > 63:
            raise ValueError("a varint longer than 10 bytes")


def _encode_varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _fields(fh, start: int, end: int) -> list[tuple]:
    """(field, wire type, where the field starts, where its value starts, where it ends) of
    each field of the message in the file's bytes [start, end)."""
    out = []
    at = start
    while at < end:
        fh.seek(at)
        key = _varint(fh)
        field, wire = key >> 3, key & 7
        if wire not in (0, 1, 2, 5):
            raise ValueError(f"wire type {wire}")
        # a value's length: its own varint (2), fixed (1: 8 bytes, 5: 4), or a varint to read (0)
        n = _varint(fh) if wire == 2 else {1: 8, 5: 4}.get(wire, 0)
        value = fh.tell()
        if wire == 0:
            _varint(fh)
        stop = fh.tell() if wire == 0 else value + n
        if stop > end:
            raise ValueError("a field runs past its message")
        out.append((field, wire, at, value, stop))
        at = stop
    return out


def _read(fh, start: int, end: int) -> bytes:
    fh.seek(start)
    return fh.read(end - start)


def _copy_range(src, dst, start: int, end: int) -> None:
    src.seek(start)
    while start < end:
        chunk = src.read(min(_COPY_CHUNK, end - start))
        if not chunk:
            raise ValueError("cut short")
        dst.write(chunk)
        start += len(chunk)


def device_copy(src: Path, dest: Path) -> bool:
    """Write `src` to `dest` with the events of every plane but the device planes left out
    (the planes' names, stats and metadata kept); True where it did, False where it copied the
    xplane whole: no device plane holds events (a CPU capture: the host plane is the work), or
    the bytes are not what XSpace's fields say (the readers before it say why)."""
    try:
        with open(src, "rb") as fh:
            size = fh.seek(0, 2)
            planes = []  # (top-level field, plane name, its fields or None)
            for f in _fields(fh, 0, size):
                if f[0] == _PLANES and f[1] == 2:
                    sub = _fields(fh, f[3], f[4])
                    name = next((_read(fh, v, e) for k, w, _, v, e in sub
                                 if k == _NAME and w == 2), b"")
                    planes.append((f, name, sub))
                else:
                    planes.append((f, b"", None))
            device = [sub for f, name, sub in planes
                      if sub is not None and name.startswith(b"/device:")]
            if not any(k == _LINES for sub in device for k, *_ in sub):
                shutil.copy2(src, dest)
                return False
            with open(dest, "wb") as out:
                for f, name, sub in planes:
                    if sub is None or name.startswith(b"/device:"):
                        _copy_range(fh, out, f[2], f[4])
                        continue
                    kept = [x for x in sub if x[0] != _LINES]
                    out.write(_encode_varint(_PLANES << 3 | 2))
                    out.write(_encode_varint(sum(e - a for _, _, a, _, e in kept)))
                    for _, _, a, _, e in kept:
                        _copy_range(fh, out, a, e)
        shutil.copystat(src, dest)
        return True
    except (ValueError, OSError):
        shutil.copy2(src, dest)
        return False


def header_copy(space, path: Path) -> Path:
    """Write to `path` the capture's planes with their stats and metadata and none of their
    lines (events): what XProf's roofline_model reads for its peaks (the device's stats). On
    the 5x-seed capture its conversion of the whole xplane took 5.6 s, of this copy (1.7 MB
    of 89 MB) 0.2 s, with the same peaks (tests compare the two on every shared capture)."""
    from jaxperf.read import xprotos
    xs = xprotos.classes()[f"{xprotos.BULK}.XSpace"]()  # the classes xplane_reader parsed with
    xs.hostnames.extend(space.hostnames)
    for plane in space.planes:
        src, dst = plane._proto, xs.planes.add()
        dst.id, dst.name = src.id, src.name
        for k, v in src.event_metadata.items():
            dst.event_metadata[k].CopyFrom(v)
        for k, v in src.stat_metadata.items():
            dst.stat_metadata[k].CopyFrom(v)
        dst.stats.extend(src.stats)
    path.write_bytes(xs.SerializeToString())
    return path


def peaks(out: Path, space=None) -> dict:
    """XProf's own ceilings for this capture (its roofline_model tool: one compute peak for
    every dtype, and an HBM bandwidth from the memory clock), converted to FLOP/s and B/s; or
    a note saying why there are none. With the decoded `space`, XProf reads only its planes'
    headers (header_copy), not every event again."""
    copies = xplane_copies(out)
    if not copies:
        return {"note": "XProf's ceilings not shown: step 4 left no xplane copy"}
    try:
        with tempfile.TemporaryDirectory(prefix="jaxtrace-roofline-") as tmp:
            src = copies[0] if space is None else header_copy(space, Path(tmp) / copies[0].name)
            tables = json.loads(convert(src, "roofline_model"))
        props = next(t["p"] for t in tables if isinstance(t, dict) and t.get("p"))
        return {"device_type": props.get("device_type"),
                "compute_flop_per_s": float(props["peak_flop_rate"]) * 1e9,
                "memory_bytes_per_s": float(props["peak_hbm_bw"]) * 2 ** 30,
                "note": "XProf's roofline_model peaks (GFLOP/s x 1e9, GiB/s x 2^30): one "
                        "compute peak for every dtype; the bandwidth from the memory clock"}
    except Exception as exc:  # noqa: BLE001 - XProf's own failure, said in the note
        return {"note": f"XProf's ceilings not shown: its roofline_model could not be read "
                      f"({str(exc)[:200]})"}
