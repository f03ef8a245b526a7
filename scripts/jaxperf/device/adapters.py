"""What an analysis asks of the device a capture ran on, answered by that device's adapter.

The analyses (steps 3 to 7, the report) never import a device's own module (tracekit.gpu,
tracekit.tpu, jaxperf.gpu, jaxperf.tpu, jaxperf.match: tests/test_house.py); they ask the
adapter of the capture's device kind, which answers the same questions on every device:
- `environment(space)`: the device record step 5 writes (model, basis, devices, evidence,
  why), its ceilings by model (jaxperf.cost.ceilings.Ceiling by key) and the capture's own
  per-instruction costs where the device records them (None: step 5's HLO cost model);
- `event_kind(name, hlo_op, memcpy)`: a device event's kind as a lane draws it (gemm, gemm_aux,
  collective, copy, memset, compute);
- `setup_re`: the host events of the runtime's own set-up of an execution (a GPU's thunks and
  command buffers; a TPU's dispatch call itself; None: none known);
- `bound_knob`: an instruction's knob by what binds it ("memory", "compute") where the device
  has words of its own (None: step 6's by the instruction's kind of work);
- `kernel_knob(name)`: the knob of a hand-written kernel (a Pallas call) by its name;
- `layout_knob`: what removes the copies and transposes that change a layout (None: step 6
  does not rank them on this device: not measured there);
- `said(text)`: a sentence of this bundle's own, written in GPU words, in the device's;
- `emulates_f64`: whether the device has no f64 arithmetic, so XLA emulates it (step 6's
  `f64_emulated` row).
A device added is an adapter added here.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Adapter:
    kind: str
    environment: Callable
    event_kind: Callable[..., str]
    setup_re: re.Pattern | None
    bound_knob: dict | None
    kernel_knob: Callable[[str], str] | None
    layout_knob: str | None
    said: Callable[[str], str]
    emulates_f64: bool = False


def _gpu_environment(space) -> tuple:
    from jaxperf.gpu import peaks
    return peaks.identify_space(space), peaks.load_peaks(), None


def _tpu_environment(space) -> tuple:
    from jaxperf.tpu import chip, op_runs
    device, ceilings = chip.ceilings(space)
    return device, {device["model"]: ceilings}, op_runs.costs(space)


def _adapters() -> dict[str, Adapter]:
    import gap_causes  # the runtime's dispatch call: a TPU's set-up of each execution
    from jaxperf.tpu import knobs
    from tracekit import gpu, tpu
    from tracekit import trace_rules as rules
    return {"GPU": Adapter("GPU", _gpu_environment, gpu.kernel_kind, gpu.EXECUTION_SETUP_RE,
                           None, None, None, str),
            "TPU": Adapter("TPU", _tpu_environment, tpu.op_kind, gap_causes.DISPATCH_CALL_RE,
                           knobs.BOUND_KNOB, knobs.pallas_blocks, knobs.LAYOUT_KNOB,
                           rules.tpu_said, emulates_f64=True)}


ADAPTERS = _adapters()


def of_space(space) -> Adapter:
    """The adapter of a decoded xplane's device: a TPU where it has TPU planes, else a GPU."""
    from jaxperf.tpu import op_runs
    return ADAPTERS["TPU" if op_runs.tpu_planes(space) else "GPU"]


def of_results(capture_info: dict | None, skip_stats: dict | None) -> Adapter:
    """The adapter of a scratch folder's capture: a TPU where step 0 read a TPU chip, or where
    step 1 joined op runs to their program's dispatch (a TPU trace without its xplane); else a
    GPU."""
    tpu = ((capture_info or {}).get("device") or {}).get("kind") == "TPU" or bool(
        ((skip_stats or {}).get("joins") or {}).get("dispatch"))
    return ADAPTERS["TPU" if tpu else "GPU"]
