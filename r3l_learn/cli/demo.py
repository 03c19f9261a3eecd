"""``r3l tour`` (formerly ``r3l demo``; ``make demo`` is a training run): a scripted agent plays offline
Countdown episodes, with checkpoint/restore shown. No model is involved.

The agent is honest about what it is: a brute-force solver that first answers wrongly on purpose (so the env's
feedback is visible), then solves the puzzle by search. Halfway through each episode the env is checkpointed;
the checkpoint goes through bytes into a *fresh* env, which must continue exactly like the original.
"""

from __future__ import annotations

import itertools
import time
from fractions import Fraction

import gymnasium as gym

import r3l_envs

_OPS = ("+", "-", "*", "/")


def solve_countdown(numbers: tuple[int, ...], target: int) -> str | None:
    """An expression over a subset of ``numbers`` (each used at most once) that equals ``target``, or None.

    Exhaustive search over ordered pairs: combine two values, recurse on the rest. Fine for ≤ 5 numbers.
    """
    items = [(Fraction(n), str(n)) for n in numbers]

    def search(values: list[tuple[Fraction, str]]) -> str | None:
        for value, text in values:
            if value == target:
                return text
        for (i, (a, ta)), (j, (b, tb)) in itertools.permutations(enumerate(values), 2):
            rest = [v for k, v in enumerate(values) if k not in (i, j)]
            for op in _OPS:
                if op == "/" and b == 0:
                    continue
                value = {"+": a + b, "-": a - b, "*": a * b, "/": a / b if b else None}[op]
                found = search([*rest, (value, f"({ta} {op} {tb})")])
                if found:
                    return found
        return None

    return search(items)


def _show(label: str, text: str) -> None:
    indent = "\n" + " " * 14
    print(f"  {label:<11} {indent.join(text.strip().splitlines())}")


def run_demo(episodes: int = 3, seed: int = 0) -> None:
    """Play ``episodes`` Countdown episodes and print each turn and the checkpoint/restore check."""
    env = gym.make("r3l/Countdown-v0")
    print(f"r3l {r3l_envs.__version__}: {len(r3l_envs.list_envs())} environments registered.")
    print("A scripted agent (brute-force solver) plays r3l/Countdown-v0 (generated puzzles, offline).\n")
    solved = 0
    for episode in range(episodes):
        obs, info = env.reset(seed=seed + episode)
        puzzle = env.unwrapped.current_task.payload  # the numbers and target the agent is shown
        print(f"Episode {episode + 1}: task {info['task_id']}")
        _show("env:", obs)
        wrong = f"\\boxed{{{' + '.join(map(str, puzzle.numbers[:2]))}}}"
        obs, reward, *_ = env.step(f"Let me guess: {wrong}")
        _show("agent:", f"Let me guess: {wrong}")
        _show("env:", f"{obs}   [reward {reward}]")

        ckpt = r3l_envs.checkpoint(env)
        data = ckpt.to_bytes()
        answer = solve_countdown(puzzle.numbers, puzzle.target) or "I give up"
        action = f"The answer is \\boxed{{{answer}}}"
        obs, reward, *_, info = env.step(action)
        _show("agent:", action)
        _show("env:", f"{obs}   [reward {reward}, won {info['won']}]")
        solved += info["won"]

        start = time.perf_counter()
        fresh = gym.make("r3l/Countdown-v0")
        r3l_envs.restore(fresh, r3l_envs.Checkpoint.from_bytes(data))
        elapsed = (time.perf_counter() - start) * 1e3
        again = fresh.step(action)
        same = again[0] == obs and again[1] == reward and again[4] == info
        print(
            f"  checkpoint: taken before the 2nd attempt ({len(data)} bytes), restored into a fresh env in "
            f"{elapsed:.1f} ms; replaying the same answer gives {'the identical' if same else 'A DIFFERENT'} result.\n"
        )
        if not same:
            raise SystemExit("checkpoint/restore was not exact: please report this as a bug")
        fresh.close()
    env.close()
    print(f"Solved {solved}/{episodes} episodes. Next: `make test`, or `python -m benchmarks.envs`.")
