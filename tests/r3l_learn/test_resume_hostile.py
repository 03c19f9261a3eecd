"""``--resume`` reads untrusted files: a checkpoint (``.pt``), the metrics log, the recorded evals and the saved
config. Whatever they hold, a resume either ends in ``ResumeError`` with the model, optimiser, RNGs, task stream
and files untouched, or in a state equal to the file's that trains on. Targeted cases name the entry that does not
fit; a Hypothesis fuzz mutates a real checkpoint of a tiny model (drops entries, reshapes and retypes tensors,
puts in random plain data) and checks that property on each."""

from __future__ import annotations

import copy
import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from r3l_learn.errors import R3LLearnError
from r3l_learn.loop.checkpoints import (
    ResumeError,
    latest_checkpoint,
    load_checkpoint,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from r3l_learn.loop.setup import TaskStream
from r3l_learn.loop.state import EVALS, recorded_evals, resume_state, trainable_state
from r3l_learn.loop.train import TrainConfig
from r3l_learn.policies.models import tiny_model

Q_PROJ = "model.layers.0.self_attn.q_proj.weight"
TASKS = [f"corridor-train-{i}" for i in range(5)]


def _config(out_dir: Path) -> TrainConfig:
    return TrainConfig(
        env="r3ltest/Corridor-v0",
        model="tiny-random",
        algo="grpo",
        steps=3,
        tasks_per_step=2,
        group_size=2,
        actions="constrained",
        lr=1e-2,
        eval_episodes=0,
        out_dir=str(out_dir),
        tensorboard=False,
        progress=False,
    )


def _model_and_optimizer(config: TrainConfig, seed: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """What ``train`` builds for a run: the model (a tiny random Llama here) and AdamW over its trainable weights."""
    model, _ = tiny_model(seed=seed, hidden_size=16, num_layers=1)
    trainable = [p for p in model.parameters() if p.requires_grad]
    return model, torch.optim.AdamW(trainable, lr=config.lr, weight_decay=config.weight_decay)


def _train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    ids = torch.tensor([[1, 5, 9, 13, 2]])
    model(ids, labels=ids).loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def _checkpoint_state(config: TrainConfig) -> dict:
    """A real checkpoint's dict, as ``train`` saves it after its first step (AdamW moments included)."""
    model, optimizer = _model_and_optimizer(config, seed=1)
    _train_step(model, optimizer)
    return {
        "step": 1,
        "cursor": config.tasks_per_step,
        "config": config.to_dict(),
        "model": {n: t.clone() for n, t in trainable_state(model).items()},
        "optimizer": copy.deepcopy(optimizer.state_dict()),
        "rng": rng_state(),
        "eval_before": None,
    }


def _write_run(out: Path, state: dict) -> Path:
    """A run directory holding ``state`` as its newest checkpoint, and the metrics log of steps 1 and 2."""
    path = save_checkpoint(out / "checkpoints", 1, state)
    (out / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "train/reward": 0.5}) + "\n" for s in (1, 2)))
    return path


class _Resumer:
    """A fresh run's parts (another model than the file's), and what they were before a resume tried them."""

    def __init__(self, config: TrainConfig):
        self.config = config
        self.model, self.optimizer = _model_and_optimizer(config, seed=0)
        self.stream = TaskStream(TASKS, config.seed)
        self.weights = {n: p.detach().clone() for n, p in self.model.named_parameters()}
        self.optimizer_state = copy.deepcopy(self.optimizer.state_dict())
        self.rngs = (random.getstate(), np.random.get_state(), torch.get_rng_state())
        out = Path(config.out_dir)
        self.files = {p: p.read_bytes() for p in (out / "metrics.jsonl", out / EVALS) if p.is_file()}

    def resume(self) -> tuple[int, object]:
        return resume_state(self.config, self.model, self.optimizer, self.stream)

    def assert_unchanged(self) -> None:
        for name, param in self.model.named_parameters():
            assert torch.equal(param, self.weights[name]), f"{name} changed"
        assert self.optimizer.state_dict() == self.optimizer_state  # no state: nothing was loaded
        python, numpy, torch_state = self.rngs
        assert random.getstate() == python and torch.equal(torch.get_rng_state(), torch_state)
        assert all(np.array_equal(a, b) for a, b in zip(np.random.get_state(), numpy, strict=True))
        assert self.stream.cursor == 0
        assert {p: p.read_bytes() for p in self.files} == self.files

    def assert_holds(self, state: dict) -> None:
        """The run now holds exactly the file's state, and trains on from it."""
        for name, param in self.model.named_parameters():
            torch.testing.assert_close(param.detach(), state["model"][name], rtol=0, atol=0)
        loaded = self.optimizer.state_dict()["state"]
        assert loaded.keys() == state["optimizer"]["state"].keys()
        for index, entry in state["optimizer"]["state"].items():
            for key, value in entry.items():
                assert (
                    float(loaded[index][key]) == float(value)
                    if key == "step"
                    else torch.equal(loaded[index][key], value)
                )
        assert torch.equal(torch.get_rng_state(), state["rng"]["torch"])
        assert random.getstate() == (3, tuple(state["rng"]["python"][1]), state["rng"]["python"][2])
        assert self.stream.cursor == state["cursor"]
        _train_step(self.model, self.optimizer)  # the loaded optimiser state fits the parameters


@pytest.fixture(autouse=True)
def _global_rngs_kept():
    """A resume sets the global RNGs: give the other tests theirs back."""
    saved = rng_state()
    yield
    set_rng_state(saved)


@pytest.fixture
def run(tmp_path):
    """A run directory with a real checkpoint of step 1 (another model's weights than the resumer's)."""
    config = _config(tmp_path / "run")
    state = _checkpoint_state(config)
    _write_run(tmp_path / "run", state)
    return config, state


def _forge(config: TrainConfig, state: dict) -> _Resumer:
    _write_run(Path(config.out_dir), state)
    return _Resumer(config)


def test_a_real_checkpoint_resumes_into_exactly_its_state(run):
    config, state = run
    resumer = _Resumer(config)
    assert resumer.resume() == (1, None)
    resumer.assert_holds(state)
    assert [r["step"] for r in map(json.loads, (Path(config.out_dir) / "metrics.jsonl").open())] == [1]


def test_resume_error_is_an_r3l_learn_error():
    assert issubclass(ResumeError, R3LLearnError) and issubclass(R3LLearnError, Exception)


def test_a_weight_of_another_shape_is_refused_by_name_and_nothing_changes(run):
    config, state = run
    state["model"][Q_PROJ] = torch.full((1,), 0.5)  # what broadcast into every weight before
    resumer = _forge(config, state)
    with pytest.raises(ResumeError, match=rf"{Q_PROJ} has shape \(1,\), the model's is \(16, 16\)"):
        resumer.resume()
    resumer.assert_unchanged()


def test_a_weight_of_another_dtype_is_refused_by_name(run):
    config, state = run
    state["model"][Q_PROJ] = state["model"][Q_PROJ].double()
    resumer = _forge(config, state)
    with pytest.raises(ResumeError, match=rf"{Q_PROJ} has dtype float64, the model's is float32"):
        resumer.resume()
    resumer.assert_unchanged()


def test_missing_and_extra_weights_are_named(run):
    config, state = run
    weights = state["model"]
    del weights["model.norm.weight"]
    resumer = _forge(config, state)
    with pytest.raises(ResumeError, match=r"lacks 1 trainable weights of the model \(model\.norm\.weight\)"):
        resumer.resume()
    weights["model.norm.weight"], weights["lm_head.extra"] = torch.ones(16), torch.ones(3)
    resumer = _forge(config, state)
    with pytest.raises(ResumeError, match=r"weights the model does not train \(lm_head\.extra\)"):
        resumer.resume()
    resumer.assert_unchanged()


@pytest.mark.parametrize(
    ("forge", "named"),
    [
        (lambda o: o["state"][0].__setitem__("exp_avg", torch.zeros(3)), r"state\[0\] \(model\.embed_tokens\.weight\)"),
        (lambda o: o["state"][1].__setitem__("exp_avg_sq", -o["state"][1]["exp_avg_sq"] - 1), r"negative values"),
        (lambda o: o["state"][2].__setitem__("step", torch.tensor(float("nan"))), r"state\[2\].*step is nan"),
        (lambda o: o["state"][2].__setitem__("step", torch.tensor(-3.0)), r"step is -3\.0, not a whole number"),
        (lambda o: o["state"][0].pop("exp_avg_sq"), r"lacks exp_avg_sq"),
        (lambda o: o["state"].__setitem__(99, o["state"][0]), r"entry 99, not a parameter index"),
        (lambda o: o["param_groups"][0]["params"].pop(), r"param_groups\[0\] holds 10 parameters, this run's group 11"),
        (lambda o: o["param_groups"].append(dict(o["param_groups"][0])), r"2 parameter groups, this run's has 1"),
        (lambda o: o["param_groups"][0].__setitem__("lr", 10.0), r"lr is 10\.0, this run's is 0\.01"),
        (lambda o: o["param_groups"][0].__setitem__("betas", "high"), r"betas is 'high'"),
    ],
)
def test_optimizer_state_that_does_not_fit_is_refused(run, forge, named):
    config, state = run
    forge(state["optimizer"])
    resumer = _forge(config, state)
    with pytest.raises(ResumeError, match=named):
        resumer.resume()
    resumer.assert_unchanged()


def _set(path: tuple, value: object):
    def forge(state: dict) -> None:
        *parents, last = path
        target = state
        for key in parents:
            target = target[key]
        target[last] = value

    return forge


def _wide_list() -> list:
    """A list of a thousand references to a list of a thousand references to a list of a thousand zeros."""
    inner = [0] * 1000
    middle = [inner] * 1000
    return [middle] * 1000


def _self_list() -> list:
    looped: list = []
    looped.append(looped)
    return looped


@pytest.mark.parametrize(
    "forge",
    [
        _set(("step",), "1"),
        _set(("step",), float("nan")),
        _set(("step",), -1),
        _set(("step",), 7),  # not the step the file is named for
        _set(("cursor",), None),
        _set(("cursor",), 5),  # one step of 2 tasks took 2
        _set(("config",), ["lr", 0.01]),
        _set(("config", "lr"), 0.5),
        _set(("config", "lr"), torch.ones(2)),
        _set(("config", "no_such_field"), 1),
        _set(("model",), [1, 2, 3]),
        _set(("model", Q_PROJ), "weights"),
        _set(("model", Q_PROJ), torch.full((16, 16), float("inf"))),
        _set(("optimizer",), None),
        _set(("optimizer", "state", 0), 3),
        _set(("rng",), {}),
        _set(("rng", "python"), (3, (1, 2, 3), None)),
        _set(("rng", "numpy"), ("PCG64", [0] * 624, 0, 0, 0.0)),
        _set(("rng", "numpy"), ("MT19937", ["x"] * 624, 0, 0, 0.0)),
        _set(("rng", "torch"), torch.zeros(5056, dtype=torch.uint8)),  # no valid Mersenne Twister state
        _set(("rng", "torch"), torch.zeros(8)),
        _set(("eval_before",), {"env_id": 1}),
        _set(("eval_before",), "good"),
        _set(("extra",), 1),
        _set(("step",), 10**5000),  # its digits are more than Python prints
        _set(("config", "env_kwargs"), {"k": _wide_list()}),  # a billion values, in a small file
        _set(("config", "env_kwargs"), {"k": _self_list()}),
        lambda state: state.pop("rng"),
    ],
)
def test_garbage_plain_data_is_a_resume_error_and_changes_nothing(run, forge):
    config, state = run
    forge(state)
    resumer = _forge(config, state)
    with pytest.raises(ResumeError):
        resumer.resume()
    resumer.assert_unchanged()


@pytest.mark.parametrize("payload", [b"\x80garbage", b"[1, 2, 3]", b'{"before": {"env_id": "x"}}', b"[" * 100_000])
def test_garbage_beside_the_checkpoint_is_a_resume_error(run, payload):
    config, state = run
    for name in ("metrics.jsonl", EVALS):
        resumer = _forge(config, state)
        (Path(config.out_dir) / name).write_bytes(payload + b"\n" + b'{"step": 1}\n')
        resumer = _Resumer(config)
        with pytest.raises(ResumeError, match=re.escape(name)):
            resumer.resume()
        resumer.assert_unchanged()


def test_recorded_evals_refuse_values_of_another_type(tmp_path):
    summary = {"env_id": "e", "split": "test", "episodes": 2, "success_rate": 0.5, "mean_score": 0.5}
    summary |= {"mean_reward": 0.5, "mean_turns": 2.0, "mean_tokens": 9.0, "parse_error_rate": 0.0}
    summary |= {"stop_reasons": {"won": 1}, "seconds": 1.0, "tokens_per_second": 9.0}
    (tmp_path / EVALS).write_text(json.dumps({"before": summary, "after": summary}))
    before, after = recorded_evals(tmp_path, None)
    assert before == after and after.success_rate == 0.5
    for field, bad in (("episodes", -1), ("success_rate", "NaN"), ("stop_reasons", {"won": 1.5}), ("seconds", None)):
        (tmp_path / EVALS).write_text(json.dumps({"before": summary, "after": {**summary, field: bad}}))
        with pytest.raises(ResumeError, match=f"after.{field}"):
            recorded_evals(tmp_path, None)
    (tmp_path / EVALS).write_text(json.dumps({"after": {**summary, "success_rate": float("nan")}}))
    with pytest.raises(ResumeError, match="success_rate"):
        recorded_evals(tmp_path, None)


def test_a_saved_config_json_must_be_a_valid_config(tmp_path):
    from r3l_learn.loop.state import read_saved_config

    path = tmp_path / "config.json"
    path.write_text(json.dumps(_config(tmp_path).to_dict()))
    assert read_saved_config(path)["env"] == "r3ltest/Corridor-v0"
    for bad in ("not json", "[]", json.dumps({"steps": "many"}), json.dumps({"lr": -1}), json.dumps({"bogus": 1})):
        path.write_text(bad)
        with pytest.raises(ResumeError, match=r"config\.json"):
            read_saved_config(path)


# ---------------------------------------------------------------------------------------------- the fuzz
_DTYPES = (torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.uint8, torch.bool)
_tensors = st.builds(
    lambda shape, dtype, fill: torch.full(shape, fill).to(dtype),
    st.lists(st.integers(0, 4), max_size=3).map(tuple),
    st.sampled_from((torch.float32, *_DTYPES)),
    st.floats(-2.0, 2.0),
)
_leaves = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.integers(-2, 5000)
    | st.integers(15_000, 20_000).map(lambda bits: 1 << bits)  # more digits than Python prints
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=6)
    | _tensors
)
_plain = st.recursive(
    _leaves,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=4) | st.integers(-1, 30), inner, max_size=3)
    ),
    max_leaves=8,
)


def _places(value: object, path: tuple = ()) -> list[tuple]:
    """Where a mutation may land: every entry of the nested state (of long word lists, the first and the last)."""
    places = [path]
    if isinstance(value, dict):
        items = list(value.items())
    elif isinstance(value, list | tuple):
        items = list(enumerate(value))
        items = items if len(items) <= 8 else [items[0], items[-1]]
    else:
        items = []
    for key, item in items:
        places += _places(item, (*path, key))
    return places


_TENSORS = {("model",), ("optimizer",)}  # the checkpoint's entries of tensors


def _thaw(value: object) -> object:
    """The nested state with its tuples as lists, so that any entry can be replaced (tensors are shared)."""
    if isinstance(value, dict):
        return {k: _thaw(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_thaw(v) for v in value]
    return value


def _mutate(state: object, path: tuple, data: st.DataObject) -> object:
    """``state`` with the entry at ``path`` dropped or replaced, or (a tensor) reshaped, retyped or refilled, or
    (a number) nudged, or (a dict) with an entry added."""
    if not path:
        return _thaw(data.draw(_plain))
    *parents, last = path
    parent = state
    for key in parents:
        parent = parent[key]
    value = parent[last]
    if isinstance(value, torch.Tensor):
        kinds = ("reshape", "retype", "refill", "refill")
    elif isinstance(value, int | float) and not isinstance(value, bool):
        kinds = ("nudge",)
    else:
        kinds = ("add",) if isinstance(value, dict) else ()
    how = data.draw(st.sampled_from(("drop", "replace", *kinds)))
    if how == "drop":
        del parent[last]
    elif how == "add":
        value[data.draw(st.text(max_size=6) | st.integers(0, 40))] = data.draw(_plain)
    elif how == "reshape":
        shape = data.draw(st.sampled_from([(1,), (), (value.numel(),), (*value.shape, 1), tuple(value.shape)[::-1]]))
        parent[last] = torch.full(shape, data.draw(st.floats(-1, 1))).to(value.dtype)
    elif how == "retype":
        parent[last] = value.to(data.draw(st.sampled_from(_DTYPES)))
    elif how == "refill":  # same shape and dtype, other values
        fill = data.draw(st.floats(-3, 3) | st.floats(allow_nan=True, allow_infinity=True) | st.integers(0, 2**32))
        parent[last] = torch.full(value.shape, float(fill), dtype=torch.float64).to(value.dtype)
    elif how == "nudge":  # a number a little off (a step, a cursor, a position, a hyperparameter)
        parent[last] = value + data.draw(st.integers(-2, 2))
    else:
        parent[last] = data.draw(_plain)
    return _thaw(state)  # what was put in may hold tuples: the next mutation may land inside it


class _FuzzRun(tuple):
    """The fuzz's config and base checkpoint (shown briefly in a failure report)."""

    def __repr__(self) -> str:
        return "<a tiny run's config and its checkpoint of step 1>"


@pytest.fixture(scope="module")
def fuzz_run(tmp_path_factory):
    config = _config(tmp_path_factory.mktemp("fuzz") / "run")
    return _FuzzRun((config, _thaw(_checkpoint_state(config))))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzz_a_resume_ends_in_resume_error_or_in_the_files_state(fuzz_run, data):
    config, base = fuzz_run
    state = _thaw(base)  # the tensors are shared, and a mutation replaces one rather than writing into it
    for _ in range(data.draw(st.integers(1, 2))):
        # an entry first (the weights and the optimiser's thrice as often: the many places of the config and RNG
        # states would crowd them out), then a place inside it
        places = _places(state)
        entries = sorted({p[:1] for p in places}, key=repr)
        entry = data.draw(st.sampled_from([e for e in entries for _ in range(3 if e in _TENSORS else 1)]))
        path = data.draw(st.sampled_from([p for p in places if p[:1] == entry]))
        state = _mutate(state, path, data)
    resumer = _forge(config, state)
    try:
        resumer.resume()
    except ResumeError:
        event("refused")
        resumer.assert_unchanged()
    else:
        event("resumed")
        resumer.assert_holds(state)


# ---------------------------------------------------------------------------------------------- end to end
@pytest.mark.slow
def test_r3l_train_resume_refuses_a_forged_checkpoint(tmp_path):
    """Through ``r3l train --resume`` itself: a forged file stops the run with the weight named, and no step runs."""
    from r3l_learn.loop.train import train

    out = tmp_path / "run"
    config = TrainConfig(
        env="r3ltest/Corridor-v0",
        model="tiny-random",
        algo="grpo",
        steps=1,
        tasks_per_step=1,
        group_size=2,
        max_turns=3,
        max_new_tokens=8,
        actions="constrained",
        eval_episodes=0,
        out_dir=str(out),
        save_final=False,
        tensorboard=False,
        progress=False,
    )
    train(config)
    path = latest_checkpoint(out / "checkpoints")
    state = load_checkpoint(path)
    state["model"] = {name: torch.full((1,), 0.5) for name in state["model"]}  # the audit's file
    torch.save(state, path)
    tests_dir = Path(__file__).resolve().parents[1]
    script = (
        f"import sys; sys.path.append({str(tests_dir)!r}); import corridor; corridor.register(); "
        "from r3l_learn.cli.main import main; sys.exit(main(sys.argv[1:]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, "train", "--resume", "--out-dir", str(out), "--steps", "2"],
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode != 0
    assert "model.embed_tokens.weight has shape (1,), the model's is (259, 64)" in done.stderr
    assert latest_checkpoint(out / "checkpoints") == path and load_checkpoint(path)["step"] == 1
