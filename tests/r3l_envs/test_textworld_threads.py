"""TextWorld's native engine on threads: every engine call and teardown holds ENGINE_LOCK; a short stress survives.

jericho runs a C interpreter behind ctypes (the GIL is released during calls) and unloads its private copy of
``libfrotz.so`` in a finaliser. The env keeps both under one process-wide lock, and closes engines itself, so no
teardown runs unguarded in a garbage-collector pass on another thread. ``benchmarks/stress_textworld.py`` is the
long version of the stress below (many attempts, crash counts).
"""

from __future__ import annotations

import gc
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import gymnasium as gym
import pytest

pytest.importorskip("textworld")

from r3l_envs.textworld import env as tw_env

STRESS = Path(__file__).resolve().parents[2] / "benchmarks" / "stress_textworld.py"


def test_engine_teardown_happens_under_the_engine_lock(monkeypatch):
    import jericho

    held = []
    original = jericho.FrotzEnv.__del__

    def recording_del(self):
        held.append(tw_env.ENGINE_LOCK._is_owned())
        original(self)

    monkeypatch.setattr(jericho.FrotzEnv, "__del__", recording_del)

    def episode(i):
        env = gym.make("r3l/TextWorld-v0", max_tasks=2)
        for task in env.unwrapped.task_ids:  # switching games tears the first engine down
            env.reset(options={"task_id": task})
            env.step("look")
        if i % 2:
            env.close()
        # else: dropped without close(); the env's finaliser must close the engine under the lock

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(episode, range(4)))
    gc.collect()
    # 8 engines were started; at least the 4 switched away from and the 2 closed ones are torn down by now, and
    # every teardown that ran held the lock.
    assert len(held) >= 6 and all(held), held


def test_a_short_threaded_stress_exits_cleanly():
    """Threads resetting, stepping, checkpointing, restoring, copying and dropping envs: the process survives."""
    args = [sys.executable, "-X", "faulthandler", str(STRESS), "--worker", "--threads", "3", "--rounds", "3"]
    done = subprocess.run([*args, "--check-every", "0", "--seed", "1"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("ok: 3 threads x 3 rounds")
