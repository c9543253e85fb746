"""A LlamaIndex retriever over kb.search (``pip install 'kbpg[llamaindex]'``).

    from kbpg.integrations.llamaindex import KbpgRetriever

    retriever = KbpgRetriever(kb="handbook", dsn="host=db dbname=app", top_k=5,
                              search_options={"method": "hybrid"})
    nodes = retriever.retrieve("how long do refunds take?")     # or await .aretrieve(...)
    nodes[0].score, nodes[0].node.text, nodes[0].node.metadata["citation"]

It plugs into a query engine like any retriever:
``RetrieverQueryEngine.from_args(retriever, llm=...)``.
"""

from __future__ import annotations

from typing import Any

from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from kbpg.integrations import Searcher, hit_metadata


class KbpgRetriever(BaseRetriever):
    """Chunks of a kbpg knowledge base for a query, as LlamaIndex nodes with their score:
    the chunk's text, and its title, heading path, page, citation and ids in the metadata.
    ``search_options`` are kb.search's (method, filter, rerank, vector_weight, ...)."""

    def __init__(
        self,
        kb: str,
        dsn: str | None = None,
        top_k: int = 5,
        search_options: dict[str, Any] | None = None,
        client: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.kb = kb
        self._searcher = Searcher(kb, dsn, top_k, search_options or {}, client)

    def close(self) -> None:
        """Close the connection the retriever opened (not a client given to it)."""
        self._searcher.close()

    @staticmethod
    def _nodes(hits: list[Any]) -> list[NodeWithScore]:
        out = []
        for h in hits:
            meta = hit_metadata(h)
            node = TextNode(
                text=h.content,
                id_=f"kbpg-chunk-{h.chunk_id}",
                metadata=meta,
                # The text the LLM reads is the chunk's; the ids and offsets stay out of it.
                excluded_llm_metadata_keys=[
                    k for k in meta if k not in ("title", "citation", "page")
                ],
                excluded_embed_metadata_keys=list(meta),
            )
            out.append(NodeWithScore(node=node, score=h.score))
        return out

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self._nodes(self._searcher.search(query_bundle.query_str))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self._nodes(await self._searcher.asearch(query_bundle.query_str))
