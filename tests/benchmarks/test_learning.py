"""benchmarks/learning.py and its package benchmarks/learning_study: the grid runs end to end (subprocess per run,
tiny model, corridor env), aggregates into the tables, skips finished runs on a rerun, resumes a checkpointed one;
its statistics are right; a saved learning.json renders the same page again."""

import dataclasses
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.learning_study import aggregate, cli, discussion, grid, page, report, rundir, scheduler, stats

ROOT = Path(__file__).resolve().parents[2]

CORRIDOR = grid.EnvSetting(
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
MODE = grid.Mode(
    "test",
    "two steps with the tiny random model",
    envs=("corridor",),
    methods=("r3l-oracle", "grpo"),
    seeds=(0, 1),
    steps=1,
    tasks_per_step=1,
    group_size=2,
    eval_episodes=2,
    eval_every=0,
    lr=1e-2,
    model="tiny-random",
)


def _section(markdown: str) -> str:
    """The body of the test mode's section (``learning_test``) of a RESULTS.md page."""
    begin, end = "<!-- begin:learning_test -->\n", "\n<!-- end:learning_test -->"
    return markdown[markdown.index(begin) + len(begin) : markdown.index(end)]


def test_t_quantiles_match_the_tables():
    for df, expected in ((1, 12.706), (2, 4.303), (5, 2.571), (30, 2.042), (120, 1.980)):
        assert stats.t_quantile(df) == pytest.approx(expected, abs=1e-3)


def test_mean_ci_paired_differences_and_verdicts():
    stat = stats.mean_ci([0.0, 0.5, 1.0])
    half = 4.303 * 0.5 / math.sqrt(3)
    assert stat["n"] == 3 and stat["mean"] == 0.5 and stat["ci"] == pytest.approx(half, abs=1e-3)
    assert stats.mean_ci([0.3])["ci"] is None
    diff = stats.paired({0: 0.5, 1: 0.7, 2: 0.9}, {0: 0.1, 1: 0.2, 3: 0.0})
    assert diff["seeds"] == [0, 1] and diff["mean"] == pytest.approx(0.45)
    assert stats.verdict(stats.paired({0: 1.0, 1: 0.9, 2: 1.0}, {0: 0.0, 1: 0.1, 2: 0.1})) == "higher"
    assert stats.verdict(stats.paired({0: 0.0, 1: 0.0}, {0: 0.0, 1: 0.0})) == "identical"
    assert stats.verdict(stats.paired({0: 0.5, 1: 0.0}, {0: 0.0, 1: 0.5})) == "no significant difference"
    assert stats.verdict(stats.paired({0: 0.5}, {0: 0.0})) == "too few seeds"


def test_method_envs_restricts_cells_and_the_page_says_so(tmp_path):
    mode = dataclasses.replace(
        MODE,
        envs=("corridor", "other"),
        methods=("r3l-oracle", "grpo", "r3l-self"),
        method_envs={"r3l-self": ("other",)},
    )
    cells = {(r.method_key, r.env_key) for r in grid.build_grid(mode, tmp_path, envs={**ENVS, "other": CORRIDOR})}
    assert cells == {
        ("r3l-oracle", "corridor"),
        ("grpo", "corridor"),
        ("r3l-oracle", "other"),
        ("grpo", "other"),
        ("r3l-self", "other"),
    }
    assert mode.envs_of(["r3l-self"]) == ("other",) and not mode.runs_on("r3l-self", "corridor")
    table = page.grid_table({"r3l-self|other": {}}, mode, grid.METHODS, ["r3l-self"], lambda c: "x")
    assert table[-1] == "| R³L (self-reflection) | not run | x |"


def test_only_memory_settings_may_be_overridden_and_they_keep_a_run_current(tmp_path):
    with pytest.raises(ValueError, match="micro_batch_size"):
        scheduler.sweep(MODE, out_root=tmp_path, envs=ENVS, overrides={"lr": 1.0})
    from r3l_learn.loop.train import config_from_dict

    run = grid.build_grid(MODE, tmp_path, envs=ENVS)[0]
    run.run_dir.mkdir(parents=True)
    saved = config_from_dict(run.config).to_dict()  # as train writes it: every field
    (run.run_dir / "config.json").write_text(json.dumps({**saved, "micro_batch_size": 1}))
    assert rundir.state(run) == "fresh"  # not "stale": the loss does not depend on the micro-batch size
    (run.run_dir / "config.json").write_text(json.dumps({**saved, "lr": 1.0}))
    assert rundir.state(run) == "stale"
    del saved["aux_mean"]  # a run saved before the field existed ran with the aux term in its own mean
    (run.run_dir / "config.json").write_text(json.dumps(saved))
    assert run.method_key == "r3l-oracle" and rundir.state(run) == "stale"


def test_every_mode_builds_valid_configs(tmp_path):
    from r3l_learn.loop.train import TrainConfig

    for mode in grid.MODES.values():
        runs = grid.build_grid(mode, tmp_path)
        cells = sum(mode.runs_on(m, e) * len(mode.seeds_of(e)) for m in mode.methods for e in mode.envs)
        assert len(runs) == cells and len({r.run_dir for r in runs}) == len(runs)
        assert {(r.env_key, r.seed) for r in runs} == {(e, s) for e in mode.envs for s in mode.seeds_of(e)}
        assert [r.method_key for r in runs[:2]] == ["r3l-oracle", "grpo"]  # the comparison runs first
        for run in runs:
            TrainConfig(**run.config)


def test_no_run_starts_after_the_start_window_and_it_never_outlasts_the_budget(tmp_path):
    """``--start-within``: a machine wiped at the end of a session loses an interrupted run, so past the start window
    the sweep starts nothing more; a window set past the time budget closes with the budget."""
    runs = grid.build_grid(MODE, tmp_path, envs=ENVS)

    class WindowClosesDuringTheFirstRun(scheduler.Sweep):
        def _execute(self, run, keep_checkpoints):
            self.start_deadline = time.monotonic() - 1  # the window closes while this run goes on
            return scheduler.Outcome(run, "done")

    sweep = WindowClosesDuringTheFirstRun(jobs=1, start_deadline=time.monotonic() + 3600)
    assert [o.status for o in sweep.run(runs)] == ["done"] + ["not-started"] * (len(runs) - 1)
    assert sweep.stopped_by == "start window"
    closed = scheduler.Sweep(jobs=1, deadline=time.monotonic() + 3600, start_deadline=time.monotonic() - 1)
    assert [o.status for o in closed.run(runs)] == ["not-started"] * len(runs)
    assert not any(r.run_dir.exists() for r in runs)
    spent = scheduler.Sweep(jobs=1, deadline=time.monotonic() - 1, start_deadline=time.monotonic() + 3600)
    assert [o.status for o in spent.run(runs)] == ["not-started"] * len(runs) and spent.stopped_by == "time budget"
    later = scheduler.Sweep(deadline=time.monotonic() + 60, start_deadline=time.monotonic() + 3600)
    assert later.start_deadline == later.deadline  # a window past the budget ends with it


def test_a_run_not_expected_to_fit_the_budget_is_not_started_and_a_shorter_one_is(tmp_path):
    """With a time budget, a run expected to end past it is left for a later sweep (cutting it would lose its
    checkpoint on a wiped machine); the sweep goes on to the runs that fit, and says why it left one out."""
    runs = grid.build_grid(MODE, tmp_path, envs=ENVS)
    long = runs[0].name
    started = []

    class Recorded(scheduler.Sweep):
        def _execute(self, run, keep_checkpoints):
            started.append(run.name)
            return scheduler.Outcome(run, "done")

    sweep = Recorded(jobs=1, deadline=time.monotonic() + 600, expected=lambda r: 3600 if r.name == long else 60)
    assert [o.status for o in sweep.run(runs)] == ["too-long"] + ["done"] * (len(runs) - 1)
    assert long not in started and len(started) == len(runs) - 1
    assert sweep.stopped_by == "no fit"
    assert "not expected to finish" in scheduler.stop_cause("no fit", time_budget_min=10)
    unknown = Recorded(jobs=1, deadline=time.monotonic() + 600, expected=lambda r: None)
    assert [o.status for o in unknown.run(runs)] == ["done"] * len(runs)  # no estimate: the run is tried
    no_budget = Recorded(jobs=1, expected=lambda r: 1e9)
    assert [o.status for o in no_budget.run(runs)] == ["done"] * len(runs)


def test_the_expected_wall_time_comes_from_the_committed_runs_of_the_same_env_and_method(tmp_path):
    """Fresh: the median training time plus the median final eval of the cell's env and method (wall less eval,
    for runs logged without collection and update times). Resumed: the training time of the steps left. Both with
    a margin. Another method's runs or unfinished runs say nothing; with none, it is unknown."""
    runs = grid.build_grid(dataclasses.replace(MODE, steps=4), tmp_path, envs=ENVS)
    run = next(r for r in runs if r.method_key == "grpo")

    def summary(wall, eval_s, method="grpo", finished=True):
        detail = {"seconds": eval_s}
        return {"env": "corridor", "method": method, "finished": finished, "wall_s": wall, "eval_after_detail": detail}

    saved = {
        "runs": [
            summary(100, 20),
            summary(300, 60),
            summary(200, 40),
            summary(9000, 10, method="r3l-oracle"),
            summary(9000, 10, finished=False),
        ]
    }
    expected = scheduler.wall_estimator(saved)
    margin = scheduler.WALL_MARGIN
    assert expected(run) == pytest.approx(200 * margin)
    run.run_dir.mkdir(parents=True)
    lines = [{"step": 1, "train/reward": 0.0}, {"step": 2, "train/reward": 1.0}, {"step": 2, "eval/x": 0}]
    (run.run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    assert expected(run) == pytest.approx((40 + 160 * 2 / 4) * margin)  # eval 40, training 160, half left
    assert scheduler.wall_estimator({"runs": []})(run) is None
    assert scheduler.wall_estimator(None)(run) is None
    # a run's wall time also holds an eval before training it made for the others and work lost to interruptions:
    # the times measured inside it (collection, update, final eval) say what the next run costs; a run that makes
    # the eval before training costs one more eval
    first_on_a_machine = {**summary(9000, 500), "collect_s": 1500, "update_s": 2000}
    fresh = grid.build_grid(dataclasses.replace(MODE, steps=4), tmp_path / "other", envs=ENVS)
    expected = scheduler.wall_estimator({"runs": [first_on_a_machine]})
    assert expected(next(r for r in fresh if r.method_key == "grpo")) == pytest.approx(4000 * margin)
    r3l = {**first_on_a_machine, "method": "r3l-oracle"}
    making_the_eval_before = next(r for r in fresh if r.method_key == "r3l-oracle")
    assert making_the_eval_before.config["eval_before"]
    assert scheduler.wall_estimator({"runs": [r3l]})(making_the_eval_before) == pytest.approx(4500 * margin)


def _write_metrics(run_dir, records):
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def _step(step, collect_s, update_s):
    return {"step": step, "train/reward": 0.0, "speed/collect_s": collect_s, "speed/update_s": update_s}


def test_a_run_that_has_trained_is_judged_by_its_own_pace(tmp_path):
    """The committed runs set the pace until the run has a measured step of its own; from then its own mean step
    time counts, and its final eval is scaled as its collection is (an eval generates as a collection does), or as
    its steps are where the committed runs logged no collection time."""
    run = next(
        r for r in grid.build_grid(dataclasses.replace(MODE, steps=4), tmp_path, envs=ENVS) if r.method_key == "grpo"
    )
    committed = {"env": "corridor", "method": "grpo", "finished": True, "wall_s": 500, "collect_s": 200}
    expected = scheduler.wall_estimator(
        {"runs": [{**committed, "update_s": 200, "eval_after_detail": {"seconds": 100}}]}
    )
    margin = scheduler.WALL_MARGIN
    assert expected(run) == pytest.approx(500 * margin)  # 100 s a step, 4 steps, eval 100 s
    # 200 s a step, 2x the committed 100; collection 90 s a step, 1.8x the committed 50
    _write_metrics(run.run_dir, [_step(1, 80, 120), _step(2, 100, 100)])
    assert scheduler.own_pace(rundir.metrics(run.run_dir)) == scheduler.Pace(step_s=200, collect_s=90)
    assert expected(run) == pytest.approx((2 * 200 + 1.8 * 100) * margin)  # two steps left at 200 s, the eval 1.8x
    untimed = {**committed, "collect_s": None, "update_s": None, "wall_s": 500, "eval_after_detail": {"seconds": 100}}
    assert scheduler.wall_estimator({"runs": [untimed]})(run) == pytest.approx((2 * 200 + 2 * 100) * margin)
    assert scheduler.own_pace([{"step": 1, "train/reward": 0.0}]) is None  # logged without times: no pace


def test_a_cells_first_run_is_judged_by_its_own_pace_and_its_envs_final_eval(tmp_path):
    """A cell with no finished run is not judged before it trains (whether it fits is unknown: it is tried); once
    it has a pace, its own steps say what its training costs and the env's other methods what its eval costs."""
    run = next(
        r for r in grid.build_grid(dataclasses.replace(MODE, steps=4), tmp_path, envs=ENVS) if r.method_key == "grpo"
    )
    other = {"env": "corridor", "method": "r3l-oracle", "finished": True, "wall_s": 900, "update_s": 400}
    elsewhere = {**other, "env": "elsewhere", "collect_s": 1, "eval_after_detail": {"seconds": 10**6}}
    saved = {"runs": [{**other, "collect_s": 400, "eval_after_detail": {"seconds": 100}}, elsewhere]}
    expected = scheduler.wall_estimator(saved)
    assert expected(run) is None  # not trained yet: the other method's steps say nothing of this one's
    _write_metrics(run.run_dir, [_step(1, 150, 50)])  # collection 150 s a step, 1.5x the other method's 100
    assert expected(run) == pytest.approx((3 * 200 + 1.5 * 100) * scheduler.WALL_MARGIN)


def test_each_finished_step_is_logged_with_the_projected_end_and_a_warning_past_the_budget(tmp_path, caplog):
    """The person at the machine learns after each step when the run should end, and early, while they can still
    act, that it will not end before the time budget interrupts it."""
    run = next(
        r for r in grid.build_grid(dataclasses.replace(MODE, steps=4), tmp_path, envs=ENVS) if r.method_key == "grpo"
    )
    caplog.set_level("INFO", logger="bench.learning")
    fits = scheduler.Sweep(deadline=time.monotonic() + 3600, expected=lambda r: 600.0)
    assert fits._progress(run, None) == 0  # nothing trained yet
    _write_metrics(run.run_dir, [_step(1, 60, 120)])
    assert fits._progress(run, None) == 1 and not caplog.records  # a resumed run's old steps are not news
    assert fits._progress(run, 0) == 1
    (line,) = caplog.messages
    assert "step 1 of 4, 3.0 min a step; expected to end in about 10 min" in line
    assert fits._progress(run, 1) == 1 and len(caplog.messages) == 1  # the same step is told once
    caplog.clear()
    late = scheduler.Sweep(deadline=time.monotonic() + 300, expected=lambda r: 600.0)
    late._progress(run, 0)
    assert [r.levelname for r in caplog.records] == ["INFO", "WARNING"]
    assert "ends after the time budget" in caplog.messages[1]
    caplog.clear()
    timed_out = scheduler.Sweep(deadline=time.monotonic() + 3600, run_timeout=300, expected=lambda r: 600.0)
    timed_out._progress(run, 0, started=time.monotonic())  # the run's own timeout comes first
    assert "ends after the run timeout" in caplog.messages[1]
    caplog.clear()
    timed_out._progress(run, 0)  # a run whose start is unknown: only the budget, which it fits
    assert len(caplog.messages) == 1
    caplog.clear()
    scheduler.Sweep(expected=lambda r: None)._progress(run, 0)  # no estimate, no budget: the pace alone
    assert caplog.messages == [f"{run.name}: step 1 of 4, 3.0 min a step"]


def test_a_sweep_interrupted_by_hand_says_so(tmp_path):
    """Ctrl-C (SIGINT) stops the sweep: the run in flight is interrupted, nothing more starts, and the record names
    the interrupt, not a time limit that was never reached."""
    runs = grid.build_grid(MODE, tmp_path, envs=ENVS)

    class InterruptedDuringTheFirstRun(scheduler.Sweep):
        def _execute(self, run, keep_checkpoints):
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C, while the main thread waits on this run
            assert self._stop.wait(30)  # its handler asks the runs in flight to stop
            return scheduler.Outcome(run, "interrupted")

    sweep = InterruptedDuringTheFirstRun(jobs=1, deadline=time.monotonic() + 3600)
    assert [o.status for o in sweep.run(runs)] == ["interrupted"] + ["not-started"] * (len(runs) - 1)
    assert sweep.stopped_by == "interrupt"
    assert scheduler.stop_cause("interrupt", time_budget_min=60) == "an interrupt (Ctrl-C or SIGINT)"


def test_an_interrupted_run_gets_time_to_finish_its_update_and_save(tmp_path):
    """The learner defers Ctrl-C past the update in flight, then checkpoints: the grace before the kill grows with
    the run's own longest update, and a run that stops within it is not killed."""
    assert scheduler.grace_s(tmp_path) == scheduler.MIN_GRACE_S  # nothing measured yet
    records = [{"step": 1, "speed/update_s": 191.0}, {"step": 2, "speed/update_s": 150.0}, {"step": 2, "eval/x": 1}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert scheduler.grace_s(tmp_path) == 2 * 191.0 + 60.0

    # a run that needs a moment after its SIGINT (a deferred update, then a save) and exits on its own
    child = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGINT, lambda *a: (time.sleep(1), sys.exit(3)))\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "ready\n"  # its handler is set
    past_the_budget = scheduler.Sweep(jobs=1, deadline=time.monotonic() - 1)
    run = dataclasses.replace(grid.build_grid(MODE, tmp_path / "grid", envs=ENVS)[0], run_dir=tmp_path)
    assert past_the_budget._wait(proc, time.monotonic(), run)  # interrupted...
    assert proc.returncode == 3  # ...and left to stop itself, not killed
    proc.stdout.close()


@pytest.mark.slow
def test_a_run_started_over_keeps_only_the_finished_batches_of_its_eval(tmp_path):
    run_dir = tmp_path / "seed0"
    (run_dir / "evals" / "step-000000").mkdir(parents=True)
    (run_dir / "evals" / "step-000000" / "batch-00000.json").write_text("{}")
    (run_dir / "tb").mkdir()
    for name in ("metrics.jsonl", "run.json", "config.json"):
        (run_dir / name).write_text("{}")
    rundir.start_over(run_dir)
    assert [p.relative_to(run_dir).as_posix() for p in sorted(run_dir.rglob("*"))] == [
        "evals",
        "evals/step-000000",
        "evals/step-000000/batch-00000.json",
    ]


def test_the_grid_runs_aggregates_skips_and_resumes(tmp_path):
    out_root = tmp_path / "runs"
    runs, info = scheduler.sweep(MODE, out_root=out_root, envs=ENVS, threads=1, keep_checkpoints=True)
    assert info["counts"] == {"done": 4}, info
    for run in runs:
        records = [json.loads(line) for line in (run.run_dir / "metrics.jsonl").read_text().splitlines()]
        step = next(r for r in records if "train/reward" in r)
        assert step["bench/trajectories"] == MODE.group_size * MODE.tasks_per_step
        assert (run.run_dir / "result.json").is_file()

    md, results = tmp_path / "RESULTS.md", tmp_path / "results"
    data = report.write_report(
        MODE, runs, command="test", results_md=md, results_dir=results, plots_dir=tmp_path / "plots", envs=ENVS
    )
    assert data["missing"] == []
    assert [r.config["eval_before"] for r in runs] == [True, False, True, False]  # R³L evaluates, GRPO reuses
    assert all(s["before_shared"] == (s["method"] == "grpo") for s in data["runs"])
    assert data["cells"]["grpo|corridor"]["success_before"]["n"] == 2
    cell = data["cells"]["r3l-oracle|corridor"]
    assert cell["success"]["n"] == 2 and cell["trajectories"]["mean"] == 2
    assert cell["economics"]["parse_rate"] is not None  # the oracle reflected on every base
    assert data["cells"]["grpo|corridor"]["economics"]["retries"] == 0
    cost = cell["cost"]  # CPU seconds per trajectory, from the runs' own counters
    assert cost["collect_cpu_s"] > 0 and cost["update_cpu_s"] > 0 and cost["eval_cpu_s"] > 0
    assert cost["per_cpu_hour"] == pytest.approx(3600 / (cost["collect_cpu_s"] + cost["update_cpu_s"]))
    assert {c["other"] for c in data["comparisons"]} == {"grpo"}
    written = md.read_text()
    assert "<!-- begin:learning_test -->" in written and "<!-- end:learning_test -->" in written
    headings = ("### Held-out success after training", "### Retry economics", "### Cost per trajectory")
    headings += ("### Held-out success along training",)
    for text in ("| R³L (oracle) |", "| GRPO |", *headings, "corridor.png"):
        assert text in written, text
    assert "step 0 (0 traj.)" in written and "step 1 (2 traj.)" in written
    assert "retry from scratch" in written and "R³L (oracle) vs GRPO (success)" in written
    assert json.loads((results / "learning_test.json").read_text())["mode"]["name"] == "test"
    assert (tmp_path / "plots" / "corridor.png").stat().st_size > 0
    assert data["train_config"]["shared"]["seed"] == "<seed>" and "Every other TrainConfig field" in written

    # the saved JSON renders the same page and the same plots again, without the run directories
    section = _section(written)
    assert page.render(json.loads(json.dumps(data, default=str)), page_dir=tmp_path).strip() == section
    plots = {p.name: p.read_bytes() for p in (tmp_path / "plots").iterdir()}
    saved = (results / "learning_test.json").read_bytes()
    again_md = tmp_path / "again.md"  # beside RESULTS.md: the same links to the plots
    args = ["--from-json", str(results / "learning_test.json"), "--results-md", str(again_md)]
    assert cli.main([*args, "--results-dir", str(tmp_path / "again"), "--plots-dir", str(tmp_path / "plots")]) == 0
    assert _section(again_md.read_text()) == section
    assert (tmp_path / "again" / "learning_test.json").read_bytes() == saved
    assert {p.name: p.read_bytes() for p in (tmp_path / "plots").iterdir()} == plots

    _, again = scheduler.sweep(MODE, out_root=out_root, envs=ENVS, threads=1)
    assert again["counts"] == {"skipped": 4}
    _continued_on_a_fresh_machine(json.loads(saved), tmp_path)

    # a checkpointed run asked for a longer budget resumes instead of starting over
    longer = dataclasses.replace(MODE, steps=2, methods=("grpo",), seeds=(0,))
    run = grid.build_grid(longer, out_root, envs=ENVS)[0]
    assert rundir.state(run) == "resume"
    _, resumed = scheduler.sweep(longer, out_root=out_root, envs=ENVS, threads=1)
    assert resumed["counts"] == {"done": 1}
    assert not (run.run_dir / "checkpoints").exists()  # removed once the run finished
    attempts = json.loads((run.run_dir / "run.json").read_text())["attempts"]
    assert [a["resumed"] for a in attempts] == [False, True]
    steps = [json.loads(line)["step"] for line in (run.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 1, 2, 2]  # step 1, the first final eval, step 2, the final eval (R³L evaluated before)
    summary = next(s for s in aggregate.aggregate(longer, [run])["runs"])
    assert summary["before"] is None  # no R³L run in this grid to take the initial eval from


def test_modes_envs_and_methods_read_back_from_json():
    for mode in grid.MODES.values():
        assert grid.Mode.from_dict(json.loads(json.dumps(dataclasses.asdict(mode)))) == mode
    for env in grid.ENVS.values():
        assert grid.EnvSetting.from_dict(json.loads(json.dumps(dataclasses.asdict(env)))) == env
    for method in grid.METHODS.values():
        assert grid.Method.from_dict(json.loads(json.dumps(dataclasses.asdict(method)))) == method


def test_the_committed_report_renders_again_from_its_json():
    """The fair mode's committed report (learning_fair.json) holds everything its page needs: the discussion
    regenerated from its numbers is the one it saved, and the page renders with its tables and plot links, without
    any run directory."""
    saved = json.loads((ROOT / "benchmarks" / "results" / "learning_fair.json").read_text())
    mode = grid.Mode.from_dict(saved["mode"])
    methods = {k: grid.Method.from_dict(v) for k, v in saved["methods"].items()}
    assert discussion.discussion(mode, saved, methods) == saved["discussion"]
    written = page.render(saved, page_dir=ROOT / "benchmarks")
    assert f"mode `{mode.name}`" in written and "### Held-out success after training" in written
    assert all(line in written for line in saved["discussion"])
    assert all(f"![{env}](" in written for env in saved["plots"])  # (the saved paths are absolute: no checkout's)


def test_from_json_refuses_a_file_that_is_not_a_learning_report(tmp_path):
    other = tmp_path / "retry.json"
    other.write_text(json.dumps({"mode": {}, "rows": []}))
    with pytest.raises(ValueError, match="not a learning report"):
        report.rewrite_report(other, results_md=tmp_path / "R.md", results_dir=tmp_path, plots_dir=tmp_path)


def test_the_demo_plays_the_pre_registered_studys_env():
    """`make demo` claims to run R³L on the study's calibrated text game: its preset must keep that env's settings
    in every field that changes what is played, and the study's greedy held-out eval."""
    from benchmarks.learning_study import prereg
    from r3l_learn.loop.presets import PRESETS
    from r3l_learn.loop.train import TrainConfig

    demo, setting = TrainConfig(**PRESETS["cpu-demo"]), grid.ENVS[prereg.PREREG_ENVS[0]]
    played = (demo.env, demo.env_kwargs, demo.actions, demo.max_turns, demo.max_new_tokens, demo.temperature)
    assert played == (setting.env, setting.kwargs, setting.actions, setting.max_turns, setting.max_new_tokens, 1.0)
    assert setting.temperature == 1.0 and demo.eval_temperature == prereg.SHARED["eval_temperature"]
    assert (demo.algo, demo.reflector) == ("r3l", "oracle")


def test_a_run_without_token_counters_is_left_out_of_the_token_means_not_counted_as_zero():
    def run(seed, sums):
        point = {"success": 0.5, "score": 0.5, "first_attempt": None}
        return {
            "seed": seed, "finished": True, "before": point, "after": point, "trajectories": 64, "updates": 8,
            "logged_generated_tokens": 1800, "wall_s": None, "eval_after_detail": None, "sums": sums,
        }  # fmt: skip

    counted = {"rollout_tokens": 1800.0, "reflection_tokens": 200.0, "env_steps": 100.0}
    cell = aggregate.cell_summary([run(0, counted), run(1, counted), run(2, {})])  # seed 2 ran before bench/*
    assert cell["generated_tokens"]["mean"] == 2000 and cell["generated_tokens"]["n"] == 2
    assert cell["env_steps"]["mean"] == 100 and cell["env_steps"]["n"] == 2


def _continued_on_a_fresh_machine(saved, tmp_path):
    """A study continued where no run directory is: the committed summaries stand for their cells (the sweep runs
    nothing, the report is the same), across a CPU kind that resolves autocast otherwise, but not across a change
    of what a run trains."""
    fresh = tmp_path / "fresh"
    _, info = scheduler.sweep(MODE, out_root=fresh, envs=ENVS, threads=1, saved=saved)
    assert info["counts"] == {"carried over": 4} and not (fresh / "corridor").exists()

    def rerun(saved):
        runs = grid.build_grid(MODE, fresh, envs=ENVS)
        out = tmp_path / "continued"
        kwargs = {"results_md": out / "RESULTS.md", "results_dir": out, "plots_dir": out / "plots", "envs": ENVS}
        return report.write_report(MODE, runs, command="test", saved=saved, **kwargs)

    data = rerun(saved)
    assert json.loads(json.dumps(data["cells"])) == saved["cells"] and data["missing"] == []
    assert all(s["carried"] for s in data["runs"]) and data["train_config"] == saved["train_config"]
    assert data["invocations"] == saved["invocations"]
    assert "Finished runs by machine: 4 on an earlier machine" in (tmp_path / "continued" / "RESULTS.md").read_text()

    name = "corridor/grpo/seed1"
    other_cpu = {**saved["configs"][name], "autocast": "bf16"}  # the cell's own is the default, "auto"
    data = rerun({**saved, "configs": {**saved["configs"], name: other_cpu}})
    assert data["missing"] == [] and data["cells"]["grpo|corridor"]["seeds"] == [0, 1]
    other_run = {**saved["configs"][name], "lr": 0.5}
    data = rerun({**saved, "configs": {**saved["configs"], name: other_run}})
    assert data["missing"] == [{"env": "corridor", "method": "grpo", "seeds": [1], "stale": []}]
    with pytest.raises(SystemExit, match="not a learning report"):
        (tmp_path / "junk.json").write_text("[1, 2]")
        cli.load_saved(tmp_path / "junk.json", "test")
    assert cli.load_saved(tmp_path / "continued" / "learning_test.json", "another mode") is None
