"""Progress for every long wait, written once: a live bar on a terminal, one line per phase elsewhere.

Every wait of more than a few seconds (compiling games, converting the embedded model, an eval, a training step,
starting Ray or an engine) runs inside :func:`phase`. On a terminal it is a ``tqdm`` bar that a ticker thread
redraws every second, so the clock moves and a ``status`` callable (live counters: tokens scored, micro-batches
done) shows within a long call that has no loop of its own to report from. Where stderr is not a terminal (CI
logs, pipes, ``tee``), a redrawn bar would be thousands of ``\\r`` fragments: each phase writes one line when it
starts and one when it ends, with its duration. With ``enabled=False`` (``--no-progress``) it writes nothing.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any, TextIO

__all__ = ["Phase", "phase", "progress_default"]

#: Seconds between the ticker's redraws of a terminal bar.
TICK_S = 1.0

# Whether a phase that is not told otherwise reports: a run's ``progress`` setting reaches the phases of code
# that does not take the flag itself (converting the embedded model while the policy loads).
_ENABLED: ContextVar[bool] = ContextVar("r3l_progress", default=True)


@contextlib.contextmanager
def progress_default(enabled: bool) -> Iterator[None]:
    """Within this block, :func:`phase` calls without ``enabled`` report only if ``enabled`` is true."""
    token = _ENABLED.set(bool(enabled))
    try:
        yield
    finally:
        _ENABLED.reset(token)


class Phase:
    """What the code inside :func:`phase` reports through: counts done and a short postfix."""

    def __init__(self, bar: Any, status: Callable[[], str] | None):
        self._bar, self._status = bar, status
        self.done = 0  # units finished so far (the bar's n)
        self.postfix = ""  # the last postfix set by the code (the end line repeats it)
        self._lock = threading.Lock()

    def update(self, n: int = 1) -> None:
        """``n`` more units are finished."""
        with self._lock:
            self.done += n
            if self._bar is not None:
                self._bar.update(n)

    def set_postfix(self, **fields: Any) -> None:
        """Show ``key=value`` fields after the bar (a round's turn, tokens, success so far)."""
        with self._lock:
            self.postfix = ", ".join(f"{k}={v}" for k, v in fields.items())
            self._redraw()

    def tick(self) -> None:
        """Redraw now (the ticker thread's call): the clock and the live ``status``."""
        with self._lock:
            self._redraw()

    def _redraw(self) -> None:
        if self._bar is None:
            return
        live = self._status() if self._status is not None else ""
        self._bar.set_postfix_str(", ".join(p for p in (self.postfix, live) if p), refresh=False)
        self._bar.refresh()


@contextlib.contextmanager
def phase(
    desc: str,
    *,
    total: int | None = None,
    unit: str = "it",
    enabled: bool | None = None,
    status: Callable[[], str] | None = None,
    file: TextIO | None = None,
) -> Iterator[Phase]:
    """Report a long wait named ``desc`` (``total`` units of ``unit``, or open-ended) on ``file`` (stderr).

    Args:
        desc: what is being done, as the user should read it ("compiling 25 TextWorld games (one-time; ...)").
        total: how many units the phase has, if known: the bar shows how far along it is.
        enabled: ``False`` writes nothing (``--no-progress``); ``None``: as the enclosing
            :func:`progress_default` says (on outside any).
        status: called about once a second on a terminal; its text joins the postfix (live counters).
        file: where to write; defaults to ``sys.stderr`` at call time.

    The end line (not on a terminal) says how the phase ended: ``done in 12.3 s``, or ``failed``/``interrupted``
    after so long, with the last postfix.
    """
    out = file if file is not None else sys.stderr
    if not (_ENABLED.get() if enabled is None else enabled):
        yield Phase(None, None)
        return
    start = time.perf_counter()
    if not _is_terminal(out):
        size = f" ({total} {unit})" if total is not None else ""
        _line(out, f"{desc}{size} ...")
        report = Phase(None, None)
        ended = "failed"
        try:
            yield report
            ended = "done"
        except KeyboardInterrupt:
            ended = "interrupted"
            raise
        finally:
            count = f" {report.done}/{total} {unit}," if total is not None else ""
            extra = f" ({report.postfix})" if report.postfix else ""
            _line(out, f"{desc}:{count} {ended} in {time.perf_counter() - start:.1f} s{extra}")
        return

    from tqdm import tqdm

    # leave=None: a bar nested in another (an eval between training steps) is cleared when done, a top one stays
    # an open-ended phase shows its clock and status, not a count of nothing ("0it [00:05, ?it/s]")
    shape = {} if total is not None else {"bar_format": "{desc}: {elapsed} elapsed{postfix}"}
    bar = tqdm(total=total, desc=desc, unit=unit, file=out, dynamic_ncols=True, leave=None, **shape)
    report = Phase(bar, status)
    stop = threading.Event()

    def ticker() -> None:
        while not stop.wait(TICK_S):
            report.tick()

    thread = threading.Thread(target=ticker, name=f"progress: {desc}", daemon=True)
    thread.start()
    try:
        yield report
    finally:
        stop.set()
        thread.join()
        report.tick()
        bar.close()


def _is_terminal(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


def _line(out: TextIO, text: str) -> None:
    out.write(text + "\n")
    out.flush()
