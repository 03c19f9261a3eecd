"""r3l/ALFWorld-v0 on the real engine, with games from the offline generator (built once into the user cache)."""

from __future__ import annotations

import json
import os
import pickle
import random
import shutil
import subprocess
import sys
import textwrap

import gymnasium as gym
import pytest

import r3l_envs
from r3l_envs.errors import DataNotFoundError

pytest.importorskip("alfworld")

ENV_ID = "r3l/ALFWorld-v0"


def make(**kwargs) -> gym.Env:
    kwargs.setdefault("max_tasks", 6)  # one task of each of the six task types
    return gym.make(ENV_ID, **kwargs)


@pytest.fixture(scope="session")
def env():
    env = make()
    yield env
    env.close()


@pytest.mark.slow
@pytest.mark.parametrize("index", range(6))
def test_expert_wins_and_checkpoint_is_exact_for_every_task_type(env, index):
    from r3l_envs.alfworld import TASK_TYPES

    task_id = env.unwrapped.task_ids[index]
    obs, info = env.reset(options={"task_id": task_id})
    assert info["source"] == "generated" and info["task"] in obs
    assert "policy_commands" not in info and "walkthrough" not in info
    plan = env.unwrapped.expert_plan()
    k = len(plan) // 2
    for action in plan[:k]:
        env.step(action)
    ckpt = r3l_envs.checkpoint(env)
    original = [env.step(a) for a in plan[k:]]
    assert original[-1][2] and original[-1][4]["won"] and sum(s[1] for s in original) == 1.0
    rng = random.Random(index)
    env.unwrapped.validate_task_id(task_id)
    r3l_envs.restore(env, ckpt)
    for _ in range(5):  # diverge
        *_, info = env.step(rng.choice(env.unwrapped._episode.info["admissible_actions"]))
    r3l_envs.restore(env, ckpt)  # native: same episode
    assert [env.step(a) for a in plan[k:]] == original
    env.reset(options={"task_id": task_id})
    r3l_envs.restore(env, ckpt)  # after a reset the planner ids are gone: the planner restarts at the facts
    assert [env.step(a) for a in plan[k:]] == original
    fresh = make()
    r3l_envs.restore(fresh, r3l_envs.Checkpoint.from_bytes(ckpt.to_bytes()))
    assert [fresh.step(a) for a in plan[k:]] == original
    fresh.close()
    assert json.loads((env.unwrapped._path.parent / "traj_data.json").read_text())["task_type"] == TASK_TYPES[index]


def test_restore_in_another_process(env, tmp_path):
    """A checkpoint's bytes restore natively in another process (replay is made to fail there), identically."""
    env.reset(options={"task_id": env.unwrapped.task_ids[0]})
    plan = env.unwrapped.expert_plan()
    for action in plan[:2]:
        env.step(action)
    (tmp_path / "ckpt").write_bytes(r3l_envs.checkpoint(env).to_bytes())
    expected = [(o, r, t, tr, i["admissible_actions"], i["won"]) for o, r, t, tr, i in (env.step(a) for a in plan[2:])]
    code = textwrap.dedent(
        f"""
        import pickle, sys, gymnasium as gym, r3l_envs
        env = gym.make({ENV_ID!r}, max_tasks=6)
        env.unwrapped._replay = None  # a replay would raise: the restore must be native
        r3l_envs.restore(env, r3l_envs.Checkpoint.from_bytes(open(sys.argv[1], "rb").read()))
        steps = (env.step(a) for a in {plan[2:]!r})
        out = [(o, r, t, tr, i["admissible_actions"], i["won"]) for o, r, t, tr, i in steps]
        sys.stdout.buffer.write(pickle.dumps(out))
        """
    )
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "ckpt")], capture_output=True, check=True)
    assert pickle.loads(done.stdout) == expected and expected[-1][-1]


def test_garbage_actions_get_nothing_happens(env):
    _, info0 = env.reset(options={"task_id": env.unwrapped.task_ids[0]})
    for action in ["", "x" * 100_000, "\x00\x1b[31m", "🙂 ☃", "fly to the moon"]:
        obs, reward, terminated, _, info = env.step(action)
        assert obs == "Nothing happens." and reward == 0.0 and not terminated
    assert info["admissible_actions"] == info0["admissible_actions"]


def test_two_instances_in_one_process_do_not_interfere(env):
    """Two engines on the same game (sharing the process-wide caches) step in turns; each plays as if alone."""

    def play(*envs: gym.Env, steps: int = 8) -> list:
        infos = [e.reset(options={"task_id": e.unwrapped.task_ids[0]})[1] for e in envs]
        transcripts: list[list] = [[] for _ in envs]
        for i in range(steps):
            for j, e in enumerate(envs):
                pool = infos[j]["admissible_actions"]
                out = e.step(pool[(i * (j + 2)) % len(pool)])
                transcripts[j].append(out)
                infos[j] = out[4]
        return transcripts

    other, solo = make(), make()
    together = play(env, other)
    assert together[0] != together[1]  # they did take different paths
    assert play(solo) == together[:1]
    other.close()
    solo.close()


def test_speedups_change_nothing_but_speed(env):
    """The same random actions, checkpoints and restores give the same transcript without the speed-ups."""
    from r3l_envs.alfworld import speedups

    def play() -> list:
        rng = random.Random(7)
        _, info = env.reset(options={"task_id": env.unwrapped.task_ids[0]})
        out, ckpt = [info], None
        for step in range(14):
            if step == 4:
                ckpt = r3l_envs.checkpoint(env)
            if step == 10:
                r3l_envs.restore(env, ckpt)  # native restore, then the same continuation from step 4
                rng = random.Random(4)
            out.append(env.step(rng.choice(info["admissible_actions"] + ["fly to the moon"])))
            info = out[-1][4]
        return out

    assert speedups.enabled()  # on by default
    fast = play()
    with speedups.disabled():
        slow = play()
    speedups.set_enabled(False)  # the process-wide switch (a benchmark's baseline)
    try:
        assert not speedups.enabled()
        off = play()
    finally:
        speedups.set_enabled(True)
    assert fast == slow == off


def test_expert_plan_replans_after_leaving_the_walkthrough(env):
    from r3l_envs.alfworld import engine

    env.reset(options={"task_id": env.unwrapped.task_ids[0]})
    walkthrough = env.unwrapped.expert_plan()
    assert engine.replan(env.unwrapped._path, []) == walkthrough  # the stored walkthrough is the planner's plan
    _, _, _, _, info = env.step("look")
    *_, info = env.step(next(a for a in info["admissible_actions"] if a.startswith("go to") and a != walkthrough[0]))
    plan = env.unwrapped.expert_plan()
    assert plan != walkthrough[2:]  # not the rest of the walkthrough: a fresh plan from where the agent is
    for action in plan:
        *_, info = env.step(action)
    assert info["won"]


def test_official_loader_reads_the_download_layout(env, tmp_path):
    """A fixture in alfworld-download's layout (json_2.1.1/<split>/<task>/<trial>/) made from generated games."""
    env.reset(options={"task_id": env.unwrapped.task_ids[0]})
    trial = env.unwrapped._path.parent
    for split in ("train", "valid_seen", "valid_unseen"):
        target = tmp_path / "json_2.1.1" / split / "pick_and_place_simple-Thing-None-Place-1" / "trial_T0"
        shutil.copytree(trial, target)
    unsolvable = tmp_path / "json_2.1.1" / "train" / "pick_and_place_simple-X-None-Y-2" / "trial_T1"
    shutil.copytree(trial, unsolvable)
    game = json.loads((unsolvable / "game.tw-pddl").read_text())
    (unsolvable / "game.tw-pddl").write_text(json.dumps({**game, "solvable": False}))

    official = gym.make(ENV_ID, split="valid_seen", data_path=str(tmp_path))
    assert list(official.unwrapped.task_ids) == ["pick_and_place_simple-Thing-None-Place-1/trial_T0"]
    obs, info = official.reset(seed=0)
    assert info["source"] == "official" and info["task"] in obs
    train = gym.make(ENV_ID, split="train", data_path=str(tmp_path))
    assert len(train.unwrapped.task_ids) == 1  # the unsolvable game is skipped, as ALFWorld does
    with pytest.raises(DataNotFoundError, match="alfworld-download"):
        gym.make(ENV_ID, split="train", data_path=str(tmp_path / "nowhere"))


def test_games_generate_concurrently_in_a_fresh_process(tmp_path):
    """Rollouts reset envs from a thread pool, so the first resets of a run generate games in parallel: TextWorld's
    logic parser is shared module-wide and must be locked before a game is generated, not only once one is played."""
    code = textwrap.dedent(
        """
        from concurrent.futures import ThreadPoolExecutor
        import gymnasium as gym
        import r3l_envs

        envs = [gym.make("r3l/ALFWorld-v0", max_tasks=4) for _ in range(4)]
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda i: envs[i].reset(options={"task_id": envs[i].unwrapped.task_ids[i]}), range(4)))
        """
    )
    env = {**os.environ, "R3L_CACHE_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
