"""Models behind an OpenAI-compatible chat-completions server (vLLM's, a hosted API,
``r3l_learn.bridges.openai_server``)
as a :class:`wrappers.Reflector` and as a :class:`wrappers.Policy` for evaluation.

- :class:`OpenAIReflector` needs nothing but the server: it sends the reflection prompt as chat messages and
  parses the reply (R³L's reflector is often a stronger model than the policy).
- :class:`OpenAIPolicy` plays episodes. The ``Policy`` protocol works on token ids, so it needs a local
  tokenizer whose chat template matches the served model's; it turns each prompt back into chat messages (and
  checks that they render to exactly that prompt). Sampled token ids and their log-probs come back only where
  the server returns ids (vLLM with ``vllm_extensions=True``: ``return_tokens_as_token_ids``); elsewhere the
  reply is re-tokenised locally, :attr:`OpenAIPolicy.token_exact` is ``False`` and every log-prob is NaN (not a
  made-up number). Training needs exact tokens; evaluation does not. With exact ids the reply's text is their
  decoding, as every local policy's is. Where the server also returns the prompt's token ids (vLLM's
  ``return_token_ids``), they must be the prompt's; otherwise the log-probs belong to another context and are
  NaN (a warning says so). Two causes: a served chat template other than the tokenizer's, and, in multi-turn
  episodes, an earlier reply whose sampled tokens are not how its text tokenises (messages carry text, so the
  server sees the text's tokens).

Requests have a timeout and a bounded number of retries (the ``openai`` client's, with backoff, on connection
errors, 408, 409, 429 and 5xx); a request that still fails raises :class:`RemoteModelError`. The API key comes
from the ``api_key`` argument, else ``R3L_OPENAI_API_KEY``, else ``OPENAI_API_KEY``; a local server given by
``base_url`` gets the placeholder ``EMPTY`` when none is set (vLLM and our server accept any key unless started
with one).
"""

from __future__ import annotations

import logging
import math
import os
import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal

from r3l_learn.errors import R3LLearnError
from r3l_learn.policies.chat_io import HFTokenizerIO
from wrappers.policy import Generation, SamplingParams
from wrappers.retry.reflection import Reflection, ReflectionRequest, parse_reflection, reflection_messages

__all__ = ["ChatResult", "OpenAIChat", "OpenAIPolicy", "OpenAIReflector", "RemoteModelError", "UnsupportedByServer"]

logger = logging.getLogger(__name__)

#: Environment variables read for the API key, in order.
API_KEY_VARS = ("R3L_OPENAI_API_KEY", "OPENAI_API_KEY")

_TOKEN_ID = re.compile(r"token_id:(\d+)")


class RemoteModelError(R3LLearnError):
    """A request to the model server failed after its retries, or the server's answer is unusable.

    Attributes:
        status: the HTTP status of the last answer (e.g. 400 for a prompt too long), ``None`` without one.
    """

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class UnsupportedByServer(R3LLearnError):
    """The chat-completions API cannot give what was asked (e.g. prompt log-probs for constrained actions)."""


@dataclass(frozen=True)
class ChatResult:
    """One chat completion. ``token_ids``/``logprobs`` are ``None`` unless the server returned the sampled ids;
    ``prompt_token_ids`` (the server's tokens of the rendered messages) ``None`` unless it returned them."""

    text: str
    finish_reason: Literal["stop", "length"]
    token_ids: list[int] | None
    logprobs: list[float] | None
    prompt_token_ids: list[int] | None = None


class OpenAIChat:
    """A chat-completions client: one completion per call, with a timeout and bounded retries.

    Args:
        model: the model name the server serves.
        base_url: e.g. ``http://127.0.0.1:8000/v1``; ``None`` is OpenAI's API.
        api_key: default: the environment (module docstring).
        timeout: seconds per request attempt.
        max_retries: retries after the first attempt (with backoff) before :class:`RemoteModelError`.
        vllm_extensions: send vLLM's extra request fields (token ids in log-probs, the prompt's token ids, stop
            strings kept in the output); servers that reject unknown fields (OpenAI's) need ``False``.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
        vllm_extensions: bool = False,
    ):
        try:
            import openai
        except ImportError as exc:
            raise ImportError(
                "the OpenAI-compatible client needs the `openai` package: pip install 'r3l[openai]'"
            ) from exc
        if timeout <= 0 or max_retries < 0:
            raise ValueError(f"timeout must be > 0 and max_retries >= 0, got {timeout} and {max_retries}")
        key = api_key or next((os.environ[v] for v in API_KEY_VARS if os.environ.get(v)), None)
        if key is None:
            if base_url is None:
                raise RemoteModelError(f"no API key: set {' or '.join(API_KEY_VARS)}, or pass api_key")
            key = "EMPTY"
        self.model, self.base_url, self.vllm_extensions = model, base_url, vllm_extensions
        self._errors = openai.OpenAIError
        self._client = openai.OpenAI(base_url=base_url, api_key=key, timeout=timeout, max_retries=max_retries)

    def complete(
        self, messages: Sequence[dict[str, str]], params: SamplingParams, *, logprobs: bool = False
    ) -> ChatResult:
        """One completion of ``messages`` sampled as ``params`` says (stop strings are kept in the text where the
        server says which one stopped it)."""
        extra: dict[str, Any] = {}
        if self.vllm_extensions:
            extra = {"include_stop_str_in_output": True, "skip_special_tokens": False, "return_token_ids": True}
            if logprobs:
                extra["return_tokens_as_token_ids"] = True
        request: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": m["role"], "content": m["content"]} for m in messages],
            "temperature": params.temperature,
            "top_p": params.top_p,
            "max_tokens": params.max_new_tokens,
        }
        if params.stop:
            request["stop"] = list(params.stop)
        if params.seed is not None:
            request["seed"] = params.seed
        if logprobs:
            request["logprobs"] = True
        try:
            response = self._client.chat.completions.create(**request, extra_body=extra or None)
        except self._errors as exc:
            status = getattr(exc, "status_code", None)
            raise RemoteModelError(f"{self.base_url or 'OpenAI'} model {self.model!r}: {exc}", status) from exc
        if not response.choices:
            raise RemoteModelError(f"{self.base_url or 'OpenAI'} returned no choices for model {self.model!r}")
        choice = response.choices[0]
        text = choice.message.content or ""
        stopped_by = getattr(choice, "stop_reason", None)  # vLLM: the stop string (or token id) that ended it
        if isinstance(stopped_by, str) and stopped_by in params.stop and not text.endswith(stopped_by):
            text += stopped_by
        ids, lps = _sampled(choice)
        reason: Literal["stop", "length"] = "length" if choice.finish_reason == "length" else "stop"
        prompt_ids = getattr(response, "prompt_token_ids", None)  # vLLM's return_token_ids
        prompt_ids = [int(i) for i in prompt_ids] if isinstance(prompt_ids, list) else None
        return ChatResult(text=text, finish_reason=reason, token_ids=ids, logprobs=lps, prompt_token_ids=prompt_ids)


def _sampled(choice: Any) -> tuple[list[int] | None, list[float] | None]:
    """The sampled ids and log-probs, when the server returned ids (``token_id:N``), else ``(None, None)``."""
    content = getattr(getattr(choice, "logprobs", None), "content", None)
    if not content:
        return None, None
    ids, lps = [], []
    for entry in content:
        match = _TOKEN_ID.fullmatch(entry.token or "")
        if match is None:
            return None, None
        ids.append(int(match.group(1)))
        lps.append(float(entry.logprob))
    return ids, lps


class OpenAIReflector:
    """A :class:`wrappers.Reflector` on a chat-completions server; batched requests run concurrently.

    Args:
        model, base_url, api_key, timeout, max_retries, vllm_extensions: see :class:`OpenAIChat`.
        sampling: how reflections are sampled (default: temperature 1.0, 512 new tokens, the paper's settings).
        max_concurrency: requests in flight at once.
        on_error: ``"raise"`` a :class:`RemoteModelError` when a request fails after its retries, or
            ``"record"`` it as an unusable reflection (``error="request_failed"``, counted in the group stats).
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 120.0,
        max_retries: int = 2,
        vllm_extensions: bool = False,
        sampling: SamplingParams | None = None,
        max_concurrency: int = 8,
        on_error: Literal["raise", "record"] = "raise",
    ):
        if on_error not in ("raise", "record"):
            raise ValueError(f"on_error must be 'raise' or 'record', got {on_error!r}")
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        self.chat = OpenAIChat(
            model,
            base_url=base_url,
            api_key=api_key,
            timeout=timeout,
            max_retries=max_retries,
            vllm_extensions=vllm_extensions,
        )
        self.sampling = sampling or SamplingParams(temperature=1.0, max_new_tokens=512)
        self.max_concurrency, self.on_error = max_concurrency, on_error
        self.name = f"openai:{model}"

    def reflect(self, requests: Sequence[ReflectionRequest]) -> list[Reflection]:
        if not requests:
            return []
        with ThreadPoolExecutor(min(self.max_concurrency, len(requests))) as pool:
            return list(pool.map(self._one, requests))

    def _one(self, request: ReflectionRequest) -> Reflection:
        """One reflection; a prompt the server rejects (400, e.g. too long) is retried with shorter step texts."""
        traj = request.trajectory
        for max_chars in (600, 200, 60):
            messages = reflection_messages(traj, max_chars=max_chars)
            try:
                result = self.chat.complete(messages, self.sampling, logprobs=self.chat.vllm_extensions)
                break
            except RemoteModelError as exc:
                if exc.status == 400 and max_chars > 60:
                    continue
                if exc.status == 400:
                    return Reflection(None, None, error="prompt_too_long", text=str(exc), source=self.name)
                if self.on_error == "raise":
                    raise
                logger.warning("reflection request failed: %s", exc)
                return Reflection(None, None, error="request_failed", text=str(exc), source=self.name, prompt=messages)
        refl = parse_reflection(result.text, traj.num_turns)
        refl.source, refl.prompt = self.name, messages
        refl.token_ids, refl.logprobs = result.token_ids, result.logprobs
        return refl


class OpenAIPolicy(HFTokenizerIO):
    """A :class:`wrappers.Policy` on a chat-completions server, for evaluation (module docstring).

    Args:
        model, base_url, api_key, timeout, max_retries, vllm_extensions: see :class:`OpenAIChat`.
        tokenizer: a HF tokenizer with the served model's chat template (renders prompts, counts tokens).
        max_context: the served model's context length, in tokens.
        max_concurrency: completions in flight at once (one request per prompt of a batch).
    """

    def __init__(
        self,
        model: str,
        tokenizer: Any,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
        vllm_extensions: bool = False,
        max_context: int = 32768,
        max_concurrency: int = 8,
    ):
        self.chat = OpenAIChat(
            model,
            base_url=base_url,
            api_key=api_key,
            timeout=timeout,
            max_retries=max_retries,
            vllm_extensions=vllm_extensions,
        )
        self.tokenizer, self.max_context, self.max_concurrency = tokenizer, max_context, max_concurrency
        self.eos_token_ids: tuple[int, ...] = (tokenizer.eos_token_id,)
        self.name = f"openai:{model}"
        #: Whether the last generations carried the server's sampled ids and log-probs (None before any).
        self.token_exact: bool | None = None
        self._template = _TemplateShape.probe(self)

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        conversations = [self.messages(prompt) for prompt in prompts]
        if not conversations:
            return []
        with ThreadPoolExecutor(min(self.max_concurrency, len(conversations))) as pool:
            results = list(pool.map(lambda m: self.chat.complete(m, params, logprobs=True), conversations))
        exact = all(r.token_ids is not None for r in results)
        if self.token_exact is not False and not exact:
            logger.warning("%s returned no sampled token ids: replies are re-tokenised, log-probs are NaN", self.name)
        other_context = [
            r.prompt_token_ids is not None and r.prompt_token_ids != list(p) for p, r in zip(prompts, results)
        ]
        if any(other_context):
            logger.warning(
                "%s tokenised the messages to other tokens than the prompt (a chat template other than this "
                "tokenizer's, or earlier replies whose sampled tokens are not how their text tokenises): the "
                "log-probs of those replies are NaN",
                self.name,
            )
        self.token_exact = exact and not any(other_context)
        out = []
        for r, other in zip(results, other_context):
            if r.token_ids is not None and r.logprobs is not None:
                ids, text = r.token_ids, self.decode(r.token_ids)
                lps = [math.nan] * len(ids) if other else r.logprobs
            else:
                ids, text = self.tokenize(r.text), r.text
                lps = [math.nan] * len(ids)
            out.append(Generation(text=text, token_ids=ids, logprobs=lps, finish_reason=r.finish_reason))
        return out

    def score(self, prompts: Sequence[Sequence[int]], continuations: Sequence[Sequence[int]]) -> list[list[float]]:
        raise UnsupportedByServer(
            "scoring continuations needs prompt log-probs, which chat completions do not return: play with free "
            "actions (RolloutConfig(constrained=False))"
        )

    def messages(self, prompt: Sequence[int]) -> list[dict[str, str]]:
        """The chat messages whose rendering (with the generation prompt) is exactly ``prompt``."""
        text = self.tokenizer.decode(list(prompt), skip_special_tokens=False)
        messages = self._template.parse(text)
        if messages is None or self.render(messages, add_generation_prompt=True) != text:
            raise UnsupportedByServer(
                "cannot turn this prompt back into chat messages with this tokenizer's chat template (it is not a "
                "plain concatenation of messages); use a tokenizer whose template renders each message on its own"
            )
        return messages


_MARK = "\u2063R3L-CONTENT\u2063"
_ROLES = ("system", "user", "assistant")


@dataclass(frozen=True)
class _TemplateShape:
    """What a chat template writes around each role's content, and its generation prompt, learnt by rendering
    marked probes; enough to split the rendering of a conversation back into messages."""

    around: dict[str, tuple[str, str]]  # role -> (head, tail)
    generation_prompt: str

    @classmethod
    def probe(cls, io: HFTokenizerIO) -> _TemplateShape:
        first = [{"role": "system", "content": "s"}]
        around = {}
        for role in _ROLES:
            before = [] if role == "system" else first
            head_text = io.render(before, add_generation_prompt=False) if before else ""
            text = io.render([*before, {"role": role, "content": _MARK}], add_generation_prompt=False)
            if not text.startswith(head_text) or _MARK not in text:
                raise UnsupportedByServer(f"the chat template does not render a {role} message on its own")
            added = text[len(head_text) :]
            at = added.index(_MARK)
            around[role] = (added[:at], added[at + len(_MARK) :])
        plain = io.render(first, add_generation_prompt=False)
        return cls(around, io.render(first, add_generation_prompt=True)[len(plain) :])

    def parse(self, text: str) -> list[dict[str, str]] | None:
        if not text.endswith(self.generation_prompt):
            return None
        body, pos, out = text[: len(text) - len(self.generation_prompt)], 0, []
        while pos < len(body):
            for role, (head, tail) in self.around.items():
                if head and body.startswith(head, pos):
                    end = body.find(tail, pos + len(head)) if tail else len(body)
                    if end < 0:
                        return None
                    out.append({"role": role, "content": body[pos + len(head) : end]})
                    pos = end + len(tail)
                    break
            else:
                return None
        return out
