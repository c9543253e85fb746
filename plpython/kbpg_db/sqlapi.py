"""The bridge between SQL and the modules here: each function takes ``plpy`` first.

The ``LANGUAGE plpython3u`` bodies in ``sql/`` call exactly one function of this
module; arguments arrive as PL/Python gives them (jsonb as text), and expected errors
leave through :func:`fail` with a specific SQLSTATE. The SQL wrappers in
``sql/000-python.sql`` re-raise those without PL/Python's ``plpy.Error:`` prefix and
traceback; an unexpected exception keeps both, under SQLSTATE 38000.
"""

from __future__ import annotations

import json
import os
from typing import Any, NoReturn

from kbpg_db.sqlstates import DATA_EXCEPTION, EXTERNAL_FAILURE, INVALID_PARAMETER


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


def _config_or_error(
    plpy: Any, kind: str, value: Any, strategy: str | None = None
) -> dict[str, Any]:
    from kbpg_db import config

    try:
        return config.validate(kind, _json(value), strategy)
    except ValueError as exc:
        config_error(plpy, exc)


def validate_config(plpy: Any, kind: str, value: Any, strategy: str | None = None) -> str:
    return json.dumps(_config_or_error(plpy, kind, value, strategy))


def check_defaults(plpy: Any, kind: str, value: Any) -> str:
    from kbpg_db import config

    try:
        return json.dumps(config.validate_defaults(kind, _json(value)))
    except ValueError as exc:
        config_error(plpy, exc)
        raise


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


def api_key(plpy: Any, name: str | None) -> str | None:
    """A provider key: session setting ``kb.<name>`` first, then the server's environment."""
    if not name:
        return None
    row = plpy.execute(
        plpy.prepare("SELECT current_setting($1, true) AS v", ["text"]), ["kb." + name.lower()]
    )
    value = row[0]["v"] if row else None
    return value or os.environ.get(name)


def _default_key_name(model: str) -> str | None:
    provider = model.split("/", 1)[0] if "/" in model else "openai"
    return {
        "openai": "OPENAI_API_KEY",
        "cohere": "COHERE_API_KEY",
        "voyage": "VOYAGE_API_KEY",
        "gemini": "GEMINI_API_KEY",
        "mistral": "MISTRAL_API_KEY",
        "jina_ai": "JINA_AI_API_KEY",
    }.get(provider)


def preview_chunks(
    plpy: Any, content: str, indexing_config: Any, page_starts: list[int] | None
) -> list[dict[str, Any]]:
    from kbpg_db import config
    from kbpg_db.strategies import chunk_embed

    cfg = config.IndexingConfig.model_validate(
        _config_or_error(plpy, "indexing_config", indexing_config)
    )
    try:
        key = api_key(plpy, cfg.api_key_name or _default_key_name(cfg.embedding_model))
        return chunk_embed.chunk_rows(content, cfg, page_starts, key)
    except ValueError as exc:
        fail(plpy, str(exc), INVALID_PARAMETER)


def _step_seconds(plpy: Any) -> float:
    row = plpy.execute("SELECT current_setting('kb.llm_step_seconds', true) AS v")
    try:
        return float(row[0]["v"]) if row and row[0]["v"] else 10.0
    except ValueError:
        return 10.0


def build_document(
    plpy: Any,
    title: str,
    content: str,
    indexing_config: Any,
    page_starts: list[int] | None,
    metadata: Any,
    file: bytes | None = None,
    index_id: int | None = None,
) -> dict[str, Any]:
    """One step of indexing a document with its KB's strategy.

    status ``done``: chunks and artifacts to store; ``more``: the step's time is spent and
    the LLM answers so far are cached (the caller commits and calls again); ``error``: the
    strategy cannot index the document (the message names the stage).
    """
    import time

    from kbpg_db import config, llm, strategies

    cfg = _indexing(indexing_config)
    if cfg.embedding_model == config.LOCAL_MODEL:
        # The worker sets kb.onnx_threads by how many of its connections are busy.
        from kbpg_db import embedding

        threads = plpy.execute("SELECT current_setting('kb.onnx_threads', true) AS t")[0]["t"]
        embedding.use_threads(int(threads) if threads and threads.isdigit() else None)
    progress: list[str] = []
    layer: llm.Llm | None = None
    if cfg.uses_llm:
        settings = cfg.llm()
        provider = None
        if settings.model:
            key = api_key(plpy, settings.api_key_name or _default_key_name(settings.model))
            provider = llm.Provider(settings, key)
        wait = settings.request_timeout_s * (settings.max_retries + 1)
        layer = llm.Llm(
            settings,
            provider,
            llm.CallCache(plpy),
            llm.Slots(plpy, llm.endpoint_of(settings), settings.llm_concurrency, wait)
            if provider
            else None,
            deadline=time.monotonic() + _step_seconds(plpy),
        )
    ctx = strategies.BuildContext(
        layer,
        api_key(plpy, cfg.api_key_name or _default_key_name(cfg.embedding_model)),
        progress.append,
        index_id,
        (lambda sql, args: list(plpy.execute(plpy.prepare(sql[0], sql[1]), args)))
        if index_id is not None
        else None,
    )
    doc = strategies.Document(title, content, page_starts, _json(metadata) or {}, file)
    out: dict[str, Any] = {
        "status": "done",
        "chunks": None,
        "artifacts": None,
        "tokens": 0,
        "cost_usd": 0.0,
        "progress": None,
        "usage": None,
        "error": None,
    }
    try:
        built = strategies.build(doc, cfg, ctx)
    except llm.StepYield:
        out["status"] = "more"
    except (llm.LlmError, strategies.StrategyError) as exc:
        # A document the strategy cannot index, or a model that cannot answer it, fails
        # for good ("failed"); a provider that failed after its retries may recover
        # ("error": the job is retried with backoff).
        permanent = isinstance(exc, strategies.StrategyError) or (
            isinstance(exc, llm.LlmError) and exc.permanent
        )
        out["status"] = "failed" if permanent else "error"
        stage = progress[-1] if progress else "indexing"
        out["error"] = f'document "{title}": {cfg.strategy}, while {stage}: {exc}'
    except ValueError as exc:
        fail(plpy, str(exc), DATA_EXCEPTION)
    except RuntimeError as exc:
        fail(plpy, f"embedding failed: {exc}", EXTERNAL_FAILURE)
    else:
        out.update(
            chunks=built.chunks,
            artifacts=json.dumps(built.artifacts) if built.artifacts is not None else None,
            tokens=built.tokens,
            cost_usd=built.cost_usd,
        )
    out["progress"] = progress[-1] if progress else None
    out["usage"] = json.dumps(layer.usage.as_json()) if layer else None
    return out


# At most this many chunks are embedded ahead in one call (their vectors wait in the
# server process's memory until their jobs take them: about 4k vectors of 384 floats, tens of MB).
PREFETCH_MAX_CHUNKS = 4096


def prefetch_embeddings(plpy: Any, kb_id: int, job_ids: list[int], worker: str) -> int:
    """Chunk the documents of a worker's claimed jobs (of one KB) and embed all their chunks together
    (full batches, and for a remote provider up to ``embedding_concurrency`` requests in
    flight), so many small documents cost a few requests instead of one each. The vectors
    wait in this server process for the jobs' own builds (kb.process_job, same connection).

    Only ChunkEmbed documents whose text is at hand take part; anything that fails here
    (a provider error, a bad chunking setting) is left for the job, which reports it.
    Returns how many chunks were embedded ahead.
    """
    from kbpg_db import embedding, tokens
    from kbpg_db.strategies import chunk_embed

    embedding.clear_ahead()
    chunk_embed.clear_rows_ahead()
    # The settings first, the texts only of the documents that take part: a local model
    # (none does) costs one small query per claim.
    rows = plpy.execute(
        plpy.prepare(
            "SELECT j.id, d.title, coalesce(d.source_meta, '{}') || d.metadata AS metadata, "
            "       i.indexing_config || coalesce(d.chunking, '{}') AS config "
            "FROM kb.job j JOIN kb.document d ON d.kb_id = j.kb_id AND d.id = j.document_id "
            "JOIN kb.kb_index i ON i.kb_id = j.kb_id AND i.id = j.index_id "
            "WHERE j.kb_id = $1 AND j.id = ANY ($2) AND j.locked_by = $3 "
            "  AND j.status = 'running' "
            "  AND i.status IN ('active', 'building') AND d.content IS NOT NULL "
            "  AND (d.source_format IS NULL OR j.steps > 0) "
            "ORDER BY j.id",
            ["integer", "bigint[]", "text"],
        ),
        [kb_id, job_ids, worker],
    )
    chosen: dict[int, Any] = {}
    for row in rows:
        try:
            cfg = _indexing(row["config"])
        except ValueError:
            continue  # the job's own build reports it
        if chunk_embed.batchable(cfg, row["title"], _json(row["metadata"]) or {}):
            chosen[row["id"]] = cfg
    if not chosen:
        return 0
    bodies = plpy.execute(
        plpy.prepare(
            "SELECT j.id, d.content, d.page_starts FROM kb.job j "
            "JOIN kb.document d ON d.kb_id = j.kb_id AND d.id = j.document_id "
            "WHERE j.kb_id = $1 AND j.id = ANY ($2) ORDER BY j.id",
            ["integer", "bigint[]"],
        ),
        [kb_id, list(chosen)],
    )
    groups: dict[str, tuple[Any, list[str]]] = {}
    total = 0
    for row in bodies:
        cfg = chosen[row["id"]]
        try:
            chunks = chunk_embed.rows_ahead(row["content"], cfg, row["page_starts"])
        except ValueError:
            continue  # the job's own build reports it
        if total and total + len(chunks) > PREFETCH_MAX_CHUNKS:
            break
        total += len(chunks)
        groups.setdefault(embedding.model_key(cfg), (cfg, []))[1].extend(
            c["embed_text"] for c in chunks
        )
    done = 0
    for cfg, texts in groups.values():
        if not texts:
            continue
        key = api_key(plpy, cfg.api_key_name or _default_key_name(cfg.embedding_model))
        try:
            done += embedding.embed_ahead(cfg, texts, [tokens.count(t) for t in texts], key)
        except (RuntimeError, ValueError):
            continue  # each job embeds on its own and reports the error
    return done


def prepare_query(
    plpy: Any,
    indexing_config: Any,
    retrieval_config: Any,
    overrides: Any,
    query: str,
) -> dict[str, Any]:
    """Merge and validate per-call options; embed the query when the method needs it.

    A failing embedding provider does not fail a hybrid query: the vector channel is
    dropped and ``note`` says why.
    """
    from kbpg_db import embedding

    icfg = _indexing(indexing_config)
    cfg = _retrieval(plpy, retrieval_config, overrides, icfg.strategy)
    out: dict[str, Any] = {
        "config": json.dumps(cfg),
        "embedding": None,
        "note": None,
        "usage": None,
    }
    if cfg["method"] in ("full_text", "tree_search"):
        return out
    key = api_key(plpy, icfg.api_key_name or _default_key_name(icfg.embedding_model))
    try:
        embedded = embedding.embed(icfg, [query], key, query=True)
        out["embedding"] = embedding.array_literal(embedded.vectors[0])
        out["usage"] = json.dumps(
            {
                "embedding": {
                    "model": icfg.embedding_model,
                    "tokens": embedded.tokens,
                    "cost_usd": embedded.cost_usd,
                }
            }
        )
    except Exception as exc:
        if cfg["method"] == "vector":
            fail(plpy, f"could not embed the query: {exc}", EXTERNAL_FAILURE)
        out["note"] = f"vector channel unavailable ({exc}); results from full_text only"
        plpy.warning(out["note"])
    return out


# Validated configs per backend: a search does no pydantic work after the first.
_CACHE_LIMIT = 256
_indexing_cache: dict[str, Any] = {}
_retrieval_cache: dict[tuple[str, str, str], dict[str, Any]] = {}


def _text(value: Any) -> str:
    return "" if value is None else value if isinstance(value, str) else json.dumps(value)


def _indexing(indexing_config: Any) -> Any:
    from kbpg_db import config

    key = _text(indexing_config)
    cfg = _indexing_cache.get(key)
    if cfg is None:
        if len(_indexing_cache) > _CACHE_LIMIT:
            _indexing_cache.clear()
        cfg = _indexing_cache[key] = config.IndexingConfig.model_validate(_json(indexing_config))
    return cfg


def _retrieval(plpy: Any, retrieval_config: Any, overrides: Any, strategy: str) -> dict[str, Any]:
    key = (_text(retrieval_config), _text(overrides), strategy)
    cfg = _retrieval_cache.get(key)
    if cfg is None:
        merged = dict(_json(retrieval_config) or {})
        merged.update(_json(overrides) or {})
        cfg = _config_or_error(plpy, "retrieval_config", merged, strategy)
        if len(_retrieval_cache) > _CACHE_LIMIT:
            _retrieval_cache.clear()
        _retrieval_cache[key] = cfg
    return dict(cfg)


def tree_search(
    plpy: Any, kb_id: int, index_id: int, query: str, retrieval_config: Any, indexing_config: Any
) -> list[dict[str, Any]]:
    """Tree Search rows (chunk, rank, node, reasoning); the first carries the note and the
    phases. Reads the call cache, writes nothing."""
    from kbpg_db import llm, tree_search

    cfg = _json(retrieval_config)
    settings = _indexing(indexing_config).llm()
    if not settings.model:
        fail(
            plpy,
            "tree_search needs an LLM, and this knowledge base has none",
            INVALID_PARAMETER,
            "its indexing_config.extra.model is not set",
            'reindex with indexing_config => \'{"strategy": "page_index", '
            '"extra": {"model": "..."}}\'',
        )
    key = api_key(plpy, settings.api_key_name or _default_key_name(settings.model or ""))
    layer = llm.Llm(
        settings, llm.Provider(settings, key), llm.CallCache(plpy, writable=False), None
    )
    try:
        out = tree_search.search(
            plpy,
            layer,
            tree_search.Generation(int(kb_id), int(index_id)),
            query,
            int(cfg["top_k"]),
            int(cfg["max_documents"]),
            int(cfg["toc_token_budget"]),
            (float(cfg["bm25_k1"]), float(cfg["bm25_b"])),
        )
    except llm.LlmError as exc:
        fail(plpy, f"tree_search failed: {exc}", EXTERNAL_FAILURE)
    phases = json.dumps(out.phases)
    usage = json.dumps(layer.usage.as_json())
    rows = [
        {
            "chunk_id": node.chunk_id,
            "rank": rank,
            "node_id": node.node_id,
            "reasoning": why,
            "note": out.note if rank == 1 else None,
            "phases": phases if rank == 1 else None,
            "usage": usage if rank == 1 else None,
        }
        for rank, (node, why) in enumerate(out.hits, start=1)
    ]
    if not rows:
        rows = [
            {
                "chunk_id": None,
                "rank": None,
                "node_id": None,
                "reasoning": None,
                "note": out.note,
                "phases": phases,
                "usage": usage,
            }
        ]
    return rows


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
) -> dict[str, str]:
    """kb._py_bm25_search's row: chunk ids and scores as array literals, which array_in
    reads in C (PL/Python would convert a list, or a set of rows, value by value through
    str(); 0.35 ms of a 100-candidate query), and kb.bm25_essential's value. repr() of a
    float reads back as the same double."""
    from kbpg_db import bm25

    hits = bm25.search(plpy, kb_id, index_id, query, top_k, k1, b, filter_json, cache_mb)
    return {
        "chunk_ids": "{" + ",".join(map(str, hits.chunk_ids)) + "}",
        "scores": "{" + ",".join(map(repr, hits.scores)) + "}",
        "essential": hits.essential,
    }


def bm25_cache_stats(plpy: Any) -> dict[str, Any]:
    from kbpg_db import bm25

    budget = plpy.execute("SELECT kb._bm25_cache_mb() AS mb")[0]["mb"]
    return {
        "terms": len(bm25.CACHE.entries),
        "megabytes": round(bm25.CACHE.nbytes / 1048576, 3),
        "hits": bm25.CACHE.hits,
        "misses": bm25.CACHE.misses,
        "budget_mb": budget,
    }


def rerank(plpy: Any, retrieval_config: Any, query: str, documents: list[str]) -> list[float]:
    from kbpg_db import reranking

    cfg = _json(retrieval_config)
    model = cfg.get("rerank_model")
    key = api_key(plpy, cfg.get("rerank_api_key_name") or _default_key_name(model or ""))
    try:
        return reranking.rerank(model, query, list(documents), cfg.get("rerank_api_base"), key)
    except ValueError as exc:
        fail(plpy, str(exc), INVALID_PARAMETER)
    except Exception as exc:
        fail(plpy, f"rerank failed: {exc}", EXTERNAL_FAILURE)


def count_tokens(text: str) -> int:
    from kbpg_db import tokens

    return tokens.count(text)


def assemble_context(plpy: Any, rows: Any, budget: int, max_per_doc: int) -> dict[str, Any]:
    from kbpg_db import context

    return context.assemble(_json(rows), budget, max_per_doc).as_row()


def refresh_communities(plpy: Any, kb_id: int, index_id: int, indexing_config: Any) -> str:
    """The communities of an index generation's triplet graph, as kb.refresh_communities
    stores them: the signatures to keep, and the new or changed ones with their summary
    (LLM, cached) and its vector."""
    from kbpg_db import communities, embedding, llm, tokens

    cfg = _indexing(indexing_config)
    settings = cfg.llm()
    key = api_key(plpy, settings.api_key_name or _default_key_name(settings.model or ""))
    wait = settings.request_timeout_s * (settings.max_retries + 1)
    layer = llm.Llm(
        settings,
        llm.Provider(settings, key),
        llm.CallCache(plpy),
        llm.Slots(plpy, llm.endpoint_of(settings), settings.llm_concurrency, wait),
    )
    rows = [
        dict(r)
        for r in plpy.execute(
            plpy.prepare(communities.RELATIONS, ["integer", "bigint"]), [kb_id, index_id]
        )
    ]
    found = communities.communities(rows)
    have = {
        r["signature"]
        for r in plpy.execute(
            plpy.prepare(
                "SELECT signature FROM kb.graph_community WHERE kb_id = $1 AND index_id = $2",
                ["integer", "bigint"],
            ),
            [kb_id, index_id],
        )
    }
    new = [c for c in found if c.signature not in have]
    try:
        answers = layer.ask_many([communities.summary_request(c) for c in new])
    except llm.LlmError as exc:
        fail(plpy, f"summarising communities failed: {exc}", EXTERNAL_FAILURE)
    texts = [f"{a['title']}\n\n{a['summary']}" for a in answers]
    emb_key = api_key(plpy, cfg.api_key_name or _default_key_name(cfg.embedding_model))
    vectors = (
        embedding.embed(cfg, texts, emb_key, [tokens.count(t) for t in texts]).vectors
        if texts
        else []
    )
    return json.dumps(
        {
            "keep": [c.signature for c in found],
            "new": [
                {
                    "signature": c.signature,
                    "members": c.members,
                    "names": c.names,
                    "relations": len(c.facts),
                    "title": a["title"] or ", ".join(c.names[:3]),
                    "summary": a["summary"],
                    "embedding": [round(float(x), 6) for x in v],
                    "chunk_ids": c.chunk_ids,
                }
                for c, a, v in zip(new, answers, vectors, strict=True)
            ],
            "usage": layer.usage.as_json(),
        }
    )


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


# ---------------------------------------------------------------- files, URLs and media

# Conversion limits: setting name -> Limits field (kb.max_document_bytes is the text's).
CONVERT_SETTINGS = {
    "kb.max_document_bytes": "max_text_bytes",
    "kb.max_unzipped_bytes": "max_unzipped_bytes",
    "kb.max_table_rows": "max_rows",
    "kb.max_nesting_depth": "max_depth",
    "kb.convert_memory_mb": "memory_mb",
    "kb.convert_timeout_s": "timeout_s",
    "kb.fetch_timeout_s": "fetch_timeout_s",
}


def convert_limits(plpy: Any) -> Any:
    """The conversion limits, from the kb.* settings where they are set. A session, role or
    database setting (which any user can make for itself) may lower a limit, never raise
    it above the default: that takes postgresql.conf or ALTER SYSTEM."""
    from kbpg_db.convert import Limits

    names = list(CONVERT_SETTINGS)
    row = plpy.execute(
        "SELECT " + ", ".join(f"current_setting('{n}', true) AS c{i}" for i, n in enumerate(names))
    )[0]
    limits = Limits()
    for i, name in enumerate(names):
        raw = row[f"c{i}"]
        if not raw:
            continue
        field_name = CONVERT_SETTINGS[name]
        default = getattr(limits, field_name)
        kind = type(default)
        try:
            value = kind(float(raw)) if kind is int else kind(raw)
        except ValueError:
            fail(plpy, f"setting {name} must be a number (got {raw!r})", INVALID_PARAMETER)
        if value <= 0:
            fail(plpy, f"setting {name} must be more than 0 (got {raw})", INVALID_PARAMETER)
        # Above the default, the value must come from the server's configuration files
        # (kb._server_setting): a session, role or database may only lower a limit. (The
        # text's own cap is a storage choice, settable per session as before; the child
        # process's memory limit still bounds what converting a large file costs.)
        if value > default and name != "kb.max_document_bytes":
            configured = plpy.execute(
                plpy.prepare("SELECT kb._server_setting($1) AS v", ["text"]), [name]
            )[0]["v"]
            try:
                ceiling = max(default, float(configured or 0))
            except ValueError:
                ceiling = default
            if value > ceiling:
                fail(
                    plpy,
                    f"setting {name} = {raw} is above the server's {ceiling:g}, and a session, "
                    "role or database setting may only lower it",
                    INVALID_PARAMETER,
                    hint="a session, role or database may only lower this limit; raise it in "
                    "postgresql.conf or with ALTER SYSTEM",
                )
        setattr(limits, field_name, value)
    return limits


def media_json(found: list[Any]) -> list[dict[str, Any]]:
    import base64

    return [
        {
            "ref": m.ref,
            "media_type": m.media_type,
            "sha256": m.sha256,
            "data": base64.b64encode(m.data).decode("ascii"),
        }
        for m in found
    ]


def extract_media(content: str) -> dict[str, Any]:
    """The text with its data: URIs replaced by kbpg-media: references, and the media."""
    from kbpg_db import media

    text, found = media.extract(content)
    return {"content": text, "media": json.dumps(media_json(found))}


def file_format(file_name: str, head: bytes | None) -> str | None:
    from kbpg_db.convert import format_of

    return format_of(file_name, head)


def convert_document(plpy: Any, kb_id: int, document_id: int) -> str | None:
    """Make a file or URL document's text: convert its stored original (or fetch the URL
    first) in a limited child process, take out its media, and store the text. Returns
    the error that stops the document, or None. A document whose original was not kept
    keeps the text converted before."""
    import sys

    from kbpg_db import convert, media

    doc = plpy.execute(
        plpy.prepare(
            "SELECT d.kb_id, d.title, d.source_uri, d.source_format, d.content IS NOT NULL AS "
            "has_text, d.content_hash, d.source_meta, f.file_name, f.data, f.keep "
            "FROM kb.document d LEFT JOIN kb.document_file f "
            "ON f.kb_id = d.kb_id AND f.document_id = d.id "
            "WHERE d.kb_id = $1 AND d.id = $2",
            ["integer", "bigint"],
        ),
        [kb_id, document_id],
    )
    if not doc:
        return None
    d = doc[0]
    limits = convert_limits(plpy)
    if d["data"] is not None:
        request: dict[str, Any] = {"file_name": d["file_name"]}
        data = bytes(d["data"])
        what = f'file "{d["file_name"]}"'
    elif d["source_format"] == "url":
        meta = _json(d["source_meta"]) or {}
        request = {"url": d["source_uri"], "render": bool(meta.get("render", True))}
        data = None
        what = f"page {d['source_uri']}"
    elif d["has_text"]:
        return None  # the original was dropped after its first conversion
    else:
        return f'document "{d["title"]}": its original file is not stored; add it again'
    # The server's own Python (PL/Python's), never a path a session could set: the child
    # runs as the server's OS user.
    python = f"/usr/bin/python{sys.version_info[0]}.{sys.version_info[1]}"
    try:
        out = convert.run_isolated(request, data, limits, python)
    except convert.ConvertError as exc:
        hint = f" ({exc.hint})" if exc.hint else ""
        if request.get("url") and str(exc).startswith(("http://", "https://")):
            what = "page"  # the fetch's own message names the URL it was fetching
        return f'document "{d["title"]}": {what} {exc}{hint}'
    text, found = media.extract(out.content)
    meta = dict(out.meta)
    if found:
        meta["media"] = len(found)
    # Only the version converted: a newer upload meanwhile has another content_hash.
    plpy.execute(
        plpy.prepare(
            "UPDATE kb.document SET content = $3, page_starts = $4, source_meta = $5::jsonb "
            "WHERE kb_id = $1 AND id = $2 AND content_hash = $6",
            ["integer", "bigint", "text", "integer[]", "text", "text"],
        ),
        [kb_id, document_id, text, out.page_starts, json.dumps(meta), d["content_hash"]],
    )
    plpy.execute(
        plpy.prepare("SELECT kb._store_media($1, $2, $3::jsonb)", ["integer", "bigint", "text"]),
        [kb_id, document_id, json.dumps(media_json(found))],
    )
    if out.file is not None:  # a fetched page or file: kept, so a reindex needs no fetch
        plpy.execute(
            plpy.prepare(
                "SELECT kb._keep_file($1, $2, $3, encode(sha256($3), 'hex'), $4, $4)",
                ["integer", "bigint", "bytea", "text"],
            ),
            [kb_id, document_id, out.file, out.file_name],
        )
    elif d["data"] is not None and not d["keep"]:
        plpy.execute(
            plpy.prepare(
                "DELETE FROM kb.document_file WHERE kb_id = $1 AND document_id = $2",
                ["integer", "bigint"],
            ),
            [kb_id, document_id],
        )
    return None
