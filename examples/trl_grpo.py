"""Train on an r3l env with TRL's GRPOTrainer: multi-turn episodes or reflect-retry groups through ``rollout_func``.

Install the extras first (``pip install -e ".[games,hf,trl]"``), then::

    python examples/trl_grpo.py                       # 2 steps, tiny random model, Countdown, oracle reflect-retry
    python examples/trl_grpo.py --small               # the same, smaller (CI)
    python examples/trl_grpo.py --mode episodes       # plain GRPO: num_generations independent episodes per task
    python examples/trl_grpo.py --model smollm2-135m-instruct --env r3l/TextWorld-v0 --steps 20   # a real run

What happens per step: TRL draws tasks from ``rollout.dataset()``; :class:`r3l_learn.bridges.trl.EnvRollout` plays
each task's group with the trainer's own model (``num_generations`` episodes, or N/2 bases + reflections + retries
+ fill), and hands TRL one sequence per episode: the opening chat as ``prompt_ids``, the rest of the episode as
``completion_ids``, and ``env_mask`` so only the agent's tokens train (after pivotal credit in reflect-retry
groups). The env's reward comes back through :func:`r3l_learn.bridges.trl.env_reward`. What TRL cannot express of
R³L (positive amplification, the auxiliary SFT samples) is listed in that module's docstring.

The tiny random model (the default) never solves a task: its rewards are all 0, so its steps have no gradient;
``--small`` (the CI configuration: 2 steps, 2 tasks, N=2, 8 tokens a turn) runs in about 10 s on a 2-core CPU.
Pass ``--model smollm2-135m-instruct`` (the embedded model) or a local HF folder for a run that learns. On CPU a
SmolLM2 step takes minutes, not hours: one step of two TextWorld episodes (``--mode episodes --model
smollm2-135m-instruct --env r3l/TextWorld-v0 --steps 1 --tasks 2 --num-generations 2``) used 34 CPU-seconds,
2 min 9 s wall, on a 2-core CPU with native bf16 at load ~7.
That needs two of TRL's defaults replaced, as this script does: ``bf16=True`` autocasts the rollout and the
update to bf16, which CPUs without native bf16 (AVX2-only) emulate many times slower than fp32 (there a step did
not finish in 25 min; ``--autocast auto`` picks bf16 only where it is native), and ``gradient_checkpointing=True``
recomputes the forward in the backward (+20 % CPU here; ``--gradient-checkpointing`` turns it back on).
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is experimental in TRL 1.x

from trl import GRPOConfig, GRPOTrainer

import r3l_envs  # noqa: F401  (registers the r3l/* ids)
from r3l_learn.bridges.trl import EnvRollout, env_reward
from r3l_learn.loop.evaluate import load_policy
from r3l_learn.policies.device import resolve_autocast
from wrappers import RolloutConfig, SamplingParams
from wrappers.retry.oracle import OracleReflector

logger = logging.getLogger("trl_grpo")


def reflector_for(name: str, base_url: str | None):
    """``oracle``, ``self`` (the trained model reflects), or ``openai:MODEL`` on ``base_url``."""
    if name == "oracle":
        return OracleReflector()
    if name == "self":
        return "self"
    if name.startswith("openai:"):
        from r3l_learn.policies.openai import OpenAIReflector

        return OpenAIReflector(name.removeprefix("openai:"), base_url=base_url)
    raise SystemExit(f"--reflector must be oracle, self or openai:MODEL, got {name!r}")


def main(argv: list[str] | None = None) -> list[dict[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="2 steps, 2 tasks, N=2, 8 tokens a turn (CI)")
    parser.add_argument("--env", default="r3l/Countdown-v0")
    parser.add_argument("--mode", choices=["reflect_retry", "episodes"], default="reflect_retry")
    parser.add_argument("--model", default="tiny-random", help="tiny-random, an embedded model name, or a HF folder")
    parser.add_argument("--reflector", default="oracle", help="oracle, self, or openai:MODEL (reflect_retry mode)")
    parser.add_argument("--reflector-base-url", default=None, help="the server of an openai:MODEL reflector")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--tasks", type=int, default=4, help="tasks in the training dataset")
    parser.add_argument("--num-generations", type=int, default=4, help="group size N (even for reflect_retry)")
    parser.add_argument("--max-turns", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=32, help="per agent turn")
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument(
        "--autocast", choices=["auto", "off", "bf16"], default="auto", help="auto: bf16 only where it is native"
    )
    parser.add_argument(
        "--gradient-checkpointing", action="store_true", help="recompute activations in backward (TRL's default)"
    )
    parser.add_argument("--out-dir", default=None, help="TRL's output folder (default: a temporary one)")
    args = parser.parse_args(argv)
    if args.small:
        args.steps, args.tasks, args.num_generations, args.max_new_tokens = 2, 2, 2, 8
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    policy = load_policy(args.model, dtype="float32", seed=0)
    device = "cuda" if policy.model.device.type == "cuda" else "cpu"
    rollout = EnvRollout(
        args.env,
        mode=args.mode,
        rollout=RolloutConfig(max_turns=args.max_turns, sampling=SamplingParams(max_new_tokens=args.max_new_tokens)),
        reflector=reflector_for(args.reflector, args.reflector_base_url) if args.mode == "reflect_retry" else None,
    )
    with tempfile.TemporaryDirectory() as scratch:
        config = GRPOConfig(
            output_dir=args.out_dir or scratch,
            max_steps=args.steps,
            per_device_train_batch_size=args.num_generations,  # one group per optimiser step
            num_generations=args.num_generations,
            learning_rate=args.lr,
            scale_rewards="none",  # R³L's baseline: the group mean, no std scaling
            use_cpu=device == "cpu",
            # TRL defaults to bf16 autocast and activation checkpointing. On a CPU without native bf16 every
            # matmul of the rollout and the update then runs emulated (tens of times slower than fp32), and a
            # 135M model needs no activation memory saving: both are chosen here instead.
            bf16=resolve_autocast(args.autocast, device) == "bf16",
            gradient_checkpointing=args.gradient_checkpointing,
            report_to="none",
            logging_steps=1,
            save_strategy="no",
        )
        trainer = GRPOTrainer(
            model=policy.model,
            reward_funcs=env_reward,
            args=config,
            train_dataset=rollout.dataset(num_tasks=args.tasks),
            processing_class=policy.tokenizer,
            rollout_func=rollout,
        )
        trainer.train()
    rollout.close()
    steps = [h for h in trainer.state.log_history if "loss" in h]
    for i, log in enumerate(steps):
        logger.info(
            "step %d: loss %.4g | env reward %.3f | success %.2f | retries %.2f of the group",
            i + 1,
            log["loss"],
            log["rewards/env_reward/mean"],
            log.get("r3l/success", 0.0),
            log.get("r3l/retries", 0.0),
        )
    return steps


if __name__ == "__main__":
    main()
