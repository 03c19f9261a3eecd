"""Collection on Ray actors (wrappers/collectors/ray.py), on one local Ray instance (loopback only): the same groups
as the thread-pool backend through 1 and 4 workers; a worker killed (SIGKILL) mid-collect is rebuilt from its slots'
checkpoints and the groups come out identical; bounded retries end in a clear error, never a hang; nothing is left
behind after close() or Ctrl-C. The 2-node Cluster test is in test_ray_cluster.py."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import gymnasium as gym
import pytest

from wrappers import RolloutConfig
from wrappers.collectors.local import LocalCollector
from wrappers.collectors.protocol import Collector
from wrappers.retry.oracle import expert_plan
from wrappers.retry.reflect_retry import ReflectRetry, ReflectRetryConfig
from wrappers.retry.reflection import PolicyReflector

ray = pytest.importorskip("ray", reason='the ray extra is not installed (pip install -e ".[ray]")')
pytest.importorskip("transformers")

from wrappers.collectors.ray import RayCollector, WorkerLostError, connect  # noqa: E402

pytestmark = pytest.mark.ray
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray instance for the module (logical CPUs: the actors here declare a quarter CPU each)."""
    started = connect("local", num_cpus=2)
    # this module's helper functions travel by value: the workers cannot import a test module by name
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield
    if started:
        ray.shutdown()


def scripted(replies):
    from r3l_learn.policies.scripted import ScriptedPolicy

    return ScriptedPolicy(replies)


def without_checkpoints(groups):
    """Group dicts minus the checkpoints' bytes (they may differ between env instances in the same state; the
    retries show that the restores were exact)."""
    out = [g.to_dict() for g in groups]
    for group in out:
        for traj in group["trajectories"]:
            for turn in traj["turns"]:
                turn.pop("checkpoint")
    return out


def diagnosis(pivot):
    return (
        '{"trajectory_summary": "left the plan", "root_cause_analysis": "a detour", '
        f'"trajectory_outcome": "failure", "improvement_suggestion": "follow the plan", "retry_from_step": {pivot}}}'
    )


def plan_follower(plans, on_call=None):
    """Per task (found by its opening): two plan steps, then a detour, unless guided. ``on_call(n)`` runs before
    the n-th reply (a hook to disturb the run at a fixed point of it)."""
    calls = [0]

    def rule(prompt_text):
        calls[0] += 1
        if on_call is not None:
            on_call(calls[0])
        plan = next(plan for key, plan in plans.items() if key in prompt_text)
        done = prompt_text.count("<|im_start|>assistant") - 1
        if "What to do instead" in prompt_text or done < 2:
            return f"<action>{plan[min(done, len(plan) - 1)]}</action>"
        return "<action>inventory</action>"

    return rule


def countdown_rule(on_call=None):
    calls = [0]

    def rule(prompt_text):
        calls[0] += 1
        if on_call is not None:
            on_call(calls[0])
        return "<action>2 * 3</action>" if "What to do instead" in prompt_text else "<action>1 + 2</action>"

    return rule


TEXTWORLD_PLANS = {}


def textworld_tasks():
    """Two TextWorld tasks and their expert plans, keyed by a line only that task's opening has."""
    if not TEXTWORLD_PLANS:
        env = gym.make("r3l/TextWorld-v0")
        tasks = list(env.unwrapped.task_ids[:2])
        openings = [env.reset(options={"task_id": task})[0] for task in tasks]
        for task, mine, other in zip(tasks, openings, openings[::-1]):
            key = next(line.strip() for line in mine.splitlines() if line.strip() and line.strip() not in other)
            TEXTWORLD_PLANS[key] = expert_plan(env, task)
        TEXTWORLD_PLANS["tasks"] = tasks
        env.close()
    plans = {k: v for k, v in TEXTWORLD_PLANS.items() if k != "tasks"}
    return TEXTWORLD_PLANS["tasks"], plans


def collect(env_id, collector, on_call=None):
    """R³L groups (bases, self-reflections at a fixed pivot, retries) for two tasks through ``collector``."""
    if env_id == "r3l/Countdown-v0":
        tasks, rule, max_turns = ["countdown-train-000000", "countdown-train-000001"], countdown_rule(on_call), None
    else:
        tasks, plans = textworld_tasks()
        rule, max_turns = plan_follower(plans, on_call), 5
    config = ReflectRetryConfig(group_size=4, rollout=RolloutConfig(max_turns=max_turns), keep_checkpoints=True)
    rr = ReflectRetry(collector, scripted(rule), PolicyReflector(scripted([diagnosis(2), diagnosis(1)])), config)
    return without_checkpoints(rr.collect(tasks, seed=5))


def reference(env_id):
    with LocalCollector(env_id, workers=1) as local:
        groups = collect(env_id, local)
    kinds = [t["kind"] for g in groups for t in g["trajectories"]]
    assert kinds.count("retry") >= 2  # restores really happened
    return groups


@pytest.mark.parametrize("env_id", ["r3l/Countdown-v0", pytest.param("r3l/TextWorld-v0", marks=pytest.mark.slow)])
def test_ray_groups_equal_the_local_backend_with_1_and_4_workers(local_ray, env_id):
    expected = reference(env_id)
    for workers in (1, 4):
        with RayCollector(env_id, workers=workers, num_cpus=0.25) as remote:
            assert collect(env_id, remote) == expected
            assert remote.replacements == 0
            assert remote.local_env(0) is None  # the envs live in the actors
            assert isinstance(remote, Collector)


def test_a_worker_killed_mid_collect_is_rebuilt_and_the_groups_are_identical(local_ray):
    env_id = "r3l/Countdown-v0"
    expected = reference(env_id)
    with RayCollector(env_id, workers=2, num_cpus=0.25) as remote:
        killed = []

        def kill(n):
            if n in (3, 9):  # mid-episode: after the bases' first turn, then during the retries
                pid = remote.pids()[1]
                os.kill(pid, signal.SIGKILL)  # the process, not ray.kill: as a crash or the OOM killer would
                killed.append(pid)

        assert collect(env_id, remote, on_call=kill) == expected
        assert len(killed) == 2 and remote.replacements == 2
        assert remote.pids()[1] not in killed


def test_the_oracle_consults_envs_in_the_actors(local_ray):
    """The oracle reads expert answers through ``Collector.call`` on the base's slot, inside its actor."""
    from wrappers.retry.oracle import OracleReflector

    def run(collector):
        rr = ReflectRetry(collector, scripted(countdown_rule()), OracleReflector(reveal_answer=True))
        return without_checkpoints(rr.collect(["countdown-train-000003"], seed=1))

    with LocalCollector("r3l/Countdown-v0", workers=1) as local:
        expected = run(local)
    with RayCollector("r3l/Countdown-v0", workers=2, num_cpus=0.25) as remote:
        assert run(remote) == expected
    assert any(t["kind"] == "retry" for t in expected[0]["trajectories"])


def die(env):
    os.kill(os.getpid(), signal.SIGKILL)


def nap(env, seconds):
    time.sleep(seconds)


def test_a_call_whose_worker_always_dies_fails_after_bounded_retries(local_ray):
    with RayCollector("r3l/Countdown-v0", workers=1, num_cpus=0.25, max_retries=1) as remote:
        remote.gather([remote.reset(0, seed=0, task_id=None, checkpoint=False)])
        with pytest.raises(WorkerLostError, match=r"call die on slot 0 failed after 2 tries .*ActorDiedError"):
            remote.gather([remote.call(0, die)])
        assert remote.replacements == 2
        # the slot still works: its state is rebuilt once more on a new worker
        assert remote.gather([remote.step(0, "1 + 2", checkpoint=False)])[0].observation.startswith("Incorrect")


def test_a_call_that_never_answers_times_out_and_fails(local_ray):
    timeout = pytest.raises(WorkerLostError, match=r"call nap on slot 0 failed after 2 tries .*timed out after 2 s")
    with RayCollector("r3l/Countdown-v0", workers=1, num_cpus=0.25, max_retries=1, call_timeout_s=2) as remote, timeout:
        remote.gather([remote.call(0, nap, 3600)])


def test_a_worker_that_cannot_be_placed_is_an_error_not_a_hang(local_ray):
    unplaced = pytest.raises(WorkerLostError, match=r"reset of slot 0 .* failed after 2 tries.*no node has free")
    with RayCollector("r3l/Countdown-v0", workers=1, num_cpus=64, max_retries=1, start_timeout_s=1) as remote, unplaced:
        remote.gather([remote.reset(0, seed=0, task_id=None, checkpoint=False)])


def test_env_errors_reach_the_caller_as_themselves(local_ray):
    from r3l_envs.errors import UnknownTaskError

    with RayCollector("r3l/Countdown-v0", workers=1, num_cpus=0.25) as remote:
        with pytest.raises(UnknownTaskError):
            remote.gather([remote.reset(0, seed=0, task_id="no-such-task", checkpoint=False)])
        assert remote.replacements == 0


@pytest.mark.parametrize("batch_calls", [True, False])
def test_a_round_is_one_ray_call_per_worker(local_ray, batch_calls):
    """Calls submitted together and then gathered travel as one Ray call per actor (unbatched: one per slot),
    with the same results and each env error delivered to its own call."""
    from r3l_envs.errors import UnknownTaskError

    with RayCollector("r3l/Countdown-v0", workers=2, num_cpus=0.25, batch_calls=batch_calls) as remote:
        remote.gather([remote.reset(s, seed=s, task_id=None, checkpoint=False) for s in range(8)])
        sent = remote.ray_calls
        resets = [remote.reset(s, seed=s, task_id=None, checkpoint=True) for s in range(8)]
        results = remote.gather(resets)
        # batched: one call per worker (2), unless the submitting thread paused past the dispatcher's linger between
        # two submits (a loaded machine), which splits a round but never sends one call per slot
        sent = remote.ray_calls - sent
        assert 2 <= sent < 8 if batch_calls else sent == 8
        steps = remote.gather([remote.step(s, "\\boxed{1}", checkpoint=False) for s in range(8)])
        assert all(r.info["step"] == 1 for r in steps)
        with LocalCollector("r3l/Countdown-v0") as local:
            expected = local.gather([local.reset(s, seed=s, task_id=None, checkpoint=False) for s in range(8)])
        assert [r.observation for r in results] == [r.observation for r in expected]
        unknown = remote.reset(0, seed=0, task_id="no-such-task", checkpoint=False)
        mixed = [unknown, remote.step(1, "x", checkpoint=False)]
        with pytest.raises(UnknownTaskError):
            remote.gather(mixed)
        assert mixed[1].result().info["step"] == 2


def test_checkpoints_cross_under_the_runs_key(local_ray):
    """What an actor sends is keyed for this run: it restores into a slot, and checkpoint bytes written without the
    run's key (by anyone else) are refused by the actor and by the driver."""
    import r3l_envs
    from r3l_envs.errors import CheckpointAuthError

    with RayCollector("r3l/Countdown-v0", workers=1, num_cpus=0.25) as remote:
        [reset] = remote.gather([remote.reset(0, seed=0, task_id=None, checkpoint=True)])
        remote.gather([remote.restore(0, reset.checkpoint)])  # the driver re-keys what it sends
        with pytest.raises(CheckpointAuthError):
            remote.gather([remote.reset(0, seed=0, task_id=None, checkpoint=False)])  # warm the actor
            handle = remote._workers[0].handle
            ray.get(handle.restore.remote(0, reset.checkpoint.to_bytes()))  # unkeyed bytes, straight to the actor
        env = gym.make("r3l/Countdown-v0")
        env.reset(seed=0)
        with pytest.raises(CheckpointAuthError):
            r3l_envs.Checkpoint.from_bytes(r3l_envs.checkpoint(env).to_bytes(), key=remote._key)


def gone(pid, wait_s=60.0):
    """Whether process ``pid`` has exited (waiting up to ``wait_s``: Ray reaps killed workers asynchronously)."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    return False


def test_close_leaves_no_worker_process(local_ray):
    remote = RayCollector("r3l/Countdown-v0", workers=2, num_cpus=0.25)
    remote.gather([remote.reset(slot, seed=slot, task_id=None, checkpoint=False) for slot in range(2)])
    pids = remote.pids()
    remote.close()
    remote.close()  # idempotent
    assert all(gone(pid) for pid in pids)
    with pytest.raises(RuntimeError, match="closed"):
        remote.reset(0, seed=0, task_id=None, checkpoint=False)


CTRL_C_DRIVER = textwrap.dedent(
    """
    import sys, time
    from wrappers.collectors.ray import RayCollector, connect
    connect("local", num_cpus=1)
    remote = RayCollector("r3l/Countdown-v0", workers=2, num_cpus=0.25)
    remote.gather([remote.reset(s, seed=s, task_id=None, checkpoint=False) for s in range(2)])
    import ray
    print(" ".join(str(p) for p in remote.pids()), ray.get_runtime_context().get_node_id(), flush=True)
    while True:
        time.sleep(0.1)
    """
)


@pytest.mark.slow
def test_ctrl_c_leaves_no_worker_or_ray_process(tmp_path):
    """A driver interrupted with Ctrl-C (its own local Ray, so this test does not share one) takes its actors
    and the Ray daemons it started down with it."""
    driver = subprocess.Popen(
        [sys.executable, "-c", CTRL_C_DRIVER],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"},
    )
    try:
        line = driver.stdout.readline().split()
        assert line, driver.stderr.read()
        pids = [int(p) for p in line[:-1]]
        driver.send_signal(signal.SIGINT)
        assert driver.wait(timeout=120) != 0  # KeyboardInterrupt
    finally:
        if driver.poll() is None:
            driver.kill()
    assert all(gone(pid) for pid in pids)
    # every daemon of that Ray instance (gcs_server, raylet, agents) names its node id on its command line
    left = subprocess.run(["pgrep", "-f", line[-1]], capture_output=True, text=True)
    assert left.stdout.split() == [], "Ray processes of the interrupted driver are still running"


def jvms_of(pid):
    """The Java child processes of process ``pid``."""
    children = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return [int(c) for c in children if b"java" in Path(f"/proc/{c}/cmdline").read_bytes()]


@pytest.mark.java
@pytest.mark.slow
def test_no_scienceworld_jvm_outlives_a_killed_worker_or_close(local_ray):
    with RayCollector("r3l/ScienceWorld-v0", workers=1, num_cpus=0.25) as remote:
        remote.gather([remote.reset(0, seed=0, task_id=None, checkpoint=True)])
        first = jvms_of(remote.pids()[0])
        assert len(first) == 1
        os.kill(remote.pids()[0], signal.SIGKILL)
        after = remote.gather([remote.step(0, "look around", checkpoint=False)])[0]
        assert after.observation  # the slot was rebuilt there and answered
        assert remote.replacements == 1
        assert gone(first[0])  # the JVM exits with its worker (its stdin pipe breaks)
        second = jvms_of(remote.pids()[0])
        assert len(second) == 1
    assert gone(second[0])
