"""Generation in a Ray actor (r3l_learn/policies/ray.py): the same tokens and log-probs as the local policy, weight
pushes that reach the actor, and a training run that starts and stops its own Ray."""

from __future__ import annotations

import pytest
import torch

ray = pytest.importorskip("ray", reason='the ray extra is not installed (pip install -e ".[ray]")')
pytest.importorskip("transformers")

from r3l_learn.loop.evaluate import load_policy  # noqa: E402
from r3l_learn.policies.ray import RayPolicy  # noqa: E402
from wrappers import SamplingParams  # noqa: E402
from wrappers.collectors.ray import connect  # noqa: E402

pytestmark = pytest.mark.ray


def _flat(scores):
    return [x for row in scores for x in row]


def _prompts(policy):
    texts = ["go north", "take the key and open the door"]
    return [policy.tokenize(policy.render([{"role": "user", "content": t}], add_generation_prompt=True)) for t in texts]


def test_the_actor_generates_and_scores_like_the_local_policy_and_follows_pushed_weights():
    started = connect("local", num_cpus=2)
    try:
        local = load_policy("tiny-random", seed=0)
        remote = RayPolicy(local, "tiny-random", seed=1)  # a different init: the first push must overwrite it
        prompts = _prompts(local)
        greedy = SamplingParams(temperature=0.0, max_new_tokens=8)
        assert remote.generate(prompts, greedy) == local.generate(prompts, greedy)
        continuations = [g.token_ids for g in local.generate(prompts, greedy)]
        before = _flat(remote.score(prompts, continuations))
        assert before == pytest.approx(_flat(local.score(prompts, continuations)), abs=1e-5)

        with torch.no_grad():  # a learner step, in effect
            for p in local.model.parameters():
                p.add_(0.05 * torch.randn_like(p))
        moved = _flat(local.score(prompts, continuations))
        assert _flat(remote.score(prompts, continuations)) == pytest.approx(before, abs=1e-6)  # not pushed yet
        assert max(abs(a - b) for a, b in zip(moved, before)) > 1e-3
        remote.update_weights(local.model.state_dict())
        assert _flat(remote.score(prompts, continuations)) == pytest.approx(moved, abs=1e-5)
        assert remote.eos_token_ids == local.eos_token_ids and remote.decode([1, 2]) == local.decode([1, 2])
        remote.close()
    finally:
        if started:
            ray.shutdown()


@pytest.mark.slow
def test_training_with_generation_in_a_ray_actor_completes_and_stops_its_ray(tmp_path):
    from r3l_learn.loop.train import TrainConfig, train

    assert not ray.is_initialized()
    config = TrainConfig(
        env="r3l/Countdown-v0",
        model="tiny-random",
        algo="grpo",
        steps=1,
        tasks_per_step=1,
        group_size=2,
        max_new_tokens=8,
        eval_episodes=1,
        ray="local",
        ray_workers=1,
        ray_generation=True,
        tensorboard=False,
        progress=False,
        save_final=False,
        out_dir=str(tmp_path / "run"),
    )
    result = train(config)
    assert result.steps_done == 1 and not result.interrupted and result.eval_after is not None
    assert not ray.is_initialized()  # the run started Ray and stopped it after the final eval
