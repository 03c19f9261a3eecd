"""The R³L learner: policies, advantages, losses, the training loop and the ``r3l`` CLI.

Names load on first use (``import r3l_learn`` stays cheap; torch is imported by what needs it)::

    from r3l_learn import TrainConfig, train
    result = train(TrainConfig(env="r3l/Countdown-v0", algo="r3l", reflector="oracle", steps=10))
"""

from __future__ import annotations

import importlib
from typing import Any

# public name -> module that defines it
_EXPORTS = {
    # the loop
    "TrainConfig": "r3l_learn.loop.train",
    "TrainResult": "r3l_learn.loop.train",
    "TrainingDivergedError": "r3l_learn.loop.train",
    "train": "r3l_learn.loop.train",
    "PRESETS": "r3l_learn.loop.presets",
    # the parts it composes
    "ALGORITHMS": "r3l_learn.algorithms.catalog",
    "Algorithm": "r3l_learn.algorithms.catalog",
    "resolve_algorithm": "r3l_learn.algorithms.catalog",
    "ADVANTAGES": "r3l_learn.algorithms.advantages",
    "register_advantage": "r3l_learn.algorithms.advantages",
    "OBJECTIVES": "r3l_learn.algorithms.losses",
    "register_objective": "r3l_learn.algorithms.losses",
    "aggregate": "r3l_learn.algorithms.losses",
    "kl_penalty": "r3l_learn.algorithms.losses",
    "AGGREGATIONS": "r3l_learn.algorithms.losses",
    "register_aggregation": "r3l_learn.algorithms.losses",
    "KL_ESTIMATORS": "r3l_learn.algorithms.losses",
    "register_kl_estimator": "r3l_learn.algorithms.losses",
    "REFLECTORS": "r3l_learn.policies.reflectors",
    "register_reflector": "r3l_learn.policies.reflectors",
    "make_reflector": "r3l_learn.policies.reflectors",
    "ROLLOUT_BACKENDS": "r3l_learn.policies.backends",
    "sequence_logprobs": "r3l_learn.algorithms.logprobs",
    "rows_from_groups": "r3l_learn.algorithms.batch",
    "LossConfig": "r3l_learn.algorithms.update",
    "accumulate_gradients": "r3l_learn.algorithms.update",
    "PlainGroups": "r3l_learn.loop.groups",
    # policies and evaluation
    "HFPolicy": "r3l_learn.policies.hf",
    "ScriptedPolicy": "r3l_learn.policies.scripted",
    "VLLMPolicy": "r3l_learn.policies.vllm",
    "evaluate": "r3l_learn.loop.evaluate",
    "load_policy": "r3l_learn.loop.evaluate",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'r3l_learn' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
