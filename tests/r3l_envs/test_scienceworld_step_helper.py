"""The compiled step helper gives exactly what ``PythonInterface.step`` gives, and falls back cleanly without it."""

import logging

import gymnasium as gym
import pytest

import r3l_envs
from r3l_envs.scienceworld import jvm as jvm_module
from r3l_envs.scienceworld.jvm import ScienceWorldJVM, step_helper_dir

pytestmark = pytest.mark.java

_DETERMINISTIC = ("-XX:+UnlockExperimentalVMOptions", "-XX:hashCode=2")
# Inputs PythonInterface.step treats specially, unparsable ones, and an ambiguity prompt answered with a
# non-number: the engine then returns no text and PythonInterface.step substitutes its own message.
_ODD_INPUTS = [
    "help",
    " Objects ",
    "TASK",
    "",
    "xyzzy",
    "teleport to living room",
    "move book on shelf containing book (pride and prejudice) and book (sherlock holmes) to table",
    "pick up metal pot",
    "inventory",
]


@pytest.fixture
def fresh_helper_cache(monkeypatch, tmp_path):
    """An empty r3l cache and a forgotten per-process helper lookup (restored for the other tests)."""
    monkeypatch.setenv("R3L_CACHE_DIR", str(tmp_path))
    step_helper_dir.cache_clear()
    yield tmp_path
    step_helper_dir.cache_clear()


def _envs(tasks):
    """Two envs on the same tasks: one steps through the helper, one through PythonInterface.step."""
    fast = gym.make("r3l/ScienceWorld-v0", tasks=tasks)
    slow = gym.make("r3l/ScienceWorld-v0", tasks=tasks)
    slow.unwrapped.jvm.step_helper = False
    return fast, slow


def _transcript(env, task_id, actions):
    out = [env.reset(options={"task_id": task_id})]
    for action in actions:
        out.append(env.step(action))
        if out[-1][2]:
            break
    return out


def test_helper_and_python_interface_give_identical_transcripts():
    tasks = ["melt", "find-animal", "chemistry-mix-paint-secondary-color"]
    fast, slow = _envs(tasks)
    try:
        for task_id in ["melt/var1", "find-animal/var3", "chemistry-mix-paint-secondary-color/var1"]:
            gold = fast.unwrapped.gold_actions(task_id)
            actions = _ODD_INPUTS + gold if task_id.startswith("melt") else gold
            expected = _transcript(slow, task_id, actions)
            assert _transcript(fast, task_id, actions) == expected, task_id
            assert expected[-1][4]["won"] or task_id.startswith("melt")  # the odd inputs may spoil melt's path
        assert fast.unwrapped.jvm.uses_step_helper and not slow.unwrapped.jvm.uses_step_helper
    finally:
        fast.close()
        slow.close()


def test_raw_engine_answers_and_random_state_are_identical():
    """Below canonicalisation: the exact text, score, flag and world RNG after every step."""
    jvms = [ScienceWorldJVM(java_options=_DETERMINISTIC, step_helper=flag) for flag in (True, False)]
    try:
        for jvm in jvms:
            jvm.start()
            jvm.call("load", "melt", 1, "easy", False)
        assert [jvm.uses_step_helper for jvm in jvms] == [True, False]

        def seed(jvm):
            return int(jvm.call_jvm(lambda _: jvm._random_fields["seed"].get(jvm._random)))

        answers = []
        for action in ["look around", *_ODD_INPUTS, "look at substance in metal pot"]:
            fast, slow = (jvm.step(action) for jvm in jvms)
            assert fast == slow, action
            assert seed(jvms[0]) == seed(jvms[1]), action
            answers.append(fast[0])
        # the case where the helper supplies PythonInterface.step's message for an empty answer was reached
        assert answers[1 + _ODD_INPUTS.index("pick up metal pot")].startswith("Unknown action.  Type 'help'")
    finally:
        for jvm in jvms:
            jvm.close()


def test_checkpoint_from_one_path_restores_on_the_other():
    fast, slow = _envs(["boil"])
    try:
        fast.reset(options={"task_id": "boil/var0"})
        gold = fast.unwrapped.gold_actions()
        for action in gold[:10]:
            fast.step(action)
        ckpt = r3l_envs.checkpoint(fast)
        reference = [fast.step(action) for action in gold[10:16]]
        r3l_envs.restore(slow, ckpt)  # verified replay through PythonInterface.step
        assert [slow.step(action) for action in gold[10:16]] == reference
    finally:
        fast.close()
        slow.close()


def test_helper_is_built_once_into_the_cache(fresh_helper_cache):
    folder = step_helper_dir()
    assert folder is not None and folder.parent.parent == fresh_helper_cache
    assert (folder / "r3l" / "StepHelper.class").is_file()
    step_helper_dir.cache_clear()
    assert step_helper_dir() == folder  # a second process finds it instead of compiling again
    assert [p.name for p in folder.parent.iterdir() if not p.name.startswith(".")] == [folder.name]


def test_without_javac_steps_fall_back_with_a_warning(fresh_helper_cache, monkeypatch, caplog):
    monkeypatch.setattr(jvm_module, "_javac", lambda: None)
    with (
        caplog.at_level(logging.WARNING, logger="r3l_envs.scienceworld.jvm"),
        gym.make("r3l/ScienceWorld-v0", tasks=["boil"]) as env,
    ):
        env.reset(options={"task_id": "boil/var0"})
        obs, *_ = env.step("look around")
        assert obs.startswith("This room is called") and not env.unwrapped.jvm.uses_step_helper
    assert "javac not found" in caplog.text


def test_a_failing_compile_falls_back_and_leaves_nothing_behind(fresh_helper_cache, monkeypatch, caplog):
    monkeypatch.setattr(jvm_module, "STEP_HELPER_SOURCE", "package r3l; class Broken {")
    with caplog.at_level(logging.WARNING, logger="r3l_envs.scienceworld.jvm"):
        assert step_helper_dir() is None
    assert "could not build the ScienceWorld step helper" in caplog.text and "javac exited" in caplog.text
    scienceworld_cache = fresh_helper_cache / "scienceworld"
    assert not [p for p in scienceworld_cache.iterdir() if not p.name.endswith(".lock")]


def test_a_helper_the_jvm_cannot_load_falls_back(fresh_helper_cache, monkeypatch, caplog):
    empty = fresh_helper_cache / "empty"
    empty.mkdir()
    monkeypatch.setattr(jvm_module, "step_helper_dir", lambda: empty)
    jvm = ScienceWorldJVM()
    try:
        with caplog.at_level(logging.WARNING, logger="r3l_envs.scienceworld.jvm"):
            jvm.start()
            jvm.call("load", "boil", 0, "easy", False)
        assert not jvm.uses_step_helper and "did not load r3l.StepHelper" in caplog.text
        assert jvm.step("look around")[0].startswith("This room is called")
    finally:
        jvm.close()
