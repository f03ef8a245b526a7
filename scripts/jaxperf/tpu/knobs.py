"""What a TPU engineer turns, in a TPU's words: an instruction's knob by what binds it, a Pallas
kernel's block sizes. Step 6 reads them through its device's adapter (jaxperf.device)."""

from __future__ import annotations

import re

# A Pallas kernel named after its blocks (`matmul_128`, `flash_fwd_512x512`): the numbers in its
# name, where it has some
BLOCK_NUMBERS_RE = re.compile(r"(?<![a-z])(\d{2,5})(?:x(\d{2,5}))?")


# An XLA instruction's knob on a TPU by what binds it (step 6's instruction rows)
BOUND_KNOB = {
    "memory": ("fewer HBM bytes: fusion with its producer or consumer (see what XLA left "
               "unfused), a layout that needs no copy or transpose, bf16 where it is f32, a "
               "larger batch (more work per byte)"),
    "compute": ("fuller MXU tiles: matmul dimensions in multiples of 128 (8 on the "
                "second-minor axis), a larger batch; int8 on the MXU where the model tolerates "
                "it; a Pallas kernel where XLA's tiling is poor"),
    # a sort, whatever binds it: its comparisons over several passes keep it far from both
    "sort": ("where only the largest k are used, jax.lax.top_k in place of a sort or argsort "
             "and a slice, or jax.lax.approx_max_k (a TPU's approximate top-k, faster still); "
             "else fewer or shorter keys (one key, not a sort of several operands)"),
}


# What removes the copies and transposes XLA inserts to change a layout on a TPU
LAYOUT_KNOB = (
    "a layout XLA need not copy: write each einsum or dot in the order the arrays are laid out "
    "(batch and heads leading, the contracted dimension minor) instead of an explicit "
    "transpose or .T before it, keep minor dimensions in multiples of 128 (8 on the "
    "second-minor), and see which producer and consumer each copy sits between (its op_name); "
    "measure: XLA may insert copies for the new order too")


def pallas_blocks(name: str) -> str:
    """The knob of a Pallas call: its block sizes, with the sizes its name shows."""
    sizes = sorted({int(n) for m in BLOCK_NUMBERS_RE.finditer(name.split(".")[0])
                    for n in m.groups() if n})
    seen = (f" (its name shows {', '.join(map(str, sizes))})" if sizes else "")
    return ("the Pallas kernel's block sizes" + seen + ": larger blocks (the BlockSpec "
            "block_shape and the grid of pl.pallas_call, or the kernel's block_sizes argument) "
            "give the MXU larger tiles and fewer grid steps, as far as the blocks fit in VMEM; "
            "measure each size")
