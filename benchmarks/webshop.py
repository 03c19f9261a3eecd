"""WebShop at scale: catalogue build, search latency, steps/s, checkpoint, and memory of many env instances.

On a generated catalogue (default 100k products, built into a fresh temporary cache folder):

* build — seconds to generate + store the catalogue and index it (index alone measured by re-indexing);
* search — p50/p95 latency of our deterministic top-50 vs ``bm25s``'s own ``retrieve(k=50)`` (baseline);
* steps/s — the scripted oracle shopper's steps; checkpoint/restore vs replay-from-reset (ratio);
* memory — RSS and PSS of a process holding 1 vs 32 envs (each reset and stepped), and of 4 processes
  holding 8 envs each; PSS splits the shared catalogue pages among the processes that map them.

Run: ``python -m benchmarks.webshop [--products 100000]``. Writes the ``webshop`` section of RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.results_page import machine, machine_line, write_section


def _memory_kib() -> dict[str, int]:
    fields = {}
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if parts[0] in ("Rss:", "Pss:", "Anonymous:"):
                fields[parts[0][:-1].lower()] = int(parts[1])
    fields["file"] = fields["rss"] - fields["anonymous"]  # mapped catalogue pages: page cache, shared
    return fields


def child(num_products: int, envs: int) -> None:
    """Hold ``envs`` envs and play the same 32 episodes spread over them; print memory as JSON.

    The workload is fixed (32 oracle episodes, then a search per env), so 1 vs 32 envs differ only in the
    number of instances, not in how much of the catalogue the searches touched.
    """
    from r3l_envs.webshop import WebShopEnv, oracle_actions

    import_only = _memory_kib()
    held = [WebShopEnv(num_products=num_products, split="train") for _ in range(envs)]
    for i in range(32):
        env = held[i % envs]
        env.reset(seed=i)
        oracle_actions(env)
    for i, env in enumerate(held):
        env.reset(seed=1000 + i)
        env.step(f"search[{env.goal['query']}]")
    print(json.dumps({"import": import_only, "after": _memory_kib(), "envs": len(held)}), flush=True)
    sys.stdin.readline()  # stay alive until the parent has measured every sibling


def _spawn(num_products: int, envs: int, count: int) -> list[dict]:
    cmd = [sys.executable, "-m", "benchmarks.webshop", "--child", str(envs), "--products", str(num_products)]
    procs = [subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for _ in range(count)]
    out = [json.loads(p.stdout.readline()) for p in procs]
    for p in procs:
        p.communicate("\n")
    return out


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--products", type=int, default=100_000)
    parser.add_argument("--child", type=int, default=0)
    args = parser.parse_args()
    if args.child:
        child(args.products, args.child)
        return
    os.environ["R3L_CACHE_DIR"] = tempfile.mkdtemp(prefix="r3l-bench-webshop-")
    import r3l_envs
    from r3l_envs.webshop import WebShopEnv, open_catalogue, oracle_actions
    from r3l_envs.webshop.oracle import oracle_query
    from r3l_envs.webshop.search import build_index, product_text, tokenize

    n = args.products
    t = time.perf_counter()
    catalogue = open_catalogue(num_products=n)
    build_s = time.perf_counter() - t
    texts = [product_text(catalogue.products[i]) for i in range(n)]
    disk_mb = sum(f.stat().st_size for f in catalogue.folder.rglob("*") if f.is_file()) / 1e6
    queries = [oracle_query(catalogue.goals[i]) for i in range(0, n, max(1, n // 500))][:500]
    ours, baseline = [], []
    with tempfile.TemporaryDirectory() as folder:
        t = time.perf_counter()
        build_index(texts, Path(folder))
        index_s = time.perf_counter() - t
        import bm25s

        # the baseline: bm25s's own top-50 retrieve on this index of the same texts, memory-mapped like the env's
        retriever = bm25s.BM25.load(folder, mmap=True, show_progress=False)
        for q in queries:
            t = time.perf_counter()
            catalogue.search(q)
            ours.append(time.perf_counter() - t)
            t = time.perf_counter()
            retriever.retrieve(tokenize([q], return_ids=False), k=50, show_progress=False, n_threads=1)
            baseline.append(time.perf_counter() - t)

    env = WebShopEnv(num_products=n, split="train")
    steps, won, episodes = 0, 0, 200
    t = time.perf_counter()
    for i in range(episodes):
        env.reset(seed=i)
        reward, actions = oracle_actions(env)
        steps += len(actions)
        won += reward == 1.0
    steps_per_s = steps / (time.perf_counter() - t)

    import gymnasium as gym

    wrapped = gym.make("r3l/WebShop-v0", num_products=n)
    wrapped.reset(seed=3)
    oracle_goal = wrapped.unwrapped.goal
    for action in (f"search[{oracle_goal['name'].lower()}]", f"click[{oracle_goal['asin']}]", "click[Description]"):
        wrapped.step(action)
    reps = 300
    t = time.perf_counter()
    for _ in range(reps):
        ckpt = r3l_envs.checkpoint(wrapped)
    ckpt_s = (time.perf_counter() - t) / reps
    t = time.perf_counter()
    for _ in range(reps):
        r3l_envs.restore(wrapped, ckpt)
    restore_s = (time.perf_counter() - t) / reps
    t = time.perf_counter()
    for _ in range(30):
        r3l_envs.restore(wrapped, ckpt, via="replay")
    replay_s = (time.perf_counter() - t) / 30

    one = _spawn(n, 1, 1)[0]
    many = _spawn(n, 32, 1)[0]
    four = _spawn(n, 8, 4)
    mb = 1024
    rss1, rss32 = one["after"]["rss"] / mb, many["after"]["rss"] / mb
    anon1, anon32 = one["after"]["anonymous"] / mb, many["after"]["anonymous"] / mb
    base = one["import"]["rss"] / mb
    four_rss = [p["after"]["rss"] / mb for p in four]
    four_pss = [p["after"]["pss"] / mb for p in four]

    data = {
        "products": n,
        "build_s": build_s,
        "index_build_s": index_s,
        "disk_mb": disk_mb,
        "search_ms": {"p50": _pct(ours, 50) * 1e3, "p95": _pct(ours, 95) * 1e3},
        "bm25s_retrieve_ms": {"p50": _pct(baseline, 50) * 1e3, "p95": _pct(baseline, 95) * 1e3},
        "oracle": {"episodes": episodes, "won": won, "steps_per_s": steps_per_s},
        "checkpoint_us": ckpt_s * 1e6,
        "restore_us": restore_s * 1e6,
        "replay_restore_ms": replay_s * 1e3,
        "memory_mb": {
            "import_only": base,
            "1_env": rss1,
            "32_envs": rss32,
            "ratio_32_vs_1": rss32 / rss1,
            "1_env_anonymous": anon1,
            "32_envs_anonymous": anon32,
            "1_env_file_backed": one["after"]["file"] / mb,
            "32_envs_file_backed": many["after"]["file"] / mb,
            "4_procs_x8_rss": four_rss,
            "4_procs_x8_pss": four_pss,
            "1_proc_pss": one["after"]["pss"] / mb,
        },
        "machine": machine(),
    }
    md = f"""## WebShop (`benchmarks/webshop.py --products {n}`)

{machine_line(data["machine"])}

Generated catalogue of {n:,} products (`source="generated"`), built into a fresh cache folder.

| measure | value |
| --- | --- |
| catalogue build (generate + store + index) | {build_s:.1f} s ({disk_mb:.0f} MB on disk) |
| index build alone (bm25s, stemmed) | {index_s:.1f} s |
| search p50 / p95 (deterministic top-50) | {data["search_ms"]["p50"]:.2f} / {data["search_ms"]["p95"]:.2f} ms |
| baseline: bm25s `retrieve(k=50)` p50 / p95 | {data["bm25s_retrieve_ms"]["p50"]:.2f} / \
{data["bm25s_retrieve_ms"]["p95"]:.2f} ms |
| oracle shopper | {won}/{episodes} goals at reward 1.0, {steps_per_s:.0f} steps/s |
| checkpoint / native restore | {ckpt_s * 1e6:.0f} µs / {restore_s * 1e6:.0f} µs \
(replay restore {replay_s * 1e3:.1f} ms, {replay_s / restore_s:.0f}× slower) |
| RSS after imports (no env) | {base:.0f} MB |
| RSS, 1 env / 32 envs in one process (same 32 episodes) | {rss1:.0f} MB / {rss32:.0f} MB (ratio \
{rss32 / rss1:.2f}; target ≤ 1.5) |
| of which private (anonymous), 1 / 32 envs | {anon1:.0f} MB / {anon32:.0f} MB |
| of which mapped catalogue + index (shared page cache), 1 / 32 envs | {one["after"]["file"] / mb:.0f} MB / \
{many["after"]["file"] / mb:.0f} MB |
| 4 processes × 8 envs: RSS each | {", ".join(f"{x:.0f}" for x in four_rss)} MB |
| 4 processes × 8 envs: PSS each (shared pages split) | {", ".join(f"{x:.0f}" for x in four_pss)} MB |
"""
    print(md)
    write_section("webshop", md, data)
    shutil.rmtree(os.environ["R3L_CACHE_DIR"], ignore_errors=True)


if __name__ == "__main__":
    main()
