"""The learning page's side tables, as pure functions of small dicts: the fair-rules comparison (Holm-corrected
paired differences, optimiser steps and cut replies), the calibration table read from the calibration harness's
chosen configurations, and the self-reflection rates; and the fair mode's grid."""

import json
from pathlib import Path

import pytest

from benchmarks.learning_study import aggregate, calibration_table, fair, grid, reflection_table, stats

ROOT = Path(__file__).resolve().parents[2]


def test_paired_p_values_match_the_t_table():
    # mean 3, sd sqrt(2.5), n 5: t = 4.243 at 4 degrees of freedom, two-sided p = 0.0132
    assert stats.paired_p([1.0, 2.0, 3.0, 4.0, 5.0]) == pytest.approx(0.0132, abs=2e-4)
    assert stats.paired_p([0.0, 0.0, 0.0]) == 1.0 and stats.paired_p([0.1, 0.1]) == 0.0
    assert stats.paired_p([0.3]) is None
    assert stats.t_cdf(0.0, 3) == pytest.approx(0.5) and stats.t_cdf(-2.776, 4) == pytest.approx(0.025, abs=1e-4)


def test_holm_steps_down_and_stays_monotone():
    # sorted 0.01, 0.03, 0.04 over m = 3: 3 × 0.01, 2 × 0.03, then 1 × 0.04 raised to its predecessor's 0.06
    adjusted = stats.holm([0.01, 0.04, None, 0.03])
    assert adjusted[2] is None
    assert [adjusted[i] for i in (0, 3, 1)] == pytest.approx([0.03, 0.06, 0.06])
    assert stats.holm([0.9, 0.8]) == [1.0, 1.0]


def test_a_family_with_no_detectable_difference_says_so_with_its_n():
    a = {s: 0.2 + 0.01 * s for s in range(5)}
    b = {0: 0.25, 1: 0.18, 2: 0.22, 3: 0.19, 4: 0.26}
    fam = stats.paired_family({"x": (a, b), "clear": ({s: 0.9 for s in range(5)}, {s: 0.1 + 0.01 * s for s in a})})
    assert fam["x"]["verdict"] == "no difference detectable at n = 5" and fam["x"]["family"] == 2
    assert fam["clear"]["verdict"] == "higher" and fam["clear"]["p_holm"] < 0.05
    # the family-wise interval is wider than the plain 95 % one
    assert fam["x"]["lo_adj"] < fam["x"]["lo"] and fam["x"]["hi_adj"] > fam["x"]["hi"]


def _cell(by_seed, before=0.2, stepped=3, no_contrast=5, cut=4, retries=0, won=0):
    seeds = sorted(by_seed)
    diffs = [by_seed[s] - before for s in seeds]
    return {
        "seeds": seeds,
        "success_by_seed": {str(s): v for s, v in by_seed.items()},  # as read back from JSON
        "success": stats.mean_ci(list(by_seed.values())),
        "success_before": stats.mean_ci([before] * len(seeds)),
        "success_delta": stats.mean_ci(diffs),
        "optimizer": {"stepped": stepped, "no_contrast": no_contrast, "non_finite": 0, "cut_replies": cut, "runs": 5},
        "economics": {"retries": retries, "successes": 10},
        "pooled": {"trajectories": 320, "retries_succeeded": won},
    }


def test_the_fair_table_compares_each_method_with_r3l_and_grpo_and_isolates_kl_and_std():
    mode = grid.MODES["fair"]
    pairs = fair.comparison_pairs(mode, grid.METHODS)
    assert ("r3l-oracle", "grpo") in pairs and ("grpo-no-kl", "grpo") in pairs
    assert ("dr-grpo", "grpo-no-kl") in pairs and ("grpo", "r3l-oracle") not in pairs
    assert len(pairs) == len(set(pairs))
    env = "chainsum-2term-eq"
    seeds = range(5)
    by_method = {
        "r3l-oracle": {s: 0.30 + 0.01 * s for s in seeds},
        "grpo": {s: 0.29 + 0.012 * s for s in seeds},
        "grpo-no-kl": {s: 0.05 for s in seeds},  # KL 0 collapses: the KL mattered
        "dr-grpo": {0: 0.06, 1: 0.04, 2: 0.05, 3: 0.07, 4: 0.03},  # the std division did not
        "opmd": {},
        "raft": {},
    }
    cells = {f"{m}|{env}": _cell(v, retries=40 if m == "r3l-oracle" else 0, won=6) for m, v in by_method.items()}
    comps = fair.fair_comparisons(cells, mode, grid.METHODS)[env]
    assert comps["grpo-no-kl|grpo"]["verdict"] == "lower"
    assert comps["r3l-oracle|opmd"]["verdict"] == "too few seeds"
    assert comps["r3l-oracle|grpo"]["family"] == 6  # the comparisons without runs do not count
    data = {"cells": cells, "fair": {env: comps}}
    md = "\n".join(fair.render_fair(data, mode, grid.METHODS))
    assert "learning_old_rules.json" in md and "withdrawn" in md
    assert "(GRPO − KL) − GRPO" in md
    assert "the KL term: (GRPO − KL) − GRPO = " in md and "GRPO − KL is lower than GRPO" in md
    assert "the std division (and token sum): " in md and "no difference detectable at n = 5" in md
    assert "| R³L (oracle) | 5 | 3 | 5 | 0 | 4 | 320 | — | 6 / 40 = 0.150 |" in md
    assert "- R³L (oracle) − (GRPO − KL): +0.270, family-wise CI" in md
    assert "oracle-guided retries won 6 of 40 (0.150)" in md and "GRPO 5 of 8" in md
    runs = [{"env": env, "method": "grpo", "finished": True, "eval_after_detail": {"mean_tokens": t}} for t in (20, 31)]
    md = "\n".join(fair.render_fair({**data, "runs": runs}, mode, grid.METHODS))
    assert "| GRPO | 5 | 3 | 5 | 0 | 4 | 320 | 25.5 | — |" in md


def test_optimizer_counts_from_step_records():
    steps = [
        {"update/skipped_no_contrast": False, "skipped": False, "update/optimizer_steps": 1, "rollout/cut_replies": 2},
        {"update/skipped_no_contrast": True, "skipped": False, "update/optimizer_steps": 1, "rollout/cut_replies": 0},
        {"update/skipped_no_contrast": False, "skipped": True, "update/optimizer_steps": 1, "rollout/cut_replies": 1},
    ]
    counts = aggregate.optimizer_counts(steps)
    assert counts == {"stepped": 1, "no_contrast": 1, "non_finite": 1, "adamw_steps": 1, "cut_replies": 3}
    # runs logged before these counters existed: unknown, not zero
    assert aggregate.optimizer_counts([{"train/reward": 0.0}])["stepped"] is None


def _chosen(**overrides):
    entry = {
        "key": "k",
        "file": "k.json",
        "why": "temperature 0.7",
        "meets": {},
        "base_success": 0.12,
        "retry_success": 0.31,
        "fixed_habit_success": 0.0,
        "random_success": 0.04,
        "episodes": 240,
        "distinct_test_tasks": 240,
    }
    return {**entry, **overrides}


def test_the_calibration_ranges_are_the_harness_targets():
    from benchmarks.calibration.config import TARGETS

    assert TARGETS["base_success"] == calibration_table.BASE_RANGE
    assert TARGETS["retry_success_min"] == calibration_table.RETRY_MIN
    assert TARGETS["retry_over_base_min"] == calibration_table.RETRY_OVER_BASE
    assert TARGETS["fixed_habit_success_max"] == calibration_table.FIXED_MAX
    assert TARGETS["random_success_max"] == calibration_table.RANDOM_MAX
    assert TARGETS["min_episodes"] == calibration_table.MIN_EPISODES
    assert TARGETS["min_distinct_test_tasks"] == calibration_table.MIN_TASKS


def test_calibration_checks_each_number_against_its_range():
    ok = calibration_table.calibration_entry("tw", _chosen(), None)["checks"]
    assert all(ok.values())
    low_retry = calibration_table.checks({**_chosen(), "base_success": 0.2, "retry_success": 0.35})
    assert not low_retry["retry_success"]  # 0.35 < 2 × 0.2
    assert not calibration_table.checks({**_chosen(), "retry_success": None})["retry_success"]
    edge = calibration_table.checks({**_chosen(), "base_success": 0.25, "random_success": 0.10, "episodes": 199})
    assert edge["base_success"] and edge["random_success"] and not edge["episodes"]
    assert not calibration_table.checks({**_chosen(), "base_success": 0.04})["base_success"]


def test_calibration_reads_the_chosen_configurations(tmp_path):
    assert calibration_table.read_calibration(tmp_path) is None  # nothing chosen yet
    folder = tmp_path / "calibration"
    folder.mkdir()
    config = {"env_id": "r3l/TextWorld-v0", "env_kwargs": {"difficulty": 5}, "max_turns": 8, "temperature": 0.7}
    (folder / "k.json").write_text(json.dumps({"config": config, "base_success": 0.12}))
    chosen = {"tw": _chosen(lever="temperature"), "alf": _chosen(file="absent.json", fixed_habit_success=0.5)}
    chosen["th"] = _chosen(file="absent.json", lever="turns", why="the retries follow one step", retry_success=0.2)
    (folder / "chosen.json").write_text(json.dumps(chosen))
    cal = calibration_table.read_calibration(tmp_path)
    assert list(cal) == ["alf", "th", "tw"]
    assert cal["tw"]["config"] == config and cal["tw"]["lever"] == "temperature"
    assert cal["alf"]["config"] is None and cal["alf"]["lever"] == "temperature 0.7"  # its why
    assert not cal["alf"]["checks"]["fixed_habit_success"]
    md = "\n".join(calibration_table.render_calibration(cal))
    assert "| alf | `k` | temperature 0.7 | 0.120 pass | 0.310 pass | 0.500 **fail** |" in md
    assert "max_turns 8, temperature 0.7" in md and "5%–25%" in md
    # the longer account of a configuration out of range, where a lever names it in the table (alf's why is its
    # lever; tw is in range)
    assert md.count("\n- **") == 1 and "- **th**: the retries follow one step" in md
    assert "No configuration has been chosen yet" in "\n".join(calibration_table.render_calibration(None))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json", "is not JSON"),
        ("[1, 2]", "not an object"),
        (json.dumps({"tw": {"base_success": 0.1}}), "lacks"),
        (json.dumps({"tw": _chosen(base_success="high")}), "not a number"),
        (json.dumps({"tw": _chosen(episodes=None)}), "missing"),
    ],
)
def test_a_malformed_calibration_file_is_a_named_error(tmp_path, content, message):
    (tmp_path / "calibration").mkdir()
    (tmp_path / "calibration" / "chosen.json").write_text(content)
    with pytest.raises(calibration_table.CalibrationError, match=message):
        calibration_table.read_calibration(tmp_path)


def test_self_reflection_rates_are_read_and_shown(tmp_path):
    assert reflection_table.read_self_reflection(tmp_path) is None
    rates = {"failed_bases": 87, "parsed": 80, "parse_rate": 80 / 87, "retries": 40, "retry_rate": 40 / 87}
    rates |= {"retry_wins": 5, "retry_success": 5 / 40, "examples": ["long text"]}
    data = {
        "configs": {"th-d5": {"env_id": "r3l/TextWorld-v0", "base_success": 0.09, "reflectors": {"structured": rates}}},
        "complete": True,
        "config": {"model": "smollm2-135m-instruct", "temperature": 1.0, "samples": 3, "tasks": 32},
    }
    (tmp_path / "self_reflection.json").write_text(json.dumps(data))
    read = reflection_table.read_self_reflection(tmp_path)
    assert "examples" not in read["configs"]["th-d5"]["reflectors"]["structured"]
    md = "\n".join(reflection_table.render_self_reflection(read))
    assert "| th-d5 | structured | 87 | 80 (0.92) | 40 (0.46) | 5 (0.12) |" in md and "(finished)" in md
    # several runs made it: their commands, the first one's settings, and what was not measured
    del data["config"]
    data["runs"] = [{"command": "python -m benchmarks.self_reflection", "config": {"model": "m", "temperature": 0.5}}]
    data["not_measured"] = {"coin_collector-d2": "not run for time"}
    (tmp_path / "self_reflection.json").write_text(json.dumps(data))
    md = "\n".join(reflection_table.render_self_reflection(reflection_table.read_self_reflection(tmp_path)))
    assert "model `m` at temperature 0.5" in md and "`python -m benchmarks.self_reflection`" in md
    assert "Not measured: coin_collector-d2 (not run for time)." in md
    # a measurement stopped early (it names what it left out) is not one still running
    data["complete"] = False
    (tmp_path / "self_reflection.json").write_text(json.dumps(data))
    md = "\n".join(reflection_table.render_self_reflection(reflection_table.read_self_reflection(tmp_path)))
    assert "stopped early: partial" in md and "still running" not in md
    del data["not_measured"]
    (tmp_path / "self_reflection.json").write_text(json.dumps(data))
    md = "\n".join(reflection_table.render_self_reflection(reflection_table.read_self_reflection(tmp_path)))
    assert "still running: partial" in md
    (tmp_path / "self_reflection.json").write_text(json.dumps({"rows": []}))
    with pytest.raises(ValueError, match="configs"):
        reflection_table.read_self_reflection(tmp_path)


def test_the_fair_mode_runs_every_method_of_a_seed_before_the_next_with_cut_replies_masked(tmp_path):
    mode = grid.MODES["fair"]
    runs = grid.build_grid(mode, tmp_path)
    assert [(r.method_key, r.seed) for r in runs[:7]] == [
        *((m, 0) for m in mode.methods),
        ("r3l-oracle", 1),
    ]
    assert all(r.config["mask_truncated"] for r in runs)
    assert {r.env_key for r in runs} == {"chainsum-2term-eq"}
    cpu = grid.MODES["cpu"]  # the withdrawn study's budget, unchanged
    for key in ("steps", "tasks_per_step", "group_size", "eval_episodes", "lr"):
        assert getattr(mode, key) == getattr(cpu, key), key
    # the cpu mode keeps its order: pairs of methods over every seed
    assert [r.method_key for r in grid.build_grid(cpu, tmp_path)[:2]] == ["r3l-oracle", "grpo"]
