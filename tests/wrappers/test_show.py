"""``wrappers.view.show``: plain trajectories (``r3l eval``'s output) render as well as groups; the goal and the
guidance
the retry saw are shown; a cut turn says how much it hid."""

import json

import pytest

from wrappers import RolloutConfig, Trajectory, Turn, save_jsonl
from wrappers.retry.reflect_retry import ReflectRetry, ReflectRetryConfig
from wrappers.retry.reflection import PolicyReflector
from wrappers.view.show import load_viewable, render_text
from wrappers.view.show_html import render_html

pytest.importorskip("transformers")


def scripted(replies):
    from r3l_learn.policies.scripted import ScriptedPolicy

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
    from r3l_learn.loop.evaluate import evaluate

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


def played(kind="base", *, won=False, turns=3, pivot=None, base=None, verdict=None):
    """A trajectory as a collector leaves it: ``turns`` turns, reward 1 when won, a retry linked to its base."""
    traj = Trajectory(
        env_id="r3ltest/Corridor-v0",
        task_id="t",
        task="go",
        kind=kind,
        pivot=pivot,
        base_id=base.id if base is not None else None,
        turns=[Turn(observation="o", response="r", action="a") for _ in range(turns)],
        reward=float(won),
        won=won,
    )
    if verdict is not None:
        traj.metadata["beat_base"] = verdict
    return traj


def test_the_summary_counts_retries_that_beat_their_base_and_the_mean_pivot():
    from wrappers.data.trajectory import TrajectoryGroup
    from wrappers.view.show import outcome, summarize

    lost, won, lost_again = played(turns=5), played(won=True, turns=4), played(turns=5)
    groups = [
        # no verdict in the file (an older collector): beats() decides, and a won retry beats a lost base
        TrajectoryGroup("e", "a", [lost, played("retry", won=True, turns=4, pivot=2, base=lost)]),
        # the collector's verdict stands: this retry won in fewer turns, but the collector said no
        TrajectoryGroup("e", "b", [won, played("retry", won=True, turns=2, pivot=1, base=won, verdict=False)]),
        TrajectoryGroup("e", "c", [lost_again, played("retry", turns=5, pivot=0, base=lost_again)]),
    ]
    plain = played(won=True)
    assert [outcome(g).beaten for g in groups] == [1, 0, 0] and [outcome(g).won for g in groups] == [1, 1, 0]
    s = summarize([*groups, plain])
    assert (s.groups, s.groups_won, s.trajectories, s.bases, s.bases_won) == (3, 2, 1, 4, 2)
    assert (s.retries, s.retries_won, s.retries_beat_base, s.mean_pivot) == (3, 2, 1, 1.0)
    line = (
        "summary: 3 groups (2 won), 1 plain trajectory, 4 bases (2 won), "
        "3 retries (2 won, 1 beat their base), mean pivot 1.00"
    )
    assert render_text([*groups, plain]).splitlines()[0] == line
    assert render_text([plain]).splitlines()[0] == "summary: 1 plain trajectory, 1 base (1 won)"
    no_pivot = summarize([TrajectoryGroup("e", "d", [played()])])
    assert no_pivot.mean_pivot is None and no_pivot.line().endswith(
        "0 retries (0 won, 0 beat their base), mean pivot n/a"
    )


def test_token_runs_cut_a_sequence_by_its_masks():
    from wrappers.view.show_html import token_runs

    agent, loss = [0, 0, 1, 1, 1, 0, 1, 0], [0, 0, 0, 1, 1, 0, 1, 1]
    assert token_runs(agent, loss) == [
        ("tk-ctx", 0, 2),
        ("tk-masked", 2, 3),
        ("tk-train", 3, 5),
        ("tk-ctx", 5, 6),
        ("tk-train", 6, 7),
        ("tk-odd", 7, 8),  # trained but not the agent's: shown, in red, rather than hidden
    ]
    assert token_runs([], []) == []
    with pytest.raises(ValueError, match="agent_mask has 2 tokens but loss_mask 1"):
        token_runs([1, 1], [1])


def test_the_token_view_without_a_tokenizer_shows_replies_and_context_lengths():
    import re

    traj = played(turns=2)
    traj.turns[0].response, traj.turns[0].token_ids, traj.turns[0].span = "<action>a</action>", [7, 8], (3, 5)
    traj.turns[1].response, traj.turns[1].token_ids, traj.turns[1].span = "<action>b</action>", [9], (6, 7)
    traj.token_ids = [1, 2, 3, 7, 8, 4, 9]
    traj.agent_mask = [0, 0, 0, 1, 1, 0, 1]
    traj.loss_mask = [0, 0, 0, 0, 0, 0, 1]  # turn 0 masked (as before a pivot)
    page = render_html([traj])
    spans = re.findall(r"<span class='(tk-[a-z]+)' data-n='(\d+)'[^>]*>([^<]*)</span>", page)
    assert spans == [
        ("tk-ctx", "3", "⟨3 tokens⟩"),
        ("tk-masked", "2", "&lt;action&gt;a&lt;/action&gt;"),
        ("tk-ctx", "1", "⟨1 token⟩"),
        ("tk-train", "1", "&lt;action&gt;b&lt;/action&gt;"),
    ]
    assert "7 tokens, 1 trainable" in page
    with pytest.raises(TypeError, match="not str"):
        render_html(["not a trajectory"])


def test_r3l_show_decodes_the_token_view_with_the_tokenizer_it_is_given(tmp_path, capsys):
    from r3l_learn.cli.main import main
    from r3l_learn.policies.models import tiny_tokenizer

    config = ReflectRetryConfig(group_size=2, rollout=RolloutConfig(max_turns=4), fill=False)
    rr = ReflectRetry("r3ltest/Corridor-v0", scripted(walker), PolicyReflector(scripted([DIAGNOSIS])), config)
    save_jsonl(tmp_path / "g.jsonl", rr.collect(["corridor-train-000000"], seed=0))
    tiny_tokenizer().save_pretrained(tmp_path / "tok")
    main(["show", str(tmp_path / "g.jsonl"), "--html", str(tmp_path / "plain.html")])
    main(
        ["show", str(tmp_path / "g.jsonl"), "--html", str(tmp_path / "dec.html"), "--tokenizer", str(tmp_path / "tok")]
    )
    assert capsys.readouterr().out.startswith("summary: 1 group (")
    plain, decoded = (tmp_path / "plain.html").read_text(), (tmp_path / "dec.html").read_text()
    assert "&lt;|im_start|&gt;system" not in plain and "⟨" in plain
    assert "<span class='tk-ctx'" in decoded and "&lt;|im_start|&gt;system" in decoded and "⟨" not in decoded
    with pytest.raises(SystemExit, match="r3l show: unknown model 'no-such-model'"):
        main(["show", str(tmp_path / "g.jsonl"), "--html", str(tmp_path / "x.html"), "--tokenizer", "no-such-model"])


def test_agent_and_env_text_cannot_inject_markup_into_the_page(tmp_path):
    from r3l_learn.loop.evaluate import evaluate

    evil = "<script>alert(1)</script><img src=x onerror=alert(2)>"
    path = tmp_path / "eval.jsonl"
    evaluate(
        "r3ltest/Corridor-v0",
        scripted(lambda _: f"<think>{evil}</think><action>{evil}</action>"),
        episodes=1,
        config=RolloutConfig(max_turns=2),
        out=path,
        progress=False,
    )
    page = render_html(load_viewable(path))
    assert page.count("<script") == 1 and "<img" not in page  # only the page's own script
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
