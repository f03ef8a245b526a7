"""trace_reader on small traces written inline, and on bad input."""

from __future__ import annotations

import gzip
import json

import pytest

from tracekit import trace_reader


def _doc(events):
    return {"displayTimeUnit": "ns", "metadata": {"highres-ticks": True},
            "traceEvents": events + [{}]}


EVENTS = [
    {"ph": "M", "pid": 9, "name": "process_name", "args": {"name": "/device:GPU:1"}},
    {"ph": "M", "pid": 3, "name": "process_name", "args": {"name": "/host:CPU"}},
    {"ph": "M", "pid": 9, "tid": 16, "name": "thread_name", "args": {"name": "Stream #16(Kernel)"}},
    {"ph": "X", "pid": 9, "tid": 16, "ts": 45317.129999999997, "dur": 30.870000000000001,
     "name": "fusion_1", "args": {"correlation_id": "243"}},
    {"ph": "X", "pid": 3, "tid": 1, "ts": 1.000001, "dur": 0.5, "name": "launch"},
    {"ph": "i", "pid": 3, "tid": 1, "ts": 2, "name": "instant"},
]


def _write(tmp_path, obj, name="h.trace.json.gz", raw=None):
    path = tmp_path / name
    data = raw if raw is not None else json.dumps(obj).encode()
    path.write_bytes(gzip.compress(data) if name.endswith(".gz") and raw is None else data)
    return path


@pytest.mark.parametrize("name", ["h.trace.json.gz", "h.trace.json"])
def test_processes_by_name_and_integer_times(tmp_path, name):
    t = trace_reader.load_trace(_write(tmp_path, _doc(EVENTS), name))
    assert t.gpu_pids() == {1: 9}
    assert t.host_pids() == [3]
    assert t.threads == {(9, 16): "Stream #16(Kernel)"}
    assert [e["name"] for e in t.events] == ["fusion_1", "launch"]
    assert t.phase_counts == {"M": 3, "X": 2, "i": 1}
    assert t.entry_count == 7
    k = t.events[0]
    assert (trace_reader.ps(k["ts"]), trace_reader.ps(k["dur"])) == (45_317_130_000, 30_870_000)
    assert trace_reader.ps(t.events[1]["ts"]) == 1_000_001
    assert t.display_time_unit == "ns" and t.metadata == {"highres-ticks": True}


def test_ps_is_exact_for_long_captures():
    # a picosecond-resolution time 900 s into a capture survives the trip through a float
    for value_ps in (900_000_000_000_001, 123_456_789_012_345, 7):
        assert trace_reader.ps(value_ps / 1_000_000) == value_ps


@pytest.mark.parametrize("name, raw, words", [
    ("h.trace.json.gz", b"", "is empty"),
    ("h.trace.json.gz", b"plain text", "not gzip"),
    ("h.trace.json.gz", gzip.compress(b'{"traceEvents": [' * 50)[:30], "not a complete gzip"),
    ("h.trace.json", b'{"traceEvents": [{"ph": "X"', "not valid JSON"),
    ("h.trace.json", b"[1, 2]", "JSON but list"),
    ("h.trace.json", b'{"otherTool": 1}', "without a traceEvents list"),
    ("h.trace.json", b"   \n", "holds no data"),
    ("h.trace.json", b"\xff\xfe\x00", "not UTF-8"),
    ("h.trace.json", b'{"traceEvents": [{"ph": "X", "pid": 1, "ts": 0, "dur": 1}]}',
     "no process_name"),
])
def test_bad_input_is_one_sentence(tmp_path, name, raw, words):
    path = tmp_path / name
    path.write_bytes(raw)
    with pytest.raises(trace_reader.TraceError) as err:
        trace_reader.load_trace(path)
    assert words in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("span_us, tail_us, refused", [
    (45_316, 59_000_000, False),  # a long last kernel in a short capture: its minute allowed
    (45_316, 61_000_000, True),   # past the minute and the capture's own length: refused
    (90_000_000, 89_000_000, False),  # within a long capture's own length
    (90_000_000, 91_000_000, True)])
def test_an_event_that_outlasts_the_capture_is_refused(tmp_path, span_us, tail_us, refused):
    """trace_rules.runs_past_capture: an event may end after every event's start by at most the
    capture's own length, or a minute where the capture is shorter."""
    events = json.loads(json.dumps(EVENTS))
    events[4]["ts"] = 45317.13 - span_us  # the host event: the capture's first start
    events[3]["dur"] = tail_us  # the kernel, the last start
    path = _write(tmp_path, _doc(events))
    if not refused:
        assert len(trace_reader.load_trace(path).events) == 2
        return
    with pytest.raises(trace_reader.TraceError, match=r"traceEvents entry 3, 'fusion_1'\) "
                       r"lasting [\d,]+ us, to [\d,]+ us after the last event starts, while all"
                       r" start within [\d,]+ us: it outlasts the profile"):
        trace_reader.load_trace(path)


@pytest.mark.parametrize("limit, counted", [(5, "6"), (6, "7")])
def test_a_trace_of_more_events_than_the_tools_take_is_refused(tmp_path, monkeypatch, limit,
                                                               counted):
    """More than MAX_TRACE_EVENTS: refused before parsing where the text's "ph" keys say so
    (6 here), else once parsed (7 entries, one without "ph"), saying what to do."""
    monkeypatch.setattr(trace_reader, "MAX_TRACE_EVENTS", limit)
    with pytest.raises(trace_reader.TraceError, match=rf"holds {counted} events, more than the "
                       rf"{limit} these tools take .*: profile fewer steps"):
        trace_reader.load_trace(_write(tmp_path, _doc(EVENTS)))
