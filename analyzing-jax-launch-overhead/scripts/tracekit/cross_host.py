"""The cross-host summary of a multi-host run (standard library only).

After the per-host pass (`per_host.py`) has written one scratch folder per host (OUT/<host>/), this
reads each host's small tables (step 1's `skip_stats.json` and `steps.csv`, `streams.csv`, step
4's `attribute_kernels.json` and `kernel_names.csv`, and where the whole job ran, `changes.csv`
and `trust.json`) and writes, into OUT:
- `hosts.csv`: one row per host: exit code, seconds, GPUs, verdict, steps, the median step
  duration (min-max), the steps it was the slowest host in, its compute and collective time per
  GPU, its top change;
- `host_steps.csv`: one row per step and host: the step's duration on the host's bounding GPU (the
  GPU that finishes it last), that GPU's busy time, the period, whether the host was the slowest,
  how far behind the slowest host it finished;
- `host_kernels.csv` (where step 4 ran on every host): one row per kernel name and host: its
  count and mean time, and that mean over the median host's: the same kernels, slower, is a
  slower machine; other kernels or counts, other work;
- `hosts.json`: the result (figures with labels, the slow-host rule, the verdicts by host);
- `hosts.txt`: its rendering.

Only durations are compared across hosts, never start or end times: each host's timestamps are on
its own clock. A host's tables are read only when its pass succeeded and they are of this run's
capture (skip_stats.json's `capture` names the trace with its size and modification time,
attribute_kernels.json's the xplane): a scratch folder re-used for another run keeps the earlier
tables of a host whose step failed, and they are said, not read. Steps are matched by their step
number; a step missing on some host is counted and
left out of the comparison.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from tracekit import scratch
from tracekit import trace_rules as rules
from tracekit.scratch import number
from tracekit.trace_rules import us_text

# a host is "the slow host" by the rule step 1 uses for GPUs: slowest in more than this share of
# the steps every host ran, by more than the margin (the larger of an absolute and a relative lead)
SLOW_MIN_LEAD_US = rules.STRAGGLER_MIN_LEAD_PS / 1e6
SLOW_MIN_LEAD_SHARE = rules.STRAGGLER_MIN_LEAD_SHARE

HOST_STEPS_COLUMNS = scratch.columns("host_steps.csv")
# a host whose kernels all run within this much of the median host's time runs them alike
SAME_SPEED_TOLERANCE = 0.05


def last_sentence(path: Path) -> str:
    """The last line of a log that is not its command line: what the step said last."""
    try:
        with scratch.open_file(path, binary=True) as fh:
            text = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("$ ")]
    return rules.printable(lines[-1])[:400] if lines else ""


def _json(folder: Path, file: str) -> dict:
    """A host's result (scratch.Scratch.json), {} where it is missing or unreadable."""
    return scratch.Scratch(folder).json(file) or {}


def _rows(folder: Path, file: str) -> list[dict]:
    """A host's table as its declaration reads it (scratch.Scratch.typed), [] where it is
    missing, unreadable or not step 1's."""
    try:
        return scratch.Scratch(folder).typed(file) or []
    except scratch.TableError:
        return []


def _step_key(v):
    """Step numbers compare as integers when they are; other step names as text."""
    try:
        return (0, int(v), "")
    except (TypeError, ValueError):
        return (1, 0, str(v))


def host_steps(folder: Path) -> dict:
    """step -> {dur_us, busy_us, period_us, bounding_device, gpus} from one host's steps.csv:
    the step's bounding GPU is the one with the longest duration (it finishes last)."""
    by_step: dict = {}
    for r in _rows(folder, "steps.csv"):
        if number(r.get("dur_us")) is not None:
            by_step.setdefault(r.get("step", ""), []).append(r)
    out = {}
    for step, rows in by_step.items():
        top = max(rows, key=lambda r: (number(r.get("dur_us")), str(r.get("device"))))
        periods = [p for p in (number(r.get("period_us")) for r in rows) if p is not None]
        out[step] = {"dur_us": number(top.get("dur_us")), "busy_us": number(top.get("busy_us")),
                     "period_us": statistics.median(periods) if periods else None,
                     "bounding_device": top.get("device", ""),
                     "gpus": len({r.get("device") for r in rows})}
    return out


def _per_device_step(folder: Path, column: str, steps: int) -> float | None:
    """streams.csv's total of `column` over the analysed steps, per GPU with events and step."""
    rows = _rows(folder, "streams.csv")
    gpus = {r.get("device") for r in rows}
    vals = [number(r.get(column)) for r in rows]
    if not rows or not steps or any(v is None for v in vals):
        return None
    return sum(vals) / len(gpus) / steps


def _kernel_means(folder: Path) -> dict[str, tuple[int, float, bool]] | None:
    """kernel name -> (count, mean us, a collective) from step 4's kernel_names.csv; None where
    absent."""
    if not (folder / "attribution" / "kernel_names.csv").is_file():
        return None
    out = {}
    for r in _rows(folder, "attribution/kernel_names.csv"):
        n, us = number(r.get("kernels")), number(r.get("device_us"))
        if n and us is not None:
            out[r.get("kernel", "")] = (int(n), us / n,
                                        "collective" in (r.get("family") or "").lower())
    return out


def compare_kernels(means: dict[str, dict]) -> tuple[list, dict]:
    """host_kernels.csv rows, and per host: the median (min, max) over the kernel names every
    host ran (collectives left out: their time holds waiting) of its mean time over the median
    host's, and whether its names and counts per step are the median host's
    (`same_kernels`)."""
    hosts = [h for h, m in means.items() if m]
    if len(hosts) < 2:
        return [], {}
    common = set.intersection(*(set(means[h]) for h in hosts))
    rows, ratios = [], {h: [] for h in hosts}
    for k in sorted(common):
        med = statistics.median(means[h][k][1] for h in hosts)
        for h in hosts:
            n, mean, collective = means[h][k]
            ratio = mean / med if med > 0 else None
            rows.append({"kernel": k, "host": h, "kernels": n, "mean_us": mean,
                         "ratio_to_median_host": ratio})
            # a collective's time holds its wait for the other GPUs and hosts: not a speed
            if ratio is not None and not collective:
                ratios[h].append(ratio)
    return rows, {h: {**_spread(r, "measured"), "unit": "ratio", "kernels_compared": len(r)}
                  if (r := ratios[h]) else None for h in hosts}


def _capture_files(run_dir: str, host: str) -> dict:
    """The host's trace and xplane in the run folder (None where absent or no run folder)."""
    if not run_dir:
        return {}
    d = Path(run_dir)
    trace = next((d / f"{host}{x}" for x in (".trace.json.gz", ".trace.json")
                  if (d / f"{host}{x}").is_file()), None)
    xplane = d / f"{host}.xplane.pb"
    return {"trace": trace, "xplane": xplane if xplane.is_file() else None}


def _spread(values: list[float], label: str) -> dict | None:
    return {"value": statistics.median(values), "min": min(values), "max": max(values),
            "unit": "us", "label": label} if values else None


def summarise(out: Path, results: list[dict], run_dir: str = "", script: str = "") -> dict:
    """The cross-host result from the per-host folders. `results`: one dict per host with
    `host`, `folder` (relative to `out`), `exit`, `seconds`, `error`."""
    hosts = []
    steps_of: dict[str, dict] = {}
    means: dict[str, dict | None] = {}
    for res in results:
        row, steps_of[res["host"]], means[res["host"]] = host_row(out, res, run_dir)
        hosts.append(row)
    kernel_rows, ratio_of = compare_kernels(means)
    for h in hosts:
        h["kernel_time_ratio"] = ratio_of.get(h["host"])
        h["same_kernels"] = same_kernels(h, hosts, means)
    with_steps = [h["host"] for h in hosts if steps_of[h["host"]]]
    compared = compare_steps(steps_of, with_steps)
    slow = slow_host(compared, with_steps)
    for h in hosts:
        h["slowest_in_steps"] = slow["slowest_counts"].get(h["host"], 0) \
            if h["host"] in with_steps else None
    return cross_host_result(hosts, with_steps, compared, slow, kernel_rows, run_dir, script)


def _tables_read(folder: Path, res: dict, current: dict, ss: dict,
                 failed_step1: bool) -> tuple[bool, bool, list]:
    """Whether a host's step-1 tables (skip_stats.json `ss` and the tables made with it) and
    its step-4 tables are read: its pass succeeded and they are of this run's capture; and why
    not, in words."""
    not_read = []
    step1 = res["exit"] == 0 and scratch.written_for(ss.get("capture"), current.get("trace"))
    if res["exit"] != 0:
        not_read.append(f"its pass failed (exit {res['exit']}): no table of its folder is "
                        "read")
    elif failed_step1:  # the pass ended but its step 1 wrote nothing: the job went on
        said = last_sentence(folder / "logs" / "skip_stats.txt")
        not_read.append("its step 1 failed or did not run (no skip_stats.json), so it has no "
                        "steps" + (f": {said}" if said else ""))
        step1 = False
    elif not step1:
        not_read.append("its step-1 tables (skip_stats.json, steps.csv, streams.csv and "
                        "the changes and trust list made from them) are from another "
                        "capture than this run's: not read")
    step4 = res["exit"] == 0 and scratch.written_for(
        (_json(folder, "attribution/attribute_kernels.json").get("capture") or {})
        .get("xplane"), current.get("xplane"))
    return step1, step4, not_read


def host_row(out: Path, res: dict, run_dir: str) -> tuple[dict, dict, dict | None]:
    """One host's hosts.csv row (without the cross-host columns: its kernel time ratio, same
    kernels, slowest-in steps), its steps (host_steps) and its kernel means (_kernel_means),
    from the tables of its folder that are read."""
    folder = out / res["folder"]
    current = _capture_files(run_dir, res["host"])
    ss = _json(folder, "skip_stats.json")
    # the pass ended, but its step 1 wrote neither its result nor its steps
    failed_step1 = res["exit"] == 0 and not ss and not (folder / "steps.csv").is_file()
    step1, step4, not_read = _tables_read(folder, res, current, ss, failed_step1)
    if not step1:
        ss = {}
    st = host_steps(folder) if step1 else {}
    durs = [s["dur_us"] for s in st.values()]
    periods = [s["period_us"] for s in st.values() if s["period_us"] is not None]
    changes = _rows(folder, "changes.csv") if step1 else []
    lines = [r for r in changes if r.get("cause_kind") == "python_line"]
    trust = _json(folder, "trust.json") if step1 else {}
    means = _kernel_means(folder) if step4 else None
    items = ((trust.get("figures") or {}).get("items") or {}).get("value")
    row = {
        "host": res["host"], "folder": res["folder"], "exit": res["exit"],
        "seconds": res.get("seconds"), "error": res.get("error") or "",
        "not_read": "; ".join(not_read),
        "failed_step1": failed_step1,
        "gpus": max((s["gpus"] for s in st.values()), default=None),
        "verdict": ss.get("verdict_qualifier") or ss.get("verdict"),
        "steps": len(st),
        "step_us": _spread(durs, "measured"),
        "period_us": _spread(periods, "measured"),
        "compute_us_per_device_step": _per_device_step(folder, "compute_us", len(st))
        if step1 else None,
        "collective_us_per_device_step": _per_device_step(folder, "collective_us", len(st))
        if step1 else None,
        "top_change": changes[0].get("cause") if changes else None,
        "top_line": lines[0].get("cause") if lines else None,
        "top_line_saving_us": number(lines[0].get("saving_us")) if lines else None,
        "top_change_kind": changes[0].get("cause_kind") if changes else None,
        "top_saving_us": number(changes[0].get("saving_us")) if changes else None,
        "trust_items": items,
        "arrival_us": _arrival(folder) if step1 else None,
    }
    return row, st, means


def _arrival(folder: Path) -> float | None:
    """The median over the host's steps of its latest GPU's arrival at the step's last
    collective (steps.csv arrival_us); None without collectives."""
    per_step: dict = {}
    for r in _rows(folder, "steps.csv"):
        v = number(r.get("arrival_us"))
        if v is not None:
            per_step[r.get("step")] = max(v, per_step.get(r.get("step"), v))
    vals = sorted(per_step.values())
    return vals[len(vals) // 2] if vals else None


def same_kernels(h: dict, hosts: list[dict], means: dict) -> bool | None:
    """Whether host `h` runs the same kernel names as some other host, each as many times per
    step within 1% (the steps captured may differ); None without kernel means to compare."""
    m = means.get(h["host"])
    others = [(x, means[x["host"]]) for x in hosts if means.get(x["host"]) and x is not h]
    if not m or not others:
        return None
    per_step = {k: v[0] / max(h["steps"], 1) for k, v in m.items()}
    return any(set(o) == set(m) and all(abs(o[k][0] / max(x["steps"], 1) - per_step[k])
                                        <= 0.01 * per_step[k] for k in m) for x, o in others)


def compare_steps(steps_of: dict, with_steps: list) -> dict:
    """The steps every host with steps ran (`common`, in step order) and all their steps
    (`every`); per common step the host_steps.csv rows (`rows`), the spread of durations
    (`spreads`), the host slower than the next by more than the margin or None for a tie
    (`slowest`), and each such host's leads (`leads`)."""
    common = sorted(set.intersection(*(set(steps_of[h]) for h in with_steps))
                    if with_steps else set(), key=_step_key)
    every = set().union(*(set(steps_of[h]) for h in with_steps)) if with_steps else set()
    step_rows, spreads, slowest, leads = [], [], [], {}
    for step in common:
        durs = {h: steps_of[h][step]["dur_us"] for h in with_steps}
        order = sorted(durs, key=lambda h: (-durs[h], h))
        top = durs[order[0]]
        spreads.append(top - min(durs.values()))
        winner = None
        if len(order) > 1:
            lead = top - durs[order[1]]
            if lead > max(SLOW_MIN_LEAD_US, SLOW_MIN_LEAD_SHARE * top):
                winner = order[0]
                leads.setdefault(winner, []).append(lead)
        slowest.append(winner)
        for h in with_steps:
            s = steps_of[h][step]
            step_rows.append({"step": step, "host": h, "gpus": s["gpus"],
                              "bounding_device": s["bounding_device"], "dur_us": s["dur_us"],
                              "busy_us": s["busy_us"], "period_us": s["period_us"],
                              "slowest": 1 if h == winner else 0,
                              "behind_slowest_us": top - s["dur_us"]})
    return {"common": common, "every": every, "rows": step_rows, "spreads": spreads,
            "slowest": slowest, "leads": leads}


def slow_host(compared: dict, with_steps: list) -> dict:
    """The result's `slow_host`: the host slowest in the most compared steps, and whether it
    is the slow host (trace_rules.majority_last: slowest in most of them, by more than the margin);
    `slowest_counts` holds each host's count of steps it was slowest in."""
    slowest, common = compared["slowest"], compared["common"]
    top_host, is_slow, counts = rules.majority_last(
        [h if h in with_steps else None for h in slowest])
    is_slow = is_slow and len(with_steps) > 1
    return {
        "host": top_host, "is_slow_host": is_slow, "steps": len(common),
        "steps_slowest": counts.get(top_host, 0), "ties": slowest.count(None),
        "slowest_counts": dict(sorted(counts.items(), key=lambda kv: -kv[1])),
        "lead_us": _spread(compared["leads"].get(top_host, []), "measured"),
        "margin_us": {"value": SLOW_MIN_LEAD_US, "unit": "us", "label": "inferred",
                      "pct_of_step": 100.0 * SLOW_MIN_LEAD_SHARE},
        "label": "inferred"}


def waits_sentence(hosts: list[dict]) -> str | None:
    """Whether a host waits for another inside the captured programs, from the hosts'
    collective time; None when no host's streams were read."""
    coll = [h["collective_us_per_device_step"] for h in hosts
            if h["collective_us_per_device_step"] is not None]
    if coll and not any(coll):
        return ("no collective time on any host: inside the captured program no host waits "
                "for another, so a slow host slows only its own steps here; a wait outside "
                "the program (a barrier, a parameter server, the input) is not in the capture")
    if coll:
        return ("collective time on some host: when collectives span hosts, every host waits "
                "for the slowest inside them, so step times converge and the slowest step "
                "does not name the slow host; the culprit line names the host the others "
                "wait for, by its rule (hosts.json culprit)")
    return None


# The host the others wait for, when collectives span hosts: its compute per GPU step leads the
# next host's by this share or more, and it spends the least time in collectives of all.
CULPRIT_MIN_LEAD = 0.05
CULPRIT_RULE = (
    "when collectives span hosts every host waits inside them for the last to arrive, so step "
    "times converge and cannot name the slow host; the evidence that survives is compute time "
    "per GPU step (hosts.csv compute_us_per_device_step), time inside collectives "
    "(collective_us_per_device_step, which holds the waiting) and when each host arrives at its "
    "steps' last collective (arrival_us): the culprit is the host whose compute leads the next "
    f"host's by {100 * CULPRIT_MIN_LEAD:g}% or more, which spends the least time in collectives "
    "and, where arrivals are known, arrives last (the others wait for it); otherwise no "
    "culprit")


def culprit(hosts: list[dict]) -> dict:
    """hosts.json `culprit`: the host that holds the others back inside collectives spanning
    hosts (CULPRIT_RULE), or none, with why."""
    have = [h for h in hosts if h["compute_us_per_device_step"] and
            h["collective_us_per_device_step"] is not None]
    out = {"host": None, "rule": CULPRIT_RULE, "label": "inferred"}
    if len(have) < 2:
        return {**out, "why": f"{len(have)} host(s) with compute and collective time per GPU "
                              "step: nothing to compare"}
    if not any(h["collective_us_per_device_step"] for h in have):
        return {**out, "why": "no collective time on any host: no host waits for another "
                              "inside the program"}
    by_compute = sorted(have, key=lambda h: (-h["compute_us_per_device_step"], h["host"]))
    top, second = by_compute[0], by_compute[1]
    lead = top["compute_us_per_device_step"] / second["compute_us_per_device_step"] - 1
    waits = sorted(h["collective_us_per_device_step"] for h in have)
    least = min(have, key=lambda h: (h["collective_us_per_device_step"], h["host"]))
    facts = (f"{top['host']} computes {us_text(top['compute_us_per_device_step'])} per GPU step, "
             f"{100 * lead:.1f}% above the next ({second['host']}, "
             f"{us_text(second['compute_us_per_device_step'])}); the least time in collectives is "
             f"{least['host']}'s ({us_text(least['collective_us_per_device_step'])}, the median "
             f"host's {us_text(waits[len(waits) // 2])})")
    arrived = [h for h in have if h.get("arrival_us") is not None]
    last = max(arrived, key=lambda h: (h["arrival_us"], h["host"])) if arrived else None
    if last is not None:
        facts += (f"; the last to arrive at the steps' last collective is {last['host']} "
                  f"({us_text(last['arrival_us'])} into the step)")
    out.update({"most_compute": top["host"], "next": second["host"], "least_in_collectives":
                least["host"], "lead_pct": round(100 * lead, 2),
                "last_to_arrive": last["host"] if last is not None else None})
    if lead >= CULPRIT_MIN_LEAD and least is top and (last is None or last is top):
        return {**out, "host": top["host"], "why": facts + ": the others wait for it"}
    return {**out, "why": facts + ": no single host stands out by the rule"}


def speed_needs(hosts: list[dict]) -> list[str]:
    """What a new capture would need to say why a host runs the same kernels at another
    speed (beyond SAME_SPEED_TOLERANCE of the median host)."""
    return [f"why {h['host']} runs the same kernels {r['value']:.2f}x the median host's time "
            "(its GPUs' clocks, power, temperature, other processes on the machine): the "
            "capture holds no clock or power record; nvidia-smi / rocm-smi logs beside a new "
            "capture would" for h in hosts if (r := h["kernel_time_ratio"]) and h["same_kernels"]
            and abs(r["value"] - 1) > SAME_SPEED_TOLERANCE]


def cross_host_result(hosts, with_steps, compared, slow, kernel_rows, run_dir, script) -> dict:
    """hosts.json: the hosts' rows, figures, the compared steps, the slow-host rule, verdicts
    by host, notes, refusals and what a new capture would need."""
    common = compared["common"]
    verdicts: dict[str, list[str]] = {}
    for h in hosts:
        verdicts.setdefault(h["verdict"] or "none (step 1 did not run)", []).append(h["host"])
    medians = [h["step_us"]["value"] for h in hosts if h["step_us"]]
    notes = ["each host's timestamps are on its own clock: only durations are compared across "
             "hosts, never start or end times"]
    refusals = []
    if len(with_steps) < 2:
        refusals.append(f"cannot compare step times across hosts: {len(with_steps)} of "
                        f"{len(hosts)} hosts have step rows (step 1 did not run or found no "
                        "step on the others)")
    elif not common:
        refusals.append("cannot compare step times across hosts: no step number is on every "
                        "host (the hosts' captures cover different steps)")
    return {
        "step": "cross_host", "status": "done" if not refusals else "refused",
        "script": script, "run_dir": run_dir,
        "hosts": hosts,
        "figures": {
            "hosts": {"value": len(hosts), "unit": "count", "label": "read"},
            "hosts_failed": {"value": sum(1 for h in hosts if h["exit"] != 0 or h["failed_step1"]),
                             "unit": "count", "label": "measured"},
            "step_us": _spread(medians, "measured"),
            "step_spread_us": None if refusals else _spread(compared["spreads"], "measured"),
        },
        "steps": {"compared": common, "not_on_every_host": len(compared["every"]) - len(common)},
        "slow_host": slow,
        "verdicts": verdicts,
        "waits": waits_sentence(hosts),
        "culprit": culprit(hosts),
        "host_steps": compared["rows"],
        "host_kernels": kernel_rows,
        "notes": notes, "refusals": refusals, "needs_new_capture": speed_needs(hosts),
    }


def _rng(f: dict | None) -> str:
    return f"{us_text(f['value'])} ({us_text(f['min'])}-{us_text(f['max'])})" if f else "n/a"


def render(r: dict) -> list[str]:
    """hosts.txt: a rendering of the result, nothing computed here."""
    hs = r["hosts"]
    f = r["figures"]
    out = [f"hosts: {len(hs)} in {r['run_dir']}, each analysed on its own "
           f"({f['hosts_failed']['value']} failed)"]
    for h in hs:
        line = f"  {h['host']}: "
        if h["exit"] != 0:
            line += f"exit {h['exit']}: {h['error'] or 'see its logs/'}; "
        if h.get("not_read"):
            line += f"{h['not_read']}; "
        line += f"verdict {h['verdict'] or 'none'}"
        if h["step_us"]:
            line += (f"; step on its bounding GPU {_rng(h['step_us'])} over {h['steps']} "
                     f"steps; slowest host in {h['slowest_in_steps'] or 0}")
        if kr := h["kernel_time_ratio"]:
            line += (f"; kernels {kr['value']:.2f}x ({kr['min']:.2f}-{kr['max']:.2f}) the median "
                     f"host's time over {kr['kernels_compared']} kernel names"
                     + ("" if h["same_kernels"] is None else
                        ", the same kernels" if h["same_kernels"] else ", other kernels or counts"))
        if h["top_change"]:
            line += (f"; change 1: {h['top_change_kind']} (saves {us_text(h['top_saving_us'])} "
                     "per step; inferred, not run)")
        if h.get("top_line"):
            line += (f"; largest Python line: saves {us_text(h['top_line_saving_us'])} per step "
                     "(changes.csv)")
        out.append(rules.printable(line))
    sh = r["slow_host"]
    margin = (f"a lead within {sh['margin_us']['value']:.1f} us or "
              f"{sh['margin_us']['pct_of_step']:.1f}% of the step is a tie")
    if r["refusals"]:
        out += [f"cannot compute: {x}" for x in r["refusals"]]
    elif sh["is_slow_host"]:
        out.append(rules.printable(
            f"slow host: {sh['host']} is the slowest in {sh['steps_slowest']} of {sh['steps']} "
            f"steps, by {_rng(sh['lead_us'])} over the next host ({margin}; inferred)"))
    else:
        dist = ", ".join(f"{h} in {n}" for h, n in sh["slowest_counts"].items())
        out.append(rules.printable(
            "no slow host: " + (f"the slowest host changes from step to step (slowest: {dist}; "
                                if dist else "no host is the slowest by more than the margin in "
                                "any step (") + f"a tie in {sh['ties']} of {sh['steps']} steps; "
            f"{margin})"))
    if f["step_spread_us"]:
        out.append(f"spread of step times across hosts (slowest minus fastest, per step): "
                   f"{_rng(f['step_spread_us'])} over {len(r['steps']['compared'])} steps on "
                   "every host (measured)")
    if r["steps"]["not_on_every_host"]:
        out.append(f"steps not on every host, not compared: {r['steps']['not_on_every_host']}")
    out.append(rules.printable("verdicts: " + "; ".join(
        f"{v} on {len(h)} ({', '.join(h)})" for v, h in r["verdicts"].items())))
    if r.get("waits"):
        out.append(f"waits: {r['waits']}")
    if c := r.get("culprit"):
        out.append(f"culprit: {c['host'] or 'none'} ({c['why']})")
    out += [rules.printable(f"needs a new capture: {n}") for n in r.get("needs_new_capture", [])]
    out += [f"note: {n}" for n in r["notes"]]
    out.append("tables: hosts.csv (one row per host), host_steps.csv (one row per step and "
               "host)" + (", host_kernels.csv (one row per kernel name and host)"
                          if r.get("host_kernels") else "")
               + "; each host's own tables in its folder")
    return out


def _fmt(v) -> str:
    return "" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)


def write(out: Path, r: dict) -> list[tuple[str, int]]:
    """hosts.csv, host_steps.csv, hosts.json, hosts.txt, each replaced whole."""
    rows = []
    for h in r["hosts"]:
        s, pr, kr = (h[k] or {} for k in ("step_us", "period_us", "kernel_time_ratio"))
        same = h["same_kernels"]
        rows.append([h["host"], h["folder"], h["exit"], _fmt(h["seconds"]), _fmt(h["gpus"]),
                     h["verdict"] or "", h["steps"],
                     *(_fmt(f.get(k)) for f in (s, pr) for k in ("value", "min", "max")),
                     _fmt(h["slowest_in_steps"]), _fmt(h["compute_us_per_device_step"]),
                     _fmt(h["collective_us_per_device_step"]),
                     *(_fmt(kr.get(k)) for k in ("value", "min", "max")),
                     "" if same is None else ("yes" if same else "no"),
                     h["top_change_kind"] or "", h["top_change"] or "",
                     _fmt(h["top_saving_us"]), _fmt(h["trust_items"]), h["error"],
                     h.get("not_read") or "", _fmt(h.get("arrival_us"))])
    written = []
    text = render(r)
    with rules.replace_files(out, prefix=".hosts-") as tmp:
        written.append(("hosts.csv", scratch.write_table(tmp, "hosts.csv", rows)))
        written.append(("host_steps.csv", scratch.write_table(
            tmp, "host_steps.csv",
            ([_fmt(x[c]) for c in HOST_STEPS_COLUMNS] for x in r["host_steps"]))))
        if r.get("host_kernels"):
            written.append(("host_kernels.csv", scratch.write_table(
                tmp, "host_kernels.csv",
                ([x["kernel"], x["host"], x["kernels"], _fmt(x["mean_us"]),
                  "" if x["ratio_to_median_host"] is None else f"{x['ratio_to_median_host']:.4f}"]
                 for x in r["host_kernels"]))))
        elif (out / "host_kernels.csv").is_file():  # an earlier pass's: not this one's
            (out / "host_kernels.csv").unlink()
        written.append(("hosts.json", scratch.write_result(tmp, "hosts.json", r, default=str)))
        (tmp / "hosts.txt").write_text("\n".join(text) + "\n", encoding="utf-8")
        written.append(("hosts.txt", len(text)))
        md = draft(r)
        (tmp / "hosts_draft.md").write_text(md, encoding="utf-8")
        written.append(("hosts_draft.md", md.count("\n")))
    return written


def draft(r: dict) -> str:
    """hosts_draft.md: the report of the whole run, every figure cited from hosts.csv (the
    fact check run with --out on this folder covers it), judgement places marked."""
    out = ["# The run across hosts", "",
           f"{len(r['hosts'])} hosts (read; hosts.json: figures.hosts), each analysed on its "
           "own (each host's report: `<host>/report_draft.md`).", ""]
    name = rules.printable  # a host's name as every text output writes it, citations too
    for h in r["hosts"]:
        key = f"host={name(h['host'])}"
        if h["exit"] != 0 or not h["step_us"]:
            why = h["error"] or h.get("not_read") or "no steps"
            out.append(f"- {name(h['host'])}: not compared ({rules.printable(why)}).")
            continue
        line = (f"- {name(h['host'])}: verdict {h['verdict']}; step "
                f"{_fmt(h['step_us']['value'])} us (measured; hosts.csv: step_us, {key})")
        if h["compute_us_per_device_step"] is not None:
            line += (f", compute {_fmt(h['compute_us_per_device_step'])} us per GPU step "
                     f"(measured; hosts.csv: compute_us_per_device_step, {key})")
        if h["collective_us_per_device_step"] is not None:
            line += (f", in collectives {_fmt(h['collective_us_per_device_step'])} us (measured; "
                     f"hosts.csv: collective_us_per_device_step, {key})")
        out.append(line + ".")
    slow = r.get("slow_host") or {}
    out += ["", "Slow host by step time: " + (
        f"{name(slow['host'])}, slowest in {slow['steps_slowest']} (inferred; hosts.json: "
        f"slow_host.steps_slowest) of {slow['steps']} (inferred; hosts.json: slow_host.steps) "
        "compared steps."
        if slow.get("is_slow_host") else "none (no host is slowest in most steps by more than "
        "the margin).")]
    c = r.get("culprit") or {}
    if c.get("most_compute"):
        by = {h["host"]: h for h in r["hosts"]}

        def cite(column, host):
            return (f"{_fmt(by[host][column])} us (measured; hosts.csv: {column}, "
                    f"host={name(host)})")
        out.append("Host that holds the others back inside collectives spanning hosts: "
                   + (name(c["host"]) if c["host"] else "none by the rule")
                   + f". {name(c['most_compute'])} computes "
                   f"{cite('compute_us_per_device_step', c['most_compute'])} per GPU step, "
                   f"{c['lead_pct']}% (inferred; hosts.json: culprit.lead_pct) above the next "
                   f"host, {name(c['next'])} ({cite('compute_us_per_device_step', c['next'])}); "
                   f"the least time in collectives is {name(c['least_in_collectives'])}'s "
                   f"({cite('collective_us_per_device_step', c['least_in_collectives'])})"
                   + (f"; the last to arrive at the steps' last collective is "
                      f"{name(c['last_to_arrive'])}, at "
                      f"{cite('arrival_us', c['last_to_arrive'])} into the step"
                      if c.get("last_to_arrive") else "") + ".")
    elif c:
        out.append(f"Host that holds the others back: none ({name(c['why'])}).")
    out += ["", "<!-- judge: which host to look at first and why, from the rows above and "
            "that host's own report; say 'no single host' where the rules name none. -->", ""]
    return "\n".join(out) + "\n"

