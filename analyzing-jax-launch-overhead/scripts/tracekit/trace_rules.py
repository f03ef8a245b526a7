"""The bundle's classification rules and output conventions, each in one place (standard library
only: the launch-overhead skill runs where nothing is installed; the root skill imports this
module from here, never the reverse).

- What a device's events are lives with its device: tracekit.gpu (kernel kinds and categories,
  graphs, launch calls, copies) and tracekit.tpu (op runs, program runs, dispatches); here, the
  joins by which any device event has the host call that queued it (`QUEUED_BY`).
- HLO opcode sets: what launches nothing, what waits, what controls, what communicates.
- Streams and stragglers: a stream's role from its busy time per category (`stream_role`), and
  which GPUs finish a step last, several within `STRAGGLER_TIE_PS` being a tie (`last_finishers`).
- Units and formatting, one home: `us` (a table cell), `us_value` (a result's value), `us_text`
  (a sentence's), `pct`; atomic output folders
  (`atomic_folder`) and files (`replace_files`): a failed run leaves no half-written table;
  `quiet_fd2` keeps a library's C++ log off the terminal.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
import tempfile
import tomllib
from pathlib import Path

# The joins by which a device event has the host call that queued it: its own launch, its graph's
# launch (GPU), or its program run's dispatch (TPU: tracekit.tpu).
QUEUED_BY = frozenset({"launch", "graph_launch", "dispatch"})


# XLA compiling a program on the host (the PJRT client's compile, JAX's call into it, the
# backends' compilers): inside a step it is a new shape or a cache miss, paid every time.
COMPILE_RE = re.compile(r"^(\$\S+ )?(PJRT_Client_Compile|backend_compile(_and_load)?|XlaCompile|"
                        r"TpuCompiler::Compile|GpuCompiler::Compile|"
                        r"PjRt(StreamExecutor|CApi)Client::Compile)$")


# What a change's low end (changes.csv saving_measured_us) is, by its cause_kind: a rate this
# capture reached, else what the cause's own bound is (None: the row's `target` says, a host
# gap's one producer thread's bound or the copies from the host); said the same by the job's
# summary and the draft.
LOW_END = {"": "at a rate this capture reached",
           "scan_stacking": "the fusions whose own work is the stacking", "host_gap": None}


def low_end_words(row: dict) -> str:
    """What a changes.csv row's saving_measured_us is (LOW_END)."""
    words = LOW_END.get(row.get("cause_kind") or "", LOW_END[""])
    return words if words is not None else row.get("target") or "its own bound"


# ---------------------------------------------------------------- HLO opcodes

# Opcodes that never launch device work: they only name, reshape views of, or order values.
# (partition-id / replica-id are not here: they run as a 4-byte memset.)
NO_LAUNCH_OPCODES = frozenset({
    "parameter", "constant", "tuple", "get-tuple-element", "bitcast", "add-dependency",
    "after-all", "opt-barrier", "domain",
})
MEMSET_OPCODES = frozenset({"partition-id", "replica-id"})
WAIT_OPCODES = frozenset({
    "all-reduce-done", "all-gather-done", "collective-permute-done", "async-done",
    "copy-done", "send-done", "recv-done", "async-update",
})
CONTROL_OPCODES = frozenset({"while", "call", "conditional"})
# Two instructions are the same work at a similar size where their FLOPs (compute-bound) or
# bytes (memory-bound) a run are within this factor: a measured target (step 5) or another
# backend's rate (step 6) is never a small kernel that cannot fill the GPU held to a large one
SAME_SIZE_FACTOR = 4.0
COLLECTIVE_OPCODES = frozenset({
    "all-reduce", "all-reduce-start", "all-gather", "all-gather-start", "reduce-scatter",
    "all-to-all", "collective-permute", "collective-permute-start", "collective-broadcast",
    "ragged-all-to-all", "send", "recv",
})

# ---------------------------------------------------------------- what the program is

# An instruction's phase, from jax's name stack (its op_name) and its frames. jax names what
# differentiation traced `jvp(...)` and the cotangent pass `transpose(...)`
# (jax/_src/interpreters/ad.py: transform_name_stack('jvp') and ('transpose')), whatever the
# entry point (grad, value_and_grad, vjp). An optimizer's update has no name of jax's own: it is
# known by its frames (optax, flax's train state, keras optimizers) or by a name scope that
# names an optimizer. An instruction XLA made (a copy, a layout change, the slices of a
# combined collective) carries no op_name: no phase can be read from it.
PHASES = ("forward", "backward", "optimizer", "outside", "unnamed")
_BACKWARD_RE = re.compile(r"(?:^|[/(])transpose\(")
_FORWARD_RE = re.compile(r"(?:^|[/(])(?:jvp|linearize)\(")
OPTIMIZER_FRAME_RE = re.compile(r"^(?:optax|flax/training|keras/src/optimizers|keras/optimizers)/")
OPTIMIZER_SCOPE_RE = re.compile(
    r"(?:^|/)(?:sgd|momentum|nesterov|adam|adamw|adafactor|adagrad|lamb|lars|lion|rmsprop|"
    r"shampoo|optimizer|optim|opt_update|apply_gradients|apply_updates)(?:/|$)", re.I)


def phase(op_name: str, framework_frame: str = "") -> str:
    """`backward` (under transpose), `forward` (under jvp: what differentiation traced, the
    loss included), `optimizer` (an optimizer's frame or name scope), `unnamed` (no op_name),
    else `outside` (no differentiation: inference, an update written by hand under no telling
    name, loss scaling, an eager op)."""
    if not op_name:
        return "unnamed"
    if _BACKWARD_RE.search(op_name):
        return "backward"
    if _FORWARD_RE.search(op_name):
        return "forward"
    if OPTIMIZER_FRAME_RE.match(framework_frame or "") or OPTIMIZER_SCOPE_RE.search(op_name):
        return "optimizer"
    return "outside"


# The profiler's own calls on the host (the Python tracer names a Python function
# `$<file>:<line> <name>`): jax.profiler's start_trace and stop_trace. Their time is the
# profiler's, not the program's: a capture's wall clock can be almost all start-up.
# jax.profiler's own Python functions as the Python tracer names them (`trace` is the context
# manager around a whole capture): never a step's work, never the program's time.
PROFILER_CALL_RE = re.compile(r"^\$profiler\.py:\d+ (start_trace|stop_trace|trace)$")


# ---------------------------------------------------------------- units and files


def plural(n, word: str, many: str | None = None) -> str:
    """`n word`, the word in the plural unless n is 1 (`many`: an irregular plural)."""
    return f"{n} {word if n in (1, '1') else many or word + 's'}"


def us(ps) -> str:
    """Picoseconds as a table cell in microseconds with three decimals (nanosecond
    resolution); empty for None (a figure that does not apply)."""
    return "" if ps is None else f"{ps / 1e6:.3f}"


def us_value(ps) -> float | None:
    """Picoseconds as a result's value in microseconds, rounded to the nanosecond."""
    return None if ps is None else round(ps / 1e6, 3)


def number_text(value: float, decimals: int = 1) -> str:
    """A number for a sentence or a report: thousands separated, `decimals` places
    ("1,234.5"): the one formatter of figures in text."""
    return f"{value:,.{decimals}f}"


def us_text(value, missing: str = "n/a") -> str:
    """Microseconds (a number or a table cell) for a sentence: "1,234.5 us"; `missing` where it
    is None or not a number."""
    try:
        return number_text(float(value)) + " us"
    except (TypeError, ValueError):
        return missing


def pct(num, den) -> str:
    """A share in percent with two decimals; empty when the whole is zero."""
    return f"{100.0 * num / den:.2f}" if den else ""


def made_folder(prefix: str, parent: Path) -> Path:
    """A new temporary folder in `parent`, with the mode a folder made by the user gets
    (mkdtemp makes it 0700: renamed into place, another account, a Dask worker or CI could not
    read what it holds)."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    mask = os.umask(0o022)  # the umask, read by setting it and setting it back
    os.umask(mask)
    os.chmod(tmp, 0o777 & ~mask)
    return tmp


@contextlib.contextmanager
def atomic_folder(final: Path):
    """Yield a temporary folder beside `final`; on success it replaces `final` whole, on any
    failure it is removed and `final` is left as it was."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = made_folder(f".{final.name}.", final.parent)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = None
    if final.exists():
        old = final.with_name(f".{final.name}.old.{os.getpid()}")
        os.replace(final, old)
    os.replace(tmp, final)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def replace_files(out: Path, prefix: str = ".out-"):
    """Yield a temporary folder inside `out`; on success every file written there replaces its
    namesake in `out` (each whole: a rename), on failure none does; the folder is removed."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tmp = made_folder(prefix, out)
    try:
        yield tmp
        for f in sorted(tmp.iterdir()):
            os.replace(f, out / f.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def quiet_fd2():
    """Send file descriptor 2 to a sink for the block: XProf's C++ code logs there, and its
    lines must stay off the user's terminal."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)


# ---------------------------------------------------------------- streams and stragglers

# ---------------------------------------------------------------- host events and copies

TO_HOST_RE = re.compile(r"DtoH|D2H|DeviceToHost", re.I)


def is_argument_copy(category: str, hlo_op: str | None, graph: bool) -> bool:
    """A copy event outside every program: no instruction, not in a graph (an argument
    copy), whichever device ran it."""
    return category == "memcpy" and not hlo_op and not graph


def is_copy_to_host(name: str, launch_name: str | None = None) -> bool:
    """A copy to the host, by the event's name or its host call's."""
    return TO_HOST_RE.search(name) is not None or (
        launch_name is not None and TO_HOST_RE.search(launch_name) is not None)


# The Python tracer names its events "$<file>:<line> <function>" (or "$builtins <function>").
PYTHON_TRACER_PREFIX = "$"



# The table columns written by host_events_cell: (table, column) -> what their entries are
# (measured overlaps in us). The fact check reads one entry of such a cell as `column[name]`.
HOST_EVENT_COLUMNS = frozenset({("gaps.csv", "host_events"), ("steps.csv", "between_host_events")})


def host_events_cell(pairs) -> str:
    """The host events of a gap or of the idle between steps, as one table cell: `name=us`
    (picoseconds given, 3 decimals written) joined by ' | '."""
    return " | ".join(f"{name}={v / 1e6:.3f}" for name, v in pairs)


def parse_host_events(text) -> list[tuple[str, float]]:
    """A `host_events_cell` read back: (name, us) pairs, unreadable items left out."""
    out = []
    for item in (text or "").split(" | "):
        name, _, v = item.rpartition("=")
        try:
            us_ = float(v)
        except ValueError:
            continue
        if name:
            out.append((name, us_))
    return out


STREAM_ROLES = ("compute", "collective", "copy")
# Several GPUs that finish a step within this much of the latest end are a tie, not one
# straggler: 1 us is below the jitter of a single launch (a few us), so a smaller difference says
# nothing about which GPU the others waited for.
STRAGGLER_TIE_PS = 1_000_000
# Straggler: one GPU (or, across hosts, one host) ends more than this share of the steps last,
# each time ahead of the next by more than the margin (the larger of an absolute floor, under
# which launch jitter decides, and a share of the step): otherwise the last one is noise and no
# straggler is named. Step 1 (skip_stats.straggler) and the cross-host summary share it.
STRAGGLER_MAJORITY = 0.5
STRAGGLER_MIN_LEAD_PS = 5_000_000  # 5 us
STRAGGLER_MIN_LEAD_SHARE = 0.005  # 0.5% of the step


def stream_role(compute, collective, memcpy) -> str:
    """A stream's role from its busy time per category (any one unit): compute, collective or
    copy (memcpys and memsets), the largest; equal times resolve in that order."""
    times = (compute, collective, memcpy)
    return STREAM_ROLES[max(range(3), key=lambda i: (times[i], -i))]


def straggler_margin_ps(step_ps: int) -> float:
    """Step 1's margin for one step: a GPU (or host) that finishes last by no more than this
    ahead of the next is in a tie, not a straggler."""
    return max(STRAGGLER_MIN_LEAD_PS, STRAGGLER_MIN_LEAD_SHARE * step_ps)


def last_alone(ends: dict, step_ps: int):
    """The GPU (or host) that ends a step last ahead of the next by more than the step's margin
    (straggler_margin_ps); None for a tie or fewer than two; with its lead (ps, or None)."""
    order = sorted(ends, key=lambda d: (-ends[d], str(d)))
    if len(order) < 2:
        return None, None
    lead = ends[order[0]] - ends[order[1]]
    return (order[0], lead) if lead > straggler_margin_ps(step_ps) else (None, None)


def majority_last(lasts: list) -> tuple:
    """The straggler rule over the steps compared (`lasts`: each step's last_alone, None for a
    tie): (the one most often last, whether it is last in more than STRAGGLER_MAJORITY of the
    steps, ties counted, and each one's count of steps it ended last)."""
    counts = {d: lasts.count(d) for d in sorted({d for d in lasts if d is not None}, key=str)}
    top = max(counts, key=lambda d: counts[d]) if counts else None
    return top, top is not None and counts[top] > STRAGGLER_MAJORITY * len(lasts), counts


def _groups(s1) -> list:
    groups = (s1 or {}).get("gpu_groups") if isinstance(s1, dict) else None
    return [g for g in groups if isinstance(g, dict) and isinstance(g.get("devices"), list)] \
        if isinstance(groups, list) else []


def format_ranges(nums) -> str:
    """Sorted integers as a table cell of runs: [0, 1, 2, 5] -> "0-2 5" (programs.csv steps)."""
    out, run = [], []
    for n in list(nums) + [None]:
        if run and n is not None and n == run[-1] + 1:
            run.append(n)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [n]
    return " ".join(out)


def parse_ranges(cell: str | None) -> set:
    """The integers of a format_ranges cell ("0-2 5"; commas and semicolons read as spaces);
    parts that are not runs of integers are left out."""
    nums: set = set()
    for part in (cell or "").replace(",", " ").replace(";", " ").split():
        lo, _, hi = part.partition("-")
        try:
            a, b = int(lo), int(hi or lo)
        except ValueError:
            continue
        nums.update(range(a, b + 1))
    return nums


def compared_gpus(s1: dict | None) -> set | None:
    """The GPUs whose work is compared and among which a straggler can be named: step 1's
    `gpu_groups` entry marked `compared` (GPUs that run the same programs); an empty set where
    step 1 grouped the GPUs and no two run the same programs (pipeline stages); None where step
    1 grouped nothing (every GPU is compared). GPUs of other groups do other work (other
    programs, argument copies only): never a straggler for that."""
    groups = _groups(s1)
    if not groups:
        return None
    return {int(d) for g in groups if g.get("compared") for d in g["devices"]}


def step_gpus(s1: dict | None) -> set | None:
    """The GPUs that run the step's programs (step 1's groups marked `runs_step`): the step's
    end, its bounding GPU and the verdict are taken among them; None where step 1 grouped
    nothing."""
    groups = _groups(s1)
    gpus = {int(d) for g in groups if g.get("runs_step", g.get("compared")) for d in g["devices"]}
    return gpus or None


def other_work(s1: dict | None) -> list:
    """Step 1's sentences for the GPUs that are not compared (other programs, copies only)."""
    return [g.get("sentence", "") for g in _groups(s1) if not g.get("compared")]


def last_finishers(ends: dict, tie_ps: int = STRAGGLER_TIE_PS) -> list:
    """The GPUs that finish last: every GPU whose end (picoseconds) is within `tie_ps` of the
    latest, in ascending order. More than one is a tie; none when `ends` is empty."""
    if not ends:
        return []
    latest = max(ends.values())
    return sorted(d for d, e in ends.items() if latest - e <= tie_ps)


# ---------------------------------------------------------------- what a capture may hold

# Event times read from a capture (a trace's ts, an xplane line's timestamp plus an event's
# offset) are picoseconds from the profile start, and durations are picoseconds: each at most
# 10^18 ps (10^12 us, about 11.6 days) in size. A profile lasts seconds to minutes (every shared
# capture ends within 10 s), so a larger value is not a time from the profile start; the bound
# also keeps a start plus a duration inside a 64-bit integer (the matcher's numpy arrays).
MAX_TIME_PS = 10**18

# An event that ends after every event of the capture has started, by more than the capture's
# own length (from its first start to its last) and more than a minute, lasted longer than the
# profile that recorded it: its time is not of this profile (a kernel of 10^12 us, within
# MAX_TIME_PS, stretched its step to 11.6 days and every idle figure of the step with it). The
# readers refuse the file, naming the event. A real last kernel ends microseconds to seconds
# after the last start; a long-running one inside a short capture is allowed its minute.
MIN_OVERRUN_PS = 60 * 10**12


def runs_past_capture(first_start_ps: int, last_start_ps: int, end_ps: int) -> bool:
    """Whether an event ending at end_ps outlasts the capture whose events start from
    first_start_ps to last_start_ps (MIN_OVERRUN_PS)."""
    return end_ps - last_start_ps > max(last_start_ps - first_start_ps, MIN_OVERRUN_PS)


# An event's name longer than this is cut where it is read, by both readers alike: a kernel name
# of a megabyte on 60 kernels wrote an 822 MB kernels.csv and held 2.5 GB. The longest real
# names seen run to 4,174 characters (composable_kernel's ck_tile attention kernels on the
# shared MI355X capture; ROCm's Tensile GEMMs to about 800): the bound keeps 15 times that.
MAX_NAME_CHARS = 65536


def cut_name(name: str) -> str:
    """`name` itself, or its first MAX_NAME_CHARS characters and how many more it had."""
    if len(name) <= MAX_NAME_CHARS:
        return name
    return f"{name[:MAX_NAME_CHARS]}…[{len(name) - MAX_NAME_CHARS:,} more characters]"

# Unicode's format characters (category Cf, Unicode 14: a test holds the list to the
# interpreter's unicodedata): right-to-left overrides, zero-width spaces and joiners, a byte
# order mark. Printed raw, a name holding them reads as another (an override reverses what
# follows it), so they are escaped wherever control characters are.
FORMAT_CHARS = ("\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u180e\u200b-\u200f"
                "\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd"
                "\U000110cd\U00013430-\U00013438\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
                "\U000e0001\U000e0020-\U000e007f")
FORMAT_RE = re.compile(f"[{FORMAT_CHARS}]")
_UNPRINTABLE_RE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff" + FORMAT_CHARS + "]")


def escaped(m) -> str:
    """A matched character as its backslash escape (\\u202e)."""
    return m.group().encode("unicode_escape").decode("ascii")


# a GPU's words in this bundle's own sentences and a TPU's for them, in order (words.toml)
TPU_WORDS = tuple(map(tuple, tomllib.loads(
    (Path(__file__).with_name("words.toml")).read_text(encoding="utf-8"))["tpu"]))


def tpu_words(text: str, phrases=None) -> str:
    """`text` (a sentence of this bundle's own) in a TPU's words (TPU_WORDS; only those of
    `phrases` where given)."""
    for gpu, tpu in TPU_WORDS:
        if gpu in text and (phrases is None or gpu in phrases):
            text = text.replace(gpu, tpu)
    return text


# a GPU named in a sentence said of any device (a check's, an item's): a TPU core on a TPU
# ("GPU 0", "1 GPU whose", "GPUs"; not the SKIP paper's "GPU-bound")
GPU_WORD_RE = re.compile(r"\bGPU(s?)\b(?!-)")


def tpu_said(text):
    """A sentence of this bundle's own, said of a GPU, in a TPU's words: tpu_words, then each
    GPU left a TPU core (text that is not a str as it is)."""
    if not isinstance(text, str):
        return text
    return GPU_WORD_RE.sub(lambda m: "TPU core" + m.group(1), tpu_words(text))


def printable(text) -> str:
    """`text` for one line of a text output (summary.txt, a printout, an error sentence):
    control characters (a newline, a carriage return, an escape, NUL), line separators, lone
    surrogates and format characters (FORMAT_CHARS) written as backslash escapes, so that a
    name from a capture can neither split a line, fail to encode nor read as another. The CSV
    and JSON outputs keep names exactly as the capture has them (their writers quote and
    escape)."""
    text = "" if text is None else str(text)
    if not _UNPRINTABLE_RE.search(text):
        return text
    return _UNPRINTABLE_RE.sub(escaped, text)


# step 4's note on a program saved under several ids with one HLO (attribute_kernels.json
# program.notes), read back by steps 2 and 7: the chosen id, then every id
SAVED_TWICE_RE = re.compile(r"program (\d+) is saved under several ids \(([\d, ]+), identical "
                            r"HLO\)")


def saved_twice(notes) -> dict[str, str]:
    """Each id of a program saved under several ids -> the id chosen among them (SAVED_TWICE_RE
    in step 4's notes)."""
    out = {}
    for note in notes or ():
        if m := SAVED_TWICE_RE.search(str(note)):
            out.update((x.strip(), m.group(1)) for x in m.group(2).split(",") if x.strip())
    return out
