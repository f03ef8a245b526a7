"""A GPU's ceilings for step 5: references/peaks.csv (the datasheets) read into per-GPU
ceilings, and the GPU recognised from its device-plane stats (peaks.md section 4). Standard
library only."""

from __future__ import annotations

import csv
from pathlib import Path

from jaxperf.cost.ceilings import Ceiling

PEAKS_CSV = Path(__file__).resolve().parents[3] / "references" / "peaks.csv"  # the skill root

# memory_size differs by up to ~0.5% between drivers (peaks.md section 4: three A100 40GB
# readings span 206 MB); a 2% band separates every pair in the table (the closest, H100 80GB vs
# A100 80GB, differ in compute capability anyway) without an exact match.
MEMORY_BAND = 0.02
# clock_rate is the max SM/engine clock in kHz; 2% keeps MI355X (2.4 GHz) apart from MI350X
# (2.2 GHz, same gfx950 and 256 CUs) while tolerating a driver's rounding.
CLOCK_BAND = 0.02
GIB = 2 ** 30

# peaks.md section 4: vendor, (cc major, minor), core_count, clock_rate kHz, memory_size bytes,
# and what the row rests on. Matched on every field; memory and clock within their bands.
IDENTIFY = (
    ("H100 SXM5 80GB", "nvidia", (9, 0), 132, 1_980_000, 84.935e9, "C2, X1 [source]"),
    ("H100 PCIe 80GB", "nvidia", (9, 0), 114, 1_755_000, 84.94e9, "X1 [source]"),
    ("H200 SXM 141GB", "nvidia", (9, 0), 132, 1_980_000, 151.40e9, "X1 [source]"),
    ("A100 SXM4 80GB", "nvidia", (8, 0), 108, 1_410_000, 85.10e9, "X1 [source]"),
    ("A100 SXM4 40GB", "nvidia", (8, 0), 108, 1_410_000, 42.40e9, "C2, X1 [source]"),
    ("B200", "nvidia", (10, 0), 148, 1_965_000, 191.51e9, "X1 [source]"),
    ("MI300X", "amd", (9, 4), 304, 2_100_000, 206_141_652_992, "C1 [seen]"),
    ("MI325X", "amd", (9, 4), 304, 2_100_000, 256 * GIB,
     "A2 (clock and memory expected, unconfirmed)"),
    ("MI355X", "amd", (9, 5), 256, 2_400_000, 309_220_868_096, "C1 [seen]"),
)


def load_peaks(path: Path = PEAKS_CSV) -> dict[str, dict[str, Ceiling]]:
    """peaks.csv -> {gpu: {ceiling key: Ceiling}}; TFLOP/s converted to FLOP/s (1 TFLOP/s =
    1e12 FLOP/s). A cell without a value (unconfirmed, none) is kept with value None."""
    out: dict[str, dict[str, Ceiling]] = {}
    with open(path, newline="", encoding="utf-8") as fh:
        for r in csv.DictReader(fh):
            if r["ceiling"] == "hbm_bandwidth":
                value = float(r["hbm_bytes_per_s"]) if r["hbm_bytes_per_s"] else None
                unit = "B/s"
            else:
                tflops = r["dense_tflops"]
                value = float(round(float(tflops) * 1e12)) if tflops else None
                unit = "FLOP/s"
            out.setdefault(r["gpu"], {})[r["ceiling"]] = Ceiling(
                r["gpu"], r["ceiling"], value, unit, r["tag"], r["source"], r["other_values"])
    return out


def _near(a, b, band) -> bool:
    return a is not None and b and abs(a - b) <= band * b


def identify(stats: dict) -> dict:
    """The GPU model from one device plane's stats (peaks.md section 4): `model` (None when no
    row matches), `evidence` (the stats used), `basis`, `why` (a sentence when unrecognised)."""
    vendor = stats.get("device_vendor")
    cc = (stats.get("compute_cap_major"), stats.get("compute_cap_minor"))
    cores, clock, memory = stats.get("core_count"), stats.get("clock_rate"), stats.get(
        "memory_size")
    evidence = {"device_vendor": vendor, "gpu_device_name": stats.get("gpu_device_name"),
                "compute_cap": f"{cc[0]}.{cc[1]}" if cc[0] is not None else None,
                "core_count": cores, "clock_rate_khz": clock, "memory_size_bytes": memory}
    out = {"model": None, "evidence": evidence, "basis": None, "why": None}
    if not vendor:
        out["why"] = ("cannot identify the GPU because its device plane has no device_vendor stat"
                      f" (compute capability {evidence['compute_cap']}, {cores} cores, clock "
                      f"{clock} kHz, memory {memory} B), and peaks.md requires the vendor first: "
                      "no ceiling is used")
        return out
    for model, v, want_cc, want_cores, want_clock, want_mem, basis in IDENTIFY:
        if (str(vendor).lower() == v and cc == want_cc and cores == want_cores
                and _near(clock, want_clock, CLOCK_BAND) and _near(memory, want_mem, MEMORY_BAND)):
            out["model"], out["basis"] = model, basis
            return out
    out["why"] = (f"cannot identify the GPU because no row of peaks.md section 4 matches vendor "
                  f"{vendor}, compute capability {evidence['compute_cap']}, {cores} cores, clock "
                  f"{clock} kHz, memory {memory} B: no ceiling is used")
    return out


def identify_space(space) -> dict:
    """Identify every GPU plane; one model for the capture, or none with why."""
    # idle GPUs may carry device_vendor alone (the MI355X capture): identify by the planes
    # that report the full set
    planes = [p for p in space.gpu_planes() if p.stats.get("core_count")]
    if not planes:
        return {"model": None, "evidence": {}, "basis": None, "devices": 0,
                "why": "cannot identify the GPU because the xplane has no GPU plane with device "
                       "stats: no ceiling is used"}
    ids = [identify(p.stats) for p in planes]
    models = sorted({str(i["model"]) for i in ids})
    first = dict(ids[0])
    first["devices"] = len(planes)
    first["xprof_memory_bandwidth_bytes_per_s"] = planes[0].stats.get("memory_bandwidth")
    if len(models) > 1:
        first["model"] = None
        first["why"] = ("cannot use one ceiling because the GPU planes identify as different "
                        f"models ({', '.join(models)}): no ceiling is used")
    return first
