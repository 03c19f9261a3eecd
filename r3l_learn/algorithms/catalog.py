"""Algorithms as compositions: a group builder, an advantage estimator, a per-token objective and what the
auxiliary samples weigh. Nothing here is a training loop; :mod:`r3l_learn.loop.train` runs any of them.

============================  ===============  ===========  ============  =============  =====  ============
name                          groups           advantage    objective     pivot masks    aux    KL (k3)
============================  ===============  ===========  ============  =============  =====  ============
``r3l``                       reflect-retry    ``r3l`` (α)  ``reinforce``  yes           λ = α  0
``grpo``                      N plain samples  ``grpo``     ``ppo_clip``   —             —      0.001
``grpo_no_kl``                N plain samples  ``grpo``     ``ppo_clip``   —             —      0
``dr_grpo``                   N plain samples  mean base.   ``ppo_clip``   —             —      0
``opmd``                      N plain samples  mean base.   ``reinforce``  —             —      0
``raft``                      N plain samples  ``raft``     ``reinforce``  —             —      0
============================  ===============  ===========  ============  =============  =====  ============

GRPO's two variants change one part each, so that a comparison shows which one matters: ``grpo_no_kl`` drops
the KL term (TRL's default, β = 0), and ``dr_grpo`` (Dr. GRPO, arXiv 2503.20783) also drops the division by the
group's reward std, keeping the mean baseline inside PPO-clip. Dr. GRPO also sums each reply's tokens over a constant
instead of averaging them over the reply's length: that is the run's ``aggregation="token_sum"``, a choice of the
loss like every aggregation, not of the row (the default, the batch's token mean, has no per-reply length
normalisation either; the two differ by a factor that is constant within a batch).

R³L's ablations are the same composition with one part swapped (the paper's ablations): ``no_pivot_credit`` keeps every
agent token in the loss, ``no_amplification`` uses the plain mean baseline (Â = A), ``no_reflect_retry``
samples N plain rollouts per task (amplification kept, no auxiliary samples), ``retry_from_scratch`` replays each
retry from turn 0 with the same guidance instead of restoring the pivot (a Reflect-GRPO-style retry at the same
budget of N trajectories).

A new algorithm is one function and one row: register its advantage (``@register_advantage``) or objective
(``@register_objective``, with its properties), whose keyword-only arguments with defaults are its
hyperparameters, and add a row to :data:`ALGORITHMS`. The learner reads the rest from the registries, and
``r3l train --hyper NAME=VALUE`` sets any hyperparameter (tests/r3l_learn/test_algorithms.py does exactly this).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from r3l_learn.algorithms.advantages import ADVANTAGES
from r3l_learn.algorithms.losses import OBJECTIVES
from r3l_learn.algorithms.registry import Choices

__all__ = [
    "ALGORITHMS",
    "ABLATIONS",
    "RESTARTS",
    "Algorithm",
    "RestartProperties",
    "hyperparameter_help",
    "resolve_algorithm",
]


@dataclass(frozen=True)
class RestartProperties:
    """Where a reflect-retry group's retries start.

    Attributes:
        at_pivot: a retry restores the base's checkpoint at the pivot turn and replays nothing before it (else it
            plays the episode again from turn 0, with the same guidance).
    """

    at_pivot: bool = False


#: ``Algorithm.restart``'s values (:class:`wrappers.ReflectRetryConfig` reads the name)
RESTARTS = Choices("restart point", RestartProperties)
RESTARTS.add("pivot", "a retry restores the pivot turn's checkpoint (R³L)", at_pivot=True)
RESTARTS.add("scratch", "a retry replays the episode from turn 0 with the same guidance (Reflect-GRPO style)")


@dataclass(frozen=True)
class Algorithm:
    """One learning algorithm, as a choice of parts.

    Its hyperparameters are those its parts declare (:attr:`hyperparameters`): the learner reads them from the
    registries, so a new part with a new hyperparameter needs no edit here or in the loop.

    Attributes:
        name: for logs and run names.
        advantage: a name in :data:`r3l_learn.algorithms.advantages.ADVANTAGES`.
        objective: a name in :data:`r3l_learn.algorithms.losses.OBJECTIVES`.
        reflect_retry: build groups with :class:`wrappers.ReflectRetry` (else N independent rollouts).
        pivotal_credit: reflect-retry groups mask the agent tokens before the pivot (pivotal credit).
        restart: where retries start, a row of :data:`RESTARTS`: ``"pivot"`` (R³L) or ``"scratch"`` (turn 0, the
            same guidance).
        aux_samples: train on the auxiliary reflection / guided-retry samples (SFT, weight ``aux_weight``).
        kl_coef: default weight of the KL penalty to the initial policy (the run's config may override it).
        aux_weight: λ of the auxiliary SFT term: a number, or the name of the hyperparameter it follows (R³L
            sets λ = α, so ``"alpha"``). Read only where ``aux_samples``.
        extra_hyper: hyperparameters the algorithm reads besides its parts', with their defaults (R³L without
            amplification keeps α for λ although its advantage no longer takes it).
    """

    name: str
    advantage: str
    objective: str
    reflect_retry: bool = False
    pivotal_credit: bool = False
    restart: str = "pivot"
    aux_samples: bool = False
    kl_coef: float = 0.0
    aux_weight: float | str = 0.0
    extra_hyper: Mapping[str, Any] = field(default_factory=dict, hash=False)  # a dict: Algorithm stays hashable

    def __post_init__(self) -> None:
        RESTARTS.check(self.restart)
        declared = self.hyperparameters  # unknown part names and conflicting defaults fail here
        if isinstance(self.aux_weight, str) and self.aux_weight not in declared:
            raise ValueError(
                f"algorithm {self.name!r}: aux_weight follows {self.aux_weight!r}, which is not one of its "
                f"hyperparameters {sorted(declared)}"
            )

    @property
    def hyperparameters(self) -> dict[str, Any]:
        """Every hyperparameter the algorithm reads, with its default: its advantage's, its objective's (one
        name declared by both is one value, so their defaults must agree) and its :attr:`extra_hyper`."""
        merged = dict(self.extra_hyper)
        for spec in (ADVANTAGES.spec(self.advantage), OBJECTIVES.spec(self.objective)):
            for name, default in spec.hyper.items():
                if name in merged and merged[name] != default:
                    raise ValueError(
                        f"algorithm {self.name!r}: hyperparameter {name!r} defaults to {merged[name]!r} in one part "
                        f"and to {default!r} in {spec.name!r}; one name is one value, so rename one of them"
                    )
                merged[name] = default
        return merged

    def resolve_hyper(self, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The hyperparameter values of a run: the declared defaults with ``overrides`` applied.

        Raises:
            ValueError: an override names no hyperparameter of this algorithm, has the wrong type, or is a
                value the advantage or objective rejects.
        """
        declared = self.hyperparameters
        overrides = dict(overrides or {})
        unknown = sorted(set(overrides) - set(declared))
        if unknown:
            raise ValueError(
                f"{self.name} has no hyperparameter {', '.join(map(repr, unknown))}; its hyperparameters (with "
                f"defaults) are {declared or 'none'}"
            )
        for name, value in overrides.items():
            if not _same_kind(declared[name], value):
                raise ValueError(
                    f"hyperparameter {name!r} of {self.name} takes a {type(declared[name]).__name__} like its "
                    f"default {declared[name]!r}, got {value!r}"
                )
        hyper = {**declared, **overrides}
        for name, default in declared.items():  # 2 -> 2.0 where the default is a float, as the CLI may give ints
            if isinstance(default, float):
                hyper[name] = float(hyper[name])
        self._try(hyper)
        return hyper

    def advantage_kwargs(self, hyper: Mapping[str, Any]) -> dict[str, Any]:
        """The keyword arguments of the advantage estimator, from resolved hyperparameters."""
        return ADVANTAGES.spec(self.advantage).kwargs(hyper)

    def objective_kwargs(self, hyper: Mapping[str, Any]) -> dict[str, Any]:
        """The keyword arguments of the objective, from resolved hyperparameters."""
        return OBJECTIVES.spec(self.objective).kwargs(hyper)

    def aux_weight_value(self, hyper: Mapping[str, Any]) -> float:
        """λ for resolved hyperparameters; 0 when the algorithm trains no auxiliary samples."""
        if not self.aux_samples:
            return 0.0
        return float(hyper[self.aux_weight] if isinstance(self.aux_weight, str) else self.aux_weight)

    def _try(self, hyper: Mapping[str, Any]) -> None:
        """Call both parts once on a two-member group, so that a value they reject fails when the run is
        configured rather than after its first collection."""
        props = OBJECTIVES.spec(self.objective).properties
        logp = torch.full((2, 1), -1.0)
        extra = {"behavior_logprobs": logp if props.uses_ratio else None}
        if props.needs_reference:
            extra["ref_logprobs"] = logp
        try:
            adv = ADVANTAGES.get_fn(self.advantage)(
                torch.tensor([0.0, 1.0], dtype=torch.float64), torch.tensor([0, 0]), **self.advantage_kwargs(hyper)
            )
            OBJECTIVES.get_fn(self.objective)(logp, advantages=adv, **extra, **self.objective_kwargs(hyper))
        except ValueError as exc:
            raise ValueError(f"{self.name}: {exc}") from exc


def _same_kind(default: Any, value: Any) -> bool:
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(default, bool) and isinstance(value, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float))
    return isinstance(value, type(default))


ALGORITHMS: dict[str, Algorithm] = {
    "r3l": Algorithm(
        "r3l", "r3l", "reinforce", reflect_retry=True, pivotal_credit=True, aux_samples=True, aux_weight="alpha"
    ),
    # GRPO as the R³L paper runs it: group-normalised advantages, PPO clip 0.2 and a k3 KL (coefficient 0.001,
    # Trinity-RFT's default).
    "grpo": Algorithm("grpo", "grpo", "ppo_clip", kl_coef=0.001),
    "grpo_no_kl": Algorithm("grpo_no_kl", "grpo", "ppo_clip"),
    "dr_grpo": Algorithm("dr_grpo", "mean_baseline", "ppo_clip"),
    "opmd": Algorithm("opmd", "mean_baseline", "reinforce"),
    "raft": Algorithm("raft", "raft", "reinforce"),
}

#: ablation flag -> how it changes R³L
ABLATIONS = {
    "no_pivot_credit": {"pivotal_credit": False},
    # λ keeps following α (R³L's, default included) when the advantage stops reading it
    "no_amplification": {
        "advantage": "mean_baseline",
        "extra_hyper": {"alpha": ALGORITHMS["r3l"].hyperparameters["alpha"]},
    },
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
        if not ALGORITHMS[name].reflect_retry:
            raise ValueError(f"the ablation {flag!r} switches off part of reflect-retry, which {name!r} does not use")
        algo = replace(algo, **ABLATIONS[flag])
    if ablations:
        algo = replace(algo, name="-".join([name, *(f.replace("_", "-") for f in ablations)]))
    return algo


def hyperparameter_help(name: str) -> str:
    """Which registered parts declare the hyperparameter ``name``, with their defaults (for ``--help`` texts)."""
    found = [
        f"{spec.name} {kind}: {spec.hyper[name]!r}"
        for kind, registry in (("advantage", ADVANTAGES), ("objective", OBJECTIVES))
        for spec in map(registry.spec, sorted(registry))
        if name in spec.hyper
    ]
    return ", ".join(found) if found else "no registered part declares it"
