"""The pre-registered comparison, in two stages on the same grid machinery (:mod:`~benchmarks.learning_study.grid`).

1. ``prereg-valid`` (:func:`valid_mode`): each tuned method (R³L with the oracle reflector and five baselines) at
   each of :data:`LRS`, one seed (:data:`VALID_SEED`, never a comparison seed), trained on the train split and
   evaluated greedily on :data:`VALID_EPISODES` episodes of the **valid** split.
2. :func:`choose` picks per method the learning rate with the best valid success (ties: the smaller rate) and the
   strongest baseline; :func:`registration` and :func:`write_prereg` record it in ``results/prereg.json``, which
   is committed before anything of the test split runs, and never overwritten unless forced.
3. ``prereg`` (:func:`test_mode`): read from that file alone: R³L, GRPO and the strongest baseline over
   :data:`MAIN_SEEDS`, the other baselines and R³L's ablations over :data:`OTHER_SEEDS`, each at its chosen rate,
   evaluated greedily on :data:`TEST_EPISODES` distinct test tasks.

Both stages sample :data:`BUDGET` trajectories per run (steps × tasks × group) and mask cut replies for every
method. Pure functions of their arguments, but for :func:`git_commit` and the file reads named so.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import ROOT, quota
from .amendments import amended, amendment_for
from .grid import CPU_AUTOCAST, ENVS, METHODS, REFERENCE, EnvSetting, Method, Mode
from .mechanism import THRESHOLDS

#: the stages' mode names (``python -m benchmarks.learning --mode ...``)
VALID, TEST = "prereg-valid", "prereg"
PREREG_MODES = frozenset({VALID, TEST})
#: the command that makes the pre-registration (named in the error when it is missing)
REGISTER_COMMAND = "python -m benchmarks.learning --mode prereg-valid --model PATH --preregister"
PREREG_JSON = "prereg.json"

#: the envs of a pre-registration (the start model is warmed up on this env's train split)
PREREG_ENVS = ("treasure-hunter", "coin-collector-5")
#: the learning rates tried on the valid split
LRS = (1e-5, 3e-5, 1e-4)
#: the methods whose learning rate is chosen on the valid split, R³L first; the strongest baseline is one of the
#: others (ties: the first listed, so GRPO, the paper's main baseline, wins a tie)
# GRPO − KL and Dr. GRPO are left out: the fair-rules rerun on the sums found neither change to GRPO detectable, and
# each tuned method costs three valid runs per env (about 30 CPU-minutes each on 2 cores)
TUNED = (REFERENCE, "grpo", "raft", "opmd")
#: R³L's ablations and the privilege control, run at the rate of the method named beside them: the ablations
#: change R³L's parts, not its loss's scale; RAFT + expert demos is RAFT's algorithm with the oracle's information
ABLATIONS = {
    "r3l-no-reflect-retry": REFERENCE,
    "r3l-no-pivot-credit": REFERENCE,
    "r3l-no-amplification": REFERENCE,
    "r3l-retry-from-scratch": REFERENCE,
    "raft-expert": "raft",
}
VALID_SEED = 1000
MAIN_SEEDS = tuple(range(10))  # R³L, GRPO and the strongest baseline
OTHER_SEEDS = tuple(range(5))  # the other baselines and the ablations
STEPS, TASKS_PER_STEP, GROUP_SIZE = 8, 4, 8
BUDGET = STEPS * TASKS_PER_STEP * GROUP_SIZE  # sampled trajectories per run: 256
VALID_EPISODES, TEST_EPISODES = 64, 200
#: the same start for every held-out episode of a run and of every seed (when the learner has the field): the
#: test tasks are then the same for every seed, and the initial model is evaluated once per env
EVAL_SEED = 10_000
#: TrainConfig fields every cell of both stages shares
SHARED = {"autocast": CPU_AUTOCAST, "eval_batch_size": 32, "mask_truncated": True, "eval_temperature": 0.0}


def trainconfig_fields() -> frozenset[str]:
    """The fields of today's :class:`r3l_learn.loop.config.TrainConfig` (a stage passes an optional field only
    where the learner has it, so every cell's config stays valid)."""
    from r3l_learn.loop.config import TrainConfig

    return frozenset(f.name for f in dataclasses.fields(TrainConfig))


def lr_key(method: str, lr: float) -> str:
    """The valid stage's key of ``method`` at learning rate ``lr`` (e.g. ``grpo@lr3e-05``)."""
    return f"{method}@lr{lr:g}"


def settings(fields: frozenset[str] | None = None) -> dict[str, Any]:
    """What both stages run with, as recorded in ``prereg.json`` (the test stage refuses to run with other
    settings than the registered ones)."""
    fields = trainconfig_fields() if fields is None else fields
    return {
        "budget": {"steps": STEPS, "tasks_per_step": TASKS_PER_STEP, "group_size": GROUP_SIZE, "trajectories": BUDGET},
        "lrs": list(LRS),
        "tuned": list(TUNED),
        "ablations": dict(ABLATIONS),
        "valid": {"split": "valid", "episodes": VALID_EPISODES, "seed": VALID_SEED, "eval_temperature": 0.0},
        "test": {
            "split": "test",
            "episodes": TEST_EPISODES,
            "main_seeds": list(MAIN_SEEDS),
            "other_seeds": list(OTHER_SEEDS),
            "eval_temperature": 0.0,
            "eval_seed": EVAL_SEED if "eval_seed" in fields else None,
        },
        "shared": dict(SHARED),
        "measure_amplification": "measure_amplification" in fields,
        "verdict_thresholds": dict(THRESHOLDS),
        "rule": "per method, the learning rate with the best valid success (ties: the smaller rate); the strongest "
        "baseline: the method other than R³L with the best valid success at its chosen rate (ties: the first of "
        f"{', '.join(TUNED[1:])})",
    }


def valid_mode(model: str, envs: Sequence[str] | None = None) -> tuple[Mode, dict[str, Method]]:
    """The ``prereg-valid`` stage: every tuned method at every rate of :data:`LRS`, seed :data:`VALID_SEED`, held
    out on the valid split; its methods are the tuned ones keyed per rate (:func:`lr_key`)."""
    envs = PREREG_ENVS if envs is None else envs
    methods = {lr_key(m, lr): _at_lr(METHODS[m], lr) for m in TUNED for lr in LRS}
    mode = Mode(
        VALID,
        f"the pre-registration's valid stage: {len(TUNED)} methods × learning rates "
        f"{', '.join(f'{lr:g}' for lr in LRS)}, seed {VALID_SEED}, {STEPS} steps of {TASKS_PER_STEP} tasks × "
        f"{GROUP_SIZE} trajectories ({BUDGET} per run), greedy eval on {VALID_EPISODES} episodes of the valid split "
        "after training, cut replies masked for every method; it chooses each method's learning rate and the "
        "strongest baseline before any test-split run",
        envs=tuple(envs),
        methods=tuple(methods),
        seeds=(VALID_SEED,),
        steps=STEPS,
        tasks_per_step=TASKS_PER_STEP,
        group_size=GROUP_SIZE,
        eval_episodes=VALID_EPISODES,
        eval_every=0,
        lr=LRS[0],
        model=model,
        extra={**SHARED, "train_split": "train", "eval_split": "valid"},
        cell_config={f"{lr_key(m, lr)}|{e}": {"lr": lr} for m in TUNED for lr in LRS for e in envs},
        seed_major=True,
    )
    return mode, methods


def _at_lr(method: Method, lr: float) -> Method:
    return dataclasses.replace(method, label=f"{method.label}, lr {lr:g}")


def valid_table(cells: dict[str, Any], mode: Mode) -> dict[str, dict[str, dict[str, float | None]]]:
    """Per env, per tuned method, per rate (``f"{lr:g}"``): the valid success of the valid stage's run (``None``
    where it has not finished)."""
    out: dict[str, dict[str, dict[str, float | None]]] = {}
    for env in mode.envs:
        out[env] = {}
        for m in TUNED:
            out[env][m] = {}
            for lr in LRS:
                cell = cells.get(f"{lr_key(m, lr)}|{env}") or {}
                out[env][m][f"{lr:g}"] = (cell.get("success") or {}).get("mean")
    return out


def choose(valid: dict[str, dict[str, float | None]]) -> dict[str, Any]:
    """The pre-registered choices of one env from its valid table (per method, per rate ``f"{lr:g}"``: the valid
    success): per method the rate with the best valid success (ties: the smaller rate), and the strongest
    baseline, the method other than R³L with the best valid success at its chosen rate (ties: the first of
    :data:`TUNED`).

    Raises:
        ValueError: a tuned method or rate has no valid success (its run has not finished).
    """
    missing = [f"{m} at lr {lr:g}" for m in TUNED for lr in LRS if (valid.get(m) or {}).get(f"{lr:g}") is None]
    if missing:
        raise ValueError(f"the valid stage has not finished: no valid success for {', '.join(missing)}")
    lrs = {m: max(LRS, key=lambda lr, m=m: (valid[m][f"{lr:g}"], -lr)) for m in TUNED}
    success = {m: valid[m][f"{lrs[m]:g}"] for m in TUNED}
    baselines = [m for m in TUNED if m != REFERENCE]
    strongest = max(baselines, key=lambda m: (success[m], -baselines.index(m)))
    return {"lr": lrs, "valid_success": success, "strongest_baseline": strongest}


def git_commit(root: Path = ROOT) -> dict[str, Any]:
    """The checkout's commit, and whether the study's code or the learner differ from it (uncommitted)."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        dirty = git("status", "--porcelain", "--", "benchmarks/learning_study", "r3l_learn", "wrappers", "r3l_envs")
    except (OSError, subprocess.CalledProcessError) as err:
        return {"commit": None, "uncommitted_changes": None, "why": str(err)}
    return {"commit": commit, "uncommitted_changes": bool(dirty)}


def uncommitted(path: Path) -> bool:
    """Whether ``path`` (the pre-registration) has changes git has not committed, or is not tracked at all; a
    file outside any git checkout (a test's folder) counts as committed: there is nothing to check it against."""
    path = Path(path).resolve()
    try:
        out = subprocess.run(
            ["git", "status", "--porcelain", "--", path.name], cwd=path.parent, capture_output=True, text=True
        )
    except OSError:
        return False
    return out.returncode == 0 and bool(out.stdout.strip())


def read_warmup(model: str) -> dict[str, Any] | None:
    """The ``warmup.json`` beside a start model's weights (``r3l warmup`` writes it), or ``None`` for a model that
    is not such a folder."""
    path = Path(model) / "warmup.json"
    return json.loads(path.read_text()) if path.is_file() else None


def registration(
    cells: dict[str, Any],
    mode: Mode,
    *,
    command: str,
    envs: dict[str, EnvSetting] = ENVS,
    commit: dict[str, Any] | None = None,
    date: str | None = None,
) -> dict[str, Any]:
    """The pre-registration (``prereg.json``) from the valid stage's cells: the settings, the valid table, the
    choices per env, the start model (and its ``warmup.json``), the date and the git commit.

    Raises:
        ValueError: the valid stage has not finished (see :func:`choose`).
    """
    table = valid_table(cells, mode)
    return {
        "what": "the pre-registration of the learning study's comparison: settings chosen on the valid split, "
        "before any run on the test split",
        "date": date or datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        **(commit if commit is not None else git_commit()),
        "command": command,
        "model": mode.model,
        "warmup": read_warmup(mode.model),
        "settings": settings(),
        "envs": {e: dataclasses.asdict(envs[e]) for e in mode.envs},
        "valid": table,
        "choices": {e: choose(table[e]) for e in mode.envs},
    }


def write_prereg(data: dict[str, Any], path: Path, *, force: bool = False) -> None:
    """Write the pre-registration to ``path``; an existing one is kept unless ``force`` (it is the record the
    comparison was committed to).

    Raises:
        FileExistsError: ``path`` exists and ``force`` is off.
    """
    if path.exists() and not force:
        raise FileExistsError(
            f"{path} exists: it is the pre-registration the comparison is committed to; pass --force to replace it"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")


def read_prereg(path: Path) -> dict[str, Any]:
    """The pre-registration at ``path``.

    Raises:
        FileNotFoundError: there is none yet (the message names the command that makes it).
        ValueError: the file is not a pre-registration.
    """
    if not path.is_file():
        raise FileNotFoundError(
            f"no pre-registration at {path}: run the valid stage and register its choices first "
            f"(`{REGISTER_COMMAND}`), then commit {path.name}"
        )
    data = json.loads(path.read_text())
    if not isinstance(data, dict) or not {"settings", "choices", "envs"} <= set(data):
        raise ValueError(f"{path} is not a pre-registration (no settings, choices and envs)")
    return data


def check_registered(
    prereg: dict[str, Any],
    model: str,
    envs: dict[str, EnvSetting] = ENVS,
    fields: frozenset[str] | None = None,
    amendments: Sequence[dict[str, Any]] = (),
) -> list[str]:
    """What differs between the test stage about to run and its pre-registration (empty: nothing): the settings,
    an env's setting, the start model's ``warmup.json``. On a CPU kind an amendment admits (``amendments``), the
    registration as amended for that kind (its autocast, its start model)."""
    from r3l_learn.policies.device import cpu_kind

    kind = cpu_kind()
    amendment = amendment_for(amendments, kind)
    expected = amended(prereg, amendment)
    problems = []
    now = settings(fields)
    if expected["settings"] != now:
        changed = differences(expected["settings"], now)
        problems.append(f"the stages' settings changed since the pre-registration (prereg.settings: {changed})")
        if expected["settings"].get("shared", {}).get("autocast") != now["shared"]["autocast"]:
            problems.append(
                f"autocast is resolved per CPU and this one has {kind}: the registered autocast needs a CPU of the "
                "kind the study was registered on, or one an amendment admits (see the guide: `--declare-kind`)"
            )
    for env, setting in prereg["envs"].items():
        if env not in envs or dataclasses.asdict(envs[env]) != setting:
            problems.append(f"the env setting {env!r} differs from the pre-registered one")
    warmup = read_warmup(model)
    if expected.get("warmup") != warmup:
        detail = differences(expected.get("warmup"), warmup) if warmup else "it has none"
        whose = f"the start model its amendment admits on {kind}" if amendment else "the pre-registered model"
        command = rebuild_command_for(expected.get("warmup"), model)
        hint = f"; rebuild it into an empty folder with `{command}`" if command else ""
        problems.append(
            f"the start model {model}'s warmup.json differs from {whose}'s ({detail}; a rebuild is bit for bit only "
            f"on a CPU of the kind that made the recorded one){hint}"
        )
    return problems


def rebuild_command_for(warmup: dict[str, Any] | None, model: str) -> str | None:
    """The ``r3l warmup`` line that rebuilds a ``warmup.json`` record into ``model``, or ``None`` for a record that
    does not name its recipe (its env, starting model and settings)."""
    if not (isinstance(warmup, dict) and {"env_id", "model", "settings"} <= warmup.keys()):
        return None
    from r3l_learn.cli.warmup_args import rebuild_command  # imports torch: only where a record needs it

    return rebuild_command(warmup, model)


def differences(registered: Any, now: Any) -> str:
    """Where ``now`` differs from ``registered`` (nested dicts), as ``key: registered -> now`` items (at most 4)."""
    found: list[str] = []

    def walk(a: Any, b: Any, path: str) -> None:
        if isinstance(a, dict) and isinstance(b, dict):
            for key in sorted(set(a) | set(b), key=str):
                walk(a.get(key), b.get(key), f"{path}.{key}" if path else str(key))
        elif a != b:
            found.append(f"{path or 'the whole record'}: {brief(a)} -> {brief(b)}")

    walk(registered, now, "")
    return "; ".join(found[:4]) + (f"; and {len(found) - 4} more" if len(found) > 4 else "")


def brief(value: Any, limit: int = 60) -> str:
    """``value`` as JSON, cut to ``limit`` characters."""
    text = json.dumps(value, default=repr)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def main_methods(prereg: dict[str, Any]) -> dict[str, list[str]]:
    """Per env of a pre-registration, its main cells' methods: R³L, GRPO and the strongest baseline (once each)."""
    return {e: list(dict.fromkeys((REFERENCE, "grpo", c["strongest_baseline"]))) for e, c in prereg["choices"].items()}


def test_mode(
    prereg: dict[str, Any],
    model: str,
    fields: frozenset[str] | None = None,
    seed_plan: dict[str, Any] | None = None,
) -> tuple[Mode, dict[str, Method]]:
    """The ``prereg`` stage from a pre-registration: R³L, GRPO and the strongest baseline over
    :data:`MAIN_SEEDS`, the other tuned baselines and the ablations over :data:`OTHER_SEEDS`, each cell at its
    pre-registered rate, the R³L family measuring its amplification where the learner can; seed-major, so a sweep
    stopped early leaves whole seeds. ``seed_plan``: the seed amendment's plan (``{"main"|"other": {"candidates",
    "quota"}}``, see :mod:`~benchmarks.learning_study.quota`), whose candidates and quotas replace those seeds."""
    fields = trainconfig_fields() if fields is None else fields
    envs = tuple(prereg["choices"])
    keys = [REFERENCE, "grpo", *(m for m in TUNED[1:] if m != "grpo"), *ABLATIONS]
    methods = {k: METHODS[k] for k in keys}
    # the privilege control gives half of each group the expert's plan (the oracle's information)
    methods["raft-expert"] = dataclasses.replace(METHODS["raft-expert"], config={"expert_demos": GROUP_SIZE // 2})
    main_seeds, other_seeds = MAIN_SEEDS, OTHER_SEEDS
    if seed_plan:
        main_seeds, other_seeds = (tuple(seed_plan[k]["candidates"]) for k in ("main", "other"))
    main_of = main_methods(prereg)
    cell_seeds, cell_config = {}, {}
    for env in envs:
        choice = prereg["choices"][env]
        for m in keys:
            cell_seeds[f"{m}|{env}"] = main_seeds if m in main_of[env] else other_seeds
            lr = choice["lr"][ABLATIONS.get(m, m)]
            measure = methods[m].algo == "r3l" and "measure_amplification" in fields
            cell_config[f"{m}|{env}"] = {"lr": lr, **({"measure_amplification": True} if measure else {})}
    fixed_eval = "eval_seed" in fields
    quotas: tuple[dict[str, Any], ...] = ()
    seeds = (
        f"over seeds {MAIN_SEEDS[0]}-{MAIN_SEEDS[-1]}, the other baselines and R³L's ablations over seeds "
        f"{OTHER_SEEDS[0]}-{OTHER_SEEDS[-1]}"
    )
    if seed_plan:
        others = {e: [m for m in keys if m not in main_of[e]] for e in envs}
        quotas = quota.groups(main_of, others, REFERENCE, seed_plan)
        m, o = seed_plan["main"], seed_plan["other"]
        seeds = (
            f"until {m['quota']} seeds each finished (candidates {main_seeds[0]}-{main_seeds[-1]}), the other "
            f"baselines and R³L's ablations until {o['quota']} seeds each finished beside R³L's (candidates "
            f"{other_seeds[0]}-{other_seeds[-1]}), by the seed amendment's quotas"
        )
    mode = Mode(
        TEST,
        f"the pre-registered comparison: R³L, GRPO and the strongest baseline (chosen on the valid split) {seeds}, "
        f"each at its pre-registered learning rate; {STEPS} steps of {TASKS_PER_STEP} tasks × "
        f"{GROUP_SIZE} trajectories ({BUDGET} per run); greedy eval on {TEST_EPISODES} distinct test tasks after "
        "training; cut replies masked for every method; from the start model given on the command line",
        envs=envs,
        methods=tuple(keys),
        seeds=MAIN_SEEDS,
        steps=STEPS,
        tasks_per_step=TASKS_PER_STEP,
        group_size=GROUP_SIZE,
        eval_episodes=TEST_EPISODES,
        eval_every=0,
        lr=prereg["choices"][envs[0]]["lr"][REFERENCE],
        model=model,
        extra={
            **SHARED,
            "train_split": "train",
            "eval_split": "test",
            **({"eval_seed": EVAL_SEED} if fixed_eval else {}),
        },
        cell_seeds=cell_seeds,
        cell_config=cell_config,
        before_once_per_env=fixed_eval,
        seed_major=True,
        seed_quotas=quotas,
    )
    return mode, methods
