"""The TRL example trains two GRPOTrainer steps end to end, as a user runs it (a fresh process, no network)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")

EXAMPLE = Path(__file__).parents[2] / "examples" / "trl_grpo.py"


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["reflect_retry", "episodes"])
def test_trl_example_trains_two_steps(mode):
    args = ["--mode", mode, "--steps", "2", "--tasks", "2", "--num-generations", "2", "--max-new-tokens", "8"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(EXAMPLE), *args], capture_output=True, text=True, env=env, timeout=550)
    assert done.returncode == 0, done.stderr[-3000:]
    steps = [line for line in done.stderr.splitlines() if line.startswith("step ")]
    assert [s.split(":")[0] for s in steps] == ["step 1", "step 2"]
    if mode == "reflect_retry":
        assert all("retries 0.50 of the group" in s for s in steps)  # N=2: one base and its retry
