"""``r3l/TextWorld-v0``: generated TextWorld games played by the real engine (Inform 7 story files in jericho).

Score, ``won`` and admissible actions come from TextWorld's own tracking (its ``StateTracking`` wrapper over
the Inform 7 events of each turn). Checkpoints are native: jericho's machine state plus a copy of TextWorld's
progress tracker, about a millisecond either way, restorable in a fresh env or another process. A fresh env's
first restore starts an engine for the game (tens of milliseconds); the games' logic (TextWorld's ``Game``) is
loaded once per process and shared by the envs that play it. The first game of a process also pays for
importing TextWorld, which parses its knowledge base (seconds).

Native code and threads: every call into the engine (jericho's Z-machine interpreter behind ctypes, which
releases the GIL) holds one process-wide lock, :data:`ENGINE_LOCK`, and so does every teardown of an engine
(jericho's finaliser shuts the interpreter down and unloads its private copy of ``libfrotz.so``): an engine is
closed by ``close()``/``reset()``, or by this env's own finaliser under the lock, never by a garbage-collector
pass on whatever thread happens to run it. See ``benchmarks/stress_textworld.py``.

Hostile input: every engine call runs under a time budget (:attr:`TextWorldEnv.engine_budget_s`, enforced by
:mod:`.watchdog`), and an engine that overruns it or halts on a runtime error raises
:class:`~r3l_envs.errors.EngineError` and is dropped (the next ``reset()`` or restore starts a new one). A
checkpoint's engine state (:mod:`.frotz_state`) and logic state (:mod:`.logic_state`) are checked against
the game before anything changes: what the game could not have produced is a
:class:`~r3l_envs.errors.CorruptCheckpointError`, and the env goes on from where it was.
"""

from __future__ import annotations

import copy
import ctypes
import logging
import re
import threading
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from r3l_envs.codec import register_type
from r3l_envs.core import TextEnv
from r3l_envs.errors import CorruptCheckpointError, EngineError, MalformedDataError, UnknownTaskError
from r3l_envs.splits import NumberedIds
from r3l_envs.textworld.frotz_state import check_frotz_state, story_layout
from r3l_envs.textworld.games import GameSpec, build_game
from r3l_envs.textworld.logic_state import check_logic_state
from r3l_envs.textworld.watchdog import WATCHDOG

__all__ = ["SPLIT_SIZES", "TextWorldEnv"]

logger = logging.getLogger(__name__)

#: Number of task ids per split (games are generated lazily, so large splits cost nothing until played).
SPLIT_SIZES = {"train": 10_000, "valid": 500, "test": 500}

# Interpreter meta-commands: they would save/restore files, undo turns behind TextWorld's tracker, or end the
# interpreter. ``tw-*`` are TextWorld's debug hooks, which change what the game prints. None is a game move.
_META_VERBS = frozenset(
    [
        "quit",
        "q",
        "restart",
        "save",
        "restore",
        "undo",
        "script",
        "unscript",
        "transcript",
        "noscript",
        "recording",
        "replay",
        "verify",
        "version",  # prints the story file's serial number, which is its compile date: not part of the game
    ]
)
_SEPARATORS = re.compile(r"[.;]|\bthen\b")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_PROMPT_TAIL = re.compile(r"\n>[^\n]*\Z")  # the input prompt and the status line jericho appends after it
_MAX_COMMAND = 198  # jericho truncates longer input (with a warning) to fit the Z-machine buffer


@register_type
@dataclass
class _Snapshot:
    """Native state of a TextWorld episode (see :meth:`TextWorldEnv._save_state`)."""

    task_id: str
    frotz: tuple
    # TextWorld's logic objects are interned per process, so they travel as plain data: a proposition as one
    # string (few containers: checkpoints encode each in Python), an action as a tuple (see _pack_action).
    facts: list[str]
    valid_actions: list[tuple]
    moves: int
    last_action: tuple | None
    tracked: dict[str, Any]
    best: float
    last: dict[str, Any]


class TextWorldEnv(TextEnv):
    """TextWorld games of one type and difficulty, generated offline; no game is in two splits.

    Args:
        game_type: ``"coin_collector"``, ``"treasure_hunter"``, ``"cooking"`` or ``"custom"``.
        difficulty: the level (coin_collector 1-300, treasure_hunter 1-30, cooking 1-4, custom 1-10).
        split: ``"train"``, ``"valid"`` or ``"test"`` (disjoint by content, see :mod:`.games`; cooking also uses its
            own food splits).
        max_tasks: keep only the first ``max_tasks`` ids of the split (small curricula, CI); ``None`` keeps all.
        banner: keep TextWorld's ASCII-art title at the top of the first observation (off by default: ~400 tokens
            of every prompt that tell the agent nothing).
        render_mode: ``"ansi"``, ``"human"`` or ``None``.

    The walkthrough is privileged: it is never in observations or infos; call :meth:`walkthrough`.
    """

    restore_kind = "native"
    # Checks bound the Z-machine state a checkpoint may carry, but frotz trusts the addresses in memory a game may
    # legitimately change: forged values there that pass every check can still crash it (segfaults seen in fuzzing).
    native_state_needs_key = True
    prompt_family = "textgame"
    #: Seconds one engine call (load, reset, step) may take before the engine is halted and the call raises
    #: :class:`~r3l_envs.errors.EngineError`. Real games take milliseconds; set it on an instance to change it.
    engine_budget_s: float = 10.0

    def __init__(
        self,
        game_type: str = "cooking",
        difficulty: int = 1,
        split: str = "train",
        max_tasks: int | None = None,
        render_mode: str | None = None,
        banner: bool = False,
    ):
        super().__init__(split=split, render_mode=render_mode)
        GameSpec(game_type, difficulty, split, 0)  # validates the arguments, with a message naming the fix
        if max_tasks is not None and not (isinstance(max_tasks, int) and max_tasks >= 1):
            raise ValueError(f"max_tasks must be a positive int or None, got {max_tasks!r}")
        self.game_type, self.difficulty, self.banner = game_type, difficulty, bool(banner)
        count = SPLIT_SIZES[split] if max_tasks is None else min(max_tasks, SPLIT_SIZES[split])
        self._ids = NumberedIds(f"tw-{game_type}-d{difficulty}-{split}-", count, width=5)
        self._tw: Any = None  # textworld.envs.wrappers.TWInform7 of the loaded game
        # The engine also lives in a box that this env's finaliser closes under ENGINE_LOCK if the env is dropped
        # without close(); the finaliser holds the box, not the env.
        self._engine_box: list[Any] = []
        self._finalizer = weakref.finalize(self, _close_engines, self._engine_box)
        self._task_loaded: str | None = None
        self._game: Any = None
        self._best = 0.0
        self._last: dict[str, Any] = {}

    # ------------------------------------------------------------------ TextEnv hooks
    @property
    def task_ids(self) -> Sequence[str]:
        return self._ids

    def _start(self, task_id: str) -> tuple[str, str, dict[str, Any]]:
        self._load(task_id)
        state = self._engine_call(self._tw.reset)
        self._best = 0.0
        self._last = self._info(state)
        intro = _clean(state.feedback)
        return intro if self.banner else _without_banner(intro), state["objective"], dict(self._last)

    def _act(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        command, refusal = self._engine_command(action)
        if refusal is not None:
            return refusal, 0.0, False, dict(self._last)
        state, _, done = self._engine_call(self._tw.step, command)
        info = self._info(state)
        reward = max(0.0, info["score"] - self._best)  # scores never pay twice: the episode sum stays <= 1
        self._best = max(self._best, info["score"])
        self._last = info
        return _clean(state.feedback), reward, bool(done), dict(info)

    def _save_state(self) -> _Snapshot:
        tracker, i7, jericho = self._layers()
        progression = tracker._game_progression
        with ENGINE_LOCK:
            frotz = jericho._jericho.get_state()
        return _Snapshot(
            task_id=self._task_loaded,
            frotz=frotz,
            facts=[_pack_proposition(fact) for fact in progression.state.facts],
            valid_actions=[_pack_action(action) for action in progression._valid_actions],
            moves=tracker._moves,
            last_action=None if tracker._last_action is None else _pack_action(tracker._last_action),
            # Inform7Data carries these over from the previous turn when a turn does not print them.
            tracked={k: i7.state.get(k) for k in i7._tracked_infos},
            best=self._best,
            last=copy.deepcopy(self._last),
        )

    def _restore_state(self, state: dict[str, Any], *, via: Any, rollback: bool = True) -> None:
        native = state.get("native")
        if via == "native" and getattr(native, "task_id", None) != state["episode"].task_id:
            raise CorruptCheckpointError(
                "TextWorld checkpoint: its engine snapshot is of another task than its episode"
            )
        super()._restore_state(state, via=via, rollback=rollback)

    def _load_state(self, snap: _Snapshot) -> None:
        from textworld.core import GameState
        from textworld.logic import State

        if not (isinstance(snap, _Snapshot) and isinstance(snap.task_id, str) and snap.task_id in self._ids):
            raise CorruptCheckpointError("TextWorld checkpoint state is not a snapshot of a task of this env")
        # A snapshot of another task is checked against an engine of its own, installed only once it passes:
        # a refused checkpoint leaves this env's engine, and so its episode, as they were.
        fresh = snap.task_id != self._task_loaded or self._tw is None
        tw, game = self._new_engine(snap.task_id) if fresh else (self._tw, self._game)
        try:
            if fresh:
                _guarded(tw, self.engine_budget_s, tw.reset)  # sets up tracking; all it sets is overwritten below
            try:
                _check_snapshot(snap, tw, game)
            except Exception as exc:  # whatever a forged state trips over in the checks, it is the same refusal
                raise CorruptCheckpointError(
                    f"TextWorld checkpoint state is not one this game produces ({type(exc).__name__}: {exc}); "
                    "the env is unchanged"
                ) from exc
        except BaseException:
            if fresh:
                _close_engines([tw])
            raise
        if fresh:
            self._install(tw, game, snap.task_id)
        tracker, i7, jericho = _layers(tw)
        with ENGINE_LOCK:
            jericho._jericho.set_state(snap.frotz)
        progression = tracker._game_progression
        progression.state = State(progression.state._logic, [_unpack_proposition(f) for f in snap.facts])
        progression._valid_actions = [_unpack_action(a) for a in snap.valid_actions]
        tracker._moves = snap.moves
        tracker._last_action = None if snap.last_action is None else _unpack_action(snap.last_action)
        i7.state = GameState(snap.tracked)
        self._best, self._last = snap.best, copy.deepcopy(snap.last)

    # ------------------------------------------------------------------ privileged information
    def walkthrough(self) -> list[str]:
        """The commands that win the current task from its start (privileged: for oracles and tests)."""
        if self._game is None:
            raise RuntimeError("call reset() first: the walkthrough belongs to the current task")
        walk = self._game.metadata.get("walkthrough") or self._game.main_quest.commands
        return list(walk)

    def expert_actions(self, task_id: str) -> list[str]:
        """The walkthrough of ``task_id`` (resets this env to that task)."""
        self.reset(options={"task_id": task_id})
        return self.walkthrough()

    # ------------------------------------------------------------------ internals
    def _load(self, task_id: str) -> None:
        """Start the engine on ``task_id``'s game (building it into the cache first if needed)."""
        if task_id == self._task_loaded and self._tw is not None:
            return
        self._install(*self._new_engine(task_id), task_id)

    def _new_engine(self, task_id: str) -> tuple[Any, Any]:
        """A started engine for ``task_id``'s game and the game's logic; the caller installs or closes it."""
        index = self._ids.index_of(task_id)
        if index is None:
            raise UnknownTaskError(f"{task_id!r} is not a task id of this TextWorld split; see env.task_ids")
        path = build_game(GameSpec(self.game_type, self.difficulty, self.split, index))
        return _start_engine(path, self.engine_budget_s)

    def _install(self, tw: Any, game: Any, task_id: str) -> None:
        """Make ``tw`` this env's engine, closing the one it had."""
        self._tw = None
        _close_engines(self._engine_box)
        self._tw, self._game = tw, game
        self._engine_box.append(tw)
        self._task_loaded = task_id

    def _engine_call(self, call: Any, *args: Any) -> Any:
        """``call(*args)`` on this env's engine under its budget; an engine that fails it is dropped."""
        try:
            return _guarded(self._tw, self.engine_budget_s, call, *args)
        except EngineError:
            self._tw, self._task_loaded = None, None
            _close_engines(self._engine_box)
            self._episode = None  # the game is gone: the next step asks for a reset (or a restore)
            raise

    def _layers(self) -> tuple[Any, Any, Any]:
        """TextWorld's StateTracking, Inform7Data and JerichoEnv layers of the running game."""
        return _layers(self._tw)

    def _info(self, state: Any) -> dict[str, Any]:
        max_score = state["max_score"] or 1
        return {
            "admissible_actions": list(state["admissible_commands"]),
            "won": bool(state["won"]),
            "lost": bool(state["lost"]),
            "score": min(1.0, max(0.0, (state["score"] or 0) / max_score)),
            "moves": int(state["moves"] or 0),
        }

    def _engine_command(self, action: str) -> tuple[str, str | None]:
        """The text to send to the interpreter, or ``(_, refusal)`` for input that must not reach it."""
        if action in self._last.get("admissible_actions", ()):
            return action, None
        command = _CONTROL.sub(" ", action[: _MAX_COMMAND * 4])
        command = " ".join(command.encode("ascii", "replace").decode("ascii").split())[:_MAX_COMMAND]
        if "\\" in command:
            # dumb-frotz reads a backslash as an escape for its hot keys (\U undo, \N restart, \R record to a file,
            # \P playback, \S seed ...), which bypass the game and corrupt the interpreter: \U crashed the process
            # (SIGSEGV), others hung it or wrote a file named by garbage. No game command contains a backslash.
            return command, "Backslashes are interpreter escapes, not part of a game command; they are disabled here."
        words = command.lower().split()
        if words and (words[0] in _META_VERBS or any(w.startswith("tw-") for w in words)):
            return command, f"'{words[0]}' is an interpreter command, not a move in the game; it is disabled here."
        if _SEPARATORS.search(command.lower()):
            return command, "Please give one command at a time."
        return command, None

    def close(self) -> None:
        self._tw = None
        _close_engines(self._engine_box)
        super().close()


#: Held by every call into a TextWorld engine in this process: loading (TextWorld parses a game's logic with a
#: tatsu grammar whose parser state is shared module-wide, so two threads loading at once corrupt each other),
#: reset, step, get/set of the interpreter state, and teardown. Reentrant: a restore loads, then sets state.
ENGINE_LOCK = threading.RLock()


def _close_engines(box: list[Any]) -> None:
    """Close and drop the engines in ``box`` under the lock, so jericho's finaliser (which unloads the engine's
    ``libfrotz.so`` copy) runs here, on this thread, and not later in some garbage-collector pass."""
    with ENGINE_LOCK:
        while box:
            engine = box.pop()
            engine.close()
            del engine


def _layers(tw: Any) -> tuple[Any, Any, Any]:
    """TextWorld's StateTracking, Inform7Data and JerichoEnv layers of the engine ``tw``."""
    from textworld.envs.wrappers.tw_inform7 import Inform7Data, StateTracking
    from textworld.envs.zmachine.jericho import JerichoEnv

    found: dict[type, Any] = {}
    layer = tw
    while layer is not None:
        found[type(layer)] = layer
        layer = getattr(layer, "_wrapped_env", None)
    return found[StateTracking], found[Inform7Data], found[JerichoEnv]


def _frotz_of(tw: Any) -> Any:
    """jericho's FrotzEnv inside the engine ``tw`` (``None`` before it loads a game).

    Walks the layers' ``__dict__``s: TextWorld's wrappers forward unknown attributes down the stack, so a plain
    ``hasattr`` on each layer costs a chain of failed lookups, and this runs on every step.
    """
    layer = tw
    while layer is not None:
        found = vars(layer)
        if "_jericho" in found:
            return found["_jericho"]
        layer = found.get("_wrapped_env")
    return None


def _halt(tw: Any) -> None:
    """Stop ``tw``'s interpreter at its next instruction (called by the watchdog while the engine runs)."""
    frotz = _frotz_of(tw)
    if frotz is not None:
        ctypes.c_int.in_dll(frotz.frotz_lib, "emulator_halted").value = 1


def _guarded(tw: Any, budget_s: float, call: Any, *args: Any) -> Any:
    """``call(*args)`` into the engine ``tw`` under :data:`ENGINE_LOCK` and a watchdog of ``budget_s`` seconds.

    Raises:
        EngineError: the call overran its budget, or the interpreter halted on a runtime error; ``tw`` is
            unusable (every further call returns at once) and should be closed.
    """
    error: Exception | None = None
    with ENGINE_LOCK:
        with WATCHDOG.guard(budget_s, lambda: _halt(tw)) as guard:
            try:
                result = call(*args)
            except Exception as exc:  # a halted engine answers garbage, which TextWorld may choke on
                error = exc
        frotz = _frotz_of(tw)
        halted = frotz is not None and frotz.frotz_lib.halted() > 0
    if guard.fired or halted:
        why = f"overran its {budget_s:g} s budget" if guard.fired else "is halted (a Z-machine runtime error)"
        raise EngineError(
            f"the TextWorld engine {why} and was stopped; reset() the env or restore a checkpoint"
        ) from error
    if error is not None:
        raise error
    return result


def _check_snapshot(snap: _Snapshot, tw: Any, game: Any) -> None:
    """Raise ``ValueError`` unless ``snap`` is a state of ``game`` (played by the engine ``tw``)."""

    tracker, i7, jericho = _layers(tw)
    frotz = jericho._jericho
    lib = frotz.frotz_lib
    with ENGINE_LOCK:
        stack_size = lib.getStackSize()
        header = _fresh_headers.get(frotz.story_file)
        if header is None:  # not started by _start_engine: read it now (a running game writes only Flags 2)
            header = _ram_header(frotz)
    layout = story_layout(frotz.story_file.decode("utf-8"))  # jericho keeps the path as UTF-8
    check_frotz_state(snap.frotz, layout, header, stack_size)
    if not (isinstance(snap.valid_actions, list) and all(isinstance(a, tuple) for a in snap.valid_actions)):
        raise ValueError("valid actions are not a list of packed actions")
    last = snap.last
    if not (isinstance(last, dict) and set(last) == {"admissible_actions", "won", "lost", "score", "moves"}):
        raise ValueError("the last info is not the env's info")
    if not (type(last["won"]) is bool and type(last["lost"]) is bool and _is_count(last["moves"])):
        raise ValueError("the last info's won, lost or moves is not one the env writes")
    scores = (last["score"], snap.best)
    if not all(type(v) is float and 0.0 <= v <= 1.0 for v in scores) or last["score"] > snap.best:
        raise ValueError("the scores are not fractions in [0, 1] with the best at least the last")
    if not (_is_count(snap.moves) and isinstance(snap.tracked, dict) and set(snap.tracked) == set(i7._tracked_infos)):
        raise ValueError("the tracker's moves or tracked infos are not the tracker's")
    if not all(v is None or _is_count(v) for v in snap.tracked.values()):
        raise ValueError("the tracked infos are not counts")
    check_logic_state(
        game,
        snap.facts,
        snap.valid_actions,
        snap.last_action,
        last["admissible_actions"],
        _unpack_proposition,
        _pack_action,
        tracker._inform7.gen_commands_from_actions,
    )


#: The header of each story's memory as the interpreter sets it up at load (the story's own header plus what the
#: interpreter writes: screen size, interpreter number, ...), by story path. Checkpoints are compared with this,
#: not with the running engine's memory, which a forged state that got past the checks may have written to.
_fresh_headers: dict[bytes, Any] = {}


def _ram_header(frotz: Any) -> Any:
    """The first 64 bytes of ``frotz``'s memory (call under :data:`ENGINE_LOCK`)."""
    import numpy as np

    ram = np.empty(frotz.frotz_lib.getRAMSize(), dtype=np.uint8)
    frotz.frotz_lib.getRAM(ram.ctypes.data)
    return ram[:64].copy()


def _is_count(value: Any) -> bool:
    return type(value) is int and 0 <= value < 1 << 31


def _start_engine(path: Path, budget_s: float) -> tuple[Any, Any]:
    """What ``textworld.start`` builds (jericho under TextWorld's Inform 7 wrappers), with the game's logic from
    the per-process cache: every wrapper takes the Game it finds on the layer below instead of loading its own."""
    import jericho
    from textworld import EnvInfos
    from textworld.envs.wrappers.tw_inform7 import TWInform7
    from textworld.envs.zmachine.jericho import JerichoEnv

    if not path.is_file() or not path.with_suffix(".json").is_file():
        raise MalformedDataError(
            f"TextWorld game {path} (or its .json) is missing from the cache; delete {path.parent} to rebuild it"
        )
    infos = EnvInfos(score=True, max_score=True, won=True, lost=True, admissible_commands=True, moves=True)
    try:
        # jericho warns that TextWorld games lack its own score detection. The filter is process-wide state: set
        # under the lock, so that two threads loading games do not restore each other's filters mid-load.
        with ENGINE_LOCK, warnings.catch_warnings():
            warnings.simplefilter("ignore", jericho.UnsupportedGameWarning)
            machine = JerichoEnv(infos)
            machine._game = _loaded_game(path.with_suffix(".json"))
            env = TWInform7(machine)
            _guarded(env, budget_s, env.load, str(path))
            env.seed(0)  # jericho's RNG is part of its saved state; a fixed seed makes episodes reproducible
            frotz = _frotz_of(env)
            if len(_fresh_headers) >= _GAMES_KEPT:
                _fresh_headers.clear()
            _fresh_headers[frotz.story_file] = _ram_header(frotz)
        return env, env._wrapped_env._game  # the Game that TextWorld's StateTracking layer holds
    except EngineError:
        raise
    except Exception as exc:  # any failure to load means the cached files are damaged
        raise MalformedDataError(
            f"TextWorld game {path} cannot be loaded ({type(exc).__name__}: {exc}); delete {path.parent} to rebuild it"
        ) from exc


#: Games kept loaded per process (TextWorld's Game: the world, quests and logic read from a game's .json, ~20 ms
#: to load, and only read by the engines that play it: TextWorld's own env copies share it the same way).
_GAMES_KEPT = 32
_games: OrderedDict[tuple[str, int, int], Any] = OrderedDict()


def _loaded_game(json_path: Path) -> Any:
    """TextWorld's ``Game`` of ``json_path``, from the per-process cache (call under :data:`ENGINE_LOCK`)."""
    from textworld.generator.game import Game

    stat = json_path.stat()
    key = (str(json_path.resolve()), stat.st_mtime_ns, stat.st_size)  # a rebuilt game is another key
    game = _games.get(key)
    if game is None:
        game = _games[key] = Game.load(str(json_path))
        while len(_games) > _GAMES_KEPT:
            _games.popitem(last=False)
    else:
        _games.move_to_end(key)
    return game


def _clean(feedback: str) -> str:
    """The game's text without the input prompt and the status line that follow it."""
    return _PROMPT_TAIL.sub("", feedback).strip()


def _without_banner(intro: str) -> str:
    """The first observation without TextWorld's ASCII-art title: its lines hold no letter or digit, and they cost
    ~400 tokens of every prompt (SmolLM2's tokenizer) while telling the agent nothing."""
    lines = intro.splitlines()
    while lines and not any(c.isalnum() for c in lines[0]):
        lines.pop(0)
    return "\n".join(lines).strip()


# ---------------------------------------------------------------------- logic objects in checkpoints
# The same facts come back in every restore; building them through TextWorld's interning (``deserialize``)
# is most of a restore, so the interned Proposition of each packed form is kept (bounded).
_PROPOSITIONS: dict[str, Any] = {}
_MAX_PROPOSITIONS = 200_000


_SEP = "\x1f"  # the ASCII unit separator: in no name or type of TextWorld's logic (checked when packing)


def _pack_proposition(prop: Any) -> str:
    """``name``, then each argument's name and type, joined by ``_SEP``."""
    packed = _SEP.join((prop.name, *[part for var in prop.arguments for part in (var.name, var.type)]))
    if packed.count(_SEP) != 2 * len(prop.arguments):
        raise ValueError(f"a name or type in {prop!r:.200} contains the separator \\x1f")
    return packed


def _unpack_proposition(packed: str) -> Any:
    """The Proposition that ``Proposition.deserialize`` would give (the same interned object)."""
    prop = _PROPOSITIONS.get(packed)
    if prop is None:
        from textworld.logic import Proposition, Variable

        if len(_PROPOSITIONS) >= _MAX_PROPOSITIONS:
            _PROPOSITIONS.clear()
        name, *parts = packed.split(_SEP)
        prop = _PROPOSITIONS[packed] = Proposition(name, [Variable(n, t) for n, t in zip(parts[::2], parts[1::2])])
    return prop


def _pack_action(action: Any) -> tuple:
    """What ``Action.serialize`` keeps, as tuples."""
    return (
        action.name,
        tuple(map(_pack_proposition, action.preconditions)),
        tuple(map(_pack_proposition, action.postconditions)),
        action.command_template,
        action.reverse_name,
        action.reverse_command_template,
    )


def _unpack_action(packed: tuple) -> Any:
    """A new Action equal to what ``Action.deserialize`` builds from the serialised form."""
    from textworld.logic import Action

    name, pre, post, command_template, reverse_name, reverse_command_template = packed
    action = Action(name, [_unpack_proposition(p) for p in pre], [_unpack_proposition(p) for p in post])
    action.command_template = command_template
    action.reverse_name = reverse_name
    action.reverse_command_template = reverse_command_template
    return action
