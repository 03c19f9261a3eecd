"""``check_env``: gymnasium's checker plus the r3l contract, raising with a message that names the fix.

What it checks, on the env it is given and on fresh envs made from the same spec:

1. gymnasium's own ``check_env`` (spaces, reset/step signatures, seeding, render modes, close);
2. the ``info`` keys and their types at every step, and the reward bound (episode sum ≤ 1);
3. determinism: the same seed and actions give the same transcript, twice;
4. checkpoint exactness: checkpoints at several steps restore (into the same env after it moved on, into a
   fresh env, natively and by verified replay) and continue with the identical transcript;
5. ``Checkpoint`` pickles and round-trips through ``to_bytes()`` / ``Checkpoint.from_bytes()``;
6. the env itself pickles mid-episode (constructor arguments + checkpoint state, see ``TextEnv.__reduce__``):
   the copy and the original both continue with the identical transcript;
7. a battery of bad actions: each is an ordinary step that returns an observation, and the env keeps working.
"""

from __future__ import annotations

import math
import pickle
import warnings
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.utils.env_checker import check_env as gymnasium_check_env

from r3l_envs.checkpoint import Checkpoint, checkpoint, restore
from r3l_envs.core import INFO_KEYS, TextEnv
from r3l_envs.errors import CheckpointError, EnvCheckError

__all__ = ["BAD_ACTIONS", "check_env"]

#: Actions every env must survive as ordinary steps.
BAD_ACTIONS: tuple[str, ...] = (
    "",
    "   \t\n ",
    "x" * 100_000,
    "go \ud800 north \udfff",  # lone surrogates: not encodable as UTF-8
    "\x00\x01\x1b[31m\x7f",  # NUL, control characters, an ANSI escape
    "🙂 ünïcödé ☃ 中文",
    "this action is certainly not admissible 1234",
)

# A few strings that look like answers, for envs without a finite action list (e.g. math).
_FREE_TEXT_ACTIONS = ("The answer is 42.", "\\boxed{1}", "<answer>3</answer>", "look", "#### 7", "help")

Step = tuple[str, float, bool, bool, dict[str, Any]]


def check_env(env: gym.Env, *, seed: int = 0, max_steps: int = 8, skip_gymnasium: bool = False) -> None:
    """Check that ``env`` honours the gymnasium API and the r3l contract; raise :class:`EnvCheckError` if not.

    Args:
        env: an env from ``gym.make("r3l/...")`` (or an unwrapped ``TextEnv``). It is reset and stepped.
        seed: the seed of the checked episodes.
        max_steps: length of the checked episode prefix (checkpoints are taken at 0, 1 and max_steps // 2).
        skip_gymnasium: skip gymnasium's own checker (e.g. when it was already run).
    """
    base = env.unwrapped
    if not isinstance(base, TextEnv):
        raise EnvCheckError(f"{type(base).__qualname__} is not an r3l_envs.TextEnv; subclass TextEnv")
    make_fresh = _fresh_factory(env)
    if not skip_gymnasium:
        _run_gymnasium_checker(base)

    reference = _play(env, seed, max_steps)
    _check_transcript(reference)
    if make_fresh is not None:
        with _closing(make_fresh()) as other:
            _compare(reference, _play(other, seed, max_steps), "a second env made from the same spec")
    _compare(reference, _play(env, seed, max_steps), "a second reset with the same seed")

    try:
        _check_checkpoints(env, make_fresh, seed, max_steps, reference)
    except CheckpointError as exc:
        raise EnvCheckError(f"checkpoint/restore failed: {exc}") from exc
    _check_pickle(env, seed, max_steps, reference)
    _check_bad_actions(env, seed)


# ---------------------------------------------------------------------- the pieces
def _run_gymnasium_checker(base: TextEnv) -> None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the checker warns about things the r3l checks cover in detail
            gymnasium_check_env(base, skip_close_check=base.spec is None)
    except AssertionError as exc:
        raise EnvCheckError(f"gymnasium's check_env failed: {exc}") from exc


def _fresh_factory(env: gym.Env) -> Callable[[], gym.Env] | None:
    spec = env.spec
    if spec is None:
        return None
    return lambda: gym.make(spec)


class _closing:
    def __init__(self, env: gym.Env):
        self.env = env

    def __enter__(self) -> gym.Env:
        return self.env

    def __exit__(self, *exc: object) -> None:
        self.env.close()


def _policy_action(info: dict[str, Any], rng: np.random.Generator) -> str:
    actions = info.get("admissible_actions")
    pool = actions if actions else _FREE_TEXT_ACTIONS
    return pool[int(rng.integers(len(pool)))]


def _play(env: gym.Env, seed: int, max_steps: int) -> dict[str, Any]:
    """A transcript of one episode prefix under a seeded action policy, with checkpoints along the way."""
    obs, info = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    transcript: dict[str, Any] = {"reset": (obs, info), "steps": [], "actions": [], "checkpoints": {}}
    ckpt_at = {0, 1, max_steps // 2}
    for t in range(max_steps):
        if t in ckpt_at:
            transcript["checkpoints"][t] = checkpoint(env)
        action = _policy_action(info, rng)
        obs, reward, terminated, truncated, info = env.step(action)
        transcript["actions"].append(action)
        transcript["steps"].append((obs, reward, terminated, truncated, info))
        if terminated or truncated:
            break
    return transcript


def _check_info(info: dict[str, Any], where: str, step: int) -> None:
    missing = [key for key in INFO_KEYS if key not in info]
    if missing:
        raise EnvCheckError(f"info at {where} lacks {missing}: return them from _start/_act (TextEnv adds the rest)")
    problems = []
    if not isinstance(info["task_id"], str) or not info["task_id"]:
        problems.append("task_id must be a non-empty str")
    if not isinstance(info["task"], str):
        problems.append("task must be the goal text (str)")
    actions = info["admissible_actions"]
    if actions is not None and not (isinstance(actions, list) and all(isinstance(a, str) for a in actions)):
        problems.append("admissible_actions must be list[str] or None")
    if not isinstance(info["won"], bool):
        problems.append(f"won must be a bool, got {type(info['won']).__name__}")
    score = info["score"]
    if not isinstance(score, float) or not 0.0 <= score <= 1.0:
        problems.append(f"score must be a float in [0, 1], got {score!r}")
    if info["step"] != step:
        problems.append(f"step must count the steps since reset ({step}), got {info['step']!r}")
    if problems:
        raise EnvCheckError(f"info at {where}: " + "; ".join(problems))


def _check_transcript(transcript: dict[str, Any]) -> None:
    obs, info = transcript["reset"]
    if not isinstance(obs, str):
        raise EnvCheckError(f"reset() must return a str observation, got {type(obs).__name__}")
    _check_info(info, "reset", 0)
    total = 0.0
    for step, (obs, reward, _, _, info) in enumerate(transcript["steps"], start=1):
        if not isinstance(obs, str):
            raise EnvCheckError(f"step {step} returned a {type(obs).__name__} observation; observations are str")
        if not isinstance(reward, float) or not math.isfinite(reward):
            raise EnvCheckError(f"step {step} returned reward {reward!r}; rewards are finite floats")
        _check_info(info, f"step {step}", step)
        total += reward
    if total > 1.0 + 1e-6:
        raise EnvCheckError(f"rewards of one episode sum to {total} > 1: normalise them to [0, 1] per episode")


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def _first_difference(expected: list[Step], actual: list[Step]) -> str | None:
    names = ("observation", "reward", "terminated", "truncated", "info")
    for i, (e, a) in enumerate(zip(expected, actual), start=1):
        for name, x, y in zip(names, e, a):
            if not _same(x, y):
                return f"step {i}: {name} differs:\n  expected {x!r:.300}\n  got      {y!r:.300}"
    if len(expected) != len(actual):
        return f"{len(expected)} steps expected, {len(actual)} played"
    return None


def _compare(reference: dict[str, Any], other: dict[str, Any], what: str) -> None:
    if not _same(reference["reset"], other["reset"]):
        raise EnvCheckError(
            f"reset(seed=...) is not deterministic across {what}: draw all randomness from self.np_random "
            "and seed nothing global"
        )
    diff = _first_difference(reference["steps"], other["steps"])
    if diff:
        raise EnvCheckError(f"the same seed and actions gave a different episode on {what}: {diff}")


def _continue(env: gym.Env, actions: list[str]) -> list[Step]:
    steps = []
    for action in actions:
        steps.append(env.step(action))
        if steps[-1][2] or steps[-1][3]:
            break
    return steps


def _check_checkpoints(
    env: gym.Env, make_fresh: Callable[[], gym.Env] | None, seed: int, max_steps: int, reference: dict[str, Any]
) -> None:
    base: TextEnv = env.unwrapped
    ways = ["native", "replay"] if base.restore_kind == "native" else ["replay"]
    for t, ckpt in reference["checkpoints"].items():
        _check_serialisation(ckpt)
        expected = reference["steps"][t:]
        rest = reference["actions"][t:]
        for via in ways:
            _play(env, seed + 1, max_steps)  # move the env somewhere else first
            restore(env, ckpt, via=via)
            diff = _first_difference(expected, _continue(env, rest))
            if diff:
                raise EnvCheckError(
                    f"after restore(via={via!r}) of the checkpoint at step {t} into the same env, {diff}. "
                    "Everything _act depends on must be in _save_state()"
                )
        if make_fresh is not None:
            with _closing(make_fresh()) as fresh:
                restore(fresh, Checkpoint.from_bytes(ckpt.to_bytes(), trusted=True))  # bytes it wrote: natively
                diff = _first_difference(expected, _continue(fresh, rest))
                if diff:
                    raise EnvCheckError(
                        f"after restoring the checkpoint at step {t} into a fresh env, {diff}. "
                        "State held outside the env instance (module globals, caches) must not matter"
                    )


def _check_serialisation(ckpt: Checkpoint) -> None:
    if pickle.loads(pickle.dumps(ckpt)) != ckpt:
        raise EnvCheckError("a Checkpoint does not survive pickle: keep its state picklable")
    if Checkpoint.from_bytes(ckpt.to_bytes()) != ckpt:
        raise EnvCheckError("a Checkpoint does not survive to_bytes()/from_bytes()")


def _check_pickle(env: gym.Env, seed: int, max_steps: int, reference: dict[str, Any]) -> None:
    """Pickle the env mid-episode; the copy and the original must both continue as the reference did."""
    t = min(max_steps // 2, len(reference["actions"]))
    env.reset(seed=seed)
    _continue(env, reference["actions"][:t])
    try:
        clone = pickle.loads(pickle.dumps(env))
    except Exception as exc:  # whatever broke, the fix is the same
        raise EnvCheckError(
            f"pickling the env at step {t} failed ({type(exc).__name__}: {exc}). TextEnv pickles as its "
            "constructor arguments plus its checkpoint state: keep both picklable, and give wrappers picklable state"
        ) from exc
    expected, rest = reference["steps"][t:], reference["actions"][t:]
    with _closing(clone):
        for who, target in (("a pickled copy", clone), ("the original after being pickled", env)):
            diff = _first_difference(expected, _continue(target, rest))
            if diff:
                raise EnvCheckError(
                    f"{who} of the env taken at step {t} continued differently: {diff}. A copy is rebuilt from "
                    "the constructor arguments and restored from its checkpoint: the arguments must make the same "
                    "env again (do not mutate them), and pickling must not touch the running engine"
                )


def _check_bad_actions(env: gym.Env, seed: int) -> None:
    _, info = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    for action in BAD_ACTIONS:
        try:
            obs, reward, terminated, truncated, info = env.step(action)
        except Exception as exc:
            raise EnvCheckError(
                f"step({action[:40]!r}{'...' if len(action) > 40 else ''}) raised {type(exc).__name__}: {exc}. "
                "Bad actions are ordinary steps that return an explanatory observation"
            ) from exc
        if not isinstance(obs, str) or not isinstance(reward, float):
            raise EnvCheckError(f"a bad action returned ({type(obs).__name__}, {type(reward).__name__})")
        if terminated or truncated:
            _, info = env.reset(seed=seed)
    # The env must still work: a normal action steps, and a checkpoint round-trips.
    obs, *_ = env.step(_policy_action(info, rng))
    if not isinstance(obs, str):
        raise EnvCheckError("after the bad-action battery the env no longer returns observations")
    ckpt = checkpoint(env)
    restore(env, ckpt)
