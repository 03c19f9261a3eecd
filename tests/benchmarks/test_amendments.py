"""Amendments admitting another CPU kind to the pre-registered study (benchmarks/learning_study/amendments.py) and
the rules that keep each seed on one kind (kinds.py): what a declaration refuses, what the test stage then accepts,
which runs a machine leaves for another kind, and where the eval before training is made. Then the seed-quota
amendment (quota.py): which candidate seeds a machine makes, and when it may be declared."""

import dataclasses
import json
from pathlib import Path

import pytest

from benchmarks.learning_study import (
    aggregate,
    amendments,
    cli,
    grid,
    kinds,
    prereg,
    prereg_page,
    quota,
    scheduler,
    stats,
)
from r3l_learn.policies import device

ENV = prereg.PREREG_ENVS[0]
REGISTERED_WARMUP = {"examples": 53, "target_tokens": 111, "loss_before": 2.2479501, "final_loss": 0.00054515}
REBUILT_WARMUP = {**REGISTERED_WARMUP, "loss_before": 2.2479419, "final_loss": 0.00054513}


def _registration(autocast: str = "bf16-elsewhere") -> dict:
    """A test-stage registration made on another CPU kind (its autocast is not this machine's)."""
    mode, _ = prereg.valid_mode("tiny-random", envs=(ENV,))
    cells = {}
    for m in prereg.TUNED:
        for lr in prereg.LRS:
            cells[f"{prereg.lr_key(m, lr)}|{ENV}"] = {"success": stats.mean_ci([0.2])}
    data = prereg.registration(
        cells, mode, command="test", commit={"commit": "0" * 40, "uncommitted_changes": False}, date="2026-11-26"
    )
    data["settings"]["shared"]["autocast"] = autocast
    data["warmup"] = dict(REGISTERED_WARMUP)
    return data


def _declare(registered, admitted=(), **changes):
    args = dict(
        kind="kind B",
        autocast="off",
        warmup=REBUILT_WARMUP,
        runs_made_here=[],
        declared=amendments.declaration("declare", {"commit": "1" * 40}, "2026-11-27"),
    )
    return amendments.declare(registered, list(admitted), **{**args, **changes})


def test_a_declaration_admits_a_rebuild_of_the_registered_recipe_before_any_run_and_nothing_else():
    registered = _registration()
    made = _declare(registered)
    assert made["kind"] == "kind B" and made["autocast"] == "off" and made["warmup"] == REBUILT_WARMUP
    assert made["commit"] == "1" * 40 and made["rules"] == list(amendments.RULES)
    with pytest.raises(ValueError, match="nothing to amend"):
        _declare(registered, autocast="bf16-elsewhere", warmup=REGISTERED_WARMUP)
    with pytest.raises(ValueError, match="already admitted"):
        _declare(registered, admitted=[made])
    with pytest.raises(ValueError, match="2 test-stage runs on this kind were already made"):
        _declare(registered, runs_made_here=["th/r3l/seed5", "th/grpo/seed5"])
    with pytest.raises(ValueError, match="differs from the registered one in examples"):
        _declare(registered, warmup={**REBUILT_WARMUP, "examples": 52})
    with pytest.raises(ValueError, match="missing"):
        _declare(registered, warmup=None)


def test_the_test_stage_accepts_an_admitted_kind_with_its_own_start_model_only(tmp_path, monkeypatch):
    monkeypatch.setattr(device, "cpu_kind", lambda: "kind B")
    registered = _registration()
    warm = tmp_path / "warm"
    warm.mkdir()
    (warm / "warmup.json").write_text(json.dumps(REBUILT_WARMUP))
    refused = prereg.check_registered(registered, str(warm))
    assert any("autocast is resolved per CPU" in p and "kind B" in p for p in refused)
    admitted = [_declare(registered, autocast=grid.CPU_AUTOCAST)]
    assert prereg.check_registered(registered, str(warm), amendments=admitted) == []
    assert registered["settings"]["shared"]["autocast"] == "bf16-elsewhere"  # the registration is left alone
    (warm / "warmup.json").write_text(json.dumps(REGISTERED_WARMUP))  # not this kind's start model
    problems = prereg.check_registered(registered, str(warm), amendments=admitted)
    assert any("the start model its amendment admits on kind B" in p for p in problems)
    monkeypatch.setattr(device, "cpu_kind", lambda: "kind C")  # a kind no amendment admits
    assert prereg.check_registered(registered, str(warm), amendments=admitted)


def _study(tmp_path: Path, monkeypatch) -> tuple[Path, Path, Path, list[str]]:
    """A registered study on a machine of "kind B" with its start model rebuilt: the results folder, the start
    model, the out-root and the test stage's arguments."""
    monkeypatch.setattr(cli, "cpu_kind", lambda: "kind B")
    monkeypatch.setattr(device, "cpu_kind", lambda: "kind B")
    results, warm, out = tmp_path / "results", tmp_path / "warm", tmp_path / "runs"
    results.mkdir()
    warm.mkdir()
    (warm / "warmup.json").write_text(json.dumps(REBUILT_WARMUP))
    prereg.write_prereg(_registration(), results / prereg.PREREG_JSON)
    argv = ["--mode", "prereg", "--model", str(warm), "--results-dir", str(results), "--out-root", str(out)]
    return results, warm, out, argv


def test_declare_kind_writes_the_amendment_and_the_test_stage_then_runs_here(tmp_path, monkeypatch):
    results, warm, _, argv = _study(tmp_path, monkeypatch)
    with pytest.raises(SystemExit, match="not run what was pre-registered"):
        cli.main([*argv, "--report-only", "--no-report"])
    assert cli.main([*argv, "--declare-kind", "--note", "A pilot ran here first."]) == 0
    written = json.loads((results / amendments.AMENDMENTS_JSON).read_text())
    assert [a["kind"] for a in written] == ["kind B"] and written[0]["autocast"] == grid.CPU_AUTOCAST
    assert written[0]["note"] == "A pilot ran here first."
    assert "--declare-kind" in written[0]["command"]
    with pytest.raises(SystemExit, match="already admitted"):
        cli.main([*argv, "--declare-kind"])
    assert cli.main([*argv, "--report-only", "--no-report"]) == 0  # admitted: the test stage is accepted here
    with pytest.raises(SystemExit):
        cli.main(["--mode", "prereg-valid", "--model", str(warm), "--declare-kind"])  # only the test stage


def test_a_declaration_after_runs_on_this_kind_is_refused(tmp_path, monkeypatch):
    results, _, out, argv = _study(tmp_path, monkeypatch)
    run_dir = out / ENV / "grpo" / "seed5"
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.jsonl").write_text('{"step": 1, "train/reward": 0.0}\n')
    with pytest.raises(SystemExit, match=f"1 test-stage runs on this kind were already made \\({ENV}/grpo/seed5\\)"):
        cli.main([*argv, "--declare-kind"])
    assert not (results / amendments.AMENDMENTS_JSON).exists()


MODE = grid.Mode(
    "kinds",
    "two methods, three seeds, one eval before training per env",
    envs=("corridor",),
    methods=("r3l-oracle", "grpo"),
    seeds=(0, 1, 2),
    steps=2,
    tasks_per_step=1,
    group_size=2,
    eval_episodes=2,
    eval_every=0,
    seed_major=True,
    before_once_per_env=True,
)


def _carried(run: grid.Run, machine: str, before: bool = False) -> dict:
    return {"machine": machine, "before": {"success": 0.1} if before else None, "finished": True}


def test_a_seed_another_kind_began_is_left_to_that_kind_and_each_kind_evaluates_the_start_once(tmp_path):
    runs = grid.build_grid(MODE, tmp_path, envs={"corridor": grid.ENVS["textworld"]})
    by = {(r.method_key, r.seed): r for r in runs}
    # seed 0 made elsewhere (both methods, with the eval before training); seed 1 half made elsewhere
    carried = {by[m, 0].name: _carried(by[m, 0], "kind A", before=m == "r3l-oracle") for m in MODE.methods}
    carried[by["r3l-oracle", 1].name] = _carried(by["r3l-oracle", 1], "kind A")
    todo = [r for r in runs if r.name not in carried]
    mine, elsewhere = kinds.split_by_kind(todo, runs, carried, "kind B")
    assert [r.name for r in elsewhere] == [by["grpo", 1].name]
    assert [(r.method_key, r.seed) for r in mine] == [("r3l-oracle", 2), ("grpo", 2)]
    # kind A has made its eval before training; kind B has not: its first run here makes it, the others share it
    assert [r.config["eval_before"] for r in kinds.with_before_evals(mine, runs, carried, "kind B")] == [True, False]
    _, elsewhere_a = kinds.split_by_kind(todo, runs, carried, "kind A")
    assert elsewhere_a == []
    assert [r.config["eval_before"] for r in kinds.with_before_evals(todo, runs, carried, "kind A")] == [False] * 3
    # a run directory here is this machine's kind's: its eval before training counts, and its seed stays here
    # even where the other kind has since finished a run of it (the page's harness check then flags the seed)
    by["r3l-oracle", 2].run_dir.mkdir(parents=True)
    (by["r3l-oracle", 2].run_dir / "metrics.jsonl").write_text('{"step": 0, "eval/success_rate": 0.2}\n')
    assert [r.config["eval_before"] for r in kinds.with_before_evals(mine, runs, carried, "kind B")] == [False] * 2
    carried[by["grpo", 2].name] = _carried(by["grpo", 2], "kind A")
    mine, _ = kinds.split_by_kind([by["r3l-oracle", 2]], runs, carried, "kind B")
    assert mine == [by["r3l-oracle", 2]]


def test_the_harness_check_flags_a_seed_whose_runs_are_of_two_kinds():
    runs = [
        {"env": "e", "seed": 0, "finished": True, "machine": "A"},
        {"env": "e", "seed": 0, "finished": True, "machine": "A"},
        {"env": "e", "seed": 1, "finished": True, "machine": "A"},
        {"env": "e", "seed": 1, "finished": True, "machine": "B"},
        {"env": "e", "seed": 2, "finished": False, "machine": "B"},
    ]
    assert kinds.kinds_agree(runs) == {"e|0": True, "e|1": False}


def test_a_run_not_begun_names_no_machine_and_a_begun_one_names_this_machines_kind(tmp_path):
    runs = grid.build_grid(MODE, tmp_path, envs={"corridor": grid.ENVS["textworld"]})
    begun, waiting = runs[0], runs[1]
    begun.run_dir.mkdir(parents=True)
    (begun.run_dir / "metrics.jsonl").write_text('{"step": 0, "eval/success_rate": 0.2}\n')
    assert aggregate.run_summary(begun, "kind B")["machine"] == "kind B"
    assert aggregate.run_summary(waiting, "kind B")["machine"] is None  # the page never says where a run was not made


def test_the_expected_wall_time_is_judged_from_runs_of_this_cpu_kind(tmp_path):
    runs = grid.build_grid(dataclasses.replace(MODE, steps=4), tmp_path, envs={"corridor": grid.ENVS["textworld"]})
    run = next(r for r in runs if r.method_key == "grpo")
    saved = {
        "runs": [
            {"env": "corridor", "method": "grpo", "finished": True, "wall_s": w, "machine": k}
            for w, k in ((100, "A"), (120, "A"), (300, "B"))
        ]
    }
    assert scheduler.wall_estimator(saved, "B")(run) == pytest.approx(300 * scheduler.WALL_MARGIN)
    assert scheduler.wall_estimator(saved, "A")(run) == pytest.approx(110 * scheduler.WALL_MARGIN)
    assert scheduler.wall_estimator(saved, "C")(run) is None  # no run of this kind: unknown, so it is tried


def test_amendments_are_read_back_and_a_malformed_file_is_refused(tmp_path):
    path = Path(tmp_path) / amendments.AMENDMENTS_JSON
    assert amendments.read_amendments(path) == []
    made = _declare(_registration())
    path.write_text(json.dumps([made]))
    assert amendments.read_amendments(path) == [made]
    assert amendments.amendment_for([made], "kind B") == made and amendments.amendment_for([made], "x") is None
    path.write_text(json.dumps({"kind": "kind B"}))
    with pytest.raises(ValueError, match="not a list of pre-registration amendments"):
        amendments.read_amendments(path)


# Seed quotas (quota.py): the amendment that replaces the registered seeds by candidates and a count to reach.

GROUP = {"env": "th", "methods": ["r3l-oracle", "grpo"], "seeds": [0, 1, 2, 3, 4, 5], "quota": 3}


def _finished(*seeds: int, methods=("r3l-oracle", "grpo")) -> set[str]:
    return {grid.run_name("th", m, s) for s in seeds for m in methods}


def test_a_machine_makes_candidate_seeds_in_order_skipping_those_another_kind_began_until_the_quota():
    assert quota.seeds_to_make(GROUP, set(), {}, "B") == [0, 1, 2]
    # seed 1 begun on kind A and not finished by the group: left to kind A, seed 3 takes its place here
    began = {("th", 1): {"A"}}
    assert quota.seeds_to_make(GROUP, set(), began, "B") == [0, 2, 3]
    assert quota.seeds_to_make(GROUP, set(), began, "A") == [0, 1, 2]
    # a seed the whole group finished counts wherever it was made; one run of a pair is not a finished seed
    half = {grid.run_name("th", "r3l-oracle", 0)}
    assert quota.seeds_to_make(GROUP, _finished(1), began, "B") == [0, 2]
    assert quota.counted_seeds(GROUP, _finished(1) | half) == [1]
    assert quota.shortfall(GROUP, _finished(1) | half) == 2
    # the quota met by the first candidates: nothing more to make; a later candidate finished elsewhere does not
    # stop an earlier one being made (the walk is in order, so the registered seeds come first)
    assert quota.seeds_to_make(GROUP, _finished(0, 1, 2), began, "B") == []
    assert quota.seeds_to_make(GROUP, _finished(0, 1, 4), began, "B") == [2]
    assert quota.shortfall(GROUP, _finished(0, 1, 4, 5)) == 0
    assert quota.allowed_runs([GROUP], set(), began, "B") == _finished(0, 2, 3)


def test_the_test_stage_under_seed_quotas_plans_the_registered_number_of_runs_over_candidate_seeds():
    registered = _registration()
    plain, _ = prereg.test_mode(registered, "warm")
    mode, _ = prereg.test_mode(registered, "warm", seed_plan=quota.SEED_PLAN)
    assert plain.seed_quotas == () and plain.seeds_for("grpo", ENV) == prereg.MAIN_SEEDS
    assert mode.seeds_for("grpo", ENV) == tuple(range(15)) and mode.seeds_for("raft", ENV) == tuple(range(10))
    strongest = registered["choices"][ENV]["strongest_baseline"]
    main = {g["env"]: g["methods"] for g in mode.seed_quotas if g["quota"] == 10}
    assert main == {ENV: list(dict.fromkeys(["r3l-oracle", "grpo", strongest]))}
    others = [g["methods"] for g in mode.seed_quotas if g["quota"] == 5]
    assert others == [["r3l-oracle", m] for m in mode.methods if m not in main[ENV]]
    planned = {m: (plain.planned(m, ENV), mode.planned(m, ENV)) for m in mode.methods}
    assert all(before == after for before, after in planned.values())  # the same number of runs is planned
    assert grid.Mode.from_dict(dataclasses.asdict(mode)) == mode  # a saved report reads its quotas back
    assert "until 10 seeds each finished" in mode.description


def test_a_sweep_under_seed_quotas_substitutes_a_seed_left_to_another_kind(tmp_path):
    quotas = ({"env": "corridor", "methods": ["r3l-oracle", "grpo"], "seeds": [0, 1, 2, 3], "quota": 2},)
    mode = dataclasses.replace(MODE, seeds=(0, 1, 2, 3), seed_quotas=quotas)
    runs = grid.build_grid(mode, tmp_path, envs={"corridor": grid.ENVS["textworld"]})
    by = {(r.method_key, r.seed): r for r in runs}
    carried = {by["r3l-oracle", 0].name: _carried(by["r3l-oracle", 0], "kind A")}  # kind A began seed 0
    todo, elsewhere = kinds.split_by_kind([r for r in runs if r.name not in carried], runs, carried, "kind B")
    mine, beyond = scheduler.within_quotas(mode, todo, runs, carried, "kind B")
    assert [r.name for r in elsewhere] == [by["grpo", 0].name]
    assert [(r.method_key, r.seed) for r in mine] == [(m, s) for s in (1, 2) for m in mode.methods]
    assert [(r.method_key, r.seed) for r in beyond] == [(m, 3) for m in mode.methods]
    # kind A makes its own seed first and counts it
    todo_a, _ = kinds.split_by_kind([r for r in runs if r.name not in carried], runs, carried, "kind A")
    mine_a, _ = scheduler.within_quotas(mode, todo_a, runs, carried, "kind A")
    assert [(r.method_key, r.seed) for r in mine_a] == [("grpo", 0), ("r3l-oracle", 1), ("grpo", 1)]
    # the page lists the groups' shortfalls, not every candidate seed
    per_run = [{"env": "corridor", "method": m, "seed": 1, "finished": True, "stale": False} for m in mode.methods]
    missing = aggregate.missing_cells(mode, per_run, {})
    assert missing == [{"env": "corridor", "methods": ["r3l-oracle", "grpo"], "more": 1, "counted": [1]}]


def test_declare_seeds_writes_the_amendment_once_and_only_before_any_run_it_admits(tmp_path, monkeypatch):
    results, _, out, argv = _study(tmp_path, monkeypatch)
    assert cli.main([*argv, "--declare-kind"]) == 0
    run_dir = out / ENV / "raft" / "seed5"  # a run of a seed the registration did not plan for that cell
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.jsonl").write_text('{"step": 1, "train/reward": 0.0}\n')
    with pytest.raises(SystemExit, match=f"1 runs the seed quotas would admit were already made \\({ENV}/raft/seed5"):
        cli.main([*argv, "--declare-seeds"])
    (run_dir / "metrics.jsonl").unlink()  # not begun after all; seed 5 of a main cell is registered:
    (out / ENV / "grpo" / "seed5").mkdir(parents=True)
    (out / ENV / "grpo" / "seed5" / "metrics.jsonl").write_text('{"step": 1, "train/reward": 0.0}\n')
    assert cli.main([*argv, "--declare-seeds", "--note", "Seeds 0-4 wait for another kind."]) == 0
    written = amendments.read_amendments(results / amendments.AMENDMENTS_JSON)
    assert [("kind" in a, "seeds" in a) for a in written] == [(True, False), (False, True)]
    assert written[1]["seeds"] == quota.SEED_PLAN and written[1]["rules"] == list(quota.SEED_RULES)
    assert (
        amendments.amendment_for(written, "kind B") == written[0] and amendments.seed_amendment(written) == written[1]
    )
    with pytest.raises(SystemExit, match="already declared"):
        cli.main([*argv, "--declare-seeds"])
    with pytest.raises(SystemExit):
        cli.main([*argv, "--declare-seeds", "--declare-kind"])
    parser = cli.build_parser()
    mode, _ = cli.resolve_mode(parser.parse_args(argv), parser)
    assert mode.seed_quotas and mode.planned("raft", ENV) == 5
    page = "\n".join(prereg_page._amendments(written))
    assert "**seed quotas**" in page and "candidates 0-14" in page and "Seeds 0-4 wait for another kind." in page
    assert "Under every amendment admitting seed quotas:" in page and "admitting a CPU kind:" in page
