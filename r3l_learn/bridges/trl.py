"""Train on any ``r3l/*`` env with TRL's ``GRPOTrainer``, through its ``rollout_func`` extension point.

::

    rollout = EnvRollout("r3l/Countdown-v0", mode="reflect_retry", reflector=OracleReflector())
    trainer = GRPOTrainer(model, reward_funcs=env_reward, args=GRPOConfig(...), train_dataset=rollout.dataset(),
                          processing_class=tokenizer, rollout_func=rollout)

How r3l maps onto TRL (``trl>=1.16``; ``rollout_func`` is experimental there):

- **Tasks.** :meth:`EnvRollout.dataset` has one row per task: ``prompt`` is the episode's opening chat (system and
  first user message, TRL's conversational format) and ``task_id`` names the task. TRL hands ``rollout_func`` only
  the prompts, each repeated ``num_generations`` times in a row; the rollout finds the task by its prompt.
- **Episodes.** Each prompt run becomes one group of ``num_generations`` trajectories played by the trainer's own
  model (or the ``policy`` you pass). A multi-turn trajectory is one sequence: ``prompt_ids`` are its tokens
  before the first reply, ``completion_ids`` everything after (the agent's replies, the env's observations, the
  chat template's tokens), and ``env_mask`` (TRL's multi-turn mask) is 1 only on tokens a learner trains, the
  trajectory's ``loss_mask``. The env's reward goes back as the extra field ``r3l_reward``; pass
  :func:`env_reward` as a reward function to use it.
- **Reflect-retry groups** (``mode="reflect_retry"``): :class:`wrappers.ReflectRetry` builds each group; TRL then
  normalises the rewards within it (GRPO). What TRL can and cannot express:

  - *Fixed group size:* TRL groups exactly ``num_generations`` completions per prompt, so groups are filled to
    N with extra bases (R³L's ``fill`` option; N must be even: N/2 bases + their retries + fill).
  - *Pivotal credit:* expressible. ``env_mask`` is the ``loss_mask`` after pivotal credit, so a retried base and
    its retry train only from the pivot on.
  - *The ratio on off-policy retries:* a retry's suffix was sampled with the reflection's guidance in context and
    is trained without it. R³L uses no ratio for it (arXiv 2601.03715). TRL's default (``num_iterations=1``, no vLLM)
    recomputes the behaviour log-probs on the training sequence, so the ratio is exactly 1 and its loss *is* the
    ratio-free policy gradient; keep ``num_iterations=1``. The ``logprobs`` returned (used by TRL only for vLLM
    importance sampling and ``off_policy_mask_threshold``) are NaN, TRL's "no behaviour log-prob" marker, on
    tokens generated under guidance (``guided_logprobs=True`` returns the guided ones instead) and on tokens the
    agent did not generate.
  - *Not expressible:* R³L's positive amplification (TRL subtracts the group mean itself: use
    ``scale_rewards="none"`` for R³L's mean baseline without std scaling), and the auxiliary SFT samples (they need
    an SFT term: get the groups through ``on_groups`` and train them with ``SFTTrainer``, see
    :func:`wrappers.data.export.to_hf_dataset` with ``rows="samples"``). The bundled learner (``r3l train``) does both.

Sampling follows the trainer: temperature and top-p come from ``GRPOConfig`` (TRL computes log-probs at that
temperature), the per-turn token budget from the ``RolloutConfig``.

On CPU, mind two ``GRPOConfig`` defaults: ``bf16=True`` (TRL's) wraps the model in bf16 autocast, and the
episodes are generated with that model, so on a CPU without native bf16 (AVX2-only) every matmul of the rollout
and the update is emulated, many times slower than fp32 (the rollout warns once); ``gradient_checkpointing=True``
recomputes the forward in the backward. Set ``bf16`` from :func:`r3l_learn.policies.device.native_dtype` and turn
checkpointing off for small models, as ``examples/trl_grpo.py`` does.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import gymnasium as gym
import numpy as np

from r3l_learn.algorithms.registry import Choices
from r3l_learn.loop.groups import GroupBuilder, PlainGroups
from r3l_learn.policies.reflectors import REFLECTORS, make_reflector
from wrappers.data.trajectory import Trajectory, TrajectoryGroup
from wrappers.policy import Policy
from wrappers.prompts import template_for
from wrappers.retry.reflect_retry import ReflectRetry, ReflectRetryConfig, aggregate_stats
from wrappers.retry.reflection import Reflector
from wrappers.rollout import RolloutConfig

__all__ = ["BRIDGE_MODES", "BridgeModeProperties", "EnvRollout", "env_reward", "trl_fields"]

logger = logging.getLogger(__name__)

Mode = Literal["episodes", "reflect_retry"]


@dataclass(frozen=True)
class BridgeModeProperties:
    """How :class:`EnvRollout` builds a prompt's group in a mode.

    Attributes:
        reflect_retry: :class:`wrappers.ReflectRetry` builds it (a reflector is needed, ``num_generations`` even),
            else :class:`r3l_learn.loop.groups.PlainGroups` (independent episodes).
    """

    reflect_retry: bool = False


#: :class:`EnvRollout`'s ``mode`` values
BRIDGE_MODES = Choices("bridge mode", BridgeModeProperties)
BRIDGE_MODES.add("episodes", "num_generations independent episodes per task")
BRIDGE_MODES.add("reflect_retry", "R³L's reflect-retry groups, filled to num_generations", reflect_retry=True)


def trl_fields(traj: Trajectory, *, guided_logprobs: bool = False) -> dict[str, Any]:
    """One trajectory as TRL's ``rollout_func`` returns a completion.

    Returns ``prompt_ids`` (tokens before the first reply), ``completion_ids`` (the rest), ``env_mask`` (its
    ``loss_mask`` over the completion), ``logprobs`` (behaviour log-probs of the agent's tokens; NaN on tokens
    the agent did not generate, and on tokens generated under guidance unless ``guided_logprobs``) and
    ``r3l_reward``.
    """
    sequences = traj.sequences()
    if len(sequences) != 1:
        why = "has no reply" if not sequences else "has a windowed history (RolloutConfig.history)"
        raise ValueError(f"trajectory {traj.id} of {traj.task_id} {why}: TRL needs one full-history sequence each")
    (seq,) = sequences
    start = seq.agent_mask.index(1)
    logprobs = [
        lp if agent and (guided_logprobs or not guided) else math.nan
        for lp, agent, guided in zip(seq.behavior_logprobs, seq.agent_mask, seq.guided_mask)
    ]
    return {
        "prompt_ids": list(seq.token_ids[:start]),
        "completion_ids": list(seq.token_ids[start:]),
        "env_mask": list(seq.loss_mask[start:]),
        "logprobs": logprobs[start:],
        "r3l_reward": float(traj.reward),
    }


def env_reward(completions: list[Any], r3l_reward: list[float], log_metric: Any = None, **kwargs: Any) -> list[float]:
    """A TRL reward function: the env's episode reward that :class:`EnvRollout` returned for each completion.
    Also logs the success rate and the share of retries when TRL passes ``log_metric``."""
    if log_metric is not None and kwargs.get("r3l_won"):
        won, kinds = kwargs["r3l_won"], kwargs.get("r3l_kind") or []
        log_metric("r3l/success", sum(map(float, won)) / len(won))
        if kinds:
            log_metric("r3l/retries", sum(k == "retry" for k in kinds) / len(kinds))
    return [float(r) for r in r3l_reward]


class EnvRollout:
    """A ``rollout_func`` for ``GRPOTrainer`` that plays r3l env episodes (see the module docstring).

    Args:
        env_id: a registered env id; ``env_kwargs`` are its ``gym.make`` kwargs (the split comes from the
            dataset rows, see :meth:`dataset`).
        mode: a row of :data:`BRIDGE_MODES`: ``"episodes"`` (``num_generations`` independent episodes per task)
            or ``"reflect_retry"``.
        rollout: how episodes are played (turn limit, tokens per turn, constrained actions); its temperature
            and top-p are replaced by the trainer's.
        reflector: reflect-retry only: a :class:`wrappers.Reflector`, or the name of a reflector that reflects
            with the trained policy (:data:`r3l_learn.policies.reflectors.REFLECTORS`: ``"self"``, or
            ``"self-structured"``
            for its judgement as scored choices).
        retry: reflect-retry only: the wrapper's settings (group size and fill are set from the trainer).
        policy: who plays; default: the trainer's model with its tokenizer (:class:`r3l_learn.HFPolicy`).
        seed: seeds resets and sampling (call ``k`` uses a seed derived from it and ``k``); default: the
            trainer's ``args.seed``.
        guided_logprobs: return the guided behaviour log-probs of retry tokens instead of NaN (module docstring).
        on_groups: called with every batch of groups (to save them, or to train their auxiliary samples).
    """

    def __init__(
        self,
        env_id: str,
        *,
        env_kwargs: dict[str, Any] | None = None,
        mode: Mode = "episodes",
        rollout: RolloutConfig | None = None,
        reflector: Reflector | Literal["self", "self-structured"] | None = None,
        retry: ReflectRetryConfig | None = None,
        policy: Policy | None = None,
        seed: int | None = None,
        guided_logprobs: bool = False,
        on_groups: Callable[[list[TrajectoryGroup]], None] | None = None,
    ):
        if env_id not in gym.registry:
            raise ValueError(f"env {env_id!r} is not registered; import r3l_envs and use an r3l/* id")
        reflects = BRIDGE_MODES.spec(mode).reflect_retry
        if reflects and reflector is None:
            raise ValueError("mode='reflect_retry' needs a reflector: a wrappers.Reflector, or 'self'")
        if not reflects and (reflector is not None or retry is not None):
            raise ValueError("reflector and retry apply to mode='reflect_retry' only")
        if isinstance(reflector, str) and not (
            reflector in REFLECTORS and REFLECTORS.spec(reflector).properties.uses_policy
        ):
            named = [n for n in REFLECTORS.names() if REFLECTORS.spec(n).properties.uses_policy]
            raise ValueError(
                f"a reflector given by name reflects with the trained policy: one of {named}, got {reflector!r}"
            )
        rollout = rollout or RolloutConfig()
        if rollout.history is not None:
            raise ValueError("TRL trains one sequence per completion: use full histories (RolloutConfig.history=None)")
        self.env_id, self.env_kwargs, self.mode = env_id, dict(env_kwargs or {}), mode
        self.rollout, self.reflector, self.retry = rollout, reflector, retry or ReflectRetryConfig()
        self.policy, self.seed, self.guided_logprobs, self.on_groups = policy, seed, guided_logprobs, on_groups
        self._tasks: dict[str, tuple[str, str]] = {}  # prompt key -> (split, task id)
        self._builders: dict[tuple[str, int], GroupBuilder] = {}
        self._hf: Any = None  # the default policy over the trainer's model, made on the first call
        self._calls = 0
        #: :func:`wrappers.retry.reflect_retry.aggregate_stats` of the last call's groups.
        self.last_stats: dict[str, Any] = {}

    # ------------------------------------------------------------------ the dataset
    def dataset(
        self, split: str = "train", *, num_tasks: int | None = None, task_ids: Sequence[str] | None = None
    ) -> Any:
        """A ``datasets.Dataset`` with one row per task of ``split``: ``prompt`` (the opening chat), ``task_id``,
        ``split``. ``task_ids`` picks tasks; else the first ``num_tasks`` of the split (all by default).

        Tasks whose opening chat is identical to an earlier one's are left out (a warning says which): the
        rollout knows a task only by its prompt.
        """
        import datasets

        env = gym.make(self.env_id, **{**self.env_kwargs, "split": split})
        template = self.rollout.template or template_for(self.env_id)
        ids = list(task_ids) if task_ids is not None else list(itertools.islice(env.unwrapped.task_ids, num_tasks))
        rows = []
        try:
            for task in ids:
                observation, info = env.reset(options={"task_id": task})
                prompt = [
                    {"role": "system", "content": template.system()},
                    {
                        "role": "user",
                        "content": template.first_user(info["task"], observation, info["admissible_actions"]),
                    },
                ]
                key, here = _key(prompt), (split, info["task_id"])
                if self._tasks.get(key, here) != here:
                    logger.warning("task %s opens like %s: left out of the dataset", here, self._tasks[key])
                    continue
                self._tasks[key] = here
                rows.append({"prompt": prompt, "task_id": info["task_id"], "split": split})
        finally:
            env.close()
        if not rows:
            raise ValueError(f"no tasks for {self.env_id} split {split!r}: check num_tasks / task_ids")
        return datasets.Dataset.from_list(rows)

    # ------------------------------------------------------------------ the rollout
    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        """Play one group per run of ``num_generations`` identical prompts; TRL's ``rollout_func`` contract."""
        model = trainer.accelerator.unwrap_model(trainer.model)
        n = trainer.num_generations if trainer.model.training else trainer.num_generations_eval
        if getattr(trainer, "use_vllm", False) and self.policy is None:
            raise ValueError("EnvRollout generates with the trainer's model: set use_vllm=False, or pass a policy")
        if len(prompts) % n:
            raise ValueError(f"got {len(prompts)} prompts, not whole runs of num_generations={n}")
        if self._calls == 0 and self.policy is None:
            _warn_emulated_bf16(trainer, model)
        tasks = [self._task(prompts[i : i + n]) for i in range(0, len(prompts), n)]
        policy = self.policy or self._own_policy(trainer, model)
        groups: list[TrajectoryGroup | None] = [None] * len(tasks)
        seed = _mix(trainer.args.seed if self.seed is None else self.seed, self._calls)
        self._calls += 1
        with _eval_mode(model):
            for split in dict.fromkeys(s for s, _ in tasks):
                idx = [i for i, (s, _) in enumerate(tasks) if s == split]
                built = self._builder(split, n, policy, trainer).collect([tasks[i][1] for i in idx], seed=seed)
                for i, group in zip(idx, built, strict=True):
                    groups[i] = group
        done = [g for g in groups if g is not None]
        for group in done:
            if len(group.trajectories) != n:
                raise RuntimeError(f"group of {group.task_id} has {len(group.trajectories)} trajectories, not {n}")
        self.last_stats = aggregate_stats(done) if BRIDGE_MODES[self.mode].reflect_retry else {}
        if self.on_groups is not None:
            self.on_groups(done)
        return self._columns(done)

    def _columns(self, groups: list[TrajectoryGroup]) -> dict[str, list[Any]]:
        out: dict[str, list[Any]] = {}
        for traj in (t for g in groups for t in g.trajectories):
            row = trl_fields(traj, guided_logprobs=self.guided_logprobs)
            row.update(r3l_won=bool(traj.won), r3l_kind=traj.kind, r3l_task_id=traj.task_id)
            for key, value in row.items():
                out.setdefault(key, []).append(value)
        return out

    def _task(self, run: Sequence[Any]) -> tuple[str, str]:
        keys = {_key(p) for p in run}
        if len(keys) != 1:
            raise ValueError(
                "rollout_func got a run of num_generations prompts that differ: TRL should repeat each prompt "
                "num_generations times in a row"
            )
        key = keys.pop()
        if key not in self._tasks:
            raise KeyError("a prompt that EnvRollout.dataset() did not make: build train/eval datasets with it")
        return self._tasks[key]

    def _own_policy(self, trainer: Any, model: Any) -> Policy:
        if self._hf is None or self._hf.model is not model:
            from r3l_learn.policies.hf import HFPolicy

            with _eval_mode(model):  # HFPolicy puts the model in eval mode: the trainer's mode is restored
                self._hf = HFPolicy(model, trainer.processing_class, name="trl-policy")
        return self._hf

    def _builder(self, split: str, n: int, policy: Policy, trainer: Any) -> GroupBuilder:
        """The group builder of a split and group size (made once, with the trainer's sampling)."""
        key = (split, n)
        if key not in self._builders:
            sampling = replace(self.rollout.sampling, temperature=trainer.temperature, top_p=trainer.args.top_p)
            rollout = replace(self.rollout, sampling=sampling)
            env_kwargs = {**self.env_kwargs, "split": split}
            if not BRIDGE_MODES[self.mode].reflect_retry:
                self._builders[key] = PlainGroups(
                    self.env_id, policy, group_size=n, rollout=rollout, env_kwargs=env_kwargs
                )
            else:
                if n % 2:
                    raise ValueError(f"reflect-retry groups are N/2 bases + retries: num_generations={n} must be even")
                reflector = self.reflector
                if isinstance(reflector, str):
                    reflector = make_reflector(reflector, policy)
                config = replace(self.retry, group_size=n, rollout=rollout, fill=True)
                self._builders[key] = ReflectRetry(self.env_id, policy, reflector, config, env_kwargs=env_kwargs)
        return self._builders[key]

    def close(self) -> None:
        """Close the env instances the group builders made."""
        for builder in self._builders.values():
            builder.close()
        self._builders.clear()


def _warn_emulated_bf16(trainer: Any, model: Any) -> None:
    """Warn when the trainer autocasts to bf16 on a CPU that emulates it (the rollout generates in it too)."""
    from r3l_learn.policies.device import cpu_kind, native_dtype

    on_cpu = next(model.parameters()).device.type == "cpu"
    if on_cpu and getattr(trainer.args, "bf16", False) and native_dtype("cpu") != "bfloat16":
        logger.warning(
            "GRPOConfig(bf16=True) (TRL's default) on a CPU without native bf16 (%s): the rollout and the update "
            "run emulated bf16, many times slower than fp32; pass bf16=False",
            cpu_kind(),
        )


def _key(prompt: Sequence[Any]) -> str:
    return json.dumps([[m["role"], m["content"]] for m in prompt], ensure_ascii=True)


def _mix(seed: int, call: int) -> int:
    return int(np.random.SeedSequence([seed, call]).generate_state(1)[0])


@contextlib.contextmanager
def _eval_mode(model: Any) -> Iterator[None]:
    """Generation in eval mode (no dropout), the trainer's mode restored afterwards."""
    training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(training)
