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


class Searcher:
    """kb.search for a retriever: a synchronous Client (the one given, else one made from
    ``dsn`` on first use) and an asyncpg connection per asynchronous call."""

    def __init__(
        self, kb: str, dsn: str | None, top_k: int, options: dict[str, Any], client: Any = None
    ) -> None:
        self.kb, self.dsn, self.top_k, self.options = kb, dsn, top_k, dict(options)
        self._given = client
        self._own: Any = None

    def search(self, query: str) -> list[Any]:
        client = self._given
        if client is None:
            if self._own is None:
                from kbpg.client import Client

                self._own = Client(self.dsn)
            client = self._own
        return list(client.search(self.kb, query, top_k=self.top_k, **self.options))

    async def asearch(self, query: str) -> list[Any]:
        from kbpg.client import AsyncClient

        client = await AsyncClient.connect(self.dsn)
        try:
            return list(await client.search(self.kb, query, top_k=self.top_k, **self.options))
        finally:
            await client.close()

    def close(self) -> None:
        if self._own is not None:
            self._own.close()
            self._own = None
