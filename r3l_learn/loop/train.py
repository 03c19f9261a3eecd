"""The learner loop, top to bottom: config → collect groups → advantages → micro-batched loss → AdamW step →
(the rollout policy shares the weights) → periodic eval → logs and checkpoints.

Every algorithm in :mod:`r3l_learn.algorithms.catalog` runs through this one loop; they differ only in the group
builder, the advantage and the objective they name. ``r3l train`` is a thin CLI over :func:`train`.

:func:`train` reads as its steps: :func:`_build` (model, optimiser, loss, tasks), :func:`_open` (run directory,
logs, the collector the envs run in and the group builder on it), :func:`_loop` of :func:`_train_step`
(collect → :func:`_update` → log, with :func:`_save` and evals between steps), :func:`_finish` (final checkpoint,
eval, model and report). The config lives in :mod:`r3l_learn.loop.config`, the parts built from it in
:mod:`r3l_learn.loop.setup`, checkpoints and resuming in :mod:`r3l_learn.loop.state`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch

from r3l_learn.algorithms.batch import Row, cut_replies, rows_from_groups
from r3l_learn.algorithms.catalog import Algorithm
from r3l_learn.algorithms.update import LossConfig, UpdateResult, apply_update, optimizer_steps, signal_rows
from r3l_learn.errors import R3LLearnError
from r3l_learn.loop.checkpoints import ResumeError, latest_checkpoint, rng_state, save_checkpoint
from r3l_learn.loop.config import RESUMABLE_CHANGES, TrainConfig, config_from_dict
from r3l_learn.loop.eval_resume import weights_key
from r3l_learn.loop.evaluate import EvalSummary, EvaluationInterrupted, evaluate
from r3l_learn.loop.groups import GroupBuilder, groups_with_contrast, make_group_builder
from r3l_learn.loop.mechanism import amplification_extras, measures_amplification, mechanism_metrics
from r3l_learn.loop.memory import release_free_memory, resident_mb
from r3l_learn.loop.metrics import MetricsLogger, read_metrics
from r3l_learn.loop.prebuild import eval_task_ids, has_content_to_build, prebuild
from r3l_learn.loop.progress import phase, progress_default
from r3l_learn.loop.setup import (
    TaskStream,
    connect_ray,
    load_train_policy,
    make_reflector,
    reference_fn,
    rollout_config,
    rollout_policy,
)
from r3l_learn.loop.state import Interrupts, recorded_evals, report, resume_state, trainable_state
from r3l_learn.policies.backends import ROLLOUT_BACKENDS, resolve_rollout_backend
from r3l_learn.policies.device import resolve_autocast
from r3l_learn.policies.prompt_cache import PromptCache
from wrappers import Trajectory, TrajectoryGroup
from wrappers.collectors.local import as_collector
from wrappers.collectors.protocol import Collector
from wrappers.retry.reflect_retry import aggregate_stats

__all__ = [
    "RESUMABLE_CHANGES",
    "OnStep",
    "StepInfo",
    "TrainConfig",
    "TrainResult",
    "TrainingDivergedError",
    "config_from_dict",
    "train",
]

logger = logging.getLogger(__name__)


class TrainingDivergedError(R3LLearnError):
    """Too many consecutive steps had a non-finite loss or gradient."""


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


@dataclass(frozen=True)
class StepInfo:
    """What an ``on_step`` callback of :func:`train` gets after each optimiser step."""

    step: int  # steps completed, this one included
    groups: list[TrajectoryGroup]  # the groups the step trained on
    metrics: dict[str, Any]  # what the step logs (a copy, without the callbacks' additions)


#: A callback run after every optimiser step; the metrics it returns (new names only) join the step's record.
OnStep = Callable[[StepInfo], Mapping[str, Any] | None]


# ---------------------------------------------------------------------------------------------- the loop
def train(
    config: TrainConfig,
    *,
    resume: bool = False,
    collector: Collector | None = None,
    on_step: Sequence[OnStep] = (),
) -> TrainResult:
    """Run ``config``; with ``resume``, continue from the newest checkpoint in ``config.out_dir``.

    Args:
        collector: where the training episodes' envs live and run: a :class:`wrappers.collectors.protocol.Collector` of
            ``config.env`` made with ``split=config.train_split`` and ``config.env_kwargs`` (the caller closes it).
            ``None``: a :class:`wrappers.collectors.local.LocalCollector` (a thread pool in this process), closed at
            the end.
        on_step: callbacks run after every optimiser step with a :class:`StepInfo`; the metrics they return are
            logged with the step's (a name the step already logs is an error).
    """
    with progress_default(config.progress):  # phases deep in the loading code (model conversion) obey it too
        return _train(config, resume, collector, on_step)


def _train(config: TrainConfig, resume: bool, collector: Collector | None, on_step: Sequence[OnStep]) -> TrainResult:
    run = _build(config)
    if resume:
        run.completed, run.eval_before = resume_state(config, run.model, run.optimizer, run.stream)
        run.cursor = run.stream.cursor
        # a run stopped between its last step and its final eval goes on to make that eval
        if run.completed >= config.steps and not (config.eval_episodes and recorded_evals(run.out, None)[1] is None):
            return _already_finished(run)
    elif (run.out / "checkpoints").is_dir() and latest_checkpoint(run.out / "checkpoints"):
        raise ResumeError(
            f"{run.out} already holds checkpoints: pass --resume to continue, or choose another --out-dir"
        )
    try:
        _open(run, collector)
        interrupted = _loop(run, list(on_step))
        return _finish(run, interrupted)
    finally:
        _close(run)


@dataclass
class _Run:
    """One training run's parts and progress: built by :func:`_build` and :func:`_open`, advanced by the loop."""

    config: TrainConfig
    algo: Algorithm
    hyper: dict[str, Any]
    loss: LossConfig
    autocast: torch.dtype | None
    policy: Any  # the trained policy (HF); ``player`` plays the episodes (the same one, or a vLLM engine)
    optimizer: torch.optim.Optimizer
    ref_fn: Any
    stream: TaskStream
    completed: int = 0  # the last finished step
    cursor: int = 0  # the task stream's cursor after it
    eval_before: EvalSummary | None = None
    metrics: dict[str, Any] = field(default_factory=dict)  # the last step's
    bad_steps: int = 0  # consecutive non-finite steps
    player: Any = None
    log: MetricsLogger | None = None
    collector: Collector | None = None
    owns_collector: bool = False
    ray_started: bool = False  # this run started Ray (and stops it at the end)
    builder: GroupBuilder | None = None
    doing: str = ""  # what the current step is doing, for the progress bar's live status
    tokens_at_step: int = 0  # the player's tokens_done when the step's collection began
    backwards: int = 0  # micro-batches backpropagated in the current update
    rows: int = 0  # rows of the current update

    @property
    def out(self) -> Path:
        return Path(self.config.out_dir)

    @property
    def model(self) -> Any:
        return self.policy.model


def _build(config: TrainConfig) -> _Run:
    """The model, optimiser, loss, KL reference and the train tasks' order (nothing written yet)."""
    algo, hyper = config.algorithm, config.hyper_values()
    kl = {} if config.kl_coef is None else {"kl_coef": config.kl_coef}  # None: the algorithm's own
    loss = LossConfig.for_algorithm(
        algo,
        hyper,
        aux_weight=config.aux_weight,
        aggregation=config.aggregation,
        max_tokens=config.max_new_tokens,
        aux_mean=config.aux_mean,
        kl_estimator=config.kl_estimator,
        prefix_levels=None if config.shared_prefix_tree else 1,
        chunk_size=config.logprob_chunk,
        min_shared_prefix=config.shared_prefix_min,
        **kl,
    )
    autocast = torch.bfloat16 if resolve_autocast(config.autocast, config.device) == "bf16" else None
    if config.measure_amplification and not measures_amplification(algo, loss):
        logger.warning(
            "--measure-amplification: %s does not amplify its advantages under a linear objective (advantage %s, "
            "objective %s); its mechanism/amplification_* metrics stay None",
            algo.name,
            algo.advantage,
            loss.objective,
        )

    torch.manual_seed(config.seed)
    policy = load_train_policy(config)
    policy.autocast = autocast  # rollouts, evals and self-reflection compute like the training forward pass
    if hasattr(policy, "prompt_cache"):
        policy.prompt_cache = PromptCache(config.prompt_cache_mb << 20)
    trainable = [p for p in policy.model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=config.lr, weight_decay=config.weight_decay)
    ref_fn = reference_fn(config, policy.model, loss.needs_reference)
    train_env = gym.make(config.env, split=config.train_split, **config.env_kwargs)
    stream = TaskStream(train_env.unwrapped.task_ids, config.seed)
    train_env.close()
    return _Run(config, algo, hyper, loss, autocast, policy, optimizer, ref_fn, stream)


def _open(run: _Run, collector: Collector | None) -> None:
    """The run directory (config, metrics log), the rollout policy, the collector and the group builder."""
    config = run.config
    if collector is not None and collector.made_env().env_id != config.env:
        found = collector.made_env().env_id
        raise ValueError(f"the collector runs {found}, but the config trains on {config.env}: pass one of {config.env}")
    run.out.mkdir(parents=True, exist_ok=True)
    (run.out / "config.json").write_text(json.dumps(config.to_dict(), indent=2) + "\n")
    run.log = MetricsLogger(run.out, tensorboard=config.tensorboard)
    if config.ray is not None:
        with phase(f"starting Ray ({config.ray})"):
            run.ray_started = connect_ray(config)
    engine = ROLLOUT_BACKENDS[resolve_rollout_backend(config.to_dict())].engine  # else: the trained policy plays
    starts = config.ray_generation or engine
    label = "starting the generation actor" if config.ray_generation else "starting the vLLM engine"
    with phase(label) if starts else contextlib.nullcontext():
        run.player = rollout_policy(config, run.policy)
    run.owns_collector = collector is None
    if collector is None and config.ray is not None:
        with phase(f"starting {config.ray_workers} Ray env workers"):
            run.collector = _make_collector(config)
    else:
        run.collector = _make_collector(config) if collector is None else collector
    run.builder = make_group_builder(
        run.collector,
        run.player,
        reflect_retry=run.algo.reflect_retry,
        group_size=config.group_size,
        rollout=rollout_config(config, config.temperature),
        reflector=make_reflector(config, run.player),
        pivotal_credit=run.algo.pivotal_credit,
        restart=run.algo.restart,
        aux_samples=run.algo.aux_samples,
        reflection_samples=config.trains_reflection,
        fill=config.fill,
        expert_demos=config.expert_demos,
    )
    logger.info(
        "training %s with %s on %s (%s), out_dir %s", config.model, run.algo.name, config.env, run.algo, run.out
    )


def _close(run: _Run) -> None:
    """Stop what the run started for itself: a generation actor, then a Ray instance (after the final eval)."""
    if run.player is not None and run.player is not run.policy and run.config.ray_generation:
        run.player.close()
    if run.ray_started:
        from wrappers.collectors.ray import require_ray

        require_ray().shutdown()


def _make_collector(config: TrainConfig) -> Collector:
    """The collection backend: the train split's envs in this process, their calls in a thread pool; with
    ``config.ray``, in Ray actors (wrappers/collectors/ray.py)."""
    env_kwargs = {"split": config.train_split, **config.env_kwargs}
    if config.ray is not None:
        from wrappers.collectors.ray import make_ray_collector

        return make_ray_collector(
            config.env,
            env_kwargs,
            address=config.ray,
            workers=config.ray_workers,
            num_cpus=config.ray_cpus,
            memory_mb=config.ray_memory_mb,
        )
    collector, _ = as_collector(config.env, env_kwargs)  # made here: the run closes it
    return collector


def _loop(run: _Run, on_step: list[OnStep]) -> bool:
    """The games compiled, the eval before, then step after step with checkpoints and evals between; True if
    Ctrl-C stopped it."""
    config = run.config
    try:
        with Interrupts() as interrupts:
            _prebuild(run)
            if run.completed == 0 and config.eval_episodes and config.eval_before:
                run.eval_before = _eval(run, 0)
            elif _periodic_eval_missed(run):  # interrupted between the step and its eval: make the eval now
                _eval(run, run.completed)
            desc = f"training {run.algo.name} on {config.env}"
            with phase(desc, total=config.steps, unit="step", status=_step_status(run)) as bar:
                bar.update(run.completed)
                for step in range(run.completed, config.steps):
                    _train_step(run, step, interrupts, on_step)
                    bar.update(1)
                    bar.set_postfix(
                        reward=f"{run.metrics['train/reward']:.2f}", success=f"{run.metrics['train/success']:.2f}"
                    )
                    if config.checkpoint_every and run.completed % config.checkpoint_every == 0:
                        _save(run)
                    if _periodic_eval_due(config, run.completed):
                        _eval(run, run.completed)
    except KeyboardInterrupt:
        logger.warning("interrupted: saving a checkpoint of the last completed step (%d)", run.completed)
        return True
    finally:
        run.builder.close()
        if run.owns_collector:
            run.collector.close()
    return False


#: At most this many train tasks' games are compiled before the first step (the rest as their steps play them).
PREBUILD_TRAIN_TASKS = 256


def _prebuild(run: _Run) -> None:
    """Compile, in parallel and under a bar, the content the run will play that is not cached yet: the games of
    its evals and of its (first) training steps. Without this, a fresh cache compiles them inside the eval's
    resets, with nothing to show for minutes."""
    config = run.config
    if not has_content_to_build(config.env):
        return
    ahead = TaskStream(run.stream.task_ids, run.stream.seed, run.stream.cursor)
    todo = (config.steps - run.completed) * config.tasks_per_step
    tasks: dict[str, list[str]] = {config.train_split: ahead.take(min(todo, PREBUILD_TRAIN_TASKS))}
    if config.eval_episodes:
        env = gym.make(config.env, split=config.eval_split, **config.env_kwargs)
        try:
            first = _eval_seed(config)
            tasks.setdefault(config.eval_split, []).extend(eval_task_ids(env, first, config.eval_episodes) or [])
        finally:
            env.close()
    prebuild(config.env, config.env_kwargs, tasks, progress=config.progress)


def _step_status(run: _Run) -> Callable[[], str]:
    """The training bar's live status: which part of the step runs, and how far it got (tokens the policy scored
    or generated while collecting; micro-batches backpropagated while updating)."""
    config = run.config

    def status() -> str:
        if run.doing == "collecting" and hasattr(run.player, "tokens_done"):
            return f"collecting: model tokens={run.player.tokens_done - run.tokens_at_step}"
        if run.doing == "updating":
            return f"updating {run.rows} rows, {config.micro_batch_size} a micro-batch: {run.backwards} done"
        return run.doing

    return status


def _periodic_eval_due(config: TrainConfig, completed: int) -> bool:
    """Whether an eval follows step ``completed`` (the last step's eval is the final one, made by ``train``)."""
    every = config.eval_every and config.eval_episodes
    return bool(every) and completed % config.eval_every == 0 and 0 < completed < config.steps


def _periodic_eval_missed(run: _Run) -> bool:
    """A resumed run whose last completed step was due an eval that its metrics do not hold (the run was stopped
    between the two): without it, the curve would lack that point for good."""
    if not _periodic_eval_due(run.config, run.completed):
        return False
    path = run.out / "metrics.jsonl"
    records = read_metrics(path) if path.is_file() else []
    return not any(r.get("step") == run.completed and "eval/success_rate" in r for r in records)


def _train_step(run: _Run, step: int, interrupts: Interrupts, on_step: list[OnStep]) -> None:
    """Collect the step's groups, turn them into rows, update, log (callbacks included); stop after too many
    non-finite steps in a row."""
    config = run.config
    t0, c0 = time.perf_counter(), time.process_time()
    run.model.eval()
    run.doing, run.tokens_at_step = "collecting", getattr(run.player, "tokens_done", 0)
    seed = config.seed * 100_003 + step
    sample = None
    if config.dynamic_sampling:
        sample = groups_with_contrast(
            run.builder,
            run.stream.take,
            config.tasks_per_step,
            seed=seed,
            with_contrast=lambda found: _with_signal(run, found),
            max_rounds=config.dynamic_sampling_max_rounds,
        )
        groups, built = sample.groups, sample.built
    else:
        groups = built = run.builder.collect(run.stream.take(config.tasks_per_step), seed=seed)
    release_free_memory()  # the rollouts' KV caches and logits, freed, go back before the update allocates
    t1, c1 = time.perf_counter(), time.process_time()
    rows = rows_from_groups(groups, run.algo, hyper=run.hyper, mask_truncated=run.config.mask_truncated)
    extras = None
    if config.measure_amplification and measures_amplification(run.algo, run.loss):
        extras = amplification_extras(groups, rows, run.algo, hyper=run.hyper, mask_truncated=config.mask_truncated)
    with interrupts.critical():  # a Ctrl-C here waits until the step is applied and logged
        run.doing, run.backwards, run.rows = "updating", 0, len(rows)
        result = _update(run, rows, extras)
        release_free_memory()
        # only a non-finite loss or gradient is a bad step; a step without contrast ran nothing, so it neither
        # counts as one nor breaks a run of them
        ok = result.stepped or result.no_contrast
        run.doing = "logging"
        run.completed, run.cursor = step + 1, run.stream.cursor
        times = (t0, t1, time.perf_counter()), (c0, c1, time.process_time())
        metrics = _step_metrics(built, run.algo, result, times)
        metrics["update/optimizer_steps"] = optimizer_steps(run.optimizer)
        metrics.update({f"memory/{key}": mb for key, mb in resident_mb().items()})
        if sample is not None:
            metrics.update(sample.metrics())
        own = dict(metrics)
        for callback in on_step:
            extra = callback(StepInfo(run.completed, groups, dict(own))) or {}
            clash = sorted(set(extra) & set(metrics))
            if clash:
                raise ValueError(f"an on_step callback returned metrics the step already logs: {clash}")
            metrics.update(extra)
        run.log.log(run.completed, metrics)
        run.metrics = metrics
    if not result.no_contrast:
        run.bad_steps = 0 if ok else run.bad_steps + 1
    if not ok:
        logger.warning("step %d: non-finite loss or gradient; the update was skipped", run.completed)
        if run.bad_steps >= config.max_bad_steps:
            raise TrainingDivergedError(
                f"{run.bad_steps} consecutive steps had a non-finite loss or gradient; lower --lr, or "
                f"resume from the last checkpoint in {run.out / 'checkpoints'}"
            )


def _update(run: _Run, rows: list[Row], extras: list[float] | None = None) -> UpdateResult:
    """One optimiser step on ``rows`` (:func:`r3l_learn.algorithms.update.apply_update`: none on a batch without
    contrast,
    nor where the loss or gradient is not finite); the rollout policy gets the new weights when it stepped.
    ``extras``: per row, the part of its advantage whose gradient is measured apart (``Â - A``), or None."""
    model = run.model
    # one gradient per backward pass reaches any trainable leaf: counting them counts the micro-batches done
    first = next(p for p in model.parameters() if p.requires_grad)
    hook = first.register_hook(lambda grad: _count_backward(run, grad))
    try:
        result = apply_update(
            model,
            run.optimizer,
            rows,
            run.loss,
            micro_batch_size=run.config.micro_batch_size,
            pad_id=run.policy.pad_token_id,
            grad_clip=run.config.grad_clip,
            ref_fn=run.ref_fn,
            autocast=run.autocast,
            extra_advantages=extras,
        )
    finally:
        hook.remove()
    if result.stepped and run.player is not run.policy:
        run.player.update_weights(model.state_dict())
    return result


def _with_signal(run: _Run, groups: list[TrajectoryGroup]) -> list[bool]:
    """For each of ``groups``, whether its rows would carry signal (:func:`r3l_learn.algorithms.update.signal_rows`):
    the
    contrast dynamic sampling asks of a group. Advantages are taken within each group, so judging the groups
    together gives each the advantages it has in the step's batch."""
    rows = rows_from_groups(groups, run.algo, hyper=run.hyper, mask_truncated=run.config.mask_truncated)
    found = {r.group for r in signal_rows(rows, run.loss)}
    return [g in found for g in range(len(groups))]


def _count_backward(run: _Run, grad: torch.Tensor) -> torch.Tensor:
    run.backwards += 1
    return grad


def _save(run: _Run) -> None:
    """A checkpoint of the last completed step: one dict (weights, optimiser, config, step, data cursor, RNGs)."""
    state = {
        "step": run.completed,
        "cursor": run.cursor,
        "config": run.config.to_dict(),
        "model": trainable_state(run.model),
        "optimizer": run.optimizer.state_dict(),
        "rng": rng_state(),
        "eval_before": asdict(run.eval_before) if run.eval_before else None,
    }
    with phase(f"saving the checkpoint of step {run.completed} (weights and optimiser state)"):
        save_checkpoint(run.out / "checkpoints", run.completed, state, keep=run.config.keep_checkpoints)


def _finish(run: _Run, interrupted: bool) -> TrainResult:
    """The last checkpoint; unless interrupted, the eval after, the final model and the report."""
    config = run.config
    _save(run)
    eval_after = None
    if config.eval_episodes and not interrupted:
        try:
            eval_after = _eval(run, config.steps)
        except EvaluationInterrupted:  # Ctrl-C in the final eval: a partial eval is not the run's result; resume
            # plays the batches it had not finished (the finished ones are kept under OUT/evals/)
            logger.warning(
                "interrupted in the final eval: the checkpoint of step %d and the finished batches are kept",
                run.completed,
            )
            interrupted = True
    run.log.close()
    if interrupted:
        return TrainResult(run.completed, run.eval_before, None, run.metrics, run.out, interrupted=True)
    if config.save_final:
        with phase(f"saving the trained model to {run.out / 'final'}"):
            run.model.save_pretrained(run.out / "final")
            run.policy.tokenizer.save_pretrained(run.out / "final")
    report(run.out, run.eval_before, eval_after)
    return TrainResult(config.steps, run.eval_before, eval_after, run.metrics, run.out)


def _already_finished(run: _Run) -> TrainResult:
    """A resumed run whose checkpoint is at (or past) ``config.steps``: say so, and reuse the recorded final eval
    instead of running it again (raise ``--steps`` to train further)."""
    before, after = recorded_evals(run.out, run.eval_before)
    logger.warning(
        "%s already finished (checkpoint at step %d of %d): nothing to train, and the final eval is %s; "
        "raise --steps to train further",
        run.out,
        run.completed,
        run.config.steps,
        "the recorded one, not redone" if after else "not redone (none was recorded)",
    )
    return TrainResult(run.completed, before, after, {}, run.out, already_finished=True)


# ---------------------------------------------------------------------------------------------- metrics
def _is_math(env_id: str) -> bool:
    from r3l_envs import env_info  # what the env declares (its contract), not what its name suggests

    return env_info(env_id).is_math


def _eval_seed(config: TrainConfig) -> int:
    """The evals' seed (``config.eval_seed``, else ``10000 + config.seed``): the same held-out episodes at every
    eval of a run."""
    return 10_000 + config.seed if config.eval_seed is None else config.eval_seed


def _eval(run: _Run, step: int) -> EvalSummary:
    """The held-out eval at ``step``, logged. Its finished batches are kept under ``OUT/evals/`` until it is
    complete, so a run interrupted in an eval resumes it where it stopped (exactly: see
    :mod:`r3l_learn.loop.eval_resume`); its wall and CPU seconds then count the earlier attempt's batches too.
    Its episodes are written to ``OUT/evals/step-NNNNNN.jsonl`` (``r3l show`` reads them), so what a trained policy
    does on held-out tasks can be read after the run, not only its success rate."""
    config = run.config
    wall, cpu = time.perf_counter(), time.process_time()
    when = "before training" if step == 0 else f"after step {step}" if step < config.steps else "after training"
    kept = run.out / "evals" / f"step-{step:06d}"  # the finished batches; the episodes go beside it as .jsonl
    summary, trajs = evaluate(
        config.env,
        run.player,
        episodes=config.eval_episodes,
        split=config.eval_split,
        config=rollout_config(config, config.eval_temperature),
        batch_size=config.eval_batch_size,
        seed=_eval_seed(config),
        env_kwargs=config.env_kwargs,
        progress=config.progress,
        desc=f"eval {when}",
        out=kept.with_suffix(".jsonl"),
        resume=kept,
        resume_key=weights_key(run.model),
    )
    metrics = {"eval/success_rate": summary.success_rate, "eval/mean_score": summary.mean_score}
    metrics["eval/mean_reward"] = summary.mean_reward
    metrics["eval/wall_s"] = time.perf_counter() - wall + summary.resumed_wall_s
    metrics["eval/cpu_s"] = time.process_time() - cpu + summary.resumed_cpu_s
    if summary.resumed_episodes:
        metrics["eval/resumed_episodes"] = summary.resumed_episodes
    if _is_math(config.env):  # pass@1 is the first attempt; success_rate is "solved within k attempts"
        metrics["eval/first_attempt_success"] = statistics.fmean(_first_attempt_won(t) for t in trajs)
    run.log.log(step, metrics)
    return summary


def _first_attempt_won(traj: Trajectory) -> float:
    return float(bool(traj.turns) and bool(traj.turns[0].info.get("won", False)))


def _step_metrics(
    groups: list[TrajectoryGroup], algo: Algorithm, result: UpdateResult, times: tuple[tuple, tuple]
) -> dict[str, Any]:
    """What one step logs: the groups' rewards and retry statistics (every group the step built), the loss
    parts, whether the optimiser stepped, and where the time went (``times``: wall and process CPU clocks at the
    step's start, after collection and after the update; CPU seconds count every thread, and are what a loaded
    machine does not inflate).

    ``skipped``: a non-finite loss or gradient discarded the update; ``update/skipped_no_contrast``: no row carried
    signal, so the optimiser did not step (the zero-contrast rule of :mod:`r3l_learn.algorithms.update`). The loss
    entries
    are None in both cases. ``mechanism/*``: what reflect-then-retry did (:mod:`r3l_learn.loop.mechanism`)."""
    upd, grad_norm, ok = result.stats, result.grad_norm, result.stepped
    trajs = [t for g in groups for t in g.trajectories]
    bases = [t for t in trajs if t.kind == "base"]
    (start, collected, updated), (cpu_start, cpu_collected, cpu_updated) = times
    # a retry's turns before its pivot are the base's, reused: they cost no generation
    generated = sum(len(turn.token_ids) for t in trajs for turn in t.turns[t.pivot or 0 :])
    out: dict[str, Any] = {
        "train/reward": statistics.fmean(t.reward for t in trajs),
        "train/success": statistics.fmean(t.won for t in trajs),
        "train/base_success": statistics.fmean(t.won for t in bases) if bases else None,
        "train/trajectories": len(trajs),
        "train/aux_samples": sum(len(g.samples) for g in groups),
        "rollout/cut_replies": cut_replies(groups),
        "train/target_tokens": upd.target_tokens,
        "loss/total": upd.loss if ok else None,
        "loss/policy": upd.policy_loss if ok else None,
        "loss/aux": upd.aux_loss if ok else None,
        "loss/kl": upd.kl if ok else None,
        "grad_norm": grad_norm if grad_norm is not None and math.isfinite(grad_norm) else None,
        "skipped": not ok and not result.no_contrast,
        "update/skipped_no_contrast": result.no_contrast,
        "speed/generated_tokens": generated,
        "speed/collect_s": collected - start,
        "speed/update_s": updated - collected,
        "speed/collect_cpu_s": cpu_collected - cpu_start,
        "speed/update_cpu_s": cpu_updated - cpu_collected,
        "speed/generated_tokens_per_s": generated / max(collected - start, 1e-9),
        "speed/train_tokens_per_s": upd.tokens / max(updated - collected, 1e-9),
        **mechanism_metrics(groups, result),
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
