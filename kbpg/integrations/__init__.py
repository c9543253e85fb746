"""kbpg as a retriever where applications already are: LangChain (``kbpg[langchain]``,
:mod:`kbpg.integrations.langchain`) and LlamaIndex (``kbpg[llamaindex]``,
:mod:`kbpg.integrations.llamaindex`). Both return each hit's chunk text with the same
metadata (:func:`hit_metadata`)."""

from __future__ import annotations

from typing import Any


def hit_metadata(hit: Any) -> dict[str, Any]:
    """What a retriever's document carries besides its text: where it comes from (title,
    heading path, page, source URI, regions on the page), how it ranked, and the citation
    label kb.build_context writes for it."""
    meta: dict[str, Any] = {
        "title": hit.title,
        "heading_path": list(hit.heading_path or []),
        "page": hit.page,
        "score": hit.score,
        "rank": hit.rank,
        "citation": hit.source,
        "chunk_id": hit.chunk_id,
        "document_id": hit.document_id,
        "source_uri": hit.source_uri,
        "char_start": hit.char_start,
        "char_end": hit.char_end,
        "document_metadata": {
            k: v for k, v in (hit.metadata or {}).items() if k not in ("regions", "ocr")
        },
    }
    for key in ("regions", "ocr"):
        if (hit.metadata or {}).get(key):
            meta[key] = hit.metadata[key]
    return meta
