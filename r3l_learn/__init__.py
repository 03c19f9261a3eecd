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
    "TrainConfig": "r3l_learn.train",
    "TrainResult": "r3l_learn.train",
    "TrainingDivergedError": "r3l_learn.train",
    "train": "r3l_learn.train",
    "PRESETS": "r3l_learn.presets",
    # the parts it composes
    "ALGORITHMS": "r3l_learn.algorithms",
    "Algorithm": "r3l_learn.algorithms",
    "resolve_algorithm": "r3l_learn.algorithms",
    "ADVANTAGES": "r3l_learn.advantages",
    "register_advantage": "r3l_learn.advantages",
    "OBJECTIVES": "r3l_learn.losses",
    "register_objective": "r3l_learn.losses",
    "aggregate": "r3l_learn.losses",
    "kl_penalty": "r3l_learn.losses",
    "AGGREGATIONS": "r3l_learn.losses",
    "register_aggregation": "r3l_learn.losses",
    "KL_ESTIMATORS": "r3l_learn.losses",
    "register_kl_estimator": "r3l_learn.losses",
    "REFLECTORS": "r3l_learn.reflectors",
    "register_reflector": "r3l_learn.reflectors",
    "make_reflector": "r3l_learn.reflectors",
    "ROLLOUT_BACKENDS": "r3l_learn.backends",
    "sequence_logprobs": "r3l_learn.logprobs",
    "rows_from_groups": "r3l_learn.batch",
    "LossConfig": "r3l_learn.update",
    "accumulate_gradients": "r3l_learn.update",
    "PlainGroups": "r3l_learn.collect",
    # policies and evaluation
    "HFPolicy": "r3l_learn.hf_policy",
    "ScriptedPolicy": "r3l_learn.scripted",
    "VLLMPolicy": "r3l_learn.vllm_policy",
    "evaluate": "r3l_learn.evaluate",
    "load_policy": "r3l_learn.evaluate",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'r3l_learn' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
