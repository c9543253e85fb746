"""The LLM layer every strategy uses: litellm chat calls with validated JSON answers,
a call cache, a concurrency cap that holds across backends, retries and accounting.

How a long indexing job stays safe: a strategy's build is deterministic, so the same
document and settings ask the same questions. Every answer that validates is written
to ``kb.llm_call`` (keyed by model, endpoint, messages and parameters). A build runs in
steps: once a step has spent ``kb.llm_step_seconds``, :class:`StepYield` ends it, the
step's transaction commits the answers so far, and the worker calls again; the next
step replays the build, now served from the cache up to where it stopped. A killed
worker loses at most the calls of one wave, a reindex with unchanged settings makes no
provider call at all, and no transaction stays open while minutes of calls go by.

Threads only talk HTTP; every database access (cache, slots) happens on the thread
PL/Python called us on, as PL/Python requires.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any

from kbpg_db.config import LlmSettings

# Provider errors worth another try (embeddings, rerank and chat calls alike).
RETRYABLE = (
    "RateLimitError",
    "Timeout",
    "APITimeoutError",
    "APIConnectionError",
    "ServiceUnavailableError",
    "InternalServerError",
    "BadGatewayError",
)
MAX_RETRY_AFTER_S = 120.0


class StepYield(Exception):
    """This step's time budget is spent; the answers so far are cached."""


class LlmError(Exception):
    """A call that failed for good (after retries), or whose answer never validated.
    ``permanent``: asking again later cannot help, so the job is not retried."""

    permanent = False


class UnusableAnswer(LlmError):
    """The model's answer did not validate, asked twice: the same model with the same
    question answers the same way (temperature 0, and the answers are cached)."""

    permanent = True


class NoModel(LlmError):
    """The strategy needs an LLM and the settings name none."""

    permanent = True


@dataclass
class Usage:
    """Provider calls made (cache hits cost nothing) and what they cost."""

    calls: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    cost_known: bool = True

    def as_json(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "cache_hits": self.cache_hits,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cost_usd": self.cost_usd if self.cost_known else None,
        }


@dataclass
class Request:
    """One question. ``validate`` turns the parsed answer into the value the caller
    wants or raises ``ValueError`` saying what is wrong (that text is sent back once)."""

    purpose: str
    messages: list[dict[str, Any]]
    schema: dict[str, Any] | None = None  # JSON schema of the answer; None: plain text
    validate: Callable[[Any], Any] | None = None
    max_tokens: int | None = None
    raw_answer: bool = False  # validate sees the answer's text (it parses it itself)


@dataclass
class Answer:
    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None
    calls: int = 1


# --- parsing ---------------------------------------------------------------------------------
_FENCED = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.S)


def _balanced(text: str) -> str | None:
    """The first balanced {...} or [...] in ``text`` (string-aware), if any."""
    for start, ch in enumerate(text):
        if ch not in "{[":
            continue
        close = {"{": "}", "[": "]"}
        stack = [close[ch]]
        in_str = esc = False
        for i in range(start + 1, len(text)):
            c = text[i]
            if in_str:
                if esc:
                    esc = False
                elif c == "\\":
                    esc = True
                elif c == '"':
                    in_str = False
            elif c == '"':
                in_str = True
            elif c in "{[":
                stack.append(close[c])
            elif c in "}]":
                if c != stack.pop():
                    break
                if not stack:
                    return text[start : i + 1]
        return None
    return None


def parse_json(text: str) -> Any:
    """JSON from a model's answer: the whole text, else a fenced block, else the first
    balanced object or array. Raises ``ValueError`` when none parses."""
    candidates = [text.strip()]
    candidates += [m.strip() for m in _FENCED.findall(text)]
    found = _balanced(text)
    if found:
        candidates.append(found)
    for candidate in candidates:
        try:
            return json.loads(candidate)
        except (json.JSONDecodeError, ValueError):
            continue
    raise ValueError("the answer is not JSON" + (f": {text[:200]!r}" if text else " (empty)"))


# --- the provider --------------------------------------------------------------------------
def import_litellm() -> Any:
    """litellm, imported on first use (seconds: kept off paths that do not call a provider)."""
    # Offline: litellm would otherwise spend seconds retrying a price-map download.
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    import litellm

    litellm.telemetry = False
    litellm.suppress_debug_info = True
    return litellm


def retry_after_seconds(exc: BaseException) -> float | None:
    """The provider's Retry-After (seconds or an HTTP date), if its error carried one."""
    headers: Any = None
    for holder in (exc, getattr(exc, "response", None)):
        headers = getattr(holder, "litellm_response_headers", None) or getattr(
            holder, "headers", None
        )
        if headers:
            break
    if not headers:
        return None
    try:
        value = headers.get("retry-after") or headers.get("Retry-After")
    except AttributeError:
        return None
    if value is None:
        return None
    try:
        return min(max(float(value), 0.0), MAX_RETRY_AFTER_S)
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(str(value)).timestamp()
    except (TypeError, ValueError):
        return None
    return min(max(when - time.time(), 0.0), MAX_RETRY_AFTER_S)


def request_key(settings: LlmSettings, req: Request) -> str:
    """The cache key: model, endpoint, messages and every parameter that shapes the answer."""
    material = {
        "model": settings.model,
        "api_base": settings.api_base,
        "temperature": settings.temperature,
        "messages": req.messages,
        "schema": req.schema,
        "max_tokens": req.max_tokens,
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


class Provider:
    """One chat completion over litellm, with retries; thread-safe (no database)."""

    def __init__(self, settings: LlmSettings, api_key: str | None) -> None:
        if not settings.model:
            raise NoModel("no LLM model is configured (set extra.model)")
        self.settings = settings
        self.api_key = api_key
        self.litellm = import_litellm()

    def complete(self, messages: list[dict[str, Any]], req: Request) -> Answer:
        s = self.settings
        kwargs: dict[str, Any] = {
            "model": s.model,
            "messages": messages,
            "timeout": s.request_timeout_s,
            "temperature": s.temperature,
            "max_retries": 0,  # ours below honour Retry-After; the SDK's would not
            "drop_params": True,
        }
        if s.api_base:
            kwargs["api_base"] = s.api_base
        if self.api_key:
            kwargs["api_key"] = self.api_key
        elif s.api_base:
            kwargs["api_key"] = "none"  # a local OpenAI-compatible server needs no key
        if req.max_tokens:
            kwargs["max_tokens"] = req.max_tokens
        if req.schema is not None:
            kwargs["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": req.purpose, "schema": req.schema, "strict": False},
            }
        delay = 1.0
        for attempt in range(s.max_retries + 1):
            try:
                response = self.litellm.completion(**kwargs)
                break
            except Exception as exc:
                name = type(exc).__name__
                if name not in RETRYABLE or attempt == s.max_retries:
                    raise LlmError(f"{s.model} failed: {name}: {_short(exc)}") from exc
                wait = retry_after_seconds(exc)
                time.sleep(wait if wait is not None else delay * (1 + random.random() / 4))
                delay = min(delay * 2, 30.0)
        choice = response.choices[0]
        text = (getattr(choice.message, "content", None) or "").strip()
        usage = getattr(response, "usage", None)
        prompt = int(getattr(usage, "prompt_tokens", 0) or 0)
        completion = int(getattr(usage, "completion_tokens", 0) or 0)
        cost: float | None
        try:
            cost = float(self.litellm.completion_cost(completion_response=response))
        except Exception:
            cost = None
        return Answer(text, prompt, completion, cost)


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return text[:300]


def answer_value(req: Request, text: str) -> Any:
    """Parse and validate an answer; ``ValueError`` says what is wrong with it."""
    value: Any = text
    if req.schema is not None and not req.raw_answer:
        value = parse_json(text)
    return req.validate(value) if req.validate is not None else value


def ask_validated(provider: Provider, req: Request) -> tuple[Any, Answer, Answer]:
    """Ask; on an unusable answer, ask once more with the error. Returns the value, the
    answer to cache and the summed usage. Raises LlmError when neither answer works."""
    first = provider.complete(req.messages, req)
    try:
        return answer_value(req, first.text), first, first
    except ValueError as exc:
        problem = str(exc)
    again = [
        *req.messages,
        {"role": "assistant", "content": first.text},
        {
            "role": "user",
            "content": f"That answer cannot be used: {problem}. Reply again with only the "
            "JSON the instructions ask for, nothing else.",
        },
    ]
    second = provider.complete(again, req)
    total = Answer(
        second.text,
        first.prompt_tokens + second.prompt_tokens,
        first.completion_tokens + second.completion_tokens,
        None
        if first.cost_usd is None or second.cost_usd is None
        else first.cost_usd + second.cost_usd,
        calls=2,
    )
    try:
        return answer_value(req, second.text), second, total
    except ValueError as exc:
        raise UnusableAnswer(
            f"{req.purpose}: the model's answer was unusable twice ({exc}); "
            f"its last answer: {second.text[:300]!r}"
        ) from None


# --- the database side: cache and slots ------------------------------------------------------
class CallCache:
    """``kb.llm_call``: answers that validated, by request key. Read-only on the query path.

    Anyone reads an answer by its exact key (``kb._llm_cache_get``: knowing the key means
    knowing the whole request); only a role that sees every row (the indexing worker, which
    connects as the schema owner) writes, so no team can plant answers for another. A build
    run by another role still works; its answers are just not kept.
    """

    def __init__(self, plpy: Any, writable: bool = True) -> None:
        self.plpy = plpy
        if writable:
            row = plpy.execute("SELECT kb._sees_all(current_user) AS trusted")
            writable = bool(row[0]["trusted"])
        self.writable = writable
        self._get = plpy.prepare("SELECT key, response FROM kb._llm_cache_get($1)", ["text[]"])
        self._put = (
            plpy.prepare(
                "INSERT INTO kb.llm_call (key, model, purpose, request, response, prompt_tokens, "
                "completion_tokens, cost_usd) VALUES ($1, $2, $3, $4::jsonb, $5, $6, $7, $8) "
                "ON CONFLICT (key) DO UPDATE SET response = EXCLUDED.response, "
                "last_used_at = now()",
                ["text", "text", "text", "text", "text", "integer", "integer", "numeric"],
            )
            if writable
            else None
        )
        self._touch = (
            plpy.prepare(
                "UPDATE kb.llm_call SET last_used_at = now(), hits = hits + 1 WHERE key = ANY($1)",
                ["text[]"],
            )
            if writable
            else None
        )

    def get_many(self, keys: list[str]) -> dict[str, str]:
        if not keys:
            return {}
        rows = self.plpy.execute(self._get, [keys])
        found = {r["key"]: r["response"] for r in rows}
        if found and self._touch is not None:
            self.plpy.execute(self._touch, [list(found)])
        return found

    def put(self, key: str, model: str, req: Request, answer: Answer) -> None:
        if self._put is None:
            return
        request = json.dumps({"messages": storable(req.messages), "schema": req.schema})
        self.plpy.execute(
            self._put,
            [
                key,
                model,
                req.purpose,
                request,
                answer.text,
                answer.prompt_tokens,
                answer.completion_tokens,
                answer.cost_usd,
            ],
        )


_DATA_URL = re.compile(r"data:([\w/+.-]+);base64,[A-Za-z0-9+/=]+")


def storable(messages: list[dict[str, Any]]) -> Any:
    """Messages as kb.llm_call keeps them: an inline image (a base64 data: URL, hundreds of
    kilobytes) becomes its sha256; the cache key still covers the bytes themselves."""
    text = json.dumps(messages)
    if "base64," not in text:
        return messages
    return json.loads(
        _DATA_URL.sub(
            lambda m: f"data:{m.group(1)};sha256,{hashlib.sha256(m.group(0).encode()).hexdigest()}",
            text,
        )
    )


class Slots:
    """A cap on calls in flight to one endpoint from the whole database: ``cap`` session
    advisory locks; a wave of calls runs only with as many slots as it holds."""

    def __init__(self, plpy: Any, endpoint: str, cap: int, wait_s: float) -> None:
        self.plpy = plpy
        self.cap = cap
        self.wait_s = wait_s
        self.namespace = int(
            plpy.execute(
                plpy.prepare("SELECT hashtext($1) AS h", ["text"]), ["kbpg.llm:" + endpoint]
            )[0]["h"]
        )
        self._try = plpy.prepare(
            "SELECT i FROM generate_series(0, $2 - 1) AS i "
            "WHERE pg_try_advisory_lock($1, i) LIMIT $3",
            ["integer", "integer", "integer"],
        )
        self._release = plpy.prepare(
            "SELECT pg_advisory_unlock($1, i) FROM unnest($2::integer[]) AS i",
            ["integer", "integer[]"],
        )

    def acquire(self, want: int) -> list[int]:
        deadline = time.monotonic() + self.wait_s
        pause = 0.02
        while True:
            rows = self.plpy.execute(self._try, [self.namespace, self.cap, max(1, want)])
            held = [int(r["i"]) for r in rows]
            if held:
                return held
            if time.monotonic() > deadline:
                raise LlmError(
                    f"waited {self.wait_s:.0f} s for one of the {self.cap} LLM call slots "
                    "(other jobs hold them all)"
                )
            time.sleep(pause)
            pause = min(pause * 2, 0.5)

    def release(self, held: list[int]) -> None:
        if held:
            self.plpy.execute(self._release, [self.namespace, held])


# --- the layer strategies call -----------------------------------------------------------
@dataclass
class Llm:
    """Cached, capped, validated LLM calls for one build step (or one query)."""

    settings: LlmSettings
    provider: Provider | None
    cache: CallCache | None
    slots: Slots | None
    deadline: float | None = None  # time.monotonic() after which the step yields
    usage: Usage = field(default_factory=Usage)
    progress: Callable[[int, int], None] | None = None

    @property
    def available(self) -> bool:
        return self.provider is not None

    def with_model(self, model: str | None) -> Llm:
        """This layer for another model (None: this one) on the same endpoint: the same
        key, cache, call slots, step deadline and accounting."""
        if not model or model == self.settings.model or self.provider is None:
            return self
        settings = self.settings.model_copy(update={"model": model})
        return Llm(
            settings,
            Provider(settings, self.provider.api_key),
            self.cache,
            self.slots,
            deadline=self.deadline,
            usage=self.usage,
        )

    def ask(self, req: Request) -> Any:
        return self.ask_many([req])[0]

    def ask_many(self, requests: list[Request], stage: str | None = None) -> list[Any]:
        """Answers in order. Cached answers first; the rest in waves of at most
        ``llm_concurrency`` calls, each wave cached as it completes."""
        if self.provider is None:
            raise NoModel("no LLM model is configured (set extra.model)")
        keys = [request_key(self.settings, r) for r in requests]
        results: list[Any] = [None] * len(requests)
        cached = self.cache.get_many(sorted(set(keys))) if self.cache else {}
        pending: list[int] = []
        for i, (req, key) in enumerate(zip(requests, keys, strict=True)):
            if key in cached:
                try:
                    results[i] = answer_value(req, cached[key])
                    self.usage.cache_hits += 1
                    continue
                except ValueError:
                    pass  # a cached answer the current validation refuses: ask again
            pending.append(i)
        done = len(requests) - len(pending)
        if self.progress:
            self.progress(done, len(requests))
        width = self.settings.llm_concurrency
        with ThreadPoolExecutor(max_workers=width, thread_name_prefix="kbpg-llm") as pool:
            while pending:
                # Yield only after this step made progress, so every step moves the job on.
                if self.usage.calls and self.deadline is not None:
                    if time.monotonic() > self.deadline:
                        raise StepYield()
                held = self.slots.acquire(min(width, len(pending))) if self.slots else []
                wave = pending[: len(held) or width]
                try:
                    futures = {
                        i: pool.submit(ask_validated, self.provider, requests[i]) for i in wave
                    }
                    failure: BaseException | None = None
                    for i, future in futures.items():
                        try:
                            value, to_cache, paid = future.result()
                        except BaseException as exc:
                            failure = failure or exc
                            continue
                        results[i] = value
                        self._account(paid)
                        if self.cache:
                            self.cache.put(keys[i], str(self.settings.model), requests[i], to_cache)
                finally:
                    if self.slots:
                        self.slots.release(held)
                if failure is not None:
                    if isinstance(failure, LlmError):
                        raise failure
                    raise LlmError(f"{type(failure).__name__}: {_short(failure)}") from failure
                pending = pending[len(wave) :]
                done += len(wave)
                if self.progress:
                    self.progress(done, len(requests))
        return results

    def _account(self, answer: Answer) -> None:
        self.usage.calls += answer.calls
        self.usage.prompt_tokens += answer.prompt_tokens
        self.usage.completion_tokens += answer.completion_tokens
        if answer.cost_usd is None:
            self.usage.cost_known = False
        else:
            self.usage.cost_usd += answer.cost_usd


def endpoint_of(settings: LlmSettings) -> str:
    """What the concurrency cap is shared over: the api_base, else the provider."""
    if settings.api_base:
        return settings.api_base.rstrip("/")
    model = settings.model or ""
    return model.split("/", 1)[0] if "/" in model else "openai"


def layer(
    plpy: Any,
    settings: LlmSettings,
    *,
    writable: bool = True,
    capped: bool = True,
    deadline: float | None = None,
) -> Llm:
    """The LLM layer a database call uses: the key from ``kb.<api_key_name>`` or the
    environment, the call cache (read-only for a query), the per-endpoint concurrency
    cap shared by every server process (``capped``), and the step's deadline."""
    from kbpg_db import keys

    provider = None
    if settings.model:
        provider = Provider(settings, keys.for_model(plpy, settings.api_key_name, settings.model))
    wait = settings.request_timeout_s * (settings.max_retries + 1)
    slots = (
        Slots(plpy, endpoint_of(settings), settings.llm_concurrency, wait)
        if provider is not None and capped
        else None
    )
    return Llm(settings, provider, CallCache(plpy, writable=writable), slots, deadline=deadline)
