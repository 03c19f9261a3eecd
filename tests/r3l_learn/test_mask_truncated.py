"""mask_truncated: the tokens of a reply cut at the generation cap leave the loss (policy and KL), its episode
stays in its group's advantages, and the step counts cut replies either way."""

import gymnasium as gym
import pytest

pytest.importorskip("transformers")

from r3l_learn.algorithms.batch import cut_replies, rows_from_groups
from r3l_learn.algorithms.catalog import ALGORITHMS
from r3l_learn.algorithms.update import LossConfig, accumulate_gradients
from r3l_learn.loop.config import TrainConfig
from r3l_learn.policies.models import tiny_model
from r3l_learn.policies.scripted import ScriptedPolicy
from wrappers import RolloutConfig, SamplingParams, rollout_batch
from wrappers.data.trajectory import Sample, TrajectoryGroup

CAP = 48  # new tokens per reply; the tiny tokenizer is byte-level: one token per character


@pytest.fixture(scope="module")
def group():
    """A real Countdown group of two episodes: in the first, a rambling reply cut at the cap (unparsable, so the
    episode goes on), then the answer; in the second, the answer at once."""
    _, tokenizer = tiny_model()
    env = gym.make("r3l/Countdown-v0", split="test")
    answers = {}
    for seed in (0, 2):
        env.reset(seed=seed)
        answers[env.unwrapped.current_task.problem] = env.unwrapped.current_task.reference
    first = next(iter(answers))  # seed 0's problem
    rambled = []

    def reply(prompt_text: str) -> str:
        (problem,) = [p for p in answers if p in prompt_text]
        if problem == first and not rambled:
            rambled.append(problem)
            return "<think>" + "let me think about this " * 10 + "</think>"
        return f"<action>{answers[problem]}</action>"

    envs = [gym.make("r3l/Countdown-v0", split="test") for _ in range(2)]
    config = RolloutConfig(sampling=SamplingParams(max_new_tokens=CAP), env_workers=1)
    trajs = rollout_batch(envs, ScriptedPolicy(reply, tokenizer), config, seeds=[0, 2])
    cut_turns = [[t.reply_cut for t in traj.turns] for traj in trajs]
    assert cut_turns == [[True, False], [False]], cut_turns
    for traj in trajs:
        traj.reward = float(traj.won)  # the rambling episode still wins at its second reply
    trajs[1].reward = 0.0  # a spread of rewards, so that both rows carry an advantage
    return TrajectoryGroup("r3l/Countdown-v0", "countdown", trajs)


def test_the_cut_reply_leaves_the_loss_only_with_the_option(group):
    cut = group.trajectories[0]
    start, end = cut.turns[0].span
    off = rows_from_groups([group], ALGORITHMS["grpo"])
    on = rows_from_groups([group], ALGORITHMS["grpo"], mask_truncated=True)
    assert [r.loss_mask for r in off] == [t.loss_mask for t in group.trajectories]
    assert sum(cut.loss_mask[start:end]) > 0  # the cut reply's tokens were in the loss
    assert on[0].loss_mask[start:end] == [0] * (end - start)
    assert on[0].loss_mask[:start] == cut.loss_mask[:start] and on[0].loss_mask[end:] == cut.loss_mask[end:]
    assert sum(on[0].loss_mask[end:]) > 0  # the answer after it still trains
    assert on[1].loss_mask == off[1].loss_mask  # an episode without a cut reply is untouched
    assert [r.advantage for r in on] == [r.advantage for r in off] != [0.0, 0.0]  # it still counts in the group


def test_a_windowed_history_masks_the_cut_turns_row(group):
    """One row per turn: the cut turn's row has no target token left, the other keeps its own."""
    cut = group.trajectories[0]
    for turn in cut.turns:
        turn.prompt_ids = [1, 5, 6]
    try:
        on = rows_from_groups([group], ALGORITHMS["grpo"], mask_truncated=True)
        assert [r.num_target_tokens for r in on[:2]] == [0, len(cut.turns[1].token_ids)]
    finally:
        for turn in cut.turns:
            turn.prompt_ids = None


def test_the_update_trains_fewer_tokens_with_the_option(group):
    model, tokenizer = tiny_model(seed=1)
    config = LossConfig.for_algorithm(ALGORITHMS["grpo"], kl_coef=0.0)
    counts = []
    for mask in (False, True):
        rows = rows_from_groups([group], ALGORITHMS["grpo"], mask_truncated=mask)
        model.zero_grad()
        stats = accumulate_gradients(model, rows, config, micro_batch_size=2, pad_id=tokenizer.pad_token_id)
        assert stats.finite
        counts.append(stats.target_tokens)
    start, end = group.trajectories[0].turns[0].span
    assert counts[0] - counts[1] == sum(group.trajectories[0].agent_mask[start:end]) > 0


def test_cut_replies_are_counted_once(group):
    assert cut_replies([group]) == 1
    retry = group.trajectories[0]
    retry.pivot = 1  # as a retry from turn 1: its turn 0 is its base's, reused, and not counted again
    try:
        assert cut_replies([group]) == 0
    finally:
        retry.pivot = None


def test_the_option_is_off_by_default_and_recorded_in_the_config():
    assert TrainConfig().mask_truncated is False
    assert TrainConfig(mask_truncated=True).to_dict()["mask_truncated"] is True


def test_an_aux_samples_marked_cut_reply_leaves_the_sft_term(group):
    sample = Sample("guided_retry", [1, 5, 6, 7, 8, 2], [0, 0, 1, 1, 1, 1], metadata={"cut_mask": [0, 0, 1, 1, 0, 0]})
    with_aux = TrajectoryGroup(group.env_id, group.task_id, group.trajectories, samples=[sample])
    off = rows_from_groups([with_aux], ALGORITHMS["r3l"])
    on = rows_from_groups([with_aux], ALGORITHMS["r3l"], mask_truncated=True)
    assert off[-1].aux and off[-1].loss_mask == [0, 0, 1, 1, 1, 1]
    assert on[-1].aux and on[-1].loss_mask == [0, 0, 0, 0, 1, 1]
    sample.metadata["cut_mask"] = [0, 1]
    with pytest.raises(ValueError, match="guided_retry sample of group 0: a cut-reply mask of 2 entries"):
        rows_from_groups([with_aux], ALGORITHMS["r3l"], mask_truncated=True)
