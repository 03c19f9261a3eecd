"""The guidance-following warm-up: its examples are the guided retry's context with the expert's action as the only
target, training on them lowers their loss, and ``r3l warmup`` writes a model folder that ``r3l eval`` loads."""

import json
import shlex
from dataclasses import asdict

import pytest

pytest.importorskip("transformers")

from r3l_learn.cli.main import build_parser, main
from r3l_learn.cli.warmup_args import rebuild_command
from r3l_learn.loop.evaluate import load_policy
from r3l_learn.loop.warmup import (
    EXAMPLES_FILE,
    GUIDED_KIND,
    UNGUIDED_KIND,
    WarmupConfig,
    WarmupError,
    action_token_mask,
    example_loss,
    guided_examples,
    train_examples,
    warmup,
)
from r3l_learn.policies.hf import HFPolicy
from r3l_learn.policies.models import tiny_model
from wrappers.chat import with_guidance
from wrappers.data.trajectory import load_jsonl
from wrappers.retry.expert import NoExpertPlanError

TW = "r3l/TextWorld-v0"
# coin collector level 2: the plan is a move, then "take coin", so a base can leave it at turn 0 or 1
TW_KWARGS = {"game_type": "coin_collector", "difficulty": 2, "max_tasks": 2}
SMALL = WarmupConfig(episodes=8, batch_size=4, max_turns=3, epochs=3, lr=3e-3, seed=1)


def _targets(policy, sample) -> str:
    """The text of a sample's loss-carrying tokens."""
    return policy.decode([t for t, m in zip(sample.token_ids, sample.loss_mask, strict=True) if m])


def _fresh_policy() -> HFPolicy:
    """A tiny random model of its own (training must not touch the session's shared fixture)."""
    model, tokenizer = tiny_model(seed=0)
    return HFPolicy(model, tokenizer, name="tiny")


@pytest.fixture(scope="module")
def examples():
    policy = _fresh_policy()
    samples, stats = guided_examples(TW, policy, SMALL, env_kwargs=TW_KWARGS, progress=False)
    return policy, samples, stats


def test_an_example_is_the_guided_retry_context_and_only_the_named_actions_tokens_carry_loss(examples):
    policy, samples, stats = examples
    assert samples and stats["examples"] == len(samples) and stats["guided"] >= len(samples)
    assert stats["bases"] == SMALL.episodes and stats["target_tokens"] == sum(sum(s.loss_mask) for s in samples)
    for s in samples:
        assert s.kind == GUIDED_KIND and len(s.token_ids) == len(s.loss_mask)
        pivot = s.metadata["pivot"]
        users = [m["content"] for m in s.messages if m["role"] == "user"]
        replies = [m["content"] for m in s.messages if m["role"] == "assistant"]
        # the guidance sits before the pivot's observation, and only there; it names the expert's action
        guided = [i for i, u in enumerate(users) if u.startswith("Feedback on an earlier attempt")]
        assert guided == [pivot]
        action = s.metadata["actions"][0]
        assert f"What to do instead: From here, do: {action!r}." in users[pivot]
        assert users[pivot] == with_guidance(users[pivot].rsplit("\n\n", 1)[0], users[pivot].rsplit("\n\n", 1)[1])
        # targets="named" with one revealed step: one target turn, the pivot's reply, the action's tokens alone
        assert replies[pivot] == f"<action>{action}</action>" and len(replies) == pivot + 1
        assert _targets(policy, s) == action
        # the sequence is the chat template over those messages, token for token (the byte-level tokenizer
        # tokenises a whole rendering as the pieces): nothing but the guidance was added to a plain context
        rendered = policy.tokenize(policy.render(s.messages, add_generation_prompt=False))
        assert rendered[: len(s.token_ids)] == s.token_ids
    assert any(s.metadata["pivot"] > 0 for s in samples), "no example resumed after a shared prefix"


def test_the_examples_are_a_function_of_the_seed(examples):
    _, samples, _ = examples
    again, _ = guided_examples(TW, _fresh_policy(), SMALL, env_kwargs=TW_KWARGS, progress=False)
    assert [(s.token_ids, s.loss_mask) for s in again] == [(s.token_ids, s.loss_mask) for s in samples]


def test_suffix_targets_and_the_unguided_anchor():
    policy = _fresh_policy()
    config = WarmupConfig(episodes=8, batch_size=8, max_turns=3, seed=1, targets="suffix", unguided=True)
    samples, _ = guided_examples(TW, policy, config, env_kwargs=TW_KWARGS, progress=False)
    guided = [s for s in samples if s.kind == GUIDED_KIND]
    anchors = [s for s in samples if s.kind == UNGUIDED_KIND]
    assert guided and len(anchors) == len(guided)
    for s in guided:  # every expert turn from the pivot to the plan's end is a target
        target = _targets(policy, s)
        assert target == "".join(s.metadata["actions"]) and s.metadata["actions"][-1] == "take coin"
    for s in anchors:  # the pivot turn without guidance; the target is what the base chose there
        assert "Feedback on an earlier attempt" not in policy.decode(s.token_ids)
        assert _targets(policy, s) == s.metadata["actions"][0]


def test_training_lowers_the_loss_on_the_examples(examples):
    _, samples, _ = examples
    policy = _fresh_policy()
    before = example_loss(policy, samples)
    epochs = train_examples(policy, samples, SMALL, progress=False)
    after = example_loss(policy, samples)
    assert len(epochs) == SMALL.epochs and after < 0.8 * before, (before, epochs, after)


def test_action_token_mask_leaves_out_the_tags_and_the_end_of_turn(tiny_policy):
    ids = tiny_policy.tokenize("<action>go east</action>") + list(tiny_policy.eos_token_ids[:1])
    mask = action_token_mask(tiny_policy, ids, "go east")
    assert tiny_policy.decode([t for t, m in zip(ids, mask, strict=True) if m]) == "go east"
    free = tiny_policy.tokenize("I think so.")
    assert action_token_mask(tiny_policy, free, "go east") == [1] * len(free)  # free text: all of it was sampled


def test_r3l_warmup_writes_a_folder_that_r3l_eval_loads(tmp_path, capsys):
    start = tmp_path / "tiny"
    model, tokenizer = tiny_model(seed=0)
    model.save_pretrained(start)
    tokenizer.save_pretrained(start)
    out = tmp_path / "warm"
    kwargs = [f"{k}={v}" for k, v in TW_KWARGS.items()]
    argv = ["warmup", "--env", TW, "--env-kwargs", *kwargs, "--out", str(out), "--model", str(start)]
    argv += ["--episodes", "8", "--batch-size", "4", "--max-turns", "3", "--epochs", "1", "--seed", "1"]
    argv += ["--no-progress"]
    assert main(argv) == 0
    assert "warm-up:" in capsys.readouterr().out
    record = json.loads((out / "warmup.json").read_text())
    assert record["split"] == "train" and record["env_id"] == TW and record["env_kwargs"] == TW_KWARGS
    assert record["data"]["examples"] > 0 and record["settings"]["episodes"] == 8
    assert record["final_loss"] < record["loss_before"]
    assert len(list(load_jsonl(out / EXAMPLES_FILE))) == record["data"]["examples"]
    loaded = load_policy(str(out), dtype="float32")
    assert loaded.model.config.vocab_size == model.config.vocab_size
    evaluated = ["eval", "--env", TW, "--env-kwargs", *kwargs, "--model", str(out), "--episodes", "1"]
    evaluated += ["--actions", "constrained", "--max-turns", "1", "--no-progress", "--out", str(tmp_path / "e.jsonl")]
    assert main(evaluated) == 0
    assert main(argv) == 1  # the folder is not empty now: a one-line error, nothing lost
    assert "exists and is not an empty folder" in capsys.readouterr().err
    assert (out / "warmup.json").is_file()


def test_bad_requests_are_clear_errors(tmp_path):
    with pytest.raises(WarmupError, match="always plays the train split"):
        guided_examples(TW, _fresh_policy(), SMALL, env_kwargs={**TW_KWARGS, "split": "test"}, progress=False)
    with pytest.raises(NoExpertPlanError, match="declares no expert plan"):
        guided_examples("r3ltest/Corridor-v0", _fresh_policy(), SMALL, progress=False)
    with pytest.raises(ValueError, match="targets must be"):
        WarmupConfig(targets="all")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("keep")
    with pytest.raises(WarmupError, match="not an empty folder"):
        warmup(TW, tmp_path / "full", policy=_fresh_policy(), env_kwargs=TW_KWARGS, progress=False)


@pytest.mark.parametrize(
    "config",
    [WarmupConfig(epochs=3, lr=2e-5, max_turns=8), WarmupConfig(unguided=True, plan="rest", max_turns=None), SMALL],
)
def test_the_rebuild_command_parses_back_to_the_recorded_recipe(config):
    """What ``r3l warmup`` would run from the command a ``warmup.json`` prints: the same env, kwargs, model and
    every setting, whatever the flags' defaults are (a recipe's 3 epochs at 2e-5 are not the defaults)."""
    kwargs = {**TW_KWARGS, "note": "5", "name": "a b"}  # text that reads as a literal, and text with a space
    record = {"env_id": TW, "env_kwargs": kwargs, "model": "smollm2-135m-instruct", "settings": asdict(config)}
    words = shlex.split(rebuild_command(record, "/tmp/new folder"))
    assert words[:2] == ["r3l", "warmup"]
    args = build_parser("warmup").parse_args(words[1:])
    assert (args.env, args.model, args.out) == (TW, "smollm2-135m-instruct", "/tmp/new folder")
    assert dict(args.env_kwargs) == kwargs
    parsed = {k: v for k, v in vars(args).items() if k in WarmupConfig.__dataclass_fields__}
    assert WarmupConfig(**parsed) == config
