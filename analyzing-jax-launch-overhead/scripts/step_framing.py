"""How step 1 finds the steps of a trace (standard library only).

In this order: StepTraceAnnotation events (`step_num`), else host annotations numbered by
name (`step 3`); the repeating cycle of the host's program
executions, a step starting where a Python-traced call runs one whole cycle or after the cycle's
longest host pause; each call of the Python tracer's outermost repeated call; else the whole
capture as one window (`find_steps`). Then a step framed from executions starts at its call's
argument copies (`program_call_starts`), each GPU event is given its step (`assign_steps`), and
a first or last step cut by the capture is partial (`mark_partial`). Functions of the host and
GPU events; they never print or write.
"""

from __future__ import annotations

import bisect
import operator
import re
import statistics
from collections import Counter

from tracekit import trace_rules as rules
from tracekit.records import ProgramRun, Step

# Steps from the repeating cycle of program executions (no step annotation). A cycle length p is
# accepted when the executed programs' names repeat with period p for at least this share of the
# sequence: 90% tolerates a few executions outside the cycle (a warm-up call, a metrics program
# every tenth step) without accepting a sequence that does not repeat.
PERIOD_MATCH_SHARE = 0.9
# At least this many whole cycles: one cycle cannot be told from a sequence that never repeats.
PERIOD_MIN_CYCLES = 2
# The longest cycle looked for, in executions: a step of more program executions than this is
# taken as one window (the search is linear per candidate length, and no real step was seen with
# more than a few hundred dispatches).
PERIOD_MAX = 4096
# The cycle search compares the sequence with itself once per candidate length, in C: at most
# this many element comparisons in all (about a second), so a long sequence that never repeats
# costs bounded time; lengths beyond it are not tried (a cycle longer than this many
# comparisons / executions is not found, and the capture is one window).
CYCLE_SEARCH_WORK = 50_000_000
# The best-scoring lengths (shifted comparison) tried again with their most common run of
# programs, where an inserted execution shifts the rest of the sequence out of phase; a length
# that matches under this share of the shifted sequence is not a cycle with a few insertions.
CYCLE_CANDIDATES = 20
CYCLE_CANDIDATE_SHARE = 0.3
# Where a cycle starts: at the execution after the longest host pause of the cycle (the step's
# sync, the input pipeline), when the median pause before it is at least this many times the
# median pause before every other execution of the cycle; otherwise the pauses do not mark a
# boundary and the capture's first execution starts the first step (said in the notes).
PHASE_PAUSE_RATIO = 1.5


MODULE_SUFFIX = ":XLA GPU module"
# Where no event carries a step_num: host annotations named with a step word and a number
# (`TraceAnnotation(f"step {i}")`, `train_step_12`, `iteration=3`), one name stem numbering at
# least NUMBERED_MIN_STEPS steps in start order, mark the steps as StepTraceAnnotation's would.
NUMBERED_STEP_RE = re.compile(r"^(?!\$)(.*?(?:step|iter|iteration|batch)\w*?)[\s_#:=-]*(\d+)$",
                              re.IGNORECASE)
NUMBERED_MIN_STEPS = 3


def host_scan(host_threads, marked: list | None = None) -> dict:
    """One pass over the host events for what step framing needs: per thread its
    `<module>:XLA GPU module` events and `GpuExecutable::ExecuteThunks` events (start, end,
    module), whether the Python tracer was on, per thread its Python-traced calls (the
    profiler's own left out: CallTree's), and the events that carry a step_num (annotated
    steps: `marked` where the caller found them, gpu_events.Collected.marked). Names repeat,
    so each distinct name is classified once."""
    # 0 nothing, 1 module event, 2 ExecuteThunks, 3 a traced Python call, 4 the profiler's own,
    # 5 a name with a step word and a number (NUMBERED_STEP_RE)
    kind: dict[str, int] = {}
    numbered: list = []
    per: dict = {}
    calls_of: dict = {}
    marks: list = [] if marked is None else marked  # the events carrying a step_num
    traced = False
    for key, events in host_threads.items():
        mods, thunks, calls = [], [], []
        for h in events:
            if marked is None and "step_num" in h["args"]:
                marks.append(h)
            name = h["name"]
            k = kind.get(name)
            if k is None:
                k = kind[name] = (1 if name.endswith(MODULE_SUFFIX) else
                                  2 if name == "GpuExecutable::ExecuteThunks" else
                                  (5 if NUMBERED_STEP_RE.match(name) else 0)
                                  if not name.startswith(rules.PYTHON_TRACER_PREFIX) else
                                  4 if rules.PROFILER_CALL_RE.match(name) else 3)
            if not k:
                continue
            if k == 5:
                numbered.append(h)
            elif k == 3:
                calls.append(h)
            elif k == 1:
                mods.append((h["start"], h["start"] + h["dur"], name[:-len(MODULE_SUFFIX)]))
            elif k == 2:
                m = h["args"].get("module_name")
                if m:
                    thunks.append((h["start"], h["start"] + h["dur"], str(m)))
            else:
                traced = True
        if mods or thunks:
            per[key] = (mods, thunks)
        if calls:
            calls_of[key] = calls
    stem = None
    if not marks and numbered:
        stem, found = numbered_marks(numbered)
        marks.extend(found)
    return {"threads": per, "tracer": traced or bool(calls_of), "calls": calls_of,
            "marks": marks, "numbered": stem}


def numbered_marks(events: list) -> tuple[str | None, list]:
    """Host annotations whose names number the steps (NUMBERED_STEP_RE), where no event carries
    a step_num: the stem numbering the most steps, if it numbers at least NUMBERED_MIN_STEPS in
    start order (a number never smaller than the one before), each event given its number as
    its step_num (a new args dict: an args dict may be shared); else (None, [])."""
    by_stem: dict = {}
    for h in events:
        m = NUMBERED_STEP_RE.match(h["name"])
        by_stem.setdefault(m.group(1).strip().lower(), []).append((h["start"], int(m.group(2)), h))
    best, found = None, []
    for stem, hs in sorted(by_stem.items()):
        hs.sort(key=operator.itemgetter(0))
        numbers = [n for _, n, _ in hs]
        if len(set(numbers)) < max(NUMBERED_MIN_STEPS, len(set(n for _, n, _ in found))) or \
                any(b < a for a, b in zip(numbers, numbers[1:], strict=False)):
            continue
        best, found = stem, hs
    for _, n, h in found:
        h["args"] = {**h["args"], "step_num": n}
    return best, [h for _, _, h in found]


def program_executions(host_threads, scan: dict | None = None) -> list:
    """Executions of programs on the host, in start order: `<module>:XLA GPU module` events (or,
    on a thread without them, `GpuExecutable::ExecuteThunks` with its module_name), one per GPU
    thread; consecutive executions of one module on distinct threads are one dispatch (a
    multi-GPU program runs on one execution thread per GPU, at once or, on its first call, one
    GPU after another)."""
    evs = []
    for key, (mods, thunks) in (scan or host_scan(host_threads))["threads"].items():
        evs.extend((s, e, m, key) for s, e, m in (mods or thunks))
    evs.sort(key=lambda x: (x[0], x[1]))
    out: list[ProgramRun] = []
    for s, e, m, key in evs:
        cur = out[-1] if out else None
        if cur is not None and cur.module == m and key not in cur.threads:
            cur.threads.add(key)
            cur.end = max(cur.end, e)
            continue
        out.append(ProgramRun(m, s, e, key))
    return out


def find_cycle(names: list, complete: bool = False) -> tuple[int, list] | None:
    """The repeating cycle of a sequence of executed programs: the shortest p and the p-gram
    (one rotation of the cycle) whose whole, non-overlapping occurrences cover at least
    PERIOD_MATCH_SHARE of the sequence, PERIOD_MIN_CYCLES of them at least; None when nothing
    repeats. Every length p is scored by comparing the sequence with itself shifted by p (in C,
    on program ids: linear per p); the exact cycle wins at once; otherwise the
    CYCLE_CANDIDATES best-scoring lengths are tried with their most common p-gram (a rolling
    hash), so an execution inserted into one cycle does not shift every later one out of
    phase. The shortest length that passes wins. `complete`: every execution must lie in a
    cycle (a cut one at either end included), no execution outside. The work is bounded:
    lengths past CYCLE_SEARCH_WORK / len(names) are not tried."""
    n = len(names)
    ids: dict[str, int] = {}
    seq = [ids.setdefault(m, len(ids) + 1) for m in names]
    top = min(PERIOD_MAX, n // PERIOD_MIN_CYCLES, max(1, CYCLE_SEARCH_WORK // max(n, 1)))
    mod, base = (1 << 61) - 1, 1_000_003
    need = n if complete else PERIOD_MATCH_SHARE * n

    def covers(pattern: list) -> bool:
        covered, whole = walk_coverage(names, pattern)
        return covered >= need and whole >= PERIOD_MIN_CYCLES

    def common_run(p: int) -> tuple[int, list] | None:
        """Length p with its most common p-gram (rolling hash), if it covers the sequence."""
        h, power = 0, pow(base, p, mod)
        counts: dict[int, int] = {}
        first: dict[int, int] = {}
        for i, v in enumerate(seq):
            h = (h * base + v) % mod
            if i >= p:
                h = (h - seq[i - p] * power) % mod
            if i >= p - 1:
                counts[h] = counts.get(h, 0) + 1
                first.setdefault(h, i - p + 1)
        best = max(counts, key=lambda k: (counts[k], -first[k]))
        if counts[best] * p < PERIOD_MATCH_SHARE * n - p or counts[best] < PERIOD_MIN_CYCLES:
            return None
        pattern = names[first[best]:first[best] + p]
        return (p, pattern) if covers(pattern) else None

    scores, found = [], None
    for p in range(1, top + 1):
        same = n - p - sum(map(operator.ne, seq[:n - p], seq[p:]))
        share = same / (n - p) if n > p else 0.0
        if share >= PERIOD_MATCH_SHARE:
            # the sequence starts in the cycle, or outside it (its most common run)
            found = (p, names[:p]) if covers(names[:p]) else common_run(p)
            if found:
                break
        scores.append((share, p))
    # shorter lengths whose shifted comparison an inserted execution spoilt (a metrics program
    # every tenth step shifts the rest out of phase): their most common run
    for p in sorted(p for share, p in sorted(scores, reverse=True)[:CYCLE_CANDIDATES]
                    if share >= CYCLE_CANDIDATE_SHARE):
        if found and p >= found[0]:
            break
        shorter = common_run(p)
        if shorter:
            return shorter
    return found


def occurrences(names: list, pattern: list) -> list:
    """Where the whole occurrences of `pattern` start, taken left to right, not overlapping."""
    p, i, out = len(pattern), 0, []
    while i < len(names):
        if names[i:i + p] == pattern:
            out.append(i)
            i += p
        else:
            i += 1
    return out


def walk_coverage(names: list, pattern: list) -> tuple[int, int]:
    """Executions inside whole occurrences of `pattern` (taken left to right, not overlapping),
    plus a cycle the capture cut at either end (the executions before the first occurrence
    when they end the pattern, those after the last when they begin it), and how many whole
    occurrences."""
    p, at = len(pattern), occurrences(names, pattern)
    covered, whole = p * len(at), len(at)
    if whole:
        head, tail = names[:at[0]], names[at[-1] + p:]
        if head and len(head) < p and head == pattern[p - len(head):]:
            covered += len(head)
        if tail and len(tail) < p and tail == pattern[:len(tail)]:
            covered += len(tail)
    return covered, whole


def cycle_phase(execs: list, pattern: list) -> tuple[list, str]:
    """The rotation of the cycle that starts a step: the one after the longest host pause (the
    median over cycles of the time from the previous execution's end to this one's start), when
    it stands out by PHASE_PAUSE_RATIO; else the cycle as the capture first runs it."""
    p = len(pattern)
    if p == 1:
        return pattern, "one program per step"
    pos = [None] * len(execs)  # each execution's position in the cycle (None: outside)
    for i in occurrences([x.module for x in execs], pattern):
        pos[i:i + p] = range(p)
    pauses: dict[int, list] = {}
    for i in range(1, len(execs)):
        if pos[i] is not None:
            pauses.setdefault(pos[i], []).append(max(0, execs[i].start - execs[i - 1].end))
    med = {r: statistics.median(v) for r, v in pauses.items() if v}
    if len(med) < p:
        return pattern, "the capture's first execution of the cycle starts a step"
    best = max(sorted(med), key=lambda r: med[r])
    rest = statistics.median([v for r, v in med.items() if r != best])
    if med[best] >= PHASE_PAUSE_RATIO * max(rest, 1):
        return pattern[best:] + pattern[:best], (
            f"a step starts after the longest host pause of the cycle (median "
            f"{med[best] / 1e6:,.1f} us before {pattern[best]}, against {rest / 1e6:,.1f} us "
            "before the others)")
    return pattern, ("no host pause marks the cycle's start, so the capture's first execution "
                     "of the cycle starts a step")


class CallTree:
    """The Python-traced calls of each host thread as a nesting (each call's enclosing call),
    built once, so that the calls enclosing a time are found by one bisection and a walk up."""

    def __init__(self, host_threads, scan: dict | None = None):
        """`scan`: host_scan's of the same threads, which holds each thread's calls."""
        self.threads = []  # per thread: (starts, calls, parent index, nesting depth)
        self.keys = []     # ... and each one's key in the thread map
        for key, calls in (scan or host_scan(host_threads))["calls"].items():
            calls = sorted(calls, key=lambda h: (h["start"], -h["dur"]))
            parent, depth, stack = [], [], []
            for i, h in enumerate(calls):
                while stack and calls[stack[-1]]["start"] + calls[stack[-1]]["dur"] <= h["start"]:
                    stack.pop()
                parent.append(stack[-1] if stack else -1)
                depth.append(len(stack))
                stack.append(i)
            self.threads.append(([h["start"] for h in calls], calls, parent, depth))
            self.keys.append(key)

    @classmethod
    def of(cls, host_threads) -> CallTree | None:
        """A tree given one, else one built from a thread map (None for none)."""
        if isinstance(host_threads, cls) or host_threads is None:
            return host_threads
        return cls(host_threads)

    def inside(self, t0: int, t1: int) -> list:
        """The outermost traced calls, on any thread, that start at t0 or later and end by t1
        (the host's own work in that window: a call that spans past it, a loop's body around
        the dispatch, is not)."""
        out = []
        for starts, calls, parent, _ in self.threads:
            i = bisect.bisect_left(starts, t0)
            while i < len(calls) and calls[i]["start"] < t1:
                h, p = calls[i], parent[i]
                outer = p < 0 or calls[p]["start"] < t0 or calls[p]["start"] + calls[p]["dur"] > t1
                if h["start"] + h["dur"] <= t1 and outer:
                    out.append(h)
                i += 1
        return out

    def innermost_enclosing(self, t0: int, t1: int) -> dict | None:
        """The shortest traced call, on any thread, that starts by t0 and ends at t1 or later."""
        best = None
        for starts, calls, parent, _ in self.threads:
            i = bisect.bisect_right(starts, t0) - 1
            while i >= 0 and calls[i]["start"] + calls[i]["dur"] < t1:
                i = parent[i]  # the calls enclosing t0 are this call's ancestors
            if i >= 0 and (best is None or calls[i]["dur"] < best["dur"]):
                best = calls[i]
        return best


def calls_holding(tree: CallTree, starts: list):
    """Per thread, each Python-traced call name with its calls that hold executions: (name,
    [(duration, lo, hi)]), the executions starting inside a call being starts[lo:hi]."""
    for _, calls, _, _ in tree.threads:
        per: dict[str, list] = {}
        for h in calls:
            lo = bisect.bisect_left(starts, h["start"])
            hi = bisect.bisect_left(starts, h["start"] + h["dur"], lo)
            if hi > lo:
                per.setdefault(h["name"], []).append((h["dur"], lo, hi))
        yield from per.items()


def python_phase(tree, execs: list, pattern: list) -> tuple[list, str] | None:
    """The rotation of the cycle that a Python-traced call runs whole: a traced call (one name,
    at least PERIOD_MIN_CYCLES calls) inside each of which exactly one cycle's executions begin,
    in one rotation of the cycle; the innermost such call (the loop body a person calls a step).
    None without the tracer or without such a call."""
    p = len(pattern)
    tree = CallTree.of(tree)
    if p < 2 or not tree:
        return None
    starts = [x.start for x in execs]
    names = [x.module for x in execs]
    rotations = {tuple(pattern[r:] + pattern[:r]) for r in range(p)}
    span = min((execs[i + p - 1].start - execs[i].start for i in range(len(execs) - p + 1)),
               default=0)
    best = None
    for name, held in calls_holding(tree, starts):
        calls = [(d, tuple(names[lo:hi])) for d, lo, hi in held
                 if d >= span and hi - lo == p and tuple(names[lo:hi]) in rotations]
        if len(calls) < PERIOD_MIN_CYCLES:
            continue
        rot = max(set(c[1] for c in calls), key=[c[1] for c in calls].count)
        rank = (statistics.median(c[0] for c in calls), name)
        if best is None or rank < best[0]:
            best = (rank, name, rot, len(calls))
    if best is None:
        return None
    _, name, rot, n = best
    return list(rot), (f"a step starts where {name} starts: each of its {n} calls runs one "
                       "whole cycle (the Python tracer's call, the loop body)")


def cycle_steps(execs: list, trace_end: int, notes: list,
                host_threads=None) -> tuple[list, str] | None:
    """Steps from the repeating cycle of executed programs, or None when nothing repeats."""
    names = [x.module for x in execs]
    found = step_cycle(execs, names, host_threads)
    if found is None:
        return None
    cycle, why = found
    p = len(cycle)
    if p == 1:
        source = f"executions of {cycle[0]}"
        label = f"program:{cycle[0]}"
    else:
        counts = {m: cycle.count(m) for m in dict.fromkeys(cycle)}
        source = (f"the repeating cycle of {p} program executions ("
                  + ", ".join(f"{m} x{c}" if c > 1 else m for m, c in counts.items())
                  + ")")
        label = f"cycle of {p} executions"
    groups, extra = cycle_groups(names, cycle)
    steps = []
    for k, idx in enumerate(groups):
        group = [execs[j] for j in idx]
        nxt = groups[k + 1][0] if k + 1 < len(groups) else None
        end = execs[nxt].start if nxt is not None else trace_end
        steps.append(Step(k, group[0].start, end, label, launched=max(x.end for x in group),
                               executions=group, extra=extra[k],
                               partial=[names[j] for j in idx[:p]] != cycle))
    outside = sum(len(g) if st.partial else st.extra for g, st in zip(groups, steps, strict=True))
    shared = " (the trace has no program ids, so programs sharing a module name count together)"
    notes.append(f"steps: {source}; {why}; {len(execs)} executions, {outside} outside the "
                 f"whole cycles{shared}")
    return steps, source + shared


def step_cycle(execs: list, names: list, host_threads=None) -> tuple[list, str] | None:
    """The cycle of executions that is a step, in the rotation that starts a step, and why;
    None when nothing repeats (`host_threads`: the host events by thread, or their CallTree).
    The shortest cycle, unless executions lie outside it and the longer cycle that leaves
    nothing out is the step: a Python-traced call runs it whole, or the host pauses longest
    once per turn of it."""
    found = find_cycle(names)
    if found is None:
        return None
    p, pattern = found
    tree = CallTree.of(host_threads)
    chose = ""
    if walk_coverage(names, pattern)[0] < len(names):
        # executions outside the shortest cycle: extras inside its steps (a metrics program every
        # tenth step), or the shortest cycle is a part of the step (a layer program run 28 times
        # between a head and an update): the longer cycle that leaves nothing out is the step
        # when a Python-traced call runs it whole, or the host pauses longest once per turn
        full = find_cycle(names, complete=True)
        if full and full[0] > p:
            by_call = python_phase(tree, execs, full[1])
            _, pause = cycle_phase(execs, full[1])
            if by_call or pause.startswith("a step starts after"):
                chose = (f"the cycle of {full[0]} executions, not its part of {p} with the rest as "
                         "extras: " + ("a Python-traced call runs it whole" if by_call else
                                       "the host pauses longest once per turn of it"))
                p, pattern = full
    grown = python_turns(tree, execs, pattern)
    if grown is not None:
        return grown
    cycle, why = python_phase(tree, execs, pattern) or cycle_phase(execs, pattern)
    if chose:
        why = f"{chose}; {why}"
    return cycle, why


# A Python-traced call is a step of several turns of the cycle (a Python loop over layers, each a
# jitted call) only where it repeats at least this often and its calls hold nearly every
# execution (TURNS_COVER of them)
TURNS_MIN_CALLS = 3
TURNS_COVER = 0.9


def python_turns(tree, execs: list, pattern: list) -> tuple[list, str] | None:
    """The step as several turns of the cycle: a Python-traced call (one name, at least
    TURNS_MIN_CALLS calls, holding TURNS_COVER of the executions) each of whose calls runs the
    same k > 1 whole turns with no traced wait on a result between them (SYNC_RE: a Python loop
    calling a jitted layer function 48 times between two blocks: the 48 calls are the user's
    step, not each one; a loop of train steps that each read their loss is not), the innermost
    such call; None where a traced call runs exactly one turn each time (the step is a turn) or
    none runs several."""
    from gap_causes import SYNC_RE
    tree = CallTree.of(tree)
    if not tree or not execs:
        return None
    p, starts, names = len(pattern), [x.start for x in execs], [x.module for x in execs]
    syncs = sorted(h["start"] for _, calls, _, _ in tree.threads for h in calls
                   if SYNC_RE.search(h["name"]))

    def waits_inside(lo: int, hi: int) -> bool:  # a sync between the call's executions
        i = bisect.bisect_right(syncs, starts[lo])
        return i < len(syncs) and syncs[i] < starts[hi - 1]
    best = None
    for name, held in calls_holding(tree, starts):
        sizes = {hi - lo for _, lo, hi in held}
        if len(held) < TURNS_MIN_CALLS or len(sizes) != 1:
            continue
        n = sizes.pop()
        if n == p:
            return None  # a call a turn: the turn is the step
        if n % p or sum(hi - lo for _, lo, hi in held) < TURNS_COVER * len(execs) or \
                any(waits_inside(lo, hi) for _, lo, hi in held):
            continue
        rank = (statistics.median(d for d, _, _ in held), name)
        if best is None or rank < best[0]:
            best = (rank, name, held, n)
    if best is None:
        return None
    _, name, held, n = best
    lo, hi = held[0][1], held[0][2]
    return names[lo:hi], (f"a step is one call of {name}: each of its {len(held)} calls runs "
                          f"{n // p} turns of the cycle ({n} executions), a Python loop the "
                          "user's step holds")


def cycle_groups(names: list, cycle: list) -> tuple[list, list]:
    """The executions' indices grouped into steps, and per step the executions outside the
    cycle in it. A step at every whole cycle; an execution outside the cycle joins the step it
    runs in (a metrics program every tenth step); those before the first whole cycle are a step
    each and an unfinished last cycle is one (partial steps)."""
    p, n = len(cycle), len(names)
    groups: list[list] = []
    extra: list[int] = []
    i = 0
    while i < n:
        if names[i:i + p] == cycle:
            groups.append(list(range(i, i + p)))
            extra.append(0)
            i += p
        elif n - i < p and names[i:] == cycle[:n - i]:
            groups.append(list(range(i, n)))  # the cycle the capture cut
            extra.append(0)
            break
        elif groups:
            groups[-1].append(i)
            extra[-1] += 1
            i += 1
        else:
            groups.append([i])  # before the first whole cycle
            extra.append(0)
            i += 1
    return groups, extra


def python_call_steps(host_threads, execs: list, trace_end: int, notes: list):
    """Steps from the Python tracer: the outermost traced call that repeats (at least
    PERIOD_MIN_CYCLES times) with program executions inside each call, on one thread: the
    user's loop body when the programs it runs do not repeat in a cycle (a data-dependent number
    of calls). The call that holds the most executions in all wins (the loop body, not a
    helper inside it), then the shallowest. Every call is a whole step (the tracer records a
    call when it ends), none partial. None without the tracer or without such a call."""
    starts = [x.start for x in execs]
    best = None
    tree = CallTree.of(host_threads)
    for _, traced, _, depths in tree.threads if tree else ():
        by: dict[tuple, list] = {}  # (depth, name) -> calls
        for h, depth in zip(traced, depths, strict=True):
            by.setdefault((depth, h["name"]), []).append(h)
        for (depth, name), calls in by.items():
            inside = [bisect.bisect_left(starts, c["start"] + c["dur"]) -
                      bisect.bisect_left(starts, c["start"]) for c in calls]
            calls = [c for c, n in zip(calls, inside, strict=True) if n]
            if len(calls) < PERIOD_MIN_CYCLES:
                continue
            # the call that holds the most executions in all (the loop body, not a helper it
            # calls), then the shallowest
            rank = (-sum(n for n in inside if n), depth)
            if best is None or rank < best[0]:
                best = (rank, name, calls)
    if best is None:
        return None
    _, name, calls = best
    steps = []
    for k, c in enumerate(calls):
        end = calls[k + 1]["start"] if k + 1 < len(calls) else max(trace_end,
                                                                    c["start"] + c["dur"])
        lo, hi = bisect.bisect_left(starts, c["start"]), bisect.bisect_left(
            starts, c["start"] + c["dur"])
        steps.append(Step(k, c["start"], end, f"python:{name}",
                               launched=max(x.end for x in execs[lo:hi]), executions=execs[lo:hi]))
    notes.append(f"steps: the program executions do not repeat in a cycle; each call of "
                 f"{name}, the outermost Python-traced call that repeats with program "
                 f"executions inside it, is a step ({len(calls)} calls)")
    return steps, f"calls of {name} (the Python tracer's outermost repeated call)"


def annotated_steps(host_threads, scan: dict | None = None) -> list:
    """Steps from StepTraceAnnotation: per step number (`step_num`), from its first host event's
    start to its last one's end, with the program executions that began inside it; empty
    without annotations."""
    scan = scan or host_scan(host_threads)
    marks: dict[int, list] = {}
    for h in scan["marks"]:
        try:
            marks.setdefault(int(h["args"]["step_num"]), []).append(h)
        except ValueError:
            continue
    if not marks:
        return []
    steps = [Step(n, min(h["start"] for h in hs), max(h["start"] + h["dur"] for h in hs),
                  "annotation") for n, hs in sorted(marks.items())]
    # the program executions that began inside each annotated step
    execs = program_executions(host_threads, scan)
    starts = [x.start for x in execs]
    for st in steps:
        st.executions = execs[bisect.bisect_left(starts, st.start):
                              bisect.bisect_right(starts, st.end)]
    return steps


def find_steps(gpu, host_threads, trace_end, scan: dict | None = None,
               tree: CallTree | None = None) -> tuple[list, str, list]:
    """The capture's steps, where they came from (the result's steps source) and the notes on
    how they were found: StepTraceAnnotation, else the cycle of program executions, else the
    Python tracer's repeated call, else the whole capture as one partial window (no step
    without GPU events). `scan` (host_scan) and `tree` (CallTree) spare a pass over the host
    events when the caller has them."""
    notes = []
    steps = annotated_steps(host_threads, scan)
    if steps:
        stem = (scan or {}).get("numbered")
        return steps, (f"host annotations numbered by name ('{stem} N')" if stem
                       else "StepTraceAnnotation (step_num)"), notes
    execs = program_executions(host_threads, scan)
    if tree is None and execs:
        scan = scan or host_scan(host_threads)
        tree = CallTree(host_threads, scan) if scan["tracer"] else None
    found = cycle_steps(execs, trace_end, notes, tree) if execs else None
    if found is None and tree:
        found = python_call_steps(tree, execs, trace_end, notes)
    if found is not None:
        return (*found, notes)
    if not gpu:
        return [], "none", notes
    if not execs:
        why = ("no StepTraceAnnotation and no program executions on the host (no "
               "`<module>:XLA GPU module` or GpuExecutable::ExecuteThunks events)")
    else:
        why = (f"no StepTraceAnnotation, and the {len(execs)} program execution(s) on the host "
               "do not repeat in a cycle")
    notes.append(f"{why}: the whole capture is analysed as one window")
    return [Step(0, min(e.start for e in gpu), max(e.end for e in gpu), "capture",
                      partial=True, executions=execs)], "the whole capture", notes


def program_call_starts(gpu, steps) -> None:
    """Steps taken from program executions: a call starts with its argument copies, launched by
    its dispatch before the program runs. Each step's start moves back to the launch of the
    earliest such copy (a memcpy outside the program: no hlo_op, no hlo_module, not in a graph,
    not to the host, joined to a launch call of its own) launched after the host finished
    launching the previous execution; the previous step then ends there. So a GPU's step ends
    at its program's last kernel, the next call's copies run inside the next call's step, and
    the idle between calls is measured. The first step looks back at most twice the longest
    such lead of the others (copies made long before the first call are set-up)."""
    if not steps or steps[0].launched is None:
        return
    starts = [s.start for s in steps]
    first: dict[int, int] = {}
    for ev in gpu:
        if not (ev.join == "launch" and ev.launch and not ev.module
                and rules.is_argument_copy(ev.category, ev.op, ev.graph)) \
                or rules.is_copy_to_host(ev.name, ev.launch["name"]):
            continue
        t = ev.launch["start"]
        i = bisect.bisect_right(starts, t)  # the next execution: starts[i] > t
        if i >= len(steps) or (i > 0 and t <= steps[i - 1].launched):
            continue  # after the last call, or launched while the previous call was launching
        if t < first.get(i, starts[i]):
            first[i] = t
    leads = [starts[i] - t for i, t in first.items() if i > 0]
    if 0 in first and (not leads or starts[0] - first[0] > 2 * max(leads)):
        del first[0]
    for i, t in sorted(first.items()):
        steps[i].start = t
        if i > 0:
            steps[i - 1].end = min(steps[i - 1].end, t)


def assign_steps(gpu, steps) -> None:
    starts = [s.start for s in steps]
    for ev in gpu:
        t = ev.launch["start"] if ev.join in ("launch", "dispatch") and ev.launch else ev.start
        i = bisect.bisect_right(starts, t) - 1
        ev.step = steps[i].number if i >= 0 and t <= steps[i].end or (
            i >= 0 and steps[i].source != "annotation") else None


def mark_partial(gpu, steps, trace_end: int | None = None) -> list:
    """The first and last step are partial when their event count differs from the most common
    one (the profile started or stopped inside them), any step when the trace's other events
    (their last end: `trace_end`) stop before its half (the capture or the exporter's cap cut
    it); steps framed from Python calls keep their own flags (a traced call is whole)."""
    if steps and steps[0].source.startswith("python:"):
        return [s for s in steps if not s.partial]
    counts = Counter(ev.step for ev in gpu if ev.step is not None)
    if not steps:
        return []
    for s in steps if trace_end is not None else ():
        s.partial |= 2 * (s.end - trace_end) > s.end - s.start
    values = [counts.get(s.number, 0) for s in steps]
    common = max(set(values), key=values.count) if values else 0
    for pos in (0, len(steps) - 1):
        s = steps[pos]
        if len(steps) > 1 and counts.get(s.number, 0) != common:
            s.partial = True
    return [s for s in steps if not s.partial]
