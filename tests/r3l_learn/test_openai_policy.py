"""The OpenAI-compatible reflector and policy against a real server process (``r3l_learn.bridges.openai_server`` over
the
tiny HF model and a scripted reflector, started on loopback), never a mock."""

from __future__ import annotations

import json
import math
import os
import selectors
import socket
import subprocess
import sys
import urllib.request

import pytest

from wrappers import RolloutConfig, SamplingParams, rollout
from wrappers.retry.reflect_retry import ReflectRetry, ReflectRetryConfig

pytest.importorskip("openai")
pytest.importorskip("transformers")

KEY = "r3l-test-key"
SUGGESTION = "Walk right at every step until the last cell."
REFLECTION = json.dumps(
    {
        "trajectory_summary": "The agent walked left.",
        "root_cause_analysis": "It moved away from the goal.",
        "trajectory_outcome": "failure",
        "improvement_suggestion": SUGGESTION,
        "retry_from_step": 1,
    }
)

# The server process: the tiny random model as "tiny", a rule-based reflector as "reflector" (a real Policy whose
# replies are a valid diagnosis, so retries happen), and one with a 300-token context as "short".
SERVER = f"""
import sys
from r3l_learn.policies.hf import HFPolicy
from r3l_learn.policies.models import tiny_model
from r3l_learn.bridges.openai_server import make_server
from r3l_learn.policies.scripted import ScriptedPolicy

model, tokenizer = tiny_model(seed=0)
models = {{
    "tiny": HFPolicy(model, tokenizer, name="tiny"),
    "reflector": ScriptedPolicy(lambda prompt: {REFLECTION!r}, tokenizer),
    "short": ScriptedPolicy(lambda prompt: "{{}}", tokenizer, max_context=300),
}}
server = make_server(models, port=0, api_key=sys.argv[1])
print(f"listening on http://127.0.0.1:{{server.server_address[1]}}/v1", flush=True)
server.serve_forever()
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The base URL of a server process; ready once it printed its address (its socket listens) and /health
    answers. Stopped at the end."""
    log = tmp_path_factory.mktemp("server") / "stderr.log"
    with open(log, "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", SERVER, KEY],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env={**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"},
        )
    try:
        url = _wait_ready(proc, log, timeout=300)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def _wait_ready(proc, log, timeout):
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while True:
            if not sel.select(timeout=timeout):
                raise TimeoutError(f"the server printed no address in {timeout} s: {log.read_text()[-2000:]}")
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError(f"the server exited ({proc.wait()}): {log.read_text()[-2000:]}")
            if line.startswith("listening on "):
                url = line.split()[-1]
                break
    with urllib.request.urlopen(url.removesuffix("/v1") + "/health", timeout=30) as answer:
        assert json.load(answer) == {"status": "ok"}
    return url


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv("R3L_OPENAI_API_KEY", KEY)


def corridor_player():
    """Walks left, unless a reflection's guidance is in the context: then right."""
    from r3l_learn.policies.scripted import ScriptedPolicy

    return ScriptedPolicy(lambda prompt: "<action>right</action>" if SUGGESTION in prompt else "<action>left</action>")


def test_openai_reflector_drives_reflect_retry_collect(server):
    from r3l_learn.policies.openai import OpenAIReflector

    reflector = OpenAIReflector("reflector", base_url=server)
    config = ReflectRetryConfig(group_size=4, rollout=RolloutConfig(max_turns=10), fill=False)
    rr = ReflectRetry("r3ltest/Corridor-v0", corridor_player(), reflector, config)
    groups = rr.collect(["corridor-train-000000", "corridor-train-000001"], seed=0)
    rr.close()
    for group in groups:
        bases = [t for t in group.trajectories if t.kind == "base"]
        retries = [t for t in group.trajectories if t.kind == "retry"]
        assert len(bases) == 2 and len(retries) == 2
        assert all(b.metadata["reflection"]["source"] == "openai:reflector" for b in bases)
        assert all(b.metadata["reflection"]["text"] == REFLECTION for b in bases)
        for retry in retries:
            assert retry.pivot == 1 and SUGGESTION in retry.guidance
            assert [t.action for t in retry.turns[1:]] == ["right"] * (retry.num_turns - 1)
        assert group.metadata["stats"]["reflections_parsed"] == 2
    assert any(r.won for g in groups for r in g.trajectories if r.kind == "retry")


def test_openai_reflector_records_what_a_weak_model_replies(server):
    """The tiny random model answers noise: the collect goes on, each failure is counted by its reason."""
    from r3l_learn.policies.openai import OpenAIReflector

    reflector = OpenAIReflector("tiny", base_url=server, sampling=SamplingParams(max_new_tokens=24, seed=0))
    config = ReflectRetryConfig(group_size=2, rollout=RolloutConfig(max_turns=2))
    rr = ReflectRetry("r3ltest/Corridor-v0", corridor_player(), reflector, config)
    (group,) = rr.collect(["corridor-train-000000"], seed=0)
    rr.close()
    refl = group.trajectories[0].metadata["reflection"]
    assert refl["source"] == "openai:tiny" and refl["error"] in ("no_json", "invalid_json", "bad_outcome")
    assert refl["text"] and refl["prompt"][0]["role"] == "system"


def test_reflector_shortens_a_prompt_the_server_rejects(server):
    from r3l_learn.policies.openai import OpenAIReflector

    rr = ReflectRetry(
        "r3ltest/Corridor-v0",
        corridor_player(),
        OpenAIReflector("short", base_url=server),
        ReflectRetryConfig(group_size=2, rollout=RolloutConfig(max_turns=2)),
    )
    (group,) = rr.collect(["corridor-train-000000"], seed=0)
    rr.close()
    assert group.trajectories[0].metadata["reflection"]["error"] == "prompt_too_long"


def test_policy_samples_exactly_what_the_served_model_samples(server):
    """With the sampled ids returned (vLLM's extension), a completion through the server is token- and
    log-prob-identical to the same model sampled in this process."""
    from r3l_learn.policies.hf import HFPolicy
    from r3l_learn.policies.models import tiny_model
    from r3l_learn.policies.openai import OpenAIPolicy

    model, tokenizer = tiny_model(seed=0)
    local = HFPolicy(model, tokenizer)
    remote = OpenAIPolicy("tiny", tokenizer, base_url=server, vllm_extensions=True, max_context=4096)
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hi."}]
    prompt = local.tokenize(local.render(messages, add_generation_prompt=True))
    assert remote.messages(prompt) == messages
    params = SamplingParams(temperature=1.0, max_new_tokens=12, seed=7)
    (want,) = local.generate([prompt], params)
    (got,) = remote.generate([prompt], params)
    assert got.token_ids == want.token_ids and got.text == want.text
    assert got.logprobs == pytest.approx(want.logprobs, abs=1e-4)
    assert remote.token_exact is True


def test_a_server_whose_template_renders_other_tokens_gives_no_logprobs(server, caplog):
    """The server returns the prompt's token ids (vLLM's return_token_ids): a client whose tokenizer's template
    renders the same messages to other tokens than the server's gets the sampled ids but NaN log-probs (they
    belong to another context), and a warning."""
    from r3l_learn.policies.models import tiny_tokenizer
    from r3l_learn.policies.openai import OpenAIPolicy

    same = OpenAIPolicy("tiny", tiny_tokenizer(), base_url=server, vllm_extensions=True, max_context=4096)
    other_tokenizer = tiny_tokenizer()  # ChatML with a blank line after each message: invertible, but not the server's
    template = other_tokenizer.chat_template
    other_tokenizer.chat_template = template.replace("'<|im_end|>' + '\n'", "'<|im_end|>' + '\n\n'")
    assert other_tokenizer.chat_template != template
    other = OpenAIPolicy("tiny", other_tokenizer, base_url=server, vllm_extensions=True, max_context=4096)
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hi."}]
    params = SamplingParams(max_new_tokens=6, seed=1)
    served_prompt = same.tokenize(same.render(messages, add_generation_prompt=True))
    (exact,) = same.generate([served_prompt], params)
    assert same.token_exact is True and not any(math.isnan(x) for x in exact.logprobs)
    prompt = other.tokenize(other.render(messages, add_generation_prompt=True))
    assert other.messages(prompt) == messages and prompt != served_prompt
    (got,) = other.generate([prompt], params)
    assert got.token_ids == exact.token_ids  # the server saw the same messages
    assert other.token_exact is False and all(math.isnan(x) for x in got.logprobs)
    assert "tokenised the messages to other tokens" in caplog.text


def test_policy_plays_episodes_for_evaluation(server):
    from r3l_learn.loop.evaluate import evaluate
    from r3l_learn.policies.models import tiny_tokenizer
    from r3l_learn.policies.openai import OpenAIPolicy

    exact = OpenAIPolicy("tiny", tiny_tokenizer(), base_url=server, vllm_extensions=True, max_context=4096)
    config = RolloutConfig(max_turns=3, sampling=SamplingParams(max_new_tokens=8))
    summary, trajs = evaluate("r3ltest/Corridor-v0", exact, episodes=2, split="train", config=config, progress=False)
    assert summary.episodes == 2 and all(t.num_turns == 3 for t in trajs)
    assert all(t.metadata["policy"] == "openai:tiny" for t in trajs)
    # first turns are exact; a later prompt holds the random model's earlier replies, often bytes that are not
    # UTF-8: sent as text, the server tokenises their replacement characters, so it samples after another context
    # and those log-probs are NaN (it returns the prompt's ids: the client compares)
    assert not any(math.isnan(x) for t in trajs for x in t.turns[0].behavior_logprobs)
    # a server that returns no ids (a hosted API, vLLM without the extension): replies re-tokenised, NaN log-probs
    plain = OpenAIPolicy("tiny", tiny_tokenizer(), base_url=server, max_context=4096)
    import gymnasium as gym

    traj = rollout(gym.make("r3ltest/Corridor-v0"), plain, config, seed=0, sample_seed=0)
    assert plain.token_exact is False and traj.num_turns == 3
    assert all(math.isnan(x) for turn in traj.turns for x in turn.behavior_logprobs)


def test_constrained_actions_are_a_clear_error(server):
    from r3l_learn.policies.models import tiny_tokenizer
    from r3l_learn.policies.openai import OpenAIPolicy, UnsupportedByServer

    policy = OpenAIPolicy("tiny", tiny_tokenizer(), base_url=server)
    with pytest.raises(UnsupportedByServer, match="constrained=False"):
        policy.score([[1, 2]], [[3]])


def test_a_template_that_cannot_be_inverted_is_a_clear_error():
    from r3l_learn.policies.models import tiny_tokenizer
    from r3l_learn.policies.openai import OpenAIPolicy, UnsupportedByServer

    tokenizer = tiny_tokenizer()
    tokenizer.chat_template = (
        "{% for m in messages %}{% if m['role'] != 'system' %}{{ m['content'] }}{% endif %}{% endfor %}"
    )
    with pytest.raises(UnsupportedByServer, match="system message"):
        OpenAIPolicy("tiny", tokenizer, base_url="http://127.0.0.1:9/v1")


def test_api_key_comes_from_the_environment(server, monkeypatch):
    from r3l_learn.policies.openai import OpenAIReflector, RemoteModelError

    monkeypatch.setenv("R3L_OPENAI_API_KEY", "wrong")
    reflector = OpenAIReflector("reflector", base_url=server)
    with pytest.raises(RemoteModelError, match="invalid API key") as info:
        reflector.chat.complete([{"role": "user", "content": "hi"}], SamplingParams(max_new_tokens=4))
    assert info.value.status == 401
    monkeypatch.delenv("R3L_OPENAI_API_KEY")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(RemoteModelError, match="no API key"):
        OpenAIReflector("gpt-x")  # OpenAI's own API without a key: refused before any request


def test_server_answers_bad_requests_with_openai_errors(server):
    from r3l_learn.policies.openai import OpenAIChat, RemoteModelError

    chat = OpenAIChat("nope", base_url=server)
    with pytest.raises(RemoteModelError, match="not served here") as info:
        chat.complete([{"role": "user", "content": "hi"}], SamplingParams(max_new_tokens=4))
    assert info.value.status == 404
    request = urllib.request.Request(
        server + "/chat/completions",
        data=json.dumps({"model": "tiny", "messages": "hello"}).encode(),
        headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"},
    )
    with pytest.raises(urllib.error.HTTPError) as http:
        urllib.request.urlopen(request, timeout=30)
    assert http.value.code == 400 and "messages must be" in json.load(http.value)["error"]["message"]


def test_a_silent_server_times_out_after_bounded_retries():
    """A listening socket nobody answers: each attempt's connection waits in the accept queue and times out;
    after 1 + max_retries attempts the client raises. The queue then holds exactly those connections."""
    from r3l_learn.policies.openai import OpenAIChat, RemoteModelError

    with socket.create_server(("127.0.0.1", 0), backlog=16) as listener:
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
        chat = OpenAIChat("any", base_url=url, timeout=0.5, max_retries=2)
        with pytest.raises(RemoteModelError, match="timed out"):
            chat.complete([{"role": "user", "content": "hi"}], SamplingParams(max_new_tokens=4))
        listener.setblocking(False)
        attempts = []
        while True:
            try:
                conn, _ = listener.accept()
            except BlockingIOError:
                break
            attempts.append(conn)
        for conn in attempts:
            conn.close()
    assert len(attempts) == 3


def test_train_flags_build_an_openai_reflector(server):
    """``r3l train --reflector openai:MODEL --reflector-base-url URL``: the flags come from TrainConfig, and the
    learner's reflector is the OpenAI client on that server."""
    from r3l_learn.cli.train_args import ConfigArgumentParser, add_train_arguments, config_from_args
    from r3l_learn.loop.setup import make_reflector as _reflector
    from r3l_learn.policies.openai import OpenAIReflector

    parser = ConfigArgumentParser()
    add_train_arguments(parser)
    args = parser.parse_args(
        ["--reflector", "openai:reflector", "--reflector-base-url", server, "--model", "tiny-random"]
    )
    config = config_from_args(args)
    reflector = _reflector(config, policy=None)
    assert isinstance(reflector, OpenAIReflector) and reflector.chat.base_url == server
    result = reflector.chat.complete([{"role": "user", "content": "diagnose"}], SamplingParams(max_new_tokens=400))
    assert result.text == REFLECTION
    with pytest.raises(ValueError, match="openai:MODEL reflector only"):
        _reflector(config_from_args(parser.parse_args(["--reflector-base-url", server, "--reflector", "x"])), None)
