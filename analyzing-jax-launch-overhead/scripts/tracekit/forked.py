"""A long table written by a forked child while the step goes on with its other tables."""

from __future__ import annotations

import os
import pickle
import sys

# The cores a process of this bundle may use, where the process that started it runs others
# beside it (a job's steps: among those running once it has started; the hosts of a run): its
# share of the starter's, an integer. A job
# at five times the seed's size on two cores, its two steps each writing their long table in a
# forked child beside the step and XProf's conversion: 15.8-16.5 s; each step writing it
# itself (no core was free for a child, whose copy-on-write faults cost 1 to 2.5 s of system
# time): 14.6-14.7 s.
CORES_ENV = "JAXTRACE_CORES"


def cores() -> int:
    """The cores this process may use: its share where its starter said it (CORES_ENV), else
    the cores it may run on."""
    said = os.environ.get(CORES_ENV, "")
    if said.isascii() and said.isdigit() and int(said) > 0:
        return int(said)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def can_fork() -> bool:
    """Whether a Forked would fork: os.fork exists and this process may use two cores."""
    return hasattr(os, "fork") and cores() >= 2


def share(at_once: int) -> int:
    """The cores of a process started beside at_once - 1 others like it: its share of these
    (step_cli.child_group says it to the process, CORES_ENV)."""
    return max(1, cores() // max(1, at_once))


class Forked:
    """`write(*args)`, which returns its row count (or any value pickle holds), run in a forked
    child: it sees the data as they are at the fork (copy-on-write) while this process goes on
    (a second core); `wait()` gives that value or raises OSError with the child's reason;
    `abort()` stops the child (this process failed or was interrupted). With `here` (a table
    too short for a fork to pay), no os.fork, or a single core for this process (`cores`: no
    core for the child) it is written in this process at once. `what` names the table in the
    reason."""

    def __init__(self, write, *args, here: bool = False, what: str = "the table"):
        self.pid = None
        self.n = None
        self.what = what
        if here or not can_fork():
            self.n = write(*args)
            return
        r, w = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child: writes, reports its count (or why not) and exits at once
            code = 1
            try:
                os.close(r)
                said = pickle.dumps(write(*args), pickle.HIGHEST_PROTOCOL)
                while said:  # a pipe takes a large value a part at a time
                    said = said[os.write(w, said):]
                code = 0
            except BaseException as exc:  # noqa: BLE001 - said to the parent, which raises
                try:
                    os.write(w, f"!{type(exc).__name__}: {exc}"[:2000].encode("utf-8",
                                                                           "replace"))
                except BaseException:  # noqa: BLE001, S110 - nothing left to tell
                    pass
            finally:
                os._exit(code)
        os.close(w)
        self.pid, self.fd = pid, r

    def wait(self) -> int:
        if self.pid is None:
            return self.n
        chunks = []
        while True:
            chunk = os.read(self.fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
        os.close(self.fd)
        _, status = os.waitpid(self.pid, 0)
        self.pid = None
        said = b"".join(chunks)
        if said.startswith(b"!"):  # a pickle starts with its protocol's byte, never "!"
            raise OSError(said[1:].decode("utf-8", "replace"))
        try:
            if os.waitstatus_to_exitcode(status) != 0:
                raise ValueError
            self.n = pickle.loads(said)
        except (ValueError, pickle.UnpicklingError, EOFError):
            raise OSError(f"the process writing {self.what} ended with status {status}") \
                from None
        return self.n

    def abort(self) -> None:
        """Stop the child and reap it."""
        if self.pid is None:
            return
        try:
            os.kill(self.pid, 15)
        except OSError:
            pass
        try:
            os.waitpid(self.pid, 0)
            os.close(self.fd)
        except OSError:
            pass
        self.pid = None
