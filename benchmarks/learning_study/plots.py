"""The page's plots: per env, held-out success and score vs sampled trajectories, mean over seeds with 95 % CI
bands, R³L beside the baselines and beside its variants; and the pre-registered study's mechanism per step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .aggregate import mean_curve
from .grid import METHODS, Method, Mode


def plot_curves(
    mode: Mode, agg: dict[str, Any], plots_dir: Path, methods: dict[str, Method] = METHODS
) -> dict[str, Path]:
    """Per env: held-out success and score vs sampled trajectories, mean over seeds with a 95 % CI band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plots_dir.mkdir(parents=True, exist_ok=True)
    written = {}
    groups = {
        "R³L vs baselines": [m for m in mode.methods if methods[m].role in ("r3l", "baseline")],
        "R³L variants": [m for m in mode.methods if methods[m].role != "baseline"],
    }
    for env in mode.envs:
        fig, axes = plt.subplots(2, 2, figsize=(11, 6.5), sharex=True, squeeze=False)
        drawn = False
        for col, (title, keys) in enumerate(groups.items()):
            for row, metric in enumerate(("success", "score")):
                ax = axes[row][col]
                for key in keys:
                    runs = [r for r in agg["runs"] if r["env"] == env and r["method"] == key and r["finished"]]
                    if not runs:
                        continue
                    points = mean_curve(runs, metric)
                    xs = [p["trajectories"] for p in points]
                    ms = [p["mean"] for p in points]
                    los = [p["mean"] if p["lo"] is None else p["lo"] for p in points]
                    his = [p["mean"] if p["hi"] is None else p["hi"] for p in points]
                    if not xs:
                        continue
                    line = ax.plot(xs, ms, marker="o", label=f"{methods[key].label} (n={len(runs)})")[0]
                    ax.fill_between(xs, los, his, color=line.get_color(), alpha=0.15)
                    drawn = True
                ax.set_title(f"{env}: held-out {metric} — {title}", fontsize=9)
                ax.set_ylim(-0.03, 1.03)
                ax.grid(alpha=0.3)
                if row == 1:
                    ax.set_xlabel("sampled trajectories")
                if ax.lines:
                    ax.legend(fontsize=7)
        fig.tight_layout()
        if drawn:
            path = plots_dir / f"{env}.png"
            fig.savefig(path, dpi=100)
            written[env] = path
        plt.close(fig)
    return written


def plot_mechanism(
    mode: Mode, runs: list[dict[str, Any]], plots_dir: Path, methods: dict[str, Method] = METHODS
) -> dict[str, Path]:
    """Per env: reflect-then-retry's mechanism per training step (:mod:`~benchmarks.learning_study.mechanism`),
    mean over the finished seeds of R³L and of its ablations: the share of groups where every base failed, rescued
    ÷ all-failed groups, the retries' share of the loss, the amplification's share of the gradient."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .mechanism import SHARES, series

    keys = [m for m in mode.methods if methods[m].role in ("r3l", "ablation")]
    written = {}
    for env in mode.envs:
        fig, axes = plt.subplots(2, 2, figsize=(11, 6.5), sharex=True, squeeze=False)
        drawn = False
        for key in keys:
            done = [r for r in runs if r["env"] == env and r["method"] == key and r["finished"]]
            lines = series(done)
            for ax, share in zip((a for row in axes for a in row), SHARES, strict=True):
                if lines[share]:
                    steps, values = zip(*lines[share], strict=True)
                    ax.plot(steps, values, marker="o", label=f"{methods[key].label} (n={len(done)})")
                    drawn = True
        for ax, title in zip((a for row in axes for a in row), SHARES.values(), strict=True):
            ax.set_title(f"{env}: {title}", fontsize=9)
            ax.set_ylim(-0.03, 1.03)
            ax.grid(alpha=0.3)
            ax.set_xlabel("training step")
            if ax.lines:
                ax.legend(fontsize=7)
        fig.tight_layout()
        if drawn:
            plots_dir.mkdir(parents=True, exist_ok=True)
            path = plots_dir / f"{env}-mechanism.png"
            fig.savefig(path, dpi=100)
            written[env] = path
        plt.close(fig)
    return written
