"""Every choice of a run is a registry row: each registry validates its own names (one error listing them), carries
its rows' properties, and gives ``r3l train`` its flags' choices and help."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from r3l_learn.algorithms.catalog import RESTARTS, Algorithm
from r3l_learn.algorithms.losses import (
    AGGREGATIONS,
    AUX_MEANS,
    KL_ESTIMATORS,
    aggregate,
    kl_penalty,
    register_kl_estimator,
)
from r3l_learn.algorithms.registry import Choices, UnknownChoiceError
from r3l_learn.algorithms.update import LossConfig
from r3l_learn.loop.config import ACTION_MODES, AUX_REFLECTIONS, TrainConfig, action_flags
from r3l_learn.policies.backends import ROLLOUT_BACKENDS
from r3l_learn.policies.reflectors import REFLECTORS, make_reflector, parse_reflector, reflector_problem
from wrappers.retry.oracle import OracleReflector
from wrappers.retry.reflection import PolicyReflector
from wrappers.retry.structured_reflection import StructuredReflector

CHOICES = {
    "actions": ACTION_MODES,
    "aux_reflection": AUX_REFLECTIONS,
    "aggregation": AGGREGATIONS,
    "kl_estimator": KL_ESTIMATORS,
    "aux_mean": AUX_MEANS,
    "rollout_backend": ROLLOUT_BACKENDS,
}


@pytest.mark.parametrize(
    "registry",
    [ACTION_MODES, AUX_REFLECTIONS, AGGREGATIONS, KL_ESTIMATORS, AUX_MEANS, ROLLOUT_BACKENDS, RESTARTS, REFLECTORS],
)
def test_an_unknown_name_is_one_error_that_lists_the_known_ones(registry):
    with pytest.raises(UnknownChoiceError) as info:
        registry.check("nope")
    for name in registry.names():
        assert name in str(info.value)
    assert isinstance(info.value, KeyError) and isinstance(info.value, ValueError)  # a mapping's and a config's
    assert str(info.value).startswith(f"unknown {registry.kind} 'nope'")  # no KeyError quotes around it
    assert registry.problem(registry.names()[0]) is None and registry.check(registry.names()[0])


def test_the_config_validates_each_choice_by_its_registry_in_one_error():
    with pytest.raises(ValueError) as info:
        TrainConfig(**{field: "nope" for field in CHOICES})
    message = str(info.value)
    for field, registry in CHOICES.items():
        assert f"{field}: unknown {registry.kind} 'nope'; registered: {', '.join(registry.names())}" in message


def test_the_flags_choices_and_help_come_from_the_registries():
    fields = {f.name: f for f in dataclasses.fields(TrainConfig)}
    for field, registry in CHOICES.items():
        assert tuple(fields[field].metadata["choices"]) == registry.names()
        for name in registry.names():
            assert f"{name}: {registry.summary(name)}" in fields[field].metadata["help"]
    for name in ("self", "oracle", "self-structured"):
        assert f"{name}: {REFLECTORS.summary(name)}" in fields["reflector"].metadata["help"]


def test_the_loss_reads_an_aggregations_properties_and_a_new_kl_estimator_is_one_row():
    assert AGGREGATIONS.spec("token_sum").properties.needs_max_tokens
    assert not AGGREGATIONS.spec("token_mean").properties.needs_max_tokens
    with pytest.raises(ValueError, match="set max_tokens > 0"):
        LossConfig(aggregation="token_sum")
    with pytest.raises(UnknownChoiceError, match="registered: token_mean, seq_mean, token_sum"):
        aggregate(torch.ones(1, 2), torch.ones(1, 2), "sum")
    assert AUX_MEANS["shared"].shared and not AUX_MEANS["separate"].shared

    @register_kl_estimator("test_abs")
    def absolute(d):
        """|d|."""
        return d.abs()

    try:
        assert kl_penalty(torch.tensor([-1.0, -2.0]), torch.tensor([-1.5, -1.0]), "test_abs").tolist() == [0.5, 1.0]
        assert LossConfig(kl_estimator="test_abs").kl_estimator == "test_abs"
    finally:
        del KL_ESTIMATORS["test_abs"]
    with pytest.raises(UnknownChoiceError):
        LossConfig(kl_estimator="test_abs")


def test_a_bare_loss_config_has_no_aux_term_and_an_algorithm_brings_its_lambda():
    from r3l_learn.algorithms.catalog import ALGORITHMS

    assert LossConfig().aux_weight == 0.0
    assert LossConfig.for_algorithm(ALGORITHMS["r3l"]).aux_weight == 3.0  # λ = α, α's default


def test_restart_points_are_rows_and_an_algorithm_checks_its_own():
    assert RESTARTS.names() == ("pivot", "scratch")
    assert RESTARTS["pivot"].at_pivot and not RESTARTS["scratch"].at_pivot
    with pytest.raises(UnknownChoiceError, match="registered: pivot, scratch"):
        Algorithm("x", "r3l", "reinforce", reflect_retry=True, restart="middle")


def test_an_action_mode_is_its_rollout_flags():
    assert [action_flags(m) for m in ACTION_MODES.names()] == [
        {"constrained": False, "direct": False},
        {"constrained": True, "direct": False},
        {"constrained": False, "direct": True},
    ]
    with pytest.raises(UnknownChoiceError, match="registered: free, constrained, direct"):
        action_flags("typed")


def test_rollout_backends_declare_what_the_config_checks():
    assert ROLLOUT_BACKENDS["vllm"].engine and not ROLLOUT_BACKENDS["vllm"].merges_adapters
    assert ROLLOUT_BACKENDS["auto"].resolved and not ROLLOUT_BACKENDS["hf"].engine
    with pytest.raises(ValueError, match="needs full fine-tuning"):
        TrainConfig(rollout_backend="vllm", lora_rank=4)
    TrainConfig(rollout_backend="auto", lora_rank=4)  # resolves to hf


def test_a_reflector_word_names_a_row(tiny_policy):
    assert parse_reflector("self") == ("self", "")
    assert parse_reflector("openai:gpt-x") == ("openai", "gpt-x")
    assert parse_reflector("some/folder") == ("model", "some/folder")
    assert parse_reflector("model") == ("model", "model")  # the fallback row's name is a model name like any other
    assert reflector_problem("openai:") == "reflector 'openai:' names no model"
    assert "openai:MODEL reflector only" in reflector_problem("oracle", base_url="http://127.0.0.1:1/v1")
    assert reflector_problem("openai:m", base_url="http://127.0.0.1:1/v1") is None
    assert isinstance(make_reflector("oracle", None), OracleReflector)
    assert isinstance(make_reflector("self", tiny_policy), PolicyReflector)
    assert isinstance(make_reflector("self-structured", tiny_policy), StructuredReflector)
    assert REFLECTORS.spec("self").properties.uses_policy and REFLECTORS.spec("oracle").properties.privileged
    with pytest.raises(ValueError, match="openai:MODEL reflector only"):
        TrainConfig(reflector="oracle", reflector_base_url="http://127.0.0.1:1/v1")


def test_choices_rows_declare_only_their_properties():
    rows = Choices("test choice", type(RESTARTS["pivot"]))
    with pytest.raises(ValueError, match=r"test choice 'x'.*may declare \['at_pivot'\]"):
        rows.add("x", "help", at_start=True)
    rows.add("y", "a row")
    with pytest.raises(ValueError, match="already registered"):
        rows.add("y", "again")
    assert rows.describe() == "y: a row"


def test_the_trl_bridges_modes_and_named_reflectors_are_checked_by_their_registries():
    pytest.importorskip("trl")
    import r3l_envs  # noqa: F401  (registers the env ids)
    from r3l_learn.bridges.trl import BRIDGE_MODES, EnvRollout

    assert BRIDGE_MODES["reflect_retry"].reflect_retry and not BRIDGE_MODES["episodes"].reflect_retry
    with pytest.raises(UnknownChoiceError, match="registered: episodes, reflect_retry"):
        EnvRollout("r3l/Countdown-v0", mode="both")
    with pytest.raises(ValueError, match=r"reflects with the trained policy: one of \['self', 'self-structured'\]"):
        EnvRollout("r3l/Countdown-v0", mode="reflect_retry", reflector="oracle")
    EnvRollout("r3l/Countdown-v0", mode="reflect_retry", reflector="self-structured").close()
