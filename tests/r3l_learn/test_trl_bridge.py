"""r3l envs inside TRL's GRPOTrainer: what one trajectory becomes (prompt, completion, multi-turn mask), and real
trainer steps with the tiny model on TextWorld and Countdown, in both modes."""

from __future__ import annotations

import math
import os
import re

import gymnasium as gym
import pytest

from wrappers import RolloutConfig, SamplingParams
from wrappers.retry.oracle import OracleReflector, expert_plan
from wrappers.retry.reflect_retry import ReflectRetry, ReflectRetryConfig

pytest.importorskip("trl")
os.environ["HF_HUB_OFFLINE"] = "1"  # nothing here may reach a hub
os.environ["TRL_EXPERIMENTAL_SILENCE"] = "1"  # rollout_func is experimental in TRL; we know

PIVOT = 2


def plan_follower(plan):
    """Plays the plan for two turns, then ``inventory`` forever, unless guidance is in the context."""

    def rule(prompt_text):
        done = prompt_text.count("<|im_start|>assistant") - 1
        if "What to do instead" in prompt_text or done < PIVOT:
            return f"<action>{plan[min(done, len(plan) - 1)]}</action>"
        return "<action>inventory</action>"

    return rule


def countdown_player(prompt_text: str) -> str:
    """Guesses ``1 + 2`` unless guidance in the context states the answer."""
    found = re.search(r"The correct answer is (.+?)\.\n", prompt_text)
    return f"<action>{found.group(1)}</action>" if found else "<action>1 + 2</action>"


@pytest.fixture(scope="module")
def textworld_group():
    """A reflect-retry group whose retry restarts at turn 2 (pivotal credit masks turns 0-1 of both)."""
    from r3l_learn.policies.scripted import ScriptedPolicy

    env = gym.make("r3l/TextWorld-v0")
    task = env.unwrapped.task_ids[0]
    plan = expert_plan(env, task)
    env.close()
    config = ReflectRetryConfig(group_size=2, rollout=RolloutConfig(max_turns=len(plan) + 1))
    rr = ReflectRetry("r3l/TextWorld-v0", ScriptedPolicy(plan_follower(plan)), OracleReflector(), config)
    (group,) = rr.collect([task], seed=0)
    rr.close()
    return group


def test_a_trajectory_becomes_prompt_completion_and_env_mask(textworld_group):
    from r3l_learn.bridges.trl import trl_fields

    base, retry = textworld_group.trajectories
    assert retry.kind == "retry" and retry.pivot == PIVOT and retry.base_id == base.id
    for traj in (base, retry):
        (seq,) = traj.sequences()
        fields = trl_fields(traj)
        prompt, completion = fields["prompt_ids"], fields["completion_ids"]
        start = len(prompt)
        assert prompt + completion == seq.token_ids
        assert prompt == seq.token_ids[: traj.turns[0].span[0]]  # system + first user + generation prompt
        assert fields["env_mask"] == seq.loss_mask[start:]
        assert len(fields["logprobs"]) == len(completion)
        # the env's and the template's tokens never train and have no behaviour log-prob
        for i, agent in enumerate(seq.agent_mask[start:]):
            if not agent:
                assert fields["env_mask"][i] == 0 and math.isnan(fields["logprobs"][i])
        # pivotal credit: turns before the pivot are context in both (R3L.md §2); turns from it on train
        for k, turn in enumerate(traj.turns):
            lo, hi = turn.span[0] - start, turn.span[1] - start
            assert set(fields["env_mask"][lo:hi]) == ({0} if k < PIVOT else {1})
        assert fields["r3l_reward"] == traj.reward
    # a retry's suffix was generated under guidance: no usable behaviour log-prob for the ratio-free loss
    guided = [i - len(trl_fields(retry)["prompt_ids"]) for i, g in enumerate(retry.guided_mask()) if g]
    assert guided and all(math.isnan(trl_fields(retry)["logprobs"][i]) for i in guided)
    kept = trl_fields(retry, guided_logprobs=True)["logprobs"]
    behaviour = retry.sequences()[0].behavior_logprobs[len(trl_fields(retry)["prompt_ids"]) :]
    assert [kept[i] for i in guided] == [behaviour[i] for i in guided]


def test_bad_configurations_are_clear_errors():
    from r3l_learn.bridges.trl import EnvRollout

    with pytest.raises(ValueError, match="needs a reflector"):
        EnvRollout("r3l/Countdown-v0", mode="reflect_retry")
    with pytest.raises(ValueError, match="full histories"):
        EnvRollout("r3l/Countdown-v0", rollout=RolloutConfig(history=2))
    with pytest.raises(ValueError, match="not registered"):
        EnvRollout("r3l/Nope-v0")


def _train(rollout, model, tokenizer, dataset, reward_funcs, tmp_path, *, num_generations):
    """Two real GRPOTrainer steps; returns what the rollout gave TRL, the log history, and the changed names."""
    import torch
    from trl import GRPOConfig, GRPOTrainer

    given = []

    def rollout_func(prompts, trainer):
        out = rollout(prompts, trainer)
        given.append(out)
        return out

    args = GRPOConfig(
        output_dir=str(tmp_path),
        max_steps=2,
        per_device_train_batch_size=num_generations,  # one group per step
        num_generations=num_generations,
        learning_rate=1e-2,
        use_cpu=True,
        report_to="none",
        logging_steps=1,
        save_strategy="no",
        seed=0,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward_funcs,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        rollout_func=rollout_func,
    )
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    trainer.train()
    changed = {name for name, p in model.named_parameters() if not torch.equal(before[name], p)}
    rollout.close()
    return given, [h for h in trainer.state.log_history if "loss" in h], changed, set(before)


def token_mean(completion_ids, **kwargs):
    """A shaping reward (the completion's mean token id, scaled): a random model's rewards vary, so its steps
    have a gradient even where the env's reward is 0 for everyone."""
    return [sum(ids) / len(ids) / 1000 for ids in completion_ids]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("env_id", "mode"),
    [
        pytest.param("r3l/TextWorld-v0", "reflect_retry", id="textworld-reflect-retry"),
        pytest.param("r3l/Countdown-v0", "episodes", id="countdown-episodes"),
    ],
)
def test_grpo_steps_with_the_trainers_own_model(tmp_path, env_id, mode):
    from r3l_learn.bridges.trl import EnvRollout, env_reward
    from r3l_learn.policies.models import tiny_model

    model, tokenizer = tiny_model(seed=0)
    model.config.max_position_embeddings = 8192  # byte-level tokens: two TextWorld turns need ~5k positions
    rollout = EnvRollout(
        env_id,
        mode=mode,
        rollout=RolloutConfig(max_turns=2, sampling=SamplingParams(max_new_tokens=8)),
        reflector=OracleReflector() if mode == "reflect_retry" else None,
    )
    dataset = rollout.dataset(num_tasks=2)
    rewards = [env_reward, token_mean]
    given, logs, changed, names = _train(rollout, model, tokenizer, dataset, rewards, tmp_path, num_generations=2)
    assert len(logs) == 2 and changed == names  # two optimiser steps moved every parameter
    for out, log in zip(given, logs):
        assert len(out["completion_ids"]) == 2 and set(out["r3l_task_id"]) <= set(dataset["task_id"])
        # multi-turn: observation tokens inside the completion are masked, and TRL counted only the trained ones
        assert all(0 in mask and 1 in mask for mask in out["env_mask"])
        assert log["completions/mean_length"] == pytest.approx(sum(map(sum, out["env_mask"])) / 2)
    if mode == "reflect_retry":
        assert {k for out in given for k in out["r3l_kind"]} == {"base", "retry"}


@pytest.mark.slow
def test_grpo_steps_on_countdown_reflect_retry_groups_with_env_reward_only(tmp_path):
    """Bases fail and oracle-guided retries win: the env's reward alone gives the group its contrast."""
    from r3l_learn.bridges.trl import EnvRollout, env_reward
    from r3l_learn.policies.models import tiny_model
    from r3l_learn.policies.scripted import ScriptedPolicy

    model, tokenizer = tiny_model(seed=0)
    seen = []
    rollout = EnvRollout(
        "r3l/Countdown-v0",
        mode="reflect_retry",
        rollout=RolloutConfig(sampling=SamplingParams(max_new_tokens=48)),
        reflector=OracleReflector(reveal_answer=True),
        policy=ScriptedPolicy(countdown_player, tokenizer),
        on_groups=seen.extend,
    )
    dataset = rollout.dataset(num_tasks=2)
    given, logs, changed, names = _train(rollout, model, tokenizer, dataset, env_reward, tmp_path, num_generations=4)
    assert len(logs) == 2 and changed == names
    for out, log in zip(given, logs):
        assert out["r3l_kind"] == ["base", "retry", "base", "retry"]
        assert out["r3l_reward"] == [0.0, 1.0, 0.0, 1.0]
        assert log["rewards/env_reward/mean"] == 0.5 and log["r3l/success"] == 0.5 and log["r3l/retries"] == 0.5
    assert len(seen) == 2 and all(len(g.samples) == 4 for g in seen)  # aux samples reach on_groups
    assert rollout.last_stats["retries_beat_base"] == 2
