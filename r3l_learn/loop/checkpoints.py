"""Training checkpoints: one dict per file (trainable weights, optimiser, RNG states, step, data cursor,
config), written atomically so a crash mid-save never leaves a half file that ``--resume`` would pick up, read
without unpickling, and checked entry by entry against the model and optimiser it is to go into before any of it
is applied (:func:`check_checkpoint`): a resume file is untrusted input, and a refused one changes nothing."""

from __future__ import annotations

import logging
import math
import os
import pickle
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from r3l_learn.errors import ResumeError, brief
from wrappers.data import write_atomically

__all__ = [
    "CheckedCheckpoint",
    "ResumeError",
    "check_checkpoint",
    "check_rng_state",
    "check_weights",
    "latest_checkpoint",
    "load_checkpoint",
    "rng_state",
    "save_checkpoint",
    "set_rng_state",
]

logger = logging.getLogger(__name__)

_NAME = re.compile(r"step-(\d{6,})\.pt$")

#: the entries of a checkpoint (``eval_before`` is absent from some older ones)
REQUIRED_KEYS = frozenset({"step", "cursor", "config", "model", "optimizer", "rng"})
OPTIONAL_KEYS = frozenset({"eval_before"})

_MT_WORDS = 624  # Mersenne Twister state words, in Python's random and numpy's legacy generator alike
_ADAM_MOMENTS = ("exp_avg", "exp_avg_sq")


class _Problem(Exception):
    """What is wrong with one entry; :func:`check_checkpoint` turns it into a :class:`ResumeError` naming the file."""


# ---------------------------------------------------------------------------------------------- RNG states
def rng_state() -> dict[str, Any]:
    """The global RNG states a training step may touch (python, numpy, torch CPU and CUDA), as plain data and
    tensors only, so that :func:`load_checkpoint` can read them back with ``torch.load(weights_only=True)``."""
    algorithm, key, pos, has_gauss, cached = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": (algorithm, [int(k) for k in key], int(pos), int(has_gauss), float(cached)),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Any) -> None:
    """Restore the states :func:`rng_state` took; they are checked first, so a malformed one raises
    :class:`ResumeError` and leaves every generator as it was."""
    checked = check_rng_state(state)
    random.setstate(checked["python"])
    np.random.set_state(checked["numpy"])
    torch.set_rng_state(checked["torch"])
    if "cuda" in checked and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(checked["cuda"])


def check_rng_state(state: Any) -> dict[str, Any]:
    """``state`` in the form the generators take, after trying each part on a throwaway generator of its kind
    (the global ones are not touched); :class:`ResumeError` naming the first malformed part otherwise."""
    try:
        return _check_rng_state(state)
    except _Problem as exc:
        raise ResumeError(f"RNG state: {exc}") from None


def _check_rng_state(state: Any) -> dict[str, Any]:
    state = _mapping(state, "rng")
    _keys(state, "rng", {"python", "numpy", "torch"}, {"cuda"})
    checked = {"python": _python_rng(state["python"]), "numpy": _numpy_rng(state["numpy"])}
    checked["torch"] = _torch_rng(state["torch"], "rng.torch", torch.get_rng_state(), torch.Generator())
    if "cuda" in state:
        cuda = _sequence(state["cuda"], "rng.cuda")
        if torch.cuda.is_available():
            if len(cuda) != torch.cuda.device_count():
                raise _Problem(f"rng.cuda holds {len(cuda)} states, this machine has {torch.cuda.device_count()} GPUs")
            cuda = [
                _torch_rng(s, f"rng.cuda[{i}]", torch.cuda.get_rng_state(i), torch.Generator(device=f"cuda:{i}"))
                for i, s in enumerate(cuda)
            ]
        else:  # not restored here (no GPU), but it must still be what a GPU machine wrote
            for i, s in enumerate(cuda):
                if not (isinstance(s, torch.Tensor) and s.dtype == torch.uint8 and s.dim() == 1):
                    raise _Problem(f"rng.cuda[{i}] is not a 1-D uint8 tensor")
        checked["cuda"] = cuda
    return checked


def _python_rng(value: Any) -> tuple[Any, ...]:
    version, words, gauss = _sequence(value, "rng.python", length=3)
    words = _sequence(words, "rng.python[1]", length=_MT_WORDS + 1)
    _integer(version, "rng.python[0] (the version)", 3, 3)
    for i, word in enumerate(words[:-1]):
        _integer(word, f"rng.python[1][{i}]", 0, 2**32 - 1)
    _integer(words[-1], "rng.python[1][-1] (the position)", 0, _MT_WORDS)
    gauss = None if gauss is None else _real(gauss, "rng.python[2] (the cached gaussian)")
    checked = (3, tuple(words), gauss)
    try:
        random.Random().setstate(checked)
    except (TypeError, ValueError, OverflowError) as exc:
        raise _Problem(f"rng.python is not a state of Python's random ({exc})") from None
    return checked


def _numpy_rng(value: Any) -> tuple[Any, ...]:
    algorithm, key, pos, has_gauss, cached = _sequence(value, "rng.numpy", length=5)
    if not isinstance(algorithm, str) or algorithm != "MT19937":
        raise _Problem(f"rng.numpy names the generator {_short(algorithm)}; numpy's global one is 'MT19937'")
    key = _sequence(key, "rng.numpy[1]", length=_MT_WORDS)
    for i, word in enumerate(key):
        _integer(word, f"rng.numpy[1][{i}]", 0, 2**32 - 1)
    checked = (
        "MT19937",
        np.asarray(key, dtype=np.uint32),
        _integer(pos, "rng.numpy[2] (the position)", 0, _MT_WORDS),
        _integer(has_gauss, "rng.numpy[3] (has_gauss)", 0, 1),
        _real(cached, "rng.numpy[4] (the cached gaussian)"),
    )
    try:
        np.random.RandomState().set_state(checked)
    except (TypeError, ValueError) as exc:
        raise _Problem(f"rng.numpy is not a state of numpy's generator ({exc})") from None
    return checked


def _torch_rng(value: Any, what: str, like: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    if not isinstance(value, torch.Tensor) or value.layout != torch.strided or value.is_quantized:
        raise _Problem(f"{what} is {_short(value)}, not a dense tensor")
    if value.dtype != torch.uint8 or value.shape != like.shape:
        raise _Problem(
            f"{what} is a {_dtype(value.dtype)} tensor of shape {tuple(value.shape)}; torch's generator state is "
            f"a {_dtype(like.dtype)} tensor of shape {tuple(like.shape)}"
        )
    try:
        generator.set_state(value.cpu().contiguous())
    except (RuntimeError, TypeError, ValueError) as exc:
        raise _Problem(f"{what} is not a valid torch generator state ({str(exc).splitlines()[0]})") from None
    return value.cpu().contiguous()


# ---------------------------------------------------------------------------------------------- files
def save_checkpoint(directory: str | os.PathLike[str], step: int, state: dict[str, Any], *, keep: int = 2) -> Path:
    """Write ``state`` as ``directory/step-NNNNNN.pt`` (temp file + rename) and keep the newest ``keep``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"step-{step:06d}.pt"
    write_atomically(path, lambda tmp: torch.save(state, tmp))
    for old in _checkpoints(directory)[:-keep] if keep > 0 else []:
        old.unlink(missing_ok=True)
    logger.info("saved checkpoint %s", path)
    return path


def _checkpoints(directory: Path) -> list[Path]:
    # regular files only: a directory or a FIFO named like a checkpoint would fail to load, or block on reading
    found = [p for p in directory.glob("step-*.pt") if _NAME.search(p.name) and p.is_file()]
    return sorted(found, key=lambda p: int(_NAME.search(p.name).group(1)))


def latest_checkpoint(directory: str | os.PathLike[str]) -> Path | None:
    """The newest complete checkpoint in ``directory`` (``None`` if there is none)."""
    directory = Path(directory)
    found = _checkpoints(directory) if directory.is_dir() else []
    return found[-1] if found else None


def load_checkpoint(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a checkpoint written by :func:`save_checkpoint` (what it holds is checked by :func:`check_checkpoint`).

    It is read with ``torch.load(weights_only=True)``: tensors, numbers, strings and containers only, so a file
    that someone else crafted cannot run code when it is resumed (a full pickle load would). A file holding any
    other object (as did those written before 2026-11-24, with numpy arrays in their RNG state), or anything that
    is not a readable checkpoint holding a dict, raises :class:`ResumeError`.
    """
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise ResumeError(
            f"{path}: refused: it holds objects other than tensors and plain data, which a safe load does not "
            f"read ({_first_line(exc)}); a checkpoint from an older r3l cannot be resumed: start a new --out-dir"
        ) from exc
    except Exception as exc:  # whatever else a malformed file makes the reader raise: not a checkpoint we can use
        raise ResumeError(
            f"{path}: unreadable checkpoint ({_first_line(exc)}); delete it to resume from an older one"
        ) from exc
    if not isinstance(state, dict):
        raise ResumeError(f"{path}: holds a {type(state).__name__}, not a checkpoint's dict; delete it")
    return state


# ---------------------------------------------------------------------------------------------- checks
@dataclass(frozen=True)
class CheckedCheckpoint:
    """A checkpoint's entries after :func:`check_checkpoint`: each fits the model and optimiser it was checked
    against and can be applied as it is (``config`` and ``eval_before`` are plain data, checked by their reader)."""

    step: int
    cursor: int
    config: dict[str, Any]
    weights: dict[str, torch.Tensor]  # every trainable parameter's name, in the model's order
    optimizer: dict[str, Any]  # a state dict that ``optimizer.load_state_dict`` takes as it is
    rng: dict[str, Any]  # as saved (checked): what :func:`set_rng_state` takes
    eval_before: dict[str, Any] | None


def check_checkpoint(
    state: Any, model: torch.nn.Module, optimizer: torch.optim.Optimizer, *, source: str = "resume file"
) -> CheckedCheckpoint:
    """Check every entry of a loaded checkpoint against ``model`` and ``optimizer``, touching neither.

    The trainable weights must be exactly the model's trainable parameters, each with its shape and dtype and
    finite; the optimiser state must be AdamW's for those parameters (the same parameter groups with this run's
    hyperparameters; per parameter ``step``, ``exp_avg`` and ``exp_avg_sq`` of the parameter's shape and dtype,
    finite, the second moment non-negative); the RNG states must be ones their generators take; step and
    cursor whole numbers in [0, 2**63), the step the one the file is named for.

    Raises:
        ResumeError: naming ``source`` and the first entry that does not fit.
    """
    try:
        state = _mapping(state, "the checkpoint")
        _keys(state, "the checkpoint", REQUIRED_KEYS, OPTIONAL_KEYS)
        step = _integer(state["step"], "step", 0, 2**63 - 1)
        named = _NAME.search(source)
        if named and int(named.group(1)) != step:
            raise _Problem(f"step is {step}, but the file is named for step {int(named.group(1))}")
        config = _mapping(state["config"], "config")
        eval_before = state.get("eval_before")
        if eval_before is not None:
            eval_before = _mapping(eval_before, "eval_before")
        _check_rng_state(state["rng"])
        return CheckedCheckpoint(
            step=step,
            cursor=_integer(state["cursor"], "cursor", 0, 2**63 - 1),
            config=config,
            weights=_check_weights(state["model"], model),
            optimizer=_check_optimizer(state["optimizer"], model, optimizer),
            rng=state["rng"],
            eval_before=eval_before,
        )
    except _Problem as exc:
        raise ResumeError(
            f"{source}: {exc}. It does not fit this run: delete it to resume from an older checkpoint, or start a "
            "new --out-dir"
        ) from None


def check_weights(weights: Any, model: torch.nn.Module, *, source: str = "resume file") -> dict[str, torch.Tensor]:
    """``weights`` if it holds exactly ``model``'s trainable parameters, each a finite tensor of the parameter's
    shape and dtype; :class:`ResumeError` naming ``source`` and the first one that does not fit otherwise."""
    try:
        return _check_weights(weights, model)
    except _Problem as exc:
        raise ResumeError(f"{source}: {exc}") from None


def _check_weights(weights: Any, model: torch.nn.Module) -> dict[str, torch.Tensor]:
    expected = {n: p for n, p in model.named_parameters() if p.requires_grad}
    weights = _mapping(weights, "model")
    missing = [n for n in expected if n not in weights]
    if missing:
        raise _Problem(f"model lacks {len(missing)} trainable weights of the model ({_names(missing)}): another model?")
    extra = [n for n in weights if n not in expected]
    if extra:
        raise _Problem(f"model holds {len(extra)} weights the model does not train ({_names(extra)}): another model?")
    return {n: _tensor(weights[n], n, p, "the model's") for n, p in expected.items()}


def _check_optimizer(saved: Any, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    if not isinstance(optimizer, torch.optim.Adam | torch.optim.AdamW):
        raise TypeError(f"resume checks the state of Adam and AdamW only, not of {type(optimizer).__name__}")
    live = optimizer.state_dict()
    saved = _mapping(saved, "optimizer")
    _keys(saved, "optimizer", {"state", "param_groups"}, set())
    groups = _sequence(saved["param_groups"], "optimizer.param_groups")
    if len(groups) != len(live["param_groups"]):
        raise _Problem(f"optimizer has {len(groups)} parameter groups, this run's has {len(live['param_groups'])}")
    for i, (group, ours) in enumerate(zip(groups, live["param_groups"], strict=True)):
        _check_group(_mapping(group, f"optimizer.param_groups[{i}]"), ours, f"optimizer.param_groups[{i}]")
    names = {id(p): n for n, p in model.named_parameters()}
    params = [p for group in optimizer.param_groups for p in group["params"]]
    amsgrad = {i: group["amsgrad"] for group in live["param_groups"] for i in group["params"]}
    per_param = _mapping(saved["state"], "optimizer.state")
    checked: dict[int, dict[str, Any]] = {}
    seen: set[int] = set()  # storages the moments use
    for index, entry in per_param.items():  # a parameter not stepped yet has no entry
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(params):
            raise _Problem(f"optimizer.state has an entry {_short(index)}, not a parameter index below {len(params)}")
        param = params[index]
        label = f"optimizer.state[{index}] ({names.get(id(param), 'a parameter')})"
        entry = _mapping(entry, label)
        moments = (*_ADAM_MOMENTS, "max_exp_avg_sq") if amsgrad[index] else _ADAM_MOMENTS
        _keys(entry, label, {"step", *moments}, set())
        checked[index] = {"step": _adam_step(entry["step"], f"{label}.step")}
        for key in moments:
            value = _tensor(entry[key], f"{label}.{key}", param, "the parameter's", nonnegative=key != "exp_avg")
            checked[index][key] = _own_memory(value, seen)
    # the groups are this run's own (equal to the file's where it has them): nothing else of the file is used
    return {"state": checked, "param_groups": live["param_groups"]}


def _check_group(group: Mapping[str, Any], ours: dict[str, Any], what: str) -> None:
    unknown = sorted(map(str, set(group) - set(ours)))
    if unknown:
        raise _Problem(f"{what} has settings AdamW does not: {_names(unknown)}")
    ids = _sequence(group.get("params"), f"{what}.params")
    if len(ids) != len(ours["params"]):
        raise _Problem(f"{what} holds {len(ids)} parameters, this run's group {len(ours['params'])}")
    if any(not _same(a, b) for a, b in zip(ids, ours["params"], strict=True)):
        raise _Problem(f"{what}.params are not the indices {ours['params'][0]}..{ours['params'][-1]} in order")
    for key, value in ours.items():
        if key != "params" and key in group and not _same(group[key], value):
            raise _Problem(f"{what}.{key} is {_short(group[key])}, this run's is {value!r} (from its configuration)")


def _own_memory(value: torch.Tensor, seen: set[int]) -> torch.Tensor:
    """``value``, or a copy of it, that AdamW may update in place: contiguous and sharing memory with no other
    moment (a crafted file can alias two moments, or expand one number to a whole shape, which in-place updates
    would corrupt or refuse)."""
    if not value.is_contiguous() or value.untyped_storage().data_ptr() in seen:
        value = value.clone(memory_format=torch.contiguous_format)
    seen.add(value.untyped_storage().data_ptr())
    return value


def _adam_step(value: Any, what: str) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        if value.dim() != 0 or not value.is_floating_point() or value.layout != torch.strided or value.is_quantized:
            raise _Problem(f"{what} is {_short(value)}, not a float scalar")
        value = value.item()
    number = _real(value, what)
    if number < 0 or number != int(number):
        raise _Problem(f"{what} is {number}, not a whole number of steps >= 0")
    # the dtype Adam keeps its step counts in (float64 only where that is the default dtype)
    return torch.tensor(number, dtype=torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32)


# ---------------------------------------------------------------------------------------------- plain data
def _tensor(value: Any, what: str, like: torch.Tensor, whose: str, *, nonnegative: bool = False) -> torch.Tensor:
    """``value`` if it is a dense CPU tensor of ``like``'s shape and dtype with finite values (and >= 0)."""
    if not isinstance(value, torch.Tensor):
        raise _Problem(f"{what} is {_short(value)}, not a tensor")
    if value.layout != torch.strided or value.is_quantized or value.device.type != "cpu":
        raise _Problem(f"{what} is a {value.layout} tensor on {value.device}, not a dense CPU tensor")
    if value.shape != like.shape:
        raise _Problem(f"{what} has shape {tuple(value.shape)}, {whose} is {tuple(like.shape)}")
    if value.dtype != like.dtype:
        raise _Problem(f"{what} has dtype {_dtype(value.dtype)}, {whose} is {_dtype(like.dtype)}")
    if (value.is_floating_point() or value.is_complex()) and not bool(torch.isfinite(value).all()):
        raise _Problem(f"{what} holds non-finite values")
    if nonnegative and bool((value < 0).any()):
        raise _Problem(f"{what} holds negative values")
    return value


def _mapping(value: Any, what: str) -> dict[Any, Any]:
    if not isinstance(value, Mapping):
        raise _Problem(f"{what} is {_short(value)}, not a dict")
    return dict(value)


def _sequence(value: Any, what: str, *, length: int | None = None) -> list[Any]:
    if not isinstance(value, list | tuple):
        raise _Problem(f"{what} is {_short(value)}, not a list")
    if length is not None and len(value) != length:
        raise _Problem(f"{what} has {len(value)} items, not {length}")
    return list(value)


def _keys(value: Mapping[Any, Any], what: str, required: set[str] | frozenset[str], optional: Any) -> None:
    missing = sorted(required - set(value))
    if missing:
        raise _Problem(f"{what} lacks {_names(missing)}")
    extra = [k for k in value if k not in required and k not in optional]
    if extra:
        raise _Problem(f"{what} has unexpected entries {_names(map(_short, extra))}")


def _integer(value: Any, what: str, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Problem(f"{what} is {_short(value)}, not a whole number")
    if value < low or (high is not None and value > high):
        bounds = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise _Problem(f"{what} is {_short(value)}, not {bounds}")
    return value


def _real(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _Problem(f"{what} is {_short(value)}, not a number")
    try:
        number = float(value)
    except OverflowError:  # an int too large for a float
        raise _Problem(f"{what} is {_short(value)}, too large") from None
    if not math.isfinite(number):
        raise _Problem(f"{what} is {number}, not a finite number")
    return number


def _same(saved: Any, ours: Any) -> bool:
    """Whether a saved setting equals ours, with the type it should have (True is not 1, a tensor is no number)."""
    if isinstance(ours, bool) or ours is None:
        return saved is ours
    if isinstance(ours, int | float):
        return not isinstance(saved, bool) and isinstance(saved, int | float) and saved == ours
    if isinstance(ours, tuple | list):
        return (
            isinstance(saved, tuple | list)
            and len(saved) == len(ours)
            and all(_same(a, b) for a, b in zip(saved, ours, strict=True))
        )
    return type(saved) is type(ours) and saved == ours


def _names(names: Any, shown: int = 3) -> str:
    names = list(names)
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(map(str, names[:shown])) + more


def _short(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {_dtype(value.dtype)} tensor of shape {tuple(value.shape)}"
    return brief(value)


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0]


def _dtype(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
