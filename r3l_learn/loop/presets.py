"""Named starting points for ``r3l train --preset NAME`` (explicit flags override them).

``cpu-demo`` is the README's main job (``make demo``): a short R³L run with the embedded SmolLM2 on an offline
env, sized for 2 CPU cores. The ``paper-*`` presets are the R³L paper's settings (arXiv 2601.03715:
Qwen2.5-1.5B/7B on 8 GPUs, lr 1e-6, 96 tasks × 8 samples per step, 512 new tokens per turn, at most 25 turns on
ALFWorld, 15 on WebShop, 30 on ScienceWorld, 3 attempts on math); no such model ships offline, so they need
``--model /path/to/hf/folder`` and a GPU to be practical.

Turn budgets: the registered envs keep their engines' own episode limits (``max_episode_steps``: ALFWorld 50,
ScienceWorld 100, WebShop 15), which is what anyone who calls ``gym.make`` gets; a preset's ``max_turns`` stops the
learner's episodes earlier (TrainConfig's default, ``None``, uses the env's limit). So the paper's budgets are a
training choice set here, not a change to the envs. Likewise ``max_new_tokens``: TrainConfig's default is 256, the
``paper-*`` presets set the paper's 512 (tests/r3l_learn/test_presets.py checks every number above).

No preset sets ``autocast``: its default, ``auto``, computes in bf16 exactly where the device does so natively.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PRESETS"]

_PAPER: dict[str, Any] = {
    "algo": "r3l",
    "reflector": "self",
    "group_size": 8,
    "tasks_per_step": 96,
    "temperature": 1.0,
    "eval_temperature": 0.4,
    "max_new_tokens": 512,
    "lr": 1e-6,
    "weight_decay": 0.01,
    "grad_clip": 1.0,
    "device": "cuda",
    "dtype": "auto",
    "gradient_checkpointing": True,
    "eval_every": 10,
    "eval_episodes": 128,
}

PRESETS: dict[str, dict[str, Any]] = {
    # The README demo: the first half of one of the learning study's R³L runs (benchmarks/learning_study/grid.py,
    # mode "cpu", method "r3l-aux-own-mean": TextWorld's coin collector level 2, actions chosen among the admissible
    # ones, 4 turns, lr 1e-4, steps of 2 tasks × 4 trajectories, the oracle's diagnoses as reflection samples and
    # the aux SFT term in its own token mean, the study's variant that rose in every seed within its first 4 steps),
    # stopped after 4 of its 8 steps, with held-out evals of 32 episodes (the first 32 of the study's 64) before and
    # after. The study's numbers are in benchmarks/RESULTS.md. Level 1 is already won before training, and on
    # free-text Countdown the 135M model never produces a parseable action, so nothing would be learned there. The
    # oracle reflector reads the game's walkthrough: a 135M model cannot reflect.
    # tests/benchmarks/test_learning.py checks that this stays the study's setting.
    "cpu-demo": {
        "env": "r3l/TextWorld-v0",
        "env_kwargs": {"game_type": "coin_collector", "difficulty": 2, "max_tasks": 64},
        "actions": "constrained",
        "max_turns": 4,
        "algo": "r3l",
        "reflector": "oracle",
        "aux_mean": "separate",
        "aux_reflection": "always",
        "steps": 4,
        "tasks_per_step": 2,
        "group_size": 4,
        "max_new_tokens": 16,
        "lr": 1e-4,
        "micro_batch_size": 2,  # R³L's stitched rows are long: micro-batches of 4 took too much memory in the study
        "eval_every": 0,
        "eval_episodes": 32,
        "eval_batch_size": 32,
        # one checkpoint, at the end (or on Ctrl-C): weights + AdamW state of a 135M model are 1.6 GB each
        "checkpoint_every": 0,
        "keep_checkpoints": 1,
        "out_dir": "runs/cpu-demo",
    },
    "paper-alfworld": {**_PAPER, "env": "r3l/ALFWorld-v0", "max_turns": 25},
    "paper-webshop": {**_PAPER, "env": "r3l/WebShop-v0", "max_turns": 15},
    "paper-sciworld": {**_PAPER, "env": "r3l/ScienceWorld-v0", "max_turns": 30},
    "paper-math": {**_PAPER, "env": "r3l/GSM8K-v0", "env_kwargs": {"max_attempts": 3}},
}
