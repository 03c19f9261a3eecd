"""Learning at an equal sampling budget: R³L vs GRPO, RAFT and OPMD, R³L's ablations, self vs oracle reflection.

``python -m benchmarks.learning`` is the command line (:mod:`benchmarks.learning_study.cli`); the package has one
module per job, each importing only those above it in this list:

* :mod:`~benchmarks.learning_study.grid` — what is run: the ``ENVS`` table (per-env settings), the ``METHODS``, the
  ``MODES`` (budgets: ``quick``, ``cpu``, ``fair``, ``gpu``; ``fair`` reruns the sums under the rules every
  algorithm shares, its page opening with :mod:`~benchmarks.learning_study.fair`'s Holm-corrected table) and
  :func:`~benchmarks.learning_study.grid.build_grid`, which turns a mode into its cells (``methods × envs ×
  seeds``), each a :class:`r3l_learn.loop.train.TrainConfig` in its own run directory. Every method samples
  ``group_size`` trajectories for each of ``tasks_per_step`` tasks per step for the same number of steps (R³L tops
  its groups up with extra bases, ``fill=True``), so the sampled trajectories are equal; the generated tokens are
  not (retries restart at the pivot) and are recorded per run.
* :mod:`~benchmarks.learning_study.rundir` — what a run directory holds and whether its run is done, resumable,
  fresh or of another configuration (stale).
* :mod:`~benchmarks.learning_study.child` — one cell in its own subprocess (a crash costs one cell, not the sweep):
  train or resume, with ``bench/*`` counters (trajectories, successes, tokens generated in rollouts and reflections,
  env steps, retry counters) added to every step's metrics, so that the retry economics are ratios of sums.
* :mod:`~benchmarks.learning_study.kinds` — which CPU kind makes which run: every run of an (env, seed) on the kind
  of that seed's first run, and one eval before training per env and kind.
* :mod:`~benchmarks.learning_study.scheduler` — runs the cells not done yet, ``jobs`` at a time; a finished run is
  skipped, one with checkpoints resumed, so an interrupted sweep resumes where it stopped; ``--time-budget``
  interrupts the runs in flight (SIGINT: the learner saves a checkpoint) and starts no new ones.
* :mod:`~benchmarks.learning_study.stats` — 95 % t-intervals, paired differences by seed, verdicts (no SciPy).
* :mod:`~benchmarks.learning_study.aggregate` — per run, per (method, env) cell, R³L vs every other method (paired
  by seed: the same seed evaluates the same held-out episodes), missing cells, harness checks.
* :mod:`~benchmarks.learning_study.fmt`, :mod:`~benchmarks.learning_study.discussion`,
  :mod:`~benchmarks.learning_study.page`, :mod:`~benchmarks.learning_study.plots` — the report (number format,
  generated discussion, Markdown, figures), rendered from the report data alone, so a saved ``learning.json``
  renders the same page again.
* :mod:`~benchmarks.learning_study.fair`, :mod:`~benchmarks.learning_study.calibration_table`,
  :mod:`~benchmarks.learning_study.reflection_table` — the fair-rules comparison, the calibration table (from
  ``results/calibration/chosen.json``) and the self-reflection rates (from ``results/self_reflection.json``), as
  data and Markdown.
* :mod:`~benchmarks.learning_study.prereg`, :mod:`~benchmarks.learning_study.mechanism`,
  :mod:`~benchmarks.learning_study.prereg_page` — the pre-registered study: its two stages as modes of the same
  grid (``prereg-valid`` chooses each method's learning rate and the strongest baseline on the valid split and
  records them in ``results/prereg.json``; ``prereg`` runs the comparison on the test split from that file alone,
  and :mod:`~benchmarks.learning_study.amendments` admits another CPU kind to it by a declaration made before any
  run there),
  reflect-then-retry's mechanism per step with the verdict that names the first broken link, and its page section.
* :mod:`~benchmarks.learning_study.report` — writes a mode's section of ``benchmarks/RESULTS.md``, its JSON in
  ``benchmarks/results/`` and the plots, from the run directories or from a saved JSON: the pre-registered
  comparison (mode ``prereg``) is the study of record, section and file ``learning``; every other mode has its own
  (``learning_fair``, ``learning_prereg_valid``, ...).

Restart-at-pivot vs retry-from-scratch: the method ``r3l-retry-from-scratch`` is R³L with each retry replayed from
turn 0 with the same guidance (a Reflect-GRPO-style retry at the same budget of N trajectories); the page also
reports what the collected pivot retries would have cost from scratch (tokens and env steps).
"""

from pathlib import Path

#: the benchmarks folder (``results_page`` lives there) and the repository root (run directories, the child's cwd)
BENCHMARKS = Path(__file__).resolve().parents[1]
ROOT = BENCHMARKS.parent
