"""Step 6: changes: the causes of the step time, ranked by their share of the critical path: the
analysis. Its door, with the command line and what it writes, is scripts/changes.py."""

from __future__ import annotations

import re
import statistics
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import gap_causes  # the host's blocking calls (sibling skill, standard library only)
from jaxperf.device import adapters  # what the capture's device answers: its knobs, set-up
from jaxperf.steps.critical_path import (  # the steps, their frames and critical paths, the context
    DISPATCH_MIN_EXECUTIONS,
    MIN_SAVING_US,
    TOP_INSTRUCTIONS,
    ChangesError,
    Context,
    build_context,
    read_steps,
    recompiled,
    spread,
    step_frames,
    tables,
)
from tracekit import capture_inputs, scratch
from tracekit import trace_rules as rules  # tie rule, CSV writing, atomic files
from tracekit.scratch import number
from tracekit.trace_rules import number_text, us_text

RESULT_FILE = "changes.json"

TABLE = "changes.csv"

COLUMNS = scratch.columns(TABLE)

LABEL = "inferred, not run"

# changes.csv `target` of an instruction row that no other work of its kind outruns here
NO_TARGET = "no measured target in this capture"


# ---------------------------------------------------------------- named constants

# Python lines listed as causes (as TOP_INSTRUCTIONS instructions): the few a reader acts on.
TOP_LINES = 3

# A host gap is said to be "before the first launch" when the step's leading gap holds at least
# this share of the step's host-late time: then the knob is the host's work before the step (the
# input pipeline, dispatch), not the launches between kernels.
LEADING_GAP_MAJORITY = 0.5
# copies from the host under that majority are still said from this share of the leading gap
COPIES_SAID_SHARE = 0.05  # (a 16 MiB input each step: 5.1 ms of a 53.6 ms gap)

# Host events named in a host_gap cause (largest overlap first).
HOST_EVENTS_NAMED = 3

# An instruction whose pct_of_ceiling is under this runs far from any ceiling: a kernel that short
# or that slow is more likely launch-size- or occupancy-limited than bandwidth-limited.
FAR_FROM_CEILING_PCT = 10.0

# A kernel family is a cause of its own when it holds at least this share of all GPU time and
# its kernels run under at least this many instructions: one instruction's kernel is already
# an instruction row; a family spread thin over many is a pattern with one knob.
FAMILY_MIN_PCT_OF_GPU_TIME = 5.0

FAMILY_MIN_INSTRUCTIONS = 3

# A TPU step too small for the chip: its device busy under this share of the window, and the
# host's side of it under this many us: the fixed cost of one dispatch and its wait (on a TPU
# v5e 0.4 to 0.6 ms a step for one small program, lab: tiny_step, eager_loop_jit; 1.0 to 1.4
# ms where the host blocks on the step's result: a DP-SGD step, where eight steps a dispatch
# ran 2.75x as fast, a decode loop's int() of each token), not host work (a 9.2 ms copy of the
# host's data each step, a 4.7 ms loader)
TOO_SMALL_HOST_SHARE = 0.5

PALLAS_NO_COST_WHY = "Pallas call without a cost estimate"  # roofline.csv's no_ceiling_why

TOO_SMALL_HOST_US = 2000.0

# but a split-K reduction is one GEMM's partial sums: a cause of its own under a single GEMM
# (the knob is that GEMM's split; an eager program holds one GEMM)
FAMILY_MIN_INSTRUCTIONS_OF = {"split-K reduction": 1}


# ---------------------------------------------------------------- the causes: one registry
#
# A cause is a function (ctx: Context) -> its rows (a list of Row, empty when it is not listed), or
# a Found when it has notes or refusals for the reader too. Its prose (a Prose: the tables it
# reads, its assumptions, its knob) sits beside it, and @cause registers it: the registry's order
# is the order the causes run in and the rank order among rows that tie.

@dataclass(frozen=True)
class Prose:
    """What a cause's rows say besides their figures: the tables they come from (`source`), what
    the saving assumes (`assumptions`) and the change to test (`knob`). Each is the text itself,
    or, where a row's figures choose or fill it, a dict of the sentences and str.format templates
    the cause's function picks from."""
    source: str
    assumptions: str | dict
    knob: str | dict


# every cause's words, as data (changes.toml beside this file): name -> Prose
PROSE = {name: Prose(**fields) for name, fields in tomllib.loads(
    Path(__file__).with_name("changes.toml").read_text(encoding="utf-8")).items()}


@dataclass
class Row:
    """A row as its cause finds it: the sentence with its own figures (`cause`), where, its share
    of the median step's window (`pct`, percent), its saving (spread), its assumptions and knob
    where the function filled them in (else its Prose's text), the fields only changes.json keeps
    (`extra`), and the instructions it names (`named`: indices of Ceilings.cands, each counted
    once in the combined saving)."""
    cause: str
    where: str
    pct: float
    saving: dict
    assumptions: str | None = None
    knob: str | None = None
    extra: dict | None = None
    named: frozenset = frozenset()
    measured: float | None = None  # the median step's saving at a target this capture reached
    target: str = ""  # that target, other work of the same kind (or NO_TARGET); "" for none
    kernel_cut: list | None = None  # per step used: kernel time it removes, in place of the
    #                                 distance to their ceilings of the instructions it `fuses`
    fuses: frozenset = frozenset()  # indices of Ceilings.cands whose cut kernel_cut replaces


@dataclass
class Found:
    """A cause's rows with the notes and refusals it has for the reader."""
    rows: list
    notes: list = field(default_factory=list)
    refusals: list = field(default_factory=list)


@dataclass(frozen=True)
class Cause:
    """An entry of the registry: the cause_kind, the function that finds its rows, its prose,
    whether its rows regroup other rows' kernel time (ranked after every other row, never added
    to them), and whether they cut compute time no instruction row counts (`compute`: the
    combined saving adds them to the compute side)."""
    kind: str
    find: Callable
    prose: Prose
    regroups: bool = False
    compute: bool = False
    explains: tuple = ()  # kinds of rows whose time this cause's rows are the cause of


REGISTRY: list[Cause] = []


def cause(kind: str, prose: Prose, regroups: bool = False, compute: bool = False,
          explains: tuple = ()):
    """Registers the function it decorates as the cause `kind`, after those registered before."""
    def register(find: Callable) -> Callable:
        REGISTRY.append(Cause(kind, find, prose, regroups, compute, explains))
        return find
    return register


def largest_labels(labels: dict) -> str:
    """The three largest labels by kernel time, as the end of a cause sentence ('' for none)."""
    top = sorted(labels.items(), key=lambda kv: (-kv[1], kv[0]))
    return (f"; largest by kernel time: {', '.join(f'{n} {us_text(v)}' for n, v in top[:3])}"
            if top else "")


DISPATCH = PROSE["DISPATCH"]


@cause("dispatch", DISPATCH)
def dispatch(ctx: Context) -> list:
    """The dispatch between programs (Context.dispatch_idle): the critical stream idle between two
    program executions' kernels while the host dispatches the next, less the compilation the
    compile row names; its saving is that idle. The
    knob names the Python call to jit where step 1 found one enclosing the dispatches."""
    between = ctx.dispatch_idle
    if between is None:
        return []
    compiled = compile_per_step(ctx)
    if compiled:  # the compile row's time, not the dispatch's (XLA compiles between programs)
        between = [max(0.0, v - compiled) for v in between]
        if between[ctx.at] < MIN_SAVING_US:
            return []
    at, b, n = ctx.at, ctx.bound, ctx.executions[ctx.at]
    dp = (ctx.s1 or {}).get("dispatch") or {}
    knob = DISPATCH.knob
    if dp.get("enclosing_call"):
        jit = knob["named"].format(call=dp["enclosing_call"], n=n, steps=dp.get("steps"),
                                   in_steps=dp.get("enclosing_call_steps"))
    else:
        traced = ((ctx.s1 or {}).get("python_tracer") or {}).get("calls")
        jit = knob["unnamed"].format(n=n, why=knob["tracer on" if traced else "tracer off"])
    syncs = [name for name, _ in (ctx.host or {}).get("events", [])
             if gap_causes.SYNC_RE.search(name)][:3]
    if syncs:
        jit += knob["syncs"].format(calls=", ".join(f"`{c}`" for c in syncs))
    return [Row(f"dispatch between programs: {n} program executions in step {ctx.median}, "
                f"{us_text(between[at])} the critical stream of {device_word(ctx)} {b} waits "
                "between two executions' kernels while the host dispatches the next",
                f"{device_word(ctx)} {b}", 100.0 * between[at] / ctx.window, spread(between, at),
                knob=f"{jit}; {knob['always']}")]


FUSED_ON_JIT = PROSE["FUSED_ON_JIT"]

# A run of passes is counted where its fused saving is at least this share of its time: a pair
# of small passes whose fused kernel would move as much as they do is no change.
FUSED_MIN_SHARE = 0.2


def elementwise_passes(ctx: Context) -> dict:
    """(program id, instruction) -> (bytes a kernel moves, memory ceiling B/s) of the
    element-wise instructions of roofline.csv with one kernel a run: element-wise work, a dtype
    convert (an element-wise map, though roofline.csv calls it data movement), and a reduction
    (XLA fuses the element-wise passes that feed it into it)."""
    out = {}
    for r in tables(ctx.out).rows("roofline.csv") or []:
        b, runs, k = number(r.get("run_bytes")), number(r.get("runs")), number(r.get("kernels"))
        ceiling = number(r.get("memory_ceiling_bytes_per_s"))
        if (r.get("work") in ("elementwise", "reduction") or r.get("opcode") == "convert") \
                and b and runs and k == runs and ceiling:
            out[(r.get("program_id", ""), r["instruction"])] = (b, ceiling)
    return out


def pass_runs(events: list, ew: dict, one_kernel: set) -> list:
    """The runs of back-to-back element-wise kernels (`events`: (start, dur, pid, instruction,
    user frame) in start order) that span at least two program executions: each a list of
    (dur us, bytes, ceiling, user frame, (program id, instruction)). A program with one kernel
    an execution starts a new execution at each kernel; another, where its program id
    changes."""
    runs, cur, execs, prev = [], [], 0, None
    for _, dur, pid, ins, frame in events + [(0.0, 0.0, None, None, "")]:
        info = ew.get((pid, ins))
        if info is None or dur <= 0:
            if execs >= 2:
                runs.append(cur)
            cur, execs, prev = [], 0, None
            continue
        if pid != prev or pid in one_kernel:
            execs += 1
        prev = pid
        cur.append((dur, info[0], info[1], frame, (pid, ins)))
    return runs


def fused_saving(run: list) -> tuple[float, float]:
    """(saving at the best rate the run's passes reached, saving at the memory ceiling), us."""
    total = sum(p[0] for p in run)
    big = max(p[1] for p in run)
    ceiling = min(p[2] for p in run)
    rate = min(ceiling, max(p[1] / (p[0] * 1e-6) for p in run))
    return total - big / rate * 1e6, total - big / ceiling * 1e6


@cause("fused_on_jit", FUSED_ON_JIT)
def fused_on_jit(ctx: Context) -> list:
    """What the jit of the dispatch row brings besides the dispatch: the element-wise passes
    that run back to back as separate programs (eager jnp code) fuse into one kernel each run;
    the saving bounded by the bytes of the largest pass (FUSED_ON_JIT's assumptions). Only
    in a step of several program executions (with or without a dispatch row: programs queued
    ahead of the device still run as separate passes)."""
    if max(ctx.executions, default=0) < DISPATCH_MIN_EXECUTIONS:
        return []
    ew = elementwise_passes(ctx)
    path = ctx.out / "attribution" / "kernels.csv"
    if not ew or not path.is_file():
        return []
    one_kernel = {p.get("program_id", "") for p in
                  tables(ctx.out).rows("attribution/programs.csv") or []
                  if (number(p.get("kernels_per_execution")) or 0) <= 1.0}
    spans = {n: (str(ctx.frames[n].bound), ctx.frames[n].start, ctx.frames[n].end)
             for n in ctx.chosen}
    events: dict = {n: [] for n in ctx.chosen}
    for k in scratch.records(ctx.out, "attribution/kernels.csv"):
        t = number(k.get("start_us"))
        if not k.get("instruction") and k.get("category") == "memcpy":
            continue  # an argument copy between two programs: no kernel of the chain
        for n, (dev, a, b) in spans.items():
            if k.get("device") == dev and t is not None and a <= t < b:
                events[n].append((t, number(k.get("dur_us")) or 0.0, k.get("program_id", ""),
                                  k.get("instruction", ""), k.get("user_frame", "")))
    measured, ceiling, median_runs, fused_keys = [], [], [], set()
    for n in ctx.chosen:
        runs = [r for r in pass_runs(sorted(events[n]), ew, one_kernel)
                if fused_saving(r)[0] >= FUSED_MIN_SHARE * sum(d for d, *_ in r)]
        sav = [fused_saving(r) for r in runs]
        measured.append(sum(m for m, _ in sav))
        ceiling.append(sum(c for _, c in sav))
        fused_keys.update(p[4] for r in runs for p in r)
        if n == ctx.median:
            median_runs = runs
    at = ctx.at
    if ceiling[at] < MIN_SAVING_US:
        return []
    lines: dict = {}
    for r in median_runs:
        for d, _, _, frame, _ in r:
            ln = lines.setdefault(frame.split(" ")[0] or "no line", [0, 0.0])
            ln[0] += 1
            ln[1] += d
    top = sorted(lines.items(), key=lambda kv: (-kv[1][1], kv[0]))
    passes = sum(len(r) for r in median_runs)
    total = sum(d for r in median_runs for d, *_ in r)
    idle = ctx.dispatch_idle[at] if ctx.dispatch_idle else 0.0
    fuses = frozenset(i for i, c in enumerate(ctx.ceilings.cands) if c["key"] in fused_keys) \
        if ctx.ceilings is not None else frozenset()
    where = ", ".join(line for line, _ in top[:3]) + (
        f" and {rules.plural(len(top) - 3, 'other line')}" if len(top) > 3 else "")
    return [Row(
        f"once jitted, XLA can fuse {rules.plural(len(median_runs), 'run')} of back-to-back "
        f"element-wise passes that now run as separate programs: {passes} passes, "
        f"{us_text(total)} of step {ctx.median}, into "
        f"{rules.plural(len(median_runs), 'kernel')}; largest: "
        + ", ".join(f"{line} {rules.plural(n, 'pass', 'passes')} {us_text(t)}"
                    for line, (n, t) in top[:3])
        + (f"; with the dispatch row's {us_text(idle)} (the same jit, other time) the jit saves "
           f"{number_text(idle + measured[at])} to {us_text(idle + ceiling[at])} of step "
           f"{ctx.median}" if idle else ""),
        where, 100.0 * ceiling[at] / ctx.window, spread(ceiling, at),
        measured=measured[at], kernel_cut=ceiling, fuses=fuses,
        extra={"passes": passes, "runs": len(median_runs)})]


HOST_GAP = PROSE["HOST_GAP"]


def host_knob(lead: float, host_late: float, graph_pct: float, tracer: bool,
              events: list = (), setup_re=None, copy: tuple | None = None,
              frame: str | None = None) -> str:
    """What to test for host gaps: the host's work before the first launch (the runtime's own
    set-up where its host events, of `events` (name, us) inside the gaps, are half their time
    or more and fill half the leading gap or more; a wait where one blocking call on a
    result, gap_causes.SYNC_RE, fills a quarter of it), or the launches between
    kernels (the larger first), and the Python tracer where its events fill the gaps.
    `setup_re`: the device's names of the runtime's set-up (adapters.Adapter.setup_re; None:
    none known). `copy`: (its largest event's name, whether copies from the host dominate the
    leading gap: copies_lead). `frame`: the host event whose untraced body, too slow for one
    producer thread, fills the leading gap (host_gap)."""
    sentences = HOST_GAP.knob
    between = sentences["between, in graphs" if graph_pct >= 50.0 else "between"]
    setup = [(n, t) for n, t in events if setup_re is not None and setup_re.match(n)]
    sync = [(n, t) for n, t in events if gap_causes.SYNC_RE.search(n)]
    slow = [(n, t) for n, t in events if gap_causes.SLOW_DISPATCH_RE.search(n)]
    knob = []
    if lead >= LEADING_GAP_MAJORITY * host_late and copy and copy[1]:
        knob.append(sentences["before, copy"].format(copy=copy[0]))
    elif lead >= LEADING_GAP_MAJORITY * host_late and slow and 2 * slow[0][1] >= lead:
        knob.append(sentences["before, slow dispatch"].format(call=slow[0][0]))
    elif lead >= LEADING_GAP_MAJORITY * host_late and sync and 4 * sync[0][1] >= lead:
        knob.append(sentences["before, sync"].format(sync=sync[0][0]))
    elif lead >= LEADING_GAP_MAJORITY * host_late and frame:
        knob.append(sentences["before, own frame"].format(frame=frame))
    elif lead >= LEADING_GAP_MAJORITY * host_late:
        dispatch = bool(setup) and all(gap_causes.DISPATCH_CALL_RE.match(n) for n, _ in setup)
        knob.append(sentences["before, dispatch" if dispatch else "before, set-up"].format(
            setup=", ".join(n for n, _ in setup[:HOST_EVENTS_NAMED]))
            if 2 * sum(t for _, t in setup) >= lead > 0 and (
                dispatch or 2 * sum(t for _, t in setup) >= sum(t for _, t in events))
            else sentences["before"])
    if host_late - lead >= (1.0 - LEADING_GAP_MAJORITY) * host_late:
        knob.insert(0 if host_late - lead > lead else len(knob),
                    between.format(graph_pct=graph_pct))
    if tracer:
        knob.append(sentences["tracer"])
    return "; ".join(knob)


def copies_lead(ctx: Context, hd: dict | None) -> tuple | None:
    """(the largest host-work name, whether copies from the host fill the leading gap's
    majority (LEADING_GAP_MAJORITY), their time a step, its transfer part, the bytes carried a
    step, the leading gap) from step 1's host_to_device_before_device; None where it has none.
    On the lab's h2d_copy: 7.86 ms of an 8.06 ms gap, 64 MiB a step; on the chip once, 8.22 ms
    saved."""
    c = (ctx.s1 or {}).get("host_to_device_before_device") or {}
    t = (c.get("per_step_us") or {}).get("value")
    if not t or not hd:
        return None
    return (c.get("largest") or "the transfer", t >= LEADING_GAP_MAJORITY * hd["leading_us"], t,
            (c.get("transfer_us") or {}).get("value") or 0.0,
            (c.get("bytes_per_step") or {}).get("value") or 0.0, hd["leading_us"])


@cause("host_gap", HOST_GAP)
def host_gap(ctx: Context) -> list:
    """The critical stream waiting on the host (host-late gaps), less the dispatch row's idle and
    the capture's lead-in; its saving is the step's end less the latest GPU end with each GPU's
    host-late time removed. Names the host events inside the median step's gaps."""
    hsav = []
    for n, fr in ctx.frames.items():
        g = {d: r for d, r in ctx.steps[n].items() if d in ctx.gpus} or ctx.steps[n]
        hsav.append(max(0.0, fr.end - max(r.end - r.host_late for r in g.values())))
    between = ctx.dispatch_idle
    if between is not None:
        hsav = [max(0.0, v - b) for v, b in zip(hsav, between, strict=True)]
    waits = ctx.median_path.host_late
    host_late = max(0.0, waits - (between[ctx.at] if between is not None else 0.0))
    if ctx.lead_in:
        host_late = max(0.0, waits - ctx.lead_in)
        hsav = [min(v, host_late) for v in hsav]  # the bounding GPU's other gaps at most
    if hsav[ctx.at] < MIN_SAVING_US and host_late < MIN_SAVING_US:
        return []
    hd, b = ctx.host, ctx.bound
    waits = "the critical stream" if device(ctx).kind == "GPU" else f"{device_word(ctx)} {b}"
    words = (f"{waits} waits on the host: {us_text(host_late)} of step {ctx.median}"
             + (" besides the dispatch between programs" if between is not None else ""))
    if hd:
        named = ", ".join(f"{n} {us_text(v)}" for n, v in hd["events"][:HOST_EVENTS_NAMED])
        words += (f", in {hd['gaps']} gap(s) of 1 us or more, {us_text(hd['leading_us'])} "
                  f"of it before the first {'kernel' if device(ctx).kind == 'GPU' else 'op'}")
        if named:
            inc = " (the dispatch gaps included)" if between is not None else ""
            words += f"; host events inside them{inc}: {named}"
    gpu = device(ctx).kind == "GPU"
    where = (f"{device_word(ctx)} {b} stream {ctx.steps[ctx.median][b].crit}" if gpu else
             f"{device_word(ctx)} {b}") + (
        f" ({'launching' if gpu else 'dispatching'} thread {', '.join(hd['threads'])})"
        if hd and hd["threads"] else "")
    measured, target = None, ""
    copy = copies_lead(ctx, hd)
    if copy and (copy[1] or copy[2] >= COPIES_SAID_SHARE * copy[5]):
        moved = f"{copy[4] / 2**20:,.1f} MiB a step, " if copy[4] else ""
        rate = (f", {copy[4] / copy[3] / 1e3:,.1f} GB/s" if copy[4] and copy[3] else "")
        words += (f"; copies from the host to the chip fill {us_text(copy[2])} of it a step "
                  f"({moved}the host laying them out ({copy[0]} the largest), then their "
                  f"transfer, {us_text(copy[3])} until the device starts{rate})")
        if copy[1]:  # what putting constant arrays on it once saves
            measured, target = min(hsav[ctx.at], copy[2]), "the copies from the host"
    work = (ctx.s1 or {}).get("host_work_before_device") or {}
    w = (work.get("per_step_us") or {}).get("value")
    compiled = compile_per_step(ctx)
    lead = hd["leading_us"] if hd else 0.0
    named = dict(hd["events"]) if hd else {}
    setup = device(ctx).setup_re
    # the runtime's dispatch and a blocking call: neither is a producer's work
    dispatched = sum(max((v for n, v in named.items() if r and r.search(n)), default=0.0)
                     for r in (setup, gap_causes.SYNC_RE, gap_causes.SLOW_DISPATCH_RE))
    untraced = False
    if w and hd and lead >= LEADING_GAP_MAJORITY * host_late and not compiled \
            and not (copy and copy[1]) and dispatched < 0.5 * lead:
        # (a copy's time is the copy's, where XLA compiles the compile row's, a dispatch the
        # dispatch's: none a producer's) one producer thread, prefetching, still takes its time
        # a step: the step is at least that long, so it saves at most the period less it. Where
        # the traced calls cover under half the gap and no blocking call fills it, the rest is
        # the enclosing Python frame's own time (numpy and C calls the tracer does not see):
        # the producer's work too
        untraced = w < 0.5 * lead and dispatched < 0.25 * lead
        measured = max(0.0, min(hsav[ctx.at], ctx.window - (lead if untraced else w)))
        target = "one producer thread's bound"
        words += (f"; the host's own work before the device starts takes {us_text(w)} a step "
                  f"(largest call {work['largest_call']})" + (
                      f", and the rest of the {us_text(lead)} before the first op is its "
                      "enclosing Python frame's own time (calls the tracer does not see), work "
                      "too" if untraced else "") + ": done ahead by one producer thread, a step "
                  f"still lasts that long, so prefetching saves {us_text(measured)}")
    joins = (ctx.s1 or {}).get("joins", {})
    graph, launched = joins.get("graph_launch", 0), joins.get("launch", 0)
    knob = host_knob(lead, host_late,
                     100.0 * graph / (graph + launched) if graph + launched else 0.0,
                     bool(hd and hd["python_tracer"]), hd["events"] if hd else (),
                     setup, copy, hd["events"][0][0] if untraced and hd["events"]
                     and measured < 0.5 * lead else None)
    return [Row(words, where, 100.0 * host_late / ctx.window, spread(hsav, ctx.at), knob=knob,
                measured=measured, target=target)]


STRAGGLER_WAIT = PROSE["STRAGGLER_WAIT"]


@cause("straggler_wait", STRAGGLER_WAIT)
def straggler_wait(ctx: Context) -> list:
    """The straggler's extra work (Context.straggler_work): the other GPUs wait for it inside
    collectives; its saving is that work's exposed part. Says whether it runs more events than
    the others (reconcile.json's failed same-work check) or the same ones slower."""
    work = ctx.straggler_work
    if not work:
        return []
    sav = [work[n]["exposed"] for n in ctx.chosen]
    if sav[ctx.at] < MIN_SAVING_US:
        return []
    g = ctx.straggler
    more = None
    for c in (tables(ctx.out).json("reconcile.json") or {}).get("checks", []):
        if c.get("check") == "same_work_across_gpus_events" and \
                str(c.get("device")) == str(g) and c.get("status") == "fail":
            more = c.get("trust_sentence")
    reason = ("it runs more GPU events per step than the others: " + more) if more else \
        "it runs the same events slower than the others"
    return [Row(f"GPU {g} ends {ctx.alone.count(g)} of {len(ctx.chosen)} steps last; its compute "
                f"and memcpy kernels take {us_text(work[ctx.median]['excess'])} in step "
                f"{ctx.median} more than the median GPU's, and the other GPUs wait for it "
                f"({reason})",
                f"GPU {g}", 100.0 * sav[ctx.at] / ctx.window, spread(sav, ctx.at),
                knob=STRAGGLER_WAIT.knob.format(gpu=g))]


EXPOSED_COLLECTIVE = PROSE["EXPOSED_COLLECTIVE"]


@cause("exposed_collective", EXPOSED_COLLECTIVE)
def exposed_collective(ctx: Context) -> list:
    """Collective kernels on the critical path while no compute or copy runs (the collective
    slice); its saving is their exposed part."""
    return exposed_slice(ctx, "collective", "collective",
                         f"collective kernels run while no compute or copy does on GPU {ctx.bound}")


def exposed_slice(ctx: Context, part: str, labels: str, what: str) -> list:
    """The row of a critical-path slice whose exposed part (`<part>_exposed`) is the saving:
    `what`, then its time in the median step and its largest events (`labels`); nothing
    without rows.csv or below MIN_SAVING_US."""
    if ctx.rows is None:
        return []
    sav, mp = ctx.each(f"{part}_exposed"), ctx.median_path
    if sav[ctx.at] < MIN_SAVING_US and getattr(mp, part) < MIN_SAVING_US:
        return []
    return [Row(f"{what}: {number_text(getattr(mp, part))} us of step {ctx.median}"
                + largest_labels(mp.labels[labels]),
                f"GPU {ctx.bound}", 100.0 * getattr(mp, f"{part}_exposed") / ctx.window,
                spread(sav, ctx.at))]


MEMCPY = PROSE["MEMCPY"]


@cause("memcpy", MEMCPY)
def memcpy(ctx: Context) -> list:
    """memcpys outside the program on the critical path while no compute runs (the memcpy_arg
    slice; the program's own copies are instructions, ranked with them); its saving is their
    exposed part."""
    return exposed_slice(ctx, "memcpy_arg", "arg",
                         "memcpys without an instruction label (argument copies and other "
                         "copies outside the program) on the critical path while no compute "
                         "runs")


KERNEL_GAPS = PROSE["KERNEL_GAPS"]


@cause("kernel_gaps", KERNEL_GAPS)
def kernel_gaps(ctx: Context) -> list:
    """The critical stream idle between its kernels with no launch late from the host
    (dependencies on other streams, event waits, the GPU's own launch latency between kernels,
    inside graphs too: the idle_before slice); its saving is its exposed part."""
    if ctx.rows is None:
        return []
    sav, mp, b = ctx.each("idle_before_exposed"), ctx.median_path, ctx.bound
    if sav[ctx.at] < MIN_SAVING_US:
        return []
    n_big, big_us = mp.big_gaps
    row = ctx.steps[ctx.median][b]
    unrecorded = row.unknown > row.device_wait  # no host event says why, in most of the idle
    why = (f"for a cause the capture does not record ({us_text(row.unknown)} of gaps no host "
           "event explains: steps.csv unknown_gap_us)" if unrecorded else
           "with no launch late from the host")
    return [Row(f"the critical stream of {device_word(ctx)} {b} is idle between its kernels "
                f"{why}: {us_text(mp.idle_before)} of step {ctx.median}, "
                f"{n_big} gap(s) of 1 us or more that no other stream filled holding "
                f"{number_text(min(big_us, mp.idle_before))} us of it, the rest gaps under 1 us "
                "between kernels",
                f"{device_word(ctx)} {b} stream {row.crit}",
                100.0 * mp.idle_before_exposed / ctx.window, spread(sav, ctx.at),
                knob=KERNEL_GAPS.knob["unrecorded" if unrecorded else "device"])]


FAMILY_KNOBS = PROSE["KERNEL_FAMILY"].knob

FAMILY_CANNOT_SHOW = {
    "split-K reduction": "why the backend chose split-K for these GEMMs (its autotuning results "
                         "and workspace size are not in the capture)",
    "layout transpose": "why XLA chose these layouts (the layout assignment pass is not in the "
                        "capture; the HLO shows the result only)",
    "memcpy": "which copies XLA could have avoided (buffer assignment and aliasing are not in "
              "the capture)",
    "memset": "whether the zeroing could fuse into the reduction (a compiler decision the "
              "capture does not show)",
}

KERNEL_FAMILY = PROSE["KERNEL_FAMILY"]


@cause("kernel_family", KERNEL_FAMILY, regroups=True)
def kernel_family(ctx: Context) -> list:
    """Kernel families of attribution/families.csv (split-K reductions, layout transposes,
    copies, memsets) of at least FAMILY_MIN_PCT_OF_GPU_TIME spread over at least
    FAMILY_MIN_INSTRUCTIONS instructions (a split-K reduction under one GEMM is enough:
    FAMILY_MIN_INSTRUCTIONS_OF). Its time in a step is its share of all GPU time times
    the step's compute time on its bounding GPU; the saving, an upper bound, is that time's
    exposed part (the family's kernels gone). Collectives by kind are ranked as exposed
    collectives, not here."""
    rows = []
    for f in tables(ctx.out).rows("attribution/families.csv") or []:
        name, pct = f.get("family", ""), number(f.get("pct_of_device_time"))
        n_ins = int(number(f.get("instructions")) or 0)
        if name not in FAMILY_KNOBS or pct is None or pct < FAMILY_MIN_PCT_OF_GPU_TIME or \
                n_ins < FAMILY_MIN_INSTRUCTIONS_OF.get(name, FAMILY_MIN_INSTRUCTIONS):
            continue
        share = pct / 100.0
        sav = [share * ctx.paths[n].compute * ctx.paths[n].exposure for n in ctx.chosen]
        if sav[ctx.at] < MIN_SAVING_US:
            continue
        top = [f"{ins} (program {pid})" for x in (f.get("top_instructions") or "").split(" | ")
               for pid, _, ins in [x.split("=")[0].partition(":")] if ins]
        rows.append(Row(
            f"{name} kernels take {pct:.2f}% of GPU time over "
            f"{rules.plural(n_ins, 'instruction')} (about "
            f"{us_text(share * ctx.median_path.compute)} of step {ctx.median}); largest under "
            + ", ".join(top[:3]),
            f"{name} ({rules.plural(n_ins, 'instruction')})", 100.0 * sav[ctx.at] / ctx.window,
            spread(sav, ctx.at),
            assumptions=KERNEL_FAMILY.assumptions.format(cannot_show=FAMILY_CANNOT_SHOW[name]),
            knob=FAMILY_KNOBS[name],
            extra={"family": name, "cannot_show": FAMILY_CANNOT_SHOW[name],
                   "family_device_us": number(f.get("device_us")), "instructions": n_ins}))
    return rows


# The prose instruction and Python-line rows share: how their time in a step is had, and how much
# of it is exposed (filled with the median step's exposed share of compute).
INSTRUCTION_TIME = (
    "its time in a step is its share of the program's compute and copy kernel time (ops.csv, all "
    "executions and GPUs) times that step's compute time on the GPU that ends it, and never less "
    "than its kernels at the shortest average kernel time of any instruction in this capture "
    "(where that is a few microseconds: tiny kernels)")

EXPOSED_PART = (
    "only the share of the step's compute after its last host gap is exposed ({pct:.0f}% in step "
    "{step}); the rest is hidden behind the host and would save time only once the host gaps are "
    "gone")

INSTRUCTION = PROSE["INSTRUCTION"]


def dtype_knob(dtype: str) -> str:
    """A lower precision than the instruction's own, on the matrix units (the ceiling's dtype
    names what it runs at now: an f32 GEMM may go to bf16; a bf16 one only to fp8)."""
    d = (dtype or "").lower()
    if d.startswith(("f32", "fp32", "tf32", "f64", "fp64")):
        return INSTRUCTION.knob["from f32"]
    if d.startswith(("bf16", "f16", "fp16")):
        return INSTRUCTION.knob["from bf16"]
    return INSTRUCTION.knob["lower"]


# XLA names its GEMM library calls after cuBLAS on every GPU (kGemmCallTarget "__cublas$gemm",
# kCublasLtMatmulCallTarget "__cublas$lt$matmul": xla/service/gpu/cublas_cudnn.h; the shared
# MI300X gemm capture holds __cublas$gemm): on ROCm the same call runs hipBLASLt or rocBLAS,
# which a knob must say to an AMD user.
ROCM_LIBRARY = " (XLA's name for its GEMM library call; on ROCm it runs hipBLASLt or rocBLAS)"


def backend_text(backend: str, vendor: str) -> str:
    """A GEMM backend as a knob names it: on an AMD GPU, XLA's cuBLAS-named library call with
    the library that runs it there."""
    amd = "__cublas" in backend and vendor.upper().startswith("AMD")
    return backend + ROCM_LIBRARY if amd else backend


def instruction_prose(c: dict, exposed: str, vendor: str = "",
                      dev: adapters.Adapter = adapters.ADAPTERS["GPU"]) -> tuple[str, str]:
    """An instruction row's assumptions and knob: the knob by the kind of work (attention, GEMM,
    element-wise, reduction, scatter), else by what binds it (memory bandwidth, else its dtype's
    peak), and launch size first when it runs far from its ceiling."""
    said, knobs = INSTRUCTION.assumptions, INSTRUCTION.knob
    memory = c["binding"] == "memory"
    target = said["target"].format(best=pct_text(c["best"]), by=c["best_by"]) \
        if c.get("best") else "" if c.get("best_raw") is not None else said["no target"]
    assumptions = said["row"].format(
        binding=c["binding"], method=c["method"], time=INSTRUCTION_TIME, exposed=exposed,
        target=target, ceiling=said["memory"] if memory else said["compute"].format(
            dtype=c["ceiling_dtype"] or "its dtype"))
    work = c.get("work", "").removesuffix(" backward")
    if dev.bound_knob is not None:  # the device's own words (a TPU: the MXU, Pallas blocks)
        return assumptions, (dev.kernel_knob(c["instruction"])
                             if "custom-call" in (work, c.get("opcode"))  # a Pallas call's own
                             else dev.bound_knob.get(work)
                             or dev.bound_knob["memory" if memory else "compute"])
    if work in ("attention", "gemm") and not memory or \
            work in ("elementwise", "reduction", "scatter"):
        knob = knobs[work].format(backend=backend_text(c.get("backend") or "its backend",
                                                         vendor))
    else:
        knob = knobs["memory"] if memory else knobs["compute"].format(
            dtype=dtype_knob(c["ceiling_dtype"]))
    if c["pct"] < FAR_FROM_CEILING_PCT:
        knob += "; " + knobs["far"]
    return assumptions, knob


def no_ceiling_refusal(ctx: Context, top: list) -> list:
    """The instructions without a ceiling that outweigh the listed ones' distance (at most 3):
    no saving can be estimated for them."""
    big_no = sorted((x for x in ctx.ceilings.no_ceiling if PALLAS_NO_COST_WHY not in x[2]),
                    key=lambda x: (-x[1], x[0]))[:3]  # a Pallas call's is the pallas_call row
    if big_no and (not top or big_no[0][1] > top[-1][1]["cut"]):
        return ["cannot estimate a saving for " + ", ".join(
            f"{n} ({us_text(sh * ctx.median_path.compute)} of step {ctx.median}: {why})"
            for n, sh, why, _ in big_no) + " because there is no ceiling to measure their "
            "distance to"]
    return []


def pct_text(x: float) -> str:
    """A share in a sentence: one decimal, two significant digits under 1%."""
    return f"{x:.1f}" if x >= 1 else f"{x:.2g}"


def measured_saving(c: dict, exposed_compute: float, target: float | None = None) -> float:
    """The median step's saving were the instruction to run at `target` percent of its ceiling
    (default: the best rate this capture shows for the same work), 0 where it already does."""
    target = c["best"] if target is None else target
    if not target or target <= c["pct"]:
        return 0.0
    # never past the distance to the ceiling (`cut`: which keeps the kernels' floor)
    return min(c["share"] * (1.0 - c["pct"] / target), c["cut"]) * exposed_compute


@cause("instruction", INSTRUCTION)
def instruction(ctx: Context) -> Found | list:
    """The instructions furthest from their ceilings (Ceilings), at most TOP_INSTRUCTIONS. An
    instruction's time in a step is its share of the programs' compute and copy kernel time times
    the step's compute time on its bounding GPU; its distance to the ceiling is that time times
    (1 - pct_of_ceiling/100), and its saving that distance's exposed part. Notes the distance
    hidden behind the host."""
    ce = ctx.ceilings
    if ce is None:
        return []
    at, median = ctx.at, ctx.median
    cm, exposure = ctx.median_path.compute, ctx.median_path.exposure
    exposed = EXPOSED_PART.format(pct=100 * exposure, step=median)
    claimed = claimed_keys(ctx)  # the random_bits and f64_emulated rows'
    top = [(i, c) for i, c in enumerate(ce.cands)
           if c["cut"] > 0 and c["key"] not in claimed][:TOP_INSTRUCTIONS]
    rows = []
    for i, c in top:
        sav = [c["cut"] * ctx.paths[n].compute * ctx.paths[n].exposure for n in ctx.chosen]
        if sav[at] < MIN_SAVING_US:
            continue
        assumptions, knob = instruction_prose(c, exposed, ce.vendor, device(ctx))
        reached = (f"; the same work reaches {pct_text(c['best'])}% in this capture "
                   f"({c['best_by']})" if c["best"] else "")
        rows.append(Row(
            f"{c['instruction']} takes {us_text(c['share'] * cm)} of step {median} at "
            f"{c['pct']:.1f}% of its {c['binding']} ceiling on {ce.model}{reached}",
            c["instruction"] + (f" ({c['user_frame']})" if c["user_frame"] else ""),
            100.0 * c["cut"] * cm * exposure / ctx.window, spread(sav, at),
            assumptions, knob, named=frozenset({i}),
            measured=measured_saving(c, cm * exposure, c["best_raw"])
            if c["best_raw"] is not None else None,
            target=c["best_by"] if c["best_raw"] is not None else NO_TARGET))
    listed = {i for r in rows for i in r.named}
    hidden = sum(c["cut"] for i, c in top if i not in listed) * cm
    notes = [f"not listed: the top instructions' distance to their ceilings, {us_text(hidden)} of "
             f"step {median}, is hidden behind the host (it lies before the step's last host-late "
             "gap); it would count once the host gaps are gone"] if hidden >= MIN_SAVING_US else []
    return Found(rows, notes, no_ceiling_refusal(ctx, top))


COMPILE = PROSE["COMPILE"]


def compile_per_step(ctx: Context) -> float | None:
    """The median step's XLA compile time on the host (step 1's `compile`), None without."""
    return (((ctx.s1 or {}).get("compile") or {}).get("per_step_us") or {}).get("value")


def recompiled_programs(ctx: Context, compiling: list) -> tuple[str, str]:
    """What compiles in `compiling` (step numbers), by programs.csv's programs run there: a
    module of several (a new input shape or static argument each step) -> ("shape", words); else
    one program run in every one of them, compiled again (jax.jit given a new function each
    step) -> ("same", words); ("shape", "") where programs.csv does not tell."""
    ids, steps = {}, {}  # module -> its program ids, its compiling steps
    for p in tables(ctx.out).rows("attribution/programs.csv") or []:
        if ran := rules.parse_ranges(p.get("steps")) & set(compiling):
            ids.setdefault(p["module"], set()).add(p["program_id"])
            steps.setdefault(p["module"], set()).update(ran)
    if new := max((m for m in ids if len(ids[m]) > 1), key=lambda m: len(ids[m]), default=None):
        return "shape", (f"; the steps run {len(ids[new])} programs of {new}, a new one as it "
                         "compiles (a new input shape or static argument)")
    if len(compiling) > 1 and (same := [m for m in ids if steps[m] >= set(compiling)]):
        return "same", (f"; the steps run one program of {' and one of '.join(same)} in all "
                        f"{len(compiling)} of them, its HLO the same each time it compiles (a "
                        "cache miss, not a new shape)")
    return "shape", ""


@cause("compile", COMPILE, explains=("host_gap", "idle_between_steps"))
def compile_in_step(ctx: Context) -> list:
    """XLA compiling on the host inside the steps (step 1's `compile`): a new shape, or a
    cache miss, paid every step: its saving the compile time of the median step; or in a few
    steps after steps that ran without (a recompile: a new shape met mid-run), which the
    median step leaves out: its saving the compiles' total over the steps used, of their mean
    window (the row's own step, `step_basis`; outside the combined saving)."""
    c = (ctx.s1 or {}).get("compile") or {}
    per = (c.get("per_step_us") or {}).get("value")
    later = recompiled(ctx.s1, sorted({*ctx.chosen, *(n for n in c.get("compiling_steps") or ()
                                                        if n in ctx.steps)}))
    if later and c.get("total_us"):  # left out of the steps used
        frames = step_frames(ctx.steps, sorted({*ctx.chosen, *later}), rules.step_gpus(ctx.s1))
        windows = [f.window for f in frames.values()]
        mean, total = sum(windows) / len(windows), min(c["total_us"], sum(windows))
        each = total / len(windows)
        if each < MIN_SAVING_US:
            return []
        kind, said = recompiled_programs(ctx, later)
        return [Row(f"XLA recompiles mid-run: {us_text(total)} of compilation in step "
                    f"{', '.join(map(str, later))}, after steps that ran without (a new input "
                    f"shape or static argument), {100 * total / sum(windows):.1f}% of the "
                    f"{len(windows)} steps' time: {us_text(each)} a step on average, against "
                    f"a median step of {us_text(ctx.step['value'])}{said}", "the host",
                    100.0 * each / mean, {"value": each, "min": each, "max": each},
                    knob=COMPILE.knob[kind],
                    extra={"step_basis": {"value": mean, "min": min(windows),
                                          "max": max(windows)}})]
    if not per or per < MIN_SAVING_US:
        return []
    per = min(per, ctx.window)  # the median step's window at most
    f = c["per_step_us"]
    kind, said = recompiled_programs(ctx, c.get("compiling_steps") or ctx.chosen)
    return [Row(f"XLA compiles inside the step: {us_text(per)} of compilation a step (median; "
                f"{c['steps_with_compile']} of {c['steps']} steps compile), a new shape or a "
                f"cache miss each time{said}", "the host", 100.0 * per / ctx.window,
                {"value": per, "min": min(f.get("min", per), per), "max": f.get("max", per)},
                knob=COMPILE.knob[kind])]


# ---------------------------------------------------------------- a TPU's own changes

def device_word(ctx: Context) -> str:
    """What a row calls the device: a TPU's core, else a GPU."""
    return "TPU core" if tpu_capture(ctx) else "GPU"


def device(ctx: Context) -> adapters.Adapter:
    """The adapter of the capture's device (step 0's device record, else step 1's joins)."""
    return adapters.of_results(tables(ctx.out).json("capture_info.json"), ctx.s1)


def tpu_capture(ctx: Context) -> bool:
    return device(ctx).kind == "TPU"


def per_step_us(ctx: Context) -> dict:
    """(program id, instruction) -> its time in the median step (ops.csv's time over the
    program's executions, programs.csv, times the program's executions in that step on the
    device that ends it, steps.csv `programs`)."""
    t = tables(ctx.out)
    progs = {p["program_id"]: p for p in t.rows("attribution/programs.csv") or []}
    row = next((r for r in t.rows("steps.csv") or [] if r["step"] == str(ctx.median)
                and r["device"] == str(ctx.bound)), {})
    runs = step_programs(row.get("programs") or "")
    out = {}
    for r in t.rows("attribution/ops.csv") or []:
        p = progs.get(r["program_id"])
        n = number(p.get("executions")) if p else None
        k = runs.get(p["module"], 0) if p else 0
        if n and k:
            out[(r["program_id"], r["instruction"])] = (number(r["device_us"]) or 0.0) / n * k
    return out


def ops_matching(ctx: Context, test: Callable) -> tuple[list, set, float]:
    """ops.csv's rows, the (program id, instruction) keys of those `test` accepts, and their
    time in the median step (per_step_us)."""
    ops = tables(ctx.out).rows("attribution/ops.csv") or []
    keys = {(r["program_id"], r["instruction"]) for r in ops if test(r)}
    times = per_step_us(ctx)
    return ops, keys, sum(times.get(k, 0.0) for k in sorted(keys))


STEP_PROGRAM_RE = re.compile(r"^(.*) x(\d+)$")


def step_programs(text: str) -> dict:
    """steps.csv `programs` (`jit_a x1; jit_b x2`) -> module -> its runs in the step."""
    return {m.group(1): int(m.group(2)) for part in text.split(";")
            if (m := STEP_PROGRAM_RE.match(part.strip()))}


def stacking(ops: list) -> list:
    """ops.csv rows of a scan's stacking: instructions inside the body of a while loop that is
    itself differentiated (their op_name under `/while/body/`, a `jvp(` before it: residuals
    kept for the backward; a lax.map's results, or a loop of its own gradients, are not) that
    are dynamic-update-slice fusions; each as ((program id, instruction), whether its own work
    is the stacking: its op_name ends in the update)."""
    return [((r["program_id"], r["instruction"]), op.endswith("dynamic_update_slice"))
            for r in ops if 0 <= (op := r.get("op_name") or "").find("jvp(") < op.find(
                "/while/body/") and ("dynamic-update-slice" in r["instruction"]
                                     or op.endswith("dynamic_update_slice"))]


def top_lines(ops: list, keys: set, n: int = 3) -> str:
    """The Python lines (ops.csv user_frame) holding the most time of the instructions `keys`."""
    lines: dict = {}
    for r in ops:
        if (r["program_id"], r["instruction"]) in keys and r.get("user_frame"):
            lines[r["user_frame"]] = lines.get(r["user_frame"], 0.0) + float(r["device_us"] or 0)
    top = sorted(lines, key=lambda k: -lines[k])[:n]
    return ", ".join(top)


SCAN_STACKING = PROSE["SCAN_STACKING"]


@cause("scan_stacking", SCAN_STACKING, compute=True)
def scan_stacking(ctx: Context) -> list:
    """A TPU's scan (a while loop's body) stacking each iteration's residuals for the backward
    pass: the dynamic-update-slice fusions inside the body (`stacking`), their
    time in the median step."""
    if not tpu_capture(ctx):
        return []
    times = per_step_us(ctx)
    found = stacking(tables(ctx.out).rows("attribution/ops.csv") or [])
    high = sum(times.get(k, 0.0) for k, _ in found)
    low = sum(times.get(k, 0.0) for k, pure in found if pure)
    if high < MIN_SAVING_US:
        return []
    lines = top_lines(tables(ctx.out).rows("attribution/ops.csv") or [], {k for k, _ in found})
    return [Row(f"the scan's stacked residuals: {rules.plural(len(found), 'fusion')} of "
                f"dynamic-update-slice inside a while loop's body take {us_text(high)} of step "
                f"{ctx.median} ({us_text(low)} of it in fusions whose own work is the stacking): "
                "lax.scan copies each iteration's residuals into one stacked buffer for the "
                "backward pass", lines or "the scanned body", 100.0 * high / ctx.window,
                spread([high] * len(ctx.chosen), ctx.at), measured=low)]


# an instruction that changes a layout: a copy or transpose, or a fusion XLA named after one (a
# fusion's name begins with its root's opcode); not copy-start/copy-done (asynchronous copies)
LAYOUT_COPY_RE = re.compile(r"^(copy|transpose)([._]|$)")


LAYOUT_COPIES = PROSE["LAYOUT_COPIES"]
# ops.csv argument_layout: a copy of the program's argument in (or its result out), the order
# of dimensions the program computes in, and whether the argument is donated
ARGUMENT_LAYOUT_RE = re.compile(
    r"^(?P<way>in|out) (?P<order>\d+(?:,\d+)*)(?P<donated> not donated)?$")
# the argument copies take at least this share of the layout copies' time: their knob first
ARGUMENTS_MAJORITY = 0.5


@cause("layout_copies", LAYOUT_COPIES, compute=True)
def layout_copies(ctx: Context) -> list:
    """Copies and transposes that change a layout (LAYOUT_COPY_RE; not a copy into the same
    layout, ops.csv moves_layout: a buffer copy, an instruction row's), where the device has a
    knob for them (adapters.Adapter.layout_knob): their time in the median step, the Python
    lines with the most of it."""
    knob = device(ctx).layout_knob
    if not knob:
        return []
    ops, keys, t = ops_matching(ctx, lambda r: LAYOUT_COPY_RE.match(r["instruction"])
                                and r["moves_layout"] != "no")
    if t < MIN_SAVING_US:
        return []
    what = rules.plural(len(keys), "copy or transpose", "copies or transposes")
    cause = (f"layout copies: {what} take {us_text(t)} of step {ctx.median}, moving data to "
             "another layout between the instructions that produce and consume it")
    assumptions = LAYOUT_COPIES.assumptions["between"]
    times = per_step_us(ctx)
    args = [r for r in ops if (r["program_id"], r["instruction"]) in keys
            and ARGUMENT_LAYOUT_RE.match(r.get("argument_layout") or "")]
    at = sum(times.get((r["program_id"], r["instruction"]), 0.0) for r in args)
    if at >= ARGUMENTS_MAJORITY * t:  # mostly the program's own arguments and results
        ms = [ARGUMENT_LAYOUT_RE.match(r["argument_layout"]) for r in args]
        orders = sorted({m["order"] for m in ms})
        names = sorted({r["op_name"] for r, m in zip(args, ms, strict=True)
                        if m["way"] == "in" and r["op_name"]})
        order = " or ".join(f"({o.replace(',', ', ')})" for o in orders)
        back = " and its results back out" if any(m["way"] == "out" for m in ms) else ""
        cause += (f"; {len(args)} of them ({us_text(at)}) move the program's arguments"
                  + (f" ({', '.join(names[:4])})" if names else "") + " into the layout it "
                  f"computes in{back}: dimensions in the order {order}")
        donate = any(m["donated"] for m in ms)
        knob = (f"keep those arrays in the order the program computes in: transpose them once, "
                f"before the loop, to dimensions {order} (jnp.transpose, with the indexing and "
                "einsums written for that order), so that no copy moves them in or out"
                + ("; and donate them (jax.jit donate_argnums), so that the program updates "
                   "them in place" if donate else "") + "; the other copies: " + knob)
        assumptions = LAYOUT_COPIES.assumptions["arguments"]
    return [Row(cause, top_lines(ops, keys) or "the programs' copies", 100.0 * t / ctx.window,
                spread([t] * len(ctx.chosen), ctx.at), assumptions=assumptions, knob=knob)]


# The JAX primitives that call a host function from inside a program (jax.debug.print is
# debug_print; the old host_callback module's is outside_call): the op_name (JAX name stack) of
# every instruction they lower to (a TPU's send, recv and their dones; a GPU's custom call) ends
# in one of them.
HOST_CALLBACK_RE = re.compile(
    r"(?:^|/)(io_callback|pure_callback|debug_callback|debug_print|outside_call)$")

HOST_CALLBACK = PROSE["HOST_CALLBACK"]


@cause("host_callback", HOST_CALLBACK, compute=True)
def host_callback(ctx: Context) -> list:
    """Host callbacks inside a program (HOST_CALLBACK_RE on ops.csv op_name): the device waits
    on the host function in the middle of the program; their time in the median step, the
    Python lines that call them."""
    ops, keys, t = ops_matching(ctx, lambda r: HOST_CALLBACK_RE.search(r.get("op_name") or ""))
    if t < MIN_SAVING_US:
        return []
    kinds = sorted({HOST_CALLBACK_RE.search(r["op_name"]).group(1) for r in ops
                    if (r["program_id"], r["instruction"]) in keys})
    return [Row(f"host callbacks inside the program: {' and '.join(kinds)} "
                f"{'takes' if len(kinds) == 1 else 'take'} {us_text(t)} of step "
                f"{ctx.median} on the {device_word(ctx)}, which waits on the host function "
                "mid-program",
                top_lines(ops, keys) or "the programs' callbacks", 100.0 * t / ctx.window,
                spread([t] * len(ctx.chosen), ctx.at))]


# jax.checkpoint's scope in an op_name (JAX's name stack: `checkpoint`, older `remat`,
# `rematted_computation`); a backward without recomputation does twice the forward's matrix
# work (each matmul's two gradients), so more than REMAT_MIN_RATIO times it is recomputation
REMAT_RE = re.compile(r"(?:^|[/(])(?:checkpoint|remat|rematted_computation)(?:[/)]|$)")
REMAT_MIN_RATIO = 2.2

REMAT = PROSE["REMAT"]


@cause("remat", REMAT, compute=True)
def remat(ctx: Context) -> list:
    """The backward pass recomputing the forward under jax.checkpoint (REMAT_RE in a backward
    instruction's op_name): where the backward's matrix FLOPs (roofline.csv `work` gemm or
    convolution, ops.csv `phase`) pass REMAT_MIN_RATIO times the forward's, the share past
    twice is recomputation; that share of the backward's matrix time in the median step."""
    t = tables(ctx.out)
    ops = {(r["program_id"], r["instruction"]): r for r in t.rows("attribution/ops.csv") or []}
    flops = {"forward": 0.0, "backward": 0.0}
    back, marked = set(), False
    for r in t.rows("roofline.csv") or []:
        o = ops.get((r["program_id"], r["instruction"]))
        if o is None or r["work"] not in ("gemm", "convolution") or o["phase"] not in flops:
            continue
        flops[o["phase"]] += number(r["total_flops"]) or 0.0
        if o["phase"] == "backward":
            back.add((r["program_id"], r["instruction"]))
            marked = marked or bool(REMAT_RE.search(o["op_name"]))
    fwd, bwd = flops["forward"], flops["backward"]
    if not marked or fwd <= 0 or bwd <= REMAT_MIN_RATIO * fwd:
        return []
    share = (bwd - 2 * fwd) / bwd
    times = per_step_us(ctx)
    high = share * sum(times.get(k, 0.0) for k in sorted(back))
    if high < MIN_SAVING_US:
        return []
    return [Row(f"rematerialisation: under jax.checkpoint the backward pass does "
                f"{bwd / fwd:.2f}x the forward's matrix work (2x without recomputation), so "
                f"{100 * share:.0f}% of it, {us_text(high)} of step {ctx.median}, recomputes "
                "the forward's matmuls",
                top_lines(list(ops.values()), back) or "the checkpointed functions",
                100.0 * high / ctx.window, spread([high] * len(ctx.chosen), ctx.at))]


MATMUL_PRECISION = PROSE["MATMUL_PRECISION"]


@cause("matmul_precision", MATMUL_PRECISION, compute=True)
def matmul_precision(ctx: Context) -> list:
    """A TPU's f32 matmuls at HIGH or HIGHEST precision (roofline.csv `passes`: the MXU's bf16
    passes the capture's FLOPs count): at one pass each runs its passes' share of its time in
    the median step, no faster than its HBM bytes at the bandwidth."""
    t = tables(ctx.out)
    times = per_step_us(ctx)
    keys, high, passes = set(), 0.0, set()
    for r in t.rows("roofline.csv") or []:
        p, key = number(r.get("passes")), (r["program_id"], r["instruction"])
        us, total = times.get(key, 0.0), number(r["device_us"])
        if not p or p < 2 or not us or not total:
            continue
        bw = number(r["memory_ceiling_bytes_per_s"])
        memory = (number(r["total_bytes"]) or 0.0) / bw * 1e6 / total if bw else 0.0
        high += us * (1.0 - max(1.0 / p, min(memory, 1.0)))
        keys.add(key)
        passes.add(int(p))
    if high < MIN_SAVING_US:
        return []
    ops = t.rows("attribution/ops.csv") or []
    said = " and ".join(PASS_WORDS.get(p, f"{p} bf16 passes") for p in sorted(passes))
    return [Row(f"f32 matmuls at {said}: {len(keys)} matmuls run each as several bf16 passes "
                f"on the MXU; at one pass they would save {us_text(high)} of step {ctx.median}",
                top_lines(ops, keys) or "the f32 matmuls", 100.0 * high / ctx.window,
                spread([high] * len(ctx.chosen), ctx.at))]


RANDOM_BITS = PROSE["RANDOM_BITS"]


def claimed_keys(ctx: Context, threefry: bool = True, f64: bool = True) -> set:
    """The (program id, instruction) of ops.csv's instructions that compute threefry bits
    (random_bits), and of those of programs that emulate float64 (f64_programs): rows of their
    own, no instruction rows."""
    progs = f64_programs(ctx) if f64 else {}
    return {(r["program_id"], r["instruction"]) for r in
            tables(ctx.out).rows("attribution/ops.csv") or []
            if (threefry and r.get("random_bits")) or r["program_id"] in progs}


F64_EMULATED = PROSE["F64_EMULATED"]
# a program whose arguments are at least this share (percent) float64: it computes in x64 mode
F64_ARGUMENT_PCT = 50.0


def f64_programs(ctx: Context) -> dict:
    """programs.csv's programs (id -> row) whose arguments are mostly float64, on a device that
    emulates f64 (adapters.Adapter.emulates_f64)."""
    if not device(ctx).emulates_f64:
        return {}
    return {r["program_id"]: r for r in tables(ctx.out).rows("attribution/programs.csv") or []
            if (number(r.get("f64_argument_pct")) or 0.0) >= F64_ARGUMENT_PCT}


@cause("f64_emulated", F64_EMULATED, compute=True)
def f64_emulated(ctx: Context) -> list:
    """Programs that compute in float64 on a device without f64 arithmetic (f64_programs):
    their instructions' whole time in the median step, an upper bound."""
    progs = f64_programs(ctx)
    if not progs:
        return []
    ops, keys, t = ops_matching(ctx, lambda r: r["program_id"] in progs)
    if t < MIN_SAVING_US:
        return []
    named = ", ".join(f"{r['module']} {float(r['f64_argument_pct']):.0f}%"
                      for r in list(progs.values())[:3])
    return [Row(f"float64 on a chip without f64 arithmetic: the programs' arguments are mostly "
                f"float64 ({named} of their bytes; jax_enable_x64), and XLA emulates each f64 "
                f"operation with several f32 ones: their {rules.plural(len(keys), 'instruction')} "
                f"take {us_text(t)} of step {ctx.median}", top_lines(ops, keys) or named,
                100.0 * t / ctx.window, spread([t] * len(ctx.chosen), ctx.at))]


@cause("random_bits", RANDOM_BITS)
def random_bits(ctx: Context) -> list:
    """The instructions that compute jax.random's threefry bits (ops.csv random_bits): their
    distance to their ceilings in the median step (as the instruction rows count it, which
    leave them to this row), the rate the same work reaches elsewhere as the measured target."""
    ce, keys = ctx.ceilings, claimed_keys(ctx, f64=False)
    if ce is None or not keys:
        return []
    mine = [(i, c) for i, c in enumerate(ce.cands) if c["key"] in keys]
    cm, exposure = ctx.median_path.compute, ctx.median_path.exposure
    sav = [sum(c["cut"] for _, c in mine) * ctx.paths[n].compute * ctx.paths[n].exposure
           for n in ctx.chosen]
    if sav[ctx.at] < MIN_SAVING_US:
        return []
    took = sum(c["share"] for _, c in mine) * cm
    reached = [c for _, c in mine if c["best_raw"] is not None]
    pct = 100.0 * sum(c["share"] * c["pct"] / 100.0 for _, c in mine) / \
        max(sum(c["share"] for _, c in mine), 1e-12)
    ops = tables(ctx.out).rows("attribution/ops.csv") or []
    return [Row(f"jax.random's threefry bits: {rules.plural(len(mine), 'instruction')} that "
                f"compute them (fused with the work that uses them) take {us_text(took)} of "
                f"step {ctx.median} at {pct:.1f}% of their ceilings (time-weighted)",
                top_lines(ops, {c["key"] for _, c in mine}) or "the random draws",
                100.0 * sav[ctx.at] / ctx.window, spread(sav, ctx.at),
                named=frozenset(i for i, _ in mine),
                measured=sum(measured_saving(c, cm * exposure, c["best_raw"]) for c in reached)
                if reached else None,
                target=NO_TARGET if not reached else "the same work's best rate in this capture")]


INDEPENDENT_LOOP = PROSE["INDEPENDENT_LOOP"]


@cause("independent_loop", INDEPENDENT_LOOP, compute=True)
def independent_loop(ctx: Context) -> list:
    """Each while loop whose iterations are independent (ops.csv `independent_loop`: a lax.map,
    a scan with no carry): the loop runs one small iteration at a time; vectorised, the loop's
    own time goes and each body instruction takes its time at its ceilings (`vectorised_us`);
    one with no roofline point saves nothing (a matmul of several passes: matmul_precision)."""
    t = tables(ctx.out)
    times = per_step_us(ctx)
    roof = {(r["program_id"], r["instruction"]): r for r in t.rows("roofline.csv") or []
            if (number(r.get("passes")) or 0) < 2}
    ops = t.rows("attribution/ops.csv") or []
    runs = {(r["program_id"], r["instruction"]): number(r.get("runs")) for r in ops}
    loops: dict = {}
    for r in ops:
        if r.get("independent_loop"):
            key, loop = (r["program_id"], r["instruction"]), (r["program_id"],
                                                               r["independent_loop"])
            e = loops.setdefault(loop, [0.0, 0.0, set(), 0.0])
            us = times.get(key, 0.0)
            e[0] += us
            e[2].add(key)
            if key == loop:
                e[1] += us
                continue
            fast = vectorised_us(roof.get(key), number(r.get("invariant_bytes")) or 0.0,
                                 runs.get(loop))
            if fast is not None and number(r["device_us"]):
                e[1] += us * max(0.0, 1.0 - fast / number(r["device_us"]))
            e[3] = max(e[3], (runs.get(key) or 0) / (runs.get(loop) or 1))
    rows = []
    for (_, name), (total, high, keys, iters) in sorted(loops.items(), key=lambda kv: -kv[1][1]):
        if high < MIN_SAVING_US:
            continue
        body = len(keys) - any(k[1] == name for k in keys)
        rows.append(Row(
            f"a loop of independent iterations: {name}"
            + (f", {iters:,.0f} iterations a run" if iters >= 2 else "")
            + ", whose iterations feed no value to each other (a lax.map, a fori_loop writing "
            "each result into its own slice, a scan with no carry); it and its body take "
            f"{us_text(total)} a step (its program's mean run), one small iteration at a time; "
            f"vectorised (its {rules.plural(body, 'instruction')} at their ceilings, each whole "
            f"array read once, no loop) it would save {us_text(high)}",
            top_lines(ops, keys) or name, 100.0 * high / ctx.window,
            spread([high] * len(ctx.chosen), ctx.at), target=NO_TARGET))
    return rows


def vectorised_us(roof: dict | None, invariant: float, loop_runs: float | None) -> float | None:
    """A loop body instruction's time over the capture, vectorised: its FLOPs at its compute
    ceiling, or its HBM bytes at the bandwidth with the arrays it rereads each iteration
    (`invariant`, ops.csv invariant_bytes, at most its bytes a run) read once a loop run; None
    where roofline.csv gives it no ceiling."""
    if roof is None or number(roof.get("pct_of_ceiling")) is None:
        return None
    flops, compute = number(roof.get("total_flops")) or 0.0, number(
        roof.get("compute_ceiling_flop_per_s"))
    total, bw = number(roof.get("total_bytes")) or 0.0, number(
        roof.get("memory_ceiling_bytes_per_s"))
    runs, per_run = number(roof.get("runs")) or 0.0, number(roof.get("run_bytes")) or 0.0
    again = min(invariant, per_run) * max(0.0, runs - (loop_runs or runs))
    return max(flops / compute if compute else 0.0,
               max(0.0, total - again) / bw if bw else 0.0) * 1e6


PASS_WORDS = {3: "HIGH precision (3 bf16 passes)", 6: "HIGHEST precision (6 bf16 passes)"}


PALLAS_NO_COST = PROSE["PALLAS_NO_COST"]


@cause("pallas_call", PALLAS_NO_COST, compute=True)
def pallas_call(ctx: Context) -> list:
    """A TPU's Pallas calls the capture gives no cost (no cost_estimate): ranked by their time,
    the saving an upper bound, the knob their block sizes (the instruction cause costs those
    with an estimate)."""
    if ctx.ceilings is None or not tpu_capture(ctx):
        return []
    rows = []
    for name, share, why, frame in ctx.ceilings.no_ceiling:
        if PALLAS_NO_COST_WHY not in why:
            continue
        t = [share * ctx.paths[n].compute for n in ctx.chosen]
        if t[ctx.at] < MIN_SAVING_US:
            continue
        rows.append(Row(f"{name}, a Pallas call, takes {us_text(t[ctx.at])} of step "
                        f"{ctx.median}; the capture gives it no FLOPs or bytes (no "
                        "cost_estimate), so its share of the MXU's peak is unknown",
                        name + (f" ({frame})" if frame else ""), 100.0 * t[ctx.at] / ctx.window,
                        spread(t, ctx.at), knob=device(ctx).kernel_knob(name)
                        + "; pass pl.CostEstimate(flops=..., bytes_accessed=...) to "
                        "pallas_call so a capture shows its share of the peak"))
    return rows


TOO_SMALL = PROSE["TOO_SMALL"]


@cause("too_small", TOO_SMALL)
def too_small(ctx: Context) -> list:
    """A TPU step of one program run too small for the chip: the device busy under half the
    step's window and the host's side of it under TOO_SMALL_HOST_US (a fixed per-dispatch
    cost, not host work such as an input pipeline, which the host-gap row names)."""
    if not tpu_capture(ctx) or ctx.executions[ctx.at] != 1:
        return []
    side = [ctx.paths[n].host_late + ctx.paths[n].idle_between for n in ctx.chosen]
    w = ctx.window
    if side[ctx.at] < w * TOO_SMALL_HOST_SHARE or side[ctx.at] >= TOO_SMALL_HOST_US:
        return []
    return [Row(f"the step is too small for the chip: one program run a step, the device busy "
                f"{us_text(w - side[ctx.at])} of a {us_text(w)} step window; the host's fixed "
                f"cost of each dispatch and wait, {us_text(side[ctx.at])}, is the rest",
                f"TPU core {ctx.bound}", 100.0 * side[ctx.at] / w, spread(side, ctx.at),
                knob=TOO_SMALL.knob["waits" if ((ctx.s1 or {}).get("between_steps") or {})
                                    .get("cause") == "waiting on a result" else "steps"])]


MANY_ARGUMENTS = PROSE["MANY_ARGUMENTS"]
# a program taking at least this many arrays costs the host per array at every call
MANY_ARGUMENTS_MIN = 256
# a dispatch's fixed cost and the wait on its result where the host blocks each step (1.0 to
# 1.4 ms measured on a TPU v5e; too_small's): the host side that stays with few arguments
DISPATCH_FIXED_US = 1000.0


@cause("many_arguments", MANY_ARGUMENTS, explains=("idle_between_steps", "host_gap"))
def many_arguments(ctx: Context) -> list:
    """A program of the median step taking MANY_ARGUMENTS_MIN arrays or more (programs.csv
    arguments) in a step whose host side (host-late and idle between steps) is at least half
    its window: that side less DISPATCH_FIXED_US a run of the step's programs."""
    runs = step_programs(median_row(ctx).get("programs") or "")
    args = {}
    for p in tables(ctx.out).rows("attribution/programs.csv") or []:
        if p["module"] in runs and (n := number(p.get("arguments"))):
            args[p["module"]] = max(args.get(p["module"], 0), int(n))
    many = {m: n for m, n in args.items() if n >= MANY_ARGUMENTS_MIN}
    side = [ctx.paths[n].host_late + ctx.paths[n].idle_between for n in ctx.chosen]
    if not many or side[ctx.at] < 0.5 * ctx.window:
        return []
    fixed = DISPATCH_FIXED_US * sum(runs.values())
    sav = [max(0.0, v - fixed) for v in side]
    if sav[ctx.at] < MIN_SAVING_US:
        return []
    named = ", ".join(f"{m} {n:,}" for m, n in sorted(many.items(), key=lambda kv: -kv[1]))
    return [Row(f"the step's programs take many arrays ({named} arguments): the host flattens, "
                f"checks and hands each to the runtime at every call, and a block on the "
                f"results waits on each; the host's side of step {ctx.median} is "
                f"{us_text(side[ctx.at])} of its {us_text(ctx.window)}",
                "the host", 100.0 * sav[ctx.at] / ctx.window, spread(sav, ctx.at))]


GEMM_BACKEND = PROSE["GEMM_BACKEND"]


def backend_family(backend: str) -> str:
    """A backend's family for comparing GEMMs: `library` (any library call), `triton`, or the
    backend as it is."""
    return "library" if backend.startswith("library") else backend


@cause("gemm_backend", GEMM_BACKEND)
def gemm_backend(ctx: Context) -> list:
    """Where the same GEMM work (compute-bound, same ceiling dtype, FLOPs a run within
    rules.SAME_SIZE_FACTOR) runs on two backends in the capture (a library call and a Triton
    fusion), one direction per dtype: toward the backend whose best GEMM, counted whole (a
    Triton GEMM with the split-K reduction that adds its partial sums), reaches the higher
    share of the ceiling; a row for the other backend's GEMMs below that rate, each saving its
    whole time's distance to it (measured on this GPU). Never both directions: that is one
    knob told two ways."""
    ce = ctx.ceilings
    if ce is None:
        return []
    gemms = [(i, c) for i, c in enumerate(ce.cands)
             if c.get("work") == "gemm" and c["binding"] == "compute" and c.get("backend")
             and c.get("flops")]
    rows = []
    for dtype in sorted({c["ceiling_dtype"] for _, c in gemms}):
        same = [(i, c) for i, c in gemms if c["ceiling_dtype"] == dtype]
        best = {}
        for _, c in same:
            fam = backend_family(c["backend"])
            best[fam] = max(best.get(fam, 0.0), whole_pct(c))
        if len(best) < 2:
            continue
        fast = max(sorted(best), key=lambda f: best[f])
        for slow in sorted(best):
            if slow != fast:
                rows += backend_row(ctx, same, slow, fast)
    return rows


def whole_pct(c: dict) -> float:
    """A GEMM's share of its ceiling counted whole: its FLOPs over its own time and that of the
    split-K reductions that add its partial sums (ops.csv split_k_of)."""
    return c["pct"] * c["share"] / (c["share"] + c.get("split_k", 0.0))


def backend_row(ctx: Context, same: list, slow: str, fast: str) -> list:
    """The row for the GEMMs of backend family `slow` that the `fast` family's GEMMs of a
    similar size outrun, counted whole (whole_pct); none where none does or the saving is under
    MIN_SAVING_US."""
    mine, named, target_by = [], set(), {}
    for i, c in same:
        if backend_family(c["backend"]) != slow:
            continue
        near = rules.SAME_SIZE_FACTOR
        others = [o for _, o in same if backend_family(o["backend"]) == fast
                  and c["flops"] / near <= o["flops"] <= c["flops"] * near]
        best = max(others, key=whole_pct, default=None)
        if best is None or whole_pct(best) <= whole_pct(c):
            continue
        mine.append((c, best))
        named.add(i)
        target_by[best["instruction"]] = best
    if not mine:
        return []

    def saving(c: dict, b: dict, scale: float) -> float:
        whole = c["share"] + c.get("split_k", 0.0)
        return min(whole * (1.0 - whole_pct(c) / whole_pct(b)),
                   c["cut"] + c.get("split_k", 0.0)) * scale

    per_step = [sum(saving(c, b, ctx.paths[n].compute * ctx.paths[n].exposure)
                    for c, b in mine) for n in ctx.chosen]
    if per_step[ctx.at] < MIN_SAVING_US:
        return []
    top = max(target_by.values(), key=whole_pct)
    lo, hi = (f(whole_pct(c) for c, _ in mine) for f in (min, max))
    names = ", ".join(c["instruction"] for c, _ in mine[:4]) + (" ..." if len(mine) > 4 else "")
    knob = GEMM_BACKEND.knob.get({("triton", "library"): "to library",
                          ("library", "triton"): "to triton"}.get((slow, fast), "other"))
    knob = knob.format(target=backend_text(mine[0][0]["backend"].removeprefix("library "),
                                           ctx.ceilings.vendor), fast=fast, slow=slow)
    cm = ctx.median_path.compute
    whole = any(c.get("split_k") for c, _ in mine)
    return [Row(
        f"the {fast} GEMM {top['instruction']} does the same work ({top['flops'] / 1e9:,.1f} "
        f"GFLOP a run, {mine[0][0]['ceiling_dtype']}) at {whole_pct(top):.1f}% of its ceiling "
        f"where the {slow} GEMMs {names} reach "
        f"{f'{lo:.1f}' if lo == hi else f'{lo:.1f}-{hi:.1f}'}%"
        + (" counted with their split-K reductions" if whole else "")
        + f" ({number_text(sum(c['share'] + c.get('split_k', 0.0) for c, _ in mine) * cm)} us "
        f"of step {ctx.median})",
        f"{slow} GEMMs ({len(mine)} instructions)", 100.0 * per_step[ctx.at] / ctx.window,
        spread(per_step, ctx.at),
        GEMM_BACKEND.assumptions.format(time=INSTRUCTION_TIME, exposed=EXPOSED_PART.format(
            pct=100 * ctx.median_path.exposure, step=ctx.median)),
        knob, named=frozenset(named), measured=statistics.median(per_step),
        target=top["instruction"])]


PYTHON_LINE = PROSE["PYTHON_LINE"]


@cause("python_line", PYTHON_LINE, regroups=True)
def python_line(ctx: Context) -> list:
    """The Python lines whose instructions are furthest from their ceilings, at most TOP_LINES:
    the instructions' kernel time grouped by their user frame (never added to the instruction
    rows); the time of their instructions without a ceiling is said, not counted."""
    ce = ctx.ceilings
    if ce is None:
        return []
    lines: dict = {}
    for i, c in enumerate(ce.cands):
        if c["user_frame"]:
            ln = lines.setdefault(c["user_frame"], {"cut": 0.0, "share": 0.0, "named": set()})
            ln["cut"] += c["cut"]
            ln["share"] += c["share"]
            ln["named"].add(i)
    no_line: dict = {}
    for _, sh, _, frame in ce.no_ceiling:
        if frame:
            no_line[frame] = no_line.get(frame, 0.0) + sh
    at, median, said = ctx.at, ctx.median, PYTHON_LINE.assumptions
    cm, exposure = ctx.median_path.compute, ctx.median_path.exposure
    tpu = tpu_capture(ctx)  # no Triton there
    exposed = EXPOSED_PART.format(pct=100 * exposure, step=median)
    rows = []
    for frame, ln in sorted(lines.items(), key=lambda kv: (-kv[1]["cut"], kv[0]))[:TOP_LINES]:
        sav = [ln["cut"] * ctx.paths[n].compute * ctx.paths[n].exposure for n in ctx.chosen]
        if sav[at] < MIN_SAVING_US:
            continue
        missing = no_line.get(frame, 0.0) * cm
        no_ceiling = said["no ceiling"].format(us=number_text(missing), step=median) \
            if missing >= MIN_SAVING_US else ""
        rows.append(Row(
            f"the instructions of {frame.split(' ')[0]} ({len(ln['named'])} with a ceiling) take "
            f"{us_text(ln['share'] * cm)} of step {median}, {us_text(ln['cut'] * cm)} of it above "
            "their ceilings",
            frame, 100.0 * ln["cut"] * cm * exposure / ctx.window, spread(sav, at),
            said["row"].format(no_ceiling=no_ceiling, time=INSTRUCTION_TIME, exposed=exposed),
            knob=PYTHON_LINE.knob.replace("Pallas/Triton", "Pallas") if tpu else None,
            named=frozenset(ln["named"])))
    return rows


IDLE_BETWEEN_STEPS = PROSE["IDLE_BETWEEN_STEPS"]

# The knob to test first by what step 1 found in that idle (skip_stats.json between_steps.cause);
# any other cause takes the Prose's.
IDLE_BETWEEN_KNOBS = {
    "waiting on a result": (
        "async dispatch: stop blocking on every step's result (block_until_ready, reading the "
        "loss or a metric each step); read results every N steps so the next step dispatches "
        "while this one runs; then the host's per-step Python work off the step's path"),
    "input pipeline": (
        "input pipeline prefetching (prepare and device_put the next batch while this step "
        "runs), then async dispatch (no host synchronisation every step)"),
    "host work between steps": (
        "the host's work named there off the step's path: array work on the step's results (a "
        "metric, an argmax, a conversion to numpy) inside the jitted step, so that only its "
        "small result comes to the host; other per-step Python work on a thread beside the "
        "device's work, or every N steps; then async dispatch (no host synchronisation every "
        "step)"),
}


def median_row(ctx: Context) -> dict:
    """steps.csv's row of the median step on its bounding device ({} where none)."""
    return next((r for r in tables(ctx.out).rows("steps.csv") or []
                 if r["step"] == str(ctx.median) and r["device"] == str(ctx.bound)), {})


def between_events(ctx: Context) -> list:
    """The host events in the idle after the median step on its bounding device (steps.csv
    between_host_events), largest first: (name, us) pairs."""
    return rules.parse_host_events(median_row(ctx).get("between_host_events"))


@cause("idle_between_steps", IDLE_BETWEEN_STEPS)
def idle_between_steps(ctx: Context) -> Found:
    """The GPU idle after its critical stream's last kernel until the next step starts (the
    idle_between slice); refused where no step used is followed by an analysed step."""
    refusals = [] if ctx.followed else [
        "cannot measure the GPU idle between steps because no analysed step is followed by "
        "another analysed step (only the idle after the critical stream's last kernel up to the "
        "step's end is counted)"]
    sav, idle, b = ctx.each("idle_between"), ctx.median_path.idle_between, ctx.bound
    if sav[ctx.at] < MIN_SAVING_US:
        return Found([], refusals=refusals)
    cause = ((ctx.s1 or {}).get("between_steps") or {}).get("cause")
    med = spread(sav, ctx.at)["value"]  # the saving's median: said beside the median step's
    said = (f"{us_text(idle)} after step {ctx.median}" if abs(med - idle) < 1.0 else
            f"{us_text(med)} a step (the median over {rules.plural(len(sav), 'step')}; "
            f"{us_text(idle)} after step {ctx.median})")
    if named := ", ".join(f"{n} {us_text(v)}" for n, v in between_events(ctx)[:HOST_EVENTS_NAMED]):
        said += f"; host events there: {named}"
    return Found([Row(f"{device_word(ctx)} {b} is idle after its critical stream's last kernel "
                      f"until the next step starts: {said}",
                      f"{device_word(ctx)} {b}", 100.0 * idle / ctx.window, spread(sav, ctx.at),
                      knob=IDLE_BETWEEN_KNOBS.get(cause))],
                 refusals=refusals)


# ---------------------------------------------------------------- ranking and the combined saving

def find_causes(ctx: Context) -> tuple[list, list, list]:
    """Every registered cause's rows as written (kind, prose, label and source filled in), notes
    and refusals, in the registry's order."""
    rows, notes, refusals = [], [], []
    for c in REGISTRY:
        found = c.find(ctx)
        if not isinstance(found, Found):
            found = Found(found)
        rows += [written(c, r) for r in found.rows]
        notes += found.notes
        refusals += found.refusals
    if tpu_capture(ctx):  # the causes' words on a TPU's parts (trace_rules.TPU_WORDS)
        for r in rows:
            r.update({k: rules.tpu_words(r[k]) for k in ("cause", "assumptions", "knob")})
    return rows, notes, refusals


def written(c: Cause, r: Row) -> dict:
    """A row as ranked and written: its cause's kind, source and the label, with its assumptions
    and knob (its own, else its cause's text)."""
    prose = {}
    for part in ("assumptions", "knob"):
        text = getattr(r, part) if getattr(r, part) is not None else getattr(c.prose, part)
        if not isinstance(text, str):
            raise TypeError(f"a {c.kind} row must fill in its {part}: its prose is a choice")
        prose[part] = text
    return {"cause_kind": c.kind, "cause": r.cause, "where": r.where, "pct_of_step": r.pct,
            "saving": r.saving, **prose, "label": LABEL, "source": c.prose.source,
            "named": r.named, "measured": r.measured, "target": r.target,
            "kernel_cut": r.kernel_cut, "fuses": r.fuses, **(r.extra or {})}


# a row that explains another (Cause.explains) ranks before it when it saves this share of it
EXPLAINS_SHARE = 0.5


def ranked(rows: list) -> list:
    """The rows in rank order, numbered from 1: by saving per step (its median over the steps
    used, to the nanosecond), then in the registry's order and by where; a row that explains
    another's time (Cause.explains) and saves at least EXPLAINS_SHARE of it just before it (the
    rows it explains then say so, each taking its part of that time, the largest first); rows
    that regroup the instructions' time (Cause.regroups: Python lines, kernel families; a
    family's saving an upper bound) after every other row."""
    order = {c.kind: i for i, c in enumerate(REGISTRY)}
    regroups = {c.kind for c in REGISTRY if c.regroups}
    rows.sort(key=lambda c: (c["cause_kind"] in regroups, -round(c["saving"]["value"], 3),
                             order[c["cause_kind"]], c["where"]))
    explains = {c.kind: c.explains for c in REGISTRY if c.explains}
    for r in [r for r in rows if r["cause_kind"] in explains]:
        # a cause ranks before the symptom it explains most of (XLA's compile inside the step
        # before the host gap it fills)
        at = rows.index(r)
        first = next((i for i, x in enumerate(rows[:at]) if x["cause_kind"] in
                      explains[r["cause_kind"]] and r["saving"]["value"]
                      >= EXPLAINS_SHARE * x["saving"]["value"]), None)
        if first is not None:
            rows.insert(first, rows.pop(at))
    for i, c in enumerate(rows, 1):
        c["rank"] = i
    for r in [r for r in rows if r["cause_kind"] in explains]:  # said on the rows it explains
        left = r["saving"]["value"]  # its time, each part explaining one row (the largest first)
        for x in rows[r["rank"]:]:
            if x["cause_kind"] in explains[r["cause_kind"]] and left >= \
                    EXPLAINS_SHARE * x["saving"]["value"]:
                left = max(0.0, left - x["saving"]["value"])
                x["cause"] += f"; change {r['rank']} ({r['cause_kind']}) is the cause of most of it"
                x["knob"] = f"first change {r['rank']}'s; then {x['knob']}"
    return rows


def combined(ctx: Context, rows: list) -> dict:
    """Every listed cause gone at once, all work exposed, per step (COMBINE_RULE: an upper bound,
    capped at each step's window): its median over the steps with the min and max."""
    rows = [r for r in rows if not r.get("step_basis")]  # a saving of another step's
    # a fused pass's cut is in its fused_on_jit row's kernel time (never counted twice)
    named = {i for r in rows for i in r["named"]} - {i for r in rows for i in r["fuses"]}
    cut = sum(c["cut"] for i, c in enumerate(ctx.ceilings.cands) if i in named) \
        if ctx.ceilings is not None else 0.0
    # the compute rows no instruction row counts (Cause.compute), each at its median saving
    compute_rows = {c.kind for c in REGISTRY if c.compute}
    extra = sum(r["saving"]["value"] for r in rows if r["cause_kind"] in compute_rows)
    comb = []
    for i, n in enumerate(ctx.chosen):
        p = ctx.paths[n]
        straggler = ctx.straggler_work.get(n, {}).get("full", 0.0)
        fused = sum(r["kernel_cut"][i] for r in rows if r.get("kernel_cut"))
        compute_side = min(p.compute, straggler + cut * p.compute + fused + extra)
        c = (max(0.0, p.host_late - ctx.lead_in) + p.collective + p.memcpy_arg
             + p.idle_between + (p.idle_before if ctx.rows is not None else 0.0)
             + compute_side)
        comb.append(min(c, ctx.frames[n].window))
    # all at once saves at least what the largest row saves alone (a row outside the slices
    # above, such as a scan's stacking, cuts compute the instruction cuts do not count)
    out = spread(comb, ctx.at)
    if rows:
        for k in ("value", "min", "max"):
            out[k] = max(out[k], max(r["saving"][k] for r in rows))
    return out


CRITICAL_PATH_SLICES = ("window", "host_late", "compute", "memcpy_arg", "collective",
                        "idle_before", "idle_between")


def analyse(out: Path) -> dict:
    """Step 6 on the scratch folder `out`: status `done` with the steps used, the median step and
    why, their frames, the step time, the ranked causes, the combined saving, the median step's
    critical path by slice and exposed share of compute, the straggler, refusals, notes, the
    inputs found and step 1's verdict; or status `refused` when step 1 found no GPU events."""
    s1 = tables(out).json("skip_stats.json")
    steps = read_steps(out)
    inputs = {"skip_stats.json": s1 is not None, "steps.csv": True}
    if s1 is not None and s1.get("status") == "not computable" or not steps:
        return {"status": "refused", "refusals": [
            "cannot rank any cause because step 1 found no GPU events in analysed steps "
            "(steps.csv is empty)"], "notes": [], "inputs": inputs}
    ctx = build_context(out, s1, steps, inputs)
    rows, notes, refusals = find_causes(ctx)
    notes = ctx.notes + notes
    if ctx.whole:
        notes.append("the capture has no steps: 'step' here is the whole capture's window")
    for f in ("reconcile.json", "attribution/ops.csv",
              "attribution/attribute_kernels.json", "roofline.csv", "roofline.json"):
        inputs[f] = (out / f).is_file()
    return {"status": "done", "steps": ctx.chosen, "median": ctx.median, "why": ctx.why,
            "frames": ctx.frames, "step": ctx.step, "causes": ranked(rows),
            "combined": combined(ctx, rows),
            "critical_path": {k: getattr(ctx.median_path, k) for k in CRITICAL_PATH_SLICES},
            "exposure": ctx.median_path.exposure, "straggler": ctx.straggler,
            "refusals": ctx.refusals + refusals, "notes": notes, "inputs": inputs,
            "verdict": (s1 or {}).get("verdict")}


# ---------------------------------------------------------------- result and writers

def figure(v, unit, label, rng: dict | None = None) -> dict:
    """A figure of this step's result, to the nanosecond (3 decimals)."""
    return scratch.figure(v, unit, label, rng, decimals=3)


COMBINE_RULE = (
    "Each saving is for its cause alone, the others left in place. They overlap: (1) work "
    "before the step's last host-late gap is hidden behind the host, so instruction, memcpy, "
    "collective and straggler savings count only their part after it, and grow once the host "
    "gaps are gone; (2) Python lines are the instructions' kernel time grouped by line: never add "
    "a line to an instruction; (3) the straggler's extra work and the instructions' distance to "
    "their ceilings shorten the same compute time, so together they never exceed it; (4) the "
    "element-wise passes a jit would fuse count their fused saving in place of their distance "
    "to the ceiling. "
    "combined_saving_us is every listed cause gone at once with all work exposed: host-late "
    "time + collective + memcpy + idle between steps + idle between kernels + min(compute, "
    "straggler + the instructions "
    "the instruction and Python-line rows name, each once, a fused pass by its fused saving, "
    "+ the compute rows no instruction row counts: scan_stacking, layout_copies, "
    "host_callback, remat, matmul_precision, independent_loop, pallas_call, each at "
    "its saving), "
    "per step, capped at the step time, and never less than the largest row's saving alone; "
    "an upper bound, never a sum of the rows. A mid-run recompile's row is of its own step "
    "(its step_us: the mean window of the steps with the recompiling ones) and outside it.")


def build_result(a: dict) -> dict:
    if a["status"] != "done":
        return {"step": "changes", "status": a["status"], "figures": {}, "causes": [],
                "combine_rule": COMBINE_RULE, "refusals": a["refusals"], "notes": a["notes"],
                "inputs": a["inputs"], "tables": {}}
    causes = []
    for c in a["causes"]:
        if c.get("measured") is not None:  # the low end of the range, never above its high end
            c["measured"] = min(c["measured"], c["saving"]["value"])
        own = c.get("step_basis") or a["step"]  # a row's own step: a recompile's mean
        causes.append({
            "rank": c["rank"], "cause_kind": c["cause_kind"], "cause": c["cause"],
            "where": c["where"], "step_us": figure(own["value"], "us", "measured", own),
            "pct_of_step": figure(100.0 * c["saving"]["value"] / own["value"]
                                  if own["value"] > 0 else 0.0, "pct", "inferred"),
            "saving_us": figure(c["saving"]["value"], "us", "inferred", c["saving"]),
            "step_if_gone_us": figure(round(own["value"], 3) - round(c["saving"]["value"], 3),
                                      "us", "inferred"),
            "speedup_if_gone": figure(speedup(own["value"], c["saving"]["value"]), "ratio",
                                      "inferred"),
            **({"speedup_measured": figure(speedup(own["value"], c["measured"]), "ratio",
                                           "inferred")} if c.get("measured") else {}),
            **({"saving_measured_us": figure(c["measured"], "us", "inferred")}
               if c.get("measured") is not None else {}),
            "target": c.get("target", ""), "assumptions": c["assumptions"], "knob": c["knob"],
            "label": c["label"], "source": c["source"]})
        if c["cause_kind"] == "kernel_family":
            causes[-1].update({"family": c["family"], "cannot_show": c["cannot_show"],
                               "instructions": c["instructions"],
                               "family_device_us": figure(c["family_device_us"], "us", "measured")})
    comb, step = a["combined"], a["step"]
    return {
        "step": "changes", "status": "done", "verdict": a["verdict"],
        "steps": {"used": a["steps"], "median": a["median"],
                  "bounding_gpu": a["frames"][a["median"]].bound, "why": a["why"],
                  "straggler": a["straggler"]},
        "figures": {
            "step_us": figure(step["value"], "us", "measured", step),
            "combined_saving_us": figure(comb["value"], "us", "inferred", comb),
            "step_if_all_gone_us": figure(step["value"] - comb["value"], "us", "inferred"),
            "compute_exposed_pct_of_compute": figure(100.0 * a["exposure"], "pct", "inferred"),
        },
        "critical_path": {k: figure(v, "us", "measured") for k, v in a["critical_path"].items()},
        "causes": causes, "combine_rule": COMBINE_RULE,
        "refusals": a["refusals"], "notes": a["notes"], "inputs": a["inputs"], "tables": {}}


def speedup(step: float, saving: float) -> float | None:
    """How many times faster the step would be without a cause: step / (step - saving), rounded
    as the table writes both; None where nothing of the step would be left."""
    left = round(step, 3) - round(saving, 3)
    return round(step, 3) / left if left > 0 else None


def csv_rows(result: dict) -> list:
    return [[c["rank"], c["cause_kind"], c["cause"], c["where"],
             f"{c['pct_of_step']['value']:.2f}", f"{c['step_us']['value']:.3f}",
             f"{s['value']:.3f}", f"{s['min']:.3f}", f"{s['max']:.3f}",
             f"{c['saving_measured_us']['value']:.3f}" if "saving_measured_us" in c else "",
             f"{c['step_if_gone_us']['value']:.3f}",
             f"{c['speedup_if_gone']['value']:.3f}"
             if c["speedup_if_gone"]["value"] is not None else "",
             f"{c['speedup_measured']['value']:.3f}"
             if (c.get("speedup_measured") or {}).get("value") is not None else "",
             c.get("target", ""), c["assumptions"], c["knob"], c["label"], c["source"]]
            for c in result["causes"] for s in [c["saving_us"]]]


def run(out: Path) -> tuple[dict, list]:
    """Step 6 on the scratch folder `out`: changes.csv and changes.json; the result and the
    (file, rows) written."""
    tables.cache_clear()  # each run reads the folder as it is now
    if not out.is_dir():
        raise ChangesError(f"{out} is not a folder: pass the scratch folder steps 1 to 5 wrote "
                           "into with --out")
    result = build_result(analyse(out))
    rows = csv_rows(result)
    with rules.replace_files(out, ".changes-") as tmp:
        n = scratch.write_table(tmp, TABLE, rows)
        result["tables"] = {TABLE: n}
        scratch.write_result(tmp, RESULT_FILE, result)
    return result, [(TABLE, n), (RESULT_FILE, None)]


def check_capture(capture: str, run_name, host, out: Path) -> str | None:
    """The capture named on the command line against the one the tables came from; a note when
    that cannot be checked. Raises ChangesError on a mismatch."""
    files = capture_inputs.resolve(capture, run=run_name, host=host)
    ci = tables(out).json("capture_info.json")
    if ci is None:
        return ("cannot check that the tables are this capture's: the scratch folder has no "
                "capture_info.json (step 0)")
    c = ci.get("capture") if isinstance(ci.get("capture"), dict) else {}
    same = c.get("host") == files.host and all(
        scratch.written_for(c.get(k), getattr(files, k), base=out) for k in ("trace", "xplane"))
    if not same:
        raise ChangesError(f"the scratch folder {out} holds the tables of {c.get('run_dir')} "
                           f"(host {c.get('host')}), not of {files.run_dir} (host {files.host}); "
                           "pass the --out folder of this capture's steps")
    return None


def summary_lines(result: dict) -> list[str]:
    lines = [f"{c['rank']}. {c['cause_kind']} ({c['where']}): "
             f"{c['pct_of_step']['value']:.1f}% of the step, saving "
             f"{s['value']:,.1f} us ({s['min']:,.1f}-{s['max']:,.1f}) -> step "
             f"{c['step_if_gone_us']['value']:,.1f} us ({LABEL}); test: "
             f"{c['knob'].split('; ')[0]}"
             for c in result["causes"][:3] for s in [c["saving_us"]]]
    if not result["causes"]:
        lines.append("no cause ranked: " + ("; ".join(result["refusals"]) or "nothing to rank"))
    return lines
