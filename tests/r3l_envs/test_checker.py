"""check_env accepts envs that honour the contract and names the fix for those that do not."""

import gymnasium as gym
import pytest
from corridor import Corridor

import r3l_envs
from r3l_envs.errors import EnvCheckError


@pytest.mark.parametrize("env_id", ["r3ltest/Corridor-v0", "r3ltest/ReplayCorridor-v0"])
def test_a_correct_env_passes(env_id):
    r3l_envs.check_env(gym.make(env_id))


class ForgetfulCorridor(Corridor):
    """Forgets to save the RNG-independent part of its state: restores are not exact."""

    def _save_state(self):
        return 0


class GlobalRandomCorridor(Corridor):
    """Draws from an unseeded generator instead of self.np_random."""

    def _start(self, task_id):
        import random

        obs, task, info = super()._start(task_id)
        return f"{obs} The wind blows at {random.random():.6f} m/s.", task, info


class FragileCorridor(Corridor):
    """Raises on actions it does not understand."""

    def _act(self, action):
        if action not in ("left", "right", "wait"):
            raise ValueError("unknown action")
        return super()._act(action)


class GreedyCorridor(Corridor):
    """Pays a reward on every step, so an episode can sum to more than 1."""

    def _act(self, action):
        obs, _, terminated, info = super()._act(action)
        return obs, 0.5, terminated, info


@pytest.mark.parametrize(
    "cls, message",
    [
        (ForgetfulCorridor, "_save_state"),
        (GlobalRandomCorridor, "np_random"),
        (FragileCorridor, "Bad actions are ordinary steps"),
        (GreedyCorridor, "normalise them"),
    ],
)
def test_a_broken_env_fails_with_a_message_that_names_the_fix(cls, message):
    with pytest.raises(EnvCheckError, match=message):
        r3l_envs.check_env(cls(), skip_gymnasium=True)


class ConsumingCorridor(Corridor):
    """Builds itself by consuming its constructor argument: rebuilt from the same arguments, it is another env."""

    def __init__(self, lengths: list[int]):
        super().__init__(length=lengths.pop())


class WindyCorridor(Corridor):
    """Keeps an unpicklable constructor argument (a lambda)."""

    def __init__(self, wind):
        super().__init__()
        self.wind = wind


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: ConsumingCorridor(lengths=[9, 6]), "(?s)pickled copy.*do not mutate them"),
        (lambda: WindyCorridor(wind=lambda: 0.3), "pickling the env at step .* constructor arguments"),
    ],
)
def test_an_env_that_does_not_pickle_exactly_fails_the_check(make, message):
    with pytest.raises(EnvCheckError, match=message):
        r3l_envs.check_env(make(), skip_gymnasium=True)
