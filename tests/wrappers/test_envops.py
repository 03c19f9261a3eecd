"""Env calls in threads (``env_workers``): the same trajectories and groups as serial, on every offline env;
slow restores overlap instead of stalling the batch; a failing env call propagates; ``max_envs`` waves."""

import re
import sys
import threading
import time
from concurrent.futures import wait

import gymnasium as gym
import pytest

from wrappers import RolloutConfig, SamplingParams, rollout_batch
from wrappers.collectors.threads import EnvOps
from wrappers.retry.oracle import OracleReflector, expert_plan
from wrappers.retry.reflect_retry import ReflectRetry, ReflectRetryConfig
from wrappers.retry.reflection import PolicyReflector

pytest.importorskip("transformers")


def scripted(replies):
    from r3l_learn.policies.scripted import ScriptedPolicy

    return ScriptedPolicy(replies)


def dicts(groups):
    return [g.to_dict() for g in groups]


def without_checkpoints(groups):
    """Group dicts minus the checkpoints' bytes, which may differ between env instances in the same state:
    ALFWorld's hold engine-internal ids (two serial runs differ too), and an env used before carries wrapper
    bookkeeping (gymnasium's checker flags). The retries show that the restores were exact."""
    for g in groups:
        for t in g["trajectories"]:
            for turn in t["turns"]:
                turn["checkpoint"] = None
    return groups


# ---------------------------------------------------------------------- EnvOps itself
def test_serial_runs_inline_and_threads_overlap():
    main = threading.get_ident()
    with EnvOps(1) as ops:
        assert ops.map([threading.get_ident] * 3) == [main] * 3
    barrier = threading.Barrier(3, timeout=10)  # passes only with three calls in flight at once
    seen = []
    with EnvOps(3) as ops:
        out = ops.map([lambda k=k: (k, barrier.wait()) for k in range(3)], then=lambda i, _: seen.append(i))
    assert [k for k, _ in out] == [0, 1, 2] and sorted(seen) == [0, 1, 2]  # ``then`` once per call
    with pytest.raises(ValueError, match="workers must be >= 1"):
        EnvOps(0)


def test_then_runs_on_the_calling_thread():
    main = threading.get_ident()
    callers = []
    with EnvOps(4) as ops:
        ops.map([lambda: time.sleep(0.01)] * 8, then=lambda i, _: callers.append(threading.get_ident()))
    assert callers == [main] * 8


class Boom(RuntimeError):
    pass


def test_a_failing_call_propagates_after_the_others_finished():
    finished = []

    def slow(k):
        time.sleep(0.2)
        finished.append(k)

    def fail(k):
        raise Boom(f"call {k}")

    with EnvOps(4) as ops:
        futures = [ops.submit(slow, 0), ops.submit(fail, 1), ops.submit(fail, 2), ops.submit(slow, 3)]
        with pytest.raises(Boom, match="call 1"):  # the lowest failing index, whatever finished first
            ops.gather(futures, then=lambda i, _: None)
        assert sorted(finished) == [0, 3]  # nothing still runs on an env when the error reaches the caller
    with EnvOps(2) as ops:
        future = ops.submit(fail, 5)
        wait([future], timeout=10)  # a pool thread ran it: this thread was not gathering
        with pytest.raises(Boom, match="call 5"):
            ops.gather([future])
    with EnvOps(1) as ops, pytest.raises(Boom, match="call 7"):
        ops.submit(fail, 7)  # serial: raised at once, as a plain call would


# ---------------------------------------------------------------------- rollouts
@pytest.mark.parametrize("constrained", [False, True], ids=["free", "constrained"])
def test_sampled_rollouts_do_not_depend_on_env_workers(tiny_policy, constrained):
    sampling = SamplingParams(temperature=1.0, max_new_tokens=6)
    runs = []
    for workers in (1, 3):
        config = RolloutConfig(
            sampling, max_turns=2, constrained=constrained, keep_checkpoints=True, env_workers=workers
        )
        envs = [gym.make("r3ltest/Corridor-v0") for _ in range(4)]
        runs.append([t.to_dict() for t in rollout_batch(envs, tiny_policy, config, seeds=range(4), seed=11)])
    assert runs[0] == runs[1]
    assert len({str(t["turns"]) for t in runs[0]}) > 1  # the episodes differ: a real check, not four copies


def test_one_env_twice_in_a_batch_is_refused():
    env = gym.make("r3ltest/Corridor-v0")
    with pytest.raises(ValueError, match="its own env instance"):
        rollout_batch([env, env], scripted(["<action>left</action>"]), seeds=[0, 1])


# ---------------------------------------------------------------------- collect on every offline env
def countdown_solver(prompt_text):
    found = re.search(r"The correct answer is (.+?)\.\n", prompt_text)
    return f"<action>{found.group(1)}</action>" if found else "<action>1 + 2</action>"


def plan_follower(plans):
    """Per task (found by a line of its first observation): two plan steps, then a detour, unless guided."""

    def rule(prompt_text):
        plan = next(plan for key, plan in plans.items() if key in prompt_text)
        done = prompt_text.count("<|im_start|>assistant") - 1
        if "What to do instead" in prompt_text or done < 2:
            return f"<action>{plan[min(done, len(plan) - 1)]}</action>"
        return "<action>inventory</action>"

    return rule


def setup(env_id):
    """Two tasks of ``env_id``, a scripted policy that errs on them, and a reflector that catches it."""
    if env_id == "r3l/Countdown-v0":
        tasks = ["countdown-train-000000", "countdown-train-000001"]
        return tasks, scripted(countdown_solver), OracleReflector(reveal_answer=True), None
    env = gym.make(env_id)
    tasks = list(env.unwrapped.task_ids[:2])
    openings = [env.reset(options={"task_id": task})[0] for task in tasks]
    plans = {}
    for task, mine, other in zip(tasks, openings, openings[::-1]):
        key = next(line.strip() for line in mine.splitlines() if line.strip() and line.strip() not in other)
        plans[key] = expert_plan(env, task)
    env.close()
    return tasks, scripted(plan_follower(plans)), OracleReflector(), 6  # enough to detour and restore from turn 2


ENVS = [
    pytest.param("r3l/Countdown-v0", id="countdown"),
    pytest.param("r3l/TextWorld-v0", id="textworld"),
    pytest.param("r3l/ALFWorld-v0", id="alfworld"),
    pytest.param("r3l/WebShop-v0", id="webshop"),
    pytest.param("r3l/ScienceWorld-v0", id="scienceworld", marks=[pytest.mark.java, pytest.mark.slow]),
]


@pytest.mark.parametrize("env_id", ENVS)
def test_collect_is_the_same_serial_concurrent_and_in_waves(env_id):
    argv = list(sys.argv)
    tasks, policy, reflector, max_turns = setup(env_id)
    envs = [gym.make(env_id) for _ in range(4)]  # shared by the three runs (one JVM each for ScienceWorld)
    runs = {}
    for workers, max_envs in ((1, None), (4, None), (4, 3)):
        rollout = RolloutConfig(max_turns=max_turns, env_workers=workers)
        config = ReflectRetryConfig(group_size=4, rollout=rollout, keep_checkpoints=True, max_envs=max_envs)
        rr = ReflectRetry(iter(envs).__next__, policy, reflector, config)
        runs[workers, max_envs] = dicts(rr.collect(tasks, seed=5))
        assert len(rr.collector) == (max_envs or 4)
    for env in envs:
        env.close()
    serial = without_checkpoints(runs[1, None])
    assert without_checkpoints(runs[4, None]) == serial
    # a scripted policy samples nothing: waves change no episode
    assert without_checkpoints(runs[4, 3]) == serial
    kinds = [t["kind"] for g in serial for t in g["trajectories"]]
    assert kinds.count("retry") >= 2  # restores really happened
    assert sys.argv == argv  # engines that swap process globals (ALFWorld's translator) put them back


def test_sampled_groups_do_not_depend_on_env_workers(tiny_policy):
    sampling = SamplingParams(temperature=1.0, max_new_tokens=12)
    runs = []
    for workers in (1, 4):
        rollout = RolloutConfig(sampling=sampling, max_turns=2, constrained=True, env_workers=workers)
        config = ReflectRetryConfig(group_size=4, rollout=rollout, fill=True, keep_checkpoints=True, max_envs=1)
        reflector = PolicyReflector(tiny_policy, SamplingParams(max_new_tokens=8))
        rr = ReflectRetry("r3ltest/ReplayCorridor-v0", tiny_policy, reflector, config)
        runs.append(dicts(rr.collect(["corridor-train-000001"], seed=2)))
    assert runs[0] == runs[1]


# ---------------------------------------------------------------------- slow restores
class SlowRestore(gym.Wrapper):
    """Test harness: a real env whose restores take ``delay`` seconds more (or raise ``fail``)."""

    def __init__(self, env, delay=0.0, fail=None):
        super().__init__(env)
        self.delay, self.fail = delay, fail

    def checkpoint_state(self):
        return None

    def restore_state(self, state):
        if self.fail is not None:
            raise self.fail
        time.sleep(self.delay)


def countdown_collect(workers, delay=0.0, fail=None):
    rollout = RolloutConfig(env_workers=workers)
    config = ReflectRetryConfig(group_size=2 * K, rollout=rollout, aux_samples=False)
    rr = ReflectRetry(
        lambda: SlowRestore(gym.make("r3l/Countdown-v0"), delay, fail),
        scripted(countdown_solver),
        OracleReflector(reveal_answer=True),
        config,
    )
    start = time.perf_counter()
    (group,) = rr.collect(["countdown-train-000002"], seed=0)
    wall = time.perf_counter() - start
    assert rr.timings["total"] <= wall and rr.timings["retries"] <= rr.timings["total"]
    return group, wall, rr.timings["retries"]


K, DELAY = 4, 0.8  # the bound below leaves ~1 s for the rest of the collect on a loaded machine


def test_slow_restores_overlap_instead_of_stalling_the_batch():
    countdown_collect(K)  # warm caches (puzzle generation, tokenizer) outside the timings
    serial, serial_s, serial_retries = countdown_collect(1, DELAY)
    concurrent, concurrent_s, concurrent_retries = countdown_collect(K, DELAY)
    assert [t.kind for t in serial.trajectories].count("retry") == K  # K restores, all slow
    assert serial_s >= serial_retries >= K * DELAY  # the retry phase is where the restores wait
    assert concurrent_retries < 0.6 * K * DELAY
    assert concurrent_s < 0.6 * K * DELAY, f"{K} restores of {DELAY}s took {concurrent_s:.2f}s with {K} workers"
    assert concurrent.to_dict() == serial.to_dict()


def test_an_exception_in_an_env_thread_reaches_the_caller():
    with pytest.raises(Boom, match="restore failed"):
        countdown_collect(K, fail=Boom("restore failed"))
