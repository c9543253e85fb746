"""The typed methods of Client and AsyncClient. Generated from kbpg.api.Api by
``make client-methods``: do not edit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

from kbpg.api import Api, Call, PutResult, Rows, SearchResult
from kbpg.loaders import LoadedDocument

T = TypeVar("T")


class SyncMethods:
    """Every API method; :class:`kbpg.client.Client` runs them."""

    def _run(self, call: Call[T]) -> T:
        raise NotImplementedError

    def create_knowledge_base(
        self,
        name: str,
        indexing_config: dict[str, Any] | None = None,
        retrieval_config: dict[str, Any] | None = None,
        description: str = "",
        team: str | None = None,
        private: bool = False,
    ) -> int:
        return self._run(
            Api.create_knowledge_base(
                name, indexing_config, retrieval_config, description, team, private
            )
        )

    def drop_knowledge_base(self, name: str, if_exists: bool = False) -> bool:
        return self._run(Api.drop_knowledge_base(name, if_exists))

    def list_knowledge_bases(
        self, include_shared: bool = True, own_only: bool = False, team: str | None = None
    ) -> Rows:
        return self._run(Api.list_knowledge_bases(include_shared, own_only, team))

    def create_team(self, name: str) -> int:
        return self._run(Api.create_team(name))

    def add_team_member(self, team: str, member: str, role: str = "member") -> None:
        return self._run(Api.add_team_member(team, member, role))

    def remove_team_member(self, team: str, member: str) -> bool:
        return self._run(Api.remove_team_member(team, member))

    def list_teams(self) -> Rows:
        return self._run(Api.list_teams())

    def share_knowledge_base(self, kb: str, team: str) -> None:
        return self._run(Api.share_knowledge_base(kb, team))

    def unshare_knowledge_base(self, kb: str, team: str) -> None:
        return self._run(Api.unshare_knowledge_base(kb, team))

    def knowledge_base(self, name: str) -> dict[str, Any]:
        return self._run(Api.knowledge_base(name))

    def set_default_config(self, kind: str, config: dict[str, Any]) -> dict[str, Any]:
        return self._run(Api.set_default_config(kind, config))

    def add_text(
        self,
        kb: str,
        title: str,
        content: str,
        metadata: dict[str, Any] | None = None,
        source_uri: str | None = None,
        usage_mode: str = "rag",
        page_starts: list[int] | None = None,
    ) -> PutResult:
        return self._run(
            Api.add_text(kb, title, content, metadata, source_uri, usage_mode, page_starts)
        )

    def put(self, kb: str, doc: LoadedDocument) -> PutResult:
        return self._run(Api.put(kb, doc))

    def add_file(
        self,
        kb: str,
        path: str | Path,
        metadata: dict[str, Any] | None = None,
        usage_mode: str = "rag",
        title: str | None = None,
    ) -> PutResult:
        return self._run(Api.add_file(kb, path, metadata, usage_mode, title))

    def add_url(
        self,
        kb: str,
        url: str,
        title: str | None = None,
        metadata: dict[str, Any] | None = None,
        usage_mode: str = "rag",
        render: bool = True,
    ) -> PutResult:
        return self._run(Api.add_url(kb, url, title, metadata, usage_mode, render))

    def media(self, kb: str, ref: str, document_id: int | None = None) -> dict[str, Any]:
        return self._run(Api.media(kb, ref, document_id))

    def delete_document(self, kb: str, title: str) -> bool:
        return self._run(Api.delete_document(kb, title))

    def set_document_chunking(self, kb: str, title: str, chunking: dict[str, Any] | None) -> int:
        return self._run(Api.set_document_chunking(kb, title, chunking))

    def reindex_document(self, kb: str, title: str) -> int:
        return self._run(Api.reindex_document(kb, title))

    def reindex_knowledge_base(self, kb: str, indexing_config: dict[str, Any] | None = None) -> int:
        return self._run(Api.reindex_knowledge_base(kb, indexing_config))

    def document_status(self, kb: str, title: str | None = None) -> Rows:
        return self._run(Api.document_status(kb, title))

    def delete_document_by_id(self, kb: str, document_id: int) -> bool:
        return self._run(Api.delete_document_by_id(kb, document_id))

    def add_source(self, kb: str, name: str, locator: str, kind: str = "folder") -> int:
        return self._run(Api.add_source(kb, name, locator, kind))

    def add_table_source(
        self,
        kb: str,
        table: str,
        key_column: str,
        text_columns: list[str] | None = None,
        text_expression: str | None = None,
        title_column: str | None = None,
        metadata_columns: list[str] | None = None,
        filter: str | None = None,
        name: str | None = None,
    ) -> int:
        return self._run(
            Api.add_table_source(
                kb,
                table,
                key_column,
                text_columns,
                text_expression,
                title_column,
                metadata_columns,
                filter,
                name,
            )
        )

    def add_url_source(
        self,
        kb: str,
        name: str,
        urls: list[str],
        refresh_interval: str = "1 day",
        render: bool = True,
        metadata: dict[str, Any] | None = None,
    ) -> int:
        return self._run(Api.add_url_source(kb, name, urls, refresh_interval, render, metadata))

    def drop_source(self, kb: str, name: str, delete_documents: bool = False) -> int:
        return self._run(Api.drop_source(kb, name, delete_documents))

    def sources(self, kb: str | None = None) -> Rows:
        return self._run(Api.sources(kb))

    def sync_plan(self, kb: str, source: str, files: list[dict[str, str]]) -> Rows:
        return self._run(Api.sync_plan(kb, source, files))

    def bind_document(self, kb: str, source: str, document_id: int, key: str, hash: str) -> None:
        return self._run(Api.bind_document(kb, source, document_id, key, hash))

    def move_document(
        self,
        kb: str,
        document_id: int,
        title: str,
        metadata: dict[str, Any] | None = None,
        source_key: str | None = None,
    ) -> int:
        return self._run(Api.move_document(kb, document_id, title, metadata, source_key))

    def finish_sync(
        self, kb: str, source: str, summary: dict[str, Any], error: str | None = None
    ) -> None:
        return self._run(Api.finish_sync(kb, source, summary, error))

    def retry_failed(self, kb: str, title: str | None = None) -> int:
        return self._run(Api.retry_failed(kb, title))

    def queue_status(self) -> Rows:
        return self._run(Api.queue_status())

    def search(
        self,
        kb: str,
        query: str,
        *,
        top_k: int | None = None,
        method: str | None = None,
        filter: dict[str, Any] | None = None,
        vector_weight: float | None = None,
        rrf_k: float | None = None,
        fusion_depth: int | None = None,
        similarity_threshold: float | None = None,
        rerank: bool | None = None,
        candidate_count: int | None = None,
        rerank_threshold: float | None = None,
        k1: float | None = None,
        b: float | None = None,
        ef_search: int | None = None,
        rerank_model: str | None = None,
        rerank_api_base: str | None = None,
        rerank_api_key_name: str | None = None,
        max_documents: int | None = None,
        toc_token_budget: int | None = None,
        reference_expansion: bool | None = None,
        expansion_limit: int | None = None,
        graph_weight: float | None = None,
        graph_hops: int | None = None,
        graph_limit: int | None = None,
        fusion: str | None = None,
        plain_query_shift: float | None = None,
        term_expansion: int | None = None,
        term_expansion_weight: float | None = None,
        options: dict[str, Any] | None = None,
    ) -> list[SearchResult]:
        return self._run(
            Api.search(
                kb,
                query,
                top_k=top_k,
                method=method,
                filter=filter,
                vector_weight=vector_weight,
                rrf_k=rrf_k,
                fusion_depth=fusion_depth,
                similarity_threshold=similarity_threshold,
                rerank=rerank,
                candidate_count=candidate_count,
                rerank_threshold=rerank_threshold,
                k1=k1,
                b=b,
                ef_search=ef_search,
                rerank_model=rerank_model,
                rerank_api_base=rerank_api_base,
                rerank_api_key_name=rerank_api_key_name,
                max_documents=max_documents,
                toc_token_budget=toc_token_budget,
                reference_expansion=reference_expansion,
                expansion_limit=expansion_limit,
                graph_weight=graph_weight,
                graph_hops=graph_hops,
                graph_limit=graph_limit,
                fusion=fusion,
                plain_query_shift=plain_query_shift,
                term_expansion=term_expansion,
                term_expansion_weight=term_expansion_weight,
                options=options,
            )
        )

    def explain_search(
        self,
        kb: str,
        query: str,
        *,
        top_k: int | None = None,
        method: str | None = None,
        filter: dict[str, Any] | None = None,
        vector_weight: float | None = None,
        rrf_k: float | None = None,
        fusion_depth: int | None = None,
        similarity_threshold: float | None = None,
        rerank: bool | None = None,
        candidate_count: int | None = None,
        rerank_threshold: float | None = None,
        k1: float | None = None,
        b: float | None = None,
        ef_search: int | None = None,
        rerank_model: str | None = None,
        rerank_api_base: str | None = None,
        rerank_api_key_name: str | None = None,
        max_documents: int | None = None,
        toc_token_budget: int | None = None,
        reference_expansion: bool | None = None,
        expansion_limit: int | None = None,
        graph_weight: float | None = None,
        graph_hops: int | None = None,
        graph_limit: int | None = None,
        fusion: str | None = None,
        plain_query_shift: float | None = None,
        term_expansion: int | None = None,
        term_expansion_weight: float | None = None,
        options: dict[str, Any] | None = None,
    ) -> Rows:
        return self._run(
            Api.explain_search(
                kb,
                query,
                top_k=top_k,
                method=method,
                filter=filter,
                vector_weight=vector_weight,
                rrf_k=rrf_k,
                fusion_depth=fusion_depth,
                similarity_threshold=similarity_threshold,
                rerank=rerank,
                candidate_count=candidate_count,
                rerank_threshold=rerank_threshold,
                k1=k1,
                b=b,
                ef_search=ef_search,
                rerank_model=rerank_model,
                rerank_api_base=rerank_api_base,
                rerank_api_key_name=rerank_api_key_name,
                max_documents=max_documents,
                toc_token_budget=toc_token_budget,
                reference_expansion=reference_expansion,
                expansion_limit=expansion_limit,
                graph_weight=graph_weight,
                graph_hops=graph_hops,
                graph_limit=graph_limit,
                fusion=fusion,
                plain_query_shift=plain_query_shift,
                term_expansion=term_expansion,
                term_expansion_weight=term_expansion_weight,
                options=options,
            )
        )

    def build_context(
        self,
        kb: str,
        query: str,
        *,
        token_budget: int | None = None,
        max_chunks_per_document: int | None = None,
        relevance_threshold: float | None = None,
        expand_sections: bool | None = None,
        top_k: int | None = None,
        method: str | None = None,
        rerank: bool | None = None,
        filter: dict[str, Any] | None = None,
        options: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        return self._run(
            Api.build_context(
                kb,
                query,
                token_budget=token_budget,
                max_chunks_per_document=max_chunks_per_document,
                relevance_threshold=relevance_threshold,
                expand_sections=expand_sections,
                top_k=top_k,
                method=method,
                rerank=rerank,
                filter=filter,
                options=options,
            )
        )


class AsyncMethods:
    """Every API method; :class:`kbpg.client.AsyncClient` runs them."""

    async def _run(self, call: Call[T]) -> T:
        raise NotImplementedError

    async def create_knowledge_base(
        self,
        name: str,
        indexing_config: dict[str, Any] | None = None,
        retrieval_config: dict[str, Any] | None = None,
        description: str = "",
        team: str | None = None,
        private: bool = False,
    ) -> int:
        return await self._run(
            Api.create_knowledge_base(
                name, indexing_config, retrieval_config, description, team, private
            )
        )

    async def drop_knowledge_base(self, name: str, if_exists: bool = False) -> bool:
        return await self._run(Api.drop_knowledge_base(name, if_exists))

    async def list_knowledge_bases(
        self, include_shared: bool = True, own_only: bool = False, team: str | None = None
    ) -> Rows:
        return await self._run(Api.list_knowledge_bases(include_shared, own_only, team))

    async def create_team(self, name: str) -> int:
        return await self._run(Api.create_team(name))

    async def add_team_member(self, team: str, member: str, role: str = "member") -> None:
        return await self._run(Api.add_team_member(team, member, role))

    async def remove_team_member(self, team: str, member: str) -> bool:
        return await self._run(Api.remove_team_member(team, member))

    async def list_teams(self) -> Rows:
        return await self._run(Api.list_teams())

    async def share_knowledge_base(self, kb: str, team: str) -> None:
        return await self._run(Api.share_knowledge_base(kb, team))

    async def unshare_knowledge_base(self, kb: str, team: str) -> None:
        return await self._run(Api.unshare_knowledge_base(kb, team))

    async def knowledge_base(self, name: str) -> dict[str, Any]:
        return await self._run(Api.knowledge_base(name))

    async def set_default_config(self, kind: str, config: dict[str, Any]) -> dict[str, Any]:
        return await self._run(Api.set_default_config(kind, config))

    async def add_text(
        self,
        kb: str,
        title: str,
        content: str,
        metadata: dict[str, Any] | None = None,
        source_uri: str | None = None,
        usage_mode: str = "rag",
        page_starts: list[int] | None = None,
    ) -> PutResult:
        return await self._run(
            Api.add_text(kb, title, content, metadata, source_uri, usage_mode, page_starts)
        )

    async def put(self, kb: str, doc: LoadedDocument) -> PutResult:
        return await self._run(Api.put(kb, doc))

    async def add_file(
        self,
        kb: str,
        path: str | Path,
        metadata: dict[str, Any] | None = None,
        usage_mode: str = "rag",
        title: str | None = None,
    ) -> PutResult:
        return await self._run(Api.add_file(kb, path, metadata, usage_mode, title))

    async def add_url(
        self,
        kb: str,
        url: str,
        title: str | None = None,
        metadata: dict[str, Any] | None = None,
        usage_mode: str = "rag",
        render: bool = True,
    ) -> PutResult:
        return await self._run(Api.add_url(kb, url, title, metadata, usage_mode, render))

    async def media(self, kb: str, ref: str, document_id: int | None = None) -> dict[str, Any]:
        return await self._run(Api.media(kb, ref, document_id))

    async def delete_document(self, kb: str, title: str) -> bool:
        return await self._run(Api.delete_document(kb, title))

    async def set_document_chunking(
        self, kb: str, title: str, chunking: dict[str, Any] | None
    ) -> int:
        return await self._run(Api.set_document_chunking(kb, title, chunking))

    async def reindex_document(self, kb: str, title: str) -> int:
        return await self._run(Api.reindex_document(kb, title))

    async def reindex_knowledge_base(
        self, kb: str, indexing_config: dict[str, Any] | None = None
    ) -> int:
        return await self._run(Api.reindex_knowledge_base(kb, indexing_config))

    async def document_status(self, kb: str, title: str | None = None) -> Rows:
        return await self._run(Api.document_status(kb, title))

    async def delete_document_by_id(self, kb: str, document_id: int) -> bool:
        return await self._run(Api.delete_document_by_id(kb, document_id))

    async def add_source(self, kb: str, name: str, locator: str, kind: str = "folder") -> int:
        return await self._run(Api.add_source(kb, name, locator, kind))

    async def add_table_source(
        self,
        kb: str,
        table: str,
        key_column: str,
        text_columns: list[str] | None = None,
        text_expression: str | None = None,
        title_column: str | None = None,
        metadata_columns: list[str] | None = None,
        filter: str | None = None,
        name: str | None = None,
    ) -> int:
        return await self._run(
            Api.add_table_source(
                kb,
                table,
                key_column,
                text_columns,
                text_expression,
                title_column,
                metadata_columns,
                filter,
                name,
            )
        )

    async def add_url_source(
        self,
        kb: str,
        name: str,
        urls: list[str],
        refresh_interval: str = "1 day",
        render: bool = True,
        metadata: dict[str, Any] | None = None,
    ) -> int:
        return await self._run(
            Api.add_url_source(kb, name, urls, refresh_interval, render, metadata)
        )

    async def drop_source(self, kb: str, name: str, delete_documents: bool = False) -> int:
        return await self._run(Api.drop_source(kb, name, delete_documents))

    async def sources(self, kb: str | None = None) -> Rows:
        return await self._run(Api.sources(kb))

    async def sync_plan(self, kb: str, source: str, files: list[dict[str, str]]) -> Rows:
        return await self._run(Api.sync_plan(kb, source, files))

    async def bind_document(
        self, kb: str, source: str, document_id: int, key: str, hash: str
    ) -> None:
        return await self._run(Api.bind_document(kb, source, document_id, key, hash))

    async def move_document(
        self,
        kb: str,
        document_id: int,
        title: str,
        metadata: dict[str, Any] | None = None,
        source_key: str | None = None,
    ) -> int:
        return await self._run(Api.move_document(kb, document_id, title, metadata, source_key))

    async def finish_sync(
        self, kb: str, source: str, summary: dict[str, Any], error: str | None = None
    ) -> None:
        return await self._run(Api.finish_sync(kb, source, summary, error))

    async def retry_failed(self, kb: str, title: str | None = None) -> int:
        return await self._run(Api.retry_failed(kb, title))

    async def queue_status(self) -> Rows:
        return await self._run(Api.queue_status())

    async def search(
        self,
        kb: str,
        query: str,
        *,
        top_k: int | None = None,
        method: str | None = None,
        filter: dict[str, Any] | None = None,
        vector_weight: float | None = None,
        rrf_k: float | None = None,
        fusion_depth: int | None = None,
        similarity_threshold: float | None = None,
        rerank: bool | None = None,
        candidate_count: int | None = None,
        rerank_threshold: float | None = None,
        k1: float | None = None,
        b: float | None = None,
        ef_search: int | None = None,
        rerank_model: str | None = None,
        rerank_api_base: str | None = None,
        rerank_api_key_name: str | None = None,
        max_documents: int | None = None,
        toc_token_budget: int | None = None,
        reference_expansion: bool | None = None,
        expansion_limit: int | None = None,
        graph_weight: float | None = None,
        graph_hops: int | None = None,
        graph_limit: int | None = None,
        fusion: str | None = None,
        plain_query_shift: float | None = None,
        term_expansion: int | None = None,
        term_expansion_weight: float | None = None,
        options: dict[str, Any] | None = None,
    ) -> list[SearchResult]:
        return await self._run(
            Api.search(
                kb,
                query,
                top_k=top_k,
                method=method,
                filter=filter,
                vector_weight=vector_weight,
                rrf_k=rrf_k,
                fusion_depth=fusion_depth,
                similarity_threshold=similarity_threshold,
                rerank=rerank,
                candidate_count=candidate_count,
                rerank_threshold=rerank_threshold,
                k1=k1,
                b=b,
                ef_search=ef_search,
                rerank_model=rerank_model,
                rerank_api_base=rerank_api_base,
                rerank_api_key_name=rerank_api_key_name,
                max_documents=max_documents,
                toc_token_budget=toc_token_budget,
                reference_expansion=reference_expansion,
                expansion_limit=expansion_limit,
                graph_weight=graph_weight,
                graph_hops=graph_hops,
                graph_limit=graph_limit,
                fusion=fusion,
                plain_query_shift=plain_query_shift,
                term_expansion=term_expansion,
                term_expansion_weight=term_expansion_weight,
                options=options,
            )
        )

    async def explain_search(
        self,
        kb: str,
        query: str,
        *,
        top_k: int | None = None,
        method: str | None = None,
        filter: dict[str, Any] | None = None,
        vector_weight: float | None = None,
        rrf_k: float | None = None,
        fusion_depth: int | None = None,
        similarity_threshold: float | None = None,
        rerank: bool | None = None,
        candidate_count: int | None = None,
        rerank_threshold: float | None = None,
        k1: float | None = None,
        b: float | None = None,
        ef_search: int | None = None,
        rerank_model: str | None = None,
        rerank_api_base: str | None = None,
        rerank_api_key_name: str | None = None,
        max_documents: int | None = None,
        toc_token_budget: int | None = None,
        reference_expansion: bool | None = None,
        expansion_limit: int | None = None,
        graph_weight: float | None = None,
        graph_hops: int | None = None,
        graph_limit: int | None = None,
        fusion: str | None = None,
        plain_query_shift: float | None = None,
        term_expansion: int | None = None,
        term_expansion_weight: float | None = None,
        options: dict[str, Any] | None = None,
    ) -> Rows:
        return await self._run(
            Api.explain_search(
                kb,
                query,
                top_k=top_k,
                method=method,
                filter=filter,
                vector_weight=vector_weight,
                rrf_k=rrf_k,
                fusion_depth=fusion_depth,
                similarity_threshold=similarity_threshold,
                rerank=rerank,
                candidate_count=candidate_count,
                rerank_threshold=rerank_threshold,
                k1=k1,
                b=b,
                ef_search=ef_search,
                rerank_model=rerank_model,
                rerank_api_base=rerank_api_base,
                rerank_api_key_name=rerank_api_key_name,
                max_documents=max_documents,
                toc_token_budget=toc_token_budget,
                reference_expansion=reference_expansion,
                expansion_limit=expansion_limit,
                graph_weight=graph_weight,
                graph_hops=graph_hops,
                graph_limit=graph_limit,
                fusion=fusion,
                plain_query_shift=plain_query_shift,
                term_expansion=term_expansion,
                term_expansion_weight=term_expansion_weight,
                options=options,
            )
        )

    async def build_context(
        self,
        kb: str,
        query: str,
        *,
        token_budget: int | None = None,
        max_chunks_per_document: int | None = None,
        relevance_threshold: float | None = None,
        expand_sections: bool | None = None,
        top_k: int | None = None,
        method: str | None = None,
        rerank: bool | None = None,
        filter: dict[str, Any] | None = None,
        options: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        return await self._run(
            Api.build_context(
                kb,
                query,
                token_budget=token_budget,
                max_chunks_per_document=max_chunks_per_document,
                relevance_threshold=relevance_threshold,
                expand_sections=expand_sections,
                top_k=top_k,
                method=method,
                rerank=rerank,
                filter=filter,
                options=options,
            )
        )
