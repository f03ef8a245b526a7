"""Before and after: did the change help, by how much, what moved, and was the estimate right: the
analysis. Its door, with the command line and what it writes, is scripts/compare.py."""

from __future__ import annotations

import re
import statistics
import sys
from pathlib import Path

from jaxperf.device import adapters  # a TPU's words for the step's parts
from skip_analysis import steps_disagree  # steps.csv against its skip_stats.json
from tracekit import scratch, step_cli
from tracekit import trace_rules as rules  # units, atomic outputs
from tracekit.per_host import folder_names
from tracekit.scratch import number

HERE = Path(__file__).resolve().parents[2]  # scripts/: the entry scripts beside the door


TABLE, RESULT, DRAFT = "compare.csv", "compare.json", "compare_draft.md"

SIDES = ("before", "after")

# below this share of BEFORE's value a difference is no change whatever the spread (timer
# rounding, a few nanoseconds of a microsecond-long step)
MIN_CHANGE_PCT = 1.0

# Below this share of BEFORE's step period, what the step's parts account for is no gain: a
# program's step moves by about as much between two runs of it (the lab's unprofiled medians of
# one program on one chip, 8 steps a run: per-step spreads of 4-9%), and the lab's truths call
# an after below 1.05x of its before no gain.
MIN_GAIN_PCT = 5.0

RULE = ("the per-step values of the two captures do not overlap, two steps or more each, and "
        f"their medians differ by {MIN_CHANGE_PCT:g}% or more; and the step period's parts that "
        "moved beyond their own spread account for its move, in its direction, by "
        f"{MIN_GAIN_PCT:g}% of BEFORE's period or more (else no gain)")


# ---------------------------------------------------------------- the two sides

def kind(path: Path) -> str | None:
    """`host`: one capture's scratch folder; `run`: a run of several hosts (investigate.py's
    per-host pass: a folder per host and hosts.csv); None: neither."""
    if path.is_dir() and (path / "capture_info.json").is_file():
        return "host"
    if path.is_dir() and (path / "hosts.csv").is_file():
        return "run"
    return None


def side_folder(arg: str, name: str, out: Path, no_xprof: bool) -> Path:
    """The scratch folder of one side: the argument itself, or DIR/<name> investigated now."""
    path = Path(arg)
    if kind(path) is not None:
        return path
    if not path.exists():
        raise step_cli.StepError(f"{name.upper()} {arg} does not exist; expected a capture or a "
                                 "scratch folder investigate.py wrote")
    folder = out / name
    cmd = [sys.executable, "-P", str(HERE / "investigate.py"), str(path), "--out", str(folder)]
    step_cli.progress(f"investigating {name.upper()}")
    p = step_cli.run_child(cmd + (["--no-xprof"] if no_xprof else []))
    if p.returncode != 0 or kind(folder) is None:
        lines = [ln for ln in (p.stderr or p.stdout).splitlines() if ln.strip()]
        raise step_cli.StepError(f"{name.upper()} {arg} cannot be investigated: "
                                 f"{lines[-1] if lines else 'no output'}",
                                 p.returncode if p.returncode == 3 else 1)
    return folder


class Side:
    """What one capture's scratch folder says, per analysed step (`role`: before or after)."""

    def __init__(self, folder: Path, role: str):
        self.folder, self.role = folder, role
        self.files = scratch.Scratch(folder)  # each file read once
        self.info = self.files.json("capture_info.json") or {}
        self.skip = self.files.json("skip_stats.json") or {}
        self.said = adapters.of_results(self.info, self.skip).said  # in its device's words
        self.steps_rows = self.files.rows("steps.csv", need=("step", "device")) or []
        if disagreement := steps_disagree(self.steps_rows, self.skip):
            raise step_cli.StepError(f"{role.upper()} ({folder}): {disagreement}; run "
                                     "skip_stats.py (or investigate.py) into it again")
        self.by_step: dict = {}
        for r in self.steps_rows:
            self.by_step.setdefault(r["step"], []).append(r)
        self.steps = len(self.by_step)
        self.has_hlo = (folder / "attribution" / "ops.csv").is_file()
        # the trace's streams that hold less GPU time than the xplane's (reconcile.json): the
        # trace's steps then do not cover what step 4 attributed (a cut or capped trace)
        self.trace_short = [c for c in (self.files.json("reconcile.json") or {}).get("checks")
                            or [] if isinstance(c, dict) and c.get("status") == "fail"
                            and c.get("check") == "gpu_events_json_vs_xplane_duration"]

    def per_step(self, column: str, how=max) -> list[float]:
        """One value per analysed step: `how` over its GPUs' rows (max, or sum)."""
        return [how(vals) for rs in self.by_step.values()
                if (vals := [v for v in (number(r.get(column)) for r in rs) if v is not None])]

    def table(self, file: str) -> list[dict]:
        """A table of the side's folder ([] where missing), read once however many comparisons
        ask for it."""
        return self.files.rows(file) or []

    def device_time(self, file: str, key) -> dict:
        """{key: GPU us per step} of an attribution table, keys from `key(row)`."""
        out: dict = {}
        for r in self.table(file):
            k, us = key(r), number(r.get("device_us"))
            if k and us is not None:
                out[k] = out.get(k, 0.0) + us / max(1, self.steps)
        return out


# ---------------------------------------------------------------- figures and the rule

def summary(values: list[float]) -> dict | None:
    return {"value": statistics.median(values), "min": min(values), "max": max(values),
            "n": len(values)} if values else None


def significance(before: list[float], after: list[float]) -> tuple[bool, str, str]:
    """The stated rule (module docstring): (counts, why, why in words without figures: the
    draft's, whose figures are the rows it cites)."""
    if len(before) < 2 or len(after) < 2:
        return False, (f"{len(before)} step(s) before and {len(after)} after: no step-to-step "
                       "spread to judge a difference against"), \
            "too few steps on a side to judge a difference against their spread"
    mb, ma = statistics.median(before), statistics.median(after)
    if mb and abs(ma - mb) < MIN_CHANGE_PCT / 100 * mb:
        return False, f"the medians differ by less than {MIN_CHANGE_PCT:g}%", \
            "the medians differ by less than the rule's least change"
    if max(after) < min(before) or min(after) > max(before):
        why = "every step after is " + ("faster" if ma < mb else "slower") + \
            " than every step before"
        return True, why, why
    return False, ("the steps of the two captures overlap (before "
                   f"{rules.us_text(min(before))} to {rules.us_text(max(before))}, after "
                   f"{rules.us_text(min(after))} to {rules.us_text(max(after))}): the "
                   "difference is within the step-to-step spread"), \
        "the steps of the two captures overlap: the difference is within their spread"


def row(section, key, b, a, unit, label, status="", note="") -> list:
    ch = pct = ""  # the change, where both sides are figures
    if isinstance(b, float | int) and isinstance(a, float | int):
        ch, pct = round(a - b, 3), round(100.0 * (a - b) / b, 2) if b else ""
    return [section, key, _cell(b), _cell(a), ch, pct, unit, label, status, note]


def _cell(v):
    return round(v, 3) if isinstance(v, float) else ("" if v is None else v)


def step_figure(name: str, before: list, after: list, figs: dict, sig: dict,
                whose: str = "", sides: dict | None = None) -> list:
    """The compare.csv row of one step figure (`step_period` or `step_time`) from its per-step
    values on each side; its figures and its verdict by the rule go into `figs` and `sig` (the
    step period's with the rule's second half where the `sides` are given: attributed)."""
    sums = {"before": summary(before), "after": summary(after)}
    sig[name] = significance(before, after)
    for s in SIDES:
        figs[f"{name}_{s}_us"] = scratch.figure(sums[s]["value"], "us", "measured", sums[s],
                                                decimals=3)
    if sides is not None and name == "step_period":
        attributed(sides, sig, figs)
    b, a = sums["before"], sums["after"]
    return row("step", name, b["value"], a["value"], "us", "measured",
               "changed" if sig[name][0] else "within spread",
               f"{whose}median of {b['n']} and {a['n']} steps; before "
               f"{rules.us_text(b['min'])} to {rules.us_text(b['max'])}, after "
               f"{rules.us_text(a['min'])} to {rules.us_text(a['max'])}; {sig[name][1]}")


def step_rows(sides: dict) -> tuple[list, dict, dict]:
    """The step period and step time rows, their figures, and the significance verdict."""
    out, figs, sig = [], {}, {}
    for name, column in (("step_period", "period_us"), ("step_time", "dur_us")):
        vals = {s: sides[s].per_step(column) for s in SIDES}
        if not vals["before"] or not vals["after"]:
            out.append(row("step", name, None, None, "us", "measured", "not comparable",
                           "no analysed step on " + " and ".join(
                               s.upper() for s in SIDES if not vals[s])))
            continue
        out.append(step_figure(name, vals["before"], vals["after"], figs, sig, sides=sides))
    return out, figs, sig


def accounted(sides: dict) -> tuple[float, list[str]]:
    """The move of the step period that the step's parts (PARTS) account for where they moved
    beyond their own step-to-step spread (significance), and each such part in words."""
    total, said = 0.0, []
    for column, words in PARTS:
        b, a = (sides[s].per_step(column) for s in SIDES)
        if significance(b, a)[0]:
            moved = statistics.median(a) - statistics.median(b)
            total += moved
            said.append(f"{sides['before'].said(words)} {moved:+,.1f} us")
    return total, said


def attributed(sides: dict, sig: dict, figs: dict) -> None:
    """The rule's second half on the step period (`sig`, in place): a move of the period that
    no part moving beyond its spread accounts for is the host's variation between two runs,
    not the change's: no change counted, and why."""
    if not sig.get("step_period", (False,))[0]:
        return
    b, a = (figs[f"step_period_{s}_us"]["value"] for s in SIDES)
    total, said = accounted(sides)
    way = "faster" if a < b else "slower"
    if (total < 0) == (a < b) and abs(total) >= MIN_GAIN_PCT / 100 * b:
        sig["step_period"] = (True, sig["step_period"][1] + f"; accounted for by {total:+,.1f} "
                              f"us of its parts ({'; '.join(said)})",
                              f"every step after is {way} than every step before, and the parts "
                              "below that moved beyond their own spread account for it")
        return
    sig["step_period"] = (False, (
        f"the step period moved {a - b:+,.1f} us and every step after is "
        f"{'faster' if a < b else 'slower'} than every step before, but the parts of the step "
        f"that moved beyond their own spread account for {total:+,.1f} us of it"
        f"{' (' + '; '.join(said) + ')' if said else ' (none moved beyond its spread)'}, "
        f"less than {MIN_GAIN_PCT:g}% of the period in its direction: no gain (the rest is "
        "the variation between two runs)"),
        f"every step after is {way} than every step before, but the parts that moved beyond "
        f"their own spread account for less than {MIN_GAIN_PCT:g}% of the period: no gain")


def result_of(figs: dict, sig: dict, table: list, **rest) -> dict:
    """compare.json: the figures, whether the difference counts (the step period's verdict,
    else the step time's), its direction (faster, slower, no gain) and the rest."""
    key = "step_period" if "step_period" in sig else "step_time" if "step_time" in sig else None
    counted = bool(key and sig[key][0])
    direction = "no gain"
    if counted:
        b, a = (figs[f"{key}_{s}_us"]["value"] for s in SIDES)
        direction = "faster" if a < b else "slower"
    return {"step": "compare", "status": "done", "figures": figs,
            "significant": counted, "direction": direction,
            "significance": {"of": key, "why": sig[key][1] if key else "no analysed step",
                             "words": sig[key][-1] if key else "no analysed step",
                             "rule": RULE},
            **rest, "tables": {TABLE: len(table)}}


# What moves a verdict: the step's parts as steps.csv splits them (largest over GPUs per step).
PARTS = (("busy_us", "GPU busy"), ("host_late_us", "host late (critical stream)"),
         ("device_wait_us", "device wait (critical stream)"),
         ("unknown_gap_us", "unknown gaps (critical stream)"),
         ("idle_between_us", "idle between steps"),
         ("between_programs_idle_us", "idle between programs"))

HOST = (("kernels", "kernels per step", sum, "count"),
        ("executions", "dispatches per step", sum, "count"),
        ("host_late_us", "host-late time per step", max, "us"),
        ("idle_between_us", "idle between steps", max, "us"),
        ("between_programs_idle_us", "idle between programs per step", max, "us"))


def verdict_rows(sides: dict) -> tuple[list, list]:
    """The verdict before and after, and the step parts that moved most (largest first)."""
    v = {s: str(sides[s].skip.get("verdict") or "") for s in SIDES}
    out = [row("verdict", "verdict", v["before"], v["after"], "", "inferred",
               "changed" if v["before"] != v["after"] else "same")]
    moved = []
    for column, words in PARTS:
        b, a = (summary(sides[s].per_step(column)) for s in SIDES)
        if b and a and abs(a["value"] - b["value"]) >= 0.001:
            moved.append((abs(a["value"] - b["value"]), column, words, b["value"], a["value"]))
    moved.sort(reverse=True)
    said = sides["before"].said
    out += [row("verdict_part", column, b, a, "us", "measured", "",
                f"{said(words)}: median per step") for _, column, words, b, a in moved]
    return out, [{"part": c, "words": said(w), "before_us": round(b, 3), "after_us": round(a, 3)}
                 for _, c, w, b, a in moved[:3]]


def host_rows(sides: dict) -> list:
    out = []
    for join, words in (("launch", "kernels launched one by one per step"),
                        ("graph_launch", "kernels launched in graphs per step")):
        joined = {s: number((sides[s].skip.get("joins") or {}).get(join)) for s in SIDES}
        vals = {s: n / sides[s].steps if n is not None and sides[s].steps else None
                for s, n in joined.items()}
        if vals["before"] is not None or vals["after"] is not None:
            out.append(row("host", words, vals["before"], vals["after"], "count", "measured",
                           "" if None not in vals.values() else "not comparable",
                           "GPU events of the whole capture joined to a launch call of their "
                           "own or to a graph's (skip_stats.json: joins), over its analysed "
                           "steps"))
    for column, words, how, unit in HOST:
        b, a = (summary(sides[s].per_step(column, how)) for s in SIDES)
        if b is None and a is None:
            continue
        out.append(row("host", words, b and b["value"], a and a["value"], unit, "measured",
                       "" if b and a else "not comparable", "median per step"))
    return out


# ---------------------------------------------------------------- GPU time by what survives

KEYS = {  # section: (table, key of a row: what survives recompilation)
    "program": ("attribution/programs.csv", lambda r: r.get("module", "")),
    "instruction": ("attribution/ops.csv", lambda r: "/".join(
        (r.get("module", ""), r.get("instruction", ""), r.get("opcode", "")))),
    "family": ("attribution/families.csv", lambda r: r.get("family", "")),
    "kernel": ("attribution/kernel_names.csv", lambda r: r.get("kernel", "")),
    "line": ("attribution/lines.csv", lambda r: r.get("user_frame", "")),
}


def device_time_rows(sides: dict, refusals: list) -> tuple[list, dict]:
    out, times = [], {}
    if not all(sides[s].has_hlo for s in SIDES):
        lacking = " and ".join(s.upper() for s in SIDES if not sides[s].has_hlo)
        refusals.append(f"cannot compare programs, instructions, kernel families and Python "
                        f"lines because {lacking} has no attribution (no xplane, or step 4 "
                        "could not run); the steps and the host side are compared")
        return out, times
    stepless = [s for s in SIDES if not sides[s].steps]
    if stepless:  # nothing to divide a capture's GPU time by: never a zero or a max(1, 0)
        refusals.append(
            "cannot compare programs, instructions, kernel families and Python lines per step "
            "because " + " and ".join(s.upper() for s in stepless) + " has no analysed step "
            "(its steps.csv is empty: a cut trace, or a capture too short for one step), so its "
            "GPU time has no step to be divided by; the host side is compared")
        return out, times
    if short := [s for s in SIDES if sides[s].trace_short]:
        refusals.append(
            "cannot compare programs, instructions, kernel families and Python lines per step "
            "because " + " and ".join(f"{s.upper()}'s trace holds less GPU time than its xplane "
                                      f"on {len(sides[s].trace_short)} stream(s)" for s in short)
            + " (reconcile.json: a cut or capped trace): step 4's totals cover more than the "
            "trace's steps, so they cannot be divided by them; the steps and the host side "
            "are compared")
        return out, times
    for section, (file, key) in KEYS.items():
        t = {s: sides[s].device_time(file, key) for s in SIDES}
        renamed = renames(sides, t) if section == "instruction" else {}
        for old, new in renamed.items():  # one row, under AFTER's name
            t["before"][new] = t["before"].pop(old)
        was = {new: old for old, new in renamed.items()}
        times[section] = t
        keys = sorted(set(t["before"]) | set(t["after"]),  # the largest change first, then by key
                      key=lambda k: (-round(abs(t["after"].get(k, 0.0) - t["before"].get(k, 0.0)),
                                            3), k))
        for k in keys:
            b, a = t["before"].get(k), t["after"].get(k)
            status = ("new" if b is None else "gone" if a is None else
                      "renamed" if k in was else "")
            out.append(row(section, k, b if b is not None else 0.0,
                           a if a is not None else 0.0, "us", "inferred", status,
                           "GPU time per step (all GPUs)" + (
                               f"; before named {was[k].split('/')[1]} (the same fusion "
                               "structure: ops.csv fingerprint)" if k in was else "")))
    return out, times


def renames(sides: dict, t: dict) -> dict:
    """{BEFORE's instruction key: AFTER's} for instructions of one side alone that share their
    module, opcode and fusion fingerprint with exactly one of the other side alone: a fusion
    that recompilation renamed."""
    def alone_by_print(s, other):
        prints: dict = {}
        for r in sides[s].table("attribution/ops.csv"):
            k = KEYS["instruction"][1](r)
            fp = r.get("fingerprint", "")
            if fp and k in t[s] and k not in t[other]:
                prints.setdefault((r.get("module", ""), r.get("opcode", ""), fp), set()).add(k)
        return prints
    b, a = alone_by_print("before", "after"), alone_by_print("after", "before")
    return {next(iter(b[fp])): next(iter(a[fp])) for fp in b.keys() & a.keys()
            if len(b[fp]) == 1 and len(a[fp]) == 1}


# ---------------------------------------------------------------- predictions

def cause_measure(side: Side, kind: str, where: str, times: dict) -> float | None:
    """The per-step quantity a change of `kind` at `where` removes, measured on one side."""
    steps_columns = {"host_gap": "host_late_us", "dispatch": "between_programs_idle_us",
                     "idle_between_steps": "idle_between_us", "kernel_gaps": "device_wait_us"}
    if kind in steps_columns:
        d = int(m.group(1)) if (m := re.match(r"GPU (\d+)", where)) else None
        vals = [v for rs in side.by_step.values() for r in rs
                if (d is None or r.get("device") == str(d))
                and (v := number(r.get(steps_columns[kind]))) is not None]
        return statistics.median(vals) if vals else None
    if kind == "compile":  # step 1's compile a step; none where no step compiles
        return number(((side.skip.get("compile") or {}).get("per_step_us") or {})
                      .get("value")) or 0.0
    if kind == "exposed_collective":  # step 6's critical path of its median step
        return number((((side.files.json("changes.json") or {}).get("critical_path") or {})
                       .get("collective") or {}).get("value"))
    if kind == "straggler_wait":
        lags = [v for r in side.table("stragglers.csv")
                if (v := number(r.get("lag_us"))) is not None]
        return statistics.median(lags) if lags else 0.0
    section = {"kernel_family": "family", "memcpy": "family", "python_line": "line"}.get(kind)
    # the name the change's `where` begins with (before " (")
    name = "memcpy" if kind == "memcpy" else where.split(" (", 1)[0].strip()
    if kind == "instruction":
        t = times.get("instruction", {}).get(side.role, {})
        return sum(v for k, v in t.items() if k.split("/")[1:2] == [name])
    if section:
        return times.get(section, {}).get(side.role, {}).get(
            where if kind == "python_line" else name, 0.0)
    return None


def predictions(sides: dict, times: dict, period: dict | None) -> tuple[list, list]:
    """BEFORE's ranked changes beside the measured change of their cause and of the step
    period; (result entries, table rows). `cause_ratio`: the share of the predicted saving its
    cause lost. The step period's change is one effect of whatever was changed: it is set
    against the change whose cause moved most (`error_ratio`), none other."""
    entries = []
    step_change = (period["before"] - period["after"]) if period else None
    for c in sides["before"].table("changes.csv"):
        kind, where = c.get("cause_kind", ""), c.get("where", "")
        pred = number(c.get("saving_us"))
        b, a = (cause_measure(sides[s], kind, where, times) for s in SIDES)
        entries.append({"rank": int(number(c.get("rank")) or 0), "cause": kind, "where": where,
                        "predicted_saving_us": pred,
                        "measured_change_us": round(b - a, 3) if None not in (a, b) else None,
                        "cause_before_us": b, "cause_after_us": a,
                        "cause_ratio": round((b - a) / pred, 2) if None not in (a, b) and pred
                        else None,
                        "step_period_change_us": None if step_change is None
                        else round(step_change, 3), "error_ratio": None})
    moved = [e for e in entries if e["cause_ratio"] is not None
             and e["cause_ratio"] >= MIN_CAUSE_RATIO]
    if moved and step_change is not None:
        top = max(moved, key=lambda e: (e["measured_change_us"], -e["rank"]))
        top["error_ratio"] = round(step_change / top["predicted_saving_us"], 2)
    return entries, [prediction_row(e) for e in entries]


# A change whose cause lost less than this share of its predicted saving was not made (or did
# nothing): the step period's change is not set against it.
MIN_CAUSE_RATIO = 0.5


def prediction_row(e: dict) -> list:
    b, a = e["cause_before_us"], e["cause_after_us"]
    if e["measured_change_us"] is None:
        note = "its cause is not measurable from the tables compared"
    else:
        note = (f"its cause {rules.us_text(b)} per step before, {rules.us_text(a)} after "
                f"({e['cause_ratio']:g} of the prediction)")
        note += (f"; the step period moved {e['error_ratio']:g} times the prediction"
                 if e["error_ratio"] is not None else
                 "; the step period's change is set against the change whose cause moved most"
                 if (e["cause_ratio"] or 0) >= MIN_CAUSE_RATIO else
                 "; its cause hardly moved: a change not made, or without effect")
    return row("prediction", f"change {e['rank']}", e["predicted_saving_us"],
               e["measured_change_us"], "us", "inferred",
               "" if e["measured_change_us"] is not None else "not measurable",
               f"{e['cause']} at {e['where']}: {note}")


# ---------------------------------------------------------------- comparable at all

def same_capture(sides: dict) -> bool:
    """Whether the two sides were investigated from the same capture: each file step 0 read
    (xplane, trace) the same on both, by path or byte for byte."""
    import hashlib
    files = [((sides[s].info.get("capture") or {}).get(k) or {}) for k in ("xplane", "trace")
             for s in SIDES]
    pairs = [(files[i], files[i + 1]) for i in (0, 2)]
    if not any(b.get("file") for b, _ in pairs):
        return False

    def digest(f: dict) -> str | None:
        try:
            with open(f["file"], "rb") as fh:
                return hashlib.file_digest(fh, "sha256").hexdigest()
        except (OSError, KeyError, TypeError):
            return None
    for b, a in pairs:
        if b.get("bytes") != a.get("bytes"):
            return False
        if b.get("file") != a.get("file") and (digest(b) is None or digest(b) != digest(a)):
            return False
    return True


def comparable(sides: dict, notes: list) -> None:
    """Say what differs between the captures that bears on comparing them."""
    if same_capture(sides):
        notes.append("BEFORE and AFTER are the same capture (the same xplane and trace, byte for "
                     "byte): nothing changed between them, so no difference can be a change's; "
                     "compare a capture made after the change")
    def gpus(s):
        return (sides[s].info.get("capture") or {}).get("gpus") or \
            (sides[s].info.get("xplane") or {}).get("gpus")
    g = {s: gpus(s) for s in SIDES}
    if g["before"] and g["after"] and g["before"] != g["after"]:
        notes.append(f"the captures hold other GPUs ({g['before']} before, {g['after']} after): "
                     "per-step times compare, per-GPU rows may not")
    mods = {s: {r.get("module") for r in sides[s].table("attribution/programs.csv")
                if r.get("program_id", "").isdigit()}  # programs, not the events of none
            for s in SIDES}
    if mods["before"] and mods["after"] and not mods["before"] & mods["after"]:
        notes.append("the captures share no program (by module name): they run other programs "
                     "entirely, so every program, instruction and line is new or gone; the "
                     "step period and the host side still compare")


def compare(before: Path, after: Path) -> tuple[list, dict]:
    sides = {"before": Side(before, "before"), "after": Side(after, "after")}
    notes, refusals = [], []
    comparable(sides, notes)
    table, figs, sig = step_rows(sides)
    vrows, moved = verdict_rows(sides)
    table += vrows + host_rows(sides)
    gt, times = device_time_rows(sides, refusals)
    table += gt
    result = result_of(figs, sig, table,
                       verdict_before=sides["before"].skip.get("verdict"),
                       verdict_after=sides["after"].skip.get("verdict"), moved=moved,
                       predictions=[], notes=notes, refusals=refusals,
                       inputs={s: str(sides[s].folder) for s in SIDES})
    key = result["significance"]["of"]
    period = {s: figs[f"{key}_{s}_us"]["value"] for s in SIDES} if key else None
    result["predictions"], prow = predictions(sides, times, period)
    table += prow
    result["tables"] = {TABLE: len(table)}
    return table, result


def run_hosts(folder: Path) -> dict[str, Path]:
    """{host: its scratch folder} of a run's hosts.csv (the hosts whose pass finished)."""
    out = {}
    for r in scratch.Scratch(folder).rows("hosts.csv") or []:
        name = r.get("folder", "")
        if name in ("", ".", "..") or Path(name).name != name:
            continue  # a host's folder is a child of the run's, never a path elsewhere
        sub = folder / name
        if r.get("host") and kind(sub) == "host":
            out[r["host"]] = sub
    return out


def compare_runs(before: Path, after: Path, out: Path) -> tuple[list, dict, list]:
    """Two runs of several hosts: host by host into out/<host>/, then the run as a whole (its
    steps: each the slowest host's, from host_steps.csv)."""
    hosts = {s: run_hosts(f) for s, f in (("before", before), ("after", after))}
    if not (both := sorted(set(hosts["before"]) & set(hosts["after"]))):
        raise step_cli.StepError(f"BEFORE ({before}) and AFTER ({after}) share no host by name "
                                 "that finished: compare one host's folder of each instead")
    written, per_host = [], []
    names = folder_names(both)  # the names the per-host pass gives: never a raw host name
    for h in both:
        table, result = compare(hosts["before"][h], hosts["after"][h])
        written += write(out, table, result, names[h])
        per_host.append({"host": h, "significant": result["significant"],
                         "why": result["significance"]["why"],
                         "verdict_before": result["verdict_before"],
                         "verdict_after": result["verdict_after"]})
    table, result = compare_run_steps(before, after)
    result["hosts"] = per_host
    for h in sorted(set(hosts["before"]) ^ set(hosts["after"])):
        result["notes"].append(f"host {h} is in {'BEFORE' if h in hosts['before'] else 'AFTER'}"
                               " alone: not compared")
    for ph in per_host:
        table.append(row("host_result", ph["host"], ph["verdict_before"], ph["verdict_after"],
                         "", "inferred", "changed" if ph["significant"] else "within spread",
                         ph["why"]))
    return table, result, written


def compare_run_steps(before: Path, after: Path) -> tuple[list, dict]:
    """The run's step period and step time per step (the slowest host's), by the rule."""
    per = {}  # side -> column -> step -> the largest over the hosts
    for s, f in (("before", before), ("after", after)):
        per[s] = {"dur_us": {}, "period_us": {}}
        for r in scratch.Scratch(f).rows("host_steps.csv") or []:
            for column, by_step in per[s].items():
                v = number(r.get(column))
                if v is not None:
                    by_step[r.get("step")] = max(v, by_step.get(r.get("step"), v))
    table, figs, sig = [], {}, {}
    for name, column in (("step_period", "period_us"), ("step_time", "dur_us")):
        b, a = (list(per[s][column].values()) for s in SIDES)
        if b and a:
            table.append(step_figure(name, b, a, figs, sig, "the slowest host's, "))
    return table, result_of(
        figs, sig, table, verdict_before=None, verdict_after=None, moved=[], predictions=[],
        notes=["a run of several hosts: each host is compared in its own folder "
               "(<host>/compare.csv); here the run's steps, each the slowest host's"],
        refusals=[], inputs={"before": str(before), "after": str(after)})


def cite(label: str, column: str, section: str, key: str) -> str:
    return f"({label}; {TABLE}: {column}, section={section}, key={key})"


def fig(value) -> str:
    return f"{value:,.3f}"


def sig_words(result: dict, r: list) -> str:
    """The rule's reason in words for a step figure's row `r` in the draft (its figures are the
    rows the draft cites): compare.json's `significance.words` for the figure it judges."""
    sig = result["significance"]
    if sig.get("of") == r[1] and sig.get("words"):
        return sig["words"]
    if r[8] == "changed":
        return f"every step after is {'faster' if r[3] < r[2] else 'slower'} than every step before"
    return "the steps of the two captures overlap, or differ by less than the rule's least change"


def draft(table: list, result: dict) -> str:
    """The report's "Before and after" section: every figure cited from compare.csv, the
    judgement places marked."""
    by = {(r[0], r[1]): r for r in table}
    out = ["## Before and after", ""]
    for name in ("step_period", "step_time"):
        r = by.get(("step", name))
        if not r or r[2] == "":
            continue
        out.append(f"- {name.replace('_', ' ').capitalize()}: {fig(r[2])} us "
                   f"{cite('measured', 'before', 'step', name)} before, {fig(r[3])} us "
                   f"{cite('measured', 'after', 'step', name)} after, "
                   f"{r[5]:+.2f}% {cite('measured', 'change_pct', 'step', name)}: "
                   + ("a change by the rule (" if r[8] == "changed" else
                      "no change counted (") + f"{sig_words(result, r)}).")
    if result.get("verdict_before"):
        out.append(f"- Verdict: {result['verdict_before']} before, {result['verdict_after']} "
                   "after.")
    for m in result.get("moved", []):
        r = by[("verdict_part", m["part"])]
        out.append(f"- {m['words'].capitalize()}: {fig(r[2])} us "
                   f"{cite('measured', 'before', 'verdict_part', m['part'])} to {fig(r[3])} us "
                   f"{cite('measured', 'after', 'verdict_part', m['part'])} per step.")
    out += ["", "<!-- judge: did the change help? Say it only where the rule counts a change; "
            "name what moved, from the rows above. -->", ""]
    for p in result.get("predictions", []):
        key = f"change {p['rank']}"
        line = (f"- Change {p['rank']} ({p['cause']}) predicted {fig(p['predicted_saving_us'])} "
                f"us {cite('inferred', 'before', 'prediction', key)}")
        if p["measured_change_us"] is not None:
            line += (f"; its cause moved {fig(p['measured_change_us'])} us "
                     f"{cite('inferred', 'after', 'prediction', key)}")
        out.append(line + ".")
    if result.get("predictions"):
        out += ["", "<!-- judge: how far to trust the next estimate: compare each prediction "
                "with what its cause and the step period moved (compare.json: predictions). "
                "-->"]
    out += [f"- {s}" for s in result.get("refusals", []) + result.get("notes", [])]
    return "\n".join(out) + "\n"


def write(out: Path, table: list, result: dict, stands_for: str = "") -> list:
    """compare.csv, compare.json and compare_draft.md into out (or out/<host>), each whole."""
    target = out / stands_for if stands_for else out
    result["tables"] = {TABLE: len(table)}
    with rules.replace_files(target, ".compare-") as tmp:
        text = draft(table, result)
        (tmp / DRAFT).write_text(text, encoding="utf-8")
        written = [(TABLE, scratch.write_table(tmp, TABLE, table)),
                   (RESULT, scratch.write_result(tmp, RESULT, result)),
                   (DRAFT, text.count("\n"))]
    return [(f"{stands_for}/{f}" if stands_for else f, n) for f, n in written]


def compare_sides(args, out: Path) -> list[str]:
    before = side_folder(args.before, "before", out, args.no_xprof)
    after = side_folder(args.after, "after", out, args.no_xprof)
    if before.resolve() == after.resolve():
        raise step_cli.StepError(f"BEFORE and AFTER are one folder ({before}): give two")
    kinds = {"before": kind(before), "after": kind(after)}
    if kinds["before"] != kinds["after"]:
        one, run = ("BEFORE", "AFTER") if kinds["before"] == "host" else ("AFTER", "BEFORE")
        raise step_cli.StepError(f"{run} is a run of several hosts and {one} one host's: "
                                 f"compare one host's folder of {run} (<folder>/<host>) with "
                                 f"{one}")
    if kinds["before"] == "run":
        table, result, written = compare_runs(before, after, out)
    else:
        table, result = compare(before, after)
        written = []
    lines = step_cli.wrote(out, written + write(out, table, result))
    figs = result["figures"]
    for name in ("step_period", "step_time"):
        if f"{name}_before_us" in figs:
            b, a = figs[f"{name}_before_us"]["value"], figs[f"{name}_after_us"]["value"]
            lines.append(f"{name.replace('_', ' ')}: {rules.us_text(b)} -> {rules.us_text(a)}"
                         + (f" ({100 * (a - b) / b:+.1f}%)" if b else ""))
    lines.append(("a change: " if result["significant"] else "no change counted: ")
                 + result["significance"]["why"])
    if result["verdict_before"] or result["verdict_after"]:
        lines.append(f"verdict: {result['verdict_before']} -> {result['verdict_after']}")
    for p in result["predictions"][:3]:
        moved = ("its cause not measurable from these tables" if p["measured_change_us"] is None
                 else f"its cause moved {rules.us_text(p['measured_change_us'])}")
        step = ("" if p["error_ratio"] is None else
                f", the step period {rules.us_text(p['step_period_change_us'])} "
                f"({p['error_ratio']:g} of the prediction)")
        lines.append(f"  change {p['rank']} ({p['cause']}): predicted "
                     f"{rules.us_text(p['predicted_saving_us'])}, {moved}{step}")
    for h in result.get("hosts", []):
        lines.append(f"  host {h['host']}: {h['verdict_before']} -> {h['verdict_after']}; "
                     + ("a change" if h["significant"] else "no change counted") + f": {h['why']}")
    lines += [f"  {s}" for s in result["notes"] + result["refusals"]]
    return lines
