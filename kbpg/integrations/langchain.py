"""A LangChain retriever over kb.search (``pip install 'kbpg[langchain]'``).

from kbpg.integrations.langchain import KbpgRetriever

retriever = KbpgRetriever(dsn="host=db dbname=app", kb="handbook", top_k=5,
                          search_options={"method": "hybrid", "filter": {"team": "hr"}})
docs = retriever.invoke("how long do refunds take?")        # or await .ainvoke(...)
docs[0].page_content, docs[0].metadata["citation"], docs[0].metadata["page"]
"""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field, PrivateAttr

from kbpg.integrations import Searcher, hit_metadata


class KbpgRetriever(BaseRetriever):
    """Chunks of a kbpg knowledge base for a query, as LangChain documents: the chunk's
    text, and its title, heading path, page, score, citation and ids in the metadata.
    ``search_options`` are kb.search's (method, filter, rerank, vector_weight, ...)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    kb: str
    dsn: str | None = None
    top_k: int = 5
    search_options: dict[str, Any] = Field(default_factory=dict)
    client: Any = None  # a kbpg.Client to use instead of connecting with dsn
    _searcher: Any = PrivateAttr(default=None)

    def _search(self) -> Searcher:
        if self._searcher is None:
            self._searcher = Searcher(
                self.kb, self.dsn, self.top_k, self.search_options, self.client
            )
        return self._searcher

    def close(self) -> None:
        """Close the connection the retriever opened (not a client given to it)."""
        if self._searcher is not None:
            self._searcher.close()

    @staticmethod
    def _documents(hits: list[Any]) -> list[Document]:
        return [
            Document(
                page_content=h.content, metadata=hit_metadata(h), id=f"kbpg-chunk-{h.chunk_id}"
            )
            for h in hits
        ]

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        return self._documents(self._search().search(query))

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        return self._documents(await self._search().asearch(query))
