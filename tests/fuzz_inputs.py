#!/usr/bin/env python3
"""A seeded mutation fuzzer for the scripts that read a capture: no traceback, no hang, no
unbounded memory, no half-written output, the capture untouched, whatever the files hold.

Usage:
    PYTHONPATH=tests:scripts .venv/bin/python tests/fuzz_inputs.py --mutants N [--seed S]
        [--start I] [--capture DIR ...] [--timeout S] [--memory-mib M]
        [--investigate-every K] [--no-xprof] [--keep DIR] [--json FILE] [--progress N]

Example:
    PYTHONPATH=tests:scripts .venv/bin/python tests/fuzz_inputs.py --mutants 5000 --seed 1

Seeds: the generated capture nvidia-cb-partial (made in a temporary folder), and the real
MI300X gemm capture of ../shared/captures (copied first) where it is present; --capture DIR
(a run folder holding one host's .xplane.pb and .trace.json.gz) replaces them.
Mutant i is made from Random(f"{seed}:{i}") alone, so any mutant can be made again by its
number. It is a run folder holding the seed's two files with one of them mutated: the trace
(a field of an event set to a hostile value or removed, metadata mixed up, names full of markup,
quotes, commas, newlines, lone surrogates and invalid UTF-8, deep nesting, huge numbers, the
JSON cut or its bytes flipped, the gzip cut, flipped, empty, not gzip, or holding something
else) or the xplane (event times, stats and planes changed or removed, an HLO blob flipped or
its program made inconsistent: dangling ids, cycles, absurd trip counts and shapes; the bytes
flipped, cut or replaced), or the two files taken from different captures.

Each mutant goes through the scripts that read its mutated file, in investigate.py's order and
into one scratch folder: capture_info, skip_stats (a trace mutant), attribute_kernels (an xplane
mutant), reconcile, swimlanes (trace), roofline (xplane); all six for a pair of files from two
captures; investigate.py itself on every K-th mutant (--investigate-every, 0 for never). Each
script runs as its own forked child of this process (its main(argv), as `python3 -P` would run
it), so a run costs milliseconds, not an interpreter start. Outcomes: ok (exit 0), refused (exit
1 with a sentence on stderr), usage (2), missing (3), and the failures: traceback, hang (over
--timeout), memory (resident set over --memory-mib past the pages inherited at the fork),
signal, exit (another code), leftover (a failed run changed the scratch folder, or any run left
a temporary file), touched (the capture changed), bad_csv (a CSV that Python's csv module does
not read back as its header's width), bad_json (a JSON that is not strict JSON). Prints the
counts by outcome and script, and each failure with its mutant.

Exit codes: 0 no failure; 1 at least one failure (listed); 2 usage.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import gzip
import hashlib
import importlib.util
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import zlib
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ROOT_SCRIPTS = REPO / "scripts"
SIBLING_SCRIPTS = REPO / "analyzing-jax-launch-overhead" / "scripts"
SHARED_GEMM = (REPO.parent / "shared" / "captures" / "tracelens-amd-rocm" / "mi300x-jax0.8-gemm"
               / "plugins" / "profile" / "2026_02_20_13_54_10")
for _p in (ROOT_SCRIPTS, SIBLING_SCRIPTS, REPO / "tests"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))
from tracekit import scratch  # the scratch folder's declarations: its hand-off folder

# (module, file, which mutants it runs on), in investigate.py's order.
ENTRY = (
    ("capture_info", ROOT_SCRIPTS / "capture_info.py", ("trace", "xplane", "pair")),
    ("skip_stats", SIBLING_SCRIPTS / "skip_stats.py", ("trace", "pair")),
    ("attribute_kernels", ROOT_SCRIPTS / "attribute_kernels.py", ("xplane", "pair")),
    ("reconcile", ROOT_SCRIPTS / "reconcile.py", ("trace", "xplane", "pair")),
    ("swimlanes", ROOT_SCRIPTS / "swimlanes.py", ("trace", "pair")),
    ("roofline", ROOT_SCRIPTS / "roofline.py", ("xplane", "pair")),
)
INVESTIGATE = ROOT_SCRIPTS / "investigate.py"
OK_OUTCOMES = ("ok", "refused", "usage", "missing")
FAILURES = ("traceback", "hang", "memory", "signal", "exit", "leftover", "touched", "bad_csv",
            "bad_json")
TRACEBACK_RC = 70  # what the child exits with when main() raised
# A forked child is polled this often for its end and its resident set (seconds).
POLL_S = 0.005
HOST = "fuzz"

NAN, INF = float("nan"), float("inf")
HOSTILE_STRINGS = (
    "<script>alert(1)</script>", 'q"u\'o,te', "a,b,c", "line\nbreak", "cr\rhere", "tab\there",
    "nul\x00x", "\ud800", "lone \udfff low", "é ü 中文 🙂", "\u202eRTL", "x" * 100_000, "", " ",
    "%s%n{0}", "../../etc/passwd", "\\", "]]>", "&amp;<b>", "\x1b[31mred", "=cmd|' /C calc'!A0",
)
HOSTILE_VALUES = (
    NAN, INF, -INF, 1e308, -1e308, 1e300, -1.0, -0.001, 0, 2**63, -(2**63), 2**64 + 1,
    "12.5", "9" * 8000, "", True, False, None, [], {}, [1, 2], {"a": 1}, "NaN",
) + HOSTILE_STRINGS
# what a proto string field can hold (valid UTF-8: no lone surrogate)
PROTO_STRINGS = tuple(s for s in HOSTILE_STRINGS if not any(0xD800 <= ord(c) < 0xE000 for c in s))
TRACE_FIELDS = ("ph", "pid", "tid", "ts", "dur", "name", "args", "args.correlation_id",
                "args.hlo_op", "args.hlo_module", "args.step_num", "args.device_id",
                "args.memcpy_details", "args.cuda_graph_id", "args.module_name", "args.name",
                "args.program_id")


# ---------------------------------------------------------------- seeds

@dataclass
class Seed:
    name: str
    trace_gz: bytes
    trace_text: str
    xplane: bytes
    host_events: list = field(default_factory=list)


def load_seed(run_dir: Path, name: str) -> Seed:
    traces = sorted(run_dir.glob("*.trace.json.gz"))
    xplanes = sorted(run_dir.glob("*.xplane.pb"))
    if len(traces) != 1 or len(xplanes) != 1:
        raise SystemExit(f"fuzz_inputs: {run_dir} must hold one .trace.json.gz and one "
                         ".xplane.pb")
    gz = traces[0].read_bytes()
    return Seed(name, gz, gzip.decompress(gz).decode("utf-8"), xplanes[0].read_bytes())


def default_seeds(work: Path) -> list[Seed]:
    from capgen.generate import generate
    from capgen.scenarios import SCENARIOS
    gen = generate(SCENARIOS["nvidia-cb-partial"], work / "seed-cb")
    seeds = [load_seed(Path(gen.xplane).parent, "nvidia-cb-partial")]
    if SHARED_GEMM.is_dir():
        copy = work / "seed-gemm"
        shutil.copytree(SHARED_GEMM, copy)
        for f in copy.iterdir():
            f.chmod(0o644)
        seeds.append(load_seed(copy, "mi300x-gemm"))
    return seeds


# ---------------------------------------------------------------- trace mutants

def _gz(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=1, mtime=0)


def _dump(doc) -> bytes:
    # lone surrogates survive as the \udxxx escapes json writes for them
    return json.dumps(doc, allow_nan=True).encode("utf-8")


def _events(doc, ph="X"):
    evs = doc.get("traceEvents") if isinstance(doc, dict) else None
    return [e for e in evs or () if isinstance(e, dict) and (ph is None or e.get("ph") == ph)]


def _set_path(ev: dict, path: str, value) -> None:
    if path.startswith("args."):
        args = ev.get("args")
        if not isinstance(args, dict):
            args = ev["args"] = {}
        args[path[5:]] = value
    else:
        ev[path] = value


def _del_path(ev: dict, path: str) -> None:
    if path.startswith("args."):
        if isinstance(ev.get("args"), dict):
            ev["args"].pop(path[5:], None)
    else:
        ev.pop(path, None)


def _pick_event(rng, doc):
    xs = _events(doc)
    return rng.choice(xs) if xs else None


def _nested(depth: int, rng) -> str:
    o, c = rng.choice((("[", "]"), ('{"a":', "}")))
    return o * depth + "0" + c * depth


def trace_mutant(rng: random.Random, seed: Seed) -> tuple[str, str, bytes]:
    """(description, file name suffix, file bytes)."""
    op = rng.choice((
        "set_field", "set_field", "set_field", "set_field", "del_field", "del_field",
        "hostile_names", "metadata", "duplicate_gpu", "drop_kind", "shuffle", "top_level",
        "scale_times", "nest", "bignum", "text_truncate", "text_flip", "text_invalid_utf8",
        "text_span", "gz_truncate", "gz_flip", "gz_other", "plain_json", "many_fields",
        "same_correlation", "repeat_events",
    ))
    doc = json.loads(seed.trace_text)
    suffix = ".trace.json.gz"
    if op == "set_field":
        ev = _pick_event(rng, doc)
        path, value = rng.choice(TRACE_FIELDS), rng.choice(HOSTILE_VALUES)
        _set_path(ev, path, value)
        return f"json set {path}={_short(value)} on one event", suffix, _gz(_dump(doc))
    if op == "many_fields":
        path, value = rng.choice(TRACE_FIELDS), rng.choice(HOSTILE_VALUES)
        evs = _events(doc)
        for ev in rng.sample(evs, max(1, len(evs) // rng.choice((2, 10, 50)))):
            _set_path(ev, path, value)
        return f"json set {path}={_short(value)} on many events", suffix, _gz(_dump(doc))
    if op == "del_field":
        ev = _pick_event(rng, doc) if rng.random() < 0.8 else rng.choice(_events(doc, "M"))
        path = rng.choice(TRACE_FIELDS)
        _del_path(ev, path)
        return f"json delete {path} of one event", suffix, _gz(_dump(doc))
    if op == "hostile_names":
        s = rng.choice(HOSTILE_STRINGS[:-1]) + rng.choice(HOSTILE_STRINGS)
        which = rng.choice(("kernel", "host", "thread", "process", "hlo_op", "module"))
        for ev in doc["traceEvents"]:
            if not isinstance(ev, dict):
                continue
            if which == "kernel" and ev.get("ph") == "X" and ev.get("pid", 999) < 100:
                ev["name"] = s + ev.get("name", "")
            elif which == "host" and ev.get("ph") == "X" and ev.get("pid", 0) >= 100:
                ev["name"] = ev.get("name", "") + s
            elif which == "thread" and ev.get("name") == "thread_name":
                ev["args"]["name"] = s + ev["args"].get("name", "")
            elif which == "process" and ev.get("name") == "process_name" and \
                    not str(ev["args"].get("name")).startswith("/device"):
                ev["args"]["name"] = s
            elif which in ("hlo_op", "module") and isinstance(ev.get("args"), dict):
                key = "hlo_op" if which == "hlo_op" else "hlo_module"
                if key in ev["args"]:
                    ev["args"][key] = s
        return f"json {which} names hold {_short(s)}", suffix, _gz(_dump(doc))
    if op == "metadata":
        ms = _events(doc, "M")
        ev = rng.choice(ms)
        what = rng.choice(("name", "args", "pid", "tid", "args.name"))
        value = rng.choice(HOSTILE_VALUES)
        _set_path(ev, what, value)
        return f"json metadata {ev.get('name')!s:.20} {what}={_short(value)}", suffix, \
            _gz(_dump(doc))
    if op == "duplicate_gpu":
        gpus = [e for e in _events(doc, "M") if e.get("name") == "process_name" and
                str(e["args"].get("name", "")).startswith("/device:GPU")]
        name = rng.choice(gpus)["args"]["name"] if gpus else "/device:GPU:0"
        pid = 4242
        entry = {"ph": "M", "pid": pid, "name": "process_name", "args": {"name": name}}
        evs = doc["traceEvents"]
        evs.insert(rng.randrange(len(evs) + 1), entry)
        if rng.random() < 0.5:  # and move some events over to it
            for ev in _events(doc):
                if rng.random() < 0.3:
                    ev["pid"] = pid
        return f"json a second process named {name}", suffix, _gz(_dump(doc))
    if op == "drop_kind":
        kind = rng.choice(("gpu", "host", "M", "process_name", "thread_name", "half", "all"))
        keep = []
        for ev in doc["traceEvents"]:
            drop = {"gpu": isinstance(ev, dict) and ev.get("ph") == "X" and
                    ev.get("pid", 999) < 100,
                    "host": isinstance(ev, dict) and ev.get("ph") == "X" and
                    ev.get("pid", 0) >= 100,
                    "M": isinstance(ev, dict) and ev.get("ph") == "M",
                    "process_name": isinstance(ev, dict) and ev.get("name") == "process_name",
                    "thread_name": isinstance(ev, dict) and ev.get("name") == "thread_name",
                    "half": rng.random() < 0.5, "all": True}[kind]
            if not drop:
                keep.append(ev)
        doc["traceEvents"] = keep
        return f"json drop {kind} events", suffix, _gz(_dump(doc))
    if op == "same_correlation":
        value = rng.choice(("1", "0", "", "x"))
        for ev in _events(doc):
            if isinstance(ev.get("args"), dict) and "correlation_id" in ev["args"]:
                ev["args"]["correlation_id"] = value
        return f"json every correlation_id is {value!r}", suffix, _gz(_dump(doc))
    if op == "repeat_events":
        n = rng.choice((2, 5, 20))
        xs = _events(doc)
        doc["traceEvents"] = doc["traceEvents"] + [dict(e) for e in xs] * (n - 1)
        return f"json every complete event {n} times", suffix, _gz(_dump(doc))
    if op == "shuffle":
        rng.shuffle(doc["traceEvents"])
        return "json events shuffled", suffix, _gz(_dump(doc))
    if op == "top_level":
        shape = rng.choice(([], {}, {"traceEvents": {}}, {"traceEvents": None}, "text", 1, None,
                            {"traceEvents": [1, "a", None]}, {"traceEvents": [[]]},
                            {"traceEvents": doc["traceEvents"], "metadata": []},
                            {"traceEvents": doc["traceEvents"], "displayTimeUnit": "s"}))
        return f"json top level {_short(shape)}", suffix, _gz(_dump(shape))
    if op == "scale_times":
        factor = rng.choice((1e6, 1e12, -1.0, 0.0, 1e-9))
        field_ = rng.choice(("ts", "dur"))
        for ev in _events(doc):
            if isinstance(ev.get(field_), (int, float)):
                ev[field_] *= factor
        return f"json every {field_} times {factor:g}", suffix, _gz(_dump(doc))
    text = _dump(doc)
    if op == "nest":
        depth = rng.choice((50, 999, 5000, 100_000))
        key = rng.choice((b'"dur": ', b'"args": ', b'"traceEvents": ', b'"name": '))
        i = _nth(text, key, rng)
        if i < 0:
            return "json nest (no place)", suffix, _gz(text)
        j = _value_end(text, i + len(key))
        text = text[:i + len(key)] + _nested(depth, rng).encode() + text[j:]
        return f"json {key.decode().strip(': ')} nested {depth} deep", suffix, _gz(text)
    if op == "bignum":
        digits = rng.choice((400, 4000, 5000, 8000))
        key = rng.choice((b'"ts": ', b'"dur": ', b'"pid": ', b'"tid": '))
        i = _nth(text, key, rng)
        if i < 0:
            return "json bignum (no place)", suffix, _gz(text)
        j = _value_end(text, i + len(key))
        num = rng.choice(("9" * digits, "-" + "9" * digits, "1e" + "9" * min(digits, 50),
                          "0." + "0" * digits + "1", f'"{"9" * digits}"'))
        text = text[:i + len(key)] + num.encode() + text[j:]
        return f"json {key.decode().strip(': ')} a {digits}-digit number", suffix, _gz(text)
    if op == "text_truncate":
        cut = int(len(text) * rng.choice((0.0, 0.1, 0.5, 0.9, 0.999, rng.random())))
        return f"json cut at {cut} of {len(text)} bytes", suffix, _gz(text[:cut])
    if op == "text_flip":
        b = bytearray(text)
        n = rng.choice((1, 2, 10, 100))
        for _ in range(n):
            b[rng.randrange(len(b))] = rng.randrange(256)
        return f"json {n} random bytes changed", suffix, _gz(bytes(b))
    if op == "text_invalid_utf8":
        i = _nth(text, b'"name": "', rng)
        bad = rng.choice((b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf0\x28\x8c\x28", b"\x80"))
        text = text[:i + 9] + bad + text[i + 9:]
        return f"json invalid UTF-8 {bad!r} in a name", suffix, _gz(text)
    if op == "text_span":
        a = rng.randrange(len(text))
        b_ = min(len(text), a + rng.choice((1, 10, 1000, 100_000)))
        if rng.random() < 0.5:
            return f"json bytes {a}-{b_} deleted", suffix, _gz(text[:a] + text[b_:])
        return f"json bytes {a}-{b_} doubled", suffix, _gz(text[:b_] + text[a:])
    gz = seed.trace_gz
    if op == "gz_truncate":
        cut = int(len(gz) * rng.choice((0.0, 0.1, 0.5, 0.9, rng.random())))
        return f"gzip cut at {cut} of {len(gz)} bytes", suffix, gz[:cut]
    if op == "gz_flip":
        b = bytearray(gz)
        n = rng.choice((1, 3, 20))
        for _ in range(n):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        return f"gzip {n} bits flipped", suffix, bytes(b)
    if op == "gz_other":
        kind = rng.choice(("empty", "zero_gzip", "random", "gzip_random", "gzip_text",
                           "two_members", "plain_in_gz", "zeros_bomb"))
        data = {
            "empty": b"",
            "zero_gzip": _gz(b""),
            "random": rng.randbytes(rng.choice((1, 2, 100, 10_000))),
            "gzip_random": _gz(rng.randbytes(10_000)),
            "gzip_text": _gz(b"hello, this is not JSON\n"),
            "two_members": gz + gz,
            "plain_in_gz": text,
            # 8 MiB of zeros: over the ratio cap (a bomb in miniature, quick to make)
            "zeros_bomb": _gz_zeros(8 << 20),
        }[kind]
        return f"gzip file {kind}", suffix, data
    if op == "plain_json":
        return "plain .trace.json (no gzip)", ".trace.json", text
    raise AssertionError(op)


def _gz_zeros(n: int) -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = bytes(1 << 20)
    out = [c.compress(chunk) for _ in range(n >> 20)]
    return b"".join(out) + c.flush()


def _nth(text: bytes, key: bytes, rng) -> int:
    """The start of a random occurrence of key in text (-1 when none)."""
    count = text.count(key)
    if not count:
        return -1
    k = rng.randrange(count)
    i = -1
    for _ in range(k + 1):
        i = text.find(key, i + 1)
    return i


def _value_end(text: bytes, i: int) -> int:
    """The end of the JSON scalar starting at i (a number or a string)."""
    if text[i:i + 1] == b'"':
        j = i + 1
        while j < len(text) and text[j:j + 1] != b'"':
            j += 2 if text[j:j + 1] == b"\\" else 1
        return j + 1
    j = i
    while j < len(text) and text[j:j + 1] not in b",}]":
        j += 1
    return j


def _short(v) -> str:
    s = repr(v)
    return s if len(s) <= 40 else s[:37] + "..."


# ---------------------------------------------------------------- xplane mutants

def _space(seed: Seed):
    from jaxperf.read import xprotos
    return xprotos.classes()["XSpace"].FromString(seed.xplane)


def _hlo_cls():
    from jaxperf.read import xprotos
    return xprotos.classes()["HloProto"]


def _blobs(space):
    """(stat message, HloProto) for every program stored in /host:metadata."""
    out = []
    for p in space.planes:
        if p.name != "/host:metadata":
            continue
        for k in sorted(p.event_metadata):
            for st in p.event_metadata[k].stats:
                if st.WhichOneof("value") == "bytes_value":
                    out.append(st)
    return out


def _all_events(space, device_only=False):
    """Every event, or those of the device planes alone (a GPU's or a TPU's)."""
    return [(p, ln, ev) for p in space.planes
            if not device_only or p.name.startswith("/device:")
            for ln in p.lines for ev in ln.events]


def xplane_mutant(rng: random.Random, seed: Seed) -> tuple[str, bytes]:
    op = rng.choice((
        "event_time", "event_time", "line_time", "stat_value", "stat_value", "stat_ref",
        "planes", "plane_name", "names", "hlo_flip", "hlo_flip", "hlo_struct", "hlo_struct",
        "hlo_struct", "hlo_blob", "device_stats", "task_env", "bytes_flip", "bytes_cut",
        "bytes_other", "metadata_ids", "line_ids", "reorder", "stat_names",
    ))
    raw = seed.xplane
    if op == "bytes_flip":
        b = bytearray(raw)
        n = rng.choice((1, 1, 3, 20, 200))
        for _ in range(n):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        return f"xplane {n} bits flipped", bytes(b)
    if op == "bytes_cut":
        frac = rng.choice((0.1, 0.5, 0.9, rng.random()))
        return f"xplane cut at {frac:.0%}", raw[:int(len(raw) * frac)]
    if op == "bytes_other":
        kind = rng.choice(("empty", "random", "random_same_size", "garbage_appended",
                           "gzip", "json", "doubled"))
        data = {"empty": b"", "random": rng.randbytes(rng.choice((1, 7, 1000))),
                "random_same_size": rng.randbytes(len(raw)),
                "garbage_appended": raw + rng.randbytes(100), "gzip": seed.trace_gz,
                "json": seed.trace_text.encode(), "doubled": raw + raw}[kind]
        return f"xplane file {kind}", data
    space = _space(seed)
    desc = op
    if op == "event_time":
        evs = _all_events(space, device_only=rng.random() < 0.7) or _all_events(space)
        field_ = rng.choice(("offset_ps", "duration_ps"))
        value = rng.choice((-1, -10**12, 2**62, 2**63 - 1, -(2**63), 0, 10**18))
        for _, _, ev in rng.sample(evs, min(len(evs), rng.choice((1, 1, 50)))):
            setattr(ev, field_, value)
        desc = f"xplane event {field_}={value}"
    elif op == "line_time":
        lines = [ln for p in space.planes for ln in p.lines]
        ln = rng.choice(lines)
        value = rng.choice((-1, -(2**62), 2**62, 2**63 - 1, 0))
        ln.timestamp_ns = value
        desc = f"xplane line {ln.name[:20]} timestamp_ns={value}"
    elif op == "stat_value":
        p = rng.choice([p for p in space.planes if p.lines] or space.planes)
        name = rng.choice(("hlo_op", "program_id", "correlation_id", "hlo_module", "step_num",
                           "memcpy_details", "cuda_graph_id", "device_id", "module_name",
                           "group_id", "flops", "model_flops", "bytes_accessed", "hlo_category",
                           "run_id", "source_stack", "tf_op", "peak_teraflops_per_second",
                           "peak_hbm_bw_gigabytes_per_second", "memory_access_breakdown"))
        ids = [k for k, m in p.stat_metadata.items() if m.name == name]
        if not ids:
            k = max(p.stat_metadata or {0: None}) + 1
            p.stat_metadata[k].id = k
            p.stat_metadata[k].name = name
            ids = [k]
        kind, value = rng.choice((("int64_value", -1), ("int64_value", 2**63 - 1),
                                  ("uint64_value", 2**64 - 1), ("double_value", NAN),
                                  ("double_value", INF), ("double_value", -0.5),
                                  ("str_value", "12"), ("str_value", "<b>\n,\"x"),
                                  ("str_value", ""), ("bytes_value", b"\xff\x00"),
                                  ("ref_value", 999_999), ("int64_value", 0)))
        evs = [(ln, ev) for ln in p.lines for ev in ln.events]
        targets = rng.sample(evs, min(len(evs), rng.choice((1, 5, 1000)))) if evs else []
        first = rng.random() < 0.5  # the added stat first: it wins over the real one
        for _, ev in targets:
            st = ev.stats.add()
            st.metadata_id = ids[0]
            setattr(st, kind, value)
            if first:
                stats = [st] + list(ev.stats)[:-1]
                copies = []
                for s in stats:
                    c = type(s)()
                    c.CopyFrom(s)
                    copies.append(c)
                del ev.stats[:]
                ev.stats.extend(copies)
        desc = f"xplane stat {name} as {kind}={_short(value)} on {len(targets)} events"
    elif op == "stat_ref":
        p = rng.choice(space.planes)
        for k in list(p.stat_metadata)[: rng.choice((1, 3, 1000))]:
            if rng.random() < 0.5:
                del p.stat_metadata[k]
            else:
                p.stat_metadata[k].name = rng.choice(PROTO_STRINGS[:10])
        desc = f"xplane stat metadata of {p.name[:20]} removed or renamed"
    elif op == "line_ids":
        p = rng.choice([p for p in space.planes if p.lines] or space.planes)
        value = rng.choice((0, -1, 2**63 - 1))
        for ln in p.lines:
            ln.id = value
        desc = f"xplane every line of {p.name[:20]} has id {value}"
    elif op == "reorder":
        lines = [ln for p in space.planes for ln in p.lines if len(ln.events) > 1]
        if lines:
            ln = rng.choice(lines)
            evs = list(ln.events)
            rng.shuffle(evs)
            copies = []
            for e in evs:
                c = type(e)()
                c.CopyFrom(e)
                copies.append(c)
            del ln.events[:]
            ln.events.extend(copies)
        desc = "xplane one line's events out of order"
    elif op == "stat_names":
        p = rng.choice([p for p in space.planes if p.stat_metadata] or space.planes)
        name = rng.choice(("hlo_op", "program_id", "correlation_id", "Hlo Proto", "step_num"))
        for k in list(p.stat_metadata)[: rng.choice((1, 5, 1000))]:
            p.stat_metadata[k].name = name
        desc = f"xplane stat metadata of {p.name[:20]} renamed {name}"
    elif op == "metadata_ids":
        p = rng.choice([p for p in space.planes if p.lines] or space.planes)
        for ln in p.lines:
            for ev in ln.events:
                if rng.random() < 0.2:
                    ev.metadata_id = rng.choice((0, -1, 10**12))
        desc = f"xplane dangling event metadata ids on {p.name[:20]}"
    elif op == "planes":
        kind = rng.choice(("no_gpu", "no_metadata", "no_host", "only_metadata", "dup_gpu",
                           "no_lines", "no_task_env"))
        keep = []
        for p in space.planes:
            gpu = p.name.startswith("/device:GPU")
            drop = {"no_gpu": gpu, "no_metadata": p.name == "/host:metadata",
                    "no_host": p.name == "/host:CPU",
                    "only_metadata": p.name != "/host:metadata",
                    "dup_gpu": False, "no_lines": False,
                    "no_task_env": p.name == "Task Environment"}[kind]
            if not drop:
                keep.append(p)
        if kind == "dup_gpu":
            gp = [p for p in keep if p.name.startswith("/device:GPU") and p.lines]
            if gp:
                extra = type(gp[0])()
                extra.CopyFrom(gp[0])
                keep.append(extra)
        if kind == "no_lines":
            for p in keep:
                if p.name.startswith("/device:GPU"):
                    del p.lines[:]
        copies = []
        for p in keep:
            c = type(p)()
            c.CopyFrom(p)
            copies.append(c)
        del space.planes[:]
        space.planes.extend(copies)
        desc = f"xplane planes: {kind}"
    elif op == "plane_name":
        p = rng.choice(space.planes)
        p.name = rng.choice(("/device:GPU:0", "/device:GPU:99999999999999999999",
                             "/device:GPU:-1", "/host:CPU", "/host:metadata", "") +
                            PROTO_STRINGS[:8])
        desc = f"xplane plane renamed {_short(p.name)}"
    elif op == "names":
        s = rng.choice(PROTO_STRINGS)
        p = rng.choice([p for p in space.planes if p.event_metadata] or space.planes)
        for k in list(p.event_metadata)[: rng.choice((1, 10, 10_000))]:
            p.event_metadata[k].name = s + p.event_metadata[k].name
        for ln in p.lines:
            if rng.random() < 0.5:
                ln.name = s + ln.name
        desc = f"xplane names on {p.name[:20]} hold {_short(s)}"
    elif op == "device_stats":
        gp = [p for p in space.planes if p.name.startswith("/device:GPU")]
        p = rng.choice(gp) if gp else space.planes[0]
        name = rng.choice(("clock_rate", "core_count", "memory_bandwidth", "memory_size",
                           "compute_cap_major", "compute_cap_minor", "device_vendor",
                           "gpu_device_name"))
        ids = {m.name: k for k, m in p.stat_metadata.items()}
        kind, value = rng.choice((("int64_value", 0), ("int64_value", -5),
                                  ("uint64_value", 2**64 - 1), ("double_value", NAN),
                                  ("double_value", INF), ("str_value", "fast"),
                                  ("str_value", "<svg onload=x>")))
        for st in p.stats:
            if st.metadata_id == ids.get(name):
                setattr(st, kind, value)
        desc = f"xplane device stat {name}={_short(value)}"
    elif op == "task_env":
        tp = [p for p in space.planes if p.name == "Task Environment"]
        if tp:
            for st in tp[0].stats:
                setattr(st, *rng.choice((("int64_value", -1), ("uint64_value", 0),
                                         ("str_value", "soon"), ("double_value", NAN),
                                         ("int64_value", 2**63 - 1))))
        desc = "xplane Task Environment stats changed"
    elif op in ("hlo_flip", "hlo_blob", "hlo_struct"):
        blobs = _blobs(space)
        if not blobs:
            return "xplane (no HLO to mutate)", seed.xplane
        st = rng.choice(blobs)
        if op == "hlo_flip":
            b = bytearray(st.bytes_value)
            n = rng.choice((1, 1, 2, 10))
            for _ in range(n):
                b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
            st.bytes_value = bytes(b)
            desc = f"xplane HLO blob: {n} bits flipped"
        elif op == "hlo_blob":
            kind = rng.choice(("empty", "random", "cut", "text"))
            st.bytes_value = {"empty": b"", "random": rng.randbytes(500),
                              "cut": st.bytes_value[:len(st.bytes_value) // 2],
                              "text": b"HloModule x\n"}[kind]
            desc = f"xplane HLO blob: {kind}"
        else:
            proto = _hlo_cls().FromString(st.bytes_value)
            desc = "xplane HLO: " + hlo_struct_mutation(rng, proto.hlo_module)
            st.bytes_value = proto.SerializeToString()
    return desc, space.SerializeToString()


def hlo_struct_mutation(rng: random.Random, m) -> str:
    comps = list(m.computations)
    inss = [i for c in comps for i in c.instructions]
    if not inss:
        return "no instructions"
    kind = rng.choice(("trip_count", "trip_count", "called_cycle", "called_missing",
                       "operand_missing", "duplicate_ids", "schedule_unknown", "schedule_dup",
                       "schedule_foreign", "entry_missing", "frames_cycle", "frames_range",
                       "shape", "opcode", "names", "backend_config", "dimensions",
                       "metadata"))
    if kind == "trip_count":
        whiles = [i for i in inss if i.opcode == "while"] or inss
        ins = rng.choice(whiles)
        ins.opcode = "while"
        n = rng.choice(("1000000000000", "-5", "0", "1e9", '"x"', "99999999999999999999",
                        "4000000"))
        ins.backend_config = ('{"known_trip_count":{"n":"' + n + '"}}').encode() \
            if rng.random() < 0.7 else rng.choice((b"{", b"[]", b'{"known_trip_count":1}',
                                                   b"\xff"))
        return f"trip count {n}"
    if kind == "called_cycle":
        ins = rng.choice(inss)
        ins.opcode = rng.choice(("fusion", "while", "call", "conditional"))
        own = next(c.id for c in comps if ins in c.instructions)
        del ins.called_computation_ids[:]
        ins.called_computation_ids.extend([own] * rng.choice((1, 2)))
        return f"{ins.opcode} calling its own computation"
    if kind == "called_missing":
        ins = rng.choice(inss)
        ins.called_computation_ids.append(rng.choice((-1, 10**9, 0)))
        return "a call of a missing computation"
    if kind == "operand_missing":
        ins = rng.choice(inss)
        ins.operand_ids.append(rng.choice((-1, 10**9)))
        return "an operand id that names nothing"
    if kind == "duplicate_ids":
        a, b = rng.sample(inss, 2) if len(inss) > 1 else (inss[0], inss[0])
        b.id = a.id
        if rng.random() < 0.5:
            b.name = a.name
        return "two instructions share an id"
    if kind == "schedule_unknown":
        for seq in m.schedule.sequences.values():
            seq.instruction_ids.append(rng.choice((-1, 10**9)))
        return "schedule names unknown instructions"
    if kind == "schedule_foreign":
        # a computation's schedule lists another computation's instructions (a while among
        # them may call back into it)
        seqs = list(m.schedule.sequences.items())
        for cid, seq in seqs:
            others = [i.id for c in comps if c.id != cid for i in c.instructions]
            seq.instruction_ids.extend(rng.sample(others, min(len(others), 5)))
        return "schedules list other computations' instructions"
    if kind == "schedule_dup":
        for seq in m.schedule.sequences.values():
            ids = list(seq.instruction_ids)
            seq.instruction_ids.extend(ids * rng.choice((1, 50)))
        return "schedule repeats its instructions"
    if kind == "entry_missing":
        m.entry_computation_id = rng.choice((-1, 10**9))
        return "entry computation missing"
    if kind == "frames_cycle":
        sfi = m.stack_frame_index
        for i, fr in enumerate(sfi.stack_frames):
            fr.parent_frame_id = i + 1  # itself
        return "stack frames are their own parents"
    if kind == "frames_range":
        sfi = m.stack_frame_index
        for fl in sfi.file_locations:
            fl.file_name_id = rng.choice((-1, 10**6, 0))
            fl.function_name_id = rng.choice((-1, 10**6))
        for i in inss:
            i.metadata.stack_frame_id = rng.choice((-1, 10**6, 2**31 - 1))
        return "stack frame ids out of range"
    if kind == "shape":
        for ins in rng.sample(inss, min(len(inss), 20)):
            ins.shape.element_type = rng.choice((-1, 999, 0))
            del ins.shape.dimensions[:]
            ins.shape.dimensions.extend(rng.choice(([-1], [2**62, 2**62], [0], [10**12] * 6)))
        return "shapes with absurd dimensions and types"
    if kind == "opcode":
        for ins in rng.sample(inss, min(len(inss), 20)):
            ins.opcode = rng.choice(("", "fusion", "while", "dot", "convolution",
                                     "custom-call", "all-reduce-start", "no-such-op",
                                     "<script>"))
        return "opcodes changed"
    if kind == "names":
        s = rng.choice(PROTO_STRINGS)
        for ins in rng.sample(inss, min(len(inss), 20)):
            ins.name = s + ins.name
        m.name = s + m.name
        return f"instruction names hold {_short(s)}"
    if kind == "backend_config":
        for ins in rng.sample(inss, min(len(inss), 20)):
            ins.backend_config = rng.choice((b"{", b"\xff\xfe", b"[" * 5000, b'{"a":' * 3000,
                                             b"null", b'{"cudnn_conv_backend_config":1}'))
        return "backend configs are not JSON objects"
    if kind == "dimensions":
        for ins in rng.sample(inss, min(len(inss), 20)):
            del ins.dimensions[:]
            ins.dimensions.extend([rng.choice((-1, 99, 2**40))])
            dn = ins.dot_dimension_numbers
            dn.lhs_contracting_dimensions.append(rng.choice((-1, 99)))
        return "dimension numbers out of range"
    if kind == "metadata":
        for ins in rng.sample(inss, min(len(inss), 20)):
            ins.metadata.source_line = rng.choice((-1, 2**31 - 1))
            ins.metadata.source_file = rng.choice(PROTO_STRINGS)
            ins.metadata.op_name = rng.choice(PROTO_STRINGS)
        return "op metadata holds hostile strings"
    raise AssertionError(kind)


# ---------------------------------------------------------------- a mutant

@dataclass
class Mutant:
    index: int
    seed: str
    kind: str          # trace, xplane or pair
    desc: str
    files: dict        # file name -> bytes


def make_mutant(index: int, seed_value, seeds: list[Seed]) -> Mutant:
    rng = random.Random(f"{seed_value}:{index}")
    s = seeds[index % len(seeds)]
    roll = rng.random()
    if roll < 0.04 and len(seeds) > 1:
        other = seeds[(index + 1) % len(seeds)]
        return Mutant(index, s.name, "pair", f"trace of {s.name}, xplane of {other.name}",
                      {f"{HOST}.trace.json.gz": s.trace_gz,
                       f"{HOST}.xplane.pb": other.xplane})
    if roll < 0.52:
        desc, suffix, data = trace_mutant(rng, s)
        return Mutant(index, s.name, "trace", desc,
                      {f"{HOST}{suffix}": data, f"{HOST}.xplane.pb": s.xplane})
    desc, data = xplane_mutant(rng, s)
    return Mutant(index, s.name, "xplane", desc,
                  {f"{HOST}.trace.json.gz": s.trace_gz, f"{HOST}.xplane.pb": data})


# ---------------------------------------------------------------- running a script

_MODULES: dict = {}


def module(name: str, path: Path):
    mod = _MODULES.get(name) or sys.modules.get(name)
    if mod is None or not hasattr(mod, "main"):
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    _MODULES[name] = mod
    return mod


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


@dataclass
class Run:
    script: str
    rc: int | None
    outcome: str
    seconds: float
    maxrss_mib: float
    stderr: str
    detail: str = ""


def run_forked(mod, argv: list[str], log_dir: Path, timeout: float, memory_mib: int) -> tuple:
    """Run mod.main(argv) in a forked child; (rc or None, why, seconds, maxrss MiB, stdout,
    stderr, CPU seconds: the child's user and system time with the children it waited for)."""
    out_log, err_log = log_dir / "stdout.txt", log_dir / "stderr.txt"
    sys.stdout.flush()
    sys.stderr.flush()
    t0 = time.monotonic()
    inherited = _rss_bytes(os.getpid())  # the child starts with this parent's pages resident
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = TRACEBACK_RC
        try:
            fo = os.open(out_log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            fe = os.open(err_log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fo, 1)
            os.dup2(fe, 2)
            sys.stdout = open(1, "w", encoding="utf-8", errors="backslashreplace",
                              closefd=False)
            sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace",
                              closefd=False)
            try:
                rc = mod.main(argv)
            except SystemExit as exc:
                rc = exc.code
                if isinstance(rc, str):
                    print(rc, file=sys.stderr)
                    rc = 1
            except BaseException:  # noqa: BLE001 - the very thing measured
                traceback.print_exc()
                rc = TRACEBACK_RC
            code = 0 if rc is None else rc if isinstance(rc, int) else 71
        finally:
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)
    why = ""
    limit = memory_mib << 20
    status = rusage = None
    while True:
        wpid, status, rusage = os.wait4(pid, os.WNOHANG)
        if wpid:
            break
        elapsed = time.monotonic() - t0
        if elapsed > timeout:
            why = "hang"
        elif _rss_bytes(pid) - inherited > limit:
            why = "memory"
        if why:
            os.kill(pid, signal.SIGKILL)
            _, status, rusage = os.wait4(pid, 0)
            break
        time.sleep(POLL_S if elapsed < 1 else 10 * POLL_S)
    seconds = time.monotonic() - t0
    maxrss = rusage.ru_maxrss / 1024 if rusage else 0.0
    rc = None
    if not why:
        if os.WIFSIGNALED(status):
            why = "signal"
        else:
            rc = os.WEXITSTATUS(status)
    out = out_log.read_text(errors="replace") if out_log.exists() else ""
    err = err_log.read_text(errors="replace") if err_log.exists() else ""
    cpu = rusage.ru_utime + rusage.ru_stime if rusage else seconds
    return rc, why, seconds, maxrss, out, err, cpu


def run_investigate(capture: Path, out: Path, timeout: float, no_xprof: bool) -> tuple:
    t0 = time.monotonic()
    cmd = [sys.executable, "-P", str(INVESTIGATE), str(capture), "--out", str(out)]
    if no_xprof:
        cmd.append("--no-xprof")
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout * 12,
                           errors="replace")
    except subprocess.TimeoutExpired:
        return None, "hang", time.monotonic() - t0, 0.0, "", ""
    why = "signal" if p.returncode < 0 else ""
    # each step's own output is in logs/: a traceback there is a failure too
    logs = "".join(f.read_text(errors="replace") for f in sorted((out / "logs").glob("*.txt")))
    err = p.stderr + ("\n" + logs if "Traceback (most recent call last)" in logs else "")
    return (None if why else p.returncode), why, time.monotonic() - t0, 0.0, p.stdout, err


def snapshot(folder: Path) -> dict:
    out = {}
    if folder.exists():
        for p in sorted(folder.rglob("*")):
            with contextlib.suppress(OSError):
                st = p.lstat()
                out[str(p.relative_to(folder))] = (st.st_size, st.st_mtime_ns, st.st_ino,
                                                   p.is_dir())
    return out


def digest(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        h.update(str(p.relative_to(folder)).encode("utf-8", "surrogateescape"))
        if p.is_file() and not p.is_symlink():
            h.update(p.read_bytes())
    return h.hexdigest()


def _strict_json(text: str):
    def bad(token):
        raise ValueError(f"non-standard JSON token {token}")
    return json.loads(text, parse_constant=bad)


def check_outputs(out: Path, before: dict, after: dict) -> str:
    """'' when every CSV and JSON this run changed reads back; else what did not."""
    for rel, meta in after.items():
        if meta[3] or before.get(rel) == meta:
            continue
        path = out / rel
        try:
            if rel.endswith(".csv"):
                with open(path, newline="", encoding="utf-8") as fh:
                    rows = list(csv.reader(fh))
                if rows and any(len(r) != len(rows[0]) for r in rows[1:]):
                    return f"bad_csv: {rel} has rows of another width than its header"
            elif rel.endswith(".json"):
                _strict_json(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, csv.Error) as exc:
            return f"bad_csv: {rel}: {exc}" if rel.endswith(".csv") else f"bad_json: {rel}: {exc}"
        except ValueError as exc:
            return f"bad_json: {rel}: {exc}"
    return ""


def classify(rc, why: str, err: str, before: dict, after: dict, out: Path,
             script: str = "") -> tuple[str, str]:
    if why:
        return why, ""
    if "Traceback (most recent call last)" in err or rc == TRACEBACK_RC:
        return "traceback", err.strip().splitlines()[-1][:300] if err.strip() else ""
    # hidden names are temporary, but for the steps' declared hand-offs (.handoff/<name>.json)
    temps = [r for r in after if any(part.startswith(".") for part in Path(r).parts)
             and not (Path(r).parts[0] == scratch.HANDOFF and (
                 len(Path(r).parts) == 1 or not Path(r).name.startswith(".")))]
    if temps:
        return "leftover", f"temporary files left: {temps[:3]}"
    if rc not in (0, 1, 2, 3):
        return "exit", f"exit code {rc}"
    if rc != 0 and after != before:
        # investigate.py keeps each step's log in logs/ whatever happens (documented)
        changed = sorted(r for r, _ in set(after.items()) ^ set(before.items())
                         if not (script == "investigate" and Path(r).parts[0] == "logs"))
        if changed:
            return "leftover", f"a failed run changed the scratch folder: {changed[:3]}"
    if rc == 0:
        bad = check_outputs(out, before, after)
        if bad:
            return bad.split(":", 1)[0], bad
    if rc == 1:
        lines = [ln for ln in err.strip().splitlines() if ln.strip()]
        return "refused", lines[-1][:300] if lines else "(no sentence)"
    return OK_OUTCOMES[rc], ""


def run_mutant(m: Mutant, work: Path, args) -> list[Run]:
    cap = work / f"m{m.index}" / "plugins" / "profile" / "2026_01_01_00_00_00"
    cap.mkdir(parents=True)
    for name, data in m.files.items():
        (cap / name).write_bytes(data)
    out = work / f"m{m.index}-out"
    logs = work / f"m{m.index}-logs"
    logs.mkdir()
    before_cap = digest(cap)
    runs: list[Run] = []
    todo = [(name, path) for name, path, kinds in ENTRY if m.kind in kinds]
    if args.investigate_every and m.index % args.investigate_every == 0:
        todo.append(("investigate", None))
    for name, path in todo:
        target = out if name != "investigate" else work / f"m{m.index}-inv"
        before = snapshot(target)
        if name == "investigate":
            rc, why, secs, rss, _, err = run_investigate(cap, target, args.timeout,
                                                         args.no_xprof)
        else:
            argv = [str(cap), "--out", str(target)]
            if args.no_xprof and name in ("attribute_kernels", "roofline"):
                argv.append("--no-xprof")
            rc, why, secs, rss, _, err, _ = run_forked(module(name, path), argv, logs,
                                                    args.timeout, args.memory_mib)
        after = snapshot(target)
        outcome, detail = classify(rc, why, err, before, after, target, name)
        if outcome not in FAILURES and digest(cap) != before_cap:
            outcome, detail = "touched", "the capture changed"
        runs.append(Run(name, rc, outcome, secs, rss, err[-2000:], detail))
    return runs


# ---------------------------------------------------------------- the campaign

@dataclass
class Report:
    mutants: int = 0
    runs: int = 0
    seconds: float = 0.0
    counts: dict = field(default_factory=dict)       # outcome -> runs
    by_script: dict = field(default_factory=dict)    # script -> outcome -> runs
    by_kind: dict = field(default_factory=dict)      # mutant kind -> mutants
    failures: list = field(default_factory=list)     # dicts
    max_rss_mib: float = 0.0
    slowest: tuple = (0.0, "", -1)

    def add(self, m: Mutant, runs: list[Run]) -> None:
        self.mutants += 1
        self.by_kind[m.kind] = self.by_kind.get(m.kind, 0) + 1
        for r in runs:
            self.runs += 1
            self.counts[r.outcome] = self.counts.get(r.outcome, 0) + 1
            s = self.by_script.setdefault(r.script, {})
            s[r.outcome] = s.get(r.outcome, 0) + 1
            self.max_rss_mib = max(self.max_rss_mib, r.maxrss_mib)
            if r.seconds > self.slowest[0]:
                self.slowest = (r.seconds, r.script, m.index)
            if r.outcome in FAILURES:
                self.failures.append({"mutant": m.index, "seed": m.seed, "kind": m.kind,
                                      "desc": m.desc, "script": r.script,
                                      "outcome": r.outcome, "rc": r.rc,
                                      "detail": r.detail or r.stderr[-300:]})

    @property
    def failed(self) -> int:
        return sum(self.counts.get(k, 0) for k in FAILURES)

    def as_dict(self) -> dict:
        return {"mutants": self.mutants, "runs": self.runs, "seconds": round(self.seconds, 1),
                "counts": self.counts, "by_script": self.by_script, "by_kind": self.by_kind,
                "failures": self.failures, "max_rss_mib": round(self.max_rss_mib, 1),
                "slowest": {"seconds": round(self.slowest[0], 2), "script": self.slowest[1],
                            "mutant": self.slowest[2]}}

    def render(self) -> list[str]:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(self.by_kind.items()))
        lines = [f"{self.mutants} mutants ({kinds}), "
                 f"{self.runs} runs in {self.seconds:.1f} s; largest resident set "
                 f"{self.max_rss_mib:.0f} MiB; slowest run {self.slowest[0]:.2f} s "
                 f"({self.slowest[1]}, mutant {self.slowest[2]})"]
        lines.append("outcomes: " + ", ".join(
            f"{k} {self.counts.get(k, 0)}" for k in OK_OUTCOMES + FAILURES))
        for script, c in sorted(self.by_script.items()):
            lines.append(f"  {script}: " + ", ".join(f"{k} {v}" for k, v in sorted(c.items())))
        for f in self.failures[:50]:
            lines.append(f"FAIL {f['outcome']}: mutant {f['mutant']} ({f['seed']}, {f['desc']}) "
                         f"{f['script']}: {f['detail']}")
        if len(self.failures) > 50:
            lines.append(f"... and {len(self.failures) - 50} more failures")
        return lines


@dataclass
class Options:
    timeout: float = 60.0
    memory_mib: int = 2048
    investigate_every: int = 0
    no_xprof: bool = False
    keep: Path | None = None


def campaign(n: int, seed_value=0, seeds: list[Seed] | None = None, work: Path | None = None,
             opts: Options | None = None, start: int = 0, progress=None) -> Report:
    """Make mutants start .. start+n-1 and run the scripts on each."""
    opts = opts or Options()
    for name, path, _ in ENTRY:
        module(name, path)
    report = Report()
    t0 = time.monotonic()
    with contextlib.ExitStack() as stack:
        if work is None:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fuzz-")))
        if seeds is None:
            seeds = default_seeds(work)
        for i in range(start, start + n):
            m = make_mutant(i, seed_value, seeds)
            mwork = work / f"w{i}"
            mwork.mkdir()
            runs = run_mutant(m, mwork, opts)
            report.add(m, runs)
            failed = any(r.outcome in FAILURES for r in runs)
            if failed and opts.keep:
                keep = opts.keep / f"mutant-{i}"
                shutil.rmtree(keep, ignore_errors=True)
                shutil.copytree(mwork, keep, symlinks=True)
            shutil.rmtree(mwork, ignore_errors=True)
            if progress and (i - start + 1) % progress == 0:
                print(f"fuzz_inputs: {i - start + 1} of {n} mutants, "
                      f"{time.monotonic() - t0:.0f} s, failures {report.failed}",
                      file=sys.stderr, flush=True)
    report.seconds = time.monotonic() - t0
    return report


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[1:]))
    ap.add_argument("--mutants", type=int, default=200)
    ap.add_argument("--seed", default="0")
    ap.add_argument("--start", type=int, default=0, help="the first mutant's number")
    ap.add_argument("--capture", type=Path, action="append",
                    help="a run folder to mutate (repeatable; default: the generated and the "
                         "shared gemm capture)")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per run (a hang)")
    ap.add_argument("--memory-mib", type=int, default=2048,
                    help="resident set per run above which it is a failure")
    ap.add_argument("--investigate-every", type=int, default=20, metavar="K",
                    help="run investigate.py on every K-th mutant (0: never)")
    ap.add_argument("--no-xprof", action="store_true",
                    help="pass --no-xprof to attribute_kernels.py and roofline.py")
    ap.add_argument("--keep", type=Path, help="copy each failing mutant and its logs here")
    ap.add_argument("--json", type=Path, help="write the report as JSON here")
    ap.add_argument("--progress", type=int, default=100, help="a progress line every N mutants")
    args = ap.parse_args(argv)
    if args.mutants < 1:
        ap.error("--mutants must be at least 1")
    seeds = [load_seed(c, c.name) for c in args.capture] if args.capture else None
    opts = Options(args.timeout, args.memory_mib, args.investigate_every, args.no_xprof,
                   args.keep)
    report = campaign(args.mutants, args.seed, seeds, None, opts, args.start, args.progress)
    print("\n".join(report.render()))
    if args.json:
        args.json.write_text(json.dumps(report.as_dict(), indent=1) + "\n")
    return 1 if report.failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
