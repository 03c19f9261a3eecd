"""r3l/ScienceWorld-v0 on the real engine: contract, rewards, gold paths, replay restore, JVM death."""

import dataclasses
import hashlib

import gymnasium as gym
import pytest

import r3l_envs
from r3l_envs.errors import EngineError, ReplayDivergenceError, UnknownTaskError
from r3l_envs.scienceworld import task_names

pytestmark = pytest.mark.java

TASKS = ["boil", "find-animal", "chemistry-mix-paint-secondary-color"]


@pytest.fixture(scope="module")
def env():
    """One env (one JVM) shared by the tests of this module; each test resets it."""
    env = gym.make("r3l/ScienceWorld-v0", tasks=TASKS)
    yield env
    env.close()


def _play(env, actions):
    out = []
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action)
        out.append((obs, reward, terminated, info["score"], info["won"]))
        if terminated or truncated:
            break
    return out


def test_reset_shows_the_task_and_the_room(env):
    obs, info = env.reset(options={"task_id": "boil/var0"})
    assert info["task"].startswith("Your task is to boil")
    assert obs.startswith(info["task"])
    assert "This room is called" in obs
    assert info["admissible_actions"] is None  # computed only when asked
    assert info["won"] is False and info["step"] == 0 and 0.0 <= info["score"] <= 1.0
    actions = env.unwrapped.admissible_actions()
    assert "look around" in actions and actions == sorted(actions)


def test_task_ids_and_splits(env):
    ids = env.unwrapped.task_ids
    assert "boil/var0" in ids and "boil/var29" not in ids  # var29 is in ScienceWorld's test split
    assert {i.split("/")[0] for i in ids} == set(TASKS)
    with pytest.raises(UnknownTaskError, match="Did you mean"):
        env.reset(options={"task_id": "boil/var99"})


def test_gold_path_wins_with_full_score_and_rewards_sum_to_score(env):
    for task_id in ["boil/var0", "find-animal/var3", "chemistry-mix-paint-secondary-color/var1"]:
        env.reset(options={"task_id": task_id})
        gold = env.unwrapped.gold_actions()
        steps = _play(env, gold)
        obs, _, terminated, score, won = steps[-1]
        assert terminated and won and score == 1.0, (task_id, obs)
        assert sum(s[1] for s in steps) == pytest.approx(1.0)


def test_failing_a_task_scores_zero_and_ends_the_episode(env):
    env.reset(options={"task_id": "find-animal/var0"})
    env.step("look around")
    obs, reward, terminated, _, info = env.step("focus on air")  # air is not an animal: task failed
    assert terminated and info["failed"] and not info["won"], obs
    assert info["score"] == 0.0 and info["raw_score"] == -1.0 and reward <= 0.0


def test_bad_actions_are_ordinary_steps(env):
    env.reset(options={"task_id": "boil/var0"})
    before = env.unwrapped.admissible_actions()
    for action in ["", "   ", "x" * 100_000, "go \ud800", "\x00\x1b[31m", "🙂 ünïcödé", "fly to the moon"]:
        obs, reward, terminated, _, _ = env.step(action)
        assert isinstance(obs, str) and obs and reward == 0.0 and not terminated
    assert env.unwrapped.admissible_actions() == before  # the world did not move


def test_checkpoint_diverge_restore_gives_identical_canonical_transcript(env):
    env.reset(options={"task_id": "boil/var0"})
    gold = env.unwrapped.gold_actions()
    k = 6
    _play(env, gold[:k])
    ckpt = r3l_envs.checkpoint(env)
    reference = _play(env, gold[k : k + 8])
    _play(env, ["teleport to kitchen", "look around", "open freezer"])  # diverge
    r3l_envs.restore(env, ckpt)
    assert _play(env, gold[k : k + 8]) == reference
    # and into a fresh env (its own JVM), from bytes
    other = gym.make("r3l/ScienceWorld-v0", tasks=TASKS)
    try:
        r3l_envs.restore(other, r3l_envs.Checkpoint.from_bytes(ckpt.to_bytes()))
        assert _play(other, gold[k : k + 8]) == reference
    finally:
        other.close()


def test_replay_detects_divergence(env):
    env.reset(options={"task_id": "boil/var0"})
    env.step("look around")
    ckpt = r3l_envs.checkpoint(env)
    payload = r3l_envs.codec.decode(ckpt.payload)
    payload["env"]["episode"].digests[-1] = "0" * 16  # a recorded observation the engine will not produce
    encoded = r3l_envs.codec.encode(payload)
    forged = dataclasses.replace(ckpt, payload=encoded, digest=hashlib.sha256(encoded).hexdigest())
    with pytest.raises(ReplayDivergenceError, match="diverged at step 1"):
        r3l_envs.restore(env, forged)
    r3l_envs.restore(env, ckpt)  # the env is still usable
    assert env.step("look around")[0].startswith("This room is called")


def test_jvm_death_mid_episode_then_restore_continues_exactly(env):
    env.reset(options={"task_id": "boil/var0"})
    gold = env.unwrapped.gold_actions()
    _play(env, gold[:5])
    ckpt = r3l_envs.checkpoint(env)
    reference = _play(env, gold[5:12])
    r3l_envs.restore(env, ckpt)
    jvm = env.unwrapped.jvm
    old_pid = jvm.pid
    jvm.kill()  # as the OOM killer would
    with pytest.raises(EngineError, match="restore"):
        env.step(gold[5])
    with pytest.raises(EngineError):
        env.step(gold[5])  # still dead: no silent restart mid-episode
    r3l_envs.restore(env, r3l_envs.checkpoint(env))  # the episode record survived the failed steps
    assert jvm.pid != old_pid and jvm.running
    assert _play(env, gold[5:12]) == reference


def test_reset_recovers_after_jvm_death(env):
    env.reset(options={"task_id": "boil/var0"})
    env.unwrapped.jvm.kill()
    obs, _ = env.reset(options={"task_id": "boil/var0"})
    assert "This room is called" in obs and env.unwrapped.jvm.running


def test_admissible_actions_do_not_change_the_episode(env):
    """The engine's action enumeration draws from the world's random generator; we put its state back."""
    env.reset(options={"task_id": "chemistry-mix-paint-secondary-color/var1"})
    gold = env.unwrapped.gold_actions()
    plain = _play(env, gold[:6])
    env.reset(options={"task_id": "chemistry-mix-paint-secondary-color/var1"})
    asked = []
    for action in gold[:6]:
        first = env.unwrapped.admissible_actions()
        assert env.unwrapped.admissible_actions() == first  # same state, same answer
        asked += _play(env, [action])
    assert asked == plain


def test_admissible_actions_kwarg_fills_info_on_every_step():
    with gym.make("r3l/ScienceWorld-v0", tasks=["find-non-living-thing"], admissible_actions=True) as env:
        _, info = env.reset(seed=0)
        assert "look around" in info["admissible_actions"]
        action = next(a for a in info["admissible_actions"] if a.startswith("teleport to"))
        ckpt = r3l_envs.checkpoint(env)
        expected = env.step(action)
        assert expected[4]["admissible_actions"] and expected[4]["admissible_actions"] != info["admissible_actions"]
        r3l_envs.restore(env, ckpt)
        assert env.step(action) == expected  # the admissible lists are reproduced after a replay restore


@pytest.fixture(scope="module")
def gold_envs():
    """Two envs on the test split (one JVM each): one stepping through the step helper, one through
    ``PythonInterface.step``. Some gold paths (mendelian genetics, inclined planes) are longer than the default
    100-step limit."""
    with (
        gym.make("r3l/ScienceWorld-v0", split="test", max_episode_steps=250) as env,
        gym.make("r3l/ScienceWorld-v0", split="test", max_episode_steps=250) as plain,
    ):
        plain.unwrapped.jvm.step_helper = False
        yield env, plain


def test_there_are_30_task_types():
    assert len(set(task_names())) == 30


# one case per task type, so that parallel workers share the 30 gold paths (~3 minutes played in one test)
@pytest.mark.slow
@pytest.mark.parametrize("task", task_names())
def test_gold_path_wins_every_task_type(gold_envs, task):
    """The first test-split variation of each task type, played along its gold path, wins with full score and
    rewards summing to 1; played again through ``PythonInterface.step`` (no step helper), the transcript is the
    same."""
    env, plain = gold_envs
    task_id = next(i for i in env.unwrapped.task_ids if i.split("/")[0] == task)
    env.reset(options={"task_id": task_id})
    gold = env.unwrapped.gold_actions()
    steps = _play(env, gold)
    _, _, terminated, score, won = steps[-1]
    assert terminated and won and score == 1.0, (task_id, score, won)
    assert sum(s[1] for s in steps) == pytest.approx(1.0)
    plain.reset(options={"task_id": task_id})
    assert _play(plain, gold) == steps
    assert env.unwrapped.jvm.uses_step_helper and not plain.unwrapped.jvm.uses_step_helper
