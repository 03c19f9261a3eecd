"""benchmarks/learning.py: the grid runs end to end (subprocess per run, tiny model, corridor env), aggregates into
the tables, skips finished runs on a rerun, resumes a checkpointed one; its statistics are right."""

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load():
    spec = importlib.util.spec_from_file_location("bench_learning", ROOT / "benchmarks" / "learning.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


learning = _load()

CORRIDOR = learning.EnvSetting(
    env="r3ltest/Corridor-v0",
    kwargs={},
    actions="constrained",
    max_turns=4,
    max_new_tokens=8,
    kind="test corridor",
    data="the tests' corridor env",
    setup="tests:corridor:register",
)
ENVS = {"corridor": CORRIDOR}
MODE = learning.Mode(
    "test",
    "two steps with the tiny random model",
    envs=("corridor",),
    methods=("r3l", "grpo"),
    seeds=(0, 1),
    steps=1,
    tasks_per_step=1,
    group_size=2,
    eval_episodes=2,
    eval_every=0,
    lr=1e-2,
    model="tiny-random",
)


def test_t_quantiles_match_the_tables():
    for df, expected in ((1, 12.706), (2, 4.303), (5, 2.571), (30, 2.042), (120, 1.980)):
        assert learning.t_quantile(df) == pytest.approx(expected, abs=1e-3)


def test_mean_ci_paired_differences_and_verdicts():
    stat = learning.mean_ci([0.0, 0.5, 1.0])
    half = 4.303 * 0.5 / math.sqrt(3)
    assert stat["n"] == 3 and stat["mean"] == 0.5 and stat["ci"] == pytest.approx(half, abs=1e-3)
    assert learning.mean_ci([0.3])["ci"] is None
    diff = learning.paired({0: 0.5, 1: 0.7, 2: 0.9}, {0: 0.1, 1: 0.2, 3: 0.0})
    assert diff["seeds"] == [0, 1] and diff["mean"] == pytest.approx(0.45)
    assert learning.verdict(learning.paired({0: 1.0, 1: 0.9, 2: 1.0}, {0: 0.0, 1: 0.1, 2: 0.1})) == "higher"
    assert learning.verdict(learning.paired({0: 0.0, 1: 0.0}, {0: 0.0, 1: 0.0})) == "identical"
    assert learning.verdict(learning.paired({0: 0.5, 1: 0.0}, {0: 0.0, 1: 0.5})) == "no significant difference"
    assert learning.verdict(learning.paired({0: 0.5}, {0: 0.0})) == "too few seeds"


def test_method_envs_restricts_cells_and_the_page_says_so(tmp_path):
    mode = learning.dataclasses.replace(
        MODE, envs=("corridor", "other"), methods=("r3l", "grpo", "r3l-self"), method_envs={"r3l-self": ("other",)}
    )
    cells = {(r.method_key, r.env_key) for r in learning.build_grid(mode, tmp_path, envs={**ENVS, "other": CORRIDOR})}
    assert cells == {
        ("r3l", "corridor"),
        ("grpo", "corridor"),
        ("r3l", "other"),
        ("grpo", "other"),
        ("r3l-self", "other"),
    }
    assert mode.envs_of(["r3l-self"]) == ("other",) and not mode.runs_on("r3l-self", "corridor")
    table = learning._grid({"r3l-self|other": {}}, mode, learning.METHODS, ["r3l-self"], lambda c: "x")
    assert table[-1] == "| R³L, self-reflection | not run | x |"


def test_only_memory_settings_may_be_overridden_and_they_keep_a_run_current(tmp_path):
    with pytest.raises(ValueError, match="micro_batch_size"):
        learning.sweep(MODE, out_root=tmp_path, envs=ENVS, overrides={"lr": 1.0})
    run = learning.build_grid(MODE, tmp_path, envs=ENVS)[0]
    run.run_dir.mkdir(parents=True)
    (run.run_dir / "config.json").write_text(json.dumps({**run.config, "micro_batch_size": 1}))
    assert learning.state(run) == "fresh"  # not "stale": the loss does not depend on the micro-batch size
    (run.run_dir / "config.json").write_text(json.dumps({**run.config, "lr": 1.0}))
    assert learning.state(run) == "stale"


def test_every_mode_builds_valid_configs(tmp_path):
    from r3l_learn.train import TrainConfig

    for mode in learning.MODES.values():
        runs = learning.build_grid(mode, tmp_path)
        cells = sum(mode.runs_on(m, e) for m in mode.methods for e in mode.envs)
        assert len(runs) == cells * len(mode.seeds) and len({r.run_dir for r in runs}) == len(runs)
        assert [r.method_key for r in runs[:2]] == ["r3l", "grpo"]  # the comparison the issue asks for runs first
        for run in runs:
            TrainConfig(**run.config)


@pytest.mark.slow
def test_the_grid_runs_aggregates_skips_and_resumes(tmp_path):
    real_md = learning._report.RESULTS_MD
    out_root = tmp_path / "runs"
    runs, info = learning.sweep(MODE, out_root=out_root, envs=ENVS, threads=1, keep_checkpoints=True)
    assert info["counts"] == {"done": 4}, info
    for run in runs:
        records = [json.loads(line) for line in (run.run_dir / "metrics.jsonl").read_text().splitlines()]
        step = next(r for r in records if "train/reward" in r)
        assert step["bench/trajectories"] == MODE.group_size * MODE.tasks_per_step
        assert (run.run_dir / "result.json").is_file()

    md, results = tmp_path / "RESULTS.md", tmp_path / "results"
    data = learning.write_report(
        MODE, runs, command="test", results_md=md, results_dir=results, plots_dir=tmp_path / "plots", envs=ENVS
    )
    assert data["missing"] == []
    assert [r.config["eval_before"] for r in runs] == [True, False, True, False]  # R³L evaluates, GRPO reuses
    assert all(s["before_shared"] == (s["method"] == "grpo") for s in data["runs"])
    assert data["cells"]["grpo|corridor"]["success_before"]["n"] == 2
    cell = data["cells"]["r3l|corridor"]
    assert cell["success"]["n"] == 2 and cell["trajectories"]["mean"] == 2
    assert cell["economics"]["parse_rate"] is not None  # the oracle reflected on every base
    assert data["cells"]["grpo|corridor"]["economics"]["retries"] == 0
    assert {c["other"] for c in data["comparisons"]} == {"grpo"}
    page = md.read_text()
    assert "<!-- begin:learning -->" in page and "<!-- end:learning -->" in page
    for text in ("| R³L |", "| GRPO |", "### Held-out success after training", "### Retry economics", "corridor.png"):
        assert text in page, text
    assert "retry from scratch" in page and "R³L vs GRPO (success)" in page
    assert json.loads((results / "learning.json").read_text())["mode"]["name"] == "test"
    assert (tmp_path / "plots" / "corridor.png").stat().st_size > 0
    assert real_md == learning._report.RESULTS_MD  # write_report pointed _report at tmp_path for its call only

    _, again = learning.sweep(MODE, out_root=out_root, envs=ENVS, threads=1)
    assert again["counts"] == {"skipped": 4}

    # a checkpointed run asked for a longer budget resumes instead of starting over
    longer = learning.dataclasses.replace(MODE, steps=2, methods=("grpo",), seeds=(0,))
    run = learning.build_grid(longer, out_root, envs=ENVS)[0]
    assert learning.state(run) == "resume"
    _, resumed = learning.sweep(longer, out_root=out_root, envs=ENVS, threads=1)
    assert resumed["counts"] == {"done": 1}
    assert not (run.run_dir / "checkpoints").exists()  # removed once the run finished
    attempts = json.loads((run.run_dir / "run.json").read_text())["attempts"]
    assert [a["resumed"] for a in attempts] == [False, True]
    steps = [json.loads(line)["step"] for line in (run.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 1, 2, 2]  # step 1, the first final eval, step 2, the final eval (R³L evaluated before)
    summary = next(s for s in learning.aggregate(longer, [run])["runs"])
    assert summary["before"] is None  # no R³L run in this grid to take the initial eval from
