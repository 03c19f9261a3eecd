"""The math answer contract, end to end: what the template asks for, the parser passes on and the env accepts
is one thing. A policy that answers each task's reference in the template's format wins on every offline math
env through ``wrappers``; a wrong answer loses; a reply the parser cannot use costs an attempt."""

from pathlib import Path

import gymnasium as gym
import pytest

from wrappers import RolloutConfig, rollout, rollout_batch
from wrappers.parsing import parse_reply
from wrappers.prompts import template_for

pytest.importorskip("transformers")

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "math"

# id -> make() kwargs that work offline (the real-data envs read fixture files written in the official schemas)
MATH_ENVS = {
    "r3l/Countdown-v0": {},
    "r3l/GSMSymbolic-v0": {"num_tasks": 8},
    "r3l/ReasoningGym-v0": {"num_tasks": 8},
    "r3l/CHAMP-v0": {"split": "test"},
    "r3l/GSM8K-v0": {"data_path": str(FIXTURES / "gsm8k"), "split": "test"},
    "r3l/MATH500-v0": {"data_path": str(FIXTURES / "math500")},
    "r3l/OlympiadBench-v0": {"data_path": str(FIXTURES / "olympiadbench")},
}
TASKS_PER_ENV = 4


@pytest.fixture(autouse=True)
def _no_ambient_data(monkeypatch, tmp_path):
    monkeypatch.delenv("R3L_DATA_DIR", raising=False)
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "empty-hf-cache"))


def in_template_format(env_id: str, answer: str) -> str:
    """A reply written exactly as the env family's system prompt asks: think, then the bare answer as the action."""
    fmt = template_for(env_id).answer
    return f"<{fmt.think_tag}>I worked it out.</{fmt.think_tag}> {fmt.wrap(answer)}"


def answer_key_policy(env_id: str, env: gym.Env, task_ids, answer=None):
    """A scripted policy that finds the task's problem in its prompt and replies ``answer(reference)`` (default:
    the reference itself) in the template's format. The rule reads only what the agent is shown."""
    from r3l_learn.policies.scripted import ScriptedPolicy

    source = env.unwrapped.source
    key = {source.task(t).problem: source.task(t).reference for t in task_ids}
    answer = answer or (lambda reference: reference)

    def reply(prompt_text: str) -> str:
        problems = [p for p in key if p in prompt_text]
        assert len(problems) == 1, "the prompt shows exactly one known problem"
        return in_template_format(env_id, answer(key[problems[0]]))

    return ScriptedPolicy(reply)


def _tasks(env: gym.Env) -> list[str]:
    return list(env.unwrapped.task_ids[:TASKS_PER_ENV])


@pytest.mark.parametrize("env_id", list(MATH_ENVS))
def test_the_reference_in_the_template_format_wins(env_id):
    first = gym.make(env_id, **MATH_ENVS[env_id])
    tasks = _tasks(first)
    envs = [first] + [gym.make(env_id, **MATH_ENVS[env_id]) for _ in tasks[1:]]
    policy = answer_key_policy(env_id, envs[0], tasks)
    trajs = rollout_batch(envs, policy, RolloutConfig(env_workers=1), task_ids=tasks, seed=0)
    for traj in trajs:
        assert traj.won and traj.reward == 1.0 and traj.stop_reason == "terminated", traj.turns[-1].outcome
        assert traj.num_turns == 1 and traj.turns[0].parse_error is None
        assert traj.turns[0].outcome.startswith("Correct")


@pytest.mark.parametrize("env_id", list(MATH_ENVS))
def test_a_wrong_answer_loses_after_the_attempts(env_id):
    env = gym.make(env_id, **MATH_ENVS[env_id])
    tasks = _tasks(env)[:1]
    policy = answer_key_policy(env_id, env, tasks, answer=lambda reference: "123456789")
    traj = rollout(env, policy, task_id=tasks[0])
    assert not traj.won and traj.reward == 0.0 and traj.stop_reason == "terminated"
    assert traj.num_turns == env.unwrapped.max_attempts
    assert all(t.action == "123456789" and t.info["grading"] in ("ok", "invalid") for t in traj.turns)
    assert all(t.outcome.startswith("Incorrect") for t in traj.turns)


def test_the_parser_passes_on_what_the_env_accepts():
    """Bare answers in the forms a model writes them: the parsed action alone wins when stepped."""
    env = gym.make("r3l/GSMSymbolic-v0", num_tasks=1)
    env.reset(options={"task_id": env.unwrapped.task_ids[0]})
    gold = env.unwrapped.reference_answer()
    for reply in (f"<action>{gold}</action>", f"<action> ${gold}$ </action>", f"```\n<action>\n{gold}\n</action>\n```"):
        action = parse_reply(reply, template_for("r3l/GSMSymbolic-v0").answer).action
        env.reset(options={"task_id": env.unwrapped.task_ids[0]})
        obs, reward, terminated, _, info = env.step(action)
        assert (reward, terminated, info["won"]) == (1.0, True, True), (reply, obs)


def test_every_champ_reference_wins_as_a_bare_answer():
    env = gym.make("r3l/CHAMP-v0", split="all")
    lost = []
    for task_id in env.unwrapped.task_ids:
        env.reset(options={"task_id": task_id})
        reference = env.unwrapped.reference_answer()
        _, reward, *_ = env.step(reference)
        if reward != 1.0:
            lost.append((task_id, reference))
    assert not lost


def test_an_unusable_reply_costs_an_attempt():
    """Every reply counts: three replies without an action tag end a 3-attempt episode (no 30-turn loop)."""
    env = gym.make("r3l/Countdown-v0")
    from r3l_learn.policies.scripted import ScriptedPolicy

    traj = rollout(env, ScriptedPolicy(["I think the answer is forty."]), seed=0)
    assert traj.num_turns == 3 and traj.stop_reason == "max_turns" and not traj.won
    assert all(t.parse_error is not None and t.action is None for t in traj.turns)
    assert "used up one of your attempts" in traj.turns[0].outcome
    # the attempt count is the env's: 1 attempt gives 1 reply; an explicit max_turns still wins
    one = rollout(gym.make("r3l/Countdown-v0", max_attempts=1), ScriptedPolicy(["no tag"]), seed=0)
    assert one.num_turns == 1
    more = rollout(env, ScriptedPolicy(["no tag"]), RolloutConfig(max_turns=5), seed=0)
    assert more.num_turns == 5


def test_a_fixed_reply_after_an_unusable_one_still_wins():
    env = gym.make("r3l/GSMSymbolic-v0", num_tasks=1)
    task = env.unwrapped.task_ids[0]
    env.reset(options={"task_id": task})
    gold = env.unwrapped.reference_answer()
    from r3l_learn.policies.scripted import ScriptedPolicy

    policy = ScriptedPolicy([f"The answer is {gold}", in_template_format("r3l/GSMSymbolic-v0", gold)])
    traj = rollout(env, policy, task_id=task)
    assert traj.won and traj.num_turns == 2 and traj.turns[0].parse_error is not None


def test_the_paper_math_preset_path_wins(tmp_path):
    """``paper-math`` (GSM8K, 3 attempts, the preset's max_turns) evaluated as training evaluates it."""
    from r3l_learn.loop.evaluate import evaluate
    from r3l_learn.loop.presets import PRESETS

    preset = PRESETS["paper-math"]
    kwargs = {**preset["env_kwargs"], "data_path": str(FIXTURES / "gsm8k")}
    env = gym.make(preset["env"], split="test", **kwargs)
    tasks = list(env.unwrapped.task_ids)
    config = RolloutConfig(max_turns=preset.get("max_turns"))
    summary, trajs = evaluate(
        preset["env"],
        answer_key_policy(preset["env"], env, tasks),
        episodes=len(tasks),
        config=config,
        env_kwargs=kwargs,
        out=tmp_path / "eval.jsonl",
        progress=False,
    )
    assert summary.success_rate == 1.0 and summary.parse_error_rate == 0.0
    wrong = answer_key_policy(preset["env"], env, tasks, answer=lambda reference: "-1")
    summary, trajs = evaluate(
        preset["env"], wrong, episodes=len(tasks), config=config, env_kwargs=kwargs, progress=False
    )
    assert summary.success_rate == 0.0 and {t.num_turns for t in trajs} == {preset["env_kwargs"]["max_attempts"]}
