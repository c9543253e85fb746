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
from typing import Any

import numpy as np

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


def rerank_for(plpy: Any, cfg: dict[str, Any], query: str, documents: list[str]) -> list[float]:
    """Scores of the documents for the query by the retrieval config's rerank model, its
    key read from ``kb.<rerank_api_key_name>`` or the environment."""
    from kbpg_db import keys
    from kbpg_db.sqlstates import EXTERNAL_FAILURE, INVALID_PARAMETER, SqlError

    model = cfg.get("rerank_model")
    key = keys.for_model(plpy, cfg.get("rerank_api_key_name"), model)
    try:
        return rerank(model, query, list(documents), cfg.get("rerank_api_base"), key)
    except ValueError as exc:
        raise SqlError(str(exc), INVALID_PARAMETER) from None
    except Exception as exc:
        raise SqlError(f"rerank failed: {exc}", EXTERNAL_FAILURE) from None
