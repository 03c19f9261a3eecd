"""Math as multi-attempt text environments: Countdown, GSM-Symbolic, CHAMP, GSM8K, MATH-500, OlympiadBench.

One env class, :class:`~r3l_envs.math.envs.MathEnv`, over interchangeable task sources
(:mod:`~r3l_envs.math.sources`). Answers are extracted by :mod:`~r3l_envs.math.answers` and graded by
math-verify in a worker subprocess with a hard timeout (:mod:`~r3l_envs.math.grading`), or, for Countdown, by
an exact expression checker (:mod:`~r3l_envs.math.countdown`). Submodules import lazily: ``import r3l_envs``
does not load math-verify, reasoning-gym or champ-dataset.
"""

__all__ = ["answers", "countdown", "envs", "grading", "sources"]
