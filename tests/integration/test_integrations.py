"""The LangChain and LlamaIndex retrievers with the real packages, sync and async, against
a real KB: the chunk text, its citation metadata, and search options passed through."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from kbpg.client import Client
from tests.helpers import run_worker

DOCS = {
    "Harbour hours": "# Harbour hours\n\nThe harbour office opens at six and closes at ten.\n\n"
    "## Pilots\n\nA pilot boards every vessel over 80 metres.",
    "Cranes": "# Cranes\n\nEach crane lifts forty tonnes. Crane 4 is serviced on Mondays.",
}


def _kb(client: Client, conn: psycopg.Connection[Any]) -> None:
    client.create_knowledge_base("port")
    for title, text in DOCS.items():
        client.add_text("port", title, text, metadata={"team": "ops" if "Crane" in title else "hr"})
    run_worker(conn.info.dsn)


def test_langchain_retriever(client: Client, conn: psycopg.Connection[Any], dsn: str) -> None:
    pytest.importorskip("langchain_core", reason="kbpg[langchain] is not installed")
    from langchain_core.retrievers import BaseRetriever

    from kbpg.integrations.langchain import KbpgRetriever

    _kb(client, conn)
    retriever = KbpgRetriever(kb="port", dsn=dsn, top_k=2)
    assert isinstance(retriever, BaseRetriever)
    docs = retriever.invoke("when does a pilot board a vessel")
    assert docs[0].page_content.startswith("## Pilots") or "pilot boards" in docs[0].page_content
    meta = docs[0].metadata
    assert meta["title"] == "Harbour hours" and meta["heading_path"][-1] == "Pilots"
    assert meta["citation"].startswith("Harbour hours") and meta["document_metadata"] == {
        "team": "hr"
    }
    assert {"score", "rank", "chunk_id", "document_id", "page", "source_uri"} <= set(meta)
    assert docs[0].id == f"kbpg-chunk-{meta['chunk_id']}"
    # Options pass through: a filter, a method; and the async path gives the same.
    only_ops = KbpgRetriever(
        kb="port", dsn=dsn, search_options={"filter": {"team": "ops"}, "method": "full_text"}
    )
    assert {d.metadata["title"] for d in only_ops.invoke("crane pilot harbour")} == {"Cranes"}
    again = asyncio.run(retriever.ainvoke("when does a pilot board a vessel"))
    assert [d.page_content for d in again] == [d.page_content for d in docs]
    # A bad option is kbpg's clear error.
    from kbpg.errors import KbpgError

    with pytest.raises(KbpgError, match="method"):
        KbpgRetriever(kb="port", dsn=dsn, search_options={"method": "telepathy"}).invoke("x")
    retriever.close()


def test_llamaindex_retriever(client: Client, conn: psycopg.Connection[Any], dsn: str) -> None:
    pytest.importorskip("llama_index.core", reason="kbpg[llamaindex] is not installed")
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import MetadataMode

    from kbpg.integrations.llamaindex import KbpgRetriever

    _kb(client, conn)
    retriever = KbpgRetriever(kb="port", dsn=dsn, top_k=2)
    assert isinstance(retriever, BaseRetriever)
    nodes = retriever.retrieve("which day is crane 4 serviced")
    top = nodes[0]
    assert top.node.metadata["title"] == "Cranes" and "Mondays" in top.node.get_content()
    assert top.score == pytest.approx(top.node.metadata["score"])
    assert top.node.node_id == f"kbpg-chunk-{top.node.metadata['chunk_id']}"
    # What an LLM reads: the text with its citation, not the ids and offsets.
    llm_text = top.node.get_content(metadata_mode=MetadataMode.LLM)
    assert "citation" in llm_text and "chunk_id" not in llm_text
    only_hr = KbpgRetriever(kb="port", dsn=dsn, search_options={"filter": {"team": "hr"}})
    assert {n.node.metadata["title"] for n in only_hr.retrieve("crane pilot harbour")} == {
        "Harbour hours"
    }
    again = asyncio.run(retriever.aretrieve("which day is crane 4 serviced"))
    assert [n.node.get_content() for n in again] == [n.node.get_content() for n in nodes]
    retriever.close()
