"""ChunkEmbed: split the text into chunks and embed each one (the default strategy)."""

from __future__ import annotations

from typing import Any

from kbpg_db import chunking, code_graph, embedding, tokens
from kbpg_db.config import LOCAL_MODEL, MULTILINGUAL_MODEL, IndexingConfig
from kbpg_db.features import BuildContext, Built, Document
from kbpg_db.features.knowledge_graph import build as knowledge_graph

# The rows kb.prefetch_embeddings cut for the documents it embedded ahead, kept in this
# server process for their jobs' own builds (rows_ahead, take_rows), so a batched document
# is chunked once: by the settings, the text and its page starts.
_rows_ahead: dict[tuple[str, str, tuple[int, ...] | None], list[Any]] = {}


def _rows_key(
    content: str, cfg: IndexingConfig, page_starts: list[int] | None
) -> tuple[str, str, tuple[int, ...] | None]:
    return cfg.model_dump_json(), content, tuple(page_starts) if page_starts else None


def rows_ahead(content: str, cfg: IndexingConfig, page_starts: list[int] | None) -> list[Any]:
    """chunk_rows for a document embedded ahead of its job, kept for the job's build."""
    rows = chunk_rows(content, cfg, page_starts)
    _rows_ahead[_rows_key(content, cfg, page_starts)] = rows
    return rows


def take_rows(content: str, cfg: IndexingConfig, page_starts: list[int] | None) -> list[Any] | None:
    """The rows rows_ahead kept for this text and these settings (taken out), or None.
    Every ChunkEmbed build asks; with nothing kept (the local model never is) it builds
    no key."""
    if not _rows_ahead:
        return None
    return _rows_ahead.pop(_rows_key(content, cfg, page_starts), None)


def clear_rows_ahead() -> None:
    _rows_ahead.clear()


def chunk_rows(
    content: str, cfg: IndexingConfig, page_starts: list[int] | None, api_key: str | None = None
) -> list[Any]:
    """The chunks of a text as kb.chunk_payload rows (no vectors yet). The semantic
    chunker embeds the text's sentences with the KB's model to find where topics change."""

    def embed_units(text: str, spans: list[tuple[int, int]]) -> list[list[float]]:
        pieces = [text[a:b] for a, b in spans]
        return embedding.embed(cfg, pieces, api_key, [tokens.count(p) for p in pieces]).vectors

    chunks = chunking.chunk_text(
        content,
        cfg.chunker,
        cfg.chunk_size,
        cfg.chunk_overlap,
        cfg.title_line,
        cfg.chunk_unit,
        cfg.separators,
        cfg.sentences_per_chunk,
        cfg.semantic_percentile,
        embed_units,
    )
    return payload(chunks, page_starts)


def payload(chunks: list[chunking.Chunk], page_starts: list[int] | None) -> list[Any]:
    """Chunks as kb.chunk_payload rows, without their vectors yet."""
    return [
        {
            "ordinal": c.ordinal,
            "content": c.content,
            "embed_text": c.embed_text,
            "token_count": c.token_count,
            "heading_path": c.heading_path,
            "page": chunking.page_of(page_starts, c.char_start),
            "char_start": c.char_start,
            "char_end": c.char_end,
            "embedding": None,
            "embed_hash": None,
        }
        for c in chunks
    ]


def embedded_token_counts(rows: list[Any]) -> list[int]:
    """The cl100k tokens of each row's embedded text: the chunker's count where that text
    is the chunk itself (no heading path or title line ahead of it), counted otherwise."""
    return [
        r["token_count"] if r["embed_text"] == r["content"] else tokens.count(r["embed_text"])
        for r in rows
    ]


def batchable(cfg: IndexingConfig, title: str, metadata: dict[str, Any]) -> bool:
    """Whether a document's chunks are worth embedding ahead, with other documents': a
    remote provider's (requests are what it costs; a local model on the CPU is as fast
    one document at a time) and chunks that come from the text alone (no code parsing, no
    knowledge graph, not the semantic chunker, which embeds sentences while it cuts)."""
    if cfg.embedding_model in (LOCAL_MODEL, MULTILINGUAL_MODEL):
        return False
    if cfg.strategy != "chunk_embed" or cfg.knowledge_graph.enabled or cfg.chunker == "semantic":
        return False
    return not (cfg.code_chunking and knowledge_graph.code_source(title, metadata) is not None)


def code_rows(graph: code_graph.CodeGraph, content: str, cfg: IndexingConfig) -> list[Any]:
    """A source file's chunks, cut at its definitions, as kb.chunk_payload rows."""
    chunks = chunking.definition_chunks(
        content,
        knowledge_graph.definition_tree(graph),
        graph.path,
        cfg.chunk_size,
        cfg.chunk_overlap,
    )
    return payload(chunks, None)


def build(doc: Document, cfg: IndexingConfig, ctx: BuildContext) -> Built:
    source = knowledge_graph.code_source(doc.title, doc.metadata)
    graph = None
    if source is not None and (cfg.code_chunking or cfg.knowledge_graph.enabled):
        ctx.report(f"parsing {source[1]}")
        graph = code_graph.parse(source[0], doc.content, source[1])
    if graph is not None and cfg.code_chunking:
        rows = code_rows(graph, doc.content, cfg)
    else:
        rows = take_rows(doc.content, cfg, doc.page_starts) or chunk_rows(
            doc.content, cfg, doc.page_starts, ctx.embedding_key
        )
    # The graph first: its LLM calls may take several steps, and each step starts over
    # (cached answers make that cheap); embedding once, in the last.
    artifacts = None
    if cfg.knowledge_graph.enabled:
        artifacts = knowledge_graph.build(
            doc.title, doc.content, doc.metadata, cfg, rows, graph, ctx
        )
    texts = [chunking.link_text(r["embed_text"]) for r in rows]
    hashes = [embedding.text_hash(t) for t in texts]
    # A rebuild of the document: chunks whose text it had before keep their vectors.
    kept = kept_vectors(ctx, doc.id, hashes)
    todo = [i for i, h in enumerate(hashes) if h not in kept]
    ctx.report(f"embedding {len(todo)} chunks" + (f" ({len(kept)} kept)" if kept else ""))
    todo_texts = [texts[i] for i in todo]
    counts = embedded_token_counts(rows)
    # Embedded ahead with other documents' chunks (kb.prefetch_embeddings), or now.
    result = (
        (
            embedding.take_ahead(cfg, todo_texts)
            or embedding.embed(cfg, todo_texts, ctx.embedding_key, [counts[i] for i in todo])
        )
        if todo
        else embedding.Embeddings([], 0, 0.0, 0)
    )
    for i, vec in zip(todo, result.vectors, strict=True):
        rows[i]["embedding"] = embedding.vector_literal(vec)
    for row, h in zip(rows, hashes, strict=True):
        row["embed_hash"] = h
        if row["embedding"] is None:
            row["embedding"] = kept[h]
    spent_tokens, cost = result.tokens, result.cost_usd
    if artifacts is not None:  # the entity names the graph embedded count too
        extra = artifacts.pop("embedded")
        spent_tokens += extra["tokens"]
        cost = None if cost is None or extra["cost_usd"] is None else cost + extra["cost_usd"]
    return Built(rows, artifacts, spent_tokens, cost, len(rows) - len(todo))


def kept_vectors(ctx: BuildContext, document_id: int | None, hashes: list[str]) -> dict[str, str]:
    """The vectors the document's chunks in this generation have now, by the hash of the
    text they were computed from (same generation: same model), for those of ``hashes``."""
    if ctx.query is None or document_id is None or ctx.index_id is None or not hashes:
        return {}
    rows = ctx.query(
        (
            "SELECT c.embed_hash AS h, e.embedding::text AS v FROM kb.chunk c "
            "JOIN kb.embedding e ON e.kb_id = c.kb_id AND e.chunk_id = c.id "
            "WHERE c.kb_id = $1 AND c.index_id = $2 AND c.document_id = $3 "
            "  AND c.embed_hash = ANY ($4)",
            ["integer", "bigint", "bigint", "text[]"],
        ),
        [ctx.kb_id, ctx.index_id, document_id, sorted(set(hashes))],
    )
    return {r["h"]: r["v"] for r in rows}


# At most this many chunks are embedded ahead in one call (their vectors wait in the
# server process's memory until their jobs take them: about 4k vectors of 384 floats, tens of MB).
PREFETCH_MAX_CHUNKS = 4096


def prefetch(plpy: Any, kb_id: int, job_ids: list[int], worker: str) -> int:
    """Chunk the documents of a worker's claimed jobs (of one KB) and embed all their chunks together
    (full batches, and for a remote provider up to ``embedding_concurrency`` requests in
    flight), so many small documents cost a few requests instead of one each. The vectors
    wait in this server process for the jobs' own builds (kb.process_job, same connection).

    Only ChunkEmbed documents whose text is at hand take part; anything that fails here
    (a provider error, a bad chunking setting) is left for the job, which reports it.
    Returns how many chunks were embedded ahead.
    """
    from kbpg_db import config, keys

    embedding.clear_ahead()
    clear_rows_ahead()
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
            # A rebuild embeds only its changed chunks, in its own job.
            "  AND NOT EXISTS (SELECT 1 FROM kb.chunk c WHERE c.kb_id = j.kb_id "
            "                  AND c.index_id = j.index_id AND c.document_id = j.document_id) "
            "ORDER BY j.id",
            ["integer", "bigint[]", "text"],
        ),
        [kb_id, job_ids, worker],
    )
    chosen: dict[int, Any] = {}
    for row in rows:
        try:
            cfg = config.indexing_cached(row["config"])
        except ValueError:
            continue  # the job's own build reports it
        if batchable(cfg, row["title"], config.from_json(row["metadata"]) or {}):
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
            chunks = rows_ahead(row["content"], cfg, row["page_starts"])
        except ValueError:
            continue  # the job's own build reports it
        if total and total + len(chunks) > PREFETCH_MAX_CHUNKS:
            break
        total += len(chunks)
        groups.setdefault(embedding.model_key(cfg), (cfg, []))[1].extend(
            chunking.link_text(c["embed_text"]) for c in chunks
        )
    done = 0
    for cfg, texts in groups.values():
        if not texts:
            continue
        key = keys.for_model(plpy, cfg.api_key_name, cfg.embedding_model)
        try:
            done += embedding.embed_ahead(cfg, texts, [tokens.count(t) for t in texts], key)
        except (embedding.EmbeddingError, ValueError):
            continue  # each job embeds on its own and reports the error
    return done
