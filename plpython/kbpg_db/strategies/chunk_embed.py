"""ChunkEmbed: split the text into chunks and embed each one (seed 000's default)."""

from __future__ import annotations

from typing import Any

from kbpg_db import chunking, embedding, tokens
from kbpg_db.config import IndexingConfig
from kbpg_db.strategies import BuildContext, Built, Document


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


def build(doc: Document, cfg: IndexingConfig, ctx: BuildContext) -> Built:
    rows = chunk_rows(doc.content, cfg, doc.page_starts, ctx.embedding_key)
    texts = [r["embed_text"] for r in rows]
    ctx.report(f"embedding {len(texts)} chunks")
    result = embedding.embed(cfg, texts, ctx.embedding_key, [tokens.count(t) for t in texts])
    for row, vec in zip(rows, result.vectors, strict=True):
        row["embedding"] = vec
    return Built(rows, None, result.tokens, result.cost_usd)
