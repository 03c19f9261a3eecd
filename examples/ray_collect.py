"""Reflect-retry collection with the envs in Ray actors: a worker killed mid-collect, and the same groups.

Starts a local Ray instance (``wrappers.collectors.ray.connect("local")``; pass ``--address auto`` or
``HOST:PORT`` to join a cluster that ``ray start`` runs), puts the env slots in Ray actors
(:class:`wrappers.collectors.ray.RayCollector`) and collects reflect-retry groups on them. Only plain data crosses
to the actors: actions, observations, and checkpoints as verified bytes; the policy and the reflector stay here.

Halfway through, one env worker's process is killed (SIGKILL, as a crash or the OOM killer would): the collector
starts a new actor, rebuilds its slots from their last checkpoints, and the groups come out identical to those of
the in-process thread pool (:class:`wrappers.collectors.local.LocalCollector`), which this example checks.

Who plays: a scripted Countdown player that answers wrongly unless the oracle's guidance states the answer
(``OracleReflector(reveal_answer=True)``), so bases fail and retries from the pivot succeed; no model is needed.
Run it (``--small``: one task, one worker, killed too: about 11 s on a 2-core CPU, most of it Ray's start; the
default: 8 tasks, 2 workers, one killed: 12 s wall at load ~5)::

    python examples/ray_collect.py --small
    python examples/ray_collect.py
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import signal
import time
from typing import Any

import r3l_envs  # noqa: F401  (registers the r3l/* ids)
from r3l_learn.policies.scripted import ScriptedPolicy
from wrappers import RolloutConfig
from wrappers.collectors.local import LocalCollector
from wrappers.collectors.protocol import Collector
from wrappers.collectors.ray import RayCollector, connect, require_ray
from wrappers.retry.oracle import OracleReflector
from wrappers.retry.reflect_retry import ReflectRetry, ReflectRetryConfig, aggregate_stats

logger = logging.getLogger("ray_collect")
ENV = "r3l/Countdown-v0"


def countdown_player(on_reply: Any = None) -> ScriptedPolicy:
    """Answers ``1 + 2`` unless guidance in the context states the answer; ``on_reply(n)`` runs before reply n."""
    calls = [0]

    def reply(prompt: str) -> str:
        calls[0] += 1
        if on_reply is not None:
            on_reply(calls[0])
        found = re.search(r"The correct answer is (.+?)\.\n", prompt)
        return f"<action>{found.group(1)}</action>" if found else "<action>1 + 2</action>"

    return ScriptedPolicy(reply)


def collect(collector: Collector, task_ids: list[str], group_size: int, on_reply: Any = None) -> list[Any]:
    config = ReflectRetryConfig(group_size=group_size, rollout=RolloutConfig(max_turns=3))
    rr = ReflectRetry(collector, countdown_player(on_reply), OracleReflector(reveal_answer=True), config)
    try:
        return rr.collect(task_ids, seed=0)
    finally:
        rr.close()


def outcome(groups: list[Any]) -> list[Any]:
    """What must not depend on where the envs ran: every trajectory's kind, actions, reward and tokens."""
    return [
        [(t.kind, [turn.action for turn in t.turns], t.reward, t.token_ids) for t in g.trajectories] for g in groups
    ]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="one task, one worker (CI)")
    parser.add_argument("--address", default="local", help="local (start one here), auto, or a cluster address")
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--no-kill", dest="kill", action="store_false", help="do not kill a worker mid-collect")
    args = parser.parse_args(argv)
    if args.small:
        args.tasks, args.group_size, args.workers = 1, 2, 1
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    task_ids = [f"countdown-train-{i:06d}" for i in range(args.tasks)]

    start = time.perf_counter()
    with LocalCollector(ENV, workers=1) as local:
        expected = collect(local, task_ids, args.group_size)
    logger.info("in-process thread pool: %d groups in %.1f s", len(expected), time.perf_counter() - start)

    ray = require_ray()
    start = time.perf_counter()
    started = connect(args.address, num_cpus=2 if args.address == "local" else None)
    logger.info("Ray %s ready in %.1f s", args.address, time.perf_counter() - start)
    killed: list[int] = []
    try:
        with RayCollector(ENV, workers=args.workers, num_cpus=0.25) as remote:

            def kill_midway(n: int) -> None:
                # reply n: the bases have played their first turn; a retry needs its slot's checkpoint
                if args.kill and n == args.tasks * args.group_size // 2 + 1 and not killed:
                    pid = remote.pids()[0]  # the worker of slot 0, which every collect uses
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                    logger.info("killed env worker process %d mid-collect", pid)

            start = time.perf_counter()
            groups = collect(remote, task_ids, args.group_size, kill_midway)
            replacements = remote.replacements
            logger.info(
                "Ray actors (%d workers): %d groups in %.1f s, %d worker(s) replaced",
                remote.workers,
                len(groups),
                time.perf_counter() - start,
                replacements,
            )
    finally:
        if started:
            ray.shutdown()
    same = outcome(groups) == outcome(expected)
    stats = aggregate_stats(groups)
    logger.info(
        "groups identical to the thread pool's: %s | %d retries, %d won | mean reward %.2f",
        same,
        stats.get("retries", 0),
        stats.get("retries_succeeded", 0),
        sum(t.reward for g in groups for t in g.trajectories) / sum(len(g.trajectories) for g in groups),
    )
    if not same:
        raise SystemExit("the Ray groups differ from the thread pool's: please report this as a bug")
    return {"groups": groups, "identical": same, "killed": killed, "replacements": replacements, "stats": stats}


if __name__ == "__main__":
    main()
