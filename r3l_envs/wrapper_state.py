"""What a checkpoint saves of each wrapper around an env: a registry of state handlers, by wrapper type.

A handler is a pair ``(get_state, set_state)``: ``get_state(wrapper)`` returns the wrapper's state as plain data
(what :mod:`r3l_envs.codec` carries; ``None`` for a stateless wrapper) and ``set_state(wrapper, state)`` puts it
back, in the same wrapper or in the same wrapper of a fresh ``gym.make``. Your own wrappers can instead define
``checkpoint_state(self)`` and ``restore_state(self, state)``; for wrappers you cannot edit, call
:func:`register_wrapper_state`.

Every Gymnasium 1.x wrapper that can wrap a text env (string observations and actions) is registered here:
the ones ``gym.make`` adds (``TimeLimit``, ``OrderEnforcing``, ``PassiveEnvChecker``), the bookkeeping ones
(``RecordEpisodeStatistics``, ``Autoreset``, ``TimeAwareObservation``, ``NormalizeReward``, ``StickyAction``,
``DelayObservation``, ``FrameStackObservation``, ``RenderCollection``) and the stateless transforms
(``TransformObservation``, ``TransformAction``, ``TransformReward``, ``ClipReward``, ``RepeatAction``), whose
functions are part of how the env was built, not of its state. The others need array observations or actions.
"""

from __future__ import annotations

import copy
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import gymnasium as gym
from gymnasium import wrappers as gw

from r3l_envs.errors import CorruptCheckpointError, UnsupportedWrapperError

__all__ = ["StateGetter", "StateSetter", "register_wrapper_state", "state_handler"]

StateGetter = Callable[[gym.Wrapper], Any]
StateSetter = Callable[[gym.Wrapper, Any], None]
_HANDLERS: dict[type, tuple[StateGetter, StateSetter, bool]] = {}


def register_wrapper_state(
    wrapper_type: type, get_state: StateGetter, set_state: StateSetter, *, subclasses: bool = True
) -> None:
    """Teach checkpoint/restore how to save a wrapper's state (for wrappers you cannot edit).

    Args:
        wrapper_type: the wrapper class.
        get_state: returns the wrapper's state as plain data (``None`` if it has none).
        set_state: puts a state from ``get_state`` back into a wrapper of the same type.
        subclasses: whether the handler also serves subclasses of ``wrapper_type`` that have none of their own.
            Say ``False`` for a stateless class whose subclasses may add state, so that they are refused
            rather than silently saved without it.
    """
    _HANDLERS[wrapper_type] = (get_state, set_state, subclasses)


def state_handler(wrapper: gym.Wrapper) -> tuple[StateGetter, StateSetter]:
    """The ``(get_state, set_state)`` pair for ``wrapper``, or :class:`UnsupportedWrapperError` saying how to add
    one."""
    if hasattr(wrapper, "checkpoint_state") and hasattr(wrapper, "restore_state"):
        return type(wrapper).checkpoint_state, type(wrapper).restore_state
    for cls in type(wrapper).__mro__:
        if cls in _HANDLERS:
            get_state, set_state, subclasses = _HANDLERS[cls]
            if cls is type(wrapper) or subclasses:
                return get_state, set_state
            break
    name = type(wrapper).__qualname__
    raise UnsupportedWrapperError(
        f"cannot checkpoint through {name}: its state is unknown. Give it checkpoint_state()/restore_state(state) "
        f"methods, or call r3l_envs.register_wrapper_state({name}, get_state, set_state) (with a getter returning "
        "None if it is stateless)."
    )


# ---------------------------------------------------------------------- handler builders
def attributes(*names: str) -> tuple[StateGetter, StateSetter]:
    """A handler that saves and restores the named instance attributes (those the wrapper has)."""

    def get_state(wrapper: gym.Wrapper) -> dict[str, Any]:
        return {name: copy.deepcopy(getattr(wrapper, name)) for name in names if hasattr(wrapper, name)}

    def set_state(wrapper: gym.Wrapper, state: dict[str, Any]) -> None:
        _require(isinstance(state, dict) and set(state) <= set(names), wrapper, state)
        for name, value in state.items():
            setattr(wrapper, name, copy.deepcopy(value))

    return get_state, set_state


def _stateless(wrapper: gym.Wrapper) -> None:
    return None


def _set_stateless(wrapper: gym.Wrapper, state: Any) -> None:
    _require(state is None, wrapper, state)


def _require(ok: bool, wrapper: gym.Wrapper, state: Any) -> None:
    """Refuse a state this wrapper's getter could not have returned (a damaged or forged checkpoint)."""
    if not ok:
        raise CorruptCheckpointError(
            f"checkpoint holds a state {state!r:.80} that {type(wrapper).__name__} never saves"
        )


def _queue_state(queue: deque) -> list[Any]:
    return copy.deepcopy(list(queue))


def _queue(values: Any, like: deque, wrapper: gym.Wrapper) -> deque:
    """``values`` as a deque with ``like``'s length limit (set by the wrapper's constructor, not the checkpoint)."""
    _require(isinstance(values, list) and (like.maxlen is None or len(values) <= like.maxlen), wrapper, values)
    return deque(copy.deepcopy(values), maxlen=like.maxlen)


# ---------------------------------------------------------------------- RecordEpisodeStatistics
_EPISODE_STATISTICS = ("episode_count", "episode_returns", "episode_lengths")
_STATISTICS_QUEUES = ("time_queue", "return_queue", "length_queue")


def _get_episode_statistics(wrapper: gw.RecordEpisodeStatistics) -> dict[str, Any]:
    # The start time is a perf_counter reading, meaningless in another process: save how long the episode has run,
    # so that after a restore its recorded duration goes on from there.
    started = wrapper.episode_start_time
    return {
        **{name: getattr(wrapper, name) for name in _EPISODE_STATISTICS},
        "elapsed": None if started < 0 else time.perf_counter() - started,
        **{name: _queue_state(getattr(wrapper, name)) for name in _STATISTICS_QUEUES},
    }


def _set_episode_statistics(wrapper: gw.RecordEpisodeStatistics, state: Any) -> None:
    keys = {*_EPISODE_STATISTICS, "elapsed", *_STATISTICS_QUEUES}
    _require(isinstance(state, dict) and set(state) == keys, wrapper, state)
    queues = {name: _queue(state[name], getattr(wrapper, name), wrapper) for name in _STATISTICS_QUEUES}
    for name in _EPISODE_STATISTICS:
        setattr(wrapper, name, state[name])
    elapsed = state["elapsed"]
    wrapper.episode_start_time = -1 if elapsed is None else time.perf_counter() - elapsed
    for name, queue in queues.items():
        setattr(wrapper, name, queue)


# ---------------------------------------------------------------------- wrappers with a queue of observations
def _queue_handler(queue_name: str, *others: str) -> tuple[StateGetter, StateSetter]:
    """A handler for a wrapper holding ``queue_name`` (a bounded deque) and the plain attributes ``others``."""
    get_others, set_others = attributes(*others)

    def get_state(wrapper: gym.Wrapper) -> dict[str, Any]:
        return {"queue": _queue_state(getattr(wrapper, queue_name)), "attributes": get_others(wrapper)}

    def set_state(wrapper: gym.Wrapper, state: Any) -> None:
        _require(isinstance(state, dict) and set(state) == {"queue", "attributes"}, wrapper, state)
        queue = _queue(state["queue"], getattr(wrapper, queue_name), wrapper)
        set_others(wrapper, state["attributes"])
        setattr(wrapper, queue_name, queue)

    return get_state, set_state


# ---------------------------------------------------------------------- NormalizeReward
def _get_normalize_reward(wrapper: gw.NormalizeReward) -> dict[str, Any]:
    rms = wrapper.return_rms
    return {
        "mean": copy.deepcopy(rms.mean),
        "var": copy.deepcopy(rms.var),
        "count": rms.count,
        "discounted_reward": copy.deepcopy(wrapper.discounted_reward),
        "update_running_mean": wrapper._update_running_mean,
    }


def _set_normalize_reward(wrapper: gw.NormalizeReward, state: Any) -> None:
    keys = {"mean", "var", "count", "discounted_reward", "update_running_mean"}
    _require(isinstance(state, dict) and set(state) == keys, wrapper, state)
    rms = wrapper.return_rms
    rms.mean, rms.var, rms.count = copy.deepcopy(state["mean"]), copy.deepcopy(state["var"]), state["count"]
    wrapper.discounted_reward = copy.deepcopy(state["discounted_reward"])
    wrapper._update_running_mean = state["update_running_mean"]


# ---------------------------------------------------------------------- the registrations
register_wrapper_state(gw.TimeLimit, *attributes("_elapsed_steps"))
register_wrapper_state(gw.OrderEnforcing, *attributes("_has_reset"))
# Its one-off checks compare a step with the data of the reset before it, so its flags travel too.
register_wrapper_state(
    gw.PassiveEnvChecker,
    *attributes("checked_reset", "checked_step", "checked_render", "checked_data_reuse", "_previous_data"),
)
register_wrapper_state(gw.RecordEpisodeStatistics, _get_episode_statistics, _set_episode_statistics)
register_wrapper_state(gw.Autoreset, *attributes("autoreset"))
register_wrapper_state(gw.TimeAwareObservation, *attributes("timesteps"))
register_wrapper_state(gw.NormalizeReward, _get_normalize_reward, _set_normalize_reward)
register_wrapper_state(
    gw.StickyAction, *attributes("is_sticky_actions", "last_action", "num_repeats", "repeats_taken")
)  # its coin flips come from the env's own RNG, which the env's checkpoint carries
register_wrapper_state(gw.DelayObservation, *_queue_handler("observation_queue"))
register_wrapper_state(gw.FrameStackObservation, *_queue_handler("obs_queue", "stacked_obs"))
register_wrapper_state(gw.RenderCollection, *attributes("frame_list"))
for _stateless_type in (
    gw.TransformObservation,
    gw.TransformAction,
    gw.TransformReward,
    gw.ClipReward,
    gw.RepeatAction,
):
    register_wrapper_state(_stateless_type, _stateless, _set_stateless, subclasses=False)
