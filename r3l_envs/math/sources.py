"""Task sources of the math env: where problems come from and how an answer to one is graded.

A source has a split's stable ``task_ids``, builds a :class:`MathTask` from an id, and grades a reply to it.
Procedural sources (Countdown, GSM-Symbolic) derive each task from ``(split, index)``; CHAMP reads the problems
shipped in the ``champ-dataset`` package; GSM8K, MATH-500 and OlympiadBench read the official files
(see :mod:`.datafiles`).

Splits:

* ``Countdown``: ``train`` / ``valid`` / ``test`` (100 000 / 1 000 / 1 000 tasks unless ``num_tasks``), ids
  ``countdown-<split>-NNNNNN``. The procedural splits are disjoint by content (:mod:`r3l_envs.splits`): a
  puzzle (its numbers as a multiset, and its target) belongs to one split only, and task ``i`` is the first
  puzzle seeded by ``r3l-countdown/<split>/<i>``, ``.../<i>/1``, ``.../<i>/2``, ... that belongs to its split.
  Small configurations have few distinct puzzles, and a split repeats them: with 3 numbers <= 10 the 100,000
  train tasks hold 2,176 distinct puzzles, the 1,000 valid 259 and the 1,000 test 262 (54 in the first 64);
  with 4 numbers <= 100 nearly every task is distinct.
* ``GSMSymbolic``: ``train`` / ``valid`` / ``test`` (10 000 / 500 / 500), disjoint by question text. Task ``i``
  is reasoning-gym's item ``i`` of the split's dataset (seeds 0 / 10**8 / 2*10**8) if its question belongs to
  the split, else the first of ``i``'s further candidates (one-item datasets with seeds from
  :func:`r3l_envs.splits.candidate_seed`) whose question does.
* ``CHAMP``: ``all`` (the 270 problems), and a fixed partition of them: ``test`` holds every 5th problem of
  each category (``P_<category>_<n>`` with ``n % 5 == 0``: 54 problems), ``train`` the other 216.
* ``GSM8K``: ``train`` / ``test`` (``train.jsonl`` / ``test.jsonl``); ``MATH500``: ``test``;
  ``OlympiadBench``: ``test`` (one official subset file, ``OE_TO_maths_en_COMP`` by default).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar

from r3l_envs.errors import UnknownTaskError
from r3l_envs.math import datafiles, grading
from r3l_envs.math.answers import ANSWER_FORMATS, extract_answer, extract_expression, strip_math_delimiters
from r3l_envs.math.countdown import CountdownPuzzle, check_expression, generate_puzzle
from r3l_envs.splits import NumberedIds, candidate_seed, pick_in_split

__all__ = [
    "ChampSource",
    "CountdownSource",
    "GSM8KSource",
    "GSMSymbolicSource",
    "MATH500Source",
    "MathTask",
    "OlympiadBenchSource",
    "Outcome",
    "ReasoningGymSource",
    "TaskSource",
    "countdown_content",
]

_BOXED_HINT = "Reason step by step, then put your final answer in \\boxed{}."


@dataclass(frozen=True)
class MathTask:
    """One problem. ``reference`` and ``golds`` are privileged: never shown to the agent."""

    task_id: str
    problem: str
    reference: str  # the gold answer as the dataset states it
    golds: tuple[str, ...]  # what the grader compares to (equivalent alternatives)
    payload: Any = None  # source-specific grading data (a Countdown puzzle, a reasoning-gym entry)


@dataclass(frozen=True)
class Outcome:
    """How one reply was graded. ``detail`` may be shown to the agent: it never contains the gold answer."""

    answer: str | None  # the extracted answer, None when there was none
    correct: bool
    status: str  # "ok", "no_answer", or a grading failure: "timeout", "error", "too_long", "invalid"
    detail: str = ""


class TaskSource:
    """Base class: subclasses set ``splits``, ``answer_hint`` and implement ``task_ids``, ``task``, ``grade``."""

    splits: tuple[str, ...] = ("train", "valid", "test")
    answer_hint: str = _BOXED_HINT
    accepted_formats: str = ANSWER_FORMATS

    def __init__(self, split: str):
        if split not in self.splits:
            raise ValueError(f"{type(self).__name__}: split must be one of {list(self.splits)}, got {split!r}")
        self.split = split

    @property
    def task_ids(self) -> Sequence[str]:
        raise NotImplementedError

    def task(self, task_id: str) -> MathTask:
        """The task with this id (raises :class:`UnknownTaskError` for an id not in the split)."""
        raise NotImplementedError

    def grade(self, task: MathTask, reply: str, timeout: float) -> Outcome:
        """Extract the final answer from ``reply`` and grade it against the task's gold with math-verify."""
        answer = extract_answer(reply)
        if answer is None:
            return Outcome(None, False, "no_answer")
        result = grading.grade(answer, task.golds, timeout=timeout)
        return Outcome(answer, result.correct, result.status)

    def _unknown(self, task_id: object) -> UnknownTaskError:
        return UnknownTaskError(f"{task_id!r} is not a task of split {self.split!r} of {type(self).__name__}")


class _NumberedSource(TaskSource):
    """A procedural source: task ``i`` of a split is a pure function of ``(split, i)``."""

    default_counts: ClassVar[dict[str, int]] = {}
    prefix = ""

    def __init__(self, split: str, num_tasks: int | None):
        super().__init__(split)
        count = self.default_counts[split] if num_tasks is None else int(num_tasks)
        if count < 1:
            raise ValueError(f"num_tasks must be >= 1, got {num_tasks}")
        self._ids = NumberedIds(f"{self.prefix}-{split}-", count)

    @property
    def task_ids(self) -> Sequence[str]:
        return self._ids

    def _index(self, task_id: str) -> int:
        index = self._ids.index_of(task_id)
        if index is None:
            raise self._unknown(task_id)
        return index


class CountdownSource(_NumberedSource):
    """Countdown puzzles from :func:`.countdown.generate_puzzle`, graded by the exact expression checker."""

    default_counts: ClassVar[dict[str, int]] = {"train": 100_000, "valid": 1_000, "test": 1_000}
    prefix = "countdown"
    answer_hint = "Put your final expression in \\boxed{}, for example \\boxed{(1 + 2) * 3}."
    accepted_formats = "an expression in \\boxed{...} or <answer>...</answer>, or alone on the last line"

    def __init__(self, split: str, num_tasks: int | None = None, num_numbers: int = 4, max_number: int = 100):
        super().__init__(split, num_tasks)
        self.num_numbers, self.max_number = int(num_numbers), int(max_number)

    def puzzle(self, index: int) -> CountdownPuzzle:
        """The puzzle of task ``index``: the first of its candidate seeds whose puzzle lies in this split."""
        return _countdown_puzzle(self.split, index, self.num_numbers, self.max_number)

    def task(self, task_id: str) -> MathTask:
        puzzle = self.puzzle(self._index(task_id))
        numbers = ", ".join(map(str, puzzle.numbers))
        problem = (
            f"Using the numbers {numbers}, write an arithmetic expression that equals {puzzle.target}. "
            "You may use + - * / and parentheses; each number may be used at most once."
        )
        return MathTask(task_id, problem, puzzle.solution, (puzzle.solution,), puzzle)

    def grade(self, task: MathTask, reply: str, timeout: float) -> Outcome:
        expression = extract_expression(reply)
        if expression is None:
            return Outcome(None, False, "no_answer")
        verdict = check_expression(expression, task.payload.numbers, task.payload.target)
        status = "ok" if verdict.value is not None else "invalid"
        return Outcome(expression, verdict.correct, status, verdict.message)


def countdown_content(puzzle: CountdownPuzzle) -> dict[str, Any]:
    """A Countdown puzzle's content key: its numbers (in any order) and its target; not its solution."""
    return {"numbers": sorted(puzzle.numbers), "target": puzzle.target}


@lru_cache(maxsize=4096)
def _countdown_puzzle(split: str, index: int, num_numbers: int, max_number: int) -> CountdownPuzzle:
    def draw(attempt: int) -> CountdownPuzzle:
        # Candidate 0 keeps version 0.1's seed, so most tasks keep their puzzle.
        seed = f"r3l-countdown/{split}/{index}" + (f"/{attempt}" if attempt else "")
        return generate_puzzle(seed, num_numbers=num_numbers, max_number=max_number)

    what = f"Countdown(num_numbers={num_numbers}, max_number={max_number}) {split} task {index}"
    return pick_in_split(split, draw, countdown_content, what=what)[1]


class ReasoningGymSource(_NumberedSource):
    """Tasks of one of reasoning-gym's procedural datasets (``dataset``, with its ``config`` keywords, e.g.
    ``chain_sum`` with ``max_terms=3``), graded by the dataset's own scorer. Splits draw from disjoint seeds and
    hold disjoint questions by content (a test question is never a train one)."""

    default_counts: ClassVar[dict[str, int]] = {"train": 10_000, "valid": 500, "test": 500}
    split_seeds: ClassVar[dict[str, int]] = {"train": 0, "valid": 10**8, "test": 2 * 10**8}

    def __init__(self, dataset: str, split: str, num_tasks: int | None = None, config: dict[str, Any] | None = None):
        self.prefix = self.prefix or dataset.replace("_", "")  # task ids: "chainsum-test-00007"
        super().__init__(split, num_tasks)
        if len(self._ids) > 10**8:
            raise ValueError(f"num_tasks must be <= 10**8 (splits use disjoint seed ranges), got {num_tasks}")
        import reasoning_gym  # heavy (~2 s), but a wrong name should fail here, not at the first reset

        if dataset not in reasoning_gym.factory.DATASETS:
            known = sorted(reasoning_gym.factory.DATASETS)
            raise ValueError(f"reasoning-gym has no dataset {dataset!r}; it has {known}")
        self.dataset, self.config = dataset, dict(config or {})
        self._dataset: Any = None
        self._lock = threading.Lock()

    def _make(self, seed: int, size: int) -> Any:
        import reasoning_gym

        return reasoning_gym.create_dataset(self.dataset, seed=seed, size=size, **self.config)

    def _data(self) -> Any:
        with self._lock:
            if self._dataset is None:
                self._dataset = self._make(self.split_seeds[self.split], len(self._ids))
            return self._dataset

    def entry(self, index: int) -> dict[str, Any]:
        """reasoning-gym's entry of task ``index``: the first of its candidates whose question is in this split."""

        def draw(attempt: int) -> dict[str, Any]:
            if attempt == 0:
                return self._data()[index]
            return self._make(candidate_seed(self.dataset, self.split, index, attempt), 1)[0]

        what = f"{self.dataset} {self.split} task {index}"
        return pick_in_split(self.split, draw, lambda entry: entry["question"], what=what)[1]

    def task(self, task_id: str) -> MathTask:
        entry = self.entry(self._index(task_id))
        gold = str(entry["answer"])
        return MathTask(task_id, entry["question"], gold, (gold,), entry)

    def grade(self, task: MathTask, reply: str, timeout: float) -> Outcome:
        answer = extract_answer(reply)
        if answer is None:
            return Outcome(None, False, "no_answer")
        try:
            score = float(self._data().score_answer(answer, task.payload))
        except Exception:  # reasoning-gym scorers may raise on junk; junk is simply wrong
            return Outcome(answer, False, "error")
        return Outcome(answer, score >= 1.0, "ok")

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_dataset": None, "_lock": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _lock=threading.Lock())


class GSMSymbolicSource(ReasoningGymSource):
    """reasoning-gym's ``gsm_symbolic`` generator (100 GSM8K-derived templates), graded by its own scorer."""

    prefix = "gsmsym"

    def __init__(self, split: str, num_tasks: int | None = None):
        super().__init__("gsm_symbolic", split, num_tasks)


class ChampSource(TaskSource):
    """The 270 competition problems of CHAMP (``champ-dataset``, MIT), graded by math-verify or exact text.

    CHAMP states answers in prose ("@@C(10, 5)@@, or equivalently @@252@@", "0 is the only possible value",
    "No integer solutions"). :func:`champ_golds` turns one into the math alternatives it names; a purely
    textual answer ("No", "The sequence does not exist") is matched after normalising case, spaces and
    punctuation, never by math-verify (which would read "No" as the product n*o).
    """

    splits = ("all", "train", "test")

    @property
    def task_ids(self) -> Sequence[str]:
        return _champ_split_ids(self.split)

    def task(self, task_id: str) -> MathTask:
        if task_id not in _champ_split_ids(self.split):
            raise self._unknown(task_id)
        problem = _champ_problems()[task_id]
        return MathTask(task_id, problem.text, problem.answer, champ_golds(problem.raw_answer))

    def grade(self, task: MathTask, reply: str, timeout: float) -> Outcome:
        answer = extract_answer(reply)
        if answer is None:
            return Outcome(None, False, "no_answer")
        said = _normal_text(answer)
        if any(_normal_text(g) == said for g in (*task.golds, task.reference)):
            return Outcome(answer, True, "ok")
        math_golds = [g for g in task.golds if not _is_text(g)]
        if not math_golds:
            return Outcome(answer, False, "ok")
        result = grading.grade(answer, math_golds, timeout=timeout)
        return Outcome(answer, result.correct, result.status)


_MARKED = re.compile(r"@@(.+?)@@")
_ALTERNATIVES = re.compile(r"or equivalently|or an equivalent form|or approximately", re.IGNORECASE)
_LEADING_NUMBER = re.compile(
    r"^(?:at most\s+)?(-?\d+)(?:\s*\(|\s+is the only possible value\b|"
    r"\s+(?:values?|roots?|pairs?|inequalities|times|numbers?|integer-valued)\b|$)",
    re.IGNORECASE,
)
_EQUAL_TO = re.compile(r"(?:is equal to|value for the limit is)\s+(.+)$", re.IGNORECASE)
_MATH_WORDS = re.compile(r"sqrt|floor|ceil|sum|log|ln|sin|cos|tan|pi")


def champ_golds(raw_answer: str) -> tuple[str, ...]:
    """The answers a CHAMP ``raw_answer`` accepts (``@@`` marks its math parts), first the canonical one."""
    plain = raw_answer.replace("@@", "").strip()
    marked = [m.strip() for m in _MARKED.findall(raw_answer)]
    if marked and _ALTERNATIVES.search(raw_answer):
        return tuple(marked)
    if match := _LEADING_NUMBER.match(plain):
        return (match.group(1),)
    if match := _EQUAL_TO.search(plain):
        return (match.group(1).strip(),)
    if len(marked) == 1 and marked[0] == plain:
        return (plain,)
    if plain.lower().startswith(("yes,", "yes ")):
        return (plain, "Yes")
    return (plain,)


def _is_text(answer: str) -> bool:
    """True for prose ("No integer solutions"), False for math ("2^floor(n/2)", "sqrt(3)/3")."""
    return re.search(r"[A-Za-z]{2,}", _MATH_WORDS.sub("", answer)) is not None


def _normal_text(text: str) -> str:
    return re.sub(r"[^0-9a-z]+", " ", strip_math_delimiters(text).lower().replace("\\text", "")).strip()


@lru_cache(maxsize=1)
def _champ_problems() -> dict[str, Any]:
    import champ_dataset  # loads a 73 MB JSON once per process (~1 s)

    return dict(champ_dataset.load("v0").problems)


@lru_cache(maxsize=3)
def _champ_split_ids(split: str) -> tuple[str, ...]:
    ids = tuple(_champ_problems())
    if split == "all":
        return ids
    in_test = [int(task_id.rsplit("_", 1)[1]) % 5 == 0 for task_id in ids]
    return tuple(i for i, test in zip(ids, in_test) if test == (split == "test"))


class _FileSource(TaskSource):
    """A real dataset read from its official file (see :mod:`.datafiles` for where it is looked up)."""

    schema = ""

    def __init__(self, split: str, data_path: str | Path | None):
        super().__init__(split)
        path = datafiles.find_file(self._files(), data_path)
        self.data_path = str(path)
        self._records = datafiles.load_records(path, self._parse_row, schema=self.schema, key=type(self).__name__)
        self._by_id = {record.task_id: record for record in self._records}
        self._ids = tuple(self._by_id)

    def _files(self) -> datafiles.DatasetFiles:
        raise NotImplementedError

    def _parse_row(self, row: dict[str, Any], index: int) -> datafiles.Record:
        raise NotImplementedError

    @property
    def task_ids(self) -> Sequence[str]:
        return self._ids

    def task(self, task_id: str) -> MathTask:
        record = self._by_id.get(task_id)
        if record is None:
            raise self._unknown(task_id)
        return MathTask(task_id, record.problem, ", ".join(record.golds), record.golds)


def _text_field(row: dict[str, Any], name: str) -> str:
    value = row[name]
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"field {name!r} is {value!r}, not a non-empty string")
    return value


class GSM8KSource(_FileSource):
    """GSM8K (openai/grade-school-math): ``train.jsonl`` / ``test.jsonl``, gold after ``####``."""

    splits = ("train", "test")
    schema = "GSM8K jsonl: one object per line with 'question' and 'answer' (solution ending in '#### <number>')"

    def _files(self) -> datafiles.DatasetFiles:
        return datafiles.DatasetFiles(
            "GSM8K",
            "gsm8k",
            (f"{self.split}.jsonl",),
            ("grade-school-math", "gsm8k"),
            "grade_school_math/data/train.jsonl and test.jsonl from https://github.com/openai/grade-school-math",
        )

    def _parse_row(self, row: dict[str, Any], index: int) -> datafiles.Record:
        question, answer = _text_field(row, "question"), _text_field(row, "answer")
        if "####" not in answer:
            raise ValueError("field 'answer' has no '#### <number>' final line")
        gold = answer.rsplit("####", 1)[1].strip().replace(",", "")
        if not gold:
            raise ValueError("field 'answer' has nothing after '####'")
        return datafiles.Record(f"{self.split}-{index:05d}", question, (gold,))


class MATH500Source(_FileSource):
    """MATH-500 (the PRM800K test subset of MATH): ``test.jsonl`` with ``problem``, ``answer``, ``unique_id``."""

    splits = ("test",)
    schema = "MATH-500 jsonl: one object per line with 'problem', 'answer' and optionally 'unique_id'"

    def _files(self) -> datafiles.DatasetFiles:
        return datafiles.DatasetFiles(
            "MATH-500",
            "math500",
            ("test.jsonl",),
            ("MATH-500", "math500", "prm800k"),
            "test.jsonl from https://huggingface.co/datasets/HuggingFaceH4/MATH-500 "
            "(or prm800k/math_splits/test.jsonl from https://github.com/openai/prm800k)",
        )

    def _parse_row(self, row: dict[str, Any], index: int) -> datafiles.Record:
        problem, answer = _text_field(row, "problem"), _text_field(row, "answer")
        task_id = row.get("unique_id") or f"test-{index:03d}"
        return datafiles.Record(str(task_id), problem, (strip_math_delimiters(answer),))


class OlympiadBenchSource(_FileSource):
    """OlympiadBench (OpenBMB): one subset file, ``question`` and ``final_answer`` (a list of LaTeX strings)."""

    splits = ("test",)
    schema = (
        "OlympiadBench json (a list) or jsonl of objects with 'id', 'question' and 'final_answer' "
        '(a list of strings, e.g. ["$\\\\frac{1}{2}$"])'
    )

    def __init__(self, split: str, data_path: str | Path | None, subset: str = "OE_TO_maths_en_COMP"):
        self.subset = subset
        super().__init__(split, data_path)

    def _files(self) -> datafiles.DatasetFiles:
        names = (f"{self.subset}.json", f"{self.subset}.jsonl", f"data/{self.subset}.json")
        return datafiles.DatasetFiles(
            "OlympiadBench",
            "olympiadbench",
            names,
            ("OlympiadBench",),
            f"OlympiadBench_Dataset (data/{self.subset}.json) from https://github.com/OpenBMB/OlympiadBench",
        )

    def _parse_row(self, row: dict[str, Any], index: int) -> datafiles.Record:
        question = _text_field(row, "question")
        answers = row["final_answer"]
        if isinstance(answers, str):
            answers = [answers]
        if not isinstance(answers, list) or not answers or not all(isinstance(a, str) and a.strip() for a in answers):
            raise ValueError(f"field 'final_answer' is {answers!r}, not a non-empty list of strings")
        context = row.get("context")
        problem = f"{context}\n\n{question}" if isinstance(context, str) and context.strip() else question
        task_id = row.get("id", f"test-{index:04d}")
        # Several final answers (is_multiple_answer) must all be given: grade them as one tuple.
        gold = ", ".join(strip_math_delimiters(a) for a in answers)
        return datafiles.Record(str(task_id), problem, (gold,))
