"""ChunkEmbed: split the text into chunks and embed each one (the default strategy)."""

from __future__ import annotations

from typing import Any

from kbpg_db import chunking, code_graph, embedding, knowledge_graph, tokens
from kbpg_db.config import LOCAL_MODEL, MULTILINGUAL_MODEL, IndexingConfig
from kbpg_db.strategies import BuildContext, Built, Document

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
    texts = [r["embed_text"] for r in rows]
    ctx.report(f"embedding {len(texts)} chunks")
    # Embedded ahead with other documents' chunks (kb.prefetch_embeddings), or now.
    result = embedding.take_ahead(cfg, texts) or embedding.embed(
        cfg, texts, ctx.embedding_key, embedded_token_counts(rows)
    )
    for row, vec in zip(rows, result.vectors, strict=True):
        row["embedding"] = embedding.vector_literal(vec)
    spent_tokens, cost = result.tokens, result.cost_usd
    if artifacts is not None:  # the entity names the graph embedded count too
        extra = artifacts.pop("embedded")
        spent_tokens += extra["tokens"]
        cost = None if cost is None or extra["cost_usd"] is None else cost + extra["cost_usd"]
    return Built(rows, artifacts, spent_tokens, cost)
