"""The bridge between SQL and the modules here: each function takes ``plpy`` first.

The ``LANGUAGE plpython3u`` bodies in ``sql/`` call exactly one function of this
module, and each function here only decodes its arguments, calls the module that does
the work, and turns the module's expected errors (``SqlError``, ``ConfigError``) into
PostgreSQL errors with their SQLSTATE through :func:`fail`. The SQL wrappers in
``sql/000-python.sql`` re-raise those without PL/Python's ``plpy.Error:`` prefix and
traceback; an unexpected exception keeps both, under SQLSTATE 38000.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn, TypeVar

from kbpg_db.sqlstates import INVALID_PARAMETER, SqlError

T = TypeVar("T")


def _json(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, str):
        return json.loads(value)
    return value


def fail(
    plpy: Any, message: str, sqlstate: str, detail: str | None = None, hint: str | None = None
) -> NoReturn:
    """Raise an expected error: the message says what is wrong, DETAIL and HINT only when
    there is something to add (PL/Python would print a missing one as "None")."""
    extra = {k: v for k, v in (("detail", detail), ("hint", hint)) if v}
    plpy.error(message, sqlstate=sqlstate, **extra)
    raise AssertionError("plpy.error returned")


def config_error(plpy: Any, exc: Any) -> NoReturn:
    """Raise a config error as PostgreSQL would: the first problem as the message, every
    problem in DETAIL when there are several."""
    problems = getattr(exc, "problems", None) or [str(exc)]
    kind = getattr(exc, "kind", "config")
    detail = None
    if len(problems) > 1:
        detail = f"{len(problems)} problems in {kind}: " + "; ".join(problems)
    hint = (
        "kind is indexing_config or retrieval_config"
        if kind == "config"
        else f"docs/configuration.md lists the {kind} fields and their ranges"
    )
    fail(plpy, problems[0], INVALID_PARAMETER, detail, hint)


@contextmanager
def _expected(plpy: Any) -> Iterator[None]:
    """A module's expected errors leave as PostgreSQL errors with their SQLSTATE."""
    from kbpg_db.config import ConfigError

    try:
        yield
    except SqlError as exc:
        fail(plpy, str(exc), exc.sqlstate, exc.detail, exc.hint)
    except ConfigError as exc:
        config_error(plpy, exc)


def _call(plpy: Any, fn: Callable[..., T], *args: Any) -> T:
    with _expected(plpy):
        return fn(*args)
    raise AssertionError("unreachable")


# ---------------------------------------------------------------- settings


def validate_config(plpy: Any, kind: str, value: Any, strategy: str | None = None) -> str:
    from kbpg_db import config

    try:
        return json.dumps(config.validate(kind, _json(value), strategy))
    except ValueError as exc:
        config_error(plpy, exc)


def check_defaults(plpy: Any, kind: str, value: Any) -> str:
    from kbpg_db import config

    try:
        return json.dumps(config.validate_defaults(kind, _json(value)))
    except ValueError as exc:
        config_error(plpy, exc)


def complete_config(plpy: Any, kind: str, value: Any, strategy: str | None = None) -> str:
    """A new KB's config: the project defaults (``kb.setting``) under its own fields,
    validated and completed, so later default changes never alter it."""
    from kbpg_db import config

    rows = plpy.execute(
        plpy.prepare("SELECT value FROM kb.setting WHERE name = $1", ["text"]), [kind]
    )
    defaults = _json(rows[0]["value"]) if rows else None
    given = _json(value)
    if given is not None and not isinstance(given, dict):
        return validate_config(plpy, kind, given, strategy)
    return validate_config(plpy, kind, config.merge_defaults(defaults, given), strategy)


def document_chunking(plpy: Any, indexing_config: Any, chunking: Any) -> str:
    from kbpg_db import config

    try:
        return json.dumps(config.document_chunking(_json(indexing_config), _json(chunking)))
    except ValueError as exc:
        fail(
            plpy,
            str(exc),
            INVALID_PARAMETER,
            hint="docs/configuration.md lists the indexing_config fields",
        )


# ---------------------------------------------------------------- indexing


def preview_chunks(
    plpy: Any, content: str, indexing_config: Any, page_starts: list[int] | None = None
) -> list[dict[str, Any]]:
    from kbpg_db import config, keys
    from kbpg_db.features.chunk_embed import build as chunk_embed

    cfg = config.IndexingConfig.model_validate(
        json.loads(validate_config(plpy, "indexing_config", indexing_config))
    )
    try:
        key = keys.for_model(plpy, cfg.api_key_name, cfg.embedding_model)
        return chunk_embed.chunk_rows(content, cfg, page_starts, key)
    except ValueError as exc:
        fail(plpy, str(exc), INVALID_PARAMETER)


def build_document(
    plpy: Any,
    title: str,
    content: str,
    indexing_config: Any,
    page_starts: list[int] | None,
    metadata: Any,
    file: bytes | None = None,
    index_id: int | None = None,
    kb_id: int | None = None,
    document_id: int | None = None,
) -> dict[str, Any]:
    """One step of indexing a document (kbpg_db.features.step)."""
    from kbpg_db import config, features

    cfg = config.indexing_cached(indexing_config)
    doc = features.Document(title, content, page_starts, _json(metadata) or {}, file, document_id)
    return _call(plpy, features.step, plpy, doc, cfg, index_id, kb_id)


def prefetch_embeddings(plpy: Any, kb_id: int, job_ids: list[int], worker: str) -> int:
    from kbpg_db.features.chunk_embed import build as chunk_embed

    return chunk_embed.prefetch(plpy, kb_id, job_ids, worker)


def refresh_communities(plpy: Any, kb_id: int, index_id: int, indexing_config: Any) -> str:
    from kbpg_db.features.knowledge_graph import communities

    return _call(plpy, communities.refresh, plpy, kb_id, index_id, indexing_config)


# ---------------------------------------------------------------- search


def prepare_query(
    plpy: Any,
    indexing_config: Any,
    retrieval_config: Any,
    overrides: Any,
    query: str,
    expansion_ready: bool,
) -> dict[str, Any]:
    from kbpg_db import query as q

    return _call(
        plpy, q.prepare, plpy, indexing_config, retrieval_config, overrides, query, expansion_ready
    )


def tree_search(
    plpy: Any, kb_id: int, index_id: int, query: str, retrieval_config: Any, indexing_config: Any
) -> list[dict[str, Any]]:
    from kbpg_db import query as q

    return _call(
        plpy,
        q.tree_search_rows,
        plpy,
        kb_id,
        index_id,
        query,
        retrieval_config,
        indexing_config,
    )


def bm25_search(
    plpy: Any,
    kb_id: int,
    index_id: int,
    query: str,
    top_k: int,
    k1: float,
    b: float,
    filter_json: str | None,
    cache_mb: int,
    terms: str | None = None,
) -> dict[str, str]:
    """kb._py_bm25_search's row: chunk ids and scores as array literals, which array_in
    reads in C (PL/Python would convert a list, or a set of rows, value by value through
    str(); 0.35 ms of a 100-candidate query), and kb.bm25_essential's value. repr() of a
    float reads back as the same double."""
    from kbpg_db import bm25

    extra = {str(k): float(v) for k, v in json.loads(terms).items()} if terms else None
    hits = bm25.search(plpy, kb_id, index_id, query, top_k, k1, b, filter_json, cache_mb, extra)
    return {
        "chunk_ids": "{" + ",".join(map(str, hits.chunk_ids)) + "}",
        "scores": "{" + ",".join(map(repr, hits.scores)) + "}",
        "essential": hits.essential,
    }


def refresh_term_vectors(
    plpy: Any, kb_id: int, index_id: int, indexing_config: Any
) -> dict[str, int]:
    from kbpg_db import term_expansion

    return _call(plpy, term_expansion.refresh, plpy, kb_id, index_id, indexing_config)


def bm25_cache_stats(plpy: Any) -> dict[str, Any]:
    from kbpg_db import bm25

    budget = plpy.execute("SELECT kb._bm25_cache_mb() AS mb")[0]["mb"]
    return bm25.cache_stats(budget)


def embedding_process(plpy: Any) -> str:
    from kbpg_db import embedservice

    return json.dumps(embedservice.status())


def rerank(plpy: Any, retrieval_config: Any, query: str, documents: list[str]) -> dict[str, Any]:
    from kbpg_db import reranking

    return _call(plpy, reranking.rerank_for, plpy, _json(retrieval_config), query, documents)


def chunk_origins(source_meta: Any, spans: Any) -> str:
    from kbpg_db import regions

    meta = _json(source_meta) or {}
    return json.dumps(regions.chunk_origins(meta, _json(spans) or []))


def count_tokens(text: str) -> int:
    from kbpg_db import tokens

    return tokens.count(text)


def assemble_context(plpy: Any, rows: Any, budget: int, max_per_doc: int) -> dict[str, Any]:
    from kbpg_db import context

    return context.assemble(_json(rows), budget, max_per_doc).as_row()


# ---------------------------------------------------------------- files, URLs and media


def extract_media(content: str) -> dict[str, Any]:
    from kbpg_db import files

    return files.extract_media(content)


def file_format(file_name: str, head: bytes | None) -> str | None:
    from kbpg_db.convert import format_of

    return format_of(file_name, head)


def convert_document(plpy: Any, kb_id: int, document_id: int) -> str:
    import json

    from kbpg_db import files

    return json.dumps(_call(plpy, files.convert_document, plpy, kb_id, document_id))
