"""A TPU chip as its capture describes it: model, generation, cores, peaks and versions.

The device plane (`/device:TPU:<n>`, one per core) carries `device_type_string` ("TPU v5 Lite"),
`has_megacore`, and the chip's peaks as XProf reads them from the runtime:
`peak_teraflops_per_second` (the MXU's bf16 peak), `peak_hbm_bw_gigabytes_per_second`, and
the on-chip memories' bandwidths (VMEM, SRAM, CMEM: read and write). `/host:metadata` carries
`jax_version`, `jaxlib_version` and `tpu_version` (the TPU runtime's build line). Every figure
here is *read* from the capture; a chip's datasheet (DATASHEET) is used only where the plane
gives no peak, and the ceiling then says so (tag `vendor`, its source the datasheet's line).
"""

from __future__ import annotations

import re

from jaxperf.read.xplane_reader import TPU_PLANE_RE
from tracekit.records import Device

GENERATION_RE = re.compile(r"\bv(\d+)([a-z]*)\b\s*(\w+)?", re.I)
# plane stat -> (peak name, unit, factor to the unit)
PEAK_STATS = (("peak_teraflops_per_second", "mxu_flops_per_s", "FLOP/s", 1e12),
              ("peak_hbm_bw_gigabytes_per_second", "hbm_bytes_per_s", "B/s", 1e9),
              ("peak_vmem_rd_bw_gigabytes_per_second", "vmem_read_bytes_per_s", "B/s", 1e9),
              ("peak_vmem_wr_bw_gigabytes_per_second", "vmem_write_bytes_per_s", "B/s", 1e9),
              ("peak_sram_rd_bw_gigabytes_per_second", "sram_read_bytes_per_s", "B/s", 1e9),
              ("peak_sram_wr_bw_gigabytes_per_second", "sram_write_bytes_per_s", "B/s", 1e9),
              ("peak_cmem_rd_bw_gigabytes_per_second", "cmem_read_bytes_per_s", "B/s", 1e9),
              ("peak_cmem_wr_bw_gigabytes_per_second", "cmem_write_bytes_per_s", "B/s", 1e9))


# The datasheet of each TPU generation, per chip, as Cloud TPU's system architecture pages state
# it: the MXU's bf16 peak (FLOP/s) and HBM bandwidth (B/s). Read only where the plane has no peak.
DATASHEET = {"v4": (275e12, 1200e9), "v5e": (197e12, 819e9), "v5p": (459e12, 2765e9),
             "v6e": (918e12, 1638e9)}


def datasheet_of(generation: str | None) -> str | None:
    """DATASHEET's key for a plane's generation ("v5 lite" is v5e, "v6 lite" v6e); None where
    it has none."""
    g = (generation or "").lower().replace(" lite", "e").replace(" ", "")
    return g if g in DATASHEET else None


def describe(space) -> Device | None:
    """The chip of a TPU capture (None where the xplane has no TPU plane): `kind` TPU, `model`,
    `generation`, `cores` (device planes), `megacore`, `peaks` (name -> {value, unit, label
    read, source: the plane stat}; a peak the plane gives as 0 is left out: not measured, not
    zero), `versions` (jax, jaxlib, the TPU runtime's build line)."""
    planes = [p for p in space.planes if TPU_PLANE_RE.match(p.name)]
    if not planes:
        return None
    stats = next((p.stats for p in planes if p.stats.get("device_type_string")), planes[0].stats)
    model = str(stats.get("device_type_string") or "") or None
    m = GENERATION_RE.search(model or "")
    peaks = {name: {"value": float(v) * factor, "unit": unit, "label": "read",
                    "source": f"{planes[0].name} stat {stat}"}
             for stat, name, unit, factor in PEAK_STATS
             if isinstance(v := stats.get(stat), int | float) and v > 0}
    meta = space.plane("/host:metadata")
    ms = meta.stats if meta is not None else {}
    runtime = str(ms.get("tpu_version") or "")
    return {"kind": "TPU", "model": model,
            "generation": f"v{m.group(1)}{m.group(2) or ''}" + (
                f" {m.group(3).lower()}" if m and m.group(3) else "") if m else None,
            "cores": len(planes), "megacore": bool(stats.get("has_megacore")),
            "peaks": peaks,
            "versions": {"jax": ms.get("jax_version"), "jaxlib": ms.get("jaxlib_version"),
                         "tpu_runtime": " ".join(runtime.split()) or None}}


# the roofline's ceiling keys (jaxperf.cost.ceilings.ceiling_key) the MXU's peak bounds: bf16 and
# f16 matmuls, f32 ones at DEFAULT precision (the MXU runs them as bf16 passes), and int8 ones:
# XLA's cost model counts an integer matmul's FLOPs at the MXU's bf16 rate (a TPU v5e's 8192^3
# int8 dot: flops 5.57e11, model_flops 1.10e12; 95% of the bf16 peak by the one, 94% of the
# datasheet's int8 peak by the other), so the plane's peak bounds the capture's FLOPs. An f32
# matmul at HIGH or HIGHEST precision runs as 3 or 6 bf16 passes, and the capture's FLOPs count
# them (a v5e's 2048x2048x8192 f32 dot at HIGHEST: flops 6 x model_flops, 86% of the bf16 peak),
# so the same peak bounds them (roofline.capture_cost keeps it only where the FLOPs show passes)
MXU_KEYS = ("bf16_fp16_matrix", "f32_default_matrix", "fp32_matrix", "s8_matrix", "u8_matrix")


def ceilings(space) -> tuple[dict, dict]:
    """Step 5 on a TPU: the chip as the roofline's device record (the shape of
    jaxperf.gpu.peaks.identify_space's) and its ceilings (jaxperf.cost.ceilings.Ceiling by
    key), each read from the device plane (tag `capture`): HBM bandwidth, and the MXU's peak
    for the keys it bounds (MXU_KEYS). Vector work has no compute ceiling here (the plane gives
    none for the VPU): memory alone bounds it. A plane without a peak gives no ceiling for
    it, said in `why`."""
    from jaxperf.cost.ceilings import Ceiling
    d = describe(space)
    model = d["model"] or "TPU"
    peaks = dict(d["peaks"])
    sheet = datasheet_of(d["generation"])
    missing = [k for k in ("hbm_bytes_per_s", "mxu_flops_per_s") if k not in peaks]
    for k in missing if sheet else ():  # the datasheet, only where the plane has no peak
        value = DATASHEET[sheet][k == "hbm_bytes_per_s"]
        peaks[k] = {"value": value, "tag": "vendor", "source": (
            f"datasheet: Cloud TPU {sheet} per chip, "
            + ("HBM bandwidth" if k == "hbm_bytes_per_s" else "peak compute (bf16)")
            + " (the capture's plane gives none)")}
    out = {}
    if hbm := peaks.get("hbm_bytes_per_s"):
        out["hbm_bandwidth"] = Ceiling(model, "hbm_bandwidth", hbm["value"], "B/s",
                                       hbm.get("tag", "capture"), hbm["source"], "")
    mxu = peaks.get("mxu_flops_per_s")
    for key in MXU_KEYS if mxu else ():
        out[key] = Ceiling(model, key, mxu["value"], "FLOP/s", mxu.get("tag", "capture"),
                           mxu["source"] + ("; an integer matmul's FLOPs as XLA's cost model "
                                            "counts them, at the bf16 rate (half its "
                                            "model_flops)" if key[0] in "su" else
                                            "; an f32 matmul's FLOPs counting its bf16 passes "
                                            "(six at HIGHEST, three at HIGH)"
                                            if key == "fp32_matrix"
                                            else ""), "")
    lacking = [k for k in missing if k not in peaks]
    said = f"the TPU plane gives no {' and no '.join(lacking)}: no ceiling for it" \
        if lacking else None
    device = {"model": model, "basis": "the TPU device plane's own peak stats"
              + (f"; where it gives none ({' and '.join(missing)}), Cloud TPU {sheet}'s "
                 "datasheet" if sheet and missing else ""),
              "devices": d["cores"], "evidence": {"device_type_string": d["model"],
                                                  "generation": d["generation"]},
              "why": said, "kind": "TPU"}
    return device, out
