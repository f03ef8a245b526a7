"""The per-host pass on a Dask cluster (cluster_hosts.py): `--scheduler local` starts a real
LocalCluster (worker processes, real serialization); its tables equal the local-process path's
byte for byte (the hosts' run times aside); a worker killed under a host's task fails that host
alone with a sentence after one retry, the others finish; a scheduler that cannot be reached
is one sentence."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from capgen.generate import generate_hosts
from capgen.scenarios import SCENARIOS
from conftest import REPO, ROOT_SCRIPTS, SIBLING_SCRIPTS

pytest.importorskip("distributed")


def run(script: Path, *args, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-P", str(script), *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def hosts_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("dask")
    sc = dataclasses.replace(SCENARIOS["nvidia-device-bound"], gpus=2, steps=3)
    return generate_hosts(sc, root / "cap", hosts=3, slow_host=1, slow_factor=1.5)[0].run_dir


def tree(folder: Path) -> dict:
    """Every file's digest as bench/golden.py takes it: what moves between two runs of the same
    code masked (run times, the folder's own path), logs and hand-offs left out."""
    sys.path.insert(0, str(REPO / "bench"))
    import golden
    return golden.digests(folder, folder)


def test_the_whole_job_on_a_local_cluster_equals_the_local_processes(hosts_run, tmp_path):
    """investigate.py over three hosts, by local processes and as Dask tasks: the same files,
    byte for byte (the hosts' run times aside); progress names each host as it ends."""
    a = run(ROOT_SCRIPTS / "investigate.py", hosts_run, "--out", tmp_path / "local",
            "--no-xprof")
    b = run(ROOT_SCRIPTS / "investigate.py", hosts_run, "--out", tmp_path / "dask",
            "--no-xprof", "--scheduler", "local")
    assert a.returncode == 0 and b.returncode == 0, a.stderr[-2000:] + b.stderr[-2000:]
    assert "3 hosts as tasks on the Dask cluster (a LocalCluster of" in b.stderr
    assert "3 of 3 hosts" in b.stderr
    ta, tb = tree(tmp_path / "local"), tree(tmp_path / "dask")
    assert sorted(ta) == sorted(tb) and len(ta) > 60
    differ = [k for k in ta if ta[k] != tb[k]]
    assert differ == [], differ[:5]


def test_a_worker_killed_under_a_host_fails_that_host_alone(hosts_run, tmp_path):
    """A bundle whose step 1 kills the worker that runs gen-host-1's task (as a lost node
    would): the task is tried twice (one retry), then that host fails with a sentence; the
    other hosts finish and the summary names the failed one; nothing of it half-written."""
    bundle = tmp_path / "bundle"
    for d in ("scripts", "analyzing-jax-launch-overhead"):
        shutil.copytree(REPO / d, bundle / d, ignore=shutil.ignore_patterns("__pycache__"))
    real = bundle / "analyzing-jax-launch-overhead" / "scripts" / "skip_stats.py"
    text = real.read_text(encoding="utf-8")
    real.write_text(text.replace(
        "from __future__ import annotations\n",
        "from __future__ import annotations\n"
        "import os as _os, signal as _signal, sys as _sys\n"
        "if '--host=gen-host-1' in _sys.argv:  # the worker process that runs this task\n"
        "    _os.kill(_os.getppid(), _signal.SIGKILL)\n"
        "    raise SystemExit(1)\n", 1), encoding="utf-8")
    p = run(real, hosts_run, "--out", tmp_path / "o", "--scheduler", "local", timeout=300)
    assert p.returncode == 1, p.stderr[-2000:]
    assert "gen-host-1: exit 1: skip_stats: the host's task failed on the cluster after 2 " \
           "tries" in p.stderr
    summary = json.loads((tmp_path / "o" / "hosts.json").read_text())
    exits = {h["host"]: h["exit"] for h in summary["hosts"]}
    assert exits == {"gen-host-0": 0, "gen-host-1": 1, "gen-host-2": 0}
    assert not (tmp_path / "o" / "gen-host-1" / "steps.csv").exists()
    assert (tmp_path / "o" / "gen-host-0" / "steps.csv").is_file()
    assert not [q for q in (tmp_path / "o").rglob(".*") if q.name.startswith(".out-")]


def test_a_scheduler_that_cannot_be_reached_is_one_sentence(hosts_run, tmp_path):
    p = run(SIBLING_SCRIPTS / "skip_stats.py", hosts_run, "--out", tmp_path / "o",
            "--scheduler", "tcp://127.0.0.1:9", timeout=120)
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("skip_stats: cannot reach")]
    assert p.returncode == 1 and len(lines) == 1, p.stderr[-2000:]
    assert "Traceback" not in p.stderr


class _Listener:
    """A loopback server: `silent` accepts and never writes; `http` answers any bytes with an
    HTTP error, as a dashboard does. Stopped by the test."""

    def __init__(self, kind: str):
        import socket
        import threading
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.kind, self.conns = kind, []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            if self.kind == "http":
                try:
                    conn.settimeout(5)
                    conn.recv(1024)
                    conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                except OSError:
                    pass

    def close(self):
        for c in self.conns:
            c.close()
        self.sock.close()


@pytest.mark.parametrize("kind", ["silent", "http"])
def test_a_listener_that_is_not_a_scheduler_is_one_sentence_within_the_deadline(
        kind, monkeypatch):
    """Something listens but does not speak Dask (silent, or an HTTP server that answers):
    one sentence within the handshake's deadline, never a hang or a giant allocation."""
    import time

    from tracekit import cluster_hosts
    from tracekit.base import StepError
    server = _Listener(kind)
    monkeypatch.setattr(cluster_hosts, "HANDSHAKE_S", 2.0)
    try:
        t0 = time.monotonic()
        with pytest.raises(StepError, match="did not answer within 2 s|not as a Dask"):
            cluster_hosts._client(f"tcp://127.0.0.1:{server.port}", 1)
        assert time.monotonic() - t0 < 10
    finally:
        server.close()


@pytest.mark.parametrize("address", ["ucx://127.0.0.1:8786", "tls://127.0.0.1:8786",
                                     "tcp://127.0.0.1:99999", "tcp://127.0.0.1:x", "tcp://"])
def test_a_scheduler_address_of_another_kind_is_one_sentence(address):
    from tracekit import cluster_hosts
    from tracekit.base import StepError
    with pytest.raises(StepError, match="is not a tcp://host:port address"):
        cluster_hosts._client(address, 1)


def test_a_real_scheduler_passes_the_handshake_probe():
    """The probe's reading of the protocol, against distributed's own scheduler on loopback."""
    from distributed import LocalCluster

    from tracekit import cluster_hosts
    with LocalCluster(n_workers=0, processes=False, protocol="tcp://", dashboard_address=None,
                      host="127.0.0.1", silence_logs=50) as cluster:
        address = cluster.scheduler_address
        assert address.startswith("tcp://127.0.0.1:")
        cluster_hosts._probe(address)  # no StepError
        client, _ = cluster_hosts._client(address, 1)
        client.close()


def test_terminated_on_a_local_cluster_leaves_no_process_running(hosts_run, tmp_path):
    """investigate.py --scheduler local, SIGTERM to it alone while the hosts' passes run as
    tasks: it exits 143 and no host's pass or step outlives it (on the way out the command
    ends each pass's process group itself, by the id its task left beside the log, and waits
    for it, before it closes the LocalCluster; no `.pid` file is left)."""
    from test_per_host import _running_for, _terminated_midway
    out = tmp_path / "out"
    rc = _terminated_midway([sys.executable, "-P", str(ROOT_SCRIPTS / "investigate.py"),
                             str(hosts_run), "--out", str(out), "--no-xprof", "--scheduler",
                             "local"], out)
    assert rc == 143
    assert not _running_for(out)
    assert not list(out.glob("**/logs/*.pid"))
