"""Second-stage reranking: a local ONNX cross-encoder or a provider's rerank API.

``rerank_model`` is either ``onnx:/path/to/model.onnx`` (a cross-encoder with its
``tokenizer.json`` in the same folder; inputs input_ids/attention_mask[/token_type_ids],
output one logit per pair) or a litellm rerank model such as
``cohere/rerank-english-v3.0``, ``jina_ai/jina-reranker-v2-base-multilingual`` or
``voyage/rerank-2``.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from kbpg_db.config import IndexingConfig

_lock = threading.Lock()
_sessions: dict[str, LocalCrossEncoder] = {}


class LocalCrossEncoder:
    def __init__(self, model_path: Path) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        tok = model_path.parent / "tokenizer.json"
        if not model_path.is_file():
            raise ValueError(f"rerank model file {model_path} does not exist")
        if not tok.is_file():
            raise ValueError(f"rerank model needs {tok} beside it")
        self.tokenizer = Tokenizer.from_file(str(tok))
        self.tokenizer.enable_truncation(max_length=512)
        self.session = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
        self.input_names = {i.name for i in self.session.get_inputs()}

    def score(self, query: str, documents: list[str], batch_size: int = 32) -> list[float]:
        scores: list[float] = []
        for start in range(0, len(documents), batch_size):
            batch = documents[start : start + batch_size]
            enc = self.tokenizer.encode_batch([(query, d) for d in batch])
            width = max(len(e.ids) for e in enc)
            ids = np.zeros((len(batch), width), dtype=np.int64)
            mask = np.zeros_like(ids)
            types = np.zeros_like(ids)
            for row, e in enumerate(enc):
                ids[row, : len(e.ids)] = e.ids
                mask[row, : len(e.ids)] = 1
                types[row, : len(e.ids)] = e.type_ids
            feeds = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in self.input_names:
                feeds["token_type_ids"] = types
            logits = np.asarray(self.session.run(None, feeds)[0], dtype=np.float64)
            scores.extend(logits.reshape(len(batch), -1)[:, 0].tolist())
        return scores


def _local(path: str) -> LocalCrossEncoder:
    with _lock:
        if path not in _sessions:
            _sessions[path] = LocalCrossEncoder(Path(path))
        return _sessions[path]


def rerank(
    model: str | None,
    query: str,
    documents: list[str],
    api_base: str | None = None,
    api_key: str | None = None,
) -> list[float]:
    """One relevance score per document, in the documents' order (higher is better)."""
    if not model:
        raise ValueError("rerank_model is not set")
    if not documents:
        return []
    if model.startswith("onnx:"):
        return _local(model[len("onnx:") :]).score(query, documents)
    from kbpg_db.embedding import call_with_retries
    from kbpg_db.llm import import_litellm

    litellm = import_litellm()
    kwargs: dict[str, Any] = {"model": model, "query": query, "documents": documents}
    kwargs["top_n"] = len(documents)
    if api_base:
        kwargs["api_base"] = api_base
    if api_key:
        kwargs["api_key"] = api_key
    response = call_with_retries(lambda: litellm.rerank(**kwargs), 3, f"rerank with {model}")
    scores = [float("-inf")] * len(documents)
    for item in response.results:
        scores[int(item["index"])] = float(item["relevance_score"])
    return scores


# rerank_model "llm:<chat model>": the chat model ranks the candidates in one call.
LLM_PREFIX = "llm:"
LLM_PASSAGE_CHARS = 1200  # of each candidate the model reads
_RANKING_SCHEMA = {
    "type": "object",
    "properties": {"ranking": {"type": "array", "items": {"type": "integer"}}},
    "required": ["ranking"],
}
# Answers per server process, by request key: a role whose answers kb.llm_call does not
# keep (or a read-only standby) still asks once per distinct question and candidate set.
_ANSWERS: dict[str, list[int]] = {}
_ANSWERS_LIMIT = 512


def listwise_request(query: str, documents: list[str]) -> Any:
    """The question that ranks the candidates: numbered passages, the answer their numbers
    most relevant first. An answer that skips numbers is completed in the given order; one
    that names too few real numbers is sent back once."""
    from kbpg_db.llm import Request

    n = len(documents)
    passages = "\n\n".join(
        f"[{i}] {' '.join(d.split())[:LLM_PASSAGE_CHARS]}" for i, d in enumerate(documents, 1)
    )

    def validate(value: Any) -> list[int]:
        ranking = value.get("ranking") if isinstance(value, dict) else None
        if not isinstance(ranking, list):
            raise ValueError('answer {"ranking": [passage numbers, most relevant first]}')
        seen: list[int] = []
        for x in ranking:
            if isinstance(x, int) and not isinstance(x, bool) and 1 <= x <= n and x not in seen:
                seen.append(x)
        if len(seen) < (n + 1) // 2:
            raise ValueError(f"the ranking must list the passage numbers 1 to {n}, each once")
        return seen + [i for i in range(1, n + 1) if i not in seen]

    return Request(
        "rerank",
        [
            {
                "role": "system",
                "content": "You rank passages by how well they answer a search query. "
                "Judge by meaning, not by shared words.",
            },
            {
                "role": "user",
                "content": f"Query: {query}\n\nPassages:\n{passages}\n\n"
                f'Return JSON {{"ranking": [...]}}: the numbers 1 to {n}, each once, the '
                "passage that best answers the query first.",
            },
        ],
        _RANKING_SCHEMA,
        validate,
        max_tokens=8 * n + 32,
    )


OWN_CHAT_MODEL = "llm"


def with_own_chat_model(cfg: dict[str, Any], icfg: IndexingConfig) -> dict[str, Any]:
    """The retrieval config with rerank_model "llm" made the knowledge base's own chat
    model (the one its indexing calls, ``icfg.llm()``): "llm:<model>", with that model's
    endpoint and key where the config names none. Other configs are returned as they are."""
    from kbpg_db.sqlstates import INVALID_PARAMETER, SqlError

    if cfg.get("rerank_model") != OWN_CHAT_MODEL:
        return cfg
    llm = icfg.llm()
    if not llm.model:
        raise SqlError(
            'rerank_model "llm" ranks with the knowledge base\'s own chat model, and this '
            "knowledge base has none",
            INVALID_PARAMETER,
            "its indexing_config names no chat model (extra.model, or knowledge_graph.model "
            "with triplets)",
            'name one: rerank_model "llm:openai/gpt-4o-mini", or "llm:openai/NAME" with '
            "rerank_api_base for an OpenAI-compatible server",
        )
    return {
        **cfg,
        "rerank_model": LLM_PREFIX + llm.model,
        "rerank_api_base": cfg.get("rerank_api_base") or llm.api_base,
        "rerank_api_key_name": cfg.get("rerank_api_key_name") or llm.api_key_name,
    }


def llm_rerank(
    plpy: Any, cfg: dict[str, Any], query: str, documents: list[str]
) -> tuple[list[float], dict[str, Any]]:
    """Scores from a chat model's listwise ranking: 1.0 for its first pick down to 1/n for
    its last, in the documents' order, and the call's usage. Cached in kb.llm_call where
    this role may write it (not on a read-only standby) and in this server process."""
    from kbpg_db import llm
    from kbpg_db.config import LlmSettings

    settings = LlmSettings.model_validate(
        {
            "model": cfg["rerank_model"][len(LLM_PREFIX) :],
            "api_base": cfg.get("rerank_api_base"),
            "api_key_name": cfg.get("rerank_api_key_name"),
            "request_timeout_s": 60.0,
            "max_retries": 2,
        }
    )
    req = listwise_request(query, documents)
    key = llm.request_key(settings, req)
    order = _ANSWERS.get(key)
    # Answered in this process before: no key lookup, no cache statements, no call.
    usage = llm.Usage(cache_hits=1)
    if order is None:
        read_only = plpy.execute("SELECT current_setting('transaction_read_only') = 'on' AS ro")
        layer = llm.layer(plpy, settings, writable=not read_only[0]["ro"], capped=False)
        order = layer.ask(req)
        usage = layer.usage
        if len(_ANSWERS) >= _ANSWERS_LIMIT:
            _ANSWERS.clear()
        _ANSWERS[key] = order
    n = len(documents)
    scores = [0.0] * n
    for position, number in enumerate(order):
        scores[number - 1] = (n - position) / n
    return scores, {"model": settings.model, **usage.as_json()}


def rerank_for(plpy: Any, cfg: dict[str, Any], query: str, documents: list[str]) -> dict[str, Any]:
    """kb._rerank's row: a score per document for the query by the retrieval config's
    rerank model (its key read from ``kb.<rerank_api_key_name>`` or the environment), and
    what an LLM reranking cost (NULL for the other models)."""
    import json

    from kbpg_db import keys
    from kbpg_db.llm import LlmError
    from kbpg_db.sqlstates import EXTERNAL_FAILURE, INVALID_PARAMETER, SqlError

    model = cfg.get("rerank_model") or ""
    if model.startswith(LLM_PREFIX) and documents:
        try:
            scores, usage = llm_rerank(plpy, cfg, query, list(documents))
        except LlmError as exc:
            raise SqlError(f"rerank with {model} failed: {exc}", EXTERNAL_FAILURE) from None
        return {"scores": scores, "usage": json.dumps({"llm": usage})}
    key = keys.for_model(plpy, cfg.get("rerank_api_key_name"), model)
    try:
        scores = rerank(model, query, list(documents), cfg.get("rerank_api_base"), key)
    except ValueError as exc:
        raise SqlError(str(exc), INVALID_PARAMETER) from None
    except Exception as exc:
        raise SqlError(f"rerank failed: {exc}", EXTERNAL_FAILURE) from None
    return {"scores": scores, "usage": None}
