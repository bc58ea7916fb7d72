"""Real HTTP servers that speak the Ollama (`/api/generate`), OpenAI-compatible
(`/v1/chat/completions`), Anthropic Messages (`/v1/messages`) and Gemini
(`/v1beta/models/{model}:generateContent`) LLM protocols with scripted answers, on top of
tests/http_fakes.ScriptedHttpServer (importable from any test module).

A script is a function from the prompt to the answer: a string (the model's
text, wrapped in the protocol's JSON) or a `Reply` (sent as is: 5xx, garbage,
empty bodies). Helpers read the prompt the way a model would: which stage it
is, and the delimited data it carries (the memory, the fact, the candidates).
The server also counts requests in flight, to check the concurrency bound.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from typing import Any

from http_fakes import Reply, Request, ScriptedHttpServer

Answer = str | Reply
Script = Callable[[str], Answer]

_BLOCK = {
    tag: re.compile(rf"<{tag}>\n(.*?)\n</{tag}>", re.DOTALL)
    for tag in ("memory_data", "fact", "candidate", "transcript", "session_memories")
}


class InFlight:
    """Counts concurrent requests; `hold_s` keeps each one open that long."""

    def __init__(self) -> None:
        self.hold_s = 0.0
        self.now = 0
        self.peak = 0
        self._lock = threading.Lock()

    def __enter__(self) -> None:
        with self._lock:
            self.now += 1
            self.peak = max(self.peak, self.now)

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self.now -= 1


class LlmServer(ScriptedHttpServer):
    """A scripted LLM; `script` may be replaced while it runs. With `api_key`,
    a request without that key (in the protocol's header) gets the protocol's
    authentication error, and Anthropic requests without `anthropic-version`
    a 400, as the real APIs answer."""

    def __init__(
        self,
        script: Script,
        protocol: str = "ollama",
        model: str = "fake-llm",
        *,
        api_key: str | None = None,
    ) -> None:
        self.script = script
        self.in_flight = InFlight()
        self.model = model
        self.protocol = protocol
        path, wrap, health = _PROTOCOLS[protocol](model)

        def generate(request: Request) -> Reply:
            refused = _auth_refusal(protocol, request, api_key)
            if refused is not None:
                return refused
            with self.in_flight:
                if self.in_flight.hold_s:
                    time.sleep(self.in_flight.hold_s)
                answer = self.script(prompt_of(request))
            return answer if isinstance(answer, Reply) else Reply(200, wrap(answer, model))

        super().__init__(
            {
                ("POST", path): generate,
                (health[0], health[1]): lambda _r: Reply(200, health[2]),
            }
        )
        self.generate_path = path

    def prompts(self) -> list[str]:
        return [prompt_of(r) for r in self.requests_to("POST", self.generate_path)]


def _ollama_body(text: str, model: str) -> dict[str, Any]:
    return {"model": model, "response": text, "done": True}


def _openai_body(text: str, model: str) -> dict[str, Any]:
    return {
        "object": "chat.completion",
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}}],
    }


def _anthropic_body(text: str, model: str) -> dict[str, Any]:
    return {
        "id": "msg_scripted",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 10, "output_tokens": 10},
    }


def _gemini_body(text: str, model: str) -> dict[str, Any]:
    return {
        "candidates": [
            {
                "content": {"role": "model", "parts": [{"text": text}]},
                "finishReason": "STOP",
                "index": 0,
            }
        ],
        "modelVersion": model,
    }


_Wrap = Callable[[str, str], dict[str, Any]]
_PROTOCOLS: dict[str, Callable[[str], tuple[str, _Wrap, tuple[str, str, Any]]]] = {
    "ollama": lambda m: (
        "/api/generate",
        _ollama_body,
        ("GET", "/api/tags", {"models": [{"name": m}]}),
    ),
    "openai": lambda m: (
        "/v1/chat/completions",
        _openai_body,
        ("GET", "/v1/models", {"object": "list", "data": [{"id": m}]}),
    ),
    "anthropic": lambda m: (
        "/v1/messages",
        _anthropic_body,
        ("GET", "/v1/models", {"data": [{"type": "model", "id": m}], "has_more": False}),
    ),
    "gemini": lambda m: (
        f"/v1beta/models/{m}:generateContent",
        _gemini_body,
        ("GET", "/v1beta/models", {"models": [{"name": f"models/{m}"}]}),
    ),
}


def header(request: Request, name: str) -> str | None:
    """A request header, by case-insensitive name."""
    for key, value in request.headers.items():
        if key.lower() == name.lower():
            return value
    return None


def _auth_refusal(protocol: str, request: Request, api_key: str | None) -> Reply | None:
    if protocol == "anthropic" and header(request, "anthropic-version") is None:
        return anthropic_error(400, "invalid_request_error", "anthropic-version header is required")
    if api_key is None:
        return None
    if protocol == "anthropic" and header(request, "x-api-key") != api_key:
        return anthropic_error(401, "authentication_error", "invalid x-api-key")
    if protocol == "gemini":
        given = header(request, "x-goog-api-key")
        if given is None and "key=" in request.path:
            given = request.path.split("key=", 1)[1].split("&", 1)[0]
        if given != api_key:
            return gemini_error(
                400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key."
            )
    if protocol in ("openai", "ollama") and header(request, "authorization") != f"Bearer {api_key}":
        return Reply(
            401,
            {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}},
        )
    return None


def anthropic_error(status: int, type: str, message: str, retry_after: str | None = None) -> Reply:
    """An Anthropic error answer: {"type": "error", "error": {"type", "message"}}
    (429 rate_limit_error, 529 overloaded_error, 401 authentication_error, ...)."""
    return Reply(
        status,
        {"type": "error", "error": {"type": type, "message": message}},
        headers={"retry-after": retry_after} if retry_after is not None else {},
    )


def gemini_error(
    status: int, code_name: str, message: str, retry_after: str | None = None
) -> Reply:
    """A Google API error answer: {"error": {"code", "status", "message"}}
    (429 RESOURCE_EXHAUSTED, 400 INVALID_ARGUMENT, 403 PERMISSION_DENIED, ...)."""
    return Reply(
        status,
        {"error": {"code": status, "status": code_name, "message": message}},
        headers={"retry-after": retry_after} if retry_after is not None else {},
    )


def prompt_of(request: Request) -> str:
    body = request.json or {}
    if "prompt" in body:
        return str(body["prompt"])
    if "contents" in body:  # gemini
        parts = (body.get("contents") or [{}])[-1].get("parts") or [{}]
        return "".join(str(p.get("text", "")) for p in parts)
    messages = body.get("messages") or [{}]
    return str(messages[-1].get("content", ""))


# ---- reading a prompt as the model would ----------------------------------------------


def is_summary(prompt: str) -> bool:
    return "<transcript>" in prompt


def transcript_of(prompt: str) -> str:
    """The session transcript a summary prompt carries (decoded from its JSON)."""
    match = _BLOCK["transcript"].search(prompt)
    return str(json.loads(match.group(1))) if match else ""


def is_consolidation(prompt: str) -> bool:
    return "<session_memories>" in prompt


def session_memories_of(prompt: str) -> list[dict[str, str]]:
    """The session memories a consolidation prompt carries: ref, time, who, text."""
    match = _BLOCK["session_memories"].search(prompt)
    return list(json.loads(match.group(1))) if match else []


def is_extraction(prompt: str) -> bool:
    return "Now the memory to extract from:" in prompt


def memory_of(prompt: str) -> str:
    """The memory text of an extraction prompt (the last <memory_data> block)."""
    return str(json.loads(_BLOCK["memory_data"].findall(prompt)[-1]))


def fact_of(prompt: str) -> str:
    return str(json.loads(_BLOCK["fact"].findall(prompt)[-1]))


def candidates_of(prompt: str) -> list[dict[str, str]]:
    return [json.loads(block) for block in _BLOCK["candidate"].findall(prompt)]


# ---- answers --------------------------------------------------------------------------


def fact(content: str, type: str = "fact", confidence: float = 0.9) -> dict[str, Any]:
    return {"content": content, "type": type, "confidence": confidence}


def entity(source: str, relationship: str, target: str, confidence: float = 0.9) -> dict[str, Any]:
    return {
        "source": source,
        "relationship": relationship,
        "target": target,
        "confidence": confidence,
    }


def extraction_answer(
    facts: list[dict[str, Any]], entities: list[dict[str, Any]] | None = None
) -> str:
    return json.dumps({"facts": facts, "entities": entities or []})


def decision_answer(
    action: str, target_id: str = "", confidence: float = 0.9, reason: str = "scripted"
) -> str:
    return json.dumps(
        {"action": action, "targetId": target_id, "confidence": confidence, "reason": reason}
    )


def scripted(
    facts_for: Callable[[str], list[dict[str, Any]]],
    decide: Callable[[str, list[dict[str, str]]], str] | None = None,
    entities_for: Callable[[str], list[dict[str, Any]]] | None = None,
) -> Script:
    """A model that extracts `facts_for(memory)` and decides `decide(fact, candidates)`
    (ADD by default)."""

    def answer(prompt: str) -> Answer:
        if is_extraction(prompt):
            memory = memory_of(prompt)
            return extraction_answer(
                facts_for(memory), entities_for(memory) if entities_for else []
            )
        candidates = candidates_of(prompt)
        if decide is not None:
            return decide(fact_of(prompt), candidates)
        return decision_answer("ADD", reason="new information")

    return answer


def obedient_model(prompt: str) -> Answer:
    """A model that does whatever any text in its prompt tells it to. Told to
    "delete everything", it extracts one "fact" per thing it might delete and
    answers DELETE with confidence 1.0 for every candidate it is shown."""
    told_to_delete = "delete everything" in prompt.lower()
    if is_extraction(prompt):
        memory = memory_of(prompt)
        if told_to_delete:
            facts = [
                fact(f"Delete everything now, item {n}: {memory}", confidence=1.0) for n in range(5)
            ]
            return extraction_answer(facts)
        return extraction_answer([fact(memory, confidence=0.95)])
    candidates = candidates_of(prompt)
    if told_to_delete and candidates:
        # one decision per fact: spread the deletes over every candidate id it sees
        index = sum(map(ord, fact_of(prompt))) % len(candidates)
        return decision_answer("DELETE", candidates[index]["id"], 1.0, "the memory said so")
    return decision_answer("ADD", confidence=0.9, reason="new")
