"""A ceiling, whichever device gives it (a GPU's datasheet row, references/peaks.csv; a TPU's
own plane), and the ceiling that bounds an instruction's arithmetic by its dtype. Standard
library only."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Ceiling:
    """One ceiling of a device (`gpu`: its model) with its tag and source."""
    gpu: str
    key: str
    value: float | None  # FLOP/s or B/s; None = no ceiling (unconfirmed, none)
    unit: str
    tag: str
    source: str
    other_values: str


def ceiling_key(c, flops: int, ceilings: dict) -> str | None:
    """The ceiling (a key of peaks.csv's rows) that bounds an instruction's arithmetic (`c`: its
    hlo_costs.Cost): its matrix operand's dtype (an f32 dot at DEFAULT precision may run as
    TF32: the higher ceiling), else the vector FP32 (FP64 for f64 arithmetic). None when it
    does no arithmetic."""
    if not flops:
        return None
    d = c.matrix_dtype
    if d is None:
        return "fp64_vector" if c.vector_f64 else "fp32_vector"
    if d == "f64":
        return "fp64_matrix"
    if d == "f32":
        if c.tf32_allowed:  # a device whose matrix unit runs DEFAULT f32 its own way names it
            return "f32_default_matrix" if "f32_default_matrix" in ceilings else "tf32_matrix"
        return "fp32_matrix" if "fp32_matrix" in ceilings else "fp32_vector"
    if d in ("bf16", "f16"):
        return "bf16_fp16_matrix"
    if d.startswith("f8"):
        return "fp8_matrix"
    if d == "f4e2m1fn":
        return "fp4_matrix" if "fp4_matrix" in ceilings else "fp6_fp4_matrix"
    return f"{d}_matrix"  # not in the table: said as no ceiling

