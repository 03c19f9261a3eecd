"""A minimal OpenAI-compatible chat-completions server over r3l policies (standard library only).

Serves a trained model (or the embedded one) to tools that speak the OpenAI API, on CPU, one request at a time::

    python -m r3l_learn.bridges.openai_server --model runs/r3l/final --port 8000
    # -> "r3l-openai-server: listening on http://127.0.0.1:8000/v1" (port 0 picks a free one)

or from Python, as a child process on a free loopback port (:func:`spawn`)::

    with spawn("smollm2-135m-instruct") as base_url:
        reflector = OpenAIReflector("smollm2-135m-instruct", base_url=base_url, vllm_extensions=True)

Endpoints: ``GET /health``, ``GET /v1/models``, ``POST /v1/chat/completions`` (``n=1``, no streaming). Besides
the standard fields it accepts vLLM's ``include_stop_str_in_output``, ``return_tokens_as_token_ids`` (log-prob
tokens written ``token_id:N``) and ``return_token_ids`` (the prompt's and the reply's token ids), so
:class:`r3l_learn.policies.openai.OpenAIPolicy` gets the sampled ids and can check the prompt's. For real
throughput serve with vLLM; this server is for small models, tests and demos.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import selectors
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from wrappers.policy import Policy, SamplingParams

__all__ = ["READY", "main", "make_server", "spawn"]

logger = logging.getLogger(__name__)

_MAX_BODY = 16 << 20  # bytes of one request
#: What :func:`main` prints once its socket listens, followed by the base URL: the readiness signal.
READY = "r3l-openai-server: listening on "


class _BadRequest(Exception):
    def __init__(self, message: str, status: HTTPStatus = HTTPStatus.BAD_REQUEST):
        super().__init__(message)
        self.status = status


def make_server(
    models: dict[str, Policy], *, host: str = "127.0.0.1", port: int = 0, api_key: str | None = None
) -> ThreadingHTTPServer:
    """An HTTP server answering for ``models`` (served name -> policy); call ``serve_forever()`` on it.

    Requests are answered one at a time per server (a policy is not thread-safe). With ``api_key``, requests must
    send ``Authorization: Bearer <api_key>``.
    """
    if not models:
        raise ValueError("make_server needs at least one model")
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            logger.debug("%s " + format, self.address_string(), *args)

        def do_GET(self) -> None:
            if self.path == "/health":
                self._send(HTTPStatus.OK, {"status": "ok"})
            elif self.path == "/v1/models":
                data = [{"id": name, "object": "model", "owned_by": "r3l"} for name in models]
                self._send(HTTPStatus.OK, {"object": "list", "data": data})
            else:
                self._error(HTTPStatus.NOT_FOUND, f"no route {self.path}")

        def do_POST(self) -> None:
            if self.path != "/v1/chat/completions":
                self._error(HTTPStatus.NOT_FOUND, f"no route {self.path}")
                return
            if api_key is not None and self.headers.get("Authorization") != f"Bearer {api_key}":
                self._error(HTTPStatus.UNAUTHORIZED, "invalid API key", "authentication_error")
                return
            try:
                request = self._body()
                policy, name = _model(models, request)
                with lock:
                    answer = _complete(policy, name, request)
            except _BadRequest as exc:
                self._error(exc.status, str(exc))
                return
            self._send(HTTPStatus.OK, answer)

        def _body(self) -> dict[str, Any]:
            length = int(self.headers.get("Content-Length") or 0)
            if not 0 < length <= _MAX_BODY:
                raise _BadRequest(f"the request body must be 1 to {_MAX_BODY} bytes of JSON")
            try:
                body = json.loads(self.rfile.read(length))
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise _BadRequest(f"the request body is not JSON: {exc}") from exc
            if not isinstance(body, dict):
                raise _BadRequest("the request body must be a JSON object")
            return body

        def _error(self, status: HTTPStatus, message: str, kind: str = "invalid_request_error") -> None:
            self._send(status, {"error": {"message": message, "type": kind, "code": status.value}})

        def _send(self, status: HTTPStatus, payload: dict[str, Any]) -> None:
            data = json.dumps(payload, ensure_ascii=True).encode("ascii")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return ThreadingHTTPServer((host, port), Handler)


def _model(models: dict[str, Policy], request: dict[str, Any]) -> tuple[Policy, str]:
    name = request.get("model")
    if name not in models:
        raise _BadRequest(f"model {name!r} is not served here; served: {sorted(models)}", HTTPStatus.NOT_FOUND)
    return models[name], name


def _complete(policy: Policy, name: str, request: dict[str, Any]) -> dict[str, Any]:
    """One chat completion in OpenAI's response format."""
    messages = _messages(request.get("messages"))
    if request.get("n", 1) != 1 or request.get("stream"):
        raise _BadRequest("only n=1 without streaming is supported")
    stop = request.get("stop") or ()
    stop = (stop,) if isinstance(stop, str) else tuple(stop)
    if not all(isinstance(s, str) and s for s in stop):
        raise _BadRequest("stop must be a string or a list of non-empty strings")
    try:
        params = SamplingParams(
            temperature=float(request.get("temperature", 1.0)),
            top_p=float(request.get("top_p", 1.0)),
            max_new_tokens=int(request.get("max_completion_tokens") or request.get("max_tokens") or 256),
            stop=stop,
            seed=None if request.get("seed") is None else int(request["seed"]),
        )
    except (TypeError, ValueError) as exc:
        raise _BadRequest(str(exc)) from exc
    prompt = policy.tokenize(policy.render(messages, add_generation_prompt=True))
    if len(prompt) + params.max_new_tokens > policy.max_context:
        raise _BadRequest(
            f"this model's maximum context length is {policy.max_context} tokens; the messages have {len(prompt)} "
            f"and {params.max_new_tokens} more were asked for"
        )
    gen = policy.generate([prompt], params)[0]
    text, stopped_by = gen.text, None
    hits = [(gen.text.find(s), s) for s in stop if s in gen.text]
    if gen.finish_reason == "stop" and hits:
        at, stopped_by = min(hits)
        text = gen.text[: at + len(stopped_by)] if request.get("include_stop_str_in_output") else gen.text[:at]
    choice: dict[str, Any] = {
        "index": 0,
        "message": {"role": "assistant", "content": text},
        "finish_reason": gen.finish_reason,
        "stop_reason": stopped_by,
        "logprobs": None,
    }
    if request.get("logprobs"):
        as_ids = bool(request.get("return_tokens_as_token_ids"))
        choice["logprobs"] = {"content": _logprobs(policy, gen.token_ids, gen.logprobs, as_ids)}
    ids: dict[str, Any] = {}
    if request.get("return_token_ids"):  # as vLLM answers it
        choice["token_ids"] = list(gen.token_ids)
        ids["prompt_token_ids"] = list(prompt)
    return {
        **ids,
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": name,
        "choices": [choice],
        "usage": {
            "prompt_tokens": len(prompt),
            "completion_tokens": len(gen.token_ids),
            "total_tokens": len(prompt) + len(gen.token_ids),
        },
    }


def _messages(value: Any) -> list[dict[str, str]]:
    if not isinstance(value, list) or not value:
        raise _BadRequest("messages must be a non-empty list")
    out = []
    for m in value:
        if not (isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)):
            raise _BadRequest("each message needs a string role and a string content")
        out.append({"role": m["role"], "content": m["content"]})
    return out


def _logprobs(policy: Policy, ids: Sequence[int], lps: Sequence[float], as_ids: bool) -> list[dict[str, Any]]:
    out = []
    for token, lp in zip(ids, lps):
        text = f"token_id:{token}" if as_ids else policy.decode([token])
        out.append({"token": text, "logprob": lp, "bytes": list(text.encode("utf-8")), "top_logprobs": []})
    return out


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m r3l_learn.bridges.openai_server``: serve one model until interrupted."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct", help="embedded name, HF folder or tiny-random")
    parser.add_argument("--served-model-name", default=None, help="the name clients ask for (default: --model)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    parser.add_argument("--api-key", default=None, help="require this bearer key")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    from r3l_learn.loop.evaluate import load_policy

    policy = load_policy(args.model, dtype=args.dtype, device=args.device)
    server = make_server(
        {args.served_model_name or args.model: policy}, host=args.host, port=args.port, api_key=args.api_key
    )
    host, port = server.server_address[:2]
    # the readiness signal: printed once the socket listens, so a parent can wait on this line, not on a timer
    print(f"{READY}http://{host}:{port}/v1", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


@contextlib.contextmanager
def spawn(
    model: str,
    *,
    served_model_name: str | None = None,
    dtype: str = "auto",
    api_key: str | None = None,
    timeout_s: float = 300.0,
) -> Iterator[str]:
    """Serve ``model`` from a child process (``python -m r3l_learn.bridges.openai_server`` on a free loopback port).

    Yields the base URL (``http://127.0.0.1:PORT/v1``) once the server printed :data:`READY` and ``/health``
    answers; the process is terminated (killed if it lingers) when the block exits.

    Raises:
        TimeoutError: not ready within ``timeout_s`` (loading a model on a loaded CPU takes a while).
        RuntimeError: the process exited first; the message holds the end of its stderr.
    """
    argv = [sys.executable, "-m", "r3l_learn.bridges.openai_server", "--model", model, "--port", "0", "--dtype", dtype]
    if served_model_name:
        argv += ["--served-model-name", served_model_name]
    if api_key:
        argv += ["--api-key", api_key]
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=err, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}
        )
        try:
            url = _await_ready(proc, err, timeout_s)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            proc.stdout.close()


def _await_ready(proc: subprocess.Popen, err: Any, timeout_s: float) -> str:
    def stderr_tail() -> str:
        err.seek(0)
        return err.read()[-2000:]

    deadline = time.monotonic() + timeout_s
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(timeout=left):
                raise TimeoutError(f"the model server was not ready within {timeout_s:.0f} s: {stderr_tail()}")
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError(f"the model server exited with status {proc.wait()}: {stderr_tail()}")
            if line.startswith(READY):
                url = line[len(READY) :].strip()
                break
    with urllib.request.urlopen(url.removesuffix("/v1") + "/health", timeout=max(deadline - time.monotonic(), 1)):
        pass  # a 200: anything else raised
    return url


if __name__ == "__main__":
    sys.exit(main())
