"""``rollout_backend="auto"``: the cost model's choices on synthetic measurements, and its resolution in a run."""

from __future__ import annotations

import json
import logging
from dataclasses import replace

import pytest

from r3l_learn.loop.config import TrainConfig
from r3l_learn.policies import backends
from r3l_learn.policies.backends import RunShape, choose_backend, resolve_rollout_backend, run_shape
from r3l_learn.policies.device import cpu_kind

CPU = "native bf16 (avx512_bf16)"
# per trajectory at batch 8: free text 2 s on HF, 0.5 on vLLM (4x); constrained 5 s vs 3.75 (1.33x)
MEASURED = {
    "rows": [
        {"task": "countdown (free text)", "batch": 8, "wall_s_hf": 16.0, "wall_s_vllm": 4.0},
        {"task": "textworld (constrained)", "batch": 8, "wall_s_hf": 40.0, "wall_s_vllm": 30.0},
    ],
    "engine_start_s": 10.0,
    "weight_push_s": 1.0,
    "cpu": CPU,
}


def _shape(actions: str, steps: int = 8, batch: int = 8) -> RunShape:
    return RunShape(actions=actions, batch=batch, steps=steps, trajectories_per_step=8)


@pytest.mark.parametrize("actions", ["free", "direct", "constrained"])
def test_vllm_where_measured_faster_over_the_run_and_hf_without_vllm(actions):
    choice = choose_backend(_shape(actions), MEASURED, vllm_available=True, cpu=CPU)
    # 64 trajectories: free/direct 128 s on HF vs 10 + 8 x 1 + 64 x 1.1 x 0.5 = 53.2 on vLLM; constrained 320 vs 282
    assert choice.backend == "vllm"
    assert choice.hf_s == pytest.approx(128.0 if actions != "constrained" else 320.0)
    assert choice.vllm_s == pytest.approx(18 + 64 * 1.1 * (0.5 if actions != "constrained" else 3.75))
    assert choose_backend(_shape(actions), MEASURED, vllm_available=False, cpu=CPU).backend == "hf"


def test_engine_start_and_weight_pushes_count():
    """One step of 8 constrained trajectories: vLLM's 10 s start + a push outweigh its faster collection."""
    choice = choose_backend(_shape("constrained", steps=1), MEASURED, vllm_available=True, cpu=CPU)
    assert choice.backend == "hf" and choice.hf_s == pytest.approx(40.0) and choice.vllm_s == pytest.approx(44.0)
    pushes = {**MEASURED, "weight_push_s": 6.0}  # 8 pushes of 6 s: constrained 322 s on vLLM vs 320 on HF
    assert choose_backend(_shape("constrained"), pushes, vllm_available=True, cpu=CPU).backend == "hf"
    assert choose_backend(_shape("free"), pushes, vllm_available=True, cpu=CPU).backend == "vllm"


def test_short_replies_leave_less_to_win_back():
    """Replies capped at a quarter of the measured mean (10 tokens of 40) cut both estimates 4x: 32 s on HF vs
    10 + 8 + 64 x 1.1 x 0.125 = 26.8 on vLLM; at an eighth, 16 vs 22.4, and HF wins."""
    rows = [{**MEASURED["rows"][0], "tokens_hf": 320, "turns_hf": 8}, MEASURED["rows"][1]]
    measured = {**MEASURED, "rows": rows}
    shape = _shape("direct")
    quarter = choose_backend(replace(shape, max_new_tokens=10), measured, vllm_available=True, cpu=CPU)
    assert quarter.backend == "vllm" and quarter.hf_s == pytest.approx(32.0)
    eighth = choose_backend(replace(shape, max_new_tokens=5), measured, vllm_available=True, cpu=CPU)
    assert eighth.backend == "hf" and eighth.hf_s == pytest.approx(16.0)
    assert choose_backend(replace(shape, max_new_tokens=400), measured, vllm_available=True, cpu=CPU).hf_s == 128.0


def test_numbers_from_another_cpu_kind_need_a_robust_lead():
    """Measured elsewhere, vLLM's time is doubled: free text's 4x lead survives it, constrained's 1.33x does not."""
    other = "no native bf16 (avx2; no avx512_bf16, amx_bf16)"
    assert choose_backend(_shape("free"), MEASURED, vllm_available=True, cpu=other).backend == "vllm"
    choice = choose_backend(_shape("constrained"), MEASURED, vllm_available=True, cpu=other)
    assert choice.backend == "hf" and "another CPU kind" in choice.reason


def test_the_nearest_measured_batch_decides():
    big = {"task": "textworld (constrained)", "batch": 32, "wall_s_hf": 160.0, "wall_s_vllm": 80.0}
    rows = [*MEASURED["rows"], big]
    measured = {**MEASURED, "rows": rows}
    assert "batch 8" in choose_backend(_shape("constrained", batch=12), measured, vllm_available=True, cpu=CPU).reason
    far = choose_backend(_shape("constrained", batch=24), measured, vllm_available=True, cpu=CPU)
    assert "batch 32" in far.reason and far.hf_s == pytest.approx(64 * 5.0)


@pytest.mark.parametrize(
    "measured",
    [None, {}, {"rows": MEASURED["rows"]}, {**MEASURED, "rows": MEASURED["rows"][:1]}],
    ids=["none", "empty", "no-engine-start", "no-constrained-row"],
)
def test_without_measurements_of_the_mode_hf(measured):
    assert choose_backend(_shape("constrained"), measured, vllm_available=True, cpu=CPU).backend == "hf"


def test_cuda_has_no_measurements_and_unknown_modes_are_refused():
    cuda = RunShape(actions="free", batch=8, steps=8, trajectories_per_step=8, device="cuda")
    assert choose_backend(cuda, MEASURED, vllm_available=True, cpu=CPU).backend == "hf"
    with pytest.raises(ValueError, match="actions"):
        choose_backend(_shape("telepathy"), MEASURED, vllm_available=True, cpu=CPU)


def test_a_runs_shape_plays_reflect_retry_bases_first():
    r3l = run_shape({"algo": "r3l", "tasks_per_step": 2, "group_size": 4, "steps": 8, "actions": "constrained"})
    assert (r3l.batch, r3l.trajectories_per_step, r3l.steps, r3l.max_new_tokens) == (4, 8, 8, 256)
    grpo = run_shape({"algo": "grpo", "tasks_per_step": 2, "group_size": 4, "expert_demos": 1})
    assert grpo.batch == 6 and grpo.trajectories_per_step == 8


def test_a_config_with_auto_validates_and_a_bad_backend_does_not():
    assert TrainConfig(rollout_backend="auto").rollout_backend == "auto"
    TrainConfig(rollout_backend="auto", lora_rank=4)  # resolves to hf: adapters are not merged into vLLM
    with pytest.raises(ValueError, match="rollout_backend"):
        TrainConfig(rollout_backend="sglang")


def test_auto_resolves_to_hf_without_vllm_and_to_the_measured_pick_with_it(tmp_path, monkeypatch, caplog):
    path = tmp_path / "vllm_cpu.json"
    path.write_text(json.dumps({**MEASURED, "cpu": cpu_kind()}))
    fields = TrainConfig(rollout_backend="auto", steps=8, tasks_per_step=2, group_size=4).to_dict()
    monkeypatch.setattr(backends, "vllm_importable", lambda: False)
    with caplog.at_level(logging.INFO, logger="r3l_learn.policies.backends"):
        assert resolve_rollout_backend(fields, path) == "hf"
        assert resolve_rollout_backend(fields, path) == "hf"
    assert sum("auto -> hf: vllm is not installed" in r.getMessage() for r in caplog.records) == 1  # logged once
    monkeypatch.setattr(backends, "vllm_importable", lambda: True)
    assert resolve_rollout_backend(fields, path) == "vllm"  # free text, batch 4: the batch-8 row's 4x lead
    assert resolve_rollout_backend({**fields, "lora_rank": 8}, path) == "hf"
    assert resolve_rollout_backend({**fields, "rollout_backend": "hf"}, path) == "hf"  # explicit choices stand
    assert resolve_rollout_backend(fields, tmp_path / "missing.json") == "hf"


def test_the_rollout_player_of_an_auto_run_without_vllm_is_the_trained_policy(tiny_policy, monkeypatch):
    from r3l_learn.loop.setup import rollout_policy

    monkeypatch.setattr(backends, "vllm_importable", lambda: False)
    assert rollout_policy(TrainConfig(rollout_backend="auto"), tiny_policy) is tiny_policy


def test_the_shipped_measurements_are_the_benchmarks_results_and_need_no_file(monkeypatch):
    """``auto`` decides by numbers that ship in the package; they are those benchmarks/vllm_cpu.py saved (a rerun
    of the benchmark updates both), and resolving reads no file."""
    from pathlib import Path

    saved = json.loads((Path(__file__).parents[2] / "benchmarks" / "results" / "vllm_cpu.json").read_text())
    for key in ("engine_start_s", "hf_load_s", "weight_push_s", "dtype", "cpu"):
        assert backends.MEASURED[key] == saved[key]
    assert backends.MEASURED["rows"] == [{k: row[k] for k in backends.MEASURED["rows"][0]} for row in saved["rows"]]
    fields = TrainConfig(rollout_backend="auto", steps=8, tasks_per_step=2, group_size=4).to_dict()

    def no_file(path):
        raise AssertionError(f"read {path}")

    monkeypatch.setattr(backends, "load_measurements", no_file)
    monkeypatch.setattr(backends, "vllm_importable", lambda: True)
    shape = run_shape(fields)
    expected = choose_backend(shape, backends.MEASURED, vllm_available=True, cpu=cpu_kind()).backend
    assert resolve_rollout_backend(fields) == expected
