"""A user's own GRPO trained on reflect-retry groups: what a learner reads from a ``TrajectoryGroup``.

Runs on CPU in well under a minute (the point is the data flow, not learning; ``--small``: one step of two
tasks, the CI configuration)::

    python examples/grpo_with_reflect_retry.py [--steps 2] [--player tiny] [--small]

What the wrapper gives, per group (one task): ``trajectories`` and ``samples``. A trajectory has ``kind``
(``base`` or ``retry``), ``reward``, ``pivot``, an ``id`` (a retry names its base by ``base_id``) and its training
sequence, every array aligned with ``token_ids``: ``agent_mask`` (the tokens the agent generated), ``loss_mask``
(the ones to train: pivotal credit already applied) and ``behavior_logprobs`` (each agent token's log-prob when
it was generated). A retry's turns from the pivot on were generated with the guidance in context, which the
training sequence does not hold: ``guided_mask()`` marks those tokens (``Turn.guided``),
whose recorded log-probs belong to another context. ``samples`` are auxiliary SFT sequences with their own
``loss_mask``.

Nothing in it is tied to R³L's loss; this file chooses GRPO's: group-normalised advantages and a PPO-clipped
ratio against the log-probs of the policy before the update. Where the trained model itself generated a token
from this very sequence, that is the recorded behaviour log-prob; elsewhere (guided tokens, or another policy
played) a forward pass before the update gives it.

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

from r3l_learn.policies.hf import HFPolicy
from r3l_learn.policies.models import tiny_model
from r3l_learn.policies.scripted import ScriptedPolicy
from wrappers import RolloutConfig, SamplingParams
from wrappers.data.trajectory import Trajectory
from wrappers.retry.oracle import OracleReflector
from wrappers.retry.reflect_retry import ReflectRetry, ReflectRetryConfig, beats

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


def old_logprobs(model: torch.nn.Module, traj: Trajectory, recorded: bool) -> torch.Tensor:
    """log π_old(token t | tokens before t) for t ≥ 1, aligned like :func:`token_logprobs`.

    ``recorded``: the trained model played. Then ``behavior_logprobs`` are exactly these on the agent tokens
    generated from this sequence (``agent_mask`` and not ``guided_mask()``); everywhere else (the guided turns of
    a retry, tokens another policy generated) a forward pass before the update gives them."""
    with torch.no_grad():
        fresh = token_logprobs(model, traj.token_ids)
    if not recorded:
        return fresh
    own = [bool(a) and not g for a, g in zip(traj.agent_mask, traj.guided_mask(), strict=True)]
    behavior = torch.tensor(traj.behavior_logprobs[1:], dtype=fresh.dtype)
    return torch.where(torch.tensor(own[1:]), behavior, fresh)


def grpo_loss(model, groups, old: dict, clip: float = 0.2, sft_weight: float = 0.1) -> torch.Tensor:
    """Token-mean PPO-clipped GRPO loss over every trajectory, plus an SFT term on the auxiliary samples.
    ``old`` maps a trajectory's ``id`` to its log-probs under the policy before this update."""
    terms, count = [], 0
    for group in groups:
        for traj, adv in zip(group.trajectories, grpo_advantages(group.rewards), strict=True):
            mask = torch.tensor(traj.loss_mask[1:], dtype=torch.float32)
            if adv == 0 or mask.sum() == 0:
                continue
            new = token_logprobs(model, traj.token_ids)
            ratio = torch.exp(new - old[traj.id])
            surrogate = torch.minimum(ratio * adv, torch.clamp(ratio, 1 - clip, 1 + clip) * adv)
            terms.append(-(surrogate * mask).sum())
            count += int(mask.sum())
        for sample in group.samples:  # keep reflection and guided retry alive as skills (R³L's auxiliary samples)
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


def main(argv: list[str] | None = None) -> list[dict[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="one step of two tasks (CI)")
    parser.add_argument("--player", choices=["scripted", "tiny"], default="scripted")
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--lr", type=float, default=1e-4)
    args = parser.parse_args(argv)
    if args.small:
        args.steps, args.tasks = 1, 2
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    torch.manual_seed(0)
    model, tokenizer = tiny_model(seed=0)
    trained = HFPolicy(model, tokenizer, name="tiny")
    player = trained if args.player == "tiny" else ScriptedPolicy(countdown_player, tokenizer)
    rollout = RolloutConfig(sampling=SamplingParams(temperature=1.0, max_new_tokens=48))
    config = ReflectRetryConfig(group_size=args.group_size, rollout=rollout)
    collector = ReflectRetry("r3l/Countdown-v0", player, OracleReflector(reveal_answer=True), config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    results = []
    for step in range(args.steps):
        start = time.perf_counter()
        task_ids = [f"countdown-train-{i:06d}" for i in range(step * args.tasks, (step + 1) * args.tasks)]
        groups = collector.collect(task_ids, seed=step)
        trajs = [t for g in groups for t in g.trajectories if t.token_ids]  # none: stopped before a first reply
        old = {t.id: old_logprobs(model, t, recorded=player is trained) for t in trajs}
        model.train()
        loss = grpo_loss(model, groups, old)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        model.eval()
        # each retry finds its base by id (positions change when a group is filtered or reordered)
        pairs = [(t, g.by_id()[t.base_id]) for g in groups for t in g.trajectories if t.kind == "retry"]
        kinds = [t.kind for g in groups for t in g.trajectories]
        logger.info(
            "step %d: loss %.4f | %d trajectories (%d retries), %d aux samples | mean reward %.2f | "
            "retries beat base %d/%d | trained %d of %d agent tokens (pivotal credit) | %.1fs",
            step,
            loss.item(),
            len(kinds),
            kinds.count("retry"),
            sum(len(g.samples) for g in groups),
            statistics.fmean(r for g in groups for r in g.rewards),
            sum(beats(retry, base) for retry, base in pairs),
            len(pairs),
            sum(sum(t.loss_mask) for t in trajs),
            sum(sum(t.agent_mask) for t in trajs),
            time.perf_counter() - start,
        )
        results.append(
            {
                "loss": loss.item(),
                "trajectories": len(kinds),
                "retries": kinds.count("retry"),
                "samples": sum(len(g.samples) for g in groups),
                "retries_beat_base": sum(beats(retry, base) for retry, base in pairs),
            }
        )
    collector.close()
    return results


if __name__ == "__main__":
    main()
