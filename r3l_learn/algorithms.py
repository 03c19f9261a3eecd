"""Algorithms as compositions: a group builder, an advantage estimator, a per-token objective and what the
auxiliary samples weigh. Nothing here is a training loop; :mod:`r3l_learn.train` runs any of them.

============================  ===============  ===========  ============  =============  =====  ============
name                          groups           advantage    objective     pivot masks    aux    KL (k3)
============================  ===============  ===========  ============  =============  =====  ============
``r3l``                       reflect-retry    ``r3l`` (α)  ``reinforce``  yes           λ = α  0
``grpo``                      N plain samples  ``grpo``     ``ppo_clip``   —             —      0.001
``opmd``                      N plain samples  mean base.   ``reinforce``  —             —      0
``raft``                      N plain samples  ``raft``     ``reinforce``  —             —      0
============================  ===============  ===========  ============  =============  =====  ============

R³L's ablations are the same composition with one part swapped (R3L.md §5): ``no_pivot_credit`` keeps every
agent token in the loss, ``no_amplification`` uses the plain mean baseline (Â = A), ``no_reflect_retry``
samples N plain rollouts per task (amplification kept, no auxiliary samples), ``retry_from_scratch`` replays each
retry from turn 0 with the same guidance instead of restoring the pivot (a Reflect-GRPO-style retry at the same
budget of N trajectories).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from r3l_learn.advantages import get_advantage
from r3l_learn.losses import get_objective

__all__ = ["ALGORITHMS", "ABLATIONS", "Algorithm", "resolve_algorithm"]


@dataclass(frozen=True)
class Algorithm:
    """One learning algorithm, as a choice of parts.

    Attributes:
        name: for logs and run names.
        advantage: a name in :data:`r3l_learn.advantages.ADVANTAGES`.
        objective: a name in :data:`r3l_learn.losses.OBJECTIVES`.
        reflect_retry: build groups with :class:`wrappers.ReflectRetry` (else N independent rollouts).
        pivotal_credit: reflect-retry groups mask the agent tokens before the pivot (R3L.md §2).
        restart: where retries start: ``"pivot"`` (R³L) or ``"scratch"`` (turn 0, the same guidance).
        aux_samples: train on the auxiliary reflection / guided-retry samples (SFT, weight ``aux_weight``).
        kl_coef: default weight of the KL penalty to the initial policy (the run's config may override it).
        uses_alpha: the advantage takes R³L's amplification factor α.
    """

    name: str
    advantage: str
    objective: str
    reflect_retry: bool = False
    pivotal_credit: bool = False
    restart: str = "pivot"
    aux_samples: bool = False
    kl_coef: float = 0.0
    uses_alpha: bool = False

    def __post_init__(self) -> None:
        get_advantage(self.advantage)  # unknown names fail here, with the registered names listed
        get_objective(self.objective)

    def advantage_kwargs(self, alpha: float) -> dict[str, Any]:
        return {"alpha": alpha} if self.uses_alpha else {}


ALGORITHMS: dict[str, Algorithm] = {
    "r3l": Algorithm(
        "r3l", "r3l", "reinforce", reflect_retry=True, pivotal_credit=True, aux_samples=True, uses_alpha=True
    ),
    # GRPO as the R³L paper runs it: group-normalised advantages, PPO clip 0.2 and a k3 KL (coefficient 0.001,
    # Trinity-RFT's default).
    "grpo": Algorithm("grpo", "grpo", "ppo_clip", kl_coef=0.001),
    "opmd": Algorithm("opmd", "mean_baseline", "reinforce"),
    "raft": Algorithm("raft", "raft", "reinforce"),
}

#: ablation flag -> how it changes R³L
ABLATIONS = {
    "no_pivot_credit": {"pivotal_credit": False},
    "no_amplification": {"advantage": "mean_baseline", "uses_alpha": False},
    "no_reflect_retry": {"reflect_retry": False, "pivotal_credit": False, "aux_samples": False},
    "retry_from_scratch": {"restart": "scratch"},
}


def resolve_algorithm(name: str, ablations: tuple[str, ...] | list[str] = ()) -> Algorithm:
    """The algorithm ``name`` with R³L ablations applied, e.g. ``resolve_algorithm("r3l", ["no_pivot_credit"])``."""
    if name not in ALGORITHMS:
        raise KeyError(f"unknown algorithm {name!r}; choose one of {sorted(ALGORITHMS)}")
    algo = ALGORITHMS[name]
    for flag in ablations:
        if flag not in ABLATIONS:
            raise KeyError(f"unknown ablation {flag!r}; choose among {sorted(ABLATIONS)}")
        if name != "r3l":
            raise ValueError(f"the ablation {flag!r} applies to r3l only, not to {name!r}")
        algo = replace(algo, **ABLATIONS[flag])
    if ablations:
        algo = replace(algo, name="-".join([name, *(f.replace("_", "-") for f in ablations)]))
    return algo
