"""The GRPO example runs end to end on CPU and trains on groups that carry signal."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

EXAMPLE = Path(__file__).parents[2] / "examples" / "grpo_with_reflect_retry.py"


@pytest.mark.slow
def test_grpo_example_runs():
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "--steps", "1", "--tasks", "2"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    line = next(x for x in done.stderr.splitlines() if x.startswith("step 0:"))
    assert "8 trajectories (4 retries), 8 aux samples" in line
    assert "retries beat base 4/4" in line
    loss = float(re.search(r"loss (-?[\d.]+)", line).group(1))
    assert loss != 0.0  # mixed rewards give non-zero GRPO advantages
