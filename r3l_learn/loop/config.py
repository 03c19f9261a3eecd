"""The configuration of a training run: :class:`TrainConfig`, one flat dataclass with a help line per field.

It is validated once, in :meth:`TrainConfig.__post_init__`: each choice by the registry that owns it (the choices
and help of its flag come from there too), and every problem found is listed in one error.

It is saved in every checkpoint (a resume checks it against the saved one: only :data:`RESUMABLE_CHANGES` may
differ) and ``r3l train`` turns its fields into flags. :func:`r3l_learn.loop.train.train` runs it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from r3l_learn.algorithms.catalog import ABLATIONS, ALGORITHMS, Algorithm, hyperparameter_help, resolve_algorithm
from r3l_learn.algorithms.logprobs import MIN_SHARED_PREFIX
from r3l_learn.algorithms.losses import AGGREGATIONS, AUX_MEANS, KL_ESTIMATORS
from r3l_learn.algorithms.registry import Choices
from r3l_learn.cli.args import env_id_problem, parse_kwargs
from r3l_learn.loop.groups import expert_demos_problem
from r3l_learn.policies.backends import ROLLOUT_BACKENDS
from r3l_learn.policies.models import DEFAULT_MODEL
from r3l_learn.policies.reflectors import REFLECTORS, parse_reflector, reflector_help, reflector_problem

__all__ = ["FORMER_BEHAVIOUR", "HYPER_FLAGS", "RESUMABLE_CHANGES", "TrainConfig", "config_from_dict"]

logger = logging.getLogger(__name__)

#: config fields that may change between a run and its resumption (everything else must match)
RESUMABLE_CHANGES = frozenset(
    {"steps", "eval_every", "eval_episodes", "eval_before", "progress", "checkpoint_every", "save_final"}
    | {"prompt_cache_mb", "micro_batch_size", "shared_prefix_min", "shared_prefix_tree"}  # speed and memory only
    | {"ray", "ray_workers", "ray_cpus", "ray_memory_mb"}  # where envs run never changes what they return
    | {"measure_amplification"}  # a measurement beside the step, whose weights it leaves bit-identical
)

#: fields added with a default that differs from what runs saved before them did: the value those runs ran with
#: (a saved config without the field is read with it, so resuming such a run at the new default is refused)
FORMER_BEHAVIOUR: dict[str, Any] = {
    "aux_mean": "separate",
    "aux_reflection": "always",
    "shared_prefix_min": 0,
    "shared_prefix_tree": False,
}


@dataclass(frozen=True)
class ActionModeProperties:
    """The ``RolloutConfig`` flags of an action mode (how the agent's replies are made)."""

    constrained: bool = False
    direct: bool = False


#: how the agent's replies are made (``TrainConfig.actions``, ``r3l eval --actions``)
ACTION_MODES = Choices("action mode", ActionModeProperties)
ACTION_MODES.add("free", "free text")
ACTION_MODES.add("constrained", "choose among the env's admissible actions by likelihood", constrained=True)
ACTION_MODES.add("direct", "the reply opens with the action tag and the policy writes the action alone", direct=True)
ACTIONS_HELP = ACTION_MODES.describe()


def action_flags(actions: str) -> dict[str, bool]:
    """The ``RolloutConfig`` fields of an action mode (a row of :data:`ACTION_MODES`).

    Raises:
        UnknownChoiceError: an unknown mode (a ``ValueError``; the message lists the known ones).
    """
    return dataclasses.asdict(ACTION_MODES.spec(actions))


@dataclass(frozen=True)
class AuxReflectionProperties:
    """Which reflection samples the aux term trains.

    Attributes:
        trains: they train (where :attr:`only_self` allows).
        only_self: only when the policy is its own reflector (``self`` or ``self-structured``; the paper's setting).
    """

    trains: bool = False
    only_self: bool = False


#: which auxiliary reflection samples train (``TrainConfig.aux_reflection``)
AUX_REFLECTIONS = Choices("aux reflection", AuxReflectionProperties)
AUX_REFLECTIONS.add(
    "always", "also another reflector's (the oracle's), which distils its diagnoses into the policy", trains=True
)
AUX_REFLECTIONS.add(
    "when_self",
    "only when the policy reflects itself (the paper's setting), since only then does the run use the skill",
    trains=True,
    only_self=True,
)
AUX_REFLECTIONS.add("never", "none")


#: config fields that are shorthands for a hyperparameter of the same name (any other goes through ``hyper``)
HYPER_FLAGS = ("alpha", "clip", "eps")


#: config fields whose value is a row of a registry, which validates it
CHOICES = {
    "actions": ACTION_MODES,
    "aggregation": AGGREGATIONS,
    "aux_mean": AUX_MEANS,
    "aux_reflection": AUX_REFLECTIONS,
    "kl_estimator": KL_ESTIMATORS,
}


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
    algo: str = _f("r3l", "the learning algorithm (r3l_learn/algorithms/catalog.py)", choices=tuple(sorted(ALGORITHMS)))
    ablations: tuple[str, ...] = _f((), "parts of reflect-retry (R³L) to switch off", choices=tuple(sorted(ABLATIONS)))
    reflector: str = _f("self", f"who reflects with reflect-retry: {reflector_help()}")
    reflector_base_url: str | None = _f(
        None,
        "the server of an openai:MODEL reflector, e.g. http://127.0.0.1:8000/v1 (None: OpenAI's API; the "
        "key comes from R3L_OPENAI_API_KEY or OPENAI_API_KEY)",
    )
    # sampling budget: every algorithm samples group_size trajectories per task (r3l: N/2 bases + retries + fill)
    steps: int = _f(20, "optimiser steps; each collects --tasks-per-step groups")
    tasks_per_step: int = _f(4, "groups (tasks) per step; the paper uses 96")
    group_size: int = _f(8, "N, trajectories per task (the paper's 8); even for reflect-retry")
    fill: bool = _f(True, "top r3l groups up to N with extra bases, so budgets are equal across algorithms")
    expert_demos: int = _f(
        0,
        "privileged control for the oracle reflector: per group, this many of the N trajectories play the env's "
        "expert plan as the agent (kind 'expert'), the rest are policy rollouts; plain-group algorithms only",
    )
    dynamic_sampling: bool = _f(
        False,
        "DAPO's dynamic sampling: drop the step's groups without contrast (whose rows would train nothing) and "
        "collect groups for the stream's next tasks until --tasks-per-step groups have contrast or "
        "--dynamic-sampling-max-rounds is reached; logs the extra cost (collect/...)",
    )
    dynamic_sampling_max_rounds: int = _f(
        3, "with --dynamic-sampling: collection rounds per step at most, the first included (>= 1)"
    )
    temperature: float = _f(1.0, f"sampling temperature of training rollouts ({_PAPER}: 1.0)")
    max_new_tokens: int = _f(256, "new tokens per agent turn")
    max_turns: int | None = _f(None, "turns per episode; None: the env's own limit")
    actions: Literal["free", "constrained", "direct"] = _f("free", ACTIONS_HELP, choices=ACTION_MODES.names())
    # objective
    alpha: float | None = _f(
        None, f"positive amplification α; the authors' sweep found 1-5 similar (None: {hyperparameter_help('alpha')})"
    )
    aux_weight: float | None = _f(None, f"λ of the auxiliary SFT term; None: α ({_PAPER})")
    aux_mean: str = _f(
        "shared",
        f"how the aux rows are weighed (r3l_learn.algorithms.update): {AUX_MEANS.describe()}",
        choices=AUX_MEANS.names(),
    )
    aux_reflection: str = _f(
        "when_self",
        "which reflection samples the aux term trains (the guided-retry samples always do): "
        f"{AUX_REFLECTIONS.describe()}",
        choices=AUX_REFLECTIONS.names(),
    )
    kl_coef: float | None = _f(None, "KL coefficient; None: the algorithm's default (0 for r3l, 0.001 for grpo)")
    kl_estimator: str = _f(
        "k3", f"KL estimator (r3l_learn.algorithms.losses): {KL_ESTIMATORS.describe()}", choices=KL_ESTIMATORS.names()
    )
    clip: float | None = _f(None, f"ppo_clip's ε, the ratio kept in [1-ε, 1+ε] (None: {hyperparameter_help('clip')})")
    eps: float | None = _f(
        None, f"grpo's ε in (r - mean)/(std + ε), >= 0; equal rewards get 0 (None: {hyperparameter_help('eps')})"
    )
    hyper: dict[str, Any] = field(
        default_factory=dict,
        metadata={
            "help": "any hyperparameter the algorithm's advantage or objective declares, e.g. threshold=0.5 for "
            "raft (r3l_learn/algorithms/advantages.py, losses.py); --alpha, --clip and --eps are shorthands",
            "metavar": "NAME=VALUE",
        },
    )
    aggregation: str = _f(
        "token_mean",
        f"loss aggregation (r3l_learn.algorithms.losses): {AGGREGATIONS.describe()}",
        choices=AGGREGATIONS.names(),
    )
    mask_truncated: bool = _f(
        False,
        "replies cut at --max-new-tokens carry no policy or KL loss, as TRL's mask_truncated_completions and "
        "DAPO's overlong filtering; the episode still counts in its group's advantages",
    )
    # optimiser: small models on CPU need a far higher lr than the paper's 1e-6 for 1.5B models
    lr: float = _f(1e-5, "AdamW learning rate (the paper's 1e-6 is for 1.5B models; small CPU models need more)")
    weight_decay: float = _f(0.01, "AdamW weight decay, as the paper")
    grad_clip: float = _f(1.0, "max global gradient norm")
    micro_batch_size: int = _f(4, "rows per forward/backward; the loss is independent of it")
    # efficiency
    device: str = _f("cpu", '"cpu" or "cuda[:i]"')
    rollout_backend: str = _f(
        "hf", f"who plays the rollouts: {ROLLOUT_BACKENDS.describe()}", choices=ROLLOUT_BACKENDS.names()
    )
    ray: str | None = _f(
        None,
        'collect on Ray actors: "local" starts Ray here, "auto" or HOST:PORT joins a cluster (pip install -e ".[ray]")',
    )
    ray_workers: int = _f(2, "env worker actors with --ray (slot i lives on actor i mod workers)")
    ray_cpus: float = _f(1.0, "CPUs each --ray env worker declares, so Ray places workers where they fit")
    ray_memory_mb: int | None = _f(None, "memory each --ray env worker declares (a ScienceWorld JVM needs ~1000)")
    ray_generation: bool = _f(
        False, "with --ray: generate in a Ray actor (weights pushed after every step) instead of on the driver"
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
    shared_prefix_min: int = _f(
        MIN_SHARED_PREFIX,
        "the update runs a span several rows of a micro-batch share once from this many tokens; 0: never",
    )
    shared_prefix_tree: bool = _f(
        True,
        "share every span rows of a micro-batch have in common (a prefix tree: a retry shares its base's turns up "
        "to the pivot); off: only the span all of them begin with",
    )
    prompt_cache_mb: int = _f(
        2048, "KV memory kept to score a multi-turn episode's turn on its previous prompt's cache (hf); 0: off"
    )
    # evaluation (held-out split, fixed temperature)
    eval_every: int = _f(10, "steps between evals; 0: only before and after training")
    eval_episodes: int = _f(16, "held-out episodes per eval (the same ones each time); 0: no evals")
    eval_temperature: float = _f(0.4, f"sampling temperature of evals ({_PAPER}: 0.4)")
    eval_before: bool = _f(True, "evaluate the initial model (off: a sweep that evaluated it once for all its runs)")
    eval_batch_size: int = _f(8, "eval episodes played together")
    eval_seed: int | None = _f(
        None,
        "the evals' seed, which fixes their distinct held-out tasks; None: 10000 + --seed, so each seed of a sweep "
        "is evaluated on its own tasks (set one value to evaluate every seed on the same tasks)",
    )
    # the run
    out_dir: str = _f("runs/r3l", "metrics, checkpoints, plots, summary and the final model go here", aliases=["--out"])
    seed: int = _f(0, "seeds task order, sampling and the initial weights of tiny-random")
    checkpoint_every: int = _f(10, "steps between checkpoints; 0: only at the end and on Ctrl-C")
    keep_checkpoints: int = _f(2, "newest checkpoints kept on disk")
    max_bad_steps: int = _f(3, "consecutive non-finite steps before giving up")
    measure_amplification: bool = _f(
        False,
        "log how much of the gradient R³L's positive amplification makes (mechanism/amplification_grad_share, "
        "mechanism/grad_norm_without_amplification): one more forward and backward pass per step over the "
        "amplified rows; the step itself is unchanged. Only for an advantage that amplifies (r3l's)",
    )
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
        algorithm = ALGORITHMS.get(self.algo)
        reflects = algorithm is not None and algorithm.reflect_retry
        if self.ablations and not reflects:
            problems.append(f"ablations switch off parts of reflect-retry, which --algo {self.algo} does not use")
        unknown = [a for a in self.ablations if a not in ABLATIONS]
        if unknown:
            problems.append(f"unknown ablations {unknown}; choose among {sorted(ABLATIONS)}")
        if self.group_size < 2 or (reflects and self.group_size % 2):
            problems.append(
                f"group_size must be >= 2, and even for reflect-retry (N/2 bases + retries), got {self.group_size}"
            )
        # plain groups: an algorithm without reflect-retry, or r3l with it ablated
        plain = not reflects or (not unknown and not resolve_algorithm(self.algo, self.ablations).reflect_retry)
        expert_problem = expert_demos_problem(self.expert_demos, self.group_size, reflect_retry=not plain)
        if expert_problem:
            problems.append(expert_problem)
        elif self.expert_demos and not env_problem:
            from r3l_envs import env_info

            if not env_info(self.env).has_expert_plan:
                problems.append(f"expert_demos needs an env with an expert plan; {self.env} declares none")
        for name in ("steps", "tasks_per_step", "micro_batch_size", "max_new_tokens", "eval_batch_size"):
            if getattr(self, name) < 1:
                problems.append(f"{name} must be >= 1, got {getattr(self, name)}")
        nonnegative = ("eval_every", "eval_episodes", "checkpoint_every", "lora_rank", "keep_checkpoints")
        for name in (*nonnegative, "prompt_cache_mb", "shared_prefix_min"):
            if getattr(self, name) < 0:
                problems.append(f"{name} must be >= 0, got {getattr(self, name)}")
        if not self.lr > 0:
            problems.append(f"lr must be > 0, got {self.lr}")
        reflector = reflector_problem(self.reflector, self.reflector_base_url)
        if reflector:
            problems.append(reflector)
        backend = ROLLOUT_BACKENDS.problem(self.rollout_backend)
        if backend:
            problems.append(f"rollout_backend: {backend}")
        elif self.lora_rank and not ROLLOUT_BACKENDS[self.rollout_backend].merges_adapters:
            problems.append(
                f"rollout_backend={self.rollout_backend!r} needs full fine-tuning (no --lora-rank): adapters are not "
                "merged"
            )
        if self.autocast not in ("auto", "off", "bf16"):
            problems.append(f"autocast must be 'auto', 'off' or 'bf16', got {self.autocast!r}")
        if self.dtype not in ("float32", "bfloat16", "auto"):
            problems.append(f"dtype must be 'float32', 'bfloat16' or 'auto', got {self.dtype!r}")
        for name, registry in CHOICES.items():
            problem = registry.problem(getattr(self, name))
            if problem:
                problems.append(f"{name}: {problem}")
        if self.ray is not None and (self.ray_workers < 1 or not self.ray_cpus > 0):
            problems.append(f"ray_workers must be >= 1 and ray_cpus > 0, got {self.ray_workers}, {self.ray_cpus}")
        # auto resolves to hf with a Ray generation actor (r3l_learn.policies.backends)
        engine_plays = not backend and not ROLLOUT_BACKENDS[self.rollout_backend].ray_generation
        if self.ray_generation and (self.ray is None or engine_plays or self.lora_rank):
            problems.append("ray_generation needs --ray, the hf rollout backend and full fine-tuning (no --lora-rank)")
        if self.max_bad_steps < 1:
            problems.append(f"max_bad_steps must be >= 1, got {self.max_bad_steps}")
        if self.dynamic_sampling_max_rounds < 1:
            problems.append(f"dynamic_sampling_max_rounds must be >= 1, got {self.dynamic_sampling_max_rounds}")
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

    @property
    def trains_reflection(self) -> bool:
        """Whether the aux term trains the reflection samples (``aux_reflection``, read for the reflector)."""
        return trains_reflection(self.aux_reflection, self.reflector)

    def changed_from(self, saved: dict[str, Any], free: frozenset[str] = RESUMABLE_CHANGES) -> list[str]:
        """The fields in which this config makes another run than the ``saved`` one (a run's ``config.json``),
        beyond those in ``free`` and those its algorithm does not use. A field the saved config lacks (added after
        it was written) ran as before the field existed: its default, or its :data:`FORMER_BEHAVIOUR`."""
        former = {**TrainConfig().to_dict(), **FORMER_BEHAVIOUR}
        unused: set[str] = set()
        if not self.algorithm.aux_samples:  # no aux rows to weigh
            unused = {"aux_weight", "aux_mean", "aux_reflection"}
        elif self.aux_weight == 0:  # aux rows weighed 0 count in no denominator
            unused = {"aux_mean", "aux_reflection"}
        was = {**former, **saved}
        if trains_reflection(was["aux_reflection"], was["reflector"]) == self.trains_reflection:
            unused.add("aux_reflection")  # e.g. always and when_self with the policy reflecting: the same run
        now = self.to_dict()
        return sorted(k for k in now if k not in free | unused and saved.get(k, former[k]) != now[k])


def trains_reflection(aux_reflection: str, reflector: str) -> bool:
    """Whether ``aux_reflection`` trains the reflection samples of ``reflector``'s diagnoses."""
    rule = AUX_REFLECTIONS.spec(aux_reflection)
    # the policy reflects on its own trajectories (free text or structured): its reflections are its own samples
    return rule.trains and (not rule.only_self or REFLECTORS.spec(parse_reflector(reflector)[0]).properties.uses_policy)


def config_from_dict(data: dict[str, Any]) -> TrainConfig:
    """A :class:`TrainConfig` from a dict (e.g. a run's ``config.json``); unknown keys are an error."""
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ValueError(f"unknown TrainConfig fields {unknown}; known: {sorted(names)}")
    return TrainConfig(**data)
