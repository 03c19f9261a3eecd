"""Which engine plays a training run's rollouts: ``rollout_backend="auto"`` resolved by a small cost model.

The backends are the rows of :data:`ROLLOUT_BACKENDS`, each with its properties (:class:`RolloutBackendProperties`):
the config validates a run's choice against them, and ``r3l train --rollout-backend`` takes its choices and help
from them.

vLLM collects faster than HF transformers, but it costs an engine start and, after every optimiser step, a push
of the learner's weights into the engine; HF rollouts share the trained model and cost neither. ``auto`` picks
vLLM only where the measurements that ship with the package (:data:`MEASURED`, from ``benchmarks/vllm_cpu.py``)
say it finishes the run's rollouts sooner, fixed costs included:

    vLLM:  engine start + steps × weight push + trajectories × (vLLM s per trajectory) × margin
    HF:    trajectories × (HF s per trajectory)

Per-trajectory seconds come from the measured group of the run's action mode (free text for free and direct
replies, constrained TextWorld for constrained ones) whose batch is nearest the episodes the run plays together;
for generated replies both are scaled down where the run's ``max_new_tokens`` is below the measured mean reply
(shorter rollouts leave less time for vLLM to win back its fixed costs). The measured episodes are short (one
free-text turn, two constrained turns), so a run's rollouts are longer than estimated: this also leans to HF.
``margin`` is 1.1 where the numbers were measured on this CPU kind (:func:`r3l_learn.policies.device.cpu_kind`) and 2 on
another one, so there vLLM is chosen only where its measured lead survives halving. Without vLLM installed,
without measurements, on CUDA (none measured), with LoRA adapters or a Ray generation actor, ``auto`` is ``hf``.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from r3l_learn.algorithms.registry import Choices

__all__ = [
    "MEASURED",
    "ROLLOUT_BACKENDS",
    "BackendChoice",
    "RolloutBackendProperties",
    "RunShape",
    "choose_backend",
    "load_measurements",
    "resolve_rollout_backend",
    "run_shape",
    "vllm_importable",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RolloutBackendProperties:
    """What a run must know about a rollout backend.

    Attributes:
        engine: a separate inference engine plays the episodes and receives the learner's weights after every
            update (else the trained model plays them itself).
        merges_adapters: it can play a model trained with LoRA adapters (an engine receives full state dicts).
        ray_generation: generation may move to a Ray actor (``ray_generation``), which plays an HF copy.
        resolved: it stands for another backend, picked per run by this module's cost model.
    """

    engine: bool = False
    merges_adapters: bool = True
    ray_generation: bool = True
    resolved: bool = False


#: ``TrainConfig.rollout_backend``'s values: the two engines, or ``auto`` (this module's choice)
ROLLOUT_BACKENDS = Choices("rollout backend", RolloutBackendProperties)
ROLLOUT_BACKENDS.add("hf", "HF transformers (in training, the trained model itself plays)")
ROLLOUT_BACKENDS.add(
    "vllm",
    "a vLLM engine (in training, it gets each update; full fine-tuning only)",
    engine=True,
    merges_adapters=False,
    ray_generation=False,
)
ROLLOUT_BACKENDS.add(
    "auto",
    "vLLM where the shipped measurements say it finishes this run's rollouts sooner, engine start and weight "
    "pushes included, else hf (always hf without vLLM installed)",
    resolved=True,
)

#: The measurements ``auto`` reads: what the cost model needs of ``benchmarks/vllm_cpu.py``'s run (its
#: ``benchmarks/results/vllm_cpu.json``; benchmarks/RESULTS.md discusses it) with smollm2-135m-instruct in bf16 on
#: a CPU with native bf16 (avx512_bf16), batch 8: free-text Countdown (up to 96 new tokens a turn) and constrained
#: TextWorld (4 turns). Kept here, not read from the repository, so an installed package decides alike; a rerun of
#: the benchmark updates both (tests/r3l_learn/test_backends.py checks that they agree).
MEASURED: dict[str, Any] = {
    "rows": [
        {
            "task": "countdown (free text)",
            "batch": 8,
            "wall_s_hf": 6.925203034999868,
            "tokens_hf": 344,
            "turns_hf": 8,
            "wall_s_vllm": 1.383975322999504,
        },
        {
            "task": "textworld (constrained)",
            "batch": 8,
            "wall_s_hf": 96.64159322500018,
            "tokens_hf": 169,
            "turns_hf": 16,
            "wall_s_vllm": 60.52896003600017,
        },
    ],
    "engine_start_s": 9.50420320000012,
    "hf_load_s": 3.136824911000076,
    "weight_push_s": 1.6262265160003153,
    "dtype": "bfloat16",
    "cpu": "native bf16 (avx512_bf16)",
}
#: vLLM's per-trajectory seconds are multiplied by this before comparing: measured on this CPU kind, on another
SAME_CPU_MARGIN, OTHER_CPU_MARGIN = 1.1, 2.0
#: which measured task stands for each action mode (direct replies are generated, like free text)
MEASURED_TASK = {"free": "free text", "direct": "free text", "constrained": "constrained"}


@dataclass(frozen=True)
class RunShape:
    """What of a run decides its rollout cost: how replies are made, how many episodes play together, how long."""

    actions: str  # "free", "constrained" or "direct"
    batch: int  # episodes played together (one rollout batch)
    steps: int  # optimiser steps, each followed by a weight push on vLLM
    trajectories_per_step: int
    device: str = "cpu"
    max_new_tokens: int | None = None  # per generated turn (None: as measured)


@dataclass(frozen=True)
class BackendChoice:
    """The resolved backend, why, and the estimated rollout seconds of the whole run on each (None: not estimated)."""

    backend: str
    reason: str
    hf_s: float | None = None
    vllm_s: float | None = None


def vllm_importable() -> bool:
    """Whether ``vllm`` can be imported here (looked up, not imported: importing it takes seconds)."""
    return importlib.util.find_spec("vllm") is not None


def load_measurements(path: Path) -> dict[str, Any] | None:
    """``benchmarks/vllm_cpu.py`` results saved at ``path`` (to decide by another run than :data:`MEASURED`), or
    None where there are none (or they do not parse)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def run_shape(fields: Mapping[str, Any]) -> RunShape:
    """The :class:`RunShape` of TrainConfig fields (a ``TrainConfig.to_dict()`` or the learning study's cell).

    Plain groups play all their members at once; reflect-retry groups play their N/2 bases first, then retries.
    """
    from r3l_learn.algorithms.catalog import resolve_algorithm

    algorithm = resolve_algorithm(fields.get("algo", "r3l"), tuple(fields.get("ablations", ())))
    tasks, n = int(fields.get("tasks_per_step", 4)), int(fields.get("group_size", 8))
    own = n // 2 if algorithm.reflect_retry else n - int(fields.get("expert_demos", 0))
    return RunShape(
        actions=fields.get("actions", "free"),
        batch=max(1, tasks * own),
        steps=int(fields.get("steps", 20)),
        trajectories_per_step=tasks * n,
        device=fields.get("device", "cpu"),
        max_new_tokens=int(fields.get("max_new_tokens", 256)),
    )


def choose_backend(
    shape: RunShape, measured: dict[str, Any] | None, *, vllm_available: bool, cpu: str
) -> BackendChoice:
    """The faster backend for ``shape`` by the cost model in this module's docstring.

    Args:
        shape: the run.
        measured: ``benchmarks/vllm_cpu.py``'s results (:data:`MEASURED`; None: none).
        vllm_available: whether vLLM can be imported here.
        cpu: this machine's :func:`r3l_learn.policies.device.cpu_kind`, compared with the one the numbers were measured
        on.
    """
    if not vllm_available:
        return BackendChoice("hf", "vllm is not installed here")
    if shape.device.startswith("cuda"):
        return BackendChoice("hf", "no vLLM measurements on CUDA")
    if shape.actions not in MEASURED_TASK:
        raise ValueError(f"actions must be one of {tuple(MEASURED_TASK)}, got {shape.actions!r}")
    task = MEASURED_TASK[shape.actions]
    rows = [r for r in (measured or {}).get("rows", []) if f"({task})" in r.get("task", "") and _timed(r)]
    start = (measured or {}).get("engine_start_s")
    if not rows or start is None:
        return BackendChoice("hf", f"no {task} measurements of both backends")
    row = min(rows, key=lambda r: (abs(math.log(r["batch"] / shape.batch)), -r["batch"]))
    # a weight push moves every weight, like the HF model's load (the stand-in where it was not measured)
    push = measured.get("weight_push_s", measured.get("hf_load_s", start))
    same_cpu = measured.get("cpu") == cpu
    margin = SAME_CPU_MARGIN if same_cpu else OTHER_CPU_MARGIN
    n = shape.steps * shape.trajectories_per_step
    scale = 1.0
    if task == "free text" and shape.max_new_tokens and row.get("tokens_hf") and row.get("turns_hf"):
        scale = min(1.0, shape.max_new_tokens / (row["tokens_hf"] / row["turns_hf"]))
    hf_s = n * scale * row["wall_s_hf"] / row["batch"]
    vllm_s = start + shape.steps * push + n * scale * margin * row["wall_s_vllm"] / row["batch"]
    where = "this CPU kind" if same_cpu else f"another CPU kind ({measured.get('cpu')}; margin {margin:g})"
    reason = (
        f"{task} at batch {row['batch']} measured on {where}: {n} trajectories in ~{vllm_s:.0f} s on vLLM "
        f"(start {start:.1f} s, {shape.steps} weight pushes of {push:.2f} s) vs ~{hf_s:.0f} s on HF"
    )
    return BackendChoice("vllm" if vllm_s < hf_s else "hf", reason, hf_s, vllm_s)


def _timed(row: Mapping[str, Any]) -> bool:
    return all(isinstance(row.get(k), (int, float)) for k in ("batch", "wall_s_hf", "wall_s_vllm")) and row["batch"] > 0


#: (run shape, pick) pairs whose ``auto`` resolution this process has logged: each is logged once, however often a
#: run (its evals, a resume, the learning study's cells) resolves it
_LOGGED: set[tuple[RunShape, str]] = set()


def resolve_rollout_backend(fields: Mapping[str, Any], measurements: Mapping[str, Any] | Path | None = None) -> str:
    """``fields["rollout_backend"]`` itself, or for a resolved one (``auto``) the :func:`choose_backend` pick,
    logged once per run shape. ``fields``: TrainConfig fields (``TrainConfig.to_dict()`` or the learning study's
    cell); ``measurements``: :data:`MEASURED` (None), or other results or the path of a saved file of them.

    Raises:
        UnknownChoiceError: an unknown backend (a ``ValueError``; the message lists the known ones).
    """
    backend = ROLLOUT_BACKENDS.check(fields.get("rollout_backend", "hf"))
    measurements = MEASURED if measurements is None else measurements
    if not ROLLOUT_BACKENDS[backend].resolved:
        return backend
    shape = run_shape(fields)
    if fields.get("lora_rank"):
        choice = BackendChoice("hf", "LoRA adapters are not merged into a vLLM engine")
    elif fields.get("ray_generation"):
        choice = BackendChoice("hf", "a Ray actor generates (ray_generation)")
    else:
        from r3l_learn.policies.device import cpu_kind

        found = load_measurements(measurements) if isinstance(measurements, Path) else measurements
        choice = choose_backend(shape, found, vllm_available=vllm_importable(), cpu=cpu_kind())
    if (shape, choice.backend) not in _LOGGED:
        _LOGGED.add((shape, choice.backend))
        logger.info("rollout backend auto -> %s: %s", choice.backend, choice.reason)
    return choice.backend
