"""Step 7: where this capture cannot be trusted, and what only a new capture can answer: the
analysis. Its door, with the command line and what it writes, is scripts/trust.py."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from tracekit import row_facts, scratch, step_cli
from tracekit import trace_rules as rules  # CSV writing, atomic outputs
from tracekit.row_facts import RowFacts
from tracekit.scratch import number

RESULT_FILE = "trust.json"

TABLE = "trust.csv"

COLUMNS = scratch.columns(TABLE)


# ---------------------------------------------------------------- named constants

# The steps, in SKILL.md's numbering, with the JSON each leaves in the scratch folder and what
# its absence takes out of the report.
STEPS = {
    "capture_info": (0, "capture_info.json",
                     "the inventory is missing: which GPUs ran, whether the trace and the xplane "
                     "agree per GPU, and which programs (HLO) the capture holds are unknown"),
    "skip_stats": (1, "skip_stats.json",
                   "there is no verdict, no step times, no stream budgets and no gaps: the "
                   "verdict section and every per-step figure are missing"),
    "reconcile": (2, "reconcile.json",
                  "nothing was reconciled: every figure rests on records whose totals were "
                  "never checked against each other"),
    "swimlanes": (3, "swimlanes.json",
                  "there is no swimlane figure and no straggler named"),
    "attribute_kernels": (4, "attribution/attribute_kernels.json",
                          "no kernel is attributed to an instruction or a Python line: the top "
                          "ops and lines are missing, and the roofline cannot run"),
    "roofline": (5, "roofline.json",
                 "there is no roofline: no instruction's share of its ceiling can be quoted"),
    "changes": (6, "changes.json",
                "there are no ranked changes: the report has no estimate of a faster step"),
}

STEP_BY_NUMBER = {str(n): name for name, (n, _, _) in STEPS.items()}


# Kinds of trust item, in the order they are listed. DEFECT_KINDS are the items that say this
# capture's records are incomplete or disagree (or its work differs across GPUs): a capture
# without such a defect gets none of them. The others are standing limits, true of every
# capture of its kind (graph kernels have no launch of their own, NCCL time includes waits), or
# of the tools (attribution confidence, roofline cost models), or of this run of the steps.
KIND_ORDER = ("step_failed", "no_hlo", "reconciliation_check", "under_recorded_replays",
              "incomplete_capture", "duplicate_program", "async_labels_missing",
              "steps_not_same_work", "not_checkable", "unattributed", "low_confidence",
              "graph_launch_metrics", "python_tracer", "nccl_waits", "kernel_family",
              "rocm_unknown_memcpy", "not_computable", "no_ceiling", "tpu_cost_model",
              "tpu_steps_line", "refusal")

DEFECT_KINDS = frozenset({"reconciliation_check", "under_recorded_replays",
                          "incomplete_capture", "duplicate_program", "async_labels_missing"})


# Reconciliation checks reported as one item per family (a check's count and duration rows,
# or events and time rows, describe one finding), with what `count` counts for each.
CHECK_FAMILIES = (
    ("gpu_events_json_vs_xplane", "the trace and the xplane disagree on GPU events",
     "GPU events in one record and not the other", "the trace and the xplane agree on GPU events"),
    ("launch_join", "GPU events whose correlation id joins no launch call or several",
     "GPU events that join no single launch call", "every GPU event joins one launch call"),
    ("kernels_per_step", "the number of events per step is not constant",
     "GPUs whose events per step change", "the number of events per step is constant"),
    ("same_work_across_gpus", "the GPUs do not do the same work per step",
     "GPUs whose work differs from the others'", "every GPU does the same work per step"),
    ("stream_budget", "compute + collective + memcpy + idle is not the span",
     "streams whose budget does not add up", "each stream's budget adds up to its span"),
    ("attribution_events_per_execution", "events per program execution are outside the "
     "schedule's prediction", "GPUs whose events per execution the schedule does not predict",
     "events per execution match the schedule"),
    ("ops_in_program_runs", "TPU op runs outside every program run",
     "op runs with no program and no dispatch", "every TPU op run lies inside a program run"),
    ("program_runs_dispatched", "TPU program runs that join no host dispatch",
     "program runs whose dispatch the capture lacks", "every program run joins its dispatch"),
    ("attribution_confidence", "too much attributed time rests on low-confidence placements",
     "checks", "the attribution's confidence is high enough"),
    ("attribution", "the attribution does not reconcile", "checks",
     "the attribution reconciles with the capture"),
)

# Families whose figures are event counts on each side: their count is the events that differ.
EVENT_COUNT_FAMILIES = frozenset({"gpu_events_json_vs_xplane", "launch_join",
                                  "ops_in_program_runs", "program_runs_dispatched"})


# The Python tracer names its events "$<file>:<line> <function>" (or "$<module> <function>" for
# C functions); no other host event name starts with "$".
# Sentences other steps write that a specific item here already states (not listed twice).
GRAPH_REFUSAL = "launched by graphs"

NOT_COMPUTABLE_SENTENCE = "not computable"

NO_HLO_SENTENCES = ("holds no HLO", "no HLO (", "have no HLO in the capture")

# Notes of step 1 that limit what its figures mean (the others describe, and stay there).
LIMITING_NOTES = ("exporter's cap", "before their dispatch on the host's")

LARGEST_SHOWN = 3  # items printed on stdout: the largest by GPU time

# Ranked changes asked about one by one (a report quotes the top three); the rest in one row.
CHANGES_ASKED = 3


# the capture that answers each question (trust.toml beside this file): key -> words
NEEDS = tomllib.loads(Path(__file__).with_name("trust.toml").read_text(encoding="utf-8"))["needs"]


# ---------------------------------------------------------------- load

@dataclass
class Inputs:
    out: Path
    results: dict = field(default_factory=dict)    # step -> its JSON
    missing: dict = field(default_factory=dict)    # step -> why it is not there
    notes: list = field(default_factory=list)

    def get(self, step: str) -> dict | None:
        return self.results.get(step)


def load(out: Path, failed: dict) -> Inputs:
    out = Path(out)
    if not out.is_dir():
        raise step_cli.StepError(f"the scratch folder {out} does not exist: run the steps "
                                 f"with --out {out} first (SKILL.md), then this script")
    inp = Inputs(out)
    for step, (_, rel, _) in STEPS.items():
        path = out / rel
        if step in failed:
            inp.missing[step] = failed[step]
            if path.is_file():
                inp.notes.append(f"{rel} is present but {step} failed in this run (--failed): "
                                 "its older result was not read")
            continue
        try:
            got = scratch.Scratch(out).json(rel)
        except scratch.TableError as exc:  # the trust list says which result it could not read
            inp.missing[step] = str(exc)
            continue
        if got is None:
            inp.missing[step] = f"{rel} is missing: the step did not run here, or failed"
        else:
            inp.results[step] = got
    if not inp.results:
        raise step_cli.StepError(f"no step has written its result into {out} (none of "
                                 f"{', '.join(rel for _, rel, _ in STEPS.values())}): run "
                                 "steps 0 to 6 there first")
    return inp


def _fig(result: dict | None, name: str):
    f = ((result or {}).get("figures") or {}).get(name)
    return number(f.get("value")) if isinstance(f, dict) else None


# ---------------------------------------------------------------- model

def item(kind, text, source, detail="", count=None, device_us=None, total_us=None) -> dict:
    return {"section": "trust", "item": text, "kind": kind, "count": count, "device_us": device_us,
            "pct_of_device_time": (100.0 * device_us / total_us
                                   if device_us is not None and total_us else None),
            "source": source, "detail": detail}


def question(text, capture, source) -> dict:
    return {"section": "needs_new_capture", "item": text, "kind": "", "count": None,
            "device_us": None, "pct_of_device_time": None, "source": source, "detail": capture}


@dataclass
class Scanned:
    """What is read first (with --rest-when-told, while the last steps still run): step 1's
    rows.csv (row_facts: handed on by step 1 beside it, else read in one pass; `rocm`: the count
    and us of its hipMemcpy*-launched memcpys on AMD GPUs) and step 4's count of the collective
    kernels outside graphs matched other than exactly (attribute_kernels.json
    collectives_by_order)."""
    rows: RowFacts | None = None
    rocm: tuple = (0, 0.0)
    rows_note: str = ""
    collectives: tuple | None = None  # (kernels, us, labels); None: no step 4 result
    kernels_note: str = ""


@dataclass
class Facts:
    total_us: float | None
    total_source: str
    rows: RowFacts | None
    scanned: Scanned = field(default_factory=Scanned)
    consumed: set = field(default_factory=set)  # sentences an item here already states
    folded: list = field(default_factory=list)   # failed checks an item here already states
    python_tracer_seen: bool | None = None       # None: gaps.csv not there


# ---------------------------------------------------------------- analyses (pure)

def step_failed_items(inp: Inputs, failed: dict) -> list:
    return [item("step_failed", f"step {num} ({step}) did not run or failed", rel,
                 f"{failed.get(step) or why}; for the report: {meaning}")
            for step, why in inp.missing.items() for num, rel, meaning in [STEPS[step]]]


def no_hlo_items(inp: Inputs, facts: Facts) -> list:
    ci, roof = inp.get("capture_info"), inp.get("roofline")
    no_programs = ci is not None and not (ci.get("xplane") or {}).get("error") and \
        not ci.get("programs")
    refused = roof is not None and roof.get("status") == "refused"
    if not (no_programs or refused):
        return []
    sentences = [s for r in (ci, roof) if r for s in r.get("refusals") or []
                 if any(k in s for k in NO_HLO_SENTENCES)]
    facts.consumed.update(sentences)
    src = "; ".join(x for x, ok in (("capture_info.json: programs", no_programs),
                                    ("roofline.json: status", refused)) if ok)
    return [item("no_hlo", "the capture holds no HLO: no kernel can be attributed to an "
                 "instruction or a Python line and no roofline can be drawn", src,
                 "; ".join(sentences), device_us=facts.total_us, total_us=facts.total_us)]


def gpus_text(devices: list) -> str:
    """GPU ordinals without commas (a trust item is a citation key: references/trust.md):
    'GPU 5', 'GPUs 0 to 7', 'GPUs 1 3 and 6'."""
    if len(devices) == 1:
        return f"GPU {devices[0]}"
    nums = [int(d) for d in devices] if all(str(d).isdigit() for d in devices) else None
    if nums and len(nums) > 2 and nums == list(range(nums[0], nums[0] + len(nums))):
        return f"GPUs {nums[0]} to {nums[-1]}"
    return f"GPUs {' '.join(map(str, devices[:-1]))} and {devices[-1]}"


def _family(check: str) -> str:
    return next((fam for fam, *_ in CHECK_FAMILIES
                 if check == fam or check.startswith(fam + "_")), check)


def reconciliation_items(inp: Inputs, facts: Facts) -> list:
    """Failed checks (one item per family) and checks that could not be made. A failure that a
    more specific item states is folded into it: kernels per step and events per execution on a
    GPU whose graph replays are short, and the confidence check into the low-confidence item."""
    rec = inp.get("reconcile")
    if rec is not None:
        rows = rec.get("checks") or []
    else:  # step 0's own check, when step 2 did not run
        rows = [{"check": "gpu_events_json_vs_xplane_count", "device": c.get("device"),
                 "stream": "", "status": c.get("status"), "figure_a": t, "figure_b": x,
                 "unit": "count", "trust_sentence": f"GPU {c.get('device')}: the trace holds "
                                                    f"{t} events, the xplane {x}"}
                for c in (inp.get("capture_info") or {}).get("checks") or []
                if c.get("status") != "pass" for x, t in [(c.get("xplane"), c.get("trace"))]]
    src_file = "reconciliation.csv" if rec is not None else "capture_info.json: checks"
    short = facts.rows.missing_replays if facts.rows else {}
    groups: dict = {}
    for r in rows:
        if (status := r.get("status")) not in ("fail", "not checkable"):
            continue
        fam = _family(str(r.get("check", "")))
        dev = str(r.get("device", ""))
        if status == "fail" and fam in ("kernels_per_step", "attribution_events_per_execution") \
                and dev in short:
            facts.folded.append((r.get("check"), r.get("trust_sentence") or ""))
            continue  # stated by under_recorded_replays
        if status == "fail" and fam == "attribution_confidence":
            continue  # stated by low_confidence
        if status == "not checkable" and fam == "attribution" and \
                "attribute_kernels" in inp.missing:
            continue  # stated by step_failed
        if status == "not checkable" and fam == "same_work_across_gpus" and \
                str(r.get("figure_a")) == "1" and r.get("what_a") == "devices with work":
            continue  # one device with work: nothing to compare is no doubt about the capture
            #           (devices not recorded are incomplete_capture's)
        groups.setdefault((status, fam), []).append(r)
    out = []
    for (status, fam), rs in groups.items():
        title, what, subject = next(((t, w, sub) for f, t, w, sub in CHECK_FAMILIES
                                     if f == fam), (f"check {fam} fails", "rows",
                                                    f"check {fam} passes"))
        checks = sorted({str(r.get("check")) for r in rs})
        src = f"{src_file}: " + "; ".join(f"check={c}" for c in checks)
        sentences = " | ".join(s for s in dict.fromkeys(r.get("trust_sentence") or ""
                                                        for r in rs) if s)
        where = sorted({str(r.get("device")) for r in rs if r.get("device") not in ("", None)},
                       key=lambda d: (len(d), d))
        on = f" ({gpus_text(where)})" if where else ""
        if status == "fail":
            if fam in EVENT_COUNT_FAMILIES:
                n = sum(abs(int(number(r.get("figure_a"), 0)) - int(number(r.get("figure_b"), 0)))
                        for r in rs if r.get("unit") == "count")
            else:
                n = len({(r.get("device"), r.get("stream")) for r in rs})
            if n == 1:  # one GPU or stream: the singular
                what = re.sub(r"^(GPU|stream)s whose", r"\1 whose", what)
            out.append(item("reconciliation_check", f"{title}: {n} {what}{on}", src, sentences,
                            count=n))
        else:
            out.append(item("not_checkable", f"cannot check that {subject}{on}", src,
                            sentences, count=len(rs)))
    for c in (inp.get("attribute_kernels") or {}).get("checks") or []:
        if c.get("status") == "fail":
            out.append(item("unattributed", f"the attribution covers less GPU time than XProf's "
                            f"hlo_stats ({c.get('name')})",
                            "attribution/attribute_kernels.json: checks", c.get("detail") or ""))
        elif c.get("status") == "not checkable":
            out.append(item("not_checkable", f"cannot check the attribution: {c.get('name')}",
                            "attribution/attribute_kernels.json: checks",
                            c.get("detail") or "", count=1))
    return out


def replay_items(facts: Facts) -> list:
    f = facts.rows
    if f is None or not f.missing_replays:
        return []
    n = sum(f.missing_replays.values())
    devices = sorted(f.missing_replays, key=lambda d: (len(d), d))
    detail = "; ".join(f"GPU {d}: " + "; ".join(f.replay_graphs[d]) for d in devices)
    checks = sorted({c for c, _ in facts.folded})
    also = " | ".join(s for s in dict.fromkeys(s for _, s in facts.folded) if s)
    src = "rows.csv: join=graph_launch" + "".join(f"; reconciliation.csv: check={c}"
                                                  for c in checks)
    return [item("under_recorded_replays", f"graph replays that recorded fewer kernels than "
                 f"another replay of the same graph: at least {n} kernels missing "
                 f"({gpus_text(devices)})", src,
                 detail + ". Per-step counts, stream budgets and per-instruction times on "
                 "these GPUs miss those kernels' time" + (f" | reconcile: {also}" if also else ""),
                 count=n)]


def program_items(inp: Inputs, facts: Facts) -> list:
    att = inp.get("attribute_kernels")
    if att is None:
        return []
    out = []
    for note in (att.get("program") or {}).get("notes") or []:
        if not (m := rules.SAVED_TWICE_RE.search(note)):
            continue
        chosen = m.group(1)
        ids = [x.strip() for x in m.group(2).split(",") if x.strip()]
        other_us = other_k = 0.0
        how = scratch.records(inp.out, "attribution/how.csv")
        for r in how or ():
            if r.get("program_id") in ids and r.get("program_id") != chosen:
                other_us += number(r.get("device_us"), 0.0)
                other_k += number(r.get("kernels"), 0.0)
        out.append(item("duplicate_program", f"one program saved under {len(ids)} ids "
                        f"({' and '.join(ids)}): {int(other_k)} kernels ran under an id other than "
                        f"{chosen}", "attribution/attribute_kernels.json: program.notes; "
                        "attribution/how.csv", note, count=len(ids),
                        device_us=other_us if how is not None else None, total_us=facts.total_us))
    return out


def step_work_items(inp: Inputs, facts: Facts) -> list:
    """Analysed steps that run different programs: the steps each program ran in
    (attribution/programs.csv `steps`, step 4's placing of its runs) over steps.csv's steps.
    Step 1 reads the trace alone, where programs of one module name count together: a sweep
    that runs another jit_dot each turn frames turns that are not the same work, and a median
    over them mixes them."""
    sc = scratch.Scratch(inp.out)
    try:
        analysed = {r["step"] for r in sc.typed("steps.csv", need=("step",)) or []}
        progs = sc.rows("attribution/programs.csv") or []
    except scratch.TableError:
        return []
    same = rules.saved_twice(((inp.get("attribute_kernels") or {}).get("program") or {})
                             .get("notes"))  # a program saved under two ids is one
    ran: dict = {n: set() for n in analysed}
    for p in progs:
        pid = p.get("program_id", "")
        if not pid.startswith("("):  # not the kernels outside programs
            for n in rules.parse_ranges(p.get("steps")) & analysed:
                ran[n].add(same.get(pid, pid))
    sets = [frozenset(v) for v in ran.values() if v]
    kinds = len(set(sets))
    if kinds < 2:
        return []
    module: dict = {}
    for p in progs:
        if p.get("program_id") in set().union(*sets):
            module.setdefault(p.get("module"), set()).add(p["program_id"])
    named = "; ".join(f"{m}: {len(ids)} program ids" for m, ids in sorted(module.items())
                      if len(ids) > 1)
    return [item("steps_not_same_work", f"the {len(sets)} analysed steps run {kinds} different "
                 f"sets of programs ({named or 'other programs'}) and so are not the same work: "
                 "a median over them mixes different programs (a sweep or a loop whose turns "
                 "differ)", "steps.csv; attribution/programs.csv: steps",
                 "step 1 frames steps from the trace, where programs of one module name count "
                 "together; step 4's program ids tell them apart", count=kinds)]


def incomplete_items(inp: Inputs, facts: Facts) -> list:
    """A program whose HLO's sharding spans more devices than the capture holds its work on
    (programs.csv `partitions` over its `devices`): the others' work was not recorded, not idle."""
    out = []
    for r in scratch.records(inp.out, "attribution/programs.csv") or ():
        n, have = int(number(r.get("partitions"), 0)), (r.get("devices") or "").split()
        if n > len(have) > 0:
            out.append(item(
                "incomplete_capture", f"{r['module']} is partitioned over {n} devices but "
                f"this capture holds its work on {len(have)}",
                "attribution/programs.csv: partitions; devices",
                f"program {r['program_id']}: its HLO's sharding spans {n} devices; its events "
                f"are on {gpus_text([int(d) for d in have if d.isdigit()])} only. The other "
                f"{n - len(have)} devices ran it too (it cannot run otherwise) but their work is "
                "not in this capture (not recorded, or in another host's capture): they are not "
                "idle, and per-GPU medians, the straggler and collective waits cover "
                f"{len(have)} of its {n} devices", count=n - len(have),
                device_us=number(r.get("device_us")), total_us=facts.total_us))
    return out


def async_label_items(inp: Inputs, facts: Facts) -> list:
    """Collective kernels outside graphs whose tracer label names no instruction of the saved
    HLO: their label is kept, and their instruction was placed by order."""
    if inp.get("attribute_kernels") is None:
        return []
    if facts.scanned.kernels_note:
        inp.notes.append(facts.scanned.kernels_note)
    if facts.scanned.collectives is None:
        return []
    n, us, labels = facts.scanned.collectives
    if not n:
        return []
    shown = ", ".join(sorted(labels)[:5]) + (", ..." if len(labels) > 5 else "")
    return [item("async_labels_missing", f"collective kernels whose label is not an instruction "
                 f"of the saved HLO: {n} kernels under {len(labels)} labels", "attribution/"
                 "kernels.csv: category=collective, graph=0, match!=exact",
                 f"labels {shown}; each kernel keeps its label, and its instruction (and Python "
                 "line) comes from the collective-start matched by order", count=n, device_us=us,
                 total_us=facts.total_us)]


def attribution_items(inp: Inputs, facts: Facts) -> list:
    att = inp.get("attribute_kernels")
    if att is None:
        return []
    out = []
    for n in att.get("none") or []:
        largest = ", ".join(f"{x.get('kernel')} x{x.get('count')}" for x in n.get("largest", []))
        what = {"outside": "launched outside every program (argument copies and the like)",
                "no slot": "no candidate instruction left in their window"}.get(
                    n.get("why"), n.get("why"))
        out.append(item("unattributed", f"GPU events with no instruction: {what}",
                        "attribution/attribute_kernels.json: none", f"{n.get('label')}"
                        + (f"; largest: {largest}" if largest else ""), count=n.get("kernels"),
                        device_us=number(n.get("device_us")), total_us=facts.total_us))
    nh = att.get("no_hlo")
    if nh and nh.get("kernels"):
        facts.consumed.update(s for s in att.get("refusals") or []
                              if "have no HLO in the capture" in s)
        us = facts.total_us * number(nh.get("pct_of_device_time"), 0.0) / 100.0 \
            if facts.total_us and nh.get("pct_of_device_time") is not None else None
        out.append(item("unattributed", "kernels of programs with no HLO in the capture",
                        "attribution/attribute_kernels.json: no_hlo",
                        f"programs {nh.get('programs')}", count=nh.get("kernels"), device_us=us,
                        total_us=facts.total_us))
    threshold = att.get("low_confidence_below")
    rec_fail = [c for c in (inp.get("reconcile") or {}).get("checks") or []
                if c.get("check") == "attribution_confidence" and c.get("status") == "fail"]
    verdict = (" | reconcile: " + rec_fail[0].get("trust_sentence", "")) if rec_fail else ""
    how = scratch.records(inp.out, "attribution/how.csv")
    by_class = [r for r in how or () if r.get("program_id") == "all"
                and number(r.get("low_confidence_kernels"), 0) > 0]
    out += [item("low_confidence", f"GPU time placed by {r['match']} with a confidence below "
                 f"{threshold}", f"attribution/how.csv: program_id=all, match={r['match']}",
                 f"{r.get('low_confidence_pct_of_group')}% of all kernel time{verdict}",
                 count=int(number(r.get("low_confidence_kernels"), 0)),
                 device_us=number(r.get("low_confidence_us")), total_us=facts.total_us)
            for r in by_class]
    if how is None and (_fig(att, "low_confidence_kernels") or 0) > 0:
        out.append(item("low_confidence", f"GPU time placed with a confidence below {threshold}",
                        "attribution/attribute_kernels.json: "
                        "figures.low_confidence_pct_of_all_attributed",
                        f"{_fig(att, 'low_confidence_pct_of_all_attributed')}% of attributed "
                        f"time{verdict}",
                        count=int(_fig(att, "low_confidence_kernels"))))
    return out


def graph_items(inp: Inputs, facts: Facts) -> list:
    f, ss = facts.rows, inp.get("skip_stats")
    if f is None or not f.graph_events:
        return []
    sentence = [s for s in (ss or {}).get("refusals") or [] if GRAPH_REFUSAL in s]
    facts.consumed.update(sentence)
    return [item("graph_launch_metrics", "GPU events launched inside graphs have no launch "
                 "call of their own: no launch delay or queue time or TKLQT", "rows.csv: graph=1; "
                 "skip_stats.json: refusals", " ".join(sentence), count=f.graph_events,
                 device_us=f.graph_us, total_us=facts.total_us)]


def _traced(text: str) -> list:
    """The Python-traced (`$<file>:<line> ...`) names of a host-events cell, with their us."""
    return [(name, v) for name, v in rules.parse_host_events(text)
            if name.startswith(rules.PYTHON_TRACER_PREFIX)]


def python_tracer_items(inp: Inputs, facts: Facts) -> list:
    """The Python tracer's events where step 1 lists host events: inside the critical stream's
    gaps (gaps.csv host_events) and in the idle between steps (steps.csv
    between_host_events, every host thread: it finds the tracer also where the Python thread
    launches nothing, as with several GPUs)."""
    gaps = scratch.records(inp.out, "gaps.csv")
    steps = scratch.records(inp.out, "steps.csv")
    if gaps is None and steps is None:
        return []
    n, idle, overlap, names = 0, 0.0, 0.0, {}
    for g in gaps or []:
        traced = _traced(g.get("host_events"))
        if not traced:
            continue
        n += 1
        idle += number(g.get("dur_us"), 0.0)
        # the time traced calls cover in the gap (their union: nested calls once); a gaps.csv
        # without the column gives the largest name's, a lower bound
        covered = number(g.get("python_traced_us"), None)
        overlap += covered if covered is not None else max(v for _, v in traced)
        for name, v in traced:
            names[name] = names.get(name, 0.0) + v
    between: set = set()  # steps: every GPU's row of a step lists the same host events
    for r in steps or []:
        traced = _traced(r.get("between_host_events"))
        if traced and r.get("step") not in between:
            between.add(r.get("step"))
            for name, v in traced:
                names[name] = names.get(name, 0.0) + v
    between = len(between)
    facts.python_tracer_seen = bool(n or between)
    if not (n or between):
        return []
    top = ", ".join(k for k, _ in sorted(names.items(), key=lambda kv: -kv[1])[:3])
    where = " and ".join(x for x in (
        f"{n} critical-stream gaps overlap Python-traced calls" if n else "",
        f"the idle after {between} step(s) holds them" if between else "") if x)
    return [item("python_tracer", "the Python tracer was on: host durations are upper bounds "
                 f"({where})", "gaps.csv: host_events; steps.csv: between_host_events "
                 "($<file>:<line> names)",
                 (f"{overlap:.3f} us of Python-traced host time overlaps {idle:.3f} us of "
                  "gaps; " if n else "")
                 + f"largest names: {top}; "
                 + "the launch-bound share and the host time between steps are inflated by an "
                 "unknown amount", count=n + between)]  # gap idle is no GPU time: not device_us


def family_items(inp: Inputs, facts: Facts) -> list:
    """Kernel families step 6 ranks as causes of their own (changes.json causes of kind
    kernel_family): what the capture cannot show about each (autotuning, layout choice, ...)."""
    return [item("kernel_family", f"{c.get('family')} kernels (change {c.get('rank')}): the "
                 f"capture cannot show {c.get('cannot_show')}",
                 f"changes.json: causes, rank={c.get('rank')}",
                 f"{rules.plural(c.get('instructions'), 'instruction')}; the saving is an upper "
                 "bound (the family's kernels gone)", count=c.get("instructions"),
                 device_us=number((c.get("family_device_us") or {}).get("value")),
                 total_us=facts.total_us)
            for c in (inp.get("changes") or {}).get("causes") or []
            if isinstance(c, dict) and c.get("cause_kind") == "kernel_family"]


def nccl_items(facts: Facts) -> list:
    f = facts.rows
    if f is None or not f.collective_events:
        return []
    return [item("nccl_waits", "NCCL/RCCL collective kernel time includes waiting for peers: "
                 "it is not transfer time", "rows.csv: category=collective",
                 "a collective starts when its GPU arrives and ends when the last peer has; "
                 "quote it as collective time, never as bandwidth", count=f.collective_events,
                 device_us=f.collective_us, total_us=facts.total_us)]


def rocm_memcpy_items(facts: Facts) -> list:
    n, us = facts.scanned.rocm
    if facts.rows is None or not n:
        return []
    return [item("rocm_unknown_memcpy", "ROCm memcpys recorded as kind:Unknown size:0: their "
                 "direction and bytes are not in the capture", "rows.csv: category=memcpy, "
                 "launch_name=hipMemcpy*", "counted from their hipMemcpy* launch calls on AMD "
                 "GPUs (no step reads the memcpy_details stat); no bandwidth can be computed "
                 "for them", count=n, device_us=us, total_us=facts.total_us)]


def roofline_items(inp: Inputs, facts: Facts) -> list:
    roof = inp.get("roofline")
    if roof is None or (roof.get("status") == "refused"
                        and not (roof.get("gpu") or {}).get("why")):
        return []
    out = []
    nc = _fig(roof, "not_computable_us") or 0.0
    if roof.get("status") != "refused" and nc > 0:
        sentences = [s for s in roof.get("trust_list") or [] if NOT_COMPUTABLE_SENTENCE in s]
        facts.consumed.update(sentences)
        rows = scratch.records(inp.out, "roofline.csv")
        n = sum(1 for r in rows or () if (r.get("method") or "").startswith("not computable"))
        out.append(item("not_computable", "instructions whose FLOPs or bytes are not computable "
                        "from the HLO: no roofline point", "roofline.json: figures."
                        "not_computable_us; roofline.csv: method=not computable*",
                        " ".join(sentences), count=n if rows is not None else None,
                        device_us=nc, total_us=facts.total_us))
    gpu = roof.get("gpu") or {}
    if gpu.get("model") is None and gpu.get("why"):
        facts.consumed.add(gpu["why"])
        out.append(item("no_ceiling", "the GPU is not identified: no ceiling applies to any "
                        "instruction", "roofline.json: gpu.why", gpu["why"],
                        count=gpu.get("devices"), device_us=facts.total_us,
                        total_us=facts.total_us))
    elif roof.get("status") != "refused":
        n, us, why = 0, 0.0, {}
        for r in scratch.records(inp.out, "roofline.csv") or ():
            w = r.get("no_ceiling_why") or ""
            if w and not (r.get("method") or "").startswith("not computable"):
                n += 1
                us += number(r.get("device_us"), 0.0)
                why[w] = why.get(w, 0) + 1
        if n:
            reasons = "; ".join(f"{w} ({k})" for w, k in sorted(why.items()))
            out.append(item("no_ceiling", "instructions whose FLOPs and bytes are known but "
                            "that no ceiling here bounds", "roofline.csv: no_ceiling_why",
                            reasons, count=n, device_us=us, total_us=facts.total_us))
    return out


# Our FLOPs and XProf's for one instruction differ by at least this share of ours: two cost
# models that disagree on what the instruction does, not rounding.
XPROF_DISAGREE_PCT = 50.0


def xprof_items(inp: Inputs, facts: Facts) -> list:
    """Where XProf's own per-instruction FLOPs or bytes disagree with ours (roofline.csv
    xprof_*): the instructions, their time, the custom calls XProf gives no FLOPs, what each
    side's bytes count, and which figure the report uses (ours: the roofline's)."""
    roof = list(scratch.records(inp.out, "roofline.csv") or ())

    def apart(r, what) -> bool:
        d = number(r.get(f"xprof_{what}_diff_pct_of_ours"))
        return d is not None and abs(d) >= XPROF_DISAGREE_PCT
    out = []
    far = [r for r in roof if apart(r, "bytes")]
    if far:
        top = sorted(far, key=lambda r: -number(r.get("device_us"), 0.0))[:3]
        out.append(item(
            "xprof_cost_disagrees", "instructions whose bytes XProf puts half or more away from "
            "ours: ours are the bytes the memory roof loads as roofline.csv method counts them "
            "(on a TPU the HBM bytes of the capture's memory_access_breakdown where XProf's "
            "also count on-chip memory); the roofline and the changes use ours", "roofline.csv: "
            "xprof_bytes_diff_pct_of_ours", "; ".join(
                f"{r['instruction']}: ours {r.get('run_bytes') or '?'} bytes a run, XProf's "
                f"{r.get('xprof_run_bytes')}" for r in top), count=len(far),
            device_us=sum(number(r.get("device_us"), 0.0) for r in far), total_us=facts.total_us))
    rows = [r for r in roof if apart(r, "flops")]
    if not rows:
        return out
    zero = [r for r in rows if number(r.get("xprof_run_flops")) == 0]
    us = sum(number(r.get("device_us"), 0.0) for r in rows)
    top = sorted(rows, key=lambda r: -number(r.get("device_us"), 0.0))[:3]
    detail = (f"{len(zero)} of them XProf gives 0 FLOPs (custom calls it cannot cost); "
              if zero else "") + "; ".join(
        f"{r['instruction']}: ours {r.get('run_flops') or '?'} FLOP a run, XProf's "
        f"{r.get('xprof_run_flops')}" for r in top)
    return [item("xprof_cost_disagrees", "instructions whose FLOPs XProf's cost model puts half "
                 "or more away from ours: the roofline and the changes use ours (roofline.csv "
                 "method says how each was had) and XProf's own roofline places them elsewhere",
                 "roofline.csv: xprof_flops_diff_pct_of_ours", detail,
                 count=len(rows), device_us=us, total_us=facts.total_us)] + out


def tpu_items(inp: Inputs, facts: Facts) -> list:
    """What a TPU capture cannot tell: its FLOPs and bytes are XLA's estimates (no hardware
    counters), and a device Steps line that counts programs, not steps."""
    if ((inp.get("capture_info") or {}).get("device") or {}).get("kind") != "TPU":
        return []
    out = []
    rows = [r for r in scratch.records(inp.out, "roofline.csv") or ()
            if (r.get("method") or "").startswith("capture")]
    if rows:
        us = sum(number(r.get("device_us"), 0.0) for r in rows)
        out.append(item("tpu_cost_model", "the roofline's FLOPs and bytes are XLA's cost model's "
                        "(a Pallas call's own estimate), as the capture states them: the "
                        "capture holds no hardware counters, so a share of the MXU or HBM peak "
                        "rests on counted work, not on measured use", "roofline.csv: "
                        "method=capture*", count=len(rows), device_us=us, total_us=facts.total_us))
    for n in ((inp.get("skip_stats") or {}).get("notes") or []):
        if "counts programs, not steps" in n:
            out.append(item("tpu_steps_line", "the device's Steps line counts program runs, not "
                            "steps: XProf's own step time on it is a program's, not a step's",
                            "skip_stats.json: notes", n))
    return out


def refusal_items(inp: Inputs, facts: Facts) -> list:
    """Every step's refusal (and step 1's limiting notes) not already stated by an item."""
    out = []
    seen = set(facts.consumed)
    for step in ("capture_info", "skip_stats", "attribute_kernels", "swimlanes", "roofline",
                 "changes"):
        if (r := inp.get(step)) is None:
            continue
        rel = STEPS[step][1]
        sentences = list(r.get("refusals") or [])
        if step == "skip_stats":
            sentences += [n for n in r.get("notes") or [] if any(k in n for k in LIMITING_NOTES)]
        if step == "roofline":
            sentences += list(r.get("trust_list") or [])
        sentences += list(r.get("withheld") or [])  # figures past a physical limit (scratch)
        for s in sentences:
            if not s or s in seen:
                continue
            seen.add(s)
            out.append(item("refusal", s, f"{rel}: refusals"))
    return out


def needs_new_capture(inp: Inputs, items: list, facts: Facts) -> list:
    kinds = {}
    for it in items:
        kinds.setdefault(it["kind"], []).append(it)
    ss = inp.get("skip_stats") or {}
    q = [question(s, NEEDS["batch"] if "batch" in s else "a new capture (see the question)",
                  "skip_stats.json: needs_new_capture") for s in ss.get("needs_new_capture") or []]
    between = ss.get("between_steps") or {}
    dev = (inp.get("capture_info") or {}).get("device") or {}
    core = "TPU core" if dev.get("kind") == "TPU" else "GPU"
    if between.get("cause") in ("not recorded", "mostly not recorded"):
        q.append(question(f"what the host does between steps while the {core} idles (the host "
                          "events there cover little of that idle: steps.csv between_cause)",
                          NEEDS["host_calls"], "skip_stats.json: between_steps; steps.csv"))
    if ss.get("verdict") == "launch-bound":
        q.append(question(f"what the host does inside its calls while the {core} waits (the "
                          "verdict is launch-bound; gaps.csv names the calls, not their insides)",
                          NEEDS["host_calls"], "skip_stats.json: verdict; gaps.csv"))
    if "python_tracer" in kinds:
        q.append(question("how much of the host time is the Python tracer's own cost (host "
                          "durations and the launch-bound share are upper bounds)",
                          NEEDS["python"], "gaps.csv: host_events"))
    if "graph_launch_metrics" in kinds:
        n = kinds["graph_launch_metrics"][0]["count"]
        q.append(question(f"the launch delay and queue time of the {n} kernels launched inside "
                          "graphs, and what the graphs save over launching them one by one",
                          NEEDS["graphs"], "rows.csv: graph=1"))
    if "under_recorded_replays" in kinds:
        q.append(question("which kernels the short graph replays ran, and their time",
                          NEEDS["graphs"], "rows.csv: join=graph_launch"))
    if kinds.get("low_confidence") and facts.rows and facts.rows.graph_events:
        q.append(question("which instruction each low-confidence graph kernel ran",
                          NEEDS["graphs"], "attribution/how.csv: low_confidence_kernels"))
    if "async_labels_missing" in kinds:
        q.append(question("which instruction each collective kernel with an unsaved label ran "
                          "(placed by order here)", NEEDS["async"],
                          "attribution/kernels.csv: hlo_op"))
    if "nccl_waits" in kinds:
        q.append(question("how much of the collective time is transfer and how much is waiting "
                          "for peers", NEEDS["transfer"], "rows.csv: category=collective"))
        hosts = ((inp.get("capture_info") or {}).get("capture") or {}).get("hosts") or []
        if len(hosts) <= 1:
            q.append(question("whether GPUs on other hosts (if the job spans several) make "
                              "these GPUs wait in their collectives: the capture holds one host",
                              NEEDS["hosts"], "capture_info.json: capture.hosts"))
    slow = [it for it in kinds.get("reconciliation_check", [])
            if "check=same_work_across_gpus_time" in it["source"]]
    if slow:
        q.append(question(f"why {slow[0]['item'].split('(')[-1].rstrip(')')} runs the same work "
                          "at a different speed (clocks, power, contention)",
                          NEEDS["gpu_speed"], "reconciliation.csv: "
                          "check=same_work_across_gpus_time"))
    if "no_hlo" in kinds:
        q.append(question("which instruction and Python line each kernel ran, and each "
                          "instruction's roofline", NEEDS["hlo"], "capture_info.json: programs"))
    roof = inp.get("roofline") or {}
    if (roof.get("gpu") or {}).get("why") and (roof.get("gpu") or {}).get("model") is None:
        q.append(question("which GPU model ran the capture (the roofline needs its peaks)",
                          NEEDS["gpu_model"], "roofline.json: gpu.why"))
    if dev.get("kind") == "TPU":
        q.append(question(f"whether the job runs on more chips or hosts than this capture's "
                          f"{dev.get('cores')} TPU core(s), and whether they keep the same pace "
                          "(one host's profile shows its own cores only)", NEEDS["hosts"],
                          "capture_info.json: device.cores"))
    if "tpu_cost_model" in kinds:
        q.append(question("how far the top instructions are from the chip's real limits (their "
                          "FLOPs and bytes are XLA's estimates, not counters)",
                          NEEDS["tpu_counters"], "roofline.csv: method"))
    pallas = [r for r in scratch.records(inp.out, "roofline.csv") or ()
              if "Pallas call without a cost estimate" in (r.get("no_ceiling_why") or "")]
    if pallas:
        q.append(question(f"the share of the MXU's peak that {pallas[0]['instruction']} reaches "
                          "(the capture gives the Pallas call no FLOPs or bytes)",
                          NEEDS["pallas_cost"], "roofline.csv: no_ceiling_why"))
    if any("only partial steps" in s for s in ss.get("refusals") or []):
        q.append(question("the time of a whole step (the capture holds only fragments)",
                          NEEDS["whole_steps"], "skip_stats.json: refusals"))
    if any(LIMITING_NOTES[0] in n for n in ss.get("notes") or []):  # the exporter's cap
        q.append(question("the events after the trace exporter's cap (the last step is cut)",
                          NEEDS["fewer_events"], "skip_stats.json: notes"))
    ranked = [r for r in scratch.records(inp.out, "changes.csv") or ()
              if (r.get("knob") or "").strip()]
    for r in ranked[:CHANGES_ASKED]:
        gone = number(r.get("step_if_gone_us"))
        est = f" (estimated {gone:.1f} us, inferred, not run)" if gone is not None else ""
        q.append(question(f"the step time with rank {r.get('rank')}'s change made: "
                          f"{r.get('cause_kind')} at {r.get('where')}{est}",
                          f"{NEEDS['knob']}; the knob: {r['knob'].strip()}",
                          f"changes.csv: rank={r.get('rank')}"))
    if len(ranked) > CHANGES_ASKED:
        q.append(question(f"the step time with each of the other {len(ranked) - CHANGES_ASKED} "
                          "ranked changes made", NEEDS["knob"] + "; one capture per knob in "
                          "changes.csv", "changes.csv: knob"))
    return q


def scan_tables(out: Path, failed: dict) -> Scanned:
    """Read what is read first (Scanned); what cannot be read is a note, said where it
    matters."""
    out = Path(out)
    sc = Scanned()
    ci = None if "capture_info" in failed else scratch.Scratch(out).json("capture_info.json")
    amd = {str(g.get("ordinal")) for g in (ci or {}).get("gpus") or []
           if str((g.get("device") or {}).get("device_vendor") or "").upper() == "AMD"}
    try:
        if (rows := scratch.stream(out, "rows.csv", row_facts.COLUMNS)) is not None:
            sc.rows = row_facts.handed_on(out) or row_facts.summarise(rows)
            sc.rocm = sc.rows.rocm_memcpys(amd)
    except scratch.TableError as exc:
        sc.rows_note = f"rows.csv was not read: {exc}"
    att = None if "attribute_kernels" in failed else \
        scratch.Scratch(out).json("attribution/attribute_kernels.json")
    got = (att or {}).get("collectives_by_order")
    if att is not None:
        try:  # step 4 counts them on its kernels (its result), not this step on kernels.csv
            sc.collectives = (int(got["kernels"]), float(got["device_us"]), set(got["labels"]))
        except (KeyError, TypeError, ValueError):
            sc.kernels_note = ("attribution/attribute_kernels.json has no collectives_by_order "
                               "(an older step 4 wrote it): rerun attribute_kernels.py")
    return sc


def collect(inp: Inputs, failed: dict, scanned: Scanned) -> tuple[list, list, Facts]:
    rf = scanned.rows
    if scanned.rows_note:
        inp.notes.append(scanned.rows_note)
    total = _fig(inp.get("attribute_kernels"), "kernel_time_us")
    source = "attribution/attribute_kernels.json: figures.kernel_time_us"
    if not total and rf is not None:
        total, source = rf.device_us, "rows.csv: dur_us, sum"
    facts = Facts(total or None, source if total else "", rf, scanned)
    items = step_failed_items(inp, failed) + no_hlo_items(inp, facts)
    items += reconciliation_items(inp, facts)  # before replay_items: it folds checks into it
    items += (replay_items(facts)
             + incomplete_items(inp, facts) + program_items(inp, facts)
             + step_work_items(inp, facts) + async_label_items(inp, facts)
             + attribution_items(inp, facts) + graph_items(inp, facts)
             + python_tracer_items(inp, facts) + nccl_items(facts) + family_items(inp, facts)
             + rocm_memcpy_items(facts)
             + roofline_items(inp, facts) + xprof_items(inp, facts) + tpu_items(inp, facts))
    items += refusal_items(inp, facts)
    if ((inp.get("capture_info") or {}).get("device") or {}).get("kind") == "TPU":
        for it in items:  # the other steps' sentences, said of a GPU, in a TPU's words
            it["item"], it["detail"] = rules.tpu_said(it["item"]), rules.tpu_said(it["detail"])
    order = {k: i for i, k in enumerate(KIND_ORDER)}
    items.sort(key=lambda it: (order.get(it["kind"], len(order)), -(it["device_us"] or 0.0),
                               -(it["count"] or 0), it["item"]))
    return items, needs_new_capture(inp, items, facts), facts


def largest(items: list, n: int = LARGEST_SHOWN) -> list:
    """The items with the most GPU time (shares of kernel time only: not python_tracer's idle
    time)."""
    with_time = [it for it in items if it["device_us"] and it["pct_of_device_time"] is not None]
    return sorted(with_time, key=lambda it: (-it["device_us"], it["item"]))[:n]


def build_result(inp: Inputs, items: list, questions: list, facts: Facts) -> dict:
    defects = [it for it in items if it["kind"] in DEFECT_KINDS]
    notes = list(inp.notes)
    if facts.rows is not None and facts.rows.unidentified_launches:
        notes.append(f"{facts.rows.unidentified_launches} graph launches carry neither a graph "
                     "id in their name nor an hlo_op label: their replays could not be compared")
    if facts.python_tracer_seen is False:
        notes.append("no Python tracer events ($<file>:<line> names) in gaps.csv: no step records "
                     "whether the Python tracer was on, so a capture that had it on with its "
                     "Python thread apart from the launching threads is not flagged")
    refusals = [f"cannot collect step {STEPS[s][0]} ({s})'s findings because {why}"
                for s, why in inp.missing.items()]
    return {
        "step": "trust", "status": "done",
        "figures": {
            "items": {"value": len(items), "unit": "count", "label": "inferred"},
            "defects": {"value": len(defects), "unit": "count", "label": "inferred"},
            "needs_new_capture": {"value": len(questions), "unit": "count", "label": "inferred"},
            "device_time_us": {"value": round(facts.total_us, 3) if facts.total_us else None,
                            "unit": "us", "label": "measured"},
        },
        "device_time_source": facts.total_source,
        "defect_kinds": sorted(DEFECT_KINDS),
        "kinds": {k: sum(1 for it in items if it["kind"] == k) for k in KIND_ORDER
                  if any(it["kind"] == k for it in items)},
        "inputs": {"read": sorted(inp.results), "missing": dict(inp.missing)},
        "largest": [{"item": it["item"], "kind": it["kind"], "device_us": round(it["device_us"], 3)}
                    for it in largest(items)],
        "refusals": refusals, "notes": notes,
        "tables": {TABLE: len(items) + len(questions)},
    }


# ---------------------------------------------------------------- writers

# How a column's value is written (str for the others); None is an empty cell.
_CELL_TEXT = {"device_us": "{:.3f}".format, "pct_of_device_time": "{:.2f}".format,
              "count": lambda v: str(int(v))}


def _cell(it: dict, col: str) -> str:
    v = it[col]
    return "" if v is None else _CELL_TEXT.get(col, str)(v)


def write(out: Path, items: list, questions: list, result: dict) -> list:
    with rules.replace_files(out, ".trust-") as tmp:
        n = scratch.write_table(tmp, TABLE, ([_cell(it, c) for c in COLUMNS]
                                             for it in items + questions))
        scratch.write_result(tmp, RESULT_FILE, result)
    return [(TABLE, n), (RESULT_FILE, None)]


# ---------------------------------------------------------------- main

def parse_failed(values: list) -> dict:
    failed = {}
    for v in values or []:
        step, sep, reason = v.partition("=")
        step = step.strip().removesuffix(".py")
        step = STEP_BY_NUMBER.get(step, step)
        if not sep or step not in STEPS or not reason.strip():
            raise step_cli.UsageError(f"--failed {v!r}: expected STEP=REASON, STEP one of "
                                      f"{', '.join(STEPS)} or 0 to 6")
        failed[step] = reason.strip()
    return failed
