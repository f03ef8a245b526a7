"""The per-host pass on a Dask cluster: `--scheduler ADDRESS` (a running scheduler, e.g.
tcp://head:8786) or `--scheduler local` (a LocalCluster started on this machine).

Each host's pass is one task: the same command the local pass starts (per_host.fan_out), run as
a process on a worker, writing that host's scratch folder OUT/<host>/ itself. So the captures and
OUT must be paths every worker sees (a shared file system), and the workers must have this
bundle and its Python at the same paths. Only each host's exit code and time come back over the
network; the cross-host reduce (cross_host) then reads the hosts' summary tables from OUT, its
memory bounded by the hosts' summaries, never their captures.

A task whose worker fails or is lost is retried once on another worker (on a LocalCluster; a
running scheduler's own `distributed.scheduler.allowed-failures` decides how often a lost
worker's task runs again, 3 by default); then that host fails alone, with a sentence, and the
other hosts go on. Progress on stderr: each host as it
ends (done / total), failures named as they happen.

Needs the `distributed` package (the root skill's requirements.txt pins it); without it the
option is refused with the install line (exit 3). Without `--scheduler` nothing here is loaded.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tracekit.base import MissingPackage, StepError

INSTALL = "pip install distributed==2026.8.0 (the root skill's requirements.txt pins it)"
# How often a task is run again after its worker failed or was lost: once.
RETRIES = 1
# A Dask scheduler writes its handshake as soon as it accepts a connection (distributed's
# comm/core.py: the listener writes its info, then reads the peer's); the first 8 bytes are
# the message's length. Something that listens but stays silent this long (an HTTP server,
# such as the dashboard beside the scheduler, waits for a request) is not a scheduler.
HANDSHAKE_S = 15.0
MAX_HANDSHAKE_BYTES = 1 << 20
DEFAULT_PORT = 8786


def _host_port(scheduler: str) -> tuple[str, int]:
    """tcp://host:port (or host:port; the port defaults to Dask's) -> (host, port); a
    StepError for any other scheme (the command line takes no TLS or UCX settings)."""
    scheme, sep, rest = scheduler.partition("://")
    if not sep:
        scheme, rest = "tcp", scheduler
    if scheme != "tcp" or not rest or "/" in rest:
        raise StepError(f"--scheduler {scheduler} is not a tcp://host:port address (or "
                        "'local'); only plain TCP schedulers can be reached from here")
    host, port = rest, str(DEFAULT_PORT)
    if rest.startswith("["):  # [::1]:8786
        host, _, tail = rest[1:].partition("]")
        if tail:
            port = tail.lstrip(":")
    elif rest.count(":") == 1:
        host, port = rest.split(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise StepError(f"--scheduler {scheduler} is not a tcp://host:port address with a "
                        "port from 1 to 65535")
    return host, int(port)


def _probe(scheduler: str) -> None:
    """The address answers as a Dask scheduler does, within HANDSHAKE_S: a StepError in one
    sentence where nothing listens, where it stays silent or where it says something else."""
    import socket
    import struct
    host, port = _host_port(scheduler)
    try:
        with socket.create_connection((host, port), timeout=HANDSHAKE_S) as sock:
            sock.settimeout(HANDSHAKE_S)
            head = b""
            while len(head) < 8:
                got = sock.recv(8 - len(head))
                if not got:
                    break
                head += got
    except TimeoutError:
        raise StepError(f"the Dask scheduler at {scheduler} did not answer within "
                        f"{HANDSHAKE_S:.0f} s: something listens there that is not a Dask "
                        "scheduler (its dashboard?), or it is stuck") from None
    except OSError as exc:
        raise StepError(f"cannot reach the Dask scheduler at {scheduler}: "
                        f"{exc.strerror or exc}") from None
    size = struct.unpack("<Q", head)[0] if len(head) == 8 else 0
    if not 0 < size <= MAX_HANDSHAKE_BYTES:
        raise StepError(f"{scheduler} answers, but not as a Dask scheduler does (its first "
                        "bytes are not a handshake); give the scheduler's own address "
                        "(tcp://host:8786)")


def run_host(cmd: list[str], log: str) -> dict:
    """One host's pass, as a task on a worker: the command, its output to the host's log, in a
    process group of its own whose id waits beside the log while it runs (`<log>.pid`: on a
    LocalCluster the command ends the group itself on its way out, `end_passes`)."""
    start = time.monotonic()
    pid_file = Path(log).with_suffix(".pid")
    with open(log, "w", encoding="utf-8") as fh:
        fh.write("$ " + " ".join(cmd) + "\n")
        fh.flush()
        p = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True)
        try:
            pid_file.write_text(str(p.pid))
            rc = p.wait()
        finally:
            pid_file.unlink(missing_ok=True)
    return {"rc": rc, "seconds": time.monotonic() - start}


# How long the command waits for a host's pass it ended (SIGTERM) before it kills its group
END_WAIT_S = 30.0


def end_passes(out: Path, logs: list[Path]) -> None:
    """On a LocalCluster, on the way out: each host's pass still running (its `.pid` beside
    its log, a process whose command line names `out`) gets SIGTERM (it ends its own steps),
    then SIGKILL for its group where it outlives END_WAIT_S; returns once each has ended."""
    groups = []
    for log in logs:
        try:
            pid = int(log.with_suffix(".pid").read_text())
            if pid > 1 and str(out).encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                os.killpg(pid, signal.SIGTERM)
                groups.append(pid)
        except (OSError, ValueError):
            continue
    deadline = time.monotonic() + END_WAIT_S
    while any(map(_running, groups)) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in filter(_running, groups):
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)


def _running(pid: int) -> bool:
    """Whether a process runs (not ended, not a zombie waiting for its reaper)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _client(scheduler: str, n_jobs: int):
    try:
        import cloudpickle
        import dask
        from distributed import Client, LocalCluster
    except ImportError as exc:
        raise MissingPackage(f"--scheduler needs the distributed package, which is not "
                             f"installed ({exc.name}): {INSTALL}") from exc
    # the task is pickled whole: a worker need not import this module
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    # a task whose worker dies is run again at most RETRIES times, then fails its host
    dask.config.set({"distributed.scheduler.allowed-failures": RETRIES})
    try:
        if scheduler == "local":
            cluster = LocalCluster(n_workers=n_jobs, threads_per_worker=1, processes=True,
                                   dashboard_address=None, silence_logs=50)
            return Client(cluster), cluster
        _probe(scheduler)
        return Client(scheduler, timeout="30s"), None
    except (OSError, TimeoutError, ValueError, TypeError) as exc:
        raise StepError(f"cannot reach the Dask scheduler at {scheduler}: {exc}") from exc


def run_all(prog: str, stem: str, todo: list, out: Path, n_jobs: int, scheduler: str,
            say, last_sentence) -> list[dict] | None:
    """Each (host, folder, command) of `todo` as a task on the cluster; the results in `todo`'s
    order (per_host's shape), None when interrupted. `say` prints a progress line,
    `last_sentence(log)` is a failed host's sentence."""
    client, cluster = _client(scheduler, n_jobs)
    t0 = time.monotonic()
    results: dict[str, dict] = {}
    try:
        from distributed import as_completed
        futures = {}
        for h, folder, cmd in todo:
            log = str(Path(out) / folder / "logs" / f"{stem}.txt")
            fut = client.submit(run_host, cmd, log, key=f"{stem}-{folder}", pure=False,
                                retries=RETRIES)
            futures[fut] = (h, folder)
        say(f"{prog}: {len(todo)} hosts as tasks on the Dask cluster "
            f"({'a LocalCluster of ' + str(n_jobs) + ' workers' if cluster else scheduler})")
        for fut in as_completed(futures):
            h, folder = futures[fut]
            try:
                r = fut.result()
                rc = 128 - r["rc"] if r["rc"] < 0 else r["rc"]
                error = "" if rc == 0 else last_sentence(Path(out) / folder / "logs" /
                                                         f"{stem}.txt")
                secs = r["seconds"]
            except Exception as exc:  # noqa: BLE001  (a lost worker, twice: this host fails)
                rc, secs = 1, 0.0
                error = (f"{prog}: the host's task failed on the cluster after "
                         f"{RETRIES + 1} tries: {type(exc).__name__}: {str(exc)[:200]}")
            results[h] = {"host": h, "folder": folder, "exit": rc, "seconds": round(secs, 1),
                          "error": error}
            say(f"[{time.monotonic() - t0:6.1f} s] {h}: "
                + ("done" if rc == 0 else f"exit {rc}: {error}")
                + f" ({secs:.1f} s; {len(results)} of {len(todo)} hosts)")
    except KeyboardInterrupt:
        say(f"{prog}: interrupted; the hosts that finished are in their folders")
        return None
    finally:
        if cluster is not None:  # the passes on this machine end before their workers
            end_passes(Path(out), [Path(out) / folder / "logs" / f"{stem}.txt"
                                   for _, folder, _ in todo])
        client.close()
        if cluster is not None:
            cluster.close()
    return [results[h] for h, _, _ in todo]
