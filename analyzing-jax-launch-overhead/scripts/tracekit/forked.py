"""Work done by a forked child while the step goes on: a long table (Forked), or a share of the
step's work that trades values with the step as it goes (Exchange)."""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import pickle
import signal
import sys

from tracekit import base

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


FRAME_LENGTH = 8  # bytes of a frame's length on a pipe
PIPE_BYTES = 1 << 20  # Linux's most for a process without privileges (pipe-max-size)


def send_frame(fh, body: bytes) -> None:
    """One frame on a pipe between a process and its forked child: its length, then the body."""
    fh.write(len(body).to_bytes(FRAME_LENGTH, "little"))
    fh.write(body)
    fh.flush()


def received_frame(fh) -> bytes | None:
    """The next frame from the pipe; None where it ends before one is whole."""
    n = fh.read(FRAME_LENGTH)
    if len(n) < FRAME_LENGTH:
        return None
    body = fh.read(int.from_bytes(n, "little"))
    return body if len(body) == int.from_bytes(n, "little") else None


class Exchange:
    """The one way this bundle runs work beside a process: a generator, `work(*args)`, run by
    a forked child (with `here`, or where no core is free for one, in this process): each value
    it yields is `get()` here, and what this process `put()`s is the value of its yield; its
    return value is the last `get()`. A child starts at once and runs to its first yield
    meanwhile; here, each `get()` runs the generator to its next yield. Values cross the pipes
    pickled (bytes, as marshal makes them, at the cost of a copy). A child's StepError (the
    input cannot be used) is raised here as it was; another exception is an OSError with its
    type and words. `abort()` stops the child; a stop (SIGTERM, SIGINT) is this process's to
    act on, never the child's. `what` names the work in the reason; `memory`: forked even where
    no core is free (the work's memory, not its time, is the reason)."""

    def __init__(self, work, *args, here: bool = False, what: str = "the work",
                 memory: bool = False):
        self.what = what
        self.pid = None
        self.given = None
        if here or not (can_fork() or memory and hasattr(os, "fork")):
            self.gen = work(*args)
            self.started = False
            return
        back_r, back_w = os.pipe()
        to_r, to_w = os.pipe()
        with contextlib.suppress(AttributeError, OSError):  # not Linux, or past its limit
            # what the child says comes back through it: fewer switches between the two
            fcntl.fcntl(back_w, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        sys.stdout.flush()
        sys.stderr.flush()
        # no stop reaches the child before it has its own handlers (_exchange_child)
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
        pid = None
        try:
            pid = os.fork()
            if pid == 0:
                os.close(back_r)
                os.close(to_w)
                _exchange_child(work, args, os.fdopen(back_w, "wb"), os.fdopen(to_r, "rb"),
                                mask)
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            os.close(back_w)
            os.close(to_r)
            self.pid, self.back, self.to = pid, os.fdopen(back_r, "rb"), os.fdopen(to_w, "wb")
            # the child starts on this word: one forked as a stop (SIGTERM, SIGINT) came, before
            # it was this object's to stop, does nothing and ends when the pipes close below
            send_frame(self.to, b"")
        except BaseException:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            if self.pid is not None:
                self.abort()
            else:
                for fd in (back_r, back_w, to_r, to_w):
                    with contextlib.suppress(OSError):
                        os.close(fd)
                if pid:
                    os.kill(pid, 15)
                    os.waitpid(pid, 0)
            raise

    def put(self, value) -> None:
        """The value of the generator's current yield."""
        if self.pid is None:
            self.given = value
            return
        with contextlib.suppress(OSError):  # the child has ended: get() says why
            send_frame(self.to, pickle.dumps(value, pickle.HIGHEST_PROTOCOL))

    def get(self):
        """The generator's next yielded value, or its return value."""
        if self.pid is None:
            try:
                if self.started:
                    return self.gen.send(self.given)
                self.started = True
                return next(self.gen)
            except StopIteration as end:
                return end.value
        said = received_frame(self.back)
        kind, value = pickle.loads(said) if said else ("ended", None)
        if kind == "yield":
            return value
        self._reap()
        if kind == "return":
            return value
        if kind == "refused":
            raise value
        raise OSError(value if kind == "error" else
                      f"the process for {self.what} ended without its result (killed, or "
                      "out of memory)")

    def _reap(self) -> None:
        for fh in (self.back, self.to):
            with contextlib.suppress(OSError):
                fh.close()
        with contextlib.suppress(OSError):
            os.waitpid(self.pid, 0)
        self.pid = None

    def abort(self) -> None:
        """Stop the child and reap it."""
        if self.pid is None:
            self.gen = None
            return
        with contextlib.suppress(OSError):
            os.kill(self.pid, 15)
        self._reap()


def _exchange_child(work, args, out, inp, mask) -> None:
    """Exchange's child: runs the generator, saying each yield, its return or its exception as
    one frame, reading each answer; ends when the generator does or the parent has gone.
    Stopped by the parent (abort) without a word; an interrupt is the parent's to say."""
    code = 1
    base.PROGRESS_EVERY_S = math.inf  # the parent says what the step is doing
    try:
        with contextlib.suppress(ValueError):  # forked from a non-main thread: as inherited
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        if received_frame(inp) is None:
            return  # the parent stopped before it held this child: nothing to do
        try:
            gen = work(*args)
            said = ("yield", next(gen))
            while True:
                send_frame(out, pickle.dumps(said, pickle.HIGHEST_PROTOCOL))
                answer = received_frame(inp)
                if answer is None:
                    break  # the parent went on without it, or ended
                said = ("yield", gen.send(pickle.loads(answer)))
        except StopIteration as end:
            send_frame(out, pickle.dumps(("return", end.value), pickle.HIGHEST_PROTOCOL))
        except base.StepError as exc:  # the parent raises it as it is
            send_frame(out, pickle.dumps(("refused", exc), pickle.HIGHEST_PROTOCOL))
        except BaseException as exc:  # noqa: BLE001 - said to the parent, which raises
            send_frame(out, pickle.dumps(("error", f"{type(exc).__name__}: {exc}"[:2000]),
                                         pickle.HIGHEST_PROTOCOL))
        code = 0
    except BaseException:  # noqa: BLE001, S110 - the parent, seeing no frame, says so
        pass
    finally:
        os._exit(code)


def _once(write, args):
    """A generator that yields nothing: write(*args) is its return value (Forked)."""
    return write(*args)
    yield  # noqa: B901 - makes this a generator, for Exchange


class Forked(Exchange):
    """`write(*args)`, which returns its row count (or any value pickle holds), run in a forked
    child: it sees the data as they are at the fork (copy-on-write) while this process goes on
    (a second core); `wait()` gives that value or raises as Exchange does (an OSError with the
    child's reason); `abort()` stops the child (this process failed or was interrupted). With
    `here` (a table too short for a fork to pay), no os.fork, or a single core for this process
    (`cores`: no core for the child) it is written in this process at once. `what` names the
    table in the reason."""

    def __init__(self, write, *args, here: bool = False, what: str = "the table"):
        super().__init__(_once, write, args, here=here, what=f"writing {what}")
        self.n = self.get() if self.pid is None else None

    def wait(self):
        if self.pid is not None:
            self.n = self.get()
        return self.n
