"""Shared fixtures for the wrappers tests: the scripted policy and a tiny random HF policy."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_policy():
    """A randomly initialised 2-layer Llama over the byte-level tiny tokenizer (fp32, CPU)."""
    pytest.importorskip("torch")
    from r3l_learn.policies.hf import HFPolicy
    from r3l_learn.policies.models import tiny_model

    model, tokenizer = tiny_model(seed=0)
    return HFPolicy(model, tokenizer, name="tiny")
