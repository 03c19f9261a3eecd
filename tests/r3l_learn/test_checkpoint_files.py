"""Training checkpoint files: the RNG states round-trip, and a crafted file cannot run code when resumed."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from r3l_learn.loop.checkpoints import ResumeError, load_checkpoint, rng_state, save_checkpoint, set_rng_state


class _RunsCode:
    """Unpickling this calls ``Path.touch`` on a marker file: what a crafted checkpoint would do."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (type(self.marker).touch, (self.marker,))


def test_rng_states_survive_a_save_and_a_safe_load(tmp_path):
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    path = save_checkpoint(tmp_path, 1, {"step": 1, "rng": rng_state(), "model": {"w": torch.ones(2)}})
    expected = (random.random(), np.random.rand(), torch.rand(1).item())
    random.seed(9), np.random.seed(9), torch.manual_seed(9)
    set_rng_state(load_checkpoint(path)["rng"])
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected


def test_a_crafted_checkpoint_is_refused_without_running_it(tmp_path):
    marker = tmp_path / "ran"
    path = tmp_path / "step-000001.pt"
    torch.save({"step": 1, "payload": _RunsCode(marker)}, path)
    with pytest.raises(ResumeError, match="refused"):
        load_checkpoint(path)
    assert not marker.exists()


def test_garbage_is_a_resume_error(tmp_path):
    path = tmp_path / "step-000001.pt"
    path.write_bytes(b"not a checkpoint at all")
    with pytest.raises(ResumeError):
        load_checkpoint(path)


@pytest.mark.parametrize(
    "bad",
    [
        None,
        {"python": (3, (0,) * 625, None), "numpy": ("MT19937", [0] * 624, 0, 0, 0.0)},  # torch's missing
        {**rng_state(), "python": (3, (1 << 40,) * 625, None)},  # a word beyond 32 bits
        {**rng_state(), "numpy": ("MT19937", [0] * 624, 625, 0, 0.0)},  # a position beyond the state
        {**rng_state(), "torch": torch.zeros(5056, dtype=torch.uint8)},  # no valid Mersenne Twister state
    ],
)
def test_a_malformed_rng_state_is_a_resume_error_and_no_generator_changes(bad):
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    before = (random.getstate(), np.random.get_state()[1].copy(), torch.get_rng_state())
    with pytest.raises(ResumeError, match="RNG state"):
        set_rng_state(bad)
    assert random.getstate() == before[0] and np.array_equal(np.random.get_state()[1], before[1])
    assert torch.equal(torch.get_rng_state(), before[2])
