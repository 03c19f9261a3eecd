"""The two model-free baselines: a uniformly random admissible policy, and the best fixed action sequence.

Both play the env directly (no prompts, no model). A fixed sequence is replayed action by action on every test
task, up to the turn budget; it wins a task if the env reports ``won`` before the sequence or the budget ends.
The candidates are shared as a prefix tree and each test task is walked once, with a checkpoint at every branch
(native restores take about a millisecond), so 100 candidates cost far less than 100 replays.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from tqdm import tqdm

import r3l_envs
from wrappers.retry.oracle import expert_plan


def random_success(
    env: gym.Env, ids: Sequence[str], *, max_turns: int, per_task: int, seed: int, progress: bool = True
) -> dict[str, Any]:
    """Play a uniformly random admissible action each turn, ``per_task`` episodes per task."""
    rng = np.random.default_rng([seed, 7])
    wins = episodes = 0
    sequences: Counter[tuple[str, ...]] = Counter()
    for task in tqdm(ids, desc="random admissible", unit="task", disable=not progress):
        for _ in range(per_task):
            _, info = env.reset(options={"task_id": task})
            actions: list[str] = []
            for _ in range(max_turns):
                admissible = info.get("admissible_actions") or []
                if not admissible:
                    break
                actions.append(admissible[int(rng.integers(len(admissible)))])
                _, _, terminated, truncated, info = env.step(actions[-1])
                if terminated or truncated:
                    break
            wins += int(bool(info.get("won")))
            episodes += 1
            sequences[tuple(actions)] += 1
    return {"success": wins / max(episodes, 1), "wins": wins, "episodes": episodes, "sequences": sequences}


def train_plans(env: gym.Env, ids: Iterable[str]) -> list[tuple[str, ...]]:
    """The expert plans of ``ids`` (tasks of ``env``'s split; env declares an expert), in order."""
    plans = []
    for task in tqdm(list(ids), desc="train expert plans", unit="task"):
        plan = expert_plan(env, task)
        if plan:
            plans.append(tuple(plan))
    return plans


class _Node:
    __slots__ = ("children", "ends")

    def __init__(self) -> None:
        self.children: dict[str, _Node] = {}
        self.ends: list[int] = []  # candidates whose sequence ends here


def _trie(candidates: Sequence[Sequence[str]]) -> _Node:
    root = _Node()
    for i, seq in enumerate(candidates):
        node = root
        for action in seq:
            node = node.children.setdefault(action, _Node())
        node.ends.append(i)
    return root


def _below(node: _Node) -> list[int]:
    out, stack = [], [node]
    while stack:
        n = stack.pop()
        out += n.ends
        stack += n.children.values()
    return out


def _walk(env: gym.Env, node: _Node, won: set[int]) -> None:
    """Step every branch below ``node`` from the env's current state; add the candidates that win to ``won``."""
    children = list(node.children.items())
    saved = r3l_envs.checkpoint(env) if len(children) > 1 else None
    for k, (action, child) in enumerate(children):
        if k:
            r3l_envs.restore(env, saved)
        _, _, terminated, truncated, info = env.step(action)
        if info.get("won"):
            won.update(_below(child))
        elif not (terminated or truncated):
            _walk(env, child, won)


def fixed_habit_success(
    env: gym.Env, ids: Sequence[str], candidates: dict[tuple[str, ...], str], *, max_turns: int, progress: bool = True
) -> dict[str, Any]:
    """Replay every candidate sequence (cut to ``max_turns``) on every task; the best one's success.

    Args:
        candidates: sequence -> where it came from (``"train plan"``, ``"common random sequence"``, ...).
    """
    seqs = list(dict.fromkeys(tuple(s[:max_turns]) for s in candidates if s))
    sources = {tuple(s[:max_turns]): src for s, src in reversed(list(candidates.items())) if s}
    root = _trie(seqs)
    wins = np.zeros(len(seqs), dtype=int)
    for task in tqdm(ids, desc=f"{len(seqs)} fixed sequences", unit="task", disable=not progress):
        env.reset(options={"task_id": task})
        won: set[int] = set()
        _walk(env, root, won)
        for i in won:
            wins[i] += 1
    best = int(np.argmax(wins)) if len(seqs) else None
    order = np.argsort(-wins, kind="stable")[:5]
    return {
        "success": float(wins[best] / max(len(ids), 1)) if best is not None else 0.0,
        "best": None if best is None else {"actions": list(seqs[best]), "source": sources[seqs[best]]},
        "candidates": len(seqs),
        "top": [{"actions": list(seqs[i]), "source": sources[seqs[i]], "wins": int(wins[i])} for i in order if wins[i]],
    }
