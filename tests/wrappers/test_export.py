"""Exports: HF datasets rows with conversational messages that TRL reads as they are, and the versioned JSON schema
of the groups JSONL file; each round-trips."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

import pytest

from wrappers import RolloutConfig, SamplingParams, load_jsonl, save_jsonl
from wrappers.data.export import from_hf_dataset, groups_schema, to_hf_dataset, to_rows
from wrappers.data.trajectory import FORMAT_VERSION, DataFormatError
from wrappers.retry.oracle import OracleReflector
from wrappers.retry.reflect_retry import ReflectRetry, ReflectRetryConfig

pytest.importorskip("transformers")
datasets = pytest.importorskip("datasets")

TASKS = ["countdown-train-000000", "countdown-train-000001"]


def countdown_player(prompt_text: str) -> str:
    """Guesses ``1 + 2`` unless guidance in the context states the answer."""
    found = re.search(r"The correct answer is (.+?)\.\n", prompt_text)
    return f"<action>{found.group(1)}</action>" if found else "<action>1 + 2</action>"


@pytest.fixture(scope="module")
def groups():
    """Real reflect-retry groups: failing bases, oracle-guided retries that win, auxiliary samples."""
    from r3l_learn.policies.scripted import ScriptedPolicy

    rollout = RolloutConfig(sampling=SamplingParams(max_new_tokens=48))
    config = ReflectRetryConfig(group_size=4, rollout=rollout, keep_checkpoints=True)
    rr = ReflectRetry("r3l/Countdown-v0", ScriptedPolicy(countdown_player), OracleReflector(reveal_answer=True), config)
    out = rr.collect(TASKS, seed=0)
    rr.close()
    kinds = [t.kind for g in out for t in g.trajectories]
    assert "retry" in kinds and all(g.samples for g in out)  # the fixture exercises every part of a group
    out[0].trajectories[0].metadata["note"] = "\ud83d lone surrogate"  # kept exactly inside the JSON columns
    return out


def test_dataset_round_trips_trajectories_and_samples(groups):
    ds = to_hf_dataset(groups)
    trajectories = [t for g in groups for t in g.trajectories]
    assert ds.num_rows == len(trajectories)
    assert from_hf_dataset(ds) == trajectories
    assert ds["group"] == [g for g, grp in enumerate(groups) for _ in grp.trajectories]
    samples = to_hf_dataset(groups, rows="samples")
    assert from_hf_dataset(samples) == [s for g in groups for s in g.samples]
    assert set(samples["kind"]) == {"reflection", "guided_retry"}


def test_columns_are_real_lists_not_json_text(groups):
    ds = to_hf_dataset(groups)
    row = ds[0]
    traj = groups[0].trajectories[0]
    assert row["messages"] == traj.messages and isinstance(row["messages"][0], dict)
    flat = {k: v for k, v in traj.to_dict().items() if k not in ("type", "turns", "metadata")}
    assert {k: row[k] for k in flat} == flat  # token ids, masks, log-probs, ... as real lists
    assert ds.features["messages"].feature["role"].dtype == "string"
    assert ds.features["token_ids"].feature.dtype == "int64"
    assert {"turns_json", "metadata_json"} <= set(ds.column_names) and "turns" not in ds.column_names


def test_advantages_column(groups):
    advantages = [[float(i) for i in range(len(g.trajectories))] for g in groups]
    ds = to_hf_dataset(groups, advantages=advantages)
    assert ds["advantage"] == [a for adv in advantages for a in adv]
    with pytest.raises(ValueError, match="one list per group"):
        to_rows(groups, advantages=advantages[:1])
    with pytest.raises(ValueError, match="group 0 has"):
        to_rows(groups, advantages=[[0.0], *advantages[1:]])


def test_new_dataclass_fields_flow_through(groups):
    from wrappers.data.trajectory import Trajectory

    @dataclass
    class Extended(Trajectory):
        extra_mask: list[int] = field(default_factory=list)
        behaviour: dict = field(default_factory=dict)

    base = groups[0].trajectories[0]
    ext = Extended(**{k: getattr(base, k) for k in base.__dataclass_fields__}, extra_mask=[1, 0], behaviour={"a": 1})
    (row,) = to_rows([type(groups[0])(env_id="e", task_id="t", trajectories=[ext])])
    assert row["extra_mask"] == [1, 0] and json.loads(row["behaviour_json"]) == {"a": 1}


def test_lone_surrogates_in_messages_are_replaced(groups):
    traj = groups[0].trajectories[0]
    odd = type(traj)(**{**traj.__dict__, "messages": [{"role": "user", "content": "bad \ud800 action"}]})
    ds = to_hf_dataset([type(groups[0])(env_id="e", task_id="t", trajectories=[odd])])
    assert ds[0]["messages"][0]["content"] == "bad ? action"  # as wrappers.policy.encodable does for tokenizers


def test_exports_load_in_datasets_and_trl_without_custom_parsing(tmp_path, groups):
    trl_data = pytest.importorskip("trl.data_utils")
    from r3l_learn.policies.models import tiny_tokenizer

    tokenizer = tiny_tokenizer()
    ds = to_hf_dataset(groups)
    ds.to_json(tmp_path / "rows.jsonl")
    ds.to_parquet(tmp_path / "rows.parquet")
    for kind, path in (("json", "rows.jsonl"), ("parquet", "rows.parquet")):
        loaded = datasets.load_dataset(kind, data_files=str(tmp_path / path), split="train")
        assert loaded.num_rows == ds.num_rows
        for row, traj in zip(loaded, (t for g in groups for t in g.trajectories)):
            assert trl_data.is_conversational(row)
            text = trl_data.apply_chat_template({"messages": row["messages"]}, tokenizer)["text"]
            assert text == tokenizer.apply_chat_template(traj.messages, tokenize=False)
            assert row["token_ids"] == traj.token_ids
    # SFT rows: TRL's conversational prompt-completion split works on the samples' messages as they are
    sample = to_hf_dataset(groups, rows="samples")[0]
    example = {"prompt": sample["messages"][:-1], "completion": sample["messages"][-1:]}
    assert trl_data.is_conversational(example)
    out = trl_data.apply_chat_template(example, tokenizer)
    assert out["completion"].startswith(sample["messages"][-1]["content"])


# ---------------------------------------------------------------------------------------------- JSON schema
def validate(value, schema, root):
    """A small validator for the JSON-schema keywords groups.schema.json uses (raises AssertionError)."""
    if "$ref" in schema:
        name = schema["$ref"].removeprefix("#/$defs/")
        validate(value, root["$defs"][name], root)
    if "oneOf" in schema:
        passed = 0
        for option in schema["oneOf"]:
            try:
                validate(value, option, root)
                passed += 1
            except AssertionError:
                pass
        assert passed == 1, f"{str(value)[:80]} matches {passed} of oneOf"
    types = schema.get("type")
    if types is not None:
        types = [types] if isinstance(types, str) else types
        checks = {
            "object": lambda v: isinstance(v, dict),
            "array": lambda v: isinstance(v, list),
            "string": lambda v: isinstance(v, str),
            "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
            "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
            "boolean": lambda v: isinstance(v, bool),
            "null": lambda v: v is None,
        }
        assert any(checks[t](value) for t in types), f"{str(value)[:80]} is not {types}"
    if "const" in schema:
        assert value == schema["const"], f"{value!r} != {schema['const']!r}"
    if "enum" in schema:
        assert value in schema["enum"], f"{value!r} not in {schema['enum']}"
    if isinstance(value, (int, float)) and "minimum" in schema:
        assert value >= schema["minimum"], f"{value} < {schema['minimum']}"
    if isinstance(value, dict):
        missing = set(schema.get("required", ())) - set(value)
        assert not missing, f"missing required fields {sorted(missing)}"
        for key, sub in schema.get("properties", {}).items():
            if key in value:
                validate(value[key], sub, root)
    if isinstance(value, list):
        bounds = (schema.get("minItems", 0), schema.get("maxItems", len(value)))
        assert bounds[0] <= len(value) <= bounds[1], f"{len(value)} items, not within {bounds}"
        for item in value if "items" in schema else ():
            validate(item, schema["items"], root)


def test_schema_is_versioned_and_shipped():
    schema = groups_schema()
    assert schema["x-r3l-format-version"] == FORMAT_VERSION
    assert schema["$id"].endswith(f":{FORMAT_VERSION}")
    assert schema["$defs"]["version"]["const"] == FORMAT_VERSION


def test_jsonl_records_validate_against_the_schema_and_round_trip(tmp_path, groups):
    path = tmp_path / "groups.jsonl"
    save_jsonl(path, [*groups, groups[0].trajectories[0], groups[0].samples[0]])
    schema = groups_schema()
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["type"] for r in records] == ["group"] * len(groups) + ["trajectory", "sample"]
    for record in records:
        validate(record, schema, schema)
    assert list(load_jsonl(path))[: len(groups)] == groups
    try:
        import jsonschema
    except ImportError:
        return
    for record in records:
        jsonschema.validate(record, schema)


@pytest.mark.parametrize(
    ("mutate", "why"),
    [
        (lambda r: r.pop("trajectories"), "missing required fields"),
        (lambda r: r["trajectories"][0].update(loss_mask=[2]), r"2 not in \[0, 1\]"),
        (lambda r: r["trajectories"][0].update(pivot="3"), "is not"),
        (lambda r: r["trajectories"][0]["turns"][0].update(span=[1, 2, 3]), r"3 items, not within \(2, 2\)"),
        (lambda r: r.update(type="groop"), "!= 'group'"),
    ],
)
def test_schema_rejects_malformed_records(groups, mutate, why):
    root = groups_schema()
    record = json.loads(json.dumps(groups[0].to_dict()))
    validate(record, root, root)
    mutate(record)
    with pytest.raises(AssertionError, match="matches 0 of oneOf"):
        validate(record, root, root)
    with pytest.raises(AssertionError, match=why):  # checked against the group definition: says what is wrong
        validate(record, root["$defs"]["group"], root)


def test_guided_mask_column_and_the_old_to_dataset_delegates(groups):
    from wrappers import to_dataset

    ds = to_hf_dataset(groups)
    trajectories = [t for g in groups for t in g.trajectories]
    assert ds["guided_mask"] == [t.guided_mask() for t in trajectories]
    assert any(1 in m for m in ds["guided_mask"])  # the retries' guided turns
    old = to_dataset([groups[0], trajectories[-1]])  # groups and bare trajectories, as before
    assert old["group"] == [0] * len(groups[0].trajectories) + [1]
    assert old["messages"][0] == trajectories[0].messages  # chat messages as lists, not JSON text


@pytest.mark.parametrize(
    ("column", "value", "why"),
    [
        ("loss_mask", [1], r"row 0: loss_mask: 1 value for \d+ token_ids"),
        ("reward", "1", r"row 0: reward: expected a number, got a string '1'"),
        ("turns_json", "[" * 100_000, r"row 0: not a record: JSON nested deeper than 64 levels"),
        ("metadata_json", '{"reflection": "text"}', r"row 0: metadata\.reflection: expected an object or null"),
    ],
)
def test_rows_are_checked_as_jsonl_records_are(groups, column, value, why):
    rows = to_rows(groups[:1])
    assert from_hf_dataset(rows) == groups[0].trajectories
    rows[0][column] = value
    with pytest.raises(DataFormatError, match=why):
        from_hf_dataset(rows)
