"""``wrappers.show``: plain trajectories (``r3l eval``'s output) render as well as groups; the goal and the guidance
the retry saw are shown; a cut turn says how much it hid."""

import json

import pytest

from wrappers import RolloutConfig, Trajectory, Turn, save_jsonl
from wrappers.reflect_retry import ReflectRetry, ReflectRetryConfig
from wrappers.reflection import PolicyReflector
from wrappers.show import load_viewable, render_html, render_text

pytest.importorskip("transformers")


def scripted(replies):
    from r3l_learn.scripted import ScriptedPolicy

    return ScriptedPolicy(replies)


def walker(prompt_text):
    """Walks left unless the context carries the guidance to walk right."""
    return "<action>right</action>" if "walk right" in prompt_text else "<action>left</action>"


DIAGNOSIS = json.dumps(
    {
        "trajectory_summary": "kept walking left",
        "root_cause_analysis": "the goal is to the right",
        "trajectory_outcome": "failure",
        "improvement_suggestion": "walk right",
        "retry_from_step": 1,
    }
)


def test_eval_output_of_plain_trajectories_renders_with_its_goal(tmp_path):
    from r3l_learn.evaluate import evaluate

    path = tmp_path / "eval.jsonl"
    _, trajs = evaluate(
        "r3ltest/Corridor-v0", scripted(walker), episodes=2, config=RolloutConfig(max_turns=3), out=path, progress=False
    )
    items = load_viewable(path)
    assert [type(t) for t in items] == [Trajectory, Trajectory]
    text = render_text(items)
    assert "trajectory 1/2" in text and "trajectory 2/2" in text
    assert f"goal: {trajs[0].task.splitlines()[0]}" in text
    assert "> left" in text
    assert "<table>" in render_html(items) and "goal:" in render_html(items)


def test_groups_show_the_goal_and_the_guidance_the_retry_saw(tmp_path):
    config = ReflectRetryConfig(group_size=2, rollout=RolloutConfig(max_turns=4), keep_checkpoints=True, fill=False)
    rr = ReflectRetry("r3ltest/Corridor-v0", scripted(walker), PolicyReflector(scripted([DIAGNOSIS])), config)
    groups = rr.collect(["corridor-train-000000"], seed=0)
    retry = next(t for t in groups[0].trajectories if t.kind == "retry")
    save_jsonl(tmp_path / "g.jsonl", groups)
    text = render_text(load_viewable(tmp_path / "g.jsonl"))
    assert "guidance the retry saw: " in text and "walk right" in text
    assert f"goal: {retry.task.splitlines()[0]}" in text
    assert f"pivot {retry.pivot}" in text and "▶" in text
    assert "guidance the retry saw" in render_html(groups)


def test_a_cut_turn_says_how_many_lines_it_hid():
    long = "\n".join(f"line {i}" for i in range(20))
    traj = Trajectory(
        env_id="r3ltest/Corridor-v0",
        task_id="t",
        task="go",
        turns=[Turn(observation="o", response="r", action="a", outcome=long)],
    )
    text = render_text([traj], max_lines=6)
    assert "line 3" in text and "line 4" not in text  # "> a", then lines 0-3, then the note
    assert "… (16 more lines; --max-lines 0 shows all)" in text
    everything = render_text([traj], max_lines=0)
    assert "line 19" in everything and "more lines" not in everything
