"""What a TPU engineer turns, as the capture shows it: a Pallas kernel's block sizes, a scan's
stacked residuals, the programs a step runs. Read by step 6's TPU causes (changes.py)."""

from __future__ import annotations

import re

# A Pallas kernel named after its blocks (`matmul_128`, `flash_fwd_512x512`): the numbers in its
# name, where it has some
BLOCK_NUMBERS_RE = re.compile(r"(?<![a-z])(\d{2,5})(?:x(\d{2,5}))?")
STEP_PROGRAM_RE = re.compile(r"^(.*) x(\d+)$")


# An XLA instruction's knob on a TPU by what binds it (step 6's instruction rows)
BOUND_KNOB = {
    "memory": ("fewer HBM bytes: fusion with its producer or consumer (see what XLA left "
               "unfused), a layout that needs no copy or transpose, bf16 where it is f32, a "
               "larger batch (more work per byte)"),
    "compute": ("fuller MXU tiles: matmul dimensions in multiples of 128 (8 on the "
                "second-minor axis), a larger batch; int8 on the MXU where the model tolerates "
                "it; a Pallas kernel where XLA's tiling is poor"),
}


def pallas_blocks(name: str) -> str:
    """The knob of a Pallas call: its block sizes, with the sizes its name shows."""
    sizes = sorted({int(n) for m in BLOCK_NUMBERS_RE.finditer(name.split(".")[0])
                    for n in m.groups() if n})
    seen = (f" (its name shows {', '.join(map(str, sizes))})" if sizes else "")
    return ("the Pallas kernel's block sizes" + seen + ": larger blocks (the BlockSpec "
            "block_shape and the grid of pl.pallas_call, or the kernel's block_sizes argument) "
            "give the MXU larger tiles and fewer grid steps, as far as the blocks fit in VMEM; "
            "measure each size")


def step_programs(text: str) -> dict:
    """steps.csv `programs` (`jit_a x1; jit_b x2`) -> module -> its runs in the step."""
    out = {}
    for part in text.split(";"):
        m = STEP_PROGRAM_RE.match(part.strip())
        if m:
            out[m.group(1)] = int(m.group(2))
    return out


def stacking(ops: list) -> list:
    """ops.csv rows of a scan's stacking: instructions inside a while loop's body (their
    op_name under `/while/body/`) that are dynamic-update-slice fusions; each as ((program id,
    instruction), whether its own work is the stacking: its op_name ends in the update)."""
    out = []
    for r in ops:
        op = r.get("op_name") or ""
        if "/while/body/" in op and ("dynamic-update-slice" in r["instruction"]
                                     or op.endswith("dynamic_update_slice")):
            out.append(((r["program_id"], r["instruction"]), op.endswith("dynamic_update_slice")))
    return out


def top_lines(ops: list, keys: set, n: int = 3) -> str:
    """The Python lines (ops.csv user_frame) holding the most time of the instructions `keys`."""
    lines: dict = {}
    for r in ops:
        if (r["program_id"], r["instruction"]) in keys and r.get("user_frame"):
            lines[r["user_frame"]] = lines.get(r["user_frame"], 0.0) + float(r["gpu_us"] or 0)
    top = sorted(lines, key=lambda k: -lines[k])[:n]
    return ", ".join(top)
