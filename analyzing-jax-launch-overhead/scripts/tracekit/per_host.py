"""The per-host pass over a multi-host run (standard library only).

A multi-host job writes one `<host>.xplane.pb` and `<host>.trace.json.gz` per host into the same
run folder. Given such a folder and no `--host`, every entry script of the bundle hands its
arguments to `fan_out`: it starts the same script once per host, as a user would by hand (the
same arguments, then `--jobs=1 --host=H --out=OUT/<folder>`, the folder the host's name or
host-<n>; `--jobs=1`: the hosts are what runs at once, not a host's steps), at most `jobs`
processes at a time, each holding one host's capture and returning its memory when it ends;
then `cross_host` writes the cross-host summary into OUT (hosts.csv, host_steps.csv,
host_kernels.csv, hosts.json, hosts.txt). Each host's output is kept in
OUT/<host>/logs/<script>.txt. `--host` still selects one host.

With `--scheduler ADDRESS` (or `local`) the same per-host commands run as tasks on a Dask
cluster instead of local processes (cluster_hosts.py, references/architecture.md); the summary
is the same.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from tracekit import cross_host, forked, scratch, step_cli
from tracekit import trace_rules as rules

# per host, memory is about this many times its capture files' size plus a base: the
# proportional set size summed over a host's processes (step 1 forks a writer of rows.csv) peaked
# at 752 MiB for the 28.6 MiB of a 156,800-kernel capture through investigate.py (21x + 150 MiB),
# taken with a margin
MEMORY_PER_CAPTURE_BYTE = 24
MEMORY_BASE = 150 * 2**20
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
# names a host's folder may not take (compared without case: some file systems ignore it): the
# summary's files and what a report at the run's level writes beside them
_RESERVED = {"hosts.csv", "host_steps.csv", "host_kernels.csv", "hosts.json", "hosts.txt",
             "hosts_draft.md",
             "logs", "report.md", "report.html", "factcheck.csv", "factcheck.json"}


def folder_names(hosts: list[str]) -> dict[str, str]:
    """Each host's scratch sub-folder: its own name when that is a plain file name no other
    host's name equals but for case, else host-<n> (the name is kept in hosts.csv)."""
    lower = [h.lower() for h in hosts]
    names = {}
    for i, h in enumerate(hosts):
        plain = (_SAFE_NAME.fullmatch(h) is not None and h.lower() not in _RESERVED
                 and lower.count(h.lower()) == 1 and not re.fullmatch(r"host-\d+", h))
        names[h] = h if plain else f"host-{i + 1}"
    return names


def _available_memory() -> int | None:
    with contextlib.suppress(OSError, ValueError, IndexError):
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _capture_bytes(run_dir: Path, host: str) -> int:
    total = 0
    for suffix in (".xplane.pb", ".trace.json.gz", ".trace.json"):
        with contextlib.suppress(OSError):
            total += (run_dir / f"{host}{suffix}").stat().st_size
    return total


def plan_jobs(files, requested: int | None) -> tuple[int, str]:
    """How many hosts run at once, and why: the request, else the cores, lowered so that the
    largest host's estimated memory times the jobs fits in the memory available now."""
    n = len(files.hosts)
    if requested is not None:
        return max(1, min(requested, n)), f"{requested} asked"
    return processes_at_once(n, max((_capture_bytes(files.run_dir, h) for h in files.hosts),
                                    default=0), "host")


def processes_at_once(most: int, capture_bytes: int, each: str) -> tuple[int, str]:
    """How many processes that each hold a capture of `capture_bytes` run at once, and why: the
    cores (at most `most`), fewer where their estimated memory together would pass the memory
    available now (`each` names one: a host, a step)."""
    cores = forked.cores()
    jobs, why = min(cores, most), f"{cores} cores"
    if avail := _available_memory():
        per = MEMORY_BASE + MEMORY_PER_CAPTURE_BYTE * capture_bytes
        fit = max(1, avail // per)
        if fit < jobs:
            jobs, why = int(fit), (f"{cores} cores, but about {per / 2**20:,.0f} MiB per {each} "
                                   f"and {avail / 2**20:,.0f} MiB available")
        if per > avail:  # not even one fits: said, not refused (the estimate has a margin)
            why += (f"; one {each} alone may need more memory than is available: if it is "
                    "killed, profile fewer steps for a smaller capture")
    return max(1, jobs), why


def _say(text: str) -> None:
    """A progress line on stderr; a closed stderr does not stop the pass (the hosts' results
    and the summary are files)."""
    with contextlib.suppress(OSError, ValueError):
        print(text, file=sys.stderr, flush=True)


def _exit_code(rc: int) -> int:
    """A process killed by signal N (Popen gives -N) as the shell says it: 128 + N."""
    return 128 - rc if rc < 0 else rc


def _without(argv: list[str], options: tuple[str, ...]) -> list[str]:
    """argv less each `--opt VALUE` / `--opt=VALUE` of `options` (the per-host pass sets them)."""
    out, skip = [], False
    for a in argv:
        if skip or a in options or any(a.startswith(o + "=") for o in options):
            skip = not skip and a in options  # after `--opt`, its value
            continue
        out.append(a)
    return out


def fan_out(prog: str, script: str | Path, argv: list[str], files, out: Path,
            jobs: int | None = None, scheduler: str | None = None) -> int:
    """Run `script` once per host of `files` (capture_inputs.run_hosts), then the cross-host
    summary. Returns the largest exit code of the hosts (0 when every host succeeded), 1 when
    the scratch folder cannot be used, 130 when interrupted."""
    out = Path(out)
    names = folder_names(files.hosts)
    n_jobs, why = plan_jobs(files, jobs)
    _say(f"{prog}: {len(files.hosts)} hosts in {rules.printable(files.run_dir)}; each analysed "
         f"on its own into {rules.printable(out)}/<host>/, {n_jobs} at a time ({why})")
    argv = _without(argv, ("--out", "--jobs", "--scheduler"))
    # one argument each (`--host=-x` stays a value even when a name starts with a dash)
    # each host's process runs its steps one at a time: the hosts are what runs at once
    todo = [(h, names[h], [sys.executable, str(script), *argv, "--jobs=1", f"--host={h}",
                           f"--out={out / names[h]}"]) for h in files.hosts]
    return _run_and_summarise(prog, Path(script).stem, todo, out, n_jobs, str(files.run_dir),
                              scheduler)


def _run_and_summarise(prog: str, stem: str, todo: list, out: Path, n_jobs: int,
                       run_dir: str, scheduler: str | None = None) -> int:
    try:
        out.mkdir(parents=True, exist_ok=True)
        for _, folder, _ in todo:
            (out / folder / "logs").mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(f"{prog}: cannot create the scratch folders in {rules.printable(out)}: "
              f"{exc.strerror or exc}", file=sys.stderr)
        return 1
    if scheduler:  # each host a task on a Dask cluster (cluster_hosts)
        from tracekit import cluster_hosts
        results = cluster_hosts.run_all(prog, stem, todo, out, n_jobs, scheduler, _say,
                                        cross_host.last_sentence)
    else:
        results = _run_all(prog, stem, todo, out, n_jobs)
    if results is None:
        return 130
    summary = cross_host.summarise(out, results, run_dir=run_dir, script=stem)
    try:
        written = cross_host.write(out, summary)
    except OSError as exc:
        print(f"{prog}: cannot write the cross-host summary into {rules.printable(out)}: "
              f"{exc.strerror or exc}", file=sys.stderr)
        return 1
    for line in cross_host.render(summary):
        print(line)
    for fname, n in written:
        unit = "" if fname.endswith(".json") else (
            f" ({n} lines)" if fname.endswith(".txt") else f" ({n} rows)")
        print(f"wrote {rules.printable(out / fname)}{unit}")
    return max((r["exit"] for r in results), key=lambda c: (c != 0, c), default=0)


def _run_all(prog: str, stem: str, todo: list, out: Path, n_jobs: int) -> list[dict] | None:
    """Start each (host, folder, command) with at most n_jobs running; each one's output goes to
    OUT/<folder>/logs/<stem>.txt. The results in `todo`'s order; None when interrupted."""
    t0 = time.monotonic()
    pending = list(todo)
    running: dict = {}
    results: dict[str, dict] = {}
    try:
        while pending or running:
            while pending and len(running) < n_jobs:
                h, folder, cmd = pending.pop(0)
                log = out / folder / "logs" / f"{stem}.txt"
                try:
                    fh = open(log, "w", encoding="utf-8")
                    fh.write("$ " + " ".join(cmd) + "\n")
                    fh.flush()
                    p = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL,
                                         **step_cli.child_group(n_jobs))
                except OSError as exc:  # a full disk, no process left: that host fails alone
                    results[h] = {"host": h, "folder": folder, "exit": 1, "seconds": 0.0,
                                  "error": f"{prog}: cannot start the host's process: "
                                           f"{exc.strerror or exc}"}
                    _say(f"[{time.monotonic() - t0:6.1f} s] {rules.printable(h)}: "
                         f"{results[h]['error']}")
                    continue
                running[p] = (h, folder, time.monotonic(), fh, log)
            time.sleep(0.05)
            for p in [p for p in running if p.poll() is not None]:
                h, folder, start, fh, log = running.pop(p)
                fh.close()
                secs = time.monotonic() - start
                rc = _exit_code(p.returncode)
                error = "" if rc == 0 else (
                    f"{prog}: the host's process was killed by signal {-p.returncode}"
                    if p.returncode < 0 else cross_host.last_sentence(log))
                results[h] = {"host": h, "folder": folder, "exit": rc,
                              "seconds": round(secs, 1), "error": error}
                _say(f"[{time.monotonic() - t0:6.1f} s] {rules.printable(h)}: "
                     + ("done" if rc == 0 else f"exit {rc}: {error}")
                     + f" ({secs:.1f} s; {len(results)} of {len(todo)} hosts)")
    except BaseException as exc:  # interrupted or terminated: no host's process outlives this
        step_cli.end_children(list(running), 10)
        for _, _, _, fh, _ in running.values():
            fh.close()
        if not isinstance(exc, KeyboardInterrupt):
            raise
        _say(f"{prog}: interrupted; the hosts that finished are in their folders")
        return None
    return [results[h] for h, _, _ in todo]


def scratch_hosts(out: Path) -> tuple[list[tuple[str, str]], str] | None:
    """(host, folder) of every host, and the run folder, when `out` is the scratch folder of a
    per-host pass (it holds hosts.json and no step-1 tables of its own); None otherwise."""
    out = Path(out)
    # a folder with one host's own results (a one-host run written over an earlier per-host
    # pass, whose step 1 failed) is not a per-host pass's folder
    if not (out / "hosts.json").is_file() or any(
            (out / f).exists() for f in ("skip_stats.json", "capture_info.json")):
        return None
    d = scratch.Scratch(out).json("hosts.json")
    try:
        pairs = [(str(h["host"]), str(h["folder"])) for h in d["hosts"]]
        run_dir = str(d.get("run_dir") or "")
    except (KeyError, TypeError, AttributeError):
        return None
    ok = [(h, f) for h, f in pairs if _SAFE_NAME.fullmatch(f) and (out / f).is_dir()]
    return (ok, run_dir) if ok else None


def maybe_fan_out_scratch(prog: str, script: str | Path, argv: list[str] | None, out: Path,
                          jobs: int | None, scheduler: str | None = None) -> int | None:
    """For the steps that read only the scratch folder (changes, trust, the draft): when `out`
    is a per-host pass's folder, run the script on each host's folder and summarise again; its
    exit code, or None when `out` is one host's folder."""
    found = scratch_hosts(out)
    if found is None:
        return None
    pairs, run_dir = found
    n_jobs = max(1, min(jobs or forked.cores(), len(pairs)))
    args = _without(list(sys.argv[1:] if argv is None else argv),
                    ("--out", "--jobs", "--scheduler"))
    _say(f"{prog}: {rules.printable(out)} holds a per-host pass of {len(pairs)} hosts; "
         f"running on each host's folder, {n_jobs} at a time")
    todo = [(h, f, [sys.executable, str(script), *args, f"--out={Path(out) / f}"])
            for h, f in pairs]
    return _run_and_summarise(prog, Path(script).stem, todo, Path(out), n_jobs, run_dir,
                              scheduler)


def maybe_fan_out(prog: str, script: str | Path, argv: list[str] | None, capture, run, host,
                  out: Path, jobs: int | None, scheduler: str | None = None) -> int | None:
    """The per-host pass when `capture` leads to a run of several hosts and no host was named
    (its exit code); None when it leads to one capture (the script goes on as usual). A path
    that leads nowhere is left to the script's own resolve and its sentence."""
    from tracekit import capture_inputs
    try:
        files = capture_inputs.run_hosts(capture, run=run, host=host)
    except capture_inputs.CaptureError:
        return None
    if files is None:
        return None
    for n in files.notes:
        print(f"{prog}: {rules.printable(n)}", file=sys.stderr)
    args = list(sys.argv[1:] if argv is None else argv)
    return fan_out(prog, script, args, files, out, jobs, scheduler)
