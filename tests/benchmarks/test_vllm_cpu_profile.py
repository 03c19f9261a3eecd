"""benchmarks/vllm_cpu_profile.py: the split of a free-text group's time adds up (with the tiny HF policy; the vLLM
side runs only in the benchmark itself, which needs the vllm-cpu extra)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

pytest.importorskip("torch")
import vllm_cpu_profile

from r3l_learn.policies.hf import HFPolicy
from r3l_learn.policies.models import tiny_model


def test_a_groups_time_splits_into_outside_prefill_and_decode():
    model, tokenizer = tiny_model(seed=0)
    row = vllm_cpu_profile.profile_group(HFPolicy(model, tokenizer, name="tiny"), batch=3, new_tokens=6, seed=1)
    assert row["generate_s"] + row["outside_s"] == pytest.approx(row["wall_s"])
    assert row["prefill_s"] + row["decode_s"] == pytest.approx(row["generate_s"])
    assert row["prefill_s"] > 0 and row["outside_s"] > 0
    assert 1 <= row["steps"] <= 6 and row["steps"] <= row["tokens"] <= 3 * row["steps"]
    assert row["prompt_tokens"] > 3  # three prompts of at least one token each, more in practice
