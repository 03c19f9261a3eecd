"""A user's own GRPO trained on reflect-retry groups: what a learner reads from a ``TrajectoryGroup``.

Runs on CPU in well under a minute (the point is the data flow, not learning)::

    python examples/grpo_with_reflect_retry.py [--steps 2] [--player tiny]

What the wrapper gives, per group (one task): ``trajectories`` (kind ``base`` or ``retry``, ``reward``,
``pivot``, ``token_ids``, ``loss_mask`` with pivotal credit already applied, generation ``logprobs``) and
``samples`` (auxiliary SFT sequences with their own ``loss_mask``). Nothing in it is tied to R³L's loss; this
file chooses GRPO's: group-normalised advantages and a PPO-clipped ratio against the log-probs of the policy
before the update (recomputed by a forward pass, as many GRPO implementations do; a retry's recorded
generation log-probs were taken *with* guidance in context, ``metadata["guided_logprobs"]``, so they are not
the behaviour policy of its guidance-free training sequence anyway).

Who plays: a randomly initialised tiny model scores 0 on every Countdown puzzle, so its groups carry no GRPO
signal at all (try ``--player tiny``). By default the groups are played by a scripted Countdown player that
guesses wrong unless the oracle's guidance tells it the answer (``OracleReflector(reveal_answer=True)``):
bases fail, retries from the pivot succeed, and the tiny model is trained on those groups (same tokenizer).
"""

from __future__ import annotations

import argparse
import logging
import re
import statistics
import time

import torch

from r3l_learn.hf_policy import HFPolicy
from r3l_learn.models import tiny_model
from r3l_learn.scripted import ScriptedPolicy
from wrappers import RolloutConfig, SamplingParams
from wrappers.oracle import OracleReflector
from wrappers.reflect_retry import ReflectRetry, ReflectRetryConfig, aggregate_stats

logger = logging.getLogger("grpo_example")


def grpo_advantages(rewards: list[float], eps: float = 1e-6) -> list[float]:
    """GRPO: (r - mean) / std within the group (zero when all rewards are equal)."""
    mean = statistics.fmean(rewards)
    std = statistics.pstdev(rewards)
    return [(r - mean) / (std + eps) for r in rewards]


def token_logprobs(model: torch.nn.Module, ids: list[int]) -> torch.Tensor:
    """log π(ids[t] | ids[:t]) for t ≥ 1, aligned so entry t-1 belongs to token t."""
    x = torch.tensor([ids])
    logits = model(input_ids=x).logits[0, :-1].float()
    return torch.log_softmax(logits, -1).gather(-1, x[0, 1:, None])[:, 0]


def grpo_loss(model, groups, old: dict, clip: float = 0.2, sft_weight: float = 0.1) -> torch.Tensor:
    """Token-mean PPO-clipped GRPO loss over every trajectory, plus an SFT term on the auxiliary samples.
    ``old`` maps ``id(trajectory)`` to its log-probs under the policy before this update."""
    terms, count = [], 0
    for group in groups:
        for traj, adv in zip(group.trajectories, grpo_advantages(group.rewards), strict=True):
            mask = torch.tensor(traj.loss_mask[1:], dtype=torch.float32)
            if adv == 0 or mask.sum() == 0:
                continue
            new = token_logprobs(model, traj.token_ids)
            ratio = torch.exp(new - old[id(traj)])
            surrogate = torch.minimum(ratio * adv, torch.clamp(ratio, 1 - clip, 1 + clip) * adv)
            terms.append(-(surrogate * mask).sum())
            count += int(mask.sum())
        for sample in group.samples:  # keep reflection and guided retry alive as skills (R3L.md §1.6)
            mask = torch.tensor(sample.loss_mask[1:], dtype=torch.float32)
            terms.append(-sft_weight * (token_logprobs(model, sample.token_ids) * mask).sum())
            count += int(mask.sum())
    if not terms:
        return torch.zeros((), requires_grad=True)
    return torch.stack(terms).sum() / max(count, 1)


def countdown_player(prompt_text: str) -> str:
    """Guesses ``1 + 2`` unless guidance in the context states the answer, which it then gives."""
    found = re.search(r"The correct answer is (.+?)\.\n", prompt_text)
    return f"<action>{found.group(1)}</action>" if found else "<action>1 + 2</action>"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--player", choices=["scripted", "tiny"], default="scripted")
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--lr", type=float, default=1e-4)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    torch.manual_seed(0)
    model, tokenizer = tiny_model(seed=0)
    trained = HFPolicy(model, tokenizer, name="tiny")
    player = trained if args.player == "tiny" else ScriptedPolicy(countdown_player, tokenizer)
    rollout = RolloutConfig(sampling=SamplingParams(temperature=1.0, max_new_tokens=48))
    config = ReflectRetryConfig(group_size=args.group_size, rollout=rollout)
    collector = ReflectRetry("r3l/Countdown-v0", player, OracleReflector(reveal_answer=True), config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    for step in range(args.steps):
        start = time.perf_counter()
        task_ids = [f"countdown-train-{i:06d}" for i in range(step * args.tasks, (step + 1) * args.tasks)]
        groups = collector.collect(task_ids, seed=step)
        with torch.no_grad():
            old = {id(t): token_logprobs(model, t.token_ids) for g in groups for t in g.trajectories}
        model.train()
        loss = grpo_loss(model, groups, old)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        model.eval()
        stats = aggregate_stats(groups)
        kinds = [t.kind for g in groups for t in g.trajectories]
        logger.info(
            "step %d: loss %.4f | %d trajectories (%d retries), %d aux samples | mean reward %.2f | "
            "retries beat base %s/%s | %.1fs",
            step,
            loss.item(),
            len(kinds),
            kinds.count("retry"),
            sum(len(g.samples) for g in groups),
            statistics.fmean(r for g in groups for r in g.rewards),
            stats["retries_beat_base"],
            stats["retries"],
            time.perf_counter() - start,
        )
    collector.close()


if __name__ == "__main__":
    main()
