"""A local OpenAI-compatible (and Cohere-rerank-compatible) HTTP server for tests.

The real litellm client inside PostgreSQL talks to it over real HTTP. Embeddings are
hashed bags of words (so texts sharing words are similar); every request is counted.
Chat completions are scripted per test: ``chat`` (a function of the request body) says
what to answer; the server counts calls and the most requests it had in flight at once.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

WORD = re.compile(r"[a-z0-9]+")


def hashed_vector(text: str, dim: int) -> list[float]:
    vec = [0.0] * dim
    for word in WORD.findall(text.lower()):
        h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")
        vec[h % dim] += 1.0 if (h >> 32) & 1 else -1.0
    norm = math.sqrt(sum(v * v for v in vec)) or 1.0
    return [v / norm for v in vec]


class FakeProvider:
    def __init__(self, dim: int = 16) -> None:
        self.dim = dim
        self.lock = threading.Lock()
        self.embedding_calls = 0
        self.embedded_texts: list[str] = []
        self.rerank_calls = 0
        self.fail_next = 0  # answer this many requests with 429 first
        self.down = False  # answer every request with 503
        self.poison = "POISON"  # inputs containing this get a 400
        # Chat: chat(body) -> answer text, or (status, body dict[, headers]) for an error.
        self.chat: Callable[[dict[str, Any]], Any] = default_chat
        self.chat_delay = 0.0  # seconds each chat answer takes
        self.chat_calls: list[dict[str, Any]] = []  # request bodies, in arrival order
        self.chat_times: list[float] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.embed_delay = 0.0  # seconds each embedding answer takes
        self.embed_in_flight = 0
        self.embed_max_in_flight = 0
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(
                self, code: int, body: dict[str, Any], headers: dict[str, str] | None = None
            ) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with provider.lock:
                    if provider.down:
                        self._send(503, {"error": {"message": "service unavailable"}})
                        return
                    if provider.fail_next > 0:
                        provider.fail_next -= 1
                        self._send(
                            429, {"error": {"message": "rate limited", "type": "rate_limit"}}
                        )
                        return
                if self.path.endswith("/chat/completions"):
                    provider.complete(self, body)
                elif self.path.endswith("/embeddings"):
                    provider.embed(self, body)
                elif self.path.endswith("/rerank"):
                    provider.rerank(self, body)
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def embed(self, handler: Any, body: dict[str, Any]) -> None:
        inputs = body.get("input")
        if isinstance(inputs, str):
            inputs = [inputs]
        with self.lock:
            self.embed_in_flight += 1
            self.embed_max_in_flight = max(self.embed_max_in_flight, self.embed_in_flight)
        try:
            time.sleep(self.embed_delay)  # a rejected request is in flight as long as any
        finally:
            with self.lock:
                self.embed_in_flight -= 1
        if any(self.poison in t for t in inputs):
            handler._send(
                400,
                {"error": {"message": "input rejected: poison", "type": "invalid_request_error"}},
            )
            return
        with self.lock:
            self.embedding_calls += 1
            self.embedded_texts.extend(inputs)
        data = [
            {"object": "embedding", "index": i, "embedding": hashed_vector(t, self.dim)}
            for i, t in enumerate(inputs)
        ]
        tokens = sum(len(t.split()) for t in inputs)
        handler._send(
            200,
            {
                "object": "list",
                "data": data,
                "model": body.get("model"),
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            },
        )

    def complete(self, handler: Any, body: dict[str, Any]) -> None:
        with self.lock:
            self.chat_calls.append(body)
            self.chat_times.append(time.monotonic())
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.chat_delay:
                time.sleep(self.chat_delay)
            answer = self.chat(body)
        finally:
            with self.lock:
                self.in_flight -= 1
        if isinstance(answer, tuple):
            handler._send(*answer)
            return
        prompt = sum(len(str(m.get("content", "")).split()) for m in body.get("messages", []))
        completion = len(str(answer).split())
        handler._send(
            200,
            {
                "id": "chatcmpl-test",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model"),
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": answer},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {
                    "prompt_tokens": prompt,
                    "completion_tokens": completion,
                    "total_tokens": prompt + completion,
                },
            },
        )

    def prompts(self) -> list[str]:
        """The last user message of every chat request so far."""
        return [last_user(b) for b in self.chat_calls]

    def rerank(self, handler: Any, body: dict[str, Any]) -> None:
        with self.lock:
            self.rerank_calls += 1
        query = set(WORD.findall(body["query"].lower()))
        results = []
        for i, doc in enumerate(body["documents"]):
            text = doc if isinstance(doc, str) else doc.get("text", "")
            words = WORD.findall(text.lower())
            score = sum(1 for w in words if w in query) / (1 + len(words)) ** 0.5
            results.append({"index": i, "relevance_score": score})
        results.sort(key=lambda r: -r["relevance_score"])
        handler._send(
            200, {"id": "rr", "results": results, "meta": {"billed_units": {"search_units": 1}}}
        )

    def __enter__(self) -> FakeProvider:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def last_user(body: dict[str, Any]) -> str:
    users = [m for m in body.get("messages", []) if m.get("role") == "user"]
    return str(users[-1]["content"]) if users else ""


def default_chat(body: dict[str, Any]) -> str:
    """Answers as a model would, from the prompt: a summary naming the section, a
    description naming the document, sub-sections split at paragraph starts."""
    prompt = last_user(body)
    section = re.search(r"^Section: (.*)$", prompt, re.M)
    if '"sections"' in prompt and section:
        text = prompt.split("Text:\n", 1)[1].rsplit("\n\nReturn", 1)[0]
        starts = [p.strip().split("\n")[0][:30] for p in re.split(r"\n\s*\n", text) if p.strip()]
        return json.dumps(
            {
                "sections": [
                    {"title": f"Part {i + 1}", "starts_with": s} for i, s in enumerate(starts)
                ]
            }
        )
    if '"summary"' in prompt and section:
        return json.dumps({"summary": f"About {section.group(1)}."})
    question = re.search(r"^Question: (.*)$", prompt, re.M)
    if question:
        words = {w for w in WORD.findall(question.group(1).lower()) if len(w) > 3}
        if '"documents"' in prompt:  # phase 1: documents whose summary shares a word
            blocks = re.findall(r"^\[(d\d+)\] (.*)\n(.*)$", prompt, re.M)
            ids = [d for d, a, b in blocks if words & set(WORD.findall((a + b).lower()))]
            return json.dumps({"documents": ids, "reasoning": "their sections share words"})
        if '"node_ids"' in prompt:  # phase 2: sections whose title shares a word
            lines = re.findall(r"\[(d\d+:\d{4})\] ([^(—\n]*)", prompt)
            overlap = {i: len(words & set(WORD.findall(t.lower()))) for i, t in lines}
            # Most shared words first; reading order on a tie.
            ids = sorted((i for i in overlap if overlap[i]), key=lambda i: -overlap[i])
            return json.dumps(
                {"node_ids": ids, "reasoning": "titles match " + " ".join(sorted(words))}
            )
    doc = re.search(r"^Document: (.*)$", prompt, re.M)
    if '"description"' in prompt and doc:
        return json.dumps({"description": f"A document about {doc.group(1)}."})
    return json.dumps({"answer": "unscripted"})
