"""Grade a math answer against a gold answer with math-verify, under a hard timeout, from any thread.

math-verify 0.9 times itself out with ``signal.alarm``, which only works on the main thread, and its work
can hang in C code (e.g. ``9^{9^{9^{9}}}``) where no signal or thread can stop it. So grading runs in one
persistent worker *subprocess* per process (:mod:`._grade_worker`, JSON lines over pipes). A reply that does
not come before the deadline gets the worker killed and reaped, the answer graded incorrect with status
``"timeout"``, and a fresh worker started on the next call. This works from worker threads and inside daemonic
``multiprocessing`` workers (which may not start multiprocessing children, but may start subprocesses).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["MAX_ANSWER_CHARS", "GradeResult", "Grader", "grade", "shutdown"]

logger = logging.getLogger(__name__)

#: Answers longer than this are graded incorrect without parsing (status ``"too_long"``): no real final
#: answer is this long, and parsing megabytes of LaTeX would only burn the timeout.
MAX_ANSWER_CHARS = 4000

#: How long a fresh worker may take to import math-verify and say it is ready.
STARTUP_TIMEOUT = 60.0

GradeStatus = Literal["ok", "timeout", "error", "too_long", "empty"]


@dataclass(frozen=True)
class GradeResult:
    """The outcome of one grading call. ``correct`` is False whenever ``status`` is not ``"ok"``."""

    correct: bool
    status: GradeStatus


class Grader:
    """One math-verify worker subprocess, used under a lock; safe from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._pid = 0  # os.getpid() of the process that started the worker
        self._buffer = b""
        self._next_id = 0

    def grade(self, answer: str, gold: str | Sequence[str], timeout: float = 5.0) -> GradeResult:
        """Is ``answer`` mathematically equal to ``gold`` (or to one of several gold alternatives)?

        Args:
            answer: the extracted answer, LaTeX or plain (``\\frac{1}{2}``, ``0.5``, ``x^2+1``).
            gold: the reference answer, or a list of equivalent alternatives.
            timeout: hard limit in seconds on the grading itself (a worker start is not counted).
        """
        golds = [gold] if isinstance(gold, str) else list(gold)
        if not answer.strip() or not any(g.strip() for g in golds):
            return GradeResult(False, "empty")
        if len(answer) > MAX_ANSWER_CHARS:
            return GradeResult(False, "too_long")
        with self._lock:
            self._ensure_worker()
            self._next_id += 1
            request = {"id": self._next_id, "answer": answer, "gold": golds}
            try:
                self._send(request)
                reply = self._read_reply(deadline=time.monotonic() + timeout)
            except (BrokenPipeError, OSError, EOFError) as error:  # the worker died mid-request
                logger.warning("math grading worker failed (%s); restarting it on the next call", error)
                self._kill()
                return GradeResult(False, "error")
            if reply is None:
                logger.warning("math grading timed out after %.1f s; killing the worker", timeout)
                self._kill()
                return GradeResult(False, "timeout")
            if reply.get("id") != request["id"]:  # cannot happen with one request in flight; never trust it
                self._kill()
                return GradeResult(False, "error")
            if reply["status"] != "ok":
                logger.debug("math-verify raised on %r vs %r: %s", answer[:80], golds, reply.get("error"))
            return GradeResult(bool(reply["correct"]) and reply["status"] == "ok", reply["status"])

    def close(self) -> None:
        """Stop the worker (a later ``grade`` starts a new one)."""
        with self._lock:
            self._kill()

    # ------------------------------------------------------------------ worker lifecycle
    def _ensure_worker(self) -> None:
        if self._process is not None and self._pid != os.getpid():
            # Forked: the worker and its pipes belong to the parent process. Forget them, do not kill them.
            self._process, self._buffer = None, b""
        if self._process is not None and self._process.poll() is None:
            return
        self._kill()
        self._process = subprocess.Popen(
            [sys.executable, "-m", "r3l_envs.math._grade_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,  # math-verify logs parse warnings; an unread stderr pipe would block it
            env={**os.environ, "PYTHONPATH": _package_root() + os.pathsep + os.environ.get("PYTHONPATH", "")},
        )
        self._pid = os.getpid()
        self._buffer = b""
        ready = self._read_reply(deadline=time.monotonic() + STARTUP_TIMEOUT)
        if not (ready or {}).get("ready"):
            self._kill()
            raise RuntimeError(
                "the math grading worker did not start (is math-verify installed? try "
                f"`{sys.executable} -m r3l_envs.math._grade_worker` to see its error)"
            )

    def _send(self, request: dict[str, Any]) -> None:
        assert self._process is not None and self._process.stdin is not None
        self._process.stdin.write(json.dumps(request).encode("ascii") + b"\n")
        self._process.stdin.flush()

    def _read_reply(self, deadline: float) -> dict[str, Any] | None:
        """One JSON line from the worker, or ``None`` if none arrives before ``deadline``."""
        assert self._process is not None and self._process.stdout is not None
        fd = self._process.stdout.fileno()
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            readable, _, _ = select.select([fd], [], [], remaining)
            if not readable:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                raise EOFError("the grading worker exited")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def _kill(self) -> None:
        process, self._process, self._buffer = self._process, None, b""
        if process is None or self._pid != os.getpid():
            return
        if process.poll() is None:
            process.kill()
        process.wait()  # reap it: no zombie
        for pipe in (process.stdin, process.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):  # a killed worker's broken pipe has nothing left to flush
                    pipe.close()


def _package_root() -> str:
    """The folder holding the ``r3l_envs`` package, so the worker imports this very copy of it."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


_GRADER = Grader()
atexit.register(_GRADER.close)


def grade(answer: str, gold: str | Sequence[str], timeout: float = 5.0) -> GradeResult:
    """Grade ``answer`` against ``gold`` with math-verify in the shared worker (see :meth:`Grader.grade`)."""
    return _GRADER.grade(answer, gold, timeout=timeout)


def shutdown() -> None:
    """Stop the shared grading worker (it restarts on the next :func:`grade`)."""
    _GRADER.close()
