"""Golden run: a seeded collect plus one optimiser update, pinned bit for bit.

Two one-step runs of :func:`r3l_learn.loop.train` on a small windy corridor with the tiny random model on CPU:
``r3l`` (reflect-retry groups, the oracle reflector, so retries, pivots and an auxiliary sample occur) and
``grpo`` (plain groups). Each pins, in ``tests/golden/run.json``:

- the groups the step trained on: per trajectory its kind, pivot, reward, won, score and stop reason, and a
  sha256 of its token ids, agent mask, loss mask and behaviour log-probs; per auxiliary sample its kind and a
  sha256 of its token ids and loss mask;
- the learner's rows (:func:`r3l_learn.rows_from_groups`): each row's kind, aux flag and advantage, and a sha256 of
  its token ids, loss mask and behaviour log-probs;
- the step's logged metrics (loss parts, gradient norm, rewards, retry counts; timings left out);
- a sha256 of the updated weights (the end-of-run checkpoint's model state).

Floats are compared by their exact bytes (a list's sha256 over its IEEE-754 doubles, a scalar by ``repr``, which
round-trips exactly), so any change in arithmetic order shows. Float results may differ in the last bits on
another CPU or torch build, so the file also records where it was made (torch version, CPU capability,
architecture); on a machine that differs, only the parts that survive rounding (floats to about six significant
digits, shown with a ``~`` in their name) are compared, and the bit-exact parts are reported as not checked.

Regenerate after an intended change of behaviour (and say why in the commit)::

    R3L_REGEN_GOLDEN=1 pytest tests/test_golden_run.py

Without ``R3L_REGEN_GOLDEN`` a mismatch fails and lists each part that changed, with the recorded and the new
value.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import struct
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

torch = pytest.importorskip("torch")

from corridor import Corridor  # noqa: E402  (tests/ is on sys.path: tests/conftest.py)

from r3l_learn.algorithms.batch import rows_from_groups  # noqa: E402
from r3l_learn.loop.checkpoints import latest_checkpoint, load_checkpoint  # noqa: E402
from r3l_learn.loop.train import TrainConfig, train  # noqa: E402

GOLDEN = Path(__file__).parent / "golden" / "run.json"
REGEN = os.environ.get("R3L_REGEN_GOLDEN") == "1"
ENV_ID = "r3ltest/GoldenCorridor-v0"
RUNS = {"r3l": {"algo": "r3l", "reflector": "oracle"}, "grpo": {"algo": "grpo"}}
EXACT = "#exact"  # suffix of the parts compared only on the machine the file was made on

pytestmark = pytest.mark.slow  # two tiny training steps: ~10 s of CPU


class GoldenCorridor(Corridor):
    """The test corridor with an expert plan (always walk right), so the oracle reflector can diagnose it."""

    def expert_actions(self, task_id: str) -> list[str] | None:
        return ["right"] * self.length


def _register() -> None:
    if ENV_ID not in gym.registry:
        gym.register(ENV_ID, entry_point=GoldenCorridor, max_episode_steps=12)


def _config(out: Path, **run: Any) -> TrainConfig:
    return TrainConfig(
        env=ENV_ID,
        env_kwargs={"length": 4},
        model="tiny-random",
        steps=1,
        tasks_per_step=2,
        group_size=4,
        max_turns=5,
        max_new_tokens=16,
        actions="constrained",
        lr=1e-2,
        micro_batch_size=3,  # rows do not divide evenly: the accumulation over micro-batches is pinned too
        eval_episodes=0,
        out_dir=str(out),
        checkpoint_every=0,
        save_final=False,
        tensorboard=False,
        progress=False,
        seed=7,
        **run,
    )


# ------------------------------------------------------------------------------------------------- fingerprints
def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _ints(values: Iterable[int]) -> str:
    values = list(values)
    return _sha(struct.pack(f"<{len(values)}q", *values))


def _floats(values: Iterable[float]) -> str:
    values = list(values)
    return _sha(struct.pack(f"<{len(values)}d", *values))


def _rounded(values: Iterable[float]) -> str:
    return _sha(json.dumps([float(f"{v:.6g}") for v in values]).encode())


def _float_parts(name: str, values: Any) -> Iterator[tuple[str, str]]:
    """A float (or list of floats) as two parts: its exact bytes, and rounded to six significant digits."""
    if isinstance(values, float):
        yield name + EXACT, repr(values)
        yield name + "~", f"{values:.6g}"
    else:
        yield name + EXACT, _floats(values)
        yield name + "~", _rounded(values)


def _group_parts(groups: list[Any]) -> Iterator[tuple[str, Any]]:
    for g, group in enumerate(groups):
        yield f"group{g}.task_id", group.task_id
        for t, traj in enumerate(group.trajectories):
            at = f"group{g}.traj{t}."
            yield at + "kind", traj.kind
            yield at + "pivot", traj.pivot
            yield at + "won", traj.won
            yield at + "stop_reason", traj.stop_reason
            yield at + "turns", len(traj.turns)
            yield at + "token_ids", _ints(traj.token_ids)
            yield at + "agent_mask", _ints(traj.agent_mask)
            yield at + "loss_mask", _ints(traj.loss_mask)
            yield from _float_parts(at + "reward", float(traj.reward))
            yield from _float_parts(at + "score", float(traj.score))
            yield from _float_parts(at + "behavior_logprobs", traj.behavior_logprobs)
        for s, sample in enumerate(group.samples):
            at = f"group{g}.sample{s}."
            yield at + "kind", sample.kind
            yield at + "token_ids", _ints(sample.token_ids)
            yield at + "loss_mask", _ints(sample.loss_mask)


def _row_parts(rows: list[Any]) -> Iterator[tuple[str, Any]]:
    for r, row in enumerate(rows):
        at = f"row{r}."
        yield at + "group", row.group
        yield at + "kind", row.kind
        yield at + "aux", row.aux
        yield at + "token_ids", _ints(row.token_ids)
        yield at + "loss_mask", _ints(row.loss_mask)
        yield from _float_parts(at + "advantage", float(row.advantage))
        yield from _float_parts(at + "behavior_logprobs", row.behavior_logprobs)


def _metric_parts(metrics: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    for key in sorted(metrics):
        value = metrics[key]
        if key.startswith(("speed/", "memory/")):  # clocks and resident memory
            continue
        if isinstance(value, float):
            yield from _float_parts(f"metric.{key}", value)
        else:
            yield f"metric.{key}", value


def _weight_parts(state: dict[str, torch.Tensor]) -> Iterator[tuple[str, str]]:
    exact, rounded = hashlib.sha256(), hashlib.sha256()
    for name in sorted(state):
        tensor = state[name].detach().cpu().contiguous()
        header = f"{name}:{tensor.dtype}:{tuple(tensor.shape)};".encode()
        exact.update(header + tensor.view(torch.uint8).numpy().tobytes())
        # about six significant digits, scaled per tensor so small and large weights round alike
        scale = float(tensor.double().abs().max()) or 1.0
        digits = torch.round(tensor.double() / scale * 1e6).to(torch.int64)
        rounded.update(header + digits.numpy().tobytes())
    yield "weights" + EXACT, exact.hexdigest()[:16]
    yield "weights~", rounded.hexdigest()[:16]


# ------------------------------------------------------------------------------------------------- the runs
@pytest.fixture
def deterministic_torch():
    """Deterministic kernels on one thread for this test only (other tests keep their settings)."""
    was_deterministic, was_threads = torch.are_deterministic_algorithms_enabled(), torch.get_num_threads()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(was_deterministic)
        torch.set_num_threads(was_threads)


def _machine() -> dict[str, str]:
    import transformers

    return {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "machine": platform.machine(),
    }


def _run(out: Path, run: dict[str, Any]) -> dict[str, Any]:
    config = _config(out, **run)
    seen: list[Any] = []  # the step's StepInfo
    train(config, on_step=[seen.append])
    (info,) = seen
    rows = rows_from_groups(info.groups, config.algorithm, hyper=config.hyper_values())
    weights = load_checkpoint(latest_checkpoint(out / "checkpoints"))["model"]
    parts = [*_group_parts(info.groups), *_row_parts(rows), *_metric_parts(info.metrics), *_weight_parts(weights)]
    return dict(parts)


def _diff(expected: dict[str, Any], actual: dict[str, Any], exact: bool) -> list[str]:
    lines = []
    for key in sorted(set(expected) | set(actual), key=lambda k: (k not in expected, k)):
        if not exact and key.endswith(EXACT):
            continue
        was, now = expected.get(key, "<absent>"), actual.get(key, "<absent>")
        if was != now:
            lines.append(f"  {key}: recorded {was!r}, now {now!r}")
    return lines


def test_a_seeded_collect_and_one_update_are_bit_identical_to_the_recorded_run(tmp_path, deterministic_torch):
    _register()
    actual = {name: _run(tmp_path / name, run) for name, run in RUNS.items()}
    if REGEN:
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps({"machine": _machine(), "runs": actual}, indent=1, sort_keys=True) + "\n")
        pytest.skip(f"regenerated {GOLDEN}")
    if not GOLDEN.exists():
        pytest.fail(f"{GOLDEN} is missing: make it with R3L_REGEN_GOLDEN=1 pytest {Path(__file__).name}")
    recorded = json.loads(GOLDEN.read_text())
    same_machine = recorded["machine"] == _machine()
    problems = []
    for name in sorted(set(recorded["runs"]) | set(actual)):
        lines = _diff(recorded["runs"].get(name, {}), actual.get(name, {}), exact=same_machine)
        if lines:
            problems.append(f"run {name!r}: {len(lines)} part(s) changed\n" + "\n".join(lines[:60]))
    where = (
        ""
        if same_machine
        else (f"\n(recorded on {recorded['machine']}, this is {_machine()}: only the rounded parts were compared)")
    )
    if problems:
        pytest.fail(
            "the golden run changed (regenerate with R3L_REGEN_GOLDEN=1 only if the change is intended):\n"
            + "\n".join(problems)
            + where,
            pytrace=False,
        )
