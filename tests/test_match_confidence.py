"""kernel_match's confidence where a command buffer's events run in another order than the
schedule's: neighbouring commands the data flow leaves unordered swapped inside a launch (XLA may
record independent commands without a dependency between them and run them at once). A perturbed
capture costs errors in proportion to the swaps, never a cascade, and a kernel placed wrong never
carries a confidence at or above kernel_match.LOW_CONFIDENCE where the capture shows the order is
free (events of the launch running at once) or the names show the reordering."""

from __future__ import annotations

import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from matcher_events import event, fresh

from capgen.generate import generate
from capgen.scenarios import SCENARIOS
from conftest import REPO, read_table
from jaxperf.match import kernel_match as km
from jaxperf.program.hlo_program import Program
from jaxperf.read import xplane_reader

SCRIPT = REPO / "scripts" / "attribute_kernels.py"
SCENARIOS_TRIED = ["nvidia-cb-all", "nvidia-maxtext-8gpu", "nvidia-reuse-splitk-cb"]
NEEDS_SHARED = {"nvidia-maxtext-8gpu"}  # its program is read from ../shared/captures
# wrong events per swap, at most: a swap moves two events, and an alike slot nearby may follow
# (measured worst: 3 for one swap on nvidia-reuse-splitk-cb, 0.65 per swap at 20 on MaxText)
PER_SWAP = 3


def _read(path: Path) -> list[dict]:
    return read_table(path)


@pytest.fixture(scope="module")
def captures(tmp_path_factory):
    made = {}

    def get(name):
        if name not in made:
            base = tmp_path_factory.mktemp(name)
            r = generate(SCENARIOS[name], base / "capture")
            p = subprocess.run([sys.executable, "-P", str(SCRIPT), str(r.run_dir), "--out",
                                str(base / "out"), "--no-xprof"], capture_output=True, text=True,
                               timeout=600)
            assert p.returncode == 0, p.stderr
            made[name] = (r, base / "out" / "attribution")
        return made[name]
    return get


def _inputs(xplane: Path, out: Path):
    """The plan and the first device's events of the main program in launch order, with times
    and streams, and the instruction the unperturbed run gave each (the truth's, checked by
    test_attribute_kernels)."""
    space = xplane_reader.load_space(xplane)
    rows = _read(out / "kernels.csv")
    pid = Counter(r["program_id"] for r in rows).most_common(1)[0][0]
    plan = km.Plan(Program(xplane_reader.parse_hlo(space.hlo_protos()[int(pid)][1]), int(pid)))
    dev = min(r["device"] for r in rows)
    rs = sorted((r for r in rows if r["program_id"] == pid and r["device"] == dev),
                key=lambda r: (int(r["correlation_id"] or -1), float(r["start_us"])))
    shared = Counter(r["correlation_id"] for r in rs)
    items = [event(i, r["kernel"],
                   km.kernel_kind(r["kernel"], r["hlo_op"], r["category"] == "memcpy"),
                   r["hlo_op"] or None, shared[r["correlation_id"]] > 1, r["correlation_id"],
                   start=round(float(r["start_us"]) * 1e6), dur=round(float(r["dur_us"]) * 1e6),
                   stream=r["stream"])
             for i, r in enumerate(rs)]
    return plan, items, [r["instruction"] for r in rs]


def _swap(plan, items, want, k, rng, at_once: bool, named: bool):
    """k swaps of neighbouring events of one launch whose instructions the program leaves
    unordered; `at_once`: the two run concurrently (the later one starts first, the other 1 ps
    later); `named`: only pairs of differently named kernels whose names the plan predicts."""
    items = [fresh(x) for x in items]

    def known(x):
        return km.normalize_kernel_name(x.name) in plan.name_ids

    pairs = [i for i in range(len(items) - 1)
             if items[i].group and items[i].corr == items[i + 1].corr and
             want[items[i].index] and want[items[i + 1].index] and
             not plan.ordered(want[items[i].index], want[items[i + 1].index]) and
             (not named or (items[i].name != items[i + 1].name and known(items[i]) and
                            known(items[i + 1])))]
    rng.shuffle(pairs)
    taken: set = set()
    done = 0
    for i in pairs:
        if done == k or i in taken or i + 1 in taken:
            continue
        a, b = items[i], items[i + 1]
        if at_once:
            b.start, a.start = a.start, a.start + 1
        else:
            a.start, b.start = b.start, a.start
        items[i], items[i + 1] = b, a
        taken |= {i, i + 1}
        done += 1
    return items, done


def _perturbed(captures, name, request, at_once, named):
    if name in NEEDS_SHARED:
        request.getfixturevalue("shared")
    r, out = captures(name)
    plan, items, want = _inputs(r.xplane, out)
    worst = {}
    for k in (1, 5, 20):
        for seed in range(3):
            pert, done = _swap(plan, items, want, k, random.Random(1000 * k + seed), at_once,
                               named)
            assert done, "no swappable pair"
            km.match(plan, pert)
            wrong = [x for x in pert if x.instruction != want[x.index]]
            worst[k] = max(worst.get(k, 0), len(wrong))
            confident = [(x.name, x.instruction, want[x.index], x.confidence) for x in wrong
                         if x.confidence >= km.LOW_CONFIDENCE]
            assert not confident, (k, seed, confident)
    assert all(worst[k] <= PER_SWAP * k for k in worst), worst
    return worst


@pytest.mark.parametrize("name", SCENARIOS_TRIED)
def test_swapped_commands_running_at_once_are_never_confidently_wrong(captures, name, request):
    """Reordering with concurrency: each swap's two events overlap in time."""
    worst = _perturbed(captures, name, request, at_once=True, named=False)
    assert worst[20] >= 2  # the swaps do cost something: the test can fail


@pytest.mark.parametrize("name", ["nvidia-cb-all", "nvidia-maxtext-8gpu"])
def test_swapped_named_kernels_are_put_back_by_their_names(captures, name, request):
    """Reordering without concurrency, between kernels whose names the plan predicts: the
    names put them back (before: two wrong events per swap, both confident). Not on
    nvidia-reuse-splitk-cb: its kernels reused at random under names XLA's rule does not give
    can leave a swap there placed wrong above the threshold (2 events in 9 runs)."""
    worst = _perturbed(captures, name, request, at_once=False, named=True)
    assert worst[1] == 0 and worst[5] <= 4, worst


def test_alike_kernels_of_unordered_slots_share_their_confidence(shared, captures):
    """One launch, unperturbed, with two kernels of one name (XLA's kernel reuse) in slots the
    data flow leaves unordered: confident while the launch runs its events one after another on
    one stream (as recorded, in the schedule's order), the second starting before the first
    ends as on real GPUs (a third of its duration: kernel_match.AT_ONCE_SHARE); below the
    threshold once the capture shows them running at once, the placement right either way."""
    r, out = captures("nvidia-maxtext-8gpu")
    plan, items, want = _inputs(r.xplane, out)
    first = next(i for i in range(len(items) - 1)
                 if items[i].group and items[i + 1].corr == items[i].corr and
                 items[i].name == items[i + 1].name and
                 not plan.ordered(want[items[i].index], want[items[i + 1].index]))
    corr = items[first].corr
    launch = [i for i, x in enumerate(items) if x.corr == corr]
    for at_once, overlap in ((False, False), (False, True), (True, True)):
        pert = [fresh(x) for x in items]
        a, b = pert[first], pert[first + 1]
        if at_once:
            b.start = a.start + 1  # starts as the first one starts
        elif overlap:  # starts as the first is two thirds done (consecutive kernels overlap)
            b.start = a.start + a.dur * 2 // 3
        km.match(plan, pert)
        assert [pert[i].instruction for i in launch] == [want[i] for i in launch]
        pair = (pert[first].confidence, pert[first + 1].confidence)
        if at_once:
            assert max(pair) < km.LOW_CONFIDENCE, pair
        else:
            assert min(pair) >= km.LOW_CONFIDENCE, pair


def test_data_flow_order_of_instructions(shared, captures):
    """The MaxText step: wrapped_transpose.21, .22 and .23 (one fused computation, one kernel)
    read nothing of each other; reduce-scatter-start reads all three."""
    r, out = captures("nvidia-maxtext-8gpu")
    plan, _, _ = _inputs(r.xplane, out)
    trio = ["wrapped_transpose.21", "wrapped_transpose.22", "wrapped_transpose.23"]
    assert len({plan.kernel_name[t] for t in trio}) == 1
    assert not any(plan.ordered(a, b) for a in trio for b in trio if a != b)
    assert all(plan.reads("reduce-scatter-start", t) and not plan.reads(t, "reduce-scatter-start")
               and plan.ordered(t, "reduce-scatter-start") for t in trio)


def test_no_confidence_lost_on_captures_run_in_schedule_order(captures, request):
    """Unperturbed graphs run one kernel after another: nothing new falls below the threshold
    (nvidia-reuse-splitk-cb keeps its 72, as before: kernels reused under names the plan cannot
    predict)."""
    expected = {"nvidia-cb-all": 0, "nvidia-maxtext-8gpu": 0, "nvidia-reuse-splitk-cb": 72}
    for name, low in expected.items():
        if name in NEEDS_SHARED:
            request.getfixturevalue("shared")
        _, out = captures(name)
        rows = _read(out / "kernels.csv")
        assert sum(1 for r in rows if r["instruction"] and
                   float(r["confidence"]) < km.LOW_CONFIDENCE) == low, name
