"""Expert demonstrations played as the agent (wrappers/retry/expert.py): the plan's actions in the answer format, in the
policy's tokens, with the policy's own log-probs of exactly those tokens, on the toy lamp env, TextWorld and a
math env."""

import json

import gymnasium as gym
import pytest

from wrappers import RolloutConfig, TrajectoryGroup, load_jsonl, parse_reply, save_jsonl
from wrappers.chat import end_of_turn_id
from wrappers.data.export import groups_schema
from wrappers.prompts import FAMILIES
from wrappers.retry.expert import EXPERT_KIND, PLAN_END, NoExpertPlanError, expert_rollouts
from wrappers.retry.oracle import expert_plan

# The toy env's registration row, as in test_env_contract.py (its module is toy_lamp_env.py in this folder).
if "r3ltest/Lamp-v0" not in gym.registry:
    gym.register(id="r3ltest/Lamp-v0", entry_point="toy_lamp_env:LampEnv", max_episode_steps=6)

LAMP = "r3ltest/Lamp-v0"
TASKS = ["lamp-train-000000", "lamp-train-000001"]  # press red, press green / press green, press blue
ANSWER = FAMILIES["textgame"].answer


def _play(env_id, policy, config, task_ids, env_kwargs=None, **kwargs):
    envs = [gym.make(env_id, **(env_kwargs or {})) for _ in task_ids]
    try:
        return expert_rollouts(envs, policy, config, task_ids=task_ids, **kwargs)
    finally:
        for env in envs:
            env.close()


def _assert_policy_logprobs(policy, traj):
    """Each reply's recorded log-probs are ``policy.score`` of exactly its tokens after exactly its context, and
    they are what the training sequence carries."""
    for turn in traj.turns:
        start, end = turn.span
        assert traj.token_ids[start:end] == turn.token_ids
        (expected,) = policy.score([traj.token_ids[:start]], [turn.token_ids])
        assert turn.behavior_logprobs == pytest.approx(expected, abs=1e-4)
        assert traj.behavior_logprobs[start:end] == turn.behavior_logprobs
        # a constrained choice carries loss on the action's tokens alone, as a rollout's does; free text on it all
        chosen = policy.tokenize(turn.action) if turn.constrained else turn.token_ids
        assert [t for t, a in zip(turn.token_ids, traj.agent_mask[start:end]) if a] == chosen
        assert not turn.guided
        assert all(lp < 0 for lp in turn.behavior_logprobs)  # a random model's real scores, not placeholders


def test_a_free_text_expert_trajectory_wins_by_saying_the_plan_in_the_answer_format(tiny_policy):
    config = RolloutConfig(max_turns=4)
    trajs = _play(LAMP, tiny_policy, config, TASKS, seeds=[1, 2], seed=5)
    for traj, task in zip(trajs, TASKS):
        plan = expert_plan(gym.make(LAMP), task)
        assert traj.kind == EXPERT_KIND and traj.metadata["expert_plan"] == plan
        assert traj.won and traj.reward == 1.0 and traj.stop_reason == "terminated"
        assert [t.action for t in traj.turns] == plan
        for turn, action in zip(traj.turns, plan):
            assert tiny_policy.decode(turn.token_ids) == f"<action>{action}</action>" == turn.response
            assert parse_reply(turn.response, ANSWER).action == action and not turn.constrained
        assert traj.loss_mask == traj.agent_mask and sum(traj.agent_mask) == sum(len(t.token_ids) for t in traj.turns)
        _assert_policy_logprobs(tiny_policy, traj)
    again = _play(LAMP, tiny_policy, config, TASKS, seeds=[1, 2], seed=5)
    assert [t.id for t in again] == [t.id for t in trajs] and trajs[0].id != trajs[1].id


def test_constrained_expert_turns_are_the_candidates_a_rollout_would_score(tiny_policy):
    config = RolloutConfig(max_turns=4, constrained=True)
    (traj,) = _play(LAMP, tiny_policy, config, TASKS[:1])
    eot = end_of_turn_id(tiny_policy)
    assert eot is not None and traj.won
    for turn in traj.turns:
        assert turn.constrained and turn.token_ids == [*tiny_policy.tokenize(ANSWER.wrap(turn.action)), eot]
    _assert_policy_logprobs(tiny_policy, traj)


def test_constrained_mode_uses_the_admissible_spelling_and_plays_an_unlisted_action_as_free_text(tiny_policy):
    config = RolloutConfig(max_turns=4, constrained=True)
    plans = {TASKS[0]: ["look", "PRESS  Red", "press green"]}
    (traj,) = _play(LAMP, tiny_policy, config, TASKS[:1], plans=plans)
    look, red, green = traj.turns
    assert (look.action, look.constrained) == ("look", False)  # not a choice the agent had
    assert (red.action, red.constrained) == ("press red", True) and green.constrained and traj.won
    _assert_policy_logprobs(tiny_policy, traj)


def test_a_plan_that_does_not_win_is_still_a_trajectory(tiny_policy):
    (traj,) = _play(LAMP, tiny_policy, RolloutConfig(max_turns=4), TASKS[:1], plans={TASKS[0]: ["press blue"]})
    assert traj.kind == EXPERT_KIND and not traj.won and traj.stop_reason == PLAN_END
    assert traj.num_turns == 1 and traj.token_ids and sum(traj.loss_mask) == len(traj.turns[0].token_ids)
    (short,) = _play(LAMP, tiny_policy, RolloutConfig(max_turns=1), TASKS[:1])
    assert not short.won and short.stop_reason == "max_turns"  # the rollout's own turn limit still applies


def test_expert_groups_round_trip_and_validate_against_the_published_schema(tiny_policy, tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    config = RolloutConfig(max_turns=4)
    won = _play(LAMP, tiny_policy, config, TASKS[:1])
    ended = _play(LAMP, tiny_policy, config, TASKS[:1], plans={TASKS[0]: ["press blue"]})
    group = TrajectoryGroup(env_id=LAMP, task_id=TASKS[0], trajectories=won + ended)
    save_jsonl(tmp_path / "g.jsonl", [group])
    (record,) = [json.loads(line) for line in (tmp_path / "g.jsonl").read_text().splitlines()]
    jsonschema.validate(record, groups_schema())  # "plan_end" is a stop reason the schema knows
    assert list(load_jsonl(tmp_path / "g.jsonl")) == [group]


def test_a_windowed_history_scores_each_reply_in_its_own_prompt(tiny_policy):
    (traj,) = _play(LAMP, tiny_policy, RolloutConfig(max_turns=4, history=0), TASKS[:1])
    assert traj.won
    for turn in traj.turns:
        (expected,) = tiny_policy.score([turn.prompt_ids], [turn.token_ids])
        assert turn.prompt_ids is not None and turn.behavior_logprobs == pytest.approx(expected, abs=1e-4)


def test_an_env_without_an_expert_is_a_clear_error(tiny_policy):
    with pytest.raises(NoExpertPlanError, match="declares no expert"):
        _play("r3ltest/Corridor-v0", tiny_policy, RolloutConfig(), ["corridor-train-000000"])


@pytest.mark.parametrize(
    "env_id, env_kwargs",
    [
        ("r3l/TextWorld-v0", {"game_type": "coin_collector", "difficulty": 1, "max_tasks": 2}),
        ("r3l/Countdown-v0", {}),
    ],
)
def test_expert_trajectories_win_real_envs(tiny_policy, env_id, env_kwargs):
    probe = gym.make(env_id, **env_kwargs)
    tasks = list(probe.unwrapped.task_ids[:2])
    plans = {t: expert_plan(probe, t) for t in tasks}
    probe.close()
    trajs = _play(env_id, tiny_policy, RolloutConfig(), tasks, env_kwargs=env_kwargs)
    for traj in trajs:
        assert traj.won and [t.action for t in traj.turns] == plans[traj.task_id]
        assert [parse_reply(t.response, ANSWER).action for t in traj.turns] == plans[traj.task_id]
        _assert_policy_logprobs(tiny_policy, traj)
