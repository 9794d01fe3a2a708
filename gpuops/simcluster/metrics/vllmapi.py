"""The HTTP answers of a simulated vLLM server (its OpenAI-compatible API), shaped as vLLM's.

What a client reaches through the API server's pod proxy on a replica's port (`--port`,
default 8000): `GET /health` (200, empty), `GET /v1/models` (the served model), `GET /metrics`
(the replica's own vLLM series), `POST /v1/completions` and `/v1/chat/completions` (one request
served by the model, counted in the metrics like any other: a warm-up request). A replica that
is not Ready refuses the connection (the model is still loading), which the engine decides;
this module only builds the bodies and routes paths, so it holds no state.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

from ..core.podproxy import ProxyRequest, ProxyResponse

DEFAULT_PORT = "8000"  # vllm serve --port
DEFAULT_MAX_MODEL_LEN = 8192
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
GENERATE_PATHS = ("/v1/completions", "/v1/chat/completions")


def _json(status: int, body: Any) -> ProxyResponse:
    return ProxyResponse(status, json.dumps(body).encode())


def error(status: int, message: str, kind: str) -> ProxyResponse:
    """vLLM's ErrorResponse."""
    return _json(status, {"object": "error", "message": message, "type": kind, "param": None,
                          "code": status})


def models(model: str, created: int, max_model_len: int) -> ProxyResponse:
    return _json(200, {"object": "list", "data": [{
        "id": model, "object": "model", "created": created, "owned_by": "vllm",
        "root": model, "parent": None, "max_model_len": max_model_len,
        "permission": []}]})


def completion(path: str, model: str, created: int, finish_reason: str,
               prompt_tokens: int, completion_tokens: int) -> ProxyResponse:
    chat = path.endswith("/chat/completions")
    choice: dict[str, Any] = {"index": 0, "finish_reason": finish_reason, "logprobs": None}
    if chat:
        choice["message"] = {"role": "assistant", "content": "(simulated)"}
    else:
        choice["text"] = "(simulated)"
    return _json(200, {
        "id": f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}",
        "object": "chat.completion" if chat else "text_completion", "created": created,
        "model": model, "choices": [choice],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens}})


def requested_model(body: bytes) -> tuple[str | None, ProxyResponse | None]:
    """The `model` of a generate request's JSON body, or the 400 vLLM answers."""
    try:
        parsed = json.loads(body or b"{}")
    except ValueError:
        return None, error(400, "the request body is not valid JSON", "BadRequestError")
    if not isinstance(parsed, dict):
        return None, error(400, "the request body must be a JSON object", "BadRequestError")
    model = parsed.get("model")
    return (model if isinstance(model, str) else None), None


def route(request: ProxyRequest, *, health: Callable[[], ProxyResponse],
          list_models: Callable[[], ProxyResponse], metrics: Callable[[], ProxyResponse],
          generate: Callable[[], ProxyResponse]) -> ProxyResponse:
    """The answer to `request` by path and method (FastAPI's 404 and 405 otherwise)."""
    handlers = {"/health": ("GET", health), "/v1/models": ("GET", list_models),
                "/metrics": ("GET", metrics)}
    handlers.update({path: ("POST", generate) for path in GENERATE_PATHS})
    entry = handlers.get(request.path.rstrip("/") or "/")
    if entry is None:
        return _json(404, {"detail": "Not Found"})
    method, handler = entry
    if request.method != method:
        return _json(405, {"detail": "Method Not Allowed"})
    return handler()


def port_of(argv: str) -> str:
    """The port vLLM listens on: `--port N` / `--port=N` on its command line, else 8000."""
    return _flag(argv, "--port") or DEFAULT_PORT


def max_model_len_of(argv: str) -> int:
    text = _flag(argv, "--max-model-len")
    try:
        return int(text) if text else DEFAULT_MAX_MODEL_LEN
    except ValueError:
        return DEFAULT_MAX_MODEL_LEN


def _flag(argv: str, flag: str) -> str | None:
    words = argv.split()
    for i, word in enumerate(words):
        if word == flag and i + 1 < len(words):
            return words[i + 1]
        if word.startswith(flag + "="):
            return word.split("=", 1)[1]
    return None
