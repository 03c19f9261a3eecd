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
    # The README demo: a short R³L run on the calibrated text game of the learning study (TextWorld's treasure
    # hunter, level 5: the goal names a route and an object that differ per game, so no fixed action sequence wins
    # it: the best one won 3.5 % of 200 held-out games, a random admissible policy 10.5 %; see the calibration in
    # benchmarks/RESULTS.md). Actions are chosen among the admissible ones, 8 turns, the oracle reflector (it reads
    # the game's walkthrough: a 135M model cannot reflect usefully), steps of 2 tasks × 4 trajectories, lr 1e-4.
    # The held-out evals are greedy over 64 distinct test games, before and after. It starts from the embedded
    # SmolLM2, not the study's guidance-following warm-up (about an hour on 2 cores), so its guided retries win
    # less often than the calibration's. Timed at 4 min 16 s on a fresh clone, 2 quiet cores (bf16).
    # tests/benchmarks/test_learning.py checks that the env settings stay the study's.
    "cpu-demo": {
        "env": "r3l/TextWorld-v0",
        "env_kwargs": {"game_type": "treasure_hunter", "difficulty": 5},
        "actions": "constrained",
        "max_turns": 8,
        "max_new_tokens": 32,
        "temperature": 1.0,
        "algo": "r3l",
        "reflector": "oracle",
        "steps": 4,
        "tasks_per_step": 2,
        "group_size": 4,
        "lr": 1e-4,
        "micro_batch_size": 2,  # R³L's stitched rows are long: micro-batches of 4 took too much memory in the study
        "eval_every": 0,
        "eval_episodes": 64,
        "eval_temperature": 0.0,  # greedy: one episode per held-out game says what the model does with it
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
