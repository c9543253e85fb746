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

from kbpg.integrations import hit_metadata


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
    _own: Any = PrivateAttr(default=None)

    def _client(self) -> Any:
        if self.client is not None:
            return self.client
        if self._own is None:
            from kbpg.client import Client

            self._own = Client(self.dsn)
        return self._own

    def _documents(self, hits: list[Any]) -> list[Document]:
        return [
            Document(
                page_content=h.content, metadata=hit_metadata(h), id=f"kbpg-chunk-{h.chunk_id}"
            )
            for h in hits
        ]

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        hits = self._client().search(self.kb, query, top_k=self.top_k, **self.search_options)
        return self._documents(hits)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        from kbpg.client import AsyncClient

        client = await AsyncClient.connect(self.dsn)
        try:
            hits = await client.search(self.kb, query, top_k=self.top_k, **self.search_options)
        finally:
            await client.close()
        return self._documents(hits)
