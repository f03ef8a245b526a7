"""A long table written by a forked child while the step goes on with its other tables."""

from __future__ import annotations

import json
import os
import sys


class Forked:
    """`write(*args)`, which returns its row count (or any value JSON holds), run in a forked
    child: it sees the data as they are at the fork (copy-on-write) while this process goes on
    (a second core); `wait()` gives that value or raises OSError with the child's reason;
    `abort()` stops the child (this process failed or was interrupted). With `here` (a table
    too short for a fork to pay, or no os.fork) it is written in this process at once. `what`
    names the table in the reason."""

    def __init__(self, write, *args, here: bool = False, what: str = "the table"):
        self.pid = None
        self.n = None
        self.what = what
        if here or not hasattr(os, "fork"):
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
                said = json.dumps(write(*args)).encode()
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
        text = b"".join(chunks).decode("utf-8", "replace")
        try:
            if os.waitstatus_to_exitcode(status) != 0 or text.startswith("!"):
                raise ValueError(text)
            self.n = json.loads(text)
        except ValueError:
            raise OSError(text[1:] if text.startswith("!") else
                          f"the process writing {self.what} ended with status {status}") from None
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
