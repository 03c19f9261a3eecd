"""TRL's ``bf16=True`` default on a CPU that emulates bf16: the rollout generates with the autocast model too, so a
GRPOTrainer step there ran many times slower than in fp32. The rollout says so once, on its first call."""

from __future__ import annotations

import logging
import os

import pytest

from wrappers import RolloutConfig, SamplingParams

pytest.importorskip("trl")
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRL_EXPERIMENTAL_SILENCE"] = "1"


def _first_rollout(tmp_path, *, bf16: bool) -> dict:
    """A real GRPOTrainer over the tiny model (not trained) and one call of the rollout on its first group."""
    from trl import GRPOConfig, GRPOTrainer

    from r3l_learn.bridges.trl import EnvRollout, env_reward
    from r3l_learn.policies.models import tiny_model

    model, tokenizer = tiny_model(seed=0)
    config = RolloutConfig(max_turns=1, sampling=SamplingParams(max_new_tokens=4))
    rollout = EnvRollout("r3l/Countdown-v0", rollout=config)
    dataset = rollout.dataset(num_tasks=1)
    args = GRPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=2,
        num_generations=2,
        use_cpu=True,
        bf16=bf16,
        report_to="none",
        save_strategy="no",
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=env_reward,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        rollout_func=rollout,
    )
    try:
        return rollout([dataset[0]["prompt"]] * 2, trainer)
    finally:
        rollout.close()


@pytest.mark.parametrize("bf16", [True, False])
def test_bf16_on_a_cpu_without_native_bf16_is_warned_once(tmp_path, caplog, monkeypatch, bf16):
    import r3l_learn.policies.device as device

    monkeypatch.setattr(device, "cpu_flags", lambda path="/proc/cpuinfo": frozenset({"avx", "avx2", "fma"}))
    with caplog.at_level(logging.WARNING, logger="r3l_learn.bridges.trl"):
        out = _first_rollout(tmp_path, bf16=bf16)
    assert len(out["completion_ids"]) == 2
    warned = [r for r in caplog.records if "bf16=False" in r.getMessage()]
    assert len(warned) == (1 if bf16 else 0)
    if bf16:
        assert "avx2" in warned[0].getMessage()


def test_no_warning_where_bf16_is_native(tmp_path, caplog, monkeypatch):
    import r3l_learn.policies.device as device

    monkeypatch.setattr(device, "cpu_flags", lambda path="/proc/cpuinfo": frozenset({"avx512f", "avx512_bf16"}))
    with caplog.at_level(logging.WARNING, logger="r3l_learn.bridges.trl"):
        _first_rollout(tmp_path, bf16=True)
    assert not [r for r in caplog.records if "bf16=False" in r.getMessage()]
