"""A time budget for every call into a TextWorld engine, enforced in-process.

jericho's Z-machine runs the story until it asks for input: ``run_free()`` loops ``while (next_opcode is not
a read && emulator_halted <= 0)``. A forged machine state can keep it from ever reaching a read (the Z-code
spins at 100 % CPU inside one ctypes call, where neither Python code nor a ``KeyboardInterrupt`` can run),
but the loop re-reads ``emulator_halted``, a global of the engine's private ``libfrotz.so`` copy, before
every instruction. So a budget needs no child process: one daemon thread sleeps until the earliest
deadline of the calls in flight and, when a call overruns, sets that engine's ``emulator_halted``. The
interpreter stops at its next instruction, every further call into that engine returns at once, and the
caller (which sees :attr:`Guard.fired`) raises :class:`~r3l_envs.errors.EngineError` and drops the engine.

Arming and disarming a guard is a dict update under a lock: the thread is woken only when it is idle or
the new deadline comes before the one it sleeps towards, so an ordinary step pays a few microseconds.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["WATCHDOG", "EngineWatchdog", "Guard"]

logger = logging.getLogger(__name__)

#: After a guard fires, the engine is halted again at this interval until the call returns: an engine that
#: clears its flag (jericho's ``setup()`` does, on load and reset) is stopped again.
_REFIRE_S = 0.05


@dataclass
class Guard:
    """One watched engine call. ``fired`` is final once the ``with`` block of :meth:`EngineWatchdog.guard` ends."""

    deadline: float
    halt: Callable[[], None]
    fired: bool = False


class EngineWatchdog:
    """Halts engine calls that outlive their budget (one thread serves every engine of the process)."""

    def __init__(self) -> None:
        self._start_fresh()

    def _start_fresh(self) -> None:
        self._pid = os.getpid()
        self._cond = threading.Condition(threading.Lock())
        self._armed: dict[int, Guard] = {}
        self._tokens = itertools.count()
        self._sleeping_until: float | None = None  # None: idle (nothing armed) or not started
        self._thread: threading.Thread | None = None

    def guard(self, budget_s: float, halt: Callable[[], None]) -> _Watched:
        """Watch the engine call made inside ``with watchdog.guard(...) as guard:``.

        Args:
            budget_s: seconds the call may take; past them ``halt()`` is called from the watchdog's thread (and
                again every 50 ms until the block ends).
            halt: stops the engine (sets its ``emulator_halted``); must be safe to call from another thread.

        Returns:
            A context manager whose ``__enter__`` gives the :class:`Guard`; read ``fired`` after the block to
            learn whether the engine was halted.
        """
        return _Watched(self, Guard(time.monotonic() + budget_s, halt))

    def _arm(self, guard: Guard) -> int:
        if self._pid != os.getpid():  # a forked child has the lock and dict, but not the thread
            self._start_fresh()
        with self._cond:
            token = next(self._tokens)
            self._armed[token] = guard
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="r3l-engine-watchdog", daemon=True)
                self._thread.start()
            elif self._sleeping_until is None or guard.deadline < self._sleeping_until:
                self._cond.notify()
        return token

    def _disarm(self, token: int) -> None:
        with self._cond:  # after this, the thread can no longer fire this guard: `fired` is final
            del self._armed[token]

    def _watch(self) -> None:
        with self._cond:
            while True:
                if not self._armed:
                    self._sleeping_until = None
                    self._cond.wait()
                    continue
                now = time.monotonic()
                guard = min(self._armed.values(), key=lambda g: g.deadline)
                if guard.deadline > now:
                    self._sleeping_until = guard.deadline
                    self._cond.wait(guard.deadline - now)
                    continue
                if not guard.fired:
                    logger.warning("an engine call overran its time budget: halting the engine")
                guard.fired = True
                guard.deadline = now + _REFIRE_S
                try:
                    guard.halt()
                except Exception:  # a halt that fails must not kill the thread that guards every engine
                    logger.exception("halting an engine failed")


class _Watched:
    """The ``with`` block of one :meth:`EngineWatchdog.guard` (a class: cheaper than a generator per step)."""

    __slots__ = ("_guard", "_token", "_watchdog")

    def __init__(self, watchdog: EngineWatchdog, guard: Guard) -> None:
        self._watchdog, self._guard, self._token = watchdog, guard, -1

    def __enter__(self) -> Guard:
        self._token = self._watchdog._arm(self._guard)
        return self._guard

    def __exit__(self, *exc: object) -> None:
        self._watchdog._disarm(self._token)


#: The process's watchdog (its thread starts with the first guarded call).
WATCHDOG = EngineWatchdog()
