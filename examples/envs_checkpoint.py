"""Gymnasium envs with exact checkpoint/restore: play, snapshot mid-episode, branch from the snapshot elsewhere.

No model: a seeded random agent picks admissible actions (math envs get a fixed wrong answer, then a guess), so
what you see is the env API and the checkpoint machinery that reflect-then-retry relies on. Per env it

1. makes the env with ``gym.make`` (wrappers included) and plays a few actions from ``reset(seed=...)``;
2. takes a checkpoint mid-episode and writes it to bytes (plain data behind an integrity tag, never a pickle;
   unkeyed bytes of an env whose native state needs a key, TextWorld, restore by verified replay: pass ``key=``
   to ``to_bytes``/``from_bytes`` to restore them natively);
3. plays the original on, then restores the bytes into a *fresh* env (as another process or machine would) and
   replays the same actions: every observation, reward and info must be identical;
4. restores once more and branches: a different action from the same state (a retry from the pivot).

Run it (``--small``: Countdown and one TextWorld game, about 2 s; the full run adds every env that works
offline, ScienceWorld only where Java is installed: 15 s wall on a 2-core CPU at load ~7, once the first use has
built the TextWorld and ALFWorld games and the WebShop index)::

    python examples/envs_checkpoint.py --small
    python examples/envs_checkpoint.py
"""

from __future__ import annotations

import argparse
import logging
import shutil
import time
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

import r3l_envs

logger = logging.getLogger("envs_checkpoint")

# id -> gym.make kwargs that work offline (no download): small task sets so a first run builds little.
SMALL = {"r3l/Countdown-v0": {}, "r3l/TextWorld-v0": {"max_tasks": 1}}
FULL = {
    **SMALL,
    "r3l/GSMSymbolic-v0": {"num_tasks": 20},
    "r3l/ReasoningGym-v0": {"num_tasks": 20},
    "r3l/CHAMP-v0": {},
    "r3l/ALFWorld-v0": {"max_tasks": 1},
    "r3l/WebShop-v0": {"num_products": 300},
    "r3l/ScienceWorld-v0": {"tasks": ["find-non-living-thing"]},  # needs Java (skipped without it)
}
MATH_GUESSES = ("\\boxed{7}", "The answer is 42.")
GAME_ACTIONS = ("look around", "inventory")  # where a game lists no admissible actions (ScienceWorld)


@dataclass
class EnvReport:
    """What one env showed: the restore kind, the checkpoint's size and whether the replay matched."""

    env_id: str
    restore_kind: str
    checkpoint_bytes: int
    steps_before: int
    steps_after: int
    identical: bool
    branched: bool
    seconds: float


def options(env: gym.Env, info: dict[str, Any]) -> tuple[str, ...]:
    """The admissible actions, or where the env lists none, free text: a guess (math) or a plain command."""
    fallback = MATH_GUESSES if r3l_envs.env_info(env).is_math else GAME_ACTIONS
    return tuple(info["admissible_actions"] or ()) or fallback


def play(env: gym.Env, info: dict[str, Any], rng: np.random.Generator, steps: int) -> list[tuple[str, tuple]]:
    """Up to ``steps`` random actions (fewer if the episode ends): ``(action, step result)`` pairs."""
    out = []
    for _ in range(steps):
        pool = options(env, info)
        action = pool[int(rng.integers(len(pool)))]
        result = env.step(action)
        out.append((action, result))
        info = result[4]
        if result[2] or result[3]:
            break
    return out


def tour(env_id: str, kwargs: dict[str, Any], *, seed: int = 0, before: int = 2, after: int = 3) -> EnvReport:
    """Steps 1-4 of the module docstring on one env."""
    start = time.perf_counter()
    env = gym.make(env_id, **kwargs)
    rng = np.random.default_rng(seed)
    _, info = env.reset(seed=seed)
    played = play(env, info, rng, before)
    info = played[-1][1][4] if played else info
    ended = bool(played) and (played[-1][1][2] or played[-1][1][3])
    data = r3l_envs.checkpoint(env).to_bytes()  # what crosses to another process: bytes, verified on reading
    tail = [] if ended else play(env, info, rng, after)

    fresh = gym.make(env_id, **kwargs)
    r3l_envs.restore(fresh, r3l_envs.Checkpoint.from_bytes(data))
    again = [(a, fresh.step(a)) for a, _ in tail]
    identical = again == tail

    # branch: from the same snapshot, another action than the original took (when there is another one)
    other = gym.make(env_id, **kwargs)
    r3l_envs.restore(other, r3l_envs.Checkpoint.from_bytes(data))
    others = [a for a in options(env, info) if not tail or a != tail[0][0]]
    branched = bool(tail) and bool(others)
    if branched:
        obs, reward, *_ = other.step(others[0])
        logger.info("  branch: %r instead of %r -> reward %s, %s", others[0], tail[0][0], reward, _short(obs))
    for e in (env, fresh, other):
        e.close()
    return EnvReport(
        env_id,
        env.unwrapped.restore_kind,
        len(data),
        len(played),
        len(tail),
        identical,
        branched,
        time.perf_counter() - start,
    )


def _short(text: str, n: int = 70) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def main(argv: list[str] | None = None) -> list[EnvReport]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="Countdown and one TextWorld game only (CI)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    envs = dict(SMALL if args.small else FULL)
    if shutil.which("java") is None and envs.pop("r3l/ScienceWorld-v0", None) is not None:
        logger.info("ScienceWorld skipped: it needs a Java runtime")
    reports = []
    for env_id, kwargs in envs.items():
        logger.info("%s", env_id)
        report = tour(env_id, kwargs, seed=args.seed)
        logger.info(
            "  %s restore, checkpoint %d bytes after %d steps; %d steps replayed in a fresh env: %s (%.1f s)",
            report.restore_kind,
            report.checkpoint_bytes,
            report.steps_before,
            report.steps_after,
            "identical" if report.identical else "DIFFERENT",
            report.seconds,
        )
        if not report.identical:
            raise SystemExit(f"{env_id}: checkpoint/restore was not exact; please report this as a bug")
        reports.append(report)
    logger.info("%d envs: every restore replayed exactly", len(reports))
    return reports


if __name__ == "__main__":
    main()
