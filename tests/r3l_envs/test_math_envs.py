"""The multi-attempt math env on every source: episodes, no gold leak, checkpoints, real-data loaders."""

import json
import pickle
from pathlib import Path

import gymnasium as gym
import pytest

import r3l_envs
from r3l_envs.errors import DataNotFoundError, MalformedDataError, UnknownTaskError

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "math"

# id -> make() kwargs that work offline (real-data envs read the fixture files written in the official schemas)
MATH_ENVS = {
    "r3l/Countdown-v0": {},
    "r3l/GSMSymbolic-v0": {"num_tasks": 50},
    "r3l/ReasoningGym-v0": {"num_tasks": 50},
    "r3l/CHAMP-v0": {},
    "r3l/GSM8K-v0": {"data_path": str(FIXTURES / "gsm8k")},
    "r3l/MATH500-v0": {"data_path": str(FIXTURES / "math500")},
    "r3l/OlympiadBench-v0": {"data_path": str(FIXTURES / "olympiadbench")},
}
GARBAGE = ("no idea", "\\boxed{}", "x" * 100_000)


@pytest.fixture(autouse=True)
def _no_ambient_data(monkeypatch, tmp_path):
    """Data lookup must not depend on what this machine happens to have."""
    monkeypatch.delenv("R3L_DATA_DIR", raising=False)
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "empty-hf-cache"))


def _make(env_id, **extra):
    return gym.make(env_id, **{**MATH_ENVS[env_id], **extra})


def test_every_math_id_is_covered():
    assert {e for e in r3l_envs.list_envs() if e in MATH_ENVS} == set(MATH_ENVS)


@pytest.mark.parametrize("env_id", list(MATH_ENVS))
def test_solving_on_the_last_attempt(env_id):
    with _make(env_id) as env:
        obs, info = env.reset(seed=3)
        assert "\\boxed{}" in obs and info["attempt"] == 0 and info["admissible_actions"] is None
        gold = env.unwrapped.reference_answer()
        obs, reward, terminated, _, info = env.step("Let me think.\nI do not know.")
        assert (reward, terminated, info["attempt"], info["correct"], info["grading"]) == (
            0.0,
            False,
            1,
            False,
            "no_answer",
        )
        assert "Accepted formats" in obs and "2 attempts left" in obs
        obs, reward, terminated, _, info = env.step("The answer is 123456789.")
        assert (reward, terminated, info["won"], info["correct"]) == (0.0, False, False, False)
        assert "Incorrect" in obs and "1 attempt left" in obs
        obs, reward, terminated, _, info = env.step(f"So \\boxed{{{gold}}}")
        assert obs.startswith("Correct")
        assert (reward, terminated, info["won"], info["score"], info["attempt"], info["correct"]) == (
            1.0,
            True,
            True,
            1.0,
            3,
            True,
        )


@pytest.mark.parametrize("env_id", list(MATH_ENVS))
def test_gold_never_leaks(env_id):
    with _make(env_id) as env:
        for seed in range(3):
            obs, info = env.reset(seed=seed)
            gold = env.unwrapped.reference_answer()
            seen = [json.dumps(info)]
            for action in GARBAGE:
                obs, reward, terminated, _, info = env.step(action)
                seen += [obs, json.dumps(info)]
            assert terminated and reward == 0.0 and "No attempts left" in obs
            if len(gold) >= 3 or not gold.isdigit():  # a 1-2 digit gold could appear in "2 attempts left"
                assert not any(gold in text for text in seen), f"{env_id} leaked {gold!r}"


def test_single_attempt_and_bad_settings():
    with gym.make("r3l/Countdown-v0", max_attempts=1) as env:
        env.reset(seed=0)
        _, _, terminated, _, _ = env.step("1 + 2")
        assert terminated
    with pytest.raises(ValueError, match="max_attempts"):
        gym.make("r3l/Countdown-v0", max_attempts=0)
    with pytest.raises(ValueError, match="split must be one of"):
        gym.make("r3l/CHAMP-v0", split="valid")


def test_countdown_feedback_explains_without_solving():
    with gym.make("r3l/Countdown-v0", split="test") as env:
        env.reset(options={"task_id": "countdown-test-000007"})
        obs, *_ = env.step("\\boxed{1 + 1 + 1}")
        assert "Incorrect" in obs and "not one of the given numbers" in obs


def test_task_ids_are_stable_and_validated():
    countdown = gym.make("r3l/Countdown-v0", split="valid").unwrapped
    assert len(countdown.task_ids) == 1000 and countdown.task_ids[0] == "countdown-valid-000000"
    champ = {split: gym.make("r3l/CHAMP-v0", split=split).unwrapped.task_ids for split in ("all", "train", "test")}
    assert (len(champ["all"]), len(champ["train"]), len(champ["test"])) == (270, 216, 54)
    assert set(champ["train"]).isdisjoint(champ["test"]) and "P_Combinatorics_5" in champ["test"]
    with pytest.raises(UnknownTaskError):
        countdown.reset(options={"task_id": "countdown-train-000000"})


def test_same_task_in_two_envs_and_after_pickle():
    first, second = (gym.make("r3l/GSMSymbolic-v0", split="test", num_tasks=10) for _ in range(2))
    assert first.reset(seed=5)[0] == second.reset(seed=5)[0]
    clone = pickle.loads(pickle.dumps(first.unwrapped))
    assert (
        clone.reset(options={"task_id": "gsmsym-test-000003"})[0]
        == first.reset(options={"task_id": "gsmsym-test-000003"})[0]
    )


def test_restore_after_a_failed_attempt_into_a_fresh_env():
    env = _make("r3l/MATH500-v0")
    env.reset(options={"task_id": "test/algebra/9003.json"})
    env.step("\\boxed{2}")
    ckpt = r3l_envs.checkpoint(env)
    fresh = _make("r3l/MATH500-v0")
    r3l_envs.restore(fresh, r3l_envs.Checkpoint.from_bytes(ckpt.to_bytes()))
    _, reward, terminated, _, info = fresh.step("\\boxed{\\sqrt{3}/2}")
    assert (reward, terminated, info["attempt"]) == (1.0, True, 2)


# ---------------------------------------------------------------------------------------------- real loaders
def test_gsm8k_loader_reads_the_official_schema():
    env = _make("r3l/GSM8K-v0", split="test").unwrapped
    assert list(env.task_ids) == ["test-00000", "test-00001"]
    env.reset(options={"task_id": "test-00000"})
    assert env.reference_answer() == "1165"  # "#### 1,165": thousands separator dropped


def test_math500_and_olympiadbench_use_official_ids():
    math500 = _make("r3l/MATH500-v0").unwrapped
    assert "test/precalculus/9002.json" in math500.task_ids
    olympiad = _make("r3l/OlympiadBench-v0").unwrapped
    assert list(olympiad.task_ids) == ["9101", "9102", "9103"]
    olympiad.reset(options={"task_id": "9103"})
    assert olympiad.reference_answer() == "\\frac{2}{5}"  # the $...$ of the official final_answer removed
    _, reward, *_ = olympiad.step("the ratio is \\boxed{0.4}")
    assert reward == 1.0


def test_data_dir_and_single_file_paths(tmp_path, monkeypatch):
    (tmp_path / "math500").mkdir()
    (tmp_path / "math500" / "test.jsonl").write_bytes((FIXTURES / "math500" / "test.jsonl").read_bytes())
    monkeypatch.setenv("R3L_DATA_DIR", str(tmp_path))
    assert len(gym.make("r3l/MATH500-v0").unwrapped.task_ids) == 3
    file_path = FIXTURES / "gsm8k" / "train.jsonl"
    assert len(gym.make("r3l/GSM8K-v0", data_path=str(file_path)).unwrapped.task_ids) == 3


def test_hf_datasets_cache_download_is_found(tmp_path, monkeypatch):
    downloads = tmp_path / "hf" / "downloads"
    downloads.mkdir(parents=True)
    (downloads / "5f1c2a").write_bytes((FIXTURES / "math500" / "test.jsonl").read_bytes())
    url = "https://huggingface.co/datasets/HuggingFaceH4/MATH-500/resolve/main/test.jsonl"
    (downloads / "5f1c2a.json").write_text(json.dumps({"url": url, "etag": None}))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf"))
    assert len(gym.make("r3l/MATH500-v0").unwrapped.task_ids) == 3


@pytest.mark.parametrize(
    ("env_id", "folder", "file"),
    [
        ("r3l/GSM8K-v0", "gsm8k", "train.jsonl"),
        ("r3l/MATH500-v0", "math500", "test.jsonl"),
        ("r3l/OlympiadBench-v0", "olympiadbench", "OE_TO_maths_en_COMP.json"),
    ],
)
def test_missing_data_raises_one_clear_error(env_id, folder, file, tmp_path, monkeypatch):
    monkeypatch.setenv("R3L_DATA_DIR", str(tmp_path))
    with pytest.raises(DataNotFoundError) as caught:
        gym.make(env_id)
    message = str(caught.value)
    assert file in message and f"$R3L_DATA_DIR/{folder}/" in message and "download" in message
    with pytest.raises(DataNotFoundError, match="data_path="):
        gym.make(env_id, data_path=str(tmp_path / "nowhere"))


@pytest.mark.parametrize(
    ("env_id", "name", "content", "where"),
    [
        ("r3l/GSM8K-v0", "train.jsonl", '{"question": "q", "answer": "#### 1"}\n{"question": "q2"}\n', "line 2"),
        ("r3l/GSM8K-v0", "train.jsonl", '{"question": "q", "answer": "no hashes"}\n', "line 1"),
        ("r3l/MATH500-v0", "test.jsonl", '{"problem": "p", "answer": "1"}\nnot json\n', "line 2"),
        (
            "r3l/OlympiadBench-v0",
            "OE_TO_maths_en_COMP.json",
            '[{"id": 1, "question": "q", "final_answer": 3}]',
            "item 0",
        ),
        ("r3l/OlympiadBench-v0", "OE_TO_maths_en_COMP.json", '{"id": 1}', "not a list"),
    ],
)
def test_malformed_file_names_file_and_place(env_id, name, content, where, tmp_path):
    (tmp_path / name).write_text(content)
    with pytest.raises(MalformedDataError) as caught:
        gym.make(env_id, data_path=str(tmp_path))
    assert str(tmp_path / name) in str(caught.value) and where in str(caught.value)
    assert "expected" in str(caught.value)


def test_equation_answers_are_read_only_when_asked_for():
    """``equation_answers=True``: the restated sum a small model writes ('6 + 6 = 12') is graded by its value."""
    kwargs = {"dataset": "chain_sum", "dataset_config": {"min_terms": 2, "max_terms": 2}, "max_attempts": 2}
    for equations, won in ((False, False), (True, True)):
        with gym.make("r3l/ReasoningGym-v0", split="test", equation_answers=equations, **kwargs) as env:
            env.reset(seed=0)
            question = env.unwrapped.current_task.problem.rsplit(":", 1)[-1].strip().rstrip("=").strip()
            gold = env.unwrapped.reference_answer()
            _, reward, terminated, _, info = env.step(f"{question} = {gold}")
            assert (reward == 1.0, terminated, info["won"]) == (won, won, won), (question, gold)
    with pytest.raises(ValueError, match="expression"):
        gym.make("r3l/Countdown-v0", equation_answers=True)
