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
round-trips exactly), so any change in arithmetic order shows. Float results differ in their last bits on another
CPU or torch build, and much more where the CPU kind changes the run's precision (``autocast`` ``auto`` is bf16 only
on a CPU with native bf16). So the file holds one record per machine it was made on (torch version, CPU capability,
bf16 support, architecture). On a machine with a record, every part is compared exactly. On one without, the
discrete parts (tokens, masks, kinds, pivots, outcomes) are compared exactly and the floats by their summaries
(a scalar, or a list's length, mean, minimum and maximum; the weights' norm; names ending in ``≈``) within a
tolerance that bf16 against fp32 arithmetic stays inside; the bit-exact parts are reported as not checked.

Regenerate after an intended change of behaviour (and say why in the commit)::

    R3L_REGEN_GOLDEN=1 pytest tests/test_golden_run.py

That writes this machine's record alone: the other machines' records are stale after an intended change, and
those machines compare summaries until they add their own. To add this machine's record to the others (nothing
changed, the run just has no record of this machine yet), ``R3L_REGEN_GOLDEN=add``: it keeps them, and refuses
where their discrete parts or summaries disagree with this run.

Without ``R3L_REGEN_GOLDEN`` a mismatch fails and lists each part that changed, with the recorded and the new
value.
"""

from __future__ import annotations

import hashlib
import json
import math
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
from r3l_learn.policies.device import cpu_kind  # noqa: E402

GOLDEN = Path(__file__).parent / "golden" / "run.json"
REGEN = os.environ.get("R3L_REGEN_GOLDEN")  # "1": this machine's record alone; "add": beside the others
ENV_ID = "r3ltest/GoldenCorridor-v0"
RUNS = {"r3l": {"algo": "r3l", "reflector": "oracle"}, "grpo": {"algo": "grpo"}}
EXACT = "#exact"  # suffix of the parts compared only on a machine with its own record
SUMMARY = "≈"  # suffix of the float summaries, compared within a tolerance on a machine without one
#: how far a summary may move between machines: bf16 against fp32 autocast moved the gradient norm by up to 0.19 %
#: and the mean behaviour log-probs by up to 2e-4 relative (this test's runs, both precisions on one machine)
REL_TOL, ABS_TOL = 2e-2, 2e-3

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


def _summary(values: Iterable[float]) -> list[float]:
    values = [float(v) for v in values]
    if not values:
        return [0.0]
    return [float(len(values)), math.fsum(values) / len(values), min(values), max(values)]


def _float_parts(name: str, values: Any) -> Iterator[tuple[str, Any]]:
    """A float (or list of floats) as two parts: its exact bytes, and its summary."""
    if isinstance(values, float):
        yield name + EXACT, repr(values)
        yield name + SUMMARY, [values]
    else:
        yield name + EXACT, _floats(values)
        yield name + SUMMARY, _summary(values)


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


def _weight_parts(state: dict[str, torch.Tensor]) -> Iterator[tuple[str, Any]]:
    exact, squares, total, count = hashlib.sha256(), 0.0, 0.0, 0
    for name in sorted(state):
        tensor = state[name].detach().cpu().contiguous()
        header = f"{name}:{tensor.dtype}:{tuple(tensor.shape)};".encode()
        exact.update(header + tensor.view(torch.uint8).numpy().tobytes())
        squares += float(tensor.double().square().sum())
        total, count = total + float(tensor.double().abs().sum()), count + tensor.numel()
    yield "weights" + EXACT, exact.hexdigest()[:16]
    yield "weights" + SUMMARY, [math.sqrt(squares), total / max(count, 1)]


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
        "bf16": cpu_kind(),
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


def _close(was: Any, now: Any) -> bool:
    if not (isinstance(was, list) and isinstance(now, list) and len(was) == len(now)):
        return False
    return all(math.isclose(a, b, rel_tol=REL_TOL, abs_tol=ABS_TOL) for a, b in zip(was, now))


def _diff(expected: dict[str, Any], actual: dict[str, Any], exact: bool) -> list[str]:
    """The parts that differ: all of them where ``exact``; else the discrete ones, and the summaries beyond the
    tolerance (a record without summaries has none to compare)."""
    lines = []
    for key in sorted(set(expected) | set(actual), key=lambda k: (k not in expected, k)):
        if not exact and key.endswith(EXACT):
            continue
        was, now = expected.get(key, "<absent>"), actual.get(key, "<absent>")
        if key.endswith(SUMMARY) and (exact or was == "<absent>" or _close(was, now)):
            continue
        if was != now:
            lines.append(f"  {key}: recorded {was!r}, now {now!r}")
    return lines


def _problems(record: dict[str, Any], actual: dict[str, Any], exact: bool) -> list[str]:
    problems = []
    for name in sorted(set(record["runs"]) | set(actual)):
        lines = _diff(record["runs"].get(name, {}), actual.get(name, {}), exact=exact)
        if lines:
            problems.append(f"run {name!r}: {len(lines)} part(s) changed\n" + "\n".join(lines[:60]))
    return problems


def _records() -> list[dict[str, Any]]:
    data = json.loads(GOLDEN.read_text(encoding="utf-8"))
    return data["records"]


def test_a_seeded_collect_and_one_update_are_bit_identical_to_the_recorded_run(tmp_path, deterministic_torch):
    _register()
    actual = {name: _run(tmp_path / name, run) for name, run in RUNS.items()}
    here = _machine()
    if REGEN in ("1", "add"):
        others = [r for r in (_records() if GOLDEN.exists() else []) if r["machine"] != here] if REGEN == "add" else []
        disagree = [p for r in others for p in _problems(r, actual, exact=False)]
        if disagree:
            pytest.fail("not added: the other records disagree with this run:\n" + "\n".join(disagree), pytrace=False)
        GOLDEN.parent.mkdir(exist_ok=True)
        records = [{"machine": here, "runs": actual}, *others]
        GOLDEN.write_text(
            json.dumps({"records": records}, indent=1, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8"
        )
        pytest.skip(f"regenerated {GOLDEN}: this machine's record and {len(others)} other(s)")
    if not GOLDEN.exists():
        pytest.fail(f"{GOLDEN} is missing: make it with R3L_REGEN_GOLDEN=1 pytest {Path(__file__).name}")
    records = _records()
    own = [r for r in records if r["machine"] == here]
    if own:
        problems, where = _problems(own[0], actual, exact=True), ""
    else:
        problems = [p for r in records for p in _problems(r, actual, exact=False)]
        machines = ", ".join(str(r["machine"]) for r in records)
        where = f"\n(no record of this machine, {here}; compared with {machines}: the discrete parts and summaries)"
    if problems:
        pytest.fail(
            "the golden run changed (regenerate with R3L_REGEN_GOLDEN=1 only if the change is intended):\n"
            + "\n".join(problems)
            + where,
            pytrace=False,
        )


def test_a_machine_without_a_record_compares_discrete_parts_exactly_and_summaries_within_tolerance():
    recorded = {"a.kind": "base", "a.logprobs#exact": "1c39", "a.logprobs≈": [4.0, -5.8, -9.0, -1.0]}
    rounded_otherwise = {"a.kind": "base", "a.logprobs#exact": "ffff", "a.logprobs≈": [4.0, -5.801, -9.0, -1.0]}
    assert _diff(recorded, rounded_otherwise, exact=False) == []
    assert len(_diff(recorded, rounded_otherwise, exact=True)) == 1  # the bits, on the machine of the record
    moved = {**rounded_otherwise, "a.logprobs≈": [4.0, -6.2, -9.0, -1.0]}  # 7 % off: not rounding
    assert [line.split(":")[0].strip() for line in _diff(recorded, moved, exact=False)] == ["a.logprobs≈"]
    other_kind = {**rounded_otherwise, "a.kind": "retry"}
    assert [line.split(":")[0].strip() for line in _diff(recorded, other_kind, exact=False)] == ["a.kind"]
    without_summaries = {"a.kind": "base", "a.logprobs#exact": "1c39"}  # a record made before summaries
    assert _diff(without_summaries, moved, exact=False) == []
