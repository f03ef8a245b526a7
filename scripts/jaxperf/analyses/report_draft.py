"""The report draft: every figure of the report filled in from the scratch folder's tables: the
analysis. Its door, with the command line and what it writes, is scripts/report_draft.py."""

from __future__ import annotations

import re
from pathlib import Path

from jaxperf.device.adapters import of_results
from jaxperf.report import citations  # the citation syntax the fact check reads
from tracekit import trace_rules as rules
from tracekit.scratch import Scratch  # the scratch folder, read once
from tracekit.trace_rules import number_text

DRAFT = "report_draft.md"

TOP_ROWS = 8  # instructions and Python lines listed: enough to cover most time in practice

BRIEF_ROWS = 3  # instructions, lines and changes said in brief

MAIN_ROWS = 5  # rows of a long table in its section; all of them in the appendix

MAIN_CHANGES = 3  # changes in section 5; every change, with its assumptions, in the appendix

RECONCILE_ROWS = 20  # failed checks listed; the rest are named by their file, not counted

HOW, OPS, LINES = "attribution/how.csv", "attribution/ops.csv", "attribution/lines.csv"

PHASES = "attribution/phases.csv"

CH = "changes.csv"

KNOWN_TABLES = ("capture_info.json", "skip_stats.json", "attribution/attribute_kernels.json")


# ---------------------------------------------------------------- figures with citations

UNITS = {"us": "us", "pct": "%", "count": "", "bytes": "B"}


def num(value, decimals: int) -> str:
    """A table cell's number rounded for a column whose header carries the citation."""
    return "" if value in (None, "") else number_text(float(value), decimals)


def cite(value, unit: str, label: str, table: str, selector: str, decimals: int = 1) -> str:
    """`<number><unit> (<label>; <table>: <selector>)`, the form factcheck.py reads; an empty
    string for a value that is not there (the caller says why)."""
    if value in (None, ""):
        return "n/a"
    v = float(value)
    sep = "" if unit in ("%", "") else " "
    return f"{number_text(v, decimals)}{sep}{unit} ({label}; {table}: {selector})"


def fig(scratch: Scratch, table: str, key: str, decimals: int = 1) -> str:
    """A `{value, unit, label}` figure of a JSON result, with its range where it has one."""
    d = scratch.json(table) or {}
    f = (d.get("figures") or {}).get(key)
    if not isinstance(f, dict) or f.get("value") is None:
        return "n/a"
    unit = UNITS.get(f.get("unit", ""), f.get("unit", ""))
    dec = 0 if f.get("unit") == "count" else decimals
    if f.get("n") == 2 and f["min"] != f["max"]:  # two values: both, not their mean
        return (f"{cite(f['min'], unit, f['label'], table, f'figures.{key}.min', dec)} and "
                f"{cite(f['max'], unit, f['label'], table, f'figures.{key}.max', dec)}")
    if f.get("min") is None or f.get("max") is None or f["min"] == f["max"]:
        return cite(f["value"], unit, f["label"], table, f"figures.{key}.value", dec)
    sep = "" if unit in ("%", "") else " "
    # value (min–max) before one citation of the figure: the check reads all three
    return (f"{number_text(float(f['value']), dec)}{sep}{unit} "
            f"({number_text(float(f['min']), dec)}–{number_text(float(f['max']), dec)}{sep}"
            f"{unit}) ({f['label']}; {table}: figures.{key})")


def cell(value, unit: str, label: str, table: str, column: str, key: str, decimals: int = 1) -> str:
    """A CSV cell's figure cited by its column and its row's key; empty where the cell is."""
    return "" if value in (None, "") else cite(value, unit, label, table, f"{column}, {key}",
                                                 decimals)


def judge(what: str) -> str:
    return f"<!-- judge: {what} -->"


def asked(what: str) -> list[str]:
    """A section's last lines: what the agent is asked to judge there."""
    return ["", judge(what), ""]


def missing(table: str, why: str) -> str:
    return f"_Not available: `{table}` is missing ({why}); see the trust list._"


MD_PUNCT_RE = re.compile(r"([\\`*_\[\]<>#|!])")


def md_cell(text: str) -> str:
    """A capture's or a tool's text in Markdown: every character Markdown could read as markup
    (links, images, emphasis, code, HTML, table pipes) backslash-escaped, on one line; and a
    parenthesis that would read as a citation (a capture's name like `(roofline.svg)`) escaped,
    so the fact check takes it as the text it is."""
    out = MD_PUNCT_RE.sub(r"\\\1", str(text).replace("\n", " "))
    return citations.CITE_RE.sub(lambda m: "\\" + m.group(0), out)


def code(text: str) -> str:
    """A name as a code span, fenced by more backticks than any run inside it."""
    t = str(text).replace("\n", " ").replace("|", "\\|")
    fence = "`" * (max((len(m) for m in re.findall(r"`+", t)), default=0) + 1)
    pad = " " if t.startswith("`") or t.endswith("`") else ""
    return f"{fence}{pad}{t}{pad}{fence}"


# ---------------------------------------------------------------- sections


def gpu_line(s: Scratch) -> list[str]:
    """The GPU the capture identifies and the profiler's own start-up beside the wall clock
    (capture_info.json): the first thing a reader checks against the machine they meant."""
    info = s.json("capture_info.json") or {}
    g = info.get("gpu_model") or {}
    d = info.get("device") or {}
    out = []
    if d.get("kind") == "TPU":
        t = "capture_info.json"
        peaks = "; ".join(
            f"{what} {cite(v['value'] / 1e12, 'T' + v['unit'], 'read', t, sel, 2)}"
            for k, what in (("mxu_flops_per_s", "MXU"), ("hbm_bytes_per_s", "HBM"))
            for v in [(d.get("peaks") or {}).get(k)] if v
            for sel in [f"device.peaks.{k}.value"])  # factcheck reads T as 1e12
        out.append(f"- TPU: **{md_cell(d['model'])}** (read; capture_info.json: device.model), "
                   f"{cite(d['cores'], '', 'read', t, 'device.cores', 0)} core(s) in the capture"
                   + (f"; its peaks, read from the device plane: {peaks}" if peaks else "")
                   + ". " + judge("say it is the chip the user meant, or that it is not"))
    elif g.get("model"):
        out.append(f"- GPU: **{g['model']}** (inferred; capture_info.json: gpu_model.model), "
                   f"identified from its device stats (references/peaks-sources.md). "
                   + judge("say it is the GPU the user meant, or that it is not"))
    elif g.get("why"):
        out.append(f"- GPU: not identified: {md_cell(g['why'])} (read; capture_info.json: "
                   "gpu_model.why)")
    p = info.get("profiler") or {}
    if info.get("profile_ms") and p.get("start_trace_ms") is not None:
        t = "capture_info.json"
        wall = cite(info["profile_ms"], "ms", "measured", t, "profile_ms", 3)
        line = (f"- Wall clock of the profile: {wall}, of which "
                f"{cite(p['start_trace_ms'], 'ms', 'measured', t, 'profiler.start_trace_ms', 3)}"
                " is the profiler's own start-up (start_trace), not the program's")
        if p.get("between_ms") is not None:
            line += (f"; the traced work between start-up and stop takes "
                     f"{cite(p['between_ms'], 'ms', 'measured', t, 'profiler.between_ms', 3)}")
        out.append(line + ".")
    return out


def on_tpu(s: Scratch) -> bool:
    """Whether the capture is a TPU's (adapters.of_results: a trace without its xplane too)."""
    return of_results(s.json("capture_info.json"), s.json("skip_stats.json")).kind == "TPU"


def results(s: Scratch) -> list[str]:
    """In brief: the answers to a user's usual questions, each cited: the GPU, the step time,
    what bounds it, the top instructions and lines, the first changes, the trust list."""
    skip = s.json("skip_stats.json")
    out = gpu_line(s)
    tpu = on_tpu(s)
    own = rules.tpu_words if tpu else str  # the draft's own words, not a quoted cell
    if skip:  # the verdict's shares: one a step, over `n` analysed steps
        f = (skip.get("figures") or {}).get("host_share_pct_of_step") or {}
        n = cite(f.get("n"), "", f.get("label"), "skip_stats.json",
                 "figures.host_share_pct_of_step.n", 0)
        out.append(f"- What bounds the step: **{skip.get('verdict')}** (inferred; "
                   f"skip_stats.json: verdict); {own('the critical stream')} waits on the host "
                   f"{fig(s, 'skip_stats.json', 'host_share_pct_of_step')} of the step"
                   + (f" (over {n} analysed steps). " if f.get("n") else ". ")
                   + judge("say in one sentence what bounds the step, from skip_stats.json "
                           "rule and figures; the verdict stands or is qualified"))
        out.append(f"- Step time (its start to {own('its last kernel')}): "
                   f"{fig(s, 'skip_stats.json', 'step_duration_us')}.")
    else:
        out.append("- What bounds the step: " + missing("skip_stats.json", "step 1 did not run"))
    out += top_in_brief(s)
    cj = s.json("changes.json") or {}
    period = (cj.get("figures") or {}).get("step_us") or {}
    if period.get("value") is not None:
        n = (cj.get("steps") or {}).get("median")
        c = "changes.json"
        cf = (cj.get("figures") or {}).get("combined_saving_us") or {}
        comb = cite(cf.get("value"), "us", cf.get("label", "inferred"), c,
                    "figures.combined_saving_us.value")
        spread = (f"; across the steps it ranges "
                  f"{cite(period['min'], 'us', period['label'], c, 'figures.step_us.min')} to "
                  f"{cite(period['max'], 'us', period['label'], c, 'figures.step_us.max')}"
                  if period.get("min") != period.get("max") else "")
        out.append(f"- Step period (the median over the steps of a step's start to the next "
                   f"step's: what each change's share is of): "
                   f"{cite(period['value'], 'us', period['label'], c, 'figures.step_us.value')}"
                   f"{spread}; "
                   f"all changes at once save at most {comb} a step (an upper bound; the "
                   f"changes' sentences are of step {n}, an instruction's time there its "
                   "program's mean run times its runs in that step"
                   + ("; a mid-run recompile's row is of its own step_us, outside it"
                      if any(x.get("step_us", {}).get("value") != period.get("value")
                             for x in cj.get("causes") or []) else "")
                   + ").")
    if changes := s.rows("changes.csv"):
        for r in changes[:1]:
            rank = f"rank={r['rank']}"
            out.append(
                f"- Change {r['rank']}: {md_cell(r['cause'])} (inferred; changes.csv: cause, "
                f"{rank}): saves " + measured_part(r, rank)
                + f"{cell(r['saving_us'], 'us', 'inferred', 'changes.csv', 'saving_us', rank)}"
                f" of the step (inferred, not run)"
                + (f", at its ceiling ({r['target']})" if r.get("target")
                   and not r.get("saving_measured_us") else "") + faster(r, rank) + ". " + judge(
                    ("say whether change 1 is the one to test first and why; its knob: "
                     if r["rank"] == "1" else
                     f"say what change {r['rank']} adds after the ones above it; its knob: ")
                    + r["knob"]))
        for r in changes[1:2]:  # the next one, short: its cause and knob are section 5's
            rank = f"rank={r['rank']}"
            out.append(
                f"- Change {r['rank']} ({r['cause_kind']}) at {md_cell(r['where'])} (inferred; "
                f"changes.csv: where, {rank}): saves "
                f"{cell(r['saving_us'], 'us', 'inferred', 'changes.csv', 'saving_us', rank)}"
                " of the step (inferred, not run); its cause, knob and assumptions: section 5 "
                "and the appendix. " + judge(f"say what change {r['rank']} adds after change 1, "
                                             "and whether the two overlap"))
    else:
        out.append("- Changes: " + missing("changes.csv", "step 6 did not run"))
    trust = s.json("trust.json")
    items = ((trust or {}).get("figures") or {}).get("items") or {}
    if items.get("value") is not None:
        out.append(f"- Trust list: {fig(s, 'trust.json', 'items')} items; needs a new capture: "
                   f"{fig(s, 'trust.json', 'needs_new_capture')} questions.")
    else:
        out.append("- Trust list: " + missing("trust.json", "step 7 did not run"))
    return out + [""]


def top_in_brief(s: Scratch) -> list[str]:
    """The three instructions and Python lines with the most GPU time, where step 4 ranked
    them (its refusal is said in section 4)."""
    refusals = rank_refusals(s)
    out = []
    kn = "attribution/kernel_names.csv"
    top = [r for r in (s.rows(kn) or [])[:BRIEF_ROWS] if r["kernel"]]
    tpu = on_tpu(s)
    if top and not tpu:  # by name alone: no matching (a TPU's names are its instructions)
        share = [cell(r["pct_of_device_time"], "%", "inferred", kn, "pct_of_device_time",
                      name_key(r), 2) for r in top]
        out.append("- Top kernels by name, share of device time: " + "; ".join(
            f"{code(shown_name(r['kernel']))} ({r['family']}) {c}"
            for r, c in zip(top, share, strict=True)) + ".")
    for table, what, col, refused in ((OPS, "Top instructions", "instruction", refusals["ops"]),
                                      (LINES, "Top Python lines", "user_frame",
                                       refusals["lines"])):
        rows = [r for r in (s.rows(table) or [])[:BRIEF_ROWS] if r[col]]
        if rows and not refused:
            share = [cell(r["pct_of_device_time"], "%", "inferred", table, "pct_of_device_time",
                          key_of(r, col), 2) for r in rows]
            # an instruction's name repeats across programs: then each is named by its program
            named = len({r[col] for r in rows}) < len(rows) and col == "instruction"
            out.append(f"- {what} by share of device time: " + "; ".join(
                f"{code(program_named(r) if named else r[col])} {c}"
                for r, c in zip(rows, share, strict=True)) + ".")
    return out


def program_named(r: dict) -> str:
    """An ops.csv row's instruction with its program: `jit_dot(49) custom-call.1`."""
    return f"{r.get('module', '')}({r.get('program_id', '')}) {r['instruction']}"


MAX_CITED_NAME = 100  # a kernel name longer than this is left to its table, not cited inline


def citeable(name: str) -> bool:
    """Whether a kernel name can stand as a citation's filter value (short, and none of the
    characters a citation or a code span is made of)."""
    return bool(name) and len(name) <= MAX_CITED_NAME and not set(name) & set('"()`;|\n\\')


SHOWN_NAME = 60  # characters of a kernel name too long to cite, shown before an ellipsis


def shown_name(name: str) -> str:
    """A kernel name as the brief shows it: whole where it can be cited, else its start."""
    return name if citeable(name) else \
        "".join(ch for ch in name[:SHOWN_NAME] if ch not in "`\n") + "…"


def name_key(r: dict) -> str:
    """A kernel_names.csv row's filter: its name, or for a name too long or odd to cite, its
    GPU time and kernel count (the row's own cells); a name is quoted where it holds a comma."""
    name = r["kernel"]
    if citeable(name):
        return "kernel=" + (f'"{name}"' if "," in name else name)
    return f"device_us={r['device_us']}, kernels={r['kernels']}"


def key_of(r: dict, col: str) -> str:
    """A row's key in ops.csv (program and instruction: a name repeats across programs) or
    lines.csv (the Python line)."""
    return f"program_id={r.get('program_id', '')}, instruction={r['instruction']}" \
        if col == "instruction" else f"user_frame={r['user_frame']}"


def verdict_section(s: Scratch) -> list[str]:
    skip = s.json("skip_stats.json")
    if not skip:
        return [missing("skip_stats.json", "step 1 did not run"), ""]
    out = [f"Verdict: **{skip.get('verdict')}** (inferred; skip_stats.json: verdict). Rule:", ""]
    out += [f"- {md_cell(r)} (inferred; skip_stats.json: rule.{n})"
            for n, r in enumerate(skip.get("rule") or [])]
    if longest_gaps(s):
        out += ["", "The longest host-late gaps and the host events inside them: the appendix."]
    return out + asked("name the host-side causes (gaps.csv host_events) and whether the "
                       "verdict holds on every GPU (steps.csv)")


def longest_gaps(s: Scratch) -> list[str]:
    """The three longest host-late gaps on the critical stream with their host events."""
    late = sorted((g for g in s.rows("gaps.csv") or [] if g.get("cause") == "host_late"),
                  key=lambda g: -float(g["dur_us"] or 0))[:3]
    return [f"- GPU {g['device']} stream {g['stream']} step {g['step']}: "
            f"{cell(g['dur_us'], 'us', 'measured', 'gaps.csv', 'dur_us', key, 3)}; "
            f"host events inside: {code(g['host_events'] or 'none recorded')}"
            for g in late for key in [f"device={g['device']}, start_us={g['start_us']}"]]


STEP_FIGURES = {  # step 1's figures in the appendix, in order, with their names
    "step_duration_us": "step duration", "busy_us": "GPU busy (union of streams)",
    "union_idle_us": "GPU idle (step minus busy)",
    "host_share_pct_of_step": "host-late share of the critical stream",
    "busy_share_pct_of_step": "busy-or-queued share",
    "collective_share_pct_of_step": "collective share",
    "kernels_per_step_per_device": "kernels per step per GPU",
    "tklqt_us": "TKLQT (sum of launch-to-start)", "akd_us": "AKD (average kernel duration)"}


def figures_table(s: Scratch) -> list[str]:
    """Step 1's figures across steps and GPUs (skip_stats.json), for the appendix."""
    figures = (s.json("skip_stats.json") or {}).get("figures") or {}
    return ["| figure | median (range) across steps and GPUs |", "|---|---|"] + [
        f"| {name} | {fig(s, 'skip_stats.json', key)} |"
        for key, name in STEP_FIGURES.items() if key in figures] + [""]


def reconciliation_section(s: Scratch) -> list[str]:
    rec = s.json("reconcile.json")
    if not rec:
        return [missing("reconcile.json", "step 2 did not run"), ""]
    counts = rec.get("counts") or {}
    out = [", ".join(f"{k}: {cite(v, '', 'measured', 'reconcile.json', 'counts.' + k, 0)}"
                     for k, v in sorted(counts.items()))]
    if any(r["status"] != "pass" for r in s.rows("reconciliation.csv") or []):
        out += ["", "Each check that did not pass, with its sentence: the appendix."]
    return out + asked("say whether any failed check changes a figure quoted below "
                       "(reconciliation.csv trust_sentence)")


def failed_checks(s: Scratch) -> list[str]:
    """Every reconciliation check that did not pass, with its trust-list sentence."""
    if not (bad := [r for r in (s.rows("reconciliation.csv") or []) if r["status"] != "pass"]):
        return []
    out = ["", "| check | GPU | stream | status | trust-list sentence |", "|---|---|---|---|---|"]
    for r in bad:
        key = f"check={r['check']}, device={r['device']}" + (
            f", stream={r['stream']}" if r["stream"] else "")
        out.append(f"| {r['check']} | {r['device']} | {r['stream']} | {r['status']} | "
                   f"{md_cell(r['trust_sentence'])} (measured; reconciliation.csv: "
                   f"trust_sentence, {key}) |")
    return out + [""]


def streams_table(s: Scratch) -> list[str]:
    """Every GPU stream's shares of its span (streams.csv), for the appendix."""
    if (streams := s.rows("streams.csv")) is None:
        return [missing("streams.csv", "step 1 did not run"), ""]
    out = ["| GPU | stream | critical | compute (% of span) | collective (% of span) "
           "| memcpy (% of span) | idle (% of span) |", "|---|---|---|---|---|---|---|"]
    for r in streams:
        key = f"device={r['device']}, stream={r['stream']}"
        cells = [cite(r[c], "%", "measured", "streams.csv", f"{c}, {key}")
                 for c in ("compute_pct_of_span", "collective_pct_of_span",
                           "memcpy_pct_of_span", "idle_pct_of_span")]
        out.append(f"| {r['device']} | {r['stream']} | {'yes' if r['critical'] == '1' else ''}"
                   f" | " + " | ".join(cells) + " |")
    return out + [""]


def streams_section(s: Scratch) -> list[str]:
    out = ["Each stream's shares of its span: the appendix (streams.csv)."]
    sw = s.json("swimlanes.json")
    if sw:
        out += ["", "![swimlanes of one step](swimlanes.svg)", ""]
        if sentence := (sw.get("straggler") or {}).get("sentence"):
            out.append(f"In the drawn step: {md_cell(sentence)} (measured; swimlanes.json: "
                       f"straggler.sentence)")
        across = (s.json("skip_stats.json") or {}).get("straggler") or {}
        if across.get("steps") and across.get("gpu") is not None:
            # the drawn step's last GPU is not a straggler unless it is last in most steps
            j = "skip_stats.json"
            last = cite(across.get("steps_last"), "", "measured", j, "straggler.steps_last", 0)
            out.append(f"Across the steps: GPU {across['gpu']} is last in {last} of "
                       f"{cite(across['steps'], '', 'measured', j, 'straggler.steps', 0)} steps; "
                       "step 1 calls a GPU a straggler only when it is last in most steps, ahead "
                       "of the next by its margin: "
                       + ("it does here." if across.get("is_straggler") else "not here."))
    else:
        out += ["", missing("swimlanes.json", "step 3 did not run")]
    return out + asked("which stream is the critical path and what the last GPU waits for "
                       "(swimlanes.svg, stragglers.csv)")


def shares(r: dict, table: str, key: str) -> str:
    """An ops.csv or lines.csv row's two shares, as two cells: of the chosen program's
    attributed time, and of all GPU time."""
    return " | ".join(cell(r[c], "%", "inferred", table, c, key, 2)
                      for c in ("pct_of_attributed", "pct_of_device_time"))


# A refusal to rank a table's rows, as steps 4 and 6 word it: "cannot rank instructions or Python
# lines because ..." (changes.py), the one contract the draft reads refusals by.
RANK_REFUSAL_RE = re.compile(r"^cannot rank\b(?P<what>[^:;]*?)\bbecause\b")

REFUSING = ("attribution/attribute_kernels.json", "changes.json")


def rank_refusals(s: Scratch) -> dict[str, list[tuple[str, str]]]:
    """{"ops": [(citation path, sentence)], "lines": [...]}: the refusals of steps 4 and 6 to
    rank instructions (ops.csv) or Python lines (lines.csv). Where one stands, the draft says it
    instead of the table's shares: they would answer what the step refused."""
    out: dict[str, list[tuple[str, str]]] = {"ops": [], "lines": []}
    for table in REFUSING:
        for n, sentence in enumerate((s.json(table) or {}).get("refusals") or []):
            if not (m := RANK_REFUSAL_RE.match(str(sentence))):
                continue
            what = m.group("what").lower()
            where = f"{table}: refusals.{n}"
            if "instruction" in what or "ops.csv" in what:
                out["ops"].append((where, sentence))
            if "python line" in what or "lines.csv" in what:
                out["lines"].append((where, sentence))
    return out


def refused_lines(refusals: list[tuple[str, str]], table: str, what: str,
                  program: str) -> list[str]:
    """The refusal said, quoted whole and cited, in place of a table of shares."""
    out = ["", f"{what}: not ranked here. The step that ranks them refused:", ""]
    out += [f"- {md_cell(sentence)} (inferred; {where})" for where, sentence in refusals]
    out += ["", f"`{table}`'s shares (the chosen program is {code(program)}) are not stated "
            "here as an answer to what the step refused."]
    return out


def ops_section(s: Scratch) -> list[str]:
    att = s.json("attribution/attribute_kernels.json")
    if not att:
        return [missing("attribution/attribute_kernels.json",
                        "step 4 did not run or the capture has no HLO"), ""]
    t = "attribution/attribute_kernels.json"
    refusals = rank_refusals(s)
    prog = att.get("program") or {}
    program = f"{prog.get('name')}({prog.get('id')})"
    out = [f"Attributed: {fig(s, t, 'attributed_pct_of_device_time', 2)} of kernel time; low "
           f"confidence: {fig(s, t, 'low_confidence_pct_of_all_attributed', 2)} of the "
           f"attributed time; XProf's hlo_stats covers "
           f"{fig(s, t, 'xprof_hlo_stats_pct_of_device_time', 2)} of kernel time."]
    ops = (s.rows(OPS) or [])[:MAIN_ROWS]
    if ops and refusals["ops"]:
        out += refused_lines(refusals["ops"], OPS, "Instructions", program)
    elif ops:
        out += ops_table(s, ops)
    lines = (s.rows(LINES) or [])[:MAIN_ROWS]
    if lines and refusals["lines"]:
        if refusals["lines"] != refusals["ops"]:
            out += refused_lines(refusals["lines"], LINES, "Python lines", program)
        else:
            out += ["", "Python lines: not ranked either (the same refusal)."]
    elif lines:
        out += lines_table(lines)
    out += ["", "The match classes, the time of each phase (forward, backward, outside), and more "
            "instructions and lines: the appendix."]
    out += roofline_part(s)
    if refusals["ops"] or refusals["lines"]:
        return out + asked("say what the refusal above leaves unanswered (which instructions and "
                           "lines cost most in a step) and which capture would answer it (the "
                           "trust list's needs-a-new-capture rows); state no share of the one "
                           "program as the step's")
    return out + asked("which instructions and lines to look at first, and whether their "
                       "distance to the ceiling (roofline.csv pct_of_ceiling, binding) says "
                       "anything about them; a small instruction cannot fill the GPU")


def ops_table(s: Scratch, ops: list) -> list[str]:
    """Instructions with their GPU time, shares, Python line and the share of their ceiling
    they reach (or why none is computable); the figures cited once in the header, by the row's
    program id and instruction (an instruction name repeats across programs)."""
    roof = {(r.get("program_id", ""), r["instruction"]): r for r in (s.rows("roofline.csv") or [])}
    key = "program_id=*, instruction=*3"
    out = ["", "| program id | program | instruction "
           f"| device time (us) (measured; {OPS}: device_us, {key}) "
           f"| share of attributed (%) (inferred; {OPS}: pct_of_attributed, {key}) "
           f"| share of device time (%) (inferred; {OPS}: pct_of_device_time, {key}) "
           "| Python line | ceiling reached |", "|---|---|---|---|---|---|---|---|"]
    for r in ops:
        k = key_of(r, "instruction")
        rf = roof.get((r.get("program_id", ""), r["instruction"]))
        if rf and rf["pct_of_ceiling"]:
            reach = cite(rf["pct_of_ceiling"], "%", "inferred", "roofline.csv",
                         "pct_of_ceiling, " + k, 2) + f" ({rf['binding']}-bound)"
        else:
            # the reason as text, cited: the numbers inside it are covered by its check
            reach = (f"{md_cell(rf['no_ceiling_why'])} (inferred; roofline.csv: "
                     f"no_ceiling_why, {k})" if rf and rf["no_ceiling_why"] else "")
        out.append(f"| {r.get('program_id', '')} | {code(r.get('module', ''))} | "
                   f"{code(r['instruction'])} | "
                   f"{num(r['device_us'], 1)} | {num(r['pct_of_attributed'], 2)} | "
                   f"{num(r['pct_of_device_time'], 2)} | "
                   f"{code(line) if (line := r['user_frame'] or r['source']) else ''} | {reach} |")
    return out


def lines_table(lines: list) -> list[str]:
    key = "user_frame=*"
    out = ["", f"| Python line | device time (us) (measured; {LINES}: device_us, {key}) "
           f"| share of attributed (%) (inferred; {LINES}: pct_of_attributed, {key}) "
           f"| share of device time (%) (inferred; {LINES}: pct_of_device_time, {key}) "
           f"| instructions (measured; {LINES}: instructions, {key}) |", "|---|---|---|---|---|"]
    for r in lines:
        if not r["user_frame"]:
            continue  # no line: counted in how.csv and on the trust list
        out.append(f"| {code(r['user_frame'])} | {num(r['device_us'], 1)} | "
                   f"{num(r['pct_of_attributed'], 2)} | {num(r['pct_of_device_time'], 2)} | "
                   f"{num(r['instructions'], 0)} |")
    return out


def roofline_part(s: Scratch) -> list[str]:
    rj = s.json("roofline.json")
    if rj and rj.get("status") == "done":
        model = rj["gpu"].get("model")
        out = ["", "![roofline of the chosen program](roofline.svg)", "",
               f"{'TPU' if rj['gpu'].get('kind') == 'TPU' else 'GPU'}: `{model}` "
               f"({rj['gpu'].get('label') or 'inferred'}; roofline.json: gpu.model). Ceilings:"
               if model else
               f"GPU: not identified ({rj['gpu'].get('why') or 'no model in roofline.json'}). "
               "Ceilings:", ""]
        for n, c in enumerate(rj.get("ceilings") or []):
            unit = "TFLOP/s" if c["unit"].startswith("FLOP") else "TB/s"
            value = float(c["value"]) / 1e12  # factcheck converts T back (1 TB/s = 1e12 B/s)
            where = f"ceilings.{n}.value"
            out.append(f"- {c['ceiling']}: "
                       f"{cite(value, unit, c['label'], 'roofline.json', where, 2)}"
                       f", tag {c['tag']}, source {c['source']}"
                       + ("" if c["tag"] == "capture" else " (references/peaks-sources.md)"))
        return out
    if rj:
        return ["", "Roofline refused: " + (
            f"{md_cell(rj['refusals'][0])} (inferred; roofline.json: refusals.0)"
            if rj.get("refusals") else "no reason given (roofline.json)")]
    return ["", missing("roofline.json", "step 5 did not run")]


def appendix(s: Scratch) -> list[str]:
    """The tables behind the sections, whole: each stream's shares, how kernels were matched,
    the top instructions and Python lines, every change with its measured target and the step
    if it were gone, every failed reconciliation check."""
    out = ["### Step 1's figures", ""] + figures_table(s)
    gaps = longest_gaps(s)
    out += ["### Longest host-late gaps on the critical stream", ""] + gaps + [""] if gaps else []
    bad = failed_checks(s)
    out += ["### Reconciliation checks that did not pass"] + bad if bad else []
    out += ["### GPUs and streams", ""] + streams_table(s)
    if how := [r for r in (s.rows(HOW) or []) if r["program_id"] == "all"]:
        out += ["### Match classes", "", "| match class | kernels | share of device time |",
                "|---|---|---|"] + [
            f"| {r['match']} | {cell(r['kernels'], '', 'measured', HOW, 'kernels', k, 0)} | "
            f"{cell(r['pct_of_group'], '%', 'inferred', HOW, 'pct_of_group', k, 2)} |"
            for r in how for k in [f"program_id=all, match={r['match']}"]] + [""]
    phases = phases_part(s)
    out += ["### Phases of the program"] + phases + [""] if phases else []
    refusals = rank_refusals(s)
    ops = (s.rows(OPS) or [])[:TOP_ROWS]
    if len(ops) > MAIN_ROWS and not refusals["ops"]:  # more than section 4 shows, else nothing
        out += ["### Top instructions, more of them"] + ops_table(s, ops) + [""]
    lines = (s.rows(LINES) or [])[:TOP_ROWS]
    if len(lines) > MAIN_ROWS and not refusals["lines"]:
        out += ["### Top Python lines, more of them"] + lines_table(lines) + [""]
    if changes := s.rows(CH) or []:
        out += ["### Every change", ""] + changes_table(changes, full=True) + [""]
    if rule := (s.json("changes.json") or {}).get("combine_rule"):
        out += [f"How they combine: {md_cell(rule)} (inferred; changes.json: combine_rule)", ""]
    out += assumptions(changes)
    trust = s.rows("trust.csv") or []
    if items := [r for r in trust if r["section"] == "trust" and r["detail"]]:
        out += ["### What each trust item means", "",
                "| item | what it means (inferred; trust.csv: detail, section=trust, item=*) |",
                "|---|---|"]
        out += [f"| {md_cell(r['item'])} | {md_cell(r['detail'])} |" for r in items] + [""]
    if needs := [r for r in trust if r["section"] == "needs_new_capture"]:
        out += ["### Questions that need a new capture", "",
                "| question | the capture that answers it (inferred; trust.csv: detail, "
                "section=needs_new_capture, item=*) |", "|---|---|"]
        out += [f"| {md_cell(r['item'])} | {md_cell(r['detail'])} |" for r in needs] + [""]
    return out


def phases_part(s: Scratch) -> list[str]:
    """GPU time per phase of the program (phases.csv), and what an absent phase says."""
    if not (rows := s.rows(PHASES)):
        return []
    out = ["", "| phase | instructions | device time | share of device time |", "|---|---|---|---|"]
    said = []
    for r in rows:
        k = f"phase={r['phase']}"
        if r["sentence"]:
            said.append(f"{md_cell(r['sentence'])} (inferred; {PHASES}: sentence, {k})")
        if r["instructions"] == "0":
            continue
        share = cell(r['pct_of_device_time'], '%', 'inferred', PHASES, 'pct_of_device_time', k, 2)
        out.append(f"| {r['phase']} | "
                   f"{cell(r['instructions'], '', 'measured', PHASES, 'instructions', k, 0)} | "
                   f"{cell(r['device_us'], 'us', 'measured', PHASES, 'device_us', k)} | "
                   f"{share} |")
    return out + [""] + [f"- {t}" for t in said]


def faster(r: dict, key: str) -> str:
    """', the step <t> if it were gone, <k>x faster' for a change row, where it has them."""
    if not r.get("speedup_if_gone"):
        return ""
    gone = cell(r["step_if_gone_us"], "us", "inferred", "changes.csv", "step_if_gone_us", key)
    k = cell(r["speedup_if_gone"], "x", "inferred", "changes.csv", "speedup_if_gone", key, 2)
    low = (cell(r["speedup_measured"], "x", "inferred", "changes.csv", "speedup_measured", key, 2)
           + " to ") if r.get("speedup_measured") else ""
    return f": the step {gone} without it, {low}{k} as fast"


def measured_part(r: dict, key: str) -> str:
    """'<saving at a rate this capture reached> to ' before a change's saving, where it has
    one (changes.csv saving_measured_us), else nothing."""
    if not r.get("saving_measured_us"):
        return "at most " if r.get("target") else ""
    m = cell(r["saving_measured_us"], "us", "inferred", "changes.csv", "saving_measured_us", key)
    return f"{m} ({rules.low_end_words(r)}) to "


def changes_section(s: Scratch) -> list[str]:
    changes = s.rows(CH)
    cj = s.json("changes.json") or {}
    if changes is None:
        return [missing("changes.csv", "step 6 did not run"), ""]
    out = changes_table(changes[:MAIN_CHANGES], full=False)
    out += ["", "Each change's assumptions" + (", how the savings combine (never add them)"
                                               if cj.get("combine_rule") else "")
            + (", the other changes" if len(changes) > MAIN_CHANGES else "")
            + ", and each with its saving at a rate this capture reached and the step if it "
            "were gone: the appendix."]
    return out + asked("order the changes for the user and say which to test first, with the "
                       "knob as a hypothesis (changes.csv assumptions)")


def assumptions(changes: list) -> list[str]:
    """The assumptions once per kind of change, with the changes of that kind."""
    kinds: dict = {}
    for r in changes:
        kinds.setdefault(r["cause_kind"], []).append(r)
    if not kinds:
        return []
    return ["Assumptions, once per kind of change:", ""] + [
        f"- {kind} ({'change' if len(rs) == 1 else 'changes'} "
        f"{', '.join(r['rank'] for r in rs)}): {md_cell(rs[0]['assumptions'])} "
        f"(inferred; {CH}: assumptions, rank={rs[0]['rank']})" for kind, rs in kinds.items()] + [""]


def changes_table(changes: list, full: bool) -> list[str]:
    """Changes with where they act, their saving (its range) and knob, cited once in the
    header by rank; `full` adds the cause in words, the saving at a rate this capture reached
    and the step if the cause were gone."""
    k = "rank=*"
    cols = ["rank", f"where (inferred; {CH}: where, {k})"]
    cols += [f"cause (inferred; {CH}: cause, {k})"] if full else []
    cols += [f"saving per step, the median over steps (min–max) (us) (inferred, not run; "
             f"{CH}: saving_us, {k})"]
    cols += ["what the capture measures of it (us)", f"step if gone (us) (inferred, not run; "
             f"{CH}: step_if_gone_us, {k})"] if full else []
    cols += [f"knob to test (inferred, not run; {CH}: knob, {k})"]
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in changes:
        cells = [r["rank"], md_cell(r["where"])] + ([md_cell(r["cause"])] if full else [])
        cells.append(f"{num(r['saving_us'], 1)} ({num(r['saving_min_us'], 1)}–"
                     f"{num(r['saving_max_us'], 1)})")
        if full:
            cells.append(cell(r["saving_measured_us"], "us", "inferred", CH,
                              "saving_measured_us", f"rank={r['rank']}")
                         if r.get("saving_measured_us") else md_cell(r.get("target") or "—"))
            cells.append(num(r["step_if_gone_us"], 1))
        cells.append(md_cell(r["knob"]))
        out.append("| " + " | ".join(cells) + " |")
    return out


def trust_section(s: Scratch) -> list[str]:
    if (rows := s.rows("trust.csv")) is None:
        return [missing("trust.csv", "step 7 did not run"), ""]
    items = [r for r in rows if r["section"] == "trust"]
    needs = [r for r in rows if r["section"] == "needs_new_capture"]
    # the item is the row's key (header filters item=*): its own numbers are found through it
    sel = "section=trust, item=*"
    out = [f"| item | count (measured; trust.csv: count, {sel}) "
            f"| device time (us) (measured; trust.csv: device_us, {sel}) "
            f"| share of device time (%) (inferred; trust.csv: pct_of_device_time, {sel}) |",
           "|---|---|---|---|"]
    out += [f"| {md_cell(r['item'])} | {num(r['count'], 0)} | {num(r['device_us'], 1)} | "
            f"{num(r['pct_of_device_time'], 2)} |" for r in items]
    said = ["what each item means"] if any(r["detail"] for r in items) else []
    said += ["the questions that need a new capture with the capture that answers each"] \
        if needs else []
    said = ", and ".join(said)
    out += ["", said[:1].upper() + said[1:] + ": the appendix." if said
            else "No question needs a new capture."]
    return out + asked("say which trust items limit the changes above (trust.csv detail)")


SECTIONS = (  # the report's sections in order: heading, lines
    ("## In brief", results),
    ("## 1. Verdict and causes", verdict_section),
    ("## 2. Reconciliation", reconciliation_section),
    ("## 3. GPUs and streams", streams_section),
    ("## 4. Top instructions and Python lines", ops_section),
    ("## 5. Changes (estimates: inferred, not run)", changes_section),
    ("## 6. Where this capture cannot be trusted", trust_section),
    ("## Appendix: the tables behind the sections", appendix),
)


def draft(s: Scratch) -> str:
    info = s.json("capture_info.json") or {}
    cap = (info.get("capture") or {})
    name = cap.get("run_dir") or cap.get("xplane") or cap.get("trace") or "the capture"
    host = cap.get("host")
    hosts = cap.get("hosts") or []
    title = code(Path(str(name)).name) + (f", host {code(host)}" if host and len(hosts) > 1 else "")
    model = (info.get("device") or {}).get("model") or (info.get("gpu_model") or {}).get("model")
    title += f" on {code(model)}" if model else ""
    verdict = (s.json("skip_stats.json") or {}).get("verdict")
    head = [f"# {title}: {verdict}" if verdict else f"# {title}", ""]  # the template's title
    for heading, section in SECTIONS:
        head += [heading, ""] + section(s)
    text = "\n".join(head).rstrip() + "\n"
    return tpu_words(text) if on_tpu(s) else text


# The draft's own words for a GPU's parts, on a TPU (rules.TPU_WORDS): in its headings, its
# tables' header rows and first cells and its gap bullets only, and only the phrases the draft
# itself writes there (a table's sentence quoted whole keeps its words: the fact check compares
# it with the table); its prompts to the agent (judge) wholly
DRAFT_PHRASES = frozenset({"GPUs and streams", "| GPU | stream |", "GPU time", "GPU busy",
                           "GPU idle", "union of streams", "kernels per step per GPU",
                           "across steps and GPUs"})
GAP_BULLET_RE = re.compile(r"^- GPU (\d+) stream \d+ step")


def tpu_words(text: str) -> str:
    lines = text.split("\n")
    for i, ln in enumerate(lines):
        header = ln.startswith("|") and i + 1 < len(lines) and lines[i + 1].startswith("|---")
        first = ln.startswith("| ") and "|" in ln[2:] and not header
        if ln.startswith("#") or header or first:
            cut = ln.index("|", 2) if first else len(ln)  # a data row: its first cell alone
            lines[i] = rules.tpu_words(ln[:cut], DRAFT_PHRASES) + ln[cut:]
        lines[i] = GAP_BULLET_RE.sub(r"- TPU core \1 step", lines[i])
        if ln.startswith("<!-- judge:"):  # the draft's own prompt to the agent: all of it
            lines[i] = rules.tpu_said(lines[i])
    return "\n".join(lines)
