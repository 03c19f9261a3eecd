"""The calibration harness (``benchmarks/calibration``) on the toy lamp env with a scripted policy: base and
oracle-guided retry rates from the library's ReflectRetry, the fixed-sequence search checked against plain replays,
the random baseline, the JSON a configuration writes, the skip of a measured one and the chosen marker."""

import json
import re
import sys
from pathlib import Path

import gymnasium as gym
import pytest

pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "wrappers"))  # the toy lamp env's module

from benchmarks.calibration import cli  # noqa: E402
from benchmarks.calibration.baselines import fixed_habit_success  # noqa: E402
from benchmarks.calibration.config import CalibrationConfig  # noqa: E402

ENV = "r3ltest/Lamp-v0"  # four tasks per split; a task's code is two of three buttons
if ENV not in gym.registry:
    gym.register(id=ENV, entry_point="toy_lamp_env:LampEnv", max_episode_steps=6)


def presser(prompt_text):
    """Presses red until guided; then the buttons the guidance names, one per turn, repeating the last one."""
    if "What to do instead:" not in prompt_text:
        return "<action>press red</action>"
    after = prompt_text.rsplit("What to do instead:", 1)[1]
    named = re.findall(r"'([^']+)'", after.split("\n", 1)[0])
    done = after.count("<|im_start|>assistant") - 1  # the generation prompt opens one more
    return f"<action>{named[min(done, len(named) - 1)]}</action>"


def _config(plan):
    return CalibrationConfig(env_id=ENV, max_turns=3, oracle_plan=plan, model="scripted", episodes=4, train_plans=4)


def _replay_wins(actions, max_turns=3):
    env = gym.make(ENV, split="test")
    wins = 0
    for task in env.unwrapped.task_ids:
        env.reset(options={"task_id": task})
        for action in actions[:max_turns]:
            _, _, terminated, _, info = env.step(action)
            if terminated:
                break
        wins += bool(info["won"])
    return wins


@pytest.fixture(scope="module")
def by_plan(tmp_path_factory):
    from r3l_learn.policies.scripted import ScriptedPolicy

    results = tmp_path_factory.mktemp("calibration")
    policy = ScriptedPolicy(presser)
    out = {plan: cli.measure(_config(plan), policy, results, force=False, progress=False) for plan in ("step", "rest")}
    return results, out


def test_base_and_guided_retry_rates_follow_the_oracle_guidance(by_plan):
    _, out = by_plan
    step, rest = out["step"], out["rest"]
    # The presser never lights the lamp unguided; guided by the rest of the plan it always does, guided by one
    # step only where that step completes the code (tasks 0 and 3: red was already pressed before it).
    assert step["base_success"] == rest["base_success"] == 0.0 and step["episodes"] == 4
    assert rest["retry_success"] == 1.0 and step["retry_success"] == 0.5
    assert step["details"]["model"]["failed_bases"] == 4


def test_the_best_fixed_sequence_is_what_plain_replays_find(by_plan):
    _, out = by_plan
    best = out["rest"]["fixed_habit_best"]
    assert out["rest"]["fixed_habit_success"] == _replay_wins(best["actions"]) / 4 >= 0.5  # a train plan wins 2
    # every candidate's count, checked against a replay of it on every task
    env = gym.make(ENV, split="test")
    candidates = {("press blue", "press red", "press green"): "x", ("press red", "press green"): "y"}
    found = fixed_habit_success(env, env.unwrapped.task_ids, candidates, max_turns=3, progress=False)
    assert (
        {tuple(t["actions"]): t["wins"] for t in found["top"]}
        == {seq: _replay_wins(list(seq)) for seq in candidates}
        == {("press blue", "press red", "press green"): 3, ("press red", "press green"): 2}
    )


def test_the_json_holds_the_rates_counts_and_where_it_ran(by_plan):
    _, out = by_plan
    r = out["rest"]
    assert 0.0 <= r["random_success"] <= 1.0 and r["details"]["random"]["episodes"] == 8
    assert r["distinct_test_tasks"] == 1  # the lamp's four tasks look alike to the agent: counted by content
    assert r["meets"]["random_at_most_max"] == (r["random_success"] <= 0.10)
    assert not r["meets"]["enough_episodes"] and r["config"]["oracle_plan"] == "rest"
    assert len(r["load_avg"]) == 3 and r["machine"]["cores"] >= 1
    json.dumps(r)


def test_a_measured_configuration_is_skipped_and_the_chosen_one_is_marked(by_plan, capsys):
    results, out = by_plan
    config = _config("rest")
    config.path(results).write_text(json.dumps(out["rest"]))
    argv = ["run", "--env", ENV, "--turns", "3", "--oracle-plan", "rest", "--model", "scripted", "--episodes", "4"]
    # no model is loaded (there is none called "scripted"): the configuration's JSON exists
    assert cli.main([*argv, "--train-plans", "4", "--results", str(results)]) == 0
    assert "skip" in capsys.readouterr().out
    assert cli.main(["choose", "lamp", config.key(), "--why", "test", "--results", str(results)]) == 0
    chosen = json.loads((results / "chosen.json").read_text())
    assert chosen["lamp"]["key"] == config.key() and chosen["lamp"]["retry_success"] == 1.0
    capsys.readouterr()
    assert cli.main(["table", "--results", str(results)]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if config.key() in line)
    assert "**chosen: lamp**" in row and "100.0% (4/4)" in row
