"""Native restores into any instance of the same env id and kwargs.

A retry may run on another env instance than its base (another thread's env, another Ray worker). For each
env that declares ``restore_kind = "native"``, a checkpoint taken in instance A restores into a fresh instance
B, also through ``to_bytes``/``from_bytes``, without replaying (replay is made to fail in B), and B's
continuation is A's, step for step. ScienceWorld has no save API and restores by verified replay everywhere.
"""

from __future__ import annotations

import random

import gymnasium as gym
import pytest

import r3l_envs

# id, kwargs, index of the task to play (games small enough for a unit test)
ENVS = {
    "alfworld": ("r3l/ALFWorld-v0", {"max_tasks": 6}, 2),
    "textworld": ("r3l/TextWorld-v0", {"game_type": "cooking", "difficulty": 1, "max_tasks": 2}, 0),
    "webshop": ("r3l/WebShop-v0", {"num_products": 300}, 0),
    "countdown": ("r3l/Countdown-v0", {}, 0),
}
_ENGINES = {"alfworld": "alfworld", "textworld": "textworld"}


def _make(name: str) -> gym.Env:
    if name in _ENGINES:
        pytest.importorskip(_ENGINES[name])
    env_id, kwargs, _ = ENVS[name]
    return gym.make(env_id, **kwargs)


def _forbid_replay(env: gym.Env, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make a replay in ``env`` fail: any restore that passes is native."""

    def no_replay(episode):
        raise AssertionError(f"{type(env.unwrapped).__name__} restored by replay, not natively")

    monkeypatch.setattr(env.unwrapped, "_replay", no_replay)


def _played(name: str, env: gym.Env) -> tuple[list[str], int]:
    """Actions of one episode of the task and the step to checkpoint at; ``env`` is reset to the task."""
    base = env.unwrapped
    task_id = base.task_ids[ENVS[name][2]]
    actions = list(base.expert_actions(task_id))
    if base.is_math:
        actions = ["0", *actions]  # a wrong attempt first, so the checkpoint is inside the episode
    env.reset(options={"task_id": task_id})
    return actions, max(1, len(actions) // 2)


@pytest.mark.parametrize("name", list(ENVS))
def test_checkpoint_restores_natively_in_a_fresh_instance(name, monkeypatch):
    a = _make(name)
    actions, k = _played(name, a)
    for action in actions[:k]:
        a.step(action)
    ckpt = r3l_envs.checkpoint(a)
    expected = [a.step(action) for action in actions[k:]]
    assert expected[-1][4]["won"]

    b = _make(name)
    _forbid_replay(b, monkeypatch)
    r3l_envs.restore(b, r3l_envs.Checkpoint.from_bytes(ckpt.to_bytes(), trusted=True))  # our own bytes
    assert [b.step(action) for action in actions[k:]] == expected
    r3l_envs.restore(b, ckpt)  # again in B, which now holds that state
    assert [b.step(action) for action in actions[k:]] == expected
    a.close()
    b.close()


def test_alfworld_restores_natively_across_episodes_and_tasks(monkeypatch):
    """A checkpoint restores natively into its own instance after a reset, and into an instance that is playing
    another task (another game loaded); checkpoints taken after such a restore restore natively too."""
    a, b = _make("alfworld"), _make("alfworld")
    actions, k = _played("alfworld", a)
    for action in actions[:k]:
        a.step(action)
    ckpt = r3l_envs.checkpoint(a)
    expected = [a.step(action) for action in actions[k:]]
    for env in (a, b):
        _forbid_replay(env, monkeypatch)

    a.reset(options={"task_id": a.unwrapped.task_ids[0]})  # the planner registry of ckpt's episode is gone
    r3l_envs.restore(a, ckpt)
    assert [a.step(action) for action in actions[k:]] == expected

    b.reset(options={"task_id": b.unwrapped.task_ids[5]})  # another game in B
    rng = random.Random(0)
    for _ in range(3):
        b.step(rng.choice(b.unwrapped._episode.info["admissible_actions"]))
    r3l_envs.restore(b, ckpt)
    b.step(actions[k])
    later = r3l_envs.checkpoint(b)  # taken in B's registry, after the adopted state
    assert [b.step(action) for action in actions[k + 1 :]] == expected[1:]
    r3l_envs.restore(a, later)
    assert [a.step(action) for action in actions[k + 1 :]] == expected[1:]
    r3l_envs.restore(b, later)
    assert [b.step(action) for action in actions[k + 1 :]] == expected[1:]
    a.close()
    b.close()


@pytest.mark.slow
def test_alfworld_engine_from_the_cached_game_logic_plays_as_a_freshly_parsed_one():
    """Speed-up 6 (a fresh instance's engine takes a copy of the game logic parsed once per process): the same
    actions give the same transcript as an engine whose logic was parsed with the speed-ups off."""
    from r3l_envs.alfworld import speedups

    def play(env: gym.Env) -> list:
        rng = random.Random(3)
        _, info = env.reset(options={"task_id": env.unwrapped.task_ids[1]})
        out = [info]
        for _ in range(12):
            out.append(env.step(rng.choice(info["admissible_actions"])))
            info = out[-1][4]
        return out

    warm = _make("alfworld")
    play(warm)  # the logic is in the cache now
    cached = _make("alfworld")
    fast = play(cached)
    with speedups.disabled():
        parsed = _make("alfworld")
        slow = play(parsed)
    assert fast == slow
    for env in (warm, cached, parsed):
        env.close()


def test_textworld_instances_share_the_loaded_game():
    """The per-process game cache: a second instance's engine takes the Game the first one loaded."""
    a, b = _make("textworld"), _make("textworld")
    task_id = a.unwrapped.task_ids[0]
    a.reset(options={"task_id": task_id})
    b.reset(options={"task_id": task_id})
    assert a.unwrapped._game is b.unwrapped._game
    a.close()
    b.close()


_SAS = """begin_version
3
end_version
begin_metric
0
end_metric
3
begin_variable
var0
-1
3
Atom at(agent1, loc1)
Atom at(agent1, loc2)
<none of those>
end_variable
begin_variable
var1
-1
2
Atom opened(box1)
NegatedAtom opened(box1)
end_variable
begin_variable
var2
0
2
Atom ready()
NegatedAtom ready()
end_variable
0
begin_state
0
1
1
end_state
begin_goal
1
1 0
end_goal
0
0"""


def test_planner_task_at_sets_the_initial_state_from_facts():
    from r3l_envs.alfworld.planner import task_at

    def state(facts):
        lines = task_at(_SAS, facts).split("\n")
        start = lines.index("begin_state")
        return lines[:start] + lines[lines.index("end_state") :], lines[start + 1 : lines.index("end_state")]

    outside, values = state([("at", ("agent1", "loc2")), ("opened", ("box1",)), ("static", ("x",))])
    assert values == ["1", "0", "1"]  # the derived variable keeps the task's value: the planner derives it
    assert outside == state([])[0] and "\n".join(outside).startswith("begin_version")
    assert state([])[1] == ["2", "1", "1"]  # no atom holds: <none of those>, the negated atom
    with pytest.raises(ValueError, match="cannot both hold"):
        task_at(_SAS, [("at", ("agent1", "loc1")), ("at", ("agent1", "loc2"))])
    assert task_at(_SAS, [("at", ("agent1", "loc1")), ("ready", ())]) == _SAS  # the task's own initial state


def _planner_atoms(env: gym.Env) -> list[str]:
    """The fast-downward state the engine of ``env`` is in, as the planner names its facts."""
    import fast_downward

    from r3l_envs.alfworld.engine import core

    lib = core(env.unwrapped._engine).downward_lib
    atoms = (fast_downward.Atom * lib.get_state_size())()
    lib.get_state(atoms)
    return [atom.name for atom in atoms]


def test_alfworld_adopted_planner_state_is_the_checkpoints():
    a, b = _make("alfworld"), _make("alfworld")
    actions, k = _played("alfworld", a)
    for action in actions[:k]:
        a.step(action)
    ckpt = r3l_envs.checkpoint(a)
    r3l_envs.restore(b, ckpt)
    assert _planner_atoms(b) == _planner_atoms(a)
    a.close()
    b.close()
