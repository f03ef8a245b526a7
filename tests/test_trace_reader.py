"""trace_reader on small traces written inline, and on bad input."""

from __future__ import annotations

import gzip
import json
import os
import re

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
    ("h.trace.json.gz", gzip.compress(b'{"traceEvents": [' * 50, mtime=0)[:30],
     "not a complete gzip"),
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
    """More than MAX_TRACE_EVENTS: refused once the piece that takes the events past it is
    parsed, with the count of its "ph" keys where they pass it (6 here), else of its entries
    (7, one without "ph"), saying what to do."""
    monkeypatch.setattr(trace_reader, "MAX_TRACE_EVENTS", limit)
    with pytest.raises(trace_reader.TraceError, match=rf"holds {counted} events, more than the "
                       rf"{limit} these tools take .*: profile fewer steps"):
        trace_reader.load_trace(_write(tmp_path, _doc(EVENTS)))


def _fields(t):
    return (t.metadata, t.display_time_unit, t.processes, t.threads, t.events, t.phase_counts,
            t.entry_count, t.notes)


def _whole(monkeypatch, path):
    """load_trace with the events parsed from the whole text (the fallback path)."""
    with monkeypatch.context() as m:
        m.setattr(trace_reader, "_parse_in_pieces", lambda p, digest=None: None)
        return trace_reader.load_trace(path)


@pytest.mark.parametrize("separators", [(",", ":"), (", ", ": ")])
def test_events_parsed_in_pieces_are_the_whole_texts(tmp_path, monkeypatch, separators):
    """Cut into pieces of a few events (the exporter's compact text, and json.dump's), the trace
    reads the same, strings that hold the cut's own bytes and lone surrogates included: a cut
    inside a string leaves its piece unparseable, and the text is then parsed whole."""
    events = json.loads(json.dumps(EVENTS))
    for i in range(40):
        events.append({"ph": "X", "pid": 3, "tid": 1, "ts": 3 + i, "dur": 0.5,
                       "name": ["op", 'a},{"ph":"X"', "b}, {c", "\ud800"][i % 4] + str(i),
                       "args": {"correlation_id": str(i)}})
    text = json.dumps(_doc(events), separators=separators)
    path = _write(tmp_path, None, raw=gzip.compress(text.encode()))
    whole = _whole(monkeypatch, path)
    monkeypatch.setattr(trace_reader, "READ_CHUNK", 50)  # many pieces of a small file
    for piece in (1, 64, 700, 1 << 30):
        monkeypatch.setattr(trace_reader, "PARSE_PIECE", piece)
        assert _fields(trace_reader.load_trace(path)) == _fields(whole)
    assert len(whole.events) == 42 and any("surrogate" in n for n in whole.notes)
    # without strings that hold a cut's bytes, the pieces are what is read (no second reading)
    plain = [e for e in events if "}" not in e.get("name", "")]
    path = _write(tmp_path, None, "p.trace.json",
                  raw=json.dumps(_doc(plain), separators=separators).encode())
    doc, _, _ = trace_reader._parse_in_pieces(path)
    assert doc == json.loads(path.read_text())


@pytest.mark.parametrize("tail", ["]}", "],\"late\":1}", "]} x", "]}\n\n"])
def test_a_text_of_another_shape_is_read_whole(tmp_path, monkeypatch, tail):
    """Keys after the events, or anything after the document, are not the exporter's shape:
    the whole text is parsed, and says what is wrong."""
    text = json.dumps(_doc(EVENTS), separators=(",", ":"))[:-2] + tail
    path = _write(tmp_path, None, "h.trace.json", raw=text.encode())
    monkeypatch.setattr(trace_reader, "PARSE_PIECE", 64)
    monkeypatch.setattr(trace_reader, "READ_CHUNK", 50)
    assert (trace_reader._parse_in_pieces(path) is None) == (tail.strip() != "]}")
    if tail == "]} x":
        with pytest.raises(trace_reader.TraceError, match="not valid JSON"):
            trace_reader.load_trace(path)
    else:
        assert _fields(trace_reader.load_trace(path)) == _fields(_whole(monkeypatch, path))


def test_the_event_cap_counts_every_piece_after_parsing_past_it(tmp_path, monkeypatch):
    """Over the cap, the pieces are counted to the end (the message gives the whole count) and
    none is parsed after the piece that took the events past the cap."""
    events = EVENTS + [dict(EVENTS[4], ts=3 + i) for i in range(30)]
    path = _write(tmp_path, None,
                  raw=gzip.compress(json.dumps(_doc(events), separators=(",", ":")).encode()))
    monkeypatch.setattr(trace_reader, "PARSE_PIECE", 64)
    monkeypatch.setattr(trace_reader, "READ_CHUNK", 50)
    monkeypatch.setattr(trace_reader, "MAX_TRACE_EVENTS", 10)
    parsed = []
    loads = json.loads
    monkeypatch.setattr(trace_reader.json, "loads",
                        lambda s, **k: parsed.append(loads(s, **k)) or parsed[-1])
    with pytest.raises(trace_reader.TraceError, match="holds 36 events, more than the 10"):
        trace_reader.load_trace(path)
    lists = [p for p in parsed if isinstance(p, list)]
    assert sum(map(len, lists[:-1])) <= 10 < sum(map(len, lists))


@pytest.mark.usefixtures("shared")
def test_shared_traces_read_the_same_in_pieces(monkeypatch):
    from conftest import SHARED_CAPTURES
    for path in sorted(SHARED_CAPTURES.rglob("*.trace.json.gz")):
        whole = _whole(monkeypatch, path)
        assert trace_reader._parse_in_pieces(path) is not None, path
        assert _fields(trace_reader.load_trace(path)) == _fields(whole), path
        # the second half read (and digested) by a child, the half cut among the events
        for digest in (None, _kept):
            assert _in_two(monkeypatch, path, digest=digest) == _fields(whole), path


def _kept(path, events, processes, threads, release):
    """A digest that keeps the events and the names it was given."""
    return events, processes, threads


def _read_or_refuse(path, digest=None):
    try:
        t = trace_reader.load_trace(path, digest)
    except trace_reader.TraceError as exc:
        return str(exc)
    if digest is not None:  # each part's events, in file order, with the whole trace's names
        assert t.events == [] and all(d[1:] == (t.processes, t.threads) for d in t.digests)
        t.events = [e for d in t.digests for e in d[0]]
    return _fields(t)


def _in_two(monkeypatch, path, split=True, digest=None):
    """load_trace's answer (fields, or its refusal) with the text's second half read by a forked
    child (split) or without one; with a digest, the events each process digested."""
    with monkeypatch.context() as m:
        m.setattr(trace_reader, "SPLIT_MIN", 0 if split else 1 << 62)
        m.setattr(trace_reader, "READ_CHUNK", 50)
        m.setattr(trace_reader, "PARSE_PIECE", 64)
        return _read_or_refuse(path, digest)


def _long_trace(n=120):
    events = json.loads(json.dumps(EVENTS))
    for i in range(n):
        events.append({"ph": "X", "pid": [3, 9][i % 2], "tid": [1, 16][i % 2], "ts": 3 + i,
                       "dur": 0.5, "name": ["op", "x" * 5000, "\ud800"][i % 3] + str(i),
                       "args": {"correlation_id": str(i), "n": i}})
    events.append({"ph": "M", "pid": 4, "name": "process_name", "args": {"name": "/host:CPU"}})
    return events


@pytest.mark.parametrize("name", ["h.trace.json.gz", "h.trace.json"])
def test_a_trace_read_by_two_processes_reads_as_by_one(tmp_path, monkeypatch, name):
    """The text's second half parsed and checked by a forked child and handed back: the same
    Trace as one process reads (names cut, surrogates replaced and numbers made text in both
    halves, metadata of both)."""
    text = json.dumps(_doc(_long_trace()), separators=(",", ":")).encode()
    path = _write(tmp_path, None, name,
                  raw=gzip.compress(text) if name.endswith(".gz") else text)
    split = _in_two(monkeypatch, path)
    assert split == _in_two(monkeypatch, path, split=False) == _in_two(monkeypatch, path,
                                                                       digest=_kept)
    assert len(split[4]) == 122 and split[2][4] == "/host:CPU"


@pytest.mark.parametrize("bad", ["not an object", "bad ph", "bad complete", "named twice",
                                 "no name", "cut gzip", "over the cap"])
def test_what_the_second_half_refuses_is_refused_as_by_one_process(tmp_path, monkeypatch, bad):
    """A fault in the text's second half, found by the child, is the same sentence, with the
    same entry number, as one process's reading says; a process named in the first half and
    again, otherwise, in the second is refused across the halves."""
    events = _long_trace()
    late = {"not an object": 7, "bad ph": {"ph": 5, "pid": 3},
            "bad complete": dict(events[4], ts="3"),
            "named twice": {"ph": "M", "pid": 3, "name": "process_name",
                            "args": {"name": "/host:CPU:2"}},
            "no name": {"ph": "X", "pid": 3, "tid": 1, "ts": 3, "dur": 1}}.get(bad)
    if late is not None:
        events.insert(110, late)
    raw = gzip.compress(json.dumps(_doc(events), separators=(",", ":")).encode())
    if bad == "cut gzip":
        raw = raw[:-40]
    if bad == "over the cap":
        monkeypatch.setattr(trace_reader, "MAX_TRACE_EVENTS", 100)
    path = _write(tmp_path, None, raw=raw)
    split, one = _in_two(monkeypatch, path), _in_two(monkeypatch, path, split=False)
    digested = _in_two(monkeypatch, path, digest=_kept)
    if bad == "over the cap":  # one process counts keys past the cap, two count entries: {}
        split, one, digested = (re.sub(r"holds 12[78] events", "holds N events", x)
                                for x in (split, one, digested))
    assert isinstance(split, str) and split == one == digested
    assert (bad == "cut gzip") == ("not a complete gzip" in split)


def test_a_child_that_ends_without_its_half_is_said(tmp_path, monkeypatch):
    """The child reading the second half killed before it hands it back: one sentence."""
    path = _write(tmp_path, _doc(_long_trace()))
    check = trace_reader._check

    def dies_in_the_child(path, entries, offset, surrogates):
        if offset:
            os._exit(9)
        return check(path, entries, offset, surrogates)
    monkeypatch.setattr(trace_reader, "_check", dies_in_the_child)
    said = _in_two(monkeypatch, path)
    assert "ended without handing it back" in said
