"""A guidance-following warm-up: a short SFT that teaches the starting model to follow guidance it is given.

Reflect-then-retry helps only where a guided retry succeeds more often than its base. A small model that is close
to uniform among the admissible actions follows an oracle's named step about half the time, so its guided retries
rarely win. This warm-up trains it on **guided expert turns from the train split**, in exactly the context a
guided retry sees:

1. the policy plays base episodes on train-split tasks (keeping a checkpoint before every turn), as reflect-retry's
   bases are played;
2. the :class:`wrappers.retry.oracle.OracleReflector` names each failed base's pivot and writes its guidance
   (``plan="step"``: the next ``reveal_steps`` expert actions, or ``plan="rest"``: the rest of the plan);
3. each base is resumed at its pivot with that guidance in its generation context
   (:meth:`wrappers.episode.AgentEpisode.resume_many`, the call a reflect-retry retry makes), and the expert's
   actions are played from there as the agent's replies (as :mod:`wrappers.retry.expert` plays demonstrations);
4. the training sequence is the guided context and the expert's replies (:func:`wrappers.chat.replay` with the
   guidance at the pivot, as reflect-retry builds its ``guided_retry`` sample), and the loss covers only the
   tokens of the actions the policy would choose: not the action tag, its closer or the end-of-turn token, and by
   default (``targets="named"``) only the turns whose action the guidance names, so it teaches following the
   guidance rather than the task.

``unguided=True`` mixes in, for every guided example, the same pivot turn *without* guidance whose target is the
action the base itself chose there: an anchor that keeps unguided behaviour where it was.

:func:`warmup` builds the data, trains, and saves an ordinary HF model folder (loadable by ``r3l train --model``
and ``r3l eval --model``) with a ``warmup.json`` beside the weights that records the data, the settings, the env
and split, and the losses. Everything is a function of the seed.
"""

from __future__ import annotations

import json
import logging
import math
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, Literal

from r3l_learn.errors import R3LLearnError
from r3l_learn.loop.progress import phase
from wrappers.chat import replay
from wrappers.collectors.local import LocalCollector
from wrappers.data.trajectory import Sample, Trajectory, save_jsonl
from wrappers.episode import AgentEpisode
from wrappers.policy import Policy, SamplingParams
from wrappers.retry.expert import expert_plans, play_plans, require_expert
from wrappers.retry.oracle import OracleReflector
from wrappers.retry.reflection import Reflection, ReflectionRequest
from wrappers.rollout import RolloutConfig, rollout_batch

__all__ = ["GUIDED_KIND", "UNGUIDED_KIND", "WarmupConfig", "action_token_mask", "guided_examples", "warmup"]

logger = logging.getLogger(__name__)

#: ``Sample.kind`` of a guided expert turn, and of the unguided anchor turn (``unguided=True``).
GUIDED_KIND = "guided_expert"
UNGUIDED_KIND = "unguided_own"

#: the examples, saved beside the weights
EXAMPLES_FILE = "warmup_examples.jsonl"

#: the split the warm-up's tasks come from (never the held-out one)
TRAIN_SPLIT = "train"


class WarmupError(R3LLearnError):
    """The warm-up cannot run as asked (no guided example could be built, an output folder in the way)."""


@dataclass(frozen=True)
class WarmupConfig:
    """How the warm-up data is built and trained.

    Attributes:
        episodes: base episodes played on train-split tasks (episode i resets with seed ``seed + i``); each failed
            base whose guidance names an action gives one guided example.
        epochs: passes over the examples.
        lr: AdamW learning rate.
        seed: seeds the episodes, the sampling, the example order and torch.
        batch_size: episodes played together, and examples per optimizer step.
        actions: the action mode the retries will use (``free``, ``constrained`` or ``direct``).
        temperature: the bases' sampling temperature (the study's; the bases decide where the pivots fall).
        max_turns: turns per episode; ``None``: the env's own limit.
        max_new_tokens: new tokens per free-text turn of a base.
        plan: the oracle's guidance: ``"step"`` (``reveal_steps`` actions from the pivot) or ``"rest"`` (the rest
            of the plan).
        reveal_steps: with ``plan="step"``: how many expert actions the guidance names.
        targets: ``"named"``: only the turns whose action the guidance names carry loss; ``"suffix"``: every
            expert turn from the pivot on (which also teaches the unnamed steps, i.e. the task).
        unguided: also train the pivot turn without guidance, on the action the base chose there (an anchor).
        grad_clip: the gradient norm is clipped to this.
    """

    episodes: int = 64
    epochs: int = 2
    lr: float = 1e-5
    seed: int = 0
    batch_size: int = 8
    actions: Literal["free", "constrained", "direct"] = "constrained"
    temperature: float = 1.0
    max_turns: int | None = None
    max_new_tokens: int = 32
    plan: Literal["step", "rest"] = "step"
    reveal_steps: int = 1
    targets: Literal["named", "suffix"] = "named"
    unguided: bool = False
    grad_clip: float = 1.0

    def __post_init__(self) -> None:
        if self.episodes < 1 or self.epochs < 1 or self.batch_size < 1:
            raise ValueError(
                f"episodes, epochs and batch_size must be >= 1, got {self.episodes}, {self.epochs}, {self.batch_size}"
            )
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ValueError(f"lr must be a positive number, got {self.lr}")
        if self.targets not in ("named", "suffix"):
            raise ValueError(f"targets must be 'named' or 'suffix', got {self.targets!r}")
        if self.plan not in ("step", "rest"):
            raise ValueError(f"plan must be 'step' or 'rest', got {self.plan!r}")

    def rollout(self) -> RolloutConfig:
        """The rollout settings of the bases and the guided turns (checkpoints kept: a retry restores them)."""
        from r3l_learn.loop.config import action_flags

        sampling = SamplingParams(temperature=self.temperature, max_new_tokens=self.max_new_tokens)
        return RolloutConfig(sampling, max_turns=self.max_turns, keep_checkpoints=True, **action_flags(self.actions))

    def reflector(self) -> OracleReflector:
        """The oracle whose guidance the retries see."""
        kwargs: dict[str, Any] = {"reveal_steps": self.reveal_steps}
        if self.plan != "step":  # only an oracle that knows plans other than one step takes the argument
            kwargs["plan"] = self.plan
        return OracleReflector(**kwargs)


# ---------------------------------------------------------------------------------------------------- the data
def action_token_mask(policy: Policy, token_ids: Sequence[int], action: str) -> list[int]:
    """Per reply token: 1 on the tokens that spell ``action`` (a token holding characters of the action and of
    the text around it counts), 0 on what the rollout writes around it (the action tag, its closer, the
    end-of-turn token). A reply that does not spell ``action`` gets all ones (free text: all of it was sampled)."""
    ids = list(token_ids)
    text = policy.decode(ids)
    start = text.rfind(action) if action else -1
    if start < 0:
        return [1] * len(ids)
    end = start + len(action)
    mask, before = [], 0
    for i in range(len(ids)):
        after = len(policy.decode(ids[: i + 1]))
        mask.append(int(before < end and after > start))
        before = after
    return mask if any(mask) else [1] * len(ids)


def _named(suggestion: str | None, ahead: Sequence[str]) -> int:
    """How many of the plan's next actions ``ahead`` the suggestion names, in order (quoted as the oracle quotes
    them)."""
    if not suggestion:
        return 0
    text, at, count = suggestion.lower(), 0, 0
    for action in ahead:
        found = text.find(repr(action).lower(), at)
        if found < 0:
            break
        at, count = found + len(repr(action)), count + 1
    return count


def guided_examples(
    env_id: str,
    policy: Policy,
    config: WarmupConfig | None = None,
    *,
    env_kwargs: dict[str, Any] | None = None,
    progress: bool = True,
) -> tuple[list[Sample], dict[str, Any]]:
    """The warm-up's examples from train-split tasks of ``env_id`` (see the module docstring), and counts of how
    they were made (bases, failed bases, retries guided, examples, target tokens).

    Raises:
        wrappers.retry.expert.NoExpertPlanError: the env declares no expert plan.
        WarmupError: ``env_kwargs`` names a split (the warm-up always uses the train split).
    """
    config = config or WarmupConfig()
    env_kwargs = dict(env_kwargs or {})
    if "split" in env_kwargs:
        raise WarmupError("the warm-up always plays the train split: leave split out of the env kwargs")
    rollout, reflector = config.rollout(), config.reflector()
    samples: list[Sample] = []
    stats = dict.fromkeys(("bases", "bases_won", "guided", "skipped_unnamed", "target_tokens"), 0)
    seeds = list(range(config.seed, config.seed + config.episodes))
    kwargs = {**env_kwargs, "split": TRAIN_SPLIT}
    _prebuild(env_id, kwargs, seeds, progress)
    with (
        LocalCollector(env_id, env_kwargs=kwargs, workers=rollout.env_workers) as collector,
        phase("warm-up data: guided expert turns", total=len(seeds), unit="ep", enabled=progress) as bar,
    ):
        require_expert(collector)
        for first in range(0, len(seeds), config.batch_size):
            wave = seeds[first : first + config.batch_size]
            bases = rollout_batch(collector, policy, rollout, seeds=wave, seed=config.seed * 7_919 + first)
            stats["bases"] += len(bases)
            stats["bases_won"] += sum(b.won for b in bases)
            # slot i played base i and is idle: the oracle reads its plan there, as reflect-retry's does
            idle = [(collector.local_env(i), partial(collector.call, i)) for i in range(len(bases))]
            reflections = reflector.reflect([ReflectionRequest(b, *slot) for b, slot in zip(bases, idle, strict=True)])
            samples += _wave(collector, policy, config, rollout, bases, reflections, stats)
            bar.update(len(wave))
            bar.set_postfix(examples=len(samples))
    stats["examples"] = len(samples)
    stats["target_tokens"] = sum(sum(s.loss_mask) for s in samples)
    return samples, stats


def _prebuild(env_id: str, env_kwargs: dict[str, Any], seeds: Sequence[int], progress: bool) -> None:
    """Build the content the episodes need first (TextWorld's games), under a bar of its own."""
    import gymnasium as gym

    from r3l_learn.loop.prebuild import has_content_to_build, prebuild, reset_task_ids

    if not has_content_to_build(env_id):
        return
    env = gym.make(env_id, **env_kwargs)
    try:
        tasks = reset_task_ids(env, seeds) or []
    finally:
        env.close()
    rest = {k: v for k, v in env_kwargs.items() if k != "split"}
    prebuild(env_id, rest, {env_kwargs["split"]: tasks}, progress=progress)


def _wave(
    collector: LocalCollector,
    policy: Policy,
    config: WarmupConfig,
    rollout: RolloutConfig,
    bases: Sequence[Trajectory],
    reflections: Sequence[Reflection],
    stats: dict[str, int],
) -> list[Sample]:
    """The examples of one wave of bases: each retry a reflection asks for, resumed at its pivot with the guidance
    in context, plays the expert's actions from there."""
    wanted = [i for i, r in enumerate(reflections) if r.wants_retry and not bases[i].won]
    if not wanted:
        return []
    plans = expert_plans(collector, [bases[i].task_id for i in wanted])  # before the restores: it resets envs
    jobs = []  # (slot, pivot, guidance, the plan up to its last action to play)
    for i in wanted:
        refl, plan = reflections[i], plans[bases[i].task_id]
        named = _named(refl.suggestion, plan[refl.pivot :])
        if named == 0:
            stats["skipped_unnamed"] += 1
            continue
        stop = refl.pivot + named if config.targets == "named" else len(plan)
        jobs.append((i, refl.pivot, refl.guidance(), plan[:stop]))
    if not jobs:
        return []
    episodes = AgentEpisode.resume_many(
        collector,
        policy,
        rollout,
        [bases[i] for i, *_ in jobs],
        [p for _, p, *_ in jobs],
        guidances=[g for _, _, g, _ in jobs],
        slots=[i for i, *_ in jobs],
    )
    play_plans(episodes, [plan for *_, plan in jobs], policy, rollout, collector)
    out = []
    for ep, (i, pivot, guidance, _) in zip(episodes, jobs, strict=True):
        stats["guided"] += 1
        sample = _guided_sample(policy, ep, pivot, guidance, config.actions == "constrained")
        if sample is not None:
            out.append(sample)
            if config.unguided:
                out.append(_unguided_sample(policy, bases[i], pivot))
    return out


def _guided_sample(policy: Policy, ep: AgentEpisode, pivot: int, guidance: str, constrained: bool) -> Sample | None:
    """The guided context and the expert's replies from the pivot on, the actions' own tokens as targets (a turn
    that constrained mode could not have chosen is context, not target)."""
    traj = ep.trajectory
    turns = traj.turns
    if len(turns) <= pivot:  # the context was full before the pivot's reply
        return None
    seq = replay(policy, ep.system, [t.prompt_text for t in turns], turns, guidance=guidance, guided_at=pivot)
    mask = [0] * len(seq.token_ids)
    for turn, (start, end) in zip(turns[pivot:], seq.spans[pivot:], strict=True):
        if turn.action is None or (constrained and not turn.constrained):
            continue
        mask[start:end] = action_token_mask(policy, seq.token_ids[start:end], turn.action)
    if not any(mask):
        return None
    meta = {"task_id": traj.task_id, "pivot": pivot, "actions": [t.action for t in turns[pivot:]]}
    return Sample(GUIDED_KIND, seq.token_ids, mask, messages=seq.messages, metadata=meta)


def _unguided_sample(policy: Policy, base: Trajectory, pivot: int) -> Sample:
    """The base's own pivot turn without guidance, its own choice as target (the anchor of ``unguided``)."""
    turn = base.turns[pivot]
    start, end = turn.span
    mask = [0] * start + action_token_mask(policy, base.token_ids[start:end], turn.action or "")
    meta = {"task_id": base.task_id, "pivot": pivot, "actions": [turn.action]}
    return Sample(UNGUIDED_KIND, list(base.token_ids[:end]), mask, metadata=meta)


# ---------------------------------------------------------------------------------------------------- training
def _batches(samples: Sequence[Sample], size: int, pad_id: int):
    import torch

    for first in range(0, len(samples), size):
        chunk = samples[first : first + size]
        width = max(len(s.token_ids) for s in chunk)
        ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)
        attn = torch.zeros((len(chunk), width), dtype=torch.long)
        mask = torch.zeros((len(chunk), width))
        for row, s in enumerate(chunk):
            ids[row, : len(s.token_ids)] = torch.tensor(s.token_ids)
            attn[row, : len(s.token_ids)] = 1
            mask[row, : len(s.token_ids)] = torch.tensor(s.loss_mask, dtype=torch.float32)
        yield ids, attn, mask


def _nll(model: Any, ids, attn, mask):
    """The mean negative log-likelihood of the target tokens (token mean over the batch)."""
    from r3l_learn.algorithms.logprobs import sequence_logprobs

    logprobs = sequence_logprobs(model, ids, attn, positions=mask.bool())
    return -(logprobs * mask).sum() / mask.sum().clamp(min=1.0)


def example_loss(policy: Any, samples: Sequence[Sample], batch_size: int = 8) -> float:
    """The mean target-token NLL of ``samples`` under ``policy.model`` (no gradient)."""
    import torch

    total, tokens = 0.0, 0.0
    with torch.no_grad():
        for ids, attn, mask in _batches(samples, batch_size, policy.pad_token_id):
            n = float(mask.sum())
            total += float(_nll(policy.model, ids, attn, mask)) * n
            tokens += n
    return total / max(tokens, 1.0)


def _checkpointing(model: Any) -> bool:
    """Whether activation checkpointing is on (transformers renamed the flag; the old name warns)."""
    if hasattr(type(model), "is_activation_checkpointing"):
        return bool(model.is_activation_checkpointing)
    return bool(getattr(model, "is_gradient_checkpointing", False))


def train_examples(
    policy: Any, samples: Sequence[Sample], config: WarmupConfig, *, progress: bool = True
) -> list[float]:
    """SFT of ``policy.model`` (an :class:`r3l_learn.policies.hf.HFPolicy`'s) on ``samples``; the mean loss of each
    epoch, as trained (before each step's update).

    A step's ``batch_size`` examples run one at a time under activation checkpointing, their gradients summed with
    the step's token-mean weights: memory stays that of one sequence (a batch of eight 2k-token contexts would
    need tens of GB of activations).
    """
    import torch

    from r3l_learn.loop.setup import enable_checkpointing

    if not samples:
        raise WarmupError("no warm-up examples to train on")
    torch.manual_seed(config.seed)
    order = random.Random(config.seed)
    model = policy.model
    if hasattr(policy, "prompt_cache"):  # cached prompts are of no use to training and hold memory
        policy.prompt_cache.clear()
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=0.0)
    steps = config.epochs * math.ceil(len(samples) / config.batch_size)
    epoch_losses = []
    checkpointing = _checkpointing(model)
    if not checkpointing:
        enable_checkpointing(model)
    model.train()
    try:
        with phase("warm-up training", total=steps, unit="step", enabled=progress) as bar:
            for epoch in range(config.epochs):
                shuffled = list(samples)
                order.shuffle(shuffled)
                total, tokens = 0.0, 0.0
                for first in range(0, len(shuffled), config.batch_size):
                    step = shuffled[first : first + config.batch_size]
                    weight = float(sum(sum(s.loss_mask) for s in step))
                    optimizer.zero_grad(set_to_none=True)
                    step_loss = 0.0
                    for ids, attn, mask in _batches(step, 1, policy.pad_token_id):
                        n = float(mask.sum())
                        loss = _nll(model, ids, attn, mask) * (n / weight)
                        loss.backward()
                        step_loss += float(loss.detach())
                    torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
                    optimizer.step()
                    total, tokens = total + step_loss * weight, tokens + weight
                    bar.update()
                    bar.set_postfix(epoch=epoch + 1, loss=f"{step_loss:.3f}")
                epoch_losses.append(total / max(tokens, 1.0))
    finally:
        model.eval()
        if not checkpointing:  # as it was: the policy generates again after this
            disable = getattr(model, "activation_checkpointing_disable", None) or model.gradient_checkpointing_disable
            disable()
        if hasattr(policy, "prompt_cache"):  # cached prompts hold the old weights' KV
            policy.prompt_cache.clear()
    return epoch_losses


# ---------------------------------------------------------------------------------------------------- the run
def warmup(
    env_id: str,
    out: str | Path,
    *,
    model: str = "smollm2-135m-instruct",
    config: WarmupConfig | None = None,
    env_kwargs: dict[str, Any] | None = None,
    device: str = "cpu",
    policy: Any = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Build the examples, train, and save the model folder ``out`` with its ``warmup.json``; returns that record.

    Args:
        env_id: a registered env id whose env declares an expert plan.
        out: the folder to write (it must not exist, or be empty).
        model: the starting model (an embedded name or a HF folder), loaded in float32.
        config: see :class:`WarmupConfig`.
        env_kwargs: ``gym.make`` kwargs (no ``split``: the warm-up plays the train split).
        device: where the model runs.
        policy: an already loaded :class:`r3l_learn.policies.hf.HFPolicy` to train instead of ``model`` (tests).
        progress: bars for the data, the training and the loss checks.
    """
    config = config or WarmupConfig()
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise WarmupError(f"{out} exists and is not an empty folder: give a new --out")
    name = model if policy is None else policy.name
    if policy is None:
        from r3l_learn.policies.hf import HFPolicy

        policy = HFPolicy.from_pretrained(model, dtype="float32", device=device)
    samples, stats = guided_examples(env_id, policy, config, env_kwargs=env_kwargs, progress=progress)
    if not samples:
        raise WarmupError(
            f"no guided example from {stats['bases']} train-split episodes ({stats['bases_won']} won, "
            f"{stats['skipped_unnamed']} guidances named no action): play more --episodes"
        )
    if hasattr(policy, "prompt_cache"):  # the rollouts' cached prompts: memory the loss passes need
        policy.prompt_cache.clear()
    with phase("warm-up loss before training", enabled=progress):
        before = example_loss(policy, samples, 1)
    epochs = train_examples(policy, samples, config, progress=progress)
    with phase("warm-up loss after training", enabled=progress):
        after = example_loss(policy, samples, 1)
    out.mkdir(parents=True, exist_ok=True)
    save_jsonl(out / EXAMPLES_FILE, samples)  # what it was trained on, for inspection (r3l show reads no samples)
    policy.model.save_pretrained(out)
    policy.tokenizer.save_pretrained(out)
    record = {
        "env_id": env_id,
        "env_kwargs": env_kwargs or {},
        "split": TRAIN_SPLIT,
        "model": str(name),
        "settings": asdict(config),
        "data": {**stats, "kinds": {k: sum(s.kind == k for s in samples) for k in (GUIDED_KIND, UNGUIDED_KIND)}},
        "loss_before": before,
        "epoch_losses": epochs,
        "final_loss": after,
    }
    (out / "warmup.json").write_text(json.dumps(record, indent=2, default=repr) + "\n", encoding="utf-8")
    return record


def replace_config(config: WarmupConfig, **changes: Any) -> WarmupConfig:
    """``config`` with ``changes`` (the fields left ``None`` keep their value)."""
    return replace(config, **{k: v for k, v in changes.items() if v is not None})
