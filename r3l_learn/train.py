"""The learner loop, top to bottom: config → collect groups → advantages → micro-batched loss → AdamW step →
(the rollout policy shares the weights) → periodic eval → logs and checkpoints.

Every algorithm in :mod:`r3l_learn.algorithms` runs through this one loop; they differ only in the group
builder, the advantage and the objective they name. ``r3l train`` is a thin CLI over :func:`train`.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import logging
import math
import signal
import statistics
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch

from r3l_learn.algorithms import ABLATIONS, ALGORITHMS, Algorithm, hyperparameter_help, resolve_algorithm
from r3l_learn.batch import Batch, rows_from_groups
from r3l_learn.checkpoints import (
    ResumeError,
    latest_checkpoint,
    load_checkpoint,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from r3l_learn.cli_args import env_id_problem, parse_kwargs
from r3l_learn.collect import Collector, make_collector
from r3l_learn.device import resolve_autocast
from r3l_learn.errors import R3LLearnError
from r3l_learn.evaluate import BACKENDS, EvalSummary, evaluate, load_policy
from r3l_learn.logprobs import sequence_logprobs
from r3l_learn.losses import AGGREGATIONS, KL_ESTIMATORS
from r3l_learn.metrics import MetricsLogger, plot_metrics, read_metrics, summary_lines
from r3l_learn.models import DEFAULT_MODEL
from r3l_learn.update import LossConfig, accumulate_gradients
from wrappers import RolloutConfig, SamplingParams, Trajectory, TrajectoryGroup
from wrappers.oracle import OracleReflector
from wrappers.reflect_retry import aggregate_stats
from wrappers.reflection import PolicyReflector, Reflector

__all__ = ["TrainConfig", "TrainingDivergedError", "TrainResult", "train"]

logger = logging.getLogger(__name__)

#: config fields that may change between a run and its resumption (everything else must match)
RESUMABLE_CHANGES = frozenset(
    {"steps", "eval_every", "eval_episodes", "eval_before", "progress", "checkpoint_every", "save_final"}
)


#: config fields that are shorthands for a hyperparameter of the same name (any other goes through ``hyper``)
HYPER_FLAGS = ("alpha", "clip", "eps")


class TrainingDivergedError(R3LLearnError):
    """Too many consecutive steps had a non-finite loss or gradient."""


def _f(default: Any, help: str, **argparse_kwargs: Any) -> Any:
    """A config field with its ``r3l train --help`` text (and any ``choices`` or ``aliases`` for the flag)."""
    return field(default=default, metadata={"help": help, **argparse_kwargs})


_PAPER = "the R³L paper, arXiv 2601.03715"


@dataclass
class TrainConfig:
    """Everything a training run depends on (saved in every checkpoint; ``r3l train --help`` lists it).

    Each field's help, choices and flag aliases live in its metadata, which ``r3l train`` turns into flags with
    ``transformers.HfArgumentParser``.
    """

    # what to train, on what
    env: str = _f("r3l/Countdown-v0", "a registered env id (`r3l envs` lists them)")
    env_kwargs: dict[str, Any] = field(
        default_factory=dict, metadata={"help": "gym.make kwargs for train and eval envs", "metavar": "KEY=VALUE"}
    )
    train_split: str = _f("train", "the split tasks are drawn from (in a seeded order, epoch after epoch)")
    eval_split: str = _f("test", "the held-out split of the periodic evals")
    model: str = _f(DEFAULT_MODEL, 'an embedded model name, a local HF folder, or "tiny-random"')
    algo: str = _f("r3l", "the learning algorithm (r3l_learn/algorithms.py)", choices=tuple(sorted(ALGORITHMS)))
    ablations: tuple[str, ...] = _f((), "r3l only: parts of R³L to switch off", choices=tuple(sorted(ABLATIONS)))
    reflector: str = _f(
        "self",
        'who reflects: "self" (the paper), "oracle" (privileged env knowledge), a model name/folder, or '
        '"openai:MODEL" (a model behind an OpenAI-compatible server, see --reflector-base-url)',
    )
    reflector_base_url: str | None = _f(
        None,
        "the server of an openai:MODEL reflector, e.g. http://127.0.0.1:8000/v1 (None: OpenAI's API; the "
        "key comes from R3L_OPENAI_API_KEY or OPENAI_API_KEY)",
    )
    # sampling budget: every algorithm samples group_size trajectories per task (r3l: N/2 bases + retries + fill)
    steps: int = _f(20, "optimiser steps; each collects --tasks-per-step groups")
    tasks_per_step: int = _f(4, "groups (tasks) per step; the paper uses 96")
    group_size: int = _f(8, "N, trajectories per task (the paper's 8); even for r3l")
    fill: bool = _f(True, "top r3l groups up to N with extra bases, so budgets are equal across algorithms")
    temperature: float = _f(1.0, f"sampling temperature of training rollouts ({_PAPER}: 1.0)")
    max_new_tokens: int = _f(256, "new tokens per agent turn")
    max_turns: int | None = _f(None, "turns per episode; None: the env's own limit")
    actions: Literal["free", "constrained"] = _f(
        "free", "free text, or constrained: choose among the env's admissible actions by likelihood"
    )
    # objective
    alpha: float | None = _f(
        None, f"positive amplification α; the authors' sweep found 1-5 similar (None: {hyperparameter_help('alpha')})"
    )
    aux_weight: float | None = _f(None, f"λ of the auxiliary SFT term; None: α ({_PAPER})")
    kl_coef: float | None = _f(None, "KL coefficient; None: the algorithm's default (0 for r3l, 0.001 for grpo)")
    kl_estimator: str = _f("k3", "KL estimator (r3l_learn.losses.kl_penalty)", choices=KL_ESTIMATORS)
    clip: float | None = _f(None, f"ppo_clip's ε, the ratio kept in [1-ε, 1+ε] (None: {hyperparameter_help('clip')})")
    eps: float | None = _f(
        None, f"grpo's ε in (r - mean)/(std + ε), >= 0; equal rewards get 0 (None: {hyperparameter_help('eps')})"
    )
    hyper: dict[str, Any] = field(
        default_factory=dict,
        metadata={
            "help": "any hyperparameter the algorithm's advantage or objective declares, e.g. threshold=0.5 for "
            "raft (r3l_learn/advantages.py, losses.py); --alpha, --clip and --eps are shorthands",
            "metavar": "NAME=VALUE",
        },
    )
    aggregation: str = _f("token_mean", f"loss aggregation ({_PAPER}: token mean)", choices=AGGREGATIONS)
    # optimiser: small models on CPU need a far higher lr than the paper's 1e-6 for 1.5B models
    lr: float = _f(1e-5, "AdamW learning rate (the paper's 1e-6 is for 1.5B models; small CPU models need more)")
    weight_decay: float = _f(0.01, "AdamW weight decay, as the paper")
    grad_clip: float = _f(1.0, "max global gradient norm")
    micro_batch_size: int = _f(4, "rows per forward/backward; the loss is independent of it")
    # efficiency
    device: str = _f("cpu", '"cpu" or "cuda[:i]"')
    rollout_backend: str = _f(
        "hf", "hf: rollouts share the trained model; vllm: a vLLM engine gets each update", choices=BACKENDS
    )
    dtype: Literal["float32", "bfloat16", "auto"] = _f(
        "float32", "weights (fp32 master weights train best; compute precision is --autocast); auto: bf16 where native"
    )
    autocast: Literal["auto", "off", "bf16"] = _f(
        "auto", "bf16 autocast for training and rollouts; auto: bf16 only where the device computes it natively"
    )
    gradient_checkpointing: bool = _f(False, "recompute activations in the backward pass (less memory)")
    lora_rank: int = _f(0, "> 0: train LoRA adapters of this rank instead of every weight (needs peft)")
    lora_alpha: float = _f(16.0, "LoRA scaling numerator")
    logprob_chunk: int = _f(1024, "LM-head positions per chunk")
    # evaluation (held-out split, fixed temperature)
    eval_every: int = _f(10, "steps between evals; 0: only before and after training")
    eval_episodes: int = _f(16, "held-out episodes per eval (the same ones each time); 0: no evals")
    eval_temperature: float = _f(0.4, f"sampling temperature of evals ({_PAPER}: 0.4)")
    eval_before: bool = _f(True, "evaluate the initial model (off: a sweep that evaluated it once for all its runs)")
    eval_batch_size: int = _f(8, "eval episodes played together")
    # the run
    out_dir: str = _f("runs/r3l", "metrics, checkpoints, plots, summary and the final model go here", aliases=["--out"])
    seed: int = _f(0, "seeds task order, sampling and the initial weights of tiny-random")
    checkpoint_every: int = _f(10, "steps between checkpoints; 0: only at the end and on Ctrl-C")
    keep_checkpoints: int = _f(2, "newest checkpoints kept on disk")
    max_bad_steps: int = _f(3, "consecutive non-finite steps before giving up")
    save_final: bool = _f(True, "write the trained model (or adapters) to out_dir/final")
    tensorboard: bool = _f(True, "also log to out_dir/tensorboard (needs the tensorboard package)")
    progress: bool = _f(True, "a progress bar with live reward and success")

    def __post_init__(self) -> None:
        self.ablations = tuple(self.ablations)
        problems = []
        env_problem = env_id_problem(self.env)
        if env_problem:
            problems.append(env_problem)
        if self.algo not in ALGORITHMS:
            problems.append(f"algo must be one of {sorted(ALGORITHMS)}, got {self.algo!r}")
        if self.ablations and self.algo != "r3l":
            problems.append("ablations apply to --algo r3l only")
        unknown = [a for a in self.ablations if a not in ABLATIONS]
        if unknown:
            problems.append(f"unknown ablations {unknown}; choose among {sorted(ABLATIONS)}")
        if self.group_size < 2 or (self.algo == "r3l" and self.group_size % 2):
            problems.append(f"group_size must be >= 2 and even for r3l (N/2 bases + retries), got {self.group_size}")
        for name in ("steps", "tasks_per_step", "micro_batch_size", "max_new_tokens", "eval_batch_size"):
            if getattr(self, name) < 1:
                problems.append(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("eval_every", "eval_episodes", "checkpoint_every", "lora_rank", "keep_checkpoints"):
            if getattr(self, name) < 0:
                problems.append(f"{name} must be >= 0, got {getattr(self, name)}")
        if not self.lr > 0:
            problems.append(f"lr must be > 0, got {self.lr}")
        if self.actions not in ("free", "constrained"):
            problems.append(f"actions must be 'free' or 'constrained', got {self.actions!r}")
        if self.rollout_backend not in BACKENDS:
            problems.append(f"rollout_backend must be one of {BACKENDS}, got {self.rollout_backend!r}")
        if self.rollout_backend == "vllm" and self.lora_rank:
            # the engine receives full state dicts; LoRA adapters would have to be merged first (not done)
            problems.append("rollout_backend='vllm' needs full fine-tuning (no --lora-rank): adapters are not merged")
        if self.autocast not in ("auto", "off", "bf16"):
            problems.append(f"autocast must be 'auto', 'off' or 'bf16', got {self.autocast!r}")
        if self.dtype not in ("float32", "bfloat16", "auto"):
            problems.append(f"dtype must be 'float32', 'bfloat16' or 'auto', got {self.dtype!r}")
        if self.aggregation not in AGGREGATIONS:
            problems.append(f"aggregation must be one of {AGGREGATIONS}, got {self.aggregation!r}")
        if self.kl_estimator not in KL_ESTIMATORS:
            problems.append(f"kl_estimator must be one of {KL_ESTIMATORS}, got {self.kl_estimator!r}")
        if self.max_bad_steps < 1:
            problems.append(f"max_bad_steps must be >= 1, got {self.max_bad_steps}")
        self.hyper = parse_kwargs(self.hyper)  # the CLI hands over NAME=VALUE pairs
        if not problems:
            try:
                self.hyper_values()
            except ValueError as exc:
                problems.append(str(exc))
        if problems:
            raise ValueError("invalid TrainConfig:\n  - " + "\n  - ".join(problems))

    def hyper_values(self) -> dict[str, Any]:
        """The algorithm's hyperparameters for this run: the registered defaults, overridden by ``--alpha``,
        ``--clip`` and ``--eps`` where the algorithm has them, then by ``--hyper``."""
        declared = self.algorithm.hyperparameters
        named = {n: getattr(self, n) for n in HYPER_FLAGS if getattr(self, n) is not None}
        for name in sorted(set(named) - set(declared)):
            logger.warning("--%s is not a hyperparameter of %s: ignored", name, self.algorithm.name)
        both = sorted(set(named) & set(self.hyper))
        if both:
            raise ValueError(f"{both} given both as a flag and in --hyper: give each once")
        return self.algorithm.resolve_hyper({**{k: v for k, v in named.items() if k in declared}, **self.hyper})

    @property
    def algorithm(self) -> Algorithm:
        return resolve_algorithm(self.algo, self.ablations)

    def to_dict(self) -> dict[str, Any]:
        return json.loads(json.dumps(asdict(self)))


@dataclass
class TrainResult:
    """What :func:`train` returns: the evals before and after, the last step's metrics, and where files went."""

    steps_done: int
    eval_before: EvalSummary | None
    eval_after: EvalSummary | None
    last_metrics: dict[str, Any]
    out_dir: Path
    interrupted: bool = False
    already_finished: bool = False  # a --resume of a run that had done all its steps: nothing was run again


# ---------------------------------------------------------------------------------------------- the data
class TaskStream:
    """Train task ids in a seeded random order, epoch after epoch; its state is one integer (the cursor)."""

    def __init__(self, task_ids: Any, seed: int, cursor: int = 0):
        if len(task_ids) == 0:
            raise ValueError("the train split has no tasks")
        self.task_ids, self.seed, self.cursor = task_ids, seed, cursor
        self._epoch, self._order = -1, np.arange(0)

    def take(self, k: int) -> list[str]:
        out = []
        for _ in range(k):
            epoch, pos = divmod(self.cursor, len(self.task_ids))
            if epoch != self._epoch:
                rng = np.random.default_rng([self.seed, epoch])
                self._epoch, self._order = epoch, rng.permutation(len(self.task_ids))
            out.append(self.task_ids[int(self._order[pos])])
            self.cursor += 1
        return out


# ---------------------------------------------------------------------------------------------- Ctrl-C
class _Interrupts:
    """SIGINT handling: outside a critical section Ctrl-C raises at once (nothing is half-done); inside one
    (the optimiser update) it is deferred to the section's end, so weights are never left half-updated. A second
    Ctrl-C inside a section aborts at once."""

    def __init__(self) -> None:
        self._critical = False
        self._pending = False
        self._previous: Any = None

    def __enter__(self) -> _Interrupts:
        with contextlib.suppress(ValueError):  # not the main thread: leave signals alone
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)

    def _handle(self, signum: int, frame: Any) -> None:
        if self._critical and not self._pending:
            self._pending = True
            logger.warning("Ctrl-C: finishing this update, then saving a checkpoint (press again to abort now)")
            return
        raise KeyboardInterrupt

    @contextlib.contextmanager
    def critical(self) -> Iterator[None]:
        self._critical = True
        try:
            yield
        finally:
            self._critical = False
        if self._pending:
            raise KeyboardInterrupt


# ---------------------------------------------------------------------------------------------- set-up
def _load_policy(config: TrainConfig) -> Any:
    policy = load_policy(config.model, dtype=config.dtype, device=config.device, seed=config.seed)
    if config.lora_rank:
        try:
            from peft import LoraConfig, get_peft_model
        except ImportError as exc:
            raise ImportError("lora_rank > 0 needs peft: pip install peft") from exc
        lora = LoraConfig(
            r=config.lora_rank, lora_alpha=config.lora_alpha, target_modules="all-linear", task_type="CAUSAL_LM"
        )
        policy.model = get_peft_model(policy.model, lora)
    if config.gradient_checkpointing:
        policy.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if config.lora_rank:
            policy.model.enable_input_require_grads()
    return policy


def _rollout_policy(config: TrainConfig, policy: Any) -> Any:
    """Who plays the episodes: the trained policy itself, or a vLLM engine that receives every update."""
    if config.rollout_backend == "hf":
        return policy
    from r3l_learn.vllm_policy import shared_engine

    # The engine computes in the learner's dtype, so its sampled log-probs are the learner's old log-probs.
    bf16 = policy.autocast == torch.bfloat16 or policy.model.dtype == torch.bfloat16
    dtype = "bfloat16" if bf16 else "float32"
    extra = {"gpu_memory_utilization": 0.4} if config.device.startswith("cuda") else {}
    engine = shared_engine(config.model, dtype=dtype, device=config.device, seed=config.seed, **extra)
    engine.update_weights(policy.model.state_dict())  # start from the trained model's weights (resume)
    logger.info("rollouts on vLLM: engine start %.1f s", engine.start_seconds)
    return engine


def _reflector(config: TrainConfig, policy: Any) -> Reflector | None:
    if not config.algorithm.reflect_retry:
        return None
    if config.reflector == "oracle":
        return OracleReflector()
    if config.reflector == "self":
        return PolicyReflector(policy)
    if config.reflector.startswith("openai:"):
        from r3l_learn.openai_policy import OpenAIReflector

        return OpenAIReflector(config.reflector.removeprefix("openai:"), base_url=config.reflector_base_url)
    if config.reflector_base_url is not None:
        raise ValueError("reflector_base_url applies to an openai:MODEL reflector only")
    return PolicyReflector(load_policy(config.reflector, device=config.device, seed=config.seed))


def _ref_fn(config: TrainConfig, model: Any, needed: bool) -> Any:
    """Log-probs of the initial policy (KL reference): the adapters switched off for LoRA, else a frozen copy."""
    if not needed:
        return None
    ref = model if config.lora_rank else copy.deepcopy(model).eval().requires_grad_(False)

    @torch.no_grad()
    def ref_logprobs(batch: Batch) -> torch.Tensor:
        with model.disable_adapter() if config.lora_rank else contextlib.nullcontext():
            return sequence_logprobs(ref, batch.input_ids, batch.attention_mask, positions=batch.loss_mask > 0)

    return ref_logprobs


def _rollout_config(config: TrainConfig, temperature: float) -> RolloutConfig:
    sampling = SamplingParams(temperature=temperature, max_new_tokens=config.max_new_tokens)
    return RolloutConfig(sampling=sampling, max_turns=config.max_turns, constrained=config.actions == "constrained")


def _trainable_state(model: Any) -> dict[str, torch.Tensor]:
    """Views of the trainable weights (no copy: a checkpoint serialises them at once)."""
    return {n: p.detach() for n, p in model.named_parameters() if p.requires_grad}


def _load_trainable_state(model: Any, state: dict[str, torch.Tensor]) -> None:
    params = dict(model.named_parameters())
    missing = [n for n, p in params.items() if p.requires_grad and n not in state]
    if missing:
        raise ResumeError(f"the checkpoint lacks {len(missing)} trainable weights (e.g. {missing[0]}): another model?")
    with torch.no_grad():
        for name, value in state.items():
            params[name].copy_(value)


# ---------------------------------------------------------------------------------------------- metrics
def _is_math(env_id: str) -> bool:
    from r3l_envs import env_info  # what the env declares (its contract), not what its name suggests

    return env_info(env_id).is_math


def _eval(config: TrainConfig, policy: Any, step: int, log: MetricsLogger) -> EvalSummary:
    summary, trajs = evaluate(
        config.env,
        policy,
        episodes=config.eval_episodes,
        split=config.eval_split,
        config=_rollout_config(config, config.eval_temperature),
        batch_size=config.eval_batch_size,
        seed=10_000 + config.seed,  # the same held-out episodes at every eval
        env_kwargs=config.env_kwargs,
        progress=False,
    )
    metrics = {"eval/success_rate": summary.success_rate, "eval/mean_score": summary.mean_score}
    metrics["eval/mean_reward"] = summary.mean_reward
    if _is_math(config.env):  # pass@1 is the first attempt; success_rate is "solved within k attempts"
        metrics["eval/first_attempt_success"] = statistics.fmean(_first_attempt_won(t) for t in trajs)
    log.log(step, metrics)
    return summary


def _first_attempt_won(traj: Trajectory) -> float:
    return float(bool(traj.turns) and bool(traj.turns[0].info.get("won", False)))


def _step_metrics(
    groups: list[TrajectoryGroup], algo: Algorithm, upd: Any, grad_norm: float, ok: bool, times: tuple[float, ...]
) -> dict[str, Any]:
    """What one step logs: the groups' rewards and retry statistics, the loss parts, and where the time went."""
    trajs = [t for g in groups for t in g.trajectories]
    bases = [t for t in trajs if t.kind == "base"]
    start, collected, updated = times
    # a retry's turns before its pivot are the base's, reused: they cost no generation
    generated = sum(len(turn.token_ids) for t in trajs for turn in t.turns[t.pivot or 0 :])
    out: dict[str, Any] = {
        "train/reward": statistics.fmean(t.reward for t in trajs),
        "train/success": statistics.fmean(t.won for t in trajs),
        "train/base_success": statistics.fmean(t.won for t in bases) if bases else None,
        "train/trajectories": len(trajs),
        "train/aux_samples": sum(len(g.samples) for g in groups),
        "train/target_tokens": upd.target_tokens,
        "loss/total": upd.loss if ok else None,
        "loss/policy": upd.policy_loss if ok else None,
        "loss/aux": upd.aux_loss if ok else None,
        "loss/kl": upd.kl if ok else None,
        "grad_norm": grad_norm if math.isfinite(grad_norm) else None,
        "skipped": not ok,
        "speed/generated_tokens": generated,
        "speed/collect_s": collected - start,
        "speed/update_s": updated - collected,
        "speed/generated_tokens_per_s": generated / max(collected - start, 1e-9),
        "speed/train_tokens_per_s": upd.tokens / max(updated - collected, 1e-9),
    }
    if algo.reflect_retry:
        stats = aggregate_stats(groups)
        rates = ("parse_rate", "retry_success_rate", "beat_base_rate", "mean_pivot")
        costs = ("token_cost_vs_scratch", "step_cost_vs_scratch")
        counts = ("retries", "retries_beat_base", "retry_tokens", "scratch_tokens")
        counts += ("retry_env_steps", "scratch_env_steps")
        for key in (*rates, *costs):
            out[f"retry/{key}"] = stats.get(key)
        for key in counts:  # sums, so that a run's ratios can be taken over all its steps
            out[f"retry/{key}"] = stats.get(key, 0)
    return out


# ---------------------------------------------------------------------------------------------- the loop
def train(config: TrainConfig, *, resume: bool = False) -> TrainResult:
    """Run ``config``; with ``resume``, continue from the newest checkpoint in ``config.out_dir``."""
    out = Path(config.out_dir)
    algo = config.algorithm
    kl_coef = algo.kl_coef if config.kl_coef is None else config.kl_coef
    hyper = config.hyper_values()
    aux_weight = algo.aux_weight_value(hyper) if config.aux_weight is None else config.aux_weight
    loss_config = LossConfig(
        objective=algo.objective,
        objective_kwargs=algo.objective_kwargs(hyper),
        aggregation=config.aggregation,
        aux_weight=aux_weight if algo.aux_samples else 0.0,
        kl_coef=kl_coef,
        kl_estimator=config.kl_estimator,
        chunk_size=config.logprob_chunk,
    )
    autocast = torch.bfloat16 if resolve_autocast(config.autocast, config.device) == "bf16" else None

    torch.manual_seed(config.seed)
    policy = _load_policy(config)
    policy.autocast = autocast  # rollouts, evals and self-reflection compute like the training forward pass
    model = policy.model
    optimizer = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad], lr=config.lr, weight_decay=config.weight_decay
    )
    ref_fn = _ref_fn(config, model, loss_config.needs_reference)
    train_env = gym.make(config.env, split=config.train_split, **config.env_kwargs)
    stream = TaskStream(train_env.unwrapped.task_ids, config.seed)
    train_env.close()

    start, eval_before = 0, None
    if resume:
        start, eval_before = _resume(config, model, optimizer, stream)
        if start >= config.steps:
            return _already_finished(config, start, eval_before)
    elif (out / "checkpoints").is_dir() and latest_checkpoint(out / "checkpoints"):
        raise ResumeError(f"{out} already holds checkpoints: pass --resume to continue, or choose another --out-dir")
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config.to_dict(), indent=2) + "\n")
    log = MetricsLogger(out, tensorboard=config.tensorboard)
    rollout = _rollout_config(config, config.temperature)
    player = _rollout_policy(config, policy)
    collector: Collector = make_collector(
        config.env,
        player,
        reflect_retry=algo.reflect_retry,
        group_size=config.group_size,
        rollout=rollout,
        reflector=_reflector(config, player),
        pivotal_credit=algo.pivotal_credit,
        restart=algo.restart,
        aux_samples=algo.aux_samples,
        fill=config.fill,
        env_kwargs={"split": config.train_split, **config.env_kwargs},
    )
    logger.info("training %s with %s on %s (%s), out_dir %s", config.model, algo.name, config.env, algo, out)

    completed, cursor_done = start, stream.cursor  # the last finished step, and the data cursor after it
    bad_steps, metrics, interrupted = 0, {}, False

    def save() -> None:
        state = {
            "step": completed,
            "cursor": cursor_done,
            "config": config.to_dict(),
            "model": _trainable_state(model),
            "optimizer": optimizer.state_dict(),
            "rng": rng_state(),
            "eval_before": asdict(eval_before) if eval_before else None,
        }
        save_checkpoint(out / "checkpoints", completed, state, keep=config.keep_checkpoints)

    from tqdm import tqdm

    bar = tqdm(total=config.steps, initial=start, desc=f"{algo.name} {config.env}", disable=not config.progress)
    try:
        with _Interrupts() as interrupts:
            if start == 0 and config.eval_episodes and config.eval_before:
                eval_before = _eval(config, player, 0, log)
            for step in range(start, config.steps):
                t0 = time.perf_counter()
                model.eval()
                groups = collector.collect(stream.take(config.tasks_per_step), seed=config.seed * 100_003 + step)
                t1 = time.perf_counter()
                rows = rows_from_groups(groups, algo, hyper=hyper)
                with interrupts.critical():  # a Ctrl-C here waits until the step is applied and logged
                    model.train()
                    optimizer.zero_grad(set_to_none=True)
                    upd = accumulate_gradients(
                        model,
                        rows,
                        loss_config,
                        micro_batch_size=config.micro_batch_size,
                        pad_id=policy.pad_token_id,
                        ref_fn=ref_fn,
                        autocast=autocast,
                    )
                    grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip))
                    ok = upd.finite and math.isfinite(grad_norm)
                    if ok:
                        optimizer.step()
                        if player is not policy:
                            player.update_weights(model.state_dict())
                    optimizer.zero_grad(set_to_none=True)
                    model.eval()
                    completed, cursor_done = step + 1, stream.cursor
                    metrics = _step_metrics(groups, algo, upd, grad_norm, ok, (t0, t1, time.perf_counter()))
                    log.log(completed, metrics)
                bad_steps = 0 if ok else bad_steps + 1
                if not ok:
                    logger.warning("step %d: non-finite loss or gradient; the update was skipped", completed)
                    if bad_steps >= config.max_bad_steps:
                        raise TrainingDivergedError(
                            f"{bad_steps} consecutive steps had a non-finite loss or gradient; lower --lr, or "
                            f"resume from the last checkpoint in {out / 'checkpoints'}"
                        )
                bar.update(1)
                bar.set_postfix(reward=f"{metrics['train/reward']:.2f}", success=f"{metrics['train/success']:.2f}")
                if config.checkpoint_every and completed % config.checkpoint_every == 0:
                    save()
                periodic = config.eval_every and completed % config.eval_every == 0 and completed < config.steps
                if periodic and config.eval_episodes:
                    _eval(config, player, completed, log)
    except KeyboardInterrupt:
        interrupted = True
        logger.warning("interrupted: saving a checkpoint of the last completed step (%d)", completed)
    finally:
        bar.close()
        collector.close()
    save()
    if interrupted:
        log.close()
        return TrainResult(completed, eval_before, None, metrics, out, interrupted=True)
    eval_after = _eval(config, player, config.steps, log) if config.eval_episodes else None
    log.close()
    if config.save_final:
        policy.model.save_pretrained(out / "final")
        policy.tokenizer.save_pretrained(out / "final")
    _report(out, eval_before, eval_after)
    return TrainResult(config.steps, eval_before, eval_after, metrics, out)


def _resume(config: TrainConfig, model: Any, optimizer: Any, stream: TaskStream) -> tuple[int, EvalSummary | None]:
    out = Path(config.out_dir)
    path = latest_checkpoint(out / "checkpoints")
    if path is None:
        raise ResumeError(f"--resume: no checkpoint in {out / 'checkpoints'}; start without --resume")
    state = load_checkpoint(path)
    saved, now = state["config"], config.to_dict()
    changed = sorted(k for k in now if k not in RESUMABLE_CHANGES and saved.get(k) != now[k])
    if changed:
        raise ResumeError(
            f"{path} was made with a different configuration ({', '.join(changed)}); resume with the same settings "
            f"(only {sorted(RESUMABLE_CHANGES)} may change) or start a new --out-dir"
        )
    _load_trainable_state(model, state["model"])
    optimizer.load_state_dict(state["optimizer"])
    set_rng_state(state["rng"])
    stream.cursor = state["cursor"]
    step = state["step"]
    metrics_path = out / "metrics.jsonl"
    if metrics_path.is_file():  # drop what the interrupted run logged after its checkpoint
        kept = [r for r in read_metrics(metrics_path) if r["step"] <= step]
        metrics_path.write_text("".join(json.dumps(r) + "\n" for r in kept), encoding="utf-8")
    logger.info("resumed from %s at step %d", path, step)
    before = state.get("eval_before")
    return step, EvalSummary(**before) if before else None


def _already_finished(config: TrainConfig, step: int, before: EvalSummary | None) -> TrainResult:
    """A resumed run whose checkpoint is at (or past) ``config.steps``: say so, and reuse the recorded final eval
    instead of running it again (raise ``--steps`` to train further)."""
    out = Path(config.out_dir)
    recorded = out / _EVALS
    after = None
    if recorded.is_file():
        data = json.loads(recorded.read_text(encoding="utf-8"))
        after = EvalSummary(**data["after"]) if data.get("after") else None
        before = EvalSummary(**data["before"]) if data.get("before") else before
    logger.warning(
        "%s already finished (checkpoint at step %d of %d): nothing to train, and the final eval is %s; "
        "raise --steps to train further",
        out,
        step,
        config.steps,
        "the recorded one, not redone" if after else "not redone (none was recorded)",
    )
    return TrainResult(step, before, after, {}, out, already_finished=True)


#: the evals before and after training, as JSON, in the run directory (read back by a resume of a finished run)
_EVALS = "evals.json"


def _report(out: Path, before: EvalSummary | None, after: EvalSummary | None) -> None:
    """The end-of-run summary: a table of the main curves, PNG plots, and eval before → after."""
    evals = {"before": asdict(before) if before else None, "after": asdict(after) if after else None}
    (out / _EVALS).write_text(json.dumps(evals, indent=2) + "\n", encoding="utf-8")
    records = read_metrics(out / "metrics.jsonl")
    keys = [
        "train/reward",
        "train/success",
        "retry/beat_base_rate",
        "retry/retry_success_rate",
        "loss/total",
        "speed/train_tokens_per_s",
        "eval/success_rate",
        "eval/first_attempt_success",
    ]
    lines = summary_lines(records, keys)
    plots = plot_metrics(records, out / "plots")
    text = "\n".join(lines)
    if before and after:
        text += (
            f"\neval on {after.env_id} [{after.split}], {after.episodes} episodes: success "
            f"{before.success_rate:.3f} -> {after.success_rate:.3f}, score {before.mean_score:.3f} -> "
            f"{after.mean_score:.3f}"
        )
    (out / "summary.txt").write_text(text + "\n", encoding="utf-8")
    logger.info("summary:\n%s\nplots: %s", text, ", ".join(str(p) for p in plots))


def config_from_dict(data: dict[str, Any]) -> TrainConfig:
    """A :class:`TrainConfig` from a dict (e.g. a run's ``config.json``); unknown keys are an error."""
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ValueError(f"unknown TrainConfig fields {unknown}; known: {sorted(names)}")
    return TrainConfig(**data)
