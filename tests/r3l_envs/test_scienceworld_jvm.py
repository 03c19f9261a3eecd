"""The ScienceWorld JVM lifecycle: started on demand, isolated per env, never left behind."""

import gc
import os
import signal
import subprocess
import sys
import time

import gymnasium as gym
import pytest

from r3l_envs.errors import EngineError
from r3l_envs.scienceworld.jvm import ScienceWorldJVM

pytestmark = pytest.mark.java


def _java_children() -> set[int]:
    """Pids of the java processes whose parent is this test process."""
    me, pids = os.getpid(), set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        if ppid == me and comm == "java":
            pids.add(int(entry))
    return pids


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except OSError:
        return False


def _wait_gone(pid: int, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)  # polling a process we do not own: there is nothing to wait on
    return False


def test_twenty_create_close_cycles_leave_no_java_process():
    before = _java_children()
    for cycle in range(20):
        env = gym.make("r3l/ScienceWorld-v0", tasks=["find-plant"])
        env.unwrapped.jvm.start()  # what the first reset() does, without loading the engine's classes
        pid = env.unwrapped.jvm.pid
        assert pid in _java_children()
        if cycle % 2:
            env.close()
        else:  # dropped without close(): garbage collection stops the JVM
            del env
            gc.collect()
        assert not _alive(pid), f"cycle {cycle}: JVM {pid} survived"
    assert _java_children() == before


def test_env_without_reset_starts_no_jvm():
    before = _java_children()
    env = gym.make("r3l/ScienceWorld-v0")
    assert _java_children() == before and env.unwrapped.jvm.pid is None
    env.close()


_EXIT_SCRIPT = """
import os, signal, sys, gymnasium as gym, r3l_envs
env = gym.make("r3l/ScienceWorld-v0", tasks=["find-plant"])
env.reset(seed=0)
print(env.unwrapped.jvm.pid, flush=True)
if sys.argv[1] == "kill":
    os.kill(os.getpid(), signal.SIGKILL)  # no finalizer runs: the JVM must notice on its own
"""


@pytest.mark.parametrize("how", ["exit", "kill"])
def test_interpreter_exit_or_death_leaves_no_java_process(how):
    proc = subprocess.run([sys.executable, "-c", _EXIT_SCRIPT, how], capture_output=True, text=True, timeout=120)
    assert proc.returncode == (-signal.SIGKILL if how == "kill" else 0), proc.stderr[-2000:]
    pid = int(proc.stdout.split()[0])
    assert _wait_gone(pid), f"JVM {pid} outlived its Python process ({how})"


def test_start_timeout_raises_typed_error_and_cleans_up():
    before = _java_children()
    jvm = ScienceWorldJVM(start_timeout=0.01)
    with pytest.raises(EngineError, match="start_timeout"):
        jvm.start()
    assert _java_children() == before


def test_missing_java_names_the_fix(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(EngineError, match="apt-get install -y default-jre-headless"):
        ScienceWorldJVM().start()


def test_two_envs_are_isolated():
    actions = ["teleport to kitchen", "open fridge", "look around"]

    def transcript(env, out):
        out.append(env.reset(options={"task_id": "boil/var1"})[0])

    a = gym.make("r3l/ScienceWorld-v0", tasks=["boil"])
    b = gym.make("r3l/ScienceWorld-v0", tasks=["boil"])
    try:
        ta, tb = [], []
        transcript(a, ta)
        transcript(b, tb)
        assert a.unwrapped.jvm.pid != b.unwrapped.jvm.pid
        for action in actions:  # interleaved steps do not see each other
            ta.append(a.step(action)[0])
            tb.append(b.step(action)[0])
        assert ta == tb
        a.unwrapped.jvm.kill()
        with pytest.raises(EngineError):
            a.step("look around")
        assert b.step("look around")[0] == ta[-1]  # the other env is unaffected
    finally:
        a.close()
        b.close()
