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
    # The README demo: TextWorld's coin collector (level 1: find the coin nearby) with actions chosen among the
    # admissible ones, where the embedded 135M model succeeds often enough (~0.6 at temperature 0.4) for groups
    # to hold contrast. On free-text Countdown it never even produces a parseable action (0 of 24 replies), so
    # nothing would be learned. The oracle reflector reads the game's walkthrough: a 135M model cannot reflect.
    "cpu-demo": {
        "env": "r3l/TextWorld-v0",
        "env_kwargs": {"game_type": "coin_collector", "difficulty": 1, "max_tasks": 32},
        "actions": "constrained",
        "max_turns": 5,
        "algo": "r3l",
        "reflector": "oracle",
        "steps": 4,
        "tasks_per_step": 2,
        "group_size": 4,
        "max_new_tokens": 32,
        "lr": 2e-5,
        "micro_batch_size": 4,
        "eval_every": 0,
        "eval_episodes": 16,
        "eval_batch_size": 16,
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
