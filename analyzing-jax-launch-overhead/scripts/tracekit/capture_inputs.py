"""Find the capture files a user means (standard library only).

Accepted everywhere in this bundle:
- a file: ``<host>.xplane.pb``, ``<host>.trace.json.gz`` or ``<host>.trace.json``;
- a run folder: ``.../plugins/profile/<run>/`` holding one host's files;
- a log folder: one with ``plugins/profile/<run>/`` below it (or the ``plugins/profile`` folder
  itself). The newest run is taken, as XProf does (run names are timestamps
  ``YYYY_MM_DD_HH_MM_SS``; other names sort after them by name), and the choice is said in
  ``notes``; ``run=`` picks another.
A run with several hosts is not guessed at by `resolve`: the error lists the hosts and says to pass
``host=`` (``--host`` on the command line) or the file itself. `run_hosts` names the hosts of such a
run, for the per-host pass (`per_host.py`) every entry script starts when it is given one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from tracekit.base import StepError

XPLANE_SUFFIX = ".xplane.pb"
TRACE_SUFFIXES = (".trace.json.gz", ".trace.json")
RUN_NAME_RE = re.compile(r"^\d{4}_\d{2}_\d{2}_\d{2}_\d{2}_\d{2}$")


class CaptureError(StepError):
    """The path does not lead to one capture; the message says what to pass instead (exit 1)."""


@dataclass
class CaptureFiles:
    run_dir: Path
    host: str
    xplane: Path | None
    trace: Path | None
    hosts: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class Capture:
    """One capture as the steps of one process share it: its files, and each file read once.
    `trace` is loaded on first use (trace_reader.load_trace); readers of other files keep what
    they decoded in `cache` (the root skill's xplane reader keeps its Space there), so no step
    parses a file another step of the same process has parsed."""

    def __init__(self, files: CaptureFiles):
        self.files = files
        self.cache: dict = {}
        self.loads: dict[str, int] = {}  # file kind -> times read (a check for tests)

    @property
    def trace(self):
        from tracekit import trace_reader
        if "trace" not in self.cache and self.files.trace is None:
            raise CaptureError(f"no <host>.trace.json.gz for host {self.files.host} in "
                               f"{self.files.run_dir}; jax.profiler writes it beside the "
                               "xplane.pb")
        return self.cached("trace", lambda: trace_reader.load_trace(self.files.trace))

    def cached(self, key: str, load):
        """The value cached under `key`, computed once by `load()`."""
        if key not in self.cache:
            self.cache[key] = load()
            self.loads[key] = self.loads.get(key, 0) + 1
        return self.cache[key]


def open_capture(path, run: str | None = None, host: str | None = None) -> Capture:
    return Capture(resolve(path, run=run, host=host))


def host_of(path: Path) -> str | None:
    """The host part of a capture file name, or None when the name is not a capture file."""
    name = path.name
    return next((name[: -len(s)] for s in (XPLANE_SUFFIX, *TRACE_SUFFIXES)
                 if name.endswith(s) and len(name) > len(s)), None)


def _listing(folder: Path) -> list[Path]:
    """A folder's entries, sorted; a folder that cannot be listed is a CaptureError."""
    try:
        return sorted(folder.iterdir())
    except OSError as exc:
        raise CaptureError(f"cannot list {folder}: {exc.strerror or exc}") from exc


def _hosts_in(run_dir: Path) -> dict[str, dict[str, Path]]:
    hosts: dict[str, dict[str, Path]] = {}
    for child in _listing(run_dir):
        if not child.is_file():  # folders, FIFOs, devices and dangling links named like files
            continue
        host = host_of(child)
        if host is None:
            continue
        kind = "xplane" if child.name.endswith(XPLANE_SUFFIX) else "trace"
        # Prefer the gzip trace when both a .json.gz and a .json exist.
        if kind == "trace" and "trace" in hosts.get(host, {}) and child.name.endswith(".json"):
            continue
        hosts.setdefault(host, {})[kind] = child
    return hosts


def _runs_under(folder: Path) -> list[Path]:
    for base in (folder / "plugins" / "profile", folder):
        if base.is_dir() and (runs := [d for d in _listing(base) if d.is_dir() and _hosts_in(d)]):
            return sorted(runs, key=lambda r: (0 if RUN_NAME_RE.match(r.name) else 1, r.name))
    return []


def resolve(path, run: str | None = None, host: str | None = None) -> CaptureFiles:
    """Resolve a user-given path to one host's capture files (either file may be missing)."""
    return _resolve_safely(path, run, host, several=False)


def run_hosts(path, run: str | None = None, host: str | None = None) -> CaptureFiles | None:
    """The run's files when `path` leads to a run of several hosts and no host was named (`host`
    empty, `hosts` every host name); None when it leads to one capture (a file, a one-host run,
    or a host named). A path that leads nowhere is the same CaptureError as `resolve`'s."""
    if host is not None:
        return None
    files = _resolve_safely(path, run, None, several=True)
    return files if not files.host else None


def _resolve_safely(path, run, host, several: bool) -> CaptureFiles:
    p = Path(path)
    notes: list[str] = []
    try:
        return _resolve(p, notes, run, host, several)
    except RecursionError as exc:  # a folder tree too deep to walk (links into itself)
        raise CaptureError(f"{p} leads into folders nested too deep to search") from exc
    except OSError as exc:  # a path that cannot even be looked at (permissions, a loop)
        raise CaptureError(f"cannot look at {p}: {exc.strerror or exc}") from exc


def _resolve(p: Path, notes: list, run: str | None, host: str | None,
             several: bool = False) -> CaptureFiles:
    if not p.exists():
        if p.is_symlink():
            raise CaptureError(f"{p} is a symbolic link that leads nowhere (a loop, or a "
                               "missing target); pass the capture file or folder itself")
        raise CaptureError(f"{p} does not exist; pass a .xplane.pb, a .trace.json.gz, "
                           "or the folder XProf wrote them in")
    if p.is_dir() and host_of(p) is not None:
        raise CaptureError(f"{p} is a folder, though named like a capture file; pass the "
                           "file itself, or the run folder that holds it")
    if p.is_file():
        file_host = host_of(p)
        if file_host is None:
            raise CaptureError(f"{p.name} is not a capture file name; expected <host>.xplane.pb, "
                               "<host>.trace.json.gz or <host>.trace.json")
        files = _hosts_in(p.parent).get(file_host, {})
        kind = "xplane" if p.name.endswith(XPLANE_SUFFIX) else "trace"
        files[kind] = p
        return CaptureFiles(p.parent, file_host, files.get("xplane"), files.get("trace"),
                            sorted(_hosts_in(p.parent)), notes)
    if not p.is_dir():
        raise CaptureError(f"{p} is neither a file nor a folder (a pipe or a device?); pass "
                           "the capture file or folder")
    hosts = _hosts_in(p)
    if hosts:
        run_dir = p
        if run is not None and run != p.name:
            raise CaptureError(f"{p} is a run folder ({p.name}); --run applies to a log folder")
    else:
        runs = _runs_under(p)
        if not runs:
            raise CaptureError(f"no capture under {p}: expected <host>.xplane.pb or "
                               "<host>.trace.json.gz in it or in plugins/profile/<run>/")
        names = [r.name for r in runs]
        if run is None:
            run_dir = runs[-1]
            if len(runs) > 1:
                notes.append(f"{p} holds {len(runs)} runs ({', '.join(names)}); took the newest, "
                             f"{run_dir.name}; pass --run NAME to pick another")
        else:
            chosen = [r for r in runs if r.name == run]
            if not chosen:
                raise CaptureError(f"no run named {run!r} under {p}; runs: {', '.join(names)}")
            run_dir = chosen[0]
        hosts = _hosts_in(run_dir)
    host_names = sorted(hosts)
    if host is None:
        if len(host_names) > 1:
            if several:
                return CaptureFiles(run_dir, "", None, None, host_names, notes)
            raise CaptureError(
                f"run {run_dir.name} holds captures from {len(host_names)} hosts "
                f"({', '.join(host_names)}); pass one host's file or --host NAME")
        host = host_names[0]
    elif host not in hosts:
        raise CaptureError(f"no host {host!r} in {run_dir}; hosts: {', '.join(host_names)}")
    files = hosts[host]
    return CaptureFiles(run_dir, host, files.get("xplane"), files.get("trace"), host_names, notes)
