"""XProf's own figures for step 5, shown beside the roofline's and never used for a ceiling: its
FLOPs and bytes per instruction (the hlo_stats tool) and its ceilings for the capture (the
roofline_model tool), read from the xplane copy step 4 left in attribution/xplane/ (the capture
is never touched). Each reader returns a note instead where XProf cannot give them."""

from __future__ import annotations

import json
from pathlib import Path

try:
    import trace_rules as rules
except ImportError:  # imported without an entry script's path set-up: find the sibling skill
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import sibling
    sibling.on_path()
    import trace_rules as rules

# XProf's hlo_stats gives per op a FLOP rate in GFLOP/s and a memory bandwidth in GiB/s (found
# by comparison: its bytes came out 6.9% = 1 - 1e9/2^30 under ours on every row) over its
# average self time in us: per run, FLOPs = rate x time x 1e3, bytes = bandwidth x time x 2^30/1e6.
XPROF_FLOP_SCALE = 1e3
XPROF_BYTE_SCALE = 2 ** 30 / 1e6


def xplane_copies(out: Path) -> list[Path]:
    """The xplane copies step 4 left in out/attribution/xplane/, by name."""
    return sorted((out / "attribution" / "xplane").glob("*.xplane.pb"))


def tool_data(copy: Path, tool: str):
    """XProf's `tool` converted from the xplane `copy` (its stderr silenced); raises whatever
    XProf raises, the import of xprof included."""
    from xprof.convert import raw_to_tool_data
    with rules.quiet_fd2():
        raw_to_tool_data.xspace_to_tool_names([str(copy)])
        data = raw_to_tool_data.xspace_to_tool_data([str(copy)], tool,
                                                     {"use_saved_result": False})
    return data[0] if isinstance(data, tuple) else data


def costs(out: Path) -> tuple[dict, str]:
    """(program id, instruction) -> (FLOPs, bytes) per run as XProf's hlo_stats computes them
    (step 4's saved conversion, hlo_stats.json, where it left one); and a note saying why there
    are none."""
    copies = xplane_copies(out)
    if not copies:
        return {}, "XProf's figures not shown: step 4 left no xplane copy in attribution/xplane/"
    saved = copies[0].parent / "hlo_stats.json"  # step 4's own XProf conversion, when it ran
    try:
        if saved.is_file() and saved.stat().st_size:
            data = saved.read_text()
        else:
            data = tool_data(copies[0], "hlo_stats")
        table = json.loads(data)
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


def peaks(out: Path) -> dict:
    """XProf's own ceilings for this capture (its roofline_model tool: one compute peak for
    every dtype, and an HBM bandwidth from the memory clock), converted to FLOP/s and B/s; or
    a note saying why there are none."""
    copies = xplane_copies(out)
    if not copies:
        return {"note": "XProf's ceilings not shown: step 4 left no xplane copy"}
    try:
        tables = json.loads(tool_data(copies[0], "roofline_model"))
        props = next(t["p"] for t in tables if isinstance(t, dict) and t.get("p"))
        return {"device_type": props.get("device_type"),
                "compute_flop_per_s": float(props["peak_flop_rate"]) * 1e9,
                "memory_bytes_per_s": float(props["peak_hbm_bw"]) * 2 ** 30,
                "note": "XProf's roofline_model peaks (GFLOP/s x 1e9, GiB/s x 2^30): one "
                        "compute peak for every dtype; the bandwidth from the memory clock"}
    except Exception as exc:  # noqa: BLE001 - XProf's own failure, said in the note
        return {"note": f"XProf's ceilings not shown: its roofline_model could not be read "
                      f"({str(exc)[:200]})"}
