"""The collection backend protocol: a collector written from the protocol alone (serial, envs in fresh instances on
every restore, checkpoints crossing as bytes, as a remote backend's would) gives the same groups as the default
thread pool; ReflectRetry, PlainGroups and rollout_batch take one; the caller keeps ownership."""

from concurrent.futures import Future

import gymnasium as gym
import pytest

import r3l_envs
from r3l_envs import Checkpoint
from r3l_envs.errors import EnvClosedError
from wrappers import RolloutConfig
from wrappers.collectors.local import LocalCollector
from wrappers.collectors.protocol import Collector, ResetResult, StepResult, describe_env
from wrappers.retry.oracle import OracleReflector
from wrappers.retry.reflect_retry import ReflectRetry, ReflectRetryConfig
from wrappers.retry.reflection import PolicyReflector
from wrappers.rollout import rollout_batch

pytest.importorskip("transformers")


def scripted(replies):
    from r3l_learn.policies.scripted import ScriptedPolicy

    return ScriptedPolicy(replies)


class SequentialCollector:
    """A second, independent implementation of :class:`wrappers.collectors.protocol.Collector`: one call at a time on
    the
    calling thread, and shaped like a remote backend: no env object is handed to the caller, checkpoints leave
    and enter as ``to_bytes()``, and every restore goes into a *fresh* env instance (as after a lost worker)."""

    def __init__(self, env_id, **env_kwargs):
        self.env_id, self.env_kwargs = env_id, env_kwargs
        self.envs: dict[int, gym.Env] = {}
        self.calls: list[tuple[str, int]] = []
        self.made = 0
        self.closed = False

    def _env(self, slot):
        if slot not in self.envs:
            self.envs[slot] = gym.make(self.env_id, **self.env_kwargs)
            self.made += 1
        return self.envs[slot]

    @staticmethod
    def _done(value):
        future = Future()
        future.set_result(value)
        return future

    @staticmethod
    def _travel(ckpt):
        return None if ckpt is None else Checkpoint.from_bytes(ckpt.to_bytes())

    def made_env(self):
        return describe_env(self._env(0))

    def reset(self, slot, *, seed, task_id, checkpoint):
        self.calls.append(("reset", slot))
        env = self._env(slot)
        obs, info = env.reset(seed=seed, options=None if task_id is None else {"task_id": task_id})
        return self._done(ResetResult(obs, info, self._travel(r3l_envs.checkpoint(env)) if checkpoint else None))

    def step(self, slot, action, *, checkpoint):
        self.calls.append(("step", slot))
        env = self._env(slot)
        obs, reward, terminated, truncated, info = env.step(action)
        keep = checkpoint and not (terminated or truncated)
        ckpt = self._travel(r3l_envs.checkpoint(env)) if keep else None
        return self._done(StepResult(obs, float(reward), terminated, truncated, info, ckpt))

    def restore(self, slot, checkpoint):
        self.calls.append(("restore", slot))
        if slot in self.envs:
            self.envs.pop(slot).close()
        r3l_envs.restore(self._env(slot), self._travel(checkpoint))
        return self._done(None)

    def call(self, slot, fn, *args):
        return self._done(fn(self._env(slot), *args))

    def local_env(self, slot):
        return self._env(slot)

    def gather(self, futures, then=None):
        results = [f.result() for f in futures]
        for i, result in enumerate(results):
            if then is not None:
                then(i, result)
        return results

    def close(self):
        for env in self.envs.values():
            env.close()
        self.envs.clear()
        self.closed = True


def without_checkpoints(groups):
    out = [g.to_dict() for g in groups]
    for group in out:
        for traj in group["trajectories"]:
            for turn in traj["turns"]:
                turn.pop("checkpoint")
    return out


def walker(prompt_text):
    return "<action>right</action>" if "walk right" in prompt_text else "<action>left</action>"


def diagnosis(pivot):
    return (
        '{"trajectory_summary": "kept walking left", "root_cause_analysis": "the goal is to the right", '
        f'"trajectory_outcome": "failure", "improvement_suggestion": "walk right", "retry_from_step": {pivot}}}'
    )


def test_the_sequential_collector_satisfies_the_protocol():
    assert isinstance(SequentialCollector("r3ltest/Corridor-v0"), Collector)
    assert isinstance(LocalCollector("r3ltest/Corridor-v0"), Collector)


@pytest.mark.parametrize("env_id", ["r3ltest/Corridor-v0", "r3ltest/ReplayCorridor-v0"])
def test_reflect_retry_groups_are_the_same_on_a_custom_collector(env_id):
    tasks = ["corridor-train-000000", "corridor-train-000001"]
    config = ReflectRetryConfig(group_size=4, rollout=RolloutConfig(max_turns=6), fill=True, keep_checkpoints=True)

    def collect(env):
        reflector = PolicyReflector(scripted([diagnosis(2), diagnosis(1), "prose", diagnosis(3)]))
        rr = ReflectRetry(env, scripted(walker), reflector, config)
        groups = rr.collect(tasks, seed=7)
        rr.close()
        return groups

    default = collect(env_id)
    custom = SequentialCollector(env_id)
    groups = collect(custom)
    assert without_checkpoints(groups) == without_checkpoints(default)
    # base i of the collect played on slot i; its retry restored there (where a native restore is fastest)
    bases = [t for g in groups for t in g.trajectories if t.kind == "base" and not t.metadata.get("extra")]
    retried = [slot for slot, base in enumerate(bases) if base.metadata.get("retried")]
    assert len(retried) >= 2  # restores really happened
    assert sorted(slot for call, slot in custom.calls if call == "restore") == retried
    assert not custom.closed  # the caller made it: the wrapper leaves it open
    custom.close()


def test_oracle_reflect_retry_on_countdown_through_a_custom_collector():
    """The oracle consults an idle env of the collector (``local_env``): same groups as the default backend."""

    def solver(prompt_text):
        import re

        found = re.search(r"The correct answer is (.+?)\.\n", prompt_text)
        return f"<action>{found.group(1)}</action>" if found else "<action>1 + 2</action>"

    config = ReflectRetryConfig(group_size=4)
    task = ["countdown-train-000003"]
    runs = []
    for env in ("r3l/Countdown-v0", SequentialCollector("r3l/Countdown-v0")):
        rr = ReflectRetry(env, scripted(solver), OracleReflector(reveal_answer=True), config)
        runs.append(without_checkpoints(rr.collect(task, seed=1)))
        rr.close()
    assert runs[0] == runs[1]
    assert any(t["kind"] == "retry" and t["won"] for t in runs[1][0]["trajectories"])


class RemoteLikeCollector(SequentialCollector):
    """The same, with no env handed out at all (``local_env`` is ``None``, as for Ray actors): what consults an
    env goes through ``call``."""

    def local_env(self, slot):
        return None


@pytest.mark.parametrize("env_id", ["r3l/Countdown-v0", "r3l/TextWorld-v0"])
def test_the_oracle_consults_envs_it_cannot_hold_through_call(env_id):
    """Math (reference answer) and plan envs (expert plan): the oracle's reflections, and so the groups, are those
    of the default backend, though it never gets an env object."""
    probe = gym.make(env_id)
    task = probe.unwrapped.task_ids[0]
    plan = probe.unwrapped.expert_actions(task)
    probe.close()

    def follower(prompt_text):  # errs on the first turn unless guided, then follows the plan
        done = prompt_text.count("<|im_start|>assistant") - 1
        if "What to do instead" in prompt_text or "The correct answer" in prompt_text or done != 0:
            return f"<action>{plan[min(done, len(plan) - 1)]}</action>"
        return "<action>dance</action>"  # in no expert plan, and no number

    config = ReflectRetryConfig(group_size=2, rollout=RolloutConfig(max_turns=4))
    runs = []
    for env in (env_id, RemoteLikeCollector(env_id)):
        rr = ReflectRetry(env, scripted(follower), OracleReflector(reveal_answer=True), config)
        runs.append(without_checkpoints(rr.collect([task], seed=2)))
        rr.close()
    assert runs[1] == runs[0]
    reflection = runs[1][0]["trajectories"][0]["metadata"]["reflection"]
    assert reflection["error"] is None and reflection["pivot"] is not None  # a real diagnosis, not "no_plan"


def test_plain_groups_and_rollout_batch_take_a_collector():
    from r3l_learn.loop.groups import PlainGroups

    rollout = RolloutConfig(max_turns=4)
    tasks = ["corridor-train-000000", "corridor-train-000002"]
    runs = []
    for env in ("r3ltest/Corridor-v0", SequentialCollector("r3ltest/Corridor-v0")):
        builder = PlainGroups(env, scripted(walker), group_size=3, rollout=rollout)
        runs.append(without_checkpoints(builder.collect(tasks, seed=4)))
        builder.close()
    assert runs[0] == runs[1]

    collector = SequentialCollector("r3ltest/Corridor-v0")
    trajs = rollout_batch(collector, scripted(walker), rollout, seeds=[0, 1], task_ids=tasks, seed=4)
    envs = [gym.make("r3ltest/Corridor-v0") for _ in tasks]
    assert [t.to_dict() for t in trajs] == [
        t.to_dict() for t in rollout_batch(envs, scripted(walker), rollout, seeds=[0, 1], task_ids=tasks, seed=4)
    ]
    with pytest.raises(ValueError, match="seeds or task_ids"):
        rollout_batch(collector, scripted(walker), rollout)


def test_a_collector_is_refused_with_env_kwargs():
    with pytest.raises(ValueError, match="env_kwargs"):
        ReflectRetry(
            SequentialCollector("r3ltest/Corridor-v0"), scripted(walker), OracleReflector(), env_kwargs={"a": 1}
        )


def test_local_collector_leaves_given_envs_open_and_closes_what_it_made():
    given = [gym.make("r3ltest/Corridor-v0") for _ in range(2)]
    with LocalCollector(given, workers=2) as collector:
        result = collector.gather([collector.reset(1, seed=0, task_id=None, checkpoint=True)])[0]
        assert isinstance(result.checkpoint, Checkpoint) and result.info["task_id"]
        with pytest.raises(ValueError, match="out of range"):
            collector.local_env(2)
    given[1].step("left")  # still open
    made = LocalCollector("r3ltest/Corridor-v0", workers=1)
    env = made.local_env(3)
    assert len(made) == 4 and made.made_env().env_id == "r3ltest/Corridor-v0"
    made.close()
    with pytest.raises(EnvClosedError):
        env.reset()
