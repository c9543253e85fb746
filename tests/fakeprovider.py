"""A local OpenAI-compatible (and Cohere-rerank-compatible) HTTP server for tests.

The real litellm client inside PostgreSQL talks to it over real HTTP. Embeddings are
hashed bags of words (so texts sharing words are similar); every request is counted.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
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
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
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
                if self.path.endswith("/embeddings"):
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
