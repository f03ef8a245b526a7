#!/usr/bin/env python3
"""Golden outputs of the whole investigation, for a change that must not move a byte.

Usage:
    python3 -P bench/golden.py record DIR     # run everything, keep outputs and their digests
    python3 -P bench/golden.py compare DIR [--then=PATH]
                                              # run again into DIR/now/, diff against DIR/then/

Runs scripts/investigate.py (with --page) on every capture under ../shared/captures/ that holds
an xplane.pb or trace.json.gz, on the bundled example, and on generated scenarios (single GPU
with command buffers, eight GPUs with a straggler, an eager loop, pipeline stages, two hosts).
The captures are generated into DIR/captures/ and every run writes into the same path each time
(DIR/run/<name>/), so paths written into the results are equal between runs; the outputs are then
moved to DIR/then/ (record) or DIR/now/ (compare). Digests cover every file but logs/ (the steps'
own stdout, with timings) and attribution/xplane/ (XProf's own cache of converted tools);
before digesting, what moves between two runs of the same code is masked: the timing_s block of
a result JSON, a "timing:" line, the page's build time, a capture's mtime, a host pass's
seconds, DIR and the checkout itself (so another DIR or worktree compares equal). record keeps
the digests in DIR/then/DIGESTS.json; compare may run in another DIR against a copy of then/
(--then=PATH).
compare prints each file that differs or is missing on one side and exits 1 when any does.

    python3 -P bench/golden.py check [--write]  # a few scenarios against tests/golden/digests.json

check runs the bundled example and the generated scenarios of CHECKED (no shared capture: the
file must hold on any checkout) in a temporary folder and compares their digests with the ones
kept in the repository, and a few small tables (KEPT_TEXT) with their text kept beside them,
printing each file that moved and the rows that did; --write keeps the new digests and texts
instead, so a change's commit shows what it moved (tests/test_golden.py runs check).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "captures"
PY = sys.executable
GENERATED = [  # (name, capgen arguments)
    ("gen-nvidia-cb-partial", ["nvidia-cb-partial"]),
    ("gen-rocm-8gpu-straggler", ["rocm-8gpu-straggler"]),
    ("gen-eager-op-by-op", ["eager-op-by-op"]),
    ("gen-pipeline-stages", ["pipeline-stages"]),
    ("gen-rocm-8gpu-2hosts", ["rocm-8gpu", "--hosts", "2", "--slow-host", "1"]),
    ("gen-eager-gelu-passes", ["eager-gelu-passes"]),
    ("gen-custom-calls", ["custom-calls"]),
]


# the scenarios whose digests the repository keeps (tests/golden/digests.json)
CHECKED = ("gen-nvidia-cb-partial", "gen-rocm-8gpu-straggler", "gen-eager-op-by-op",
           "gen-pipeline-stages", "gen-eager-gelu-passes", "gen-custom-calls")
KEPT = ROOT / "tests" / "golden" / "digests.json"
# Small outputs kept as text besides their digests, so that a change's diff shows the rows it
# moved: one generated scenario's tables, a step each (tests/golden/<scenario>/<file>).
KEPT_TEXT = ("gen-eager-gelu-passes", ("steps.csv", "attribution/programs.csv",
                                       "attribution/ops.csv", "attribution/phases.csv",
                                       "roofline.csv", "changes.csv"))


def shared_captures() -> list[tuple[str, Path]]:
    found = []
    for d in sorted(SHARED.glob("*/*")):
        if any(d.rglob("*.xplane.pb")) or any(d.rglob("*.trace.json.gz")):
            found.append((f"shared-{d.parent.name}-{d.name}", d))
    return found


def generate(base: Path, only=None) -> list[tuple[str, Path]]:
    caps = base / "captures"
    env = dict(os.environ, PYTHONPATH=f"{ROOT / 'tests'}:{ROOT / 'scripts'}")
    out = []
    for name, argv in GENERATED:
        if only is not None and name not in only:
            continue
        dest = caps / name
        if not dest.exists():
            subprocess.run([PY, "-m", "capgen", argv[0], str(dest), *argv[1:]], env=env,
                           check=True, capture_output=True, cwd=ROOT)
        out.append((name, dest))
    return out


def run_all(base: Path, into: Path, only=None) -> None:
    targets = [] if only is not None else shared_captures()
    targets += [("example", ROOT / "examples" / "minigpt-h100-2gpu-cb")] + generate(base, only)
    if into.exists():
        shutil.rmtree(into)
    into.mkdir(parents=True)
    for name, cap in targets:
        run = base / "run" / name
        if run.exists():
            shutil.rmtree(run)
        p = subprocess.run([PY, "-P", str(ROOT / "scripts" / "investigate.py"), str(cap),
                            "--out", str(run), "--page", "--jobs", "2"],
                           capture_output=True, text=True)
        (run / "investigate.stdout").write_text(p.stdout + f"\nexit {p.returncode}\n")
        print(f"{name}: exit {p.returncode}", file=sys.stderr, flush=True)
        shutil.move(str(run), str(into / name))


MOVING = [
    (re.compile(rb'\n( *)"timing_s": \{[^}]*\}'), rb'\n\1"timing_s": "masked"'),
    (re.compile(rb"timing: [^\n]*"), b"timing: masked"),
    (re.compile(rb"<dt>Built</dt><dd>[^<]*</dd>"), b"<dt>Built</dt><dd>masked</dd>"),
    (re.compile(rb'"(mtime_ns|seconds)": [0-9.]+'), rb'"\1": "masked"'),
]
HOSTS_CSV_SECONDS = re.compile(rb"^([^,\n]*,[^,\n]*,[^,\n]*,)[0-9.]*,", re.M)


# The checkout's own folders, masked where an output names them; a path a capture itself holds
# (the bundled example's programs were compiled in a checkout: their frames name its
# tests/fixtures/) is the capture's and stays as written.
CHECKOUT_DIRS = re.compile(rb"(examples|scripts|analyzing-jax-launch-overhead|"
                           rb"writing-trace-report-pages|references|bench)/")


def masked(data: bytes, base: Path, name: str) -> bytes:
    data = data.replace(str(base).encode(), b"<DIR>")
    root = re.escape(str(ROOT).encode())
    data = re.sub(root + rb"/(?=" + CHECKOUT_DIRS.pattern + rb")", b"<ROOT>/", data)
    data = re.sub(root + rb"(?=[\s\"',:)]|$)", b"<ROOT>", data)
    if name == "hosts.csv":  # its seconds column: each host's pass's wall time
        data = HOSTS_CSV_SECONDS.sub(rb"\1masked,", data)
    for pattern, repl in MOVING:
        data = pattern.sub(repl, data)
    return data


def digests(tree: Path, base: Path) -> dict[str, str]:
    out = {}
    for p in sorted(tree.rglob("*")):
        rel = p.relative_to(tree)
        if (p.is_file() and "logs" not in rel.parts and rel.name != "DIGESTS.json"
                and "attribution/xplane" not in rel.as_posix()
                and ".handoff" not in rel.parts):  # step inputs keyed to paths and times
            out[rel.as_posix()] = hashlib.sha256(masked(p.read_bytes(), base, p.name)).hexdigest()
    return out


def differ(then: dict, now: dict) -> int:
    """Print each file that moved; the count."""
    bad = 0
    for rel in sorted(set(then) | set(now)):
        if then.get(rel) != now.get(rel):
            bad += 1
            side = "only then" if rel not in now else "only now" if rel not in then else "differs"
            print(f"{side}: {rel}")
    print(f"{len(then)} files then, {len(now)} now, {bad} differ")
    return bad


def check(write: bool) -> int:
    """The kept scenarios against tests/golden/digests.json (or --write them)."""
    import tempfile
    with tempfile.TemporaryDirectory(prefix="golden-") as tmp:
        base = Path(tmp).resolve()
        run_all(base, base / "now", only=CHECKED)
        now = digests(base / "now", base)
        name, files = KEPT_TEXT
        texts = {f: masked((base / "now" / name / f).read_bytes(), base, Path(f).name)
                 for f in files}
    kept_dir = KEPT.parent / name
    if write:
        for f, data in texts.items():
            (kept_dir / f).parent.mkdir(parents=True, exist_ok=True)
            (kept_dir / f).write_bytes(data)
        KEPT.parent.mkdir(parents=True, exist_ok=True)
        KEPT.write_text(json.dumps(now, indent=1, sort_keys=True) + "\n")
        print(f"{len(now)} digests kept in {KEPT.relative_to(ROOT)}")
        return 0
    then = json.loads(KEPT.read_text()) if KEPT.is_file() else {}
    moved = differ(then, now)
    for f, data in texts.items():
        was = (kept_dir / f).read_bytes() if (kept_dir / f).is_file() else b""
        if was != data:
            moved += 1
            print(f"text differs: tests/golden/{name}/{f}")
            old_rows, new_rows = was.decode().splitlines(), data.decode().splitlines()
            for row in [r for r in old_rows if r not in new_rows][:5]:
                print(f"  - {row[:200]}")
            for row in [r for r in new_rows if r not in old_rows][:5]:
                print(f"  + {row[:200]}")
    if moved:
        print("outputs moved: if the change means to move them, keep the new digests with "
              "python3 -P bench/golden.py check --write and commit them with the change")
        return 1
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["check"] and argv[1:] in ([], ["--write"]):
        return check(argv[1:] == ["--write"])
    then_dir = None
    if len(argv) == 3 and argv[2].startswith("--then="):
        then_dir = Path(argv.pop()[len("--then="):]).resolve()
    if len(argv) != 2 or argv[0] not in ("record", "compare"):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    base = Path(argv[1]).resolve()
    if argv[0] == "record":
        run_all(base, base / "then")
        then = digests(base / "then", base)
        (base / "then" / "DIGESTS.json").write_text(json.dumps(then, indent=1, sort_keys=True))
        print(f"{len(then)} files recorded in {base / 'then'}")
        return 0
    run_all(base, base / "now")
    then_dir = then_dir or base / "then"
    then = json.loads((then_dir / "DIGESTS.json").read_text())
    return 1 if differ(then, digests(base / "now", base)) else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
