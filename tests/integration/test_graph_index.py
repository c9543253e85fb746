"""GraphIndex end to end: the PageIndex tree, cross-references by rule and by the scripted
LLM (over real HTTP, counted at the server), vector/BM25/hybrid over the sections, and the
expansion of search results along the references."""

from __future__ import annotations

import json
import re
from typing import Any

import psycopg
import pytest

from kbpg.client import Client
from kbpg.errors import ConfigError
from tests.fakeprovider import FakeProvider, default_chat, last_user
from tests.helpers import allow_fake_key, remote_config, run_worker
from tests.integration.test_llm import llm_extra

API = """# 1 Overview
This guide covers the payment service. See Section 3 for limits and
[the retry rules](#4-retry-policy).
# 2 Authentication
Tokens expire after an hour. Clients must renew tokens as described under rate limits.
# 3 Limits
Each account may send 100 requests per minute (see Sections 2 and 9).
# 4 Retry policy
Back off exponentially. The token rules in Section 2 apply to retried calls too.
# 5 Glossary
A request is one HTTP call.
"""


def graph_kb(
    client: Client,
    conn: psycopg.Connection,
    provider: FakeProvider,
    name: str = "g",
    llm: bool = True,
    **extra: Any,
) -> None:
    allow_fake_key(conn)
    settings = llm_extra(provider, **extra) if llm else extra
    client.create_knowledge_base(
        name, remote_config(provider, strategy="graph_index", extra=settings)
    )
    client.conn.execute("SET kb.fake_key = 'test-key'")


def api_kb(client: Client, conn: psycopg.Connection, provider: FakeProvider, **kw: Any) -> None:
    """The graph KB "g" holding API, indexed."""
    graph_kb(client, conn, provider, **kw)
    client.add_text("g", "api", API)
    run_worker(conn.info.dsn)


def node_ids(prompt: str) -> dict[str, str]:
    """Section title -> node id, from the ToC in a references prompt."""
    return {m.group(2): m.group(1) for m in re.finditer(r"\[([0-9a-f]{10})\] (.+)", prompt)}


def references_chat(body: dict[str, Any]) -> str:
    """For "2 Authentication": one real reference, one made-up id and its own parent-less
    self; for "3 Limits": nothing; everything else as the default model answers."""
    prompt = last_user(body)
    if '"references"' not in prompt:
        return default_chat(body)
    ids = node_ids(prompt)
    if "Section [" + ids["2 Authentication"] + "]" in prompt:
        refs = [
            {"node_id": ids["3 Limits"], "kind": "mentions", "phrase": "rate limits"},
            {"node_id": "ffffffffff", "kind": "cites", "phrase": "made up"},
            {"node_id": ids["2 Authentication"], "kind": "cites", "phrase": "itself"},
        ]
        return json.dumps({"references": refs})
    return json.dumps({"references": []})


def edges(conn: psycopg.Connection, kb: str = "g") -> list[tuple[str, str, str, str, str]]:
    rows = conn.execute(
        "SELECT source_path[1], target_path[1], kind, phrase, resolved_by "
        "FROM kb.graph_index_references WHERE kb = %s ORDER BY 1, 2",
        (kb,),
    ).fetchall()
    return [tuple(r) for r in rows]


def references_prompts(provider: FakeProvider) -> list[str]:
    return [p for p in provider.prompts() if '"references"' in p]


def test_explicit_references_resolve_without_an_llm(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    api_kb(client, conn, provider, llm=False, enrichment="rules")
    assert provider.chat_calls == []  # no LLM configured, none called
    assert edges(conn) == [
        ("1 Overview", "3 Limits", "cites", "Section 3", "rule"),
        ("1 Overview", "4 Retry policy", "cites", "[the retry rules](#4-retry-policy)", "rule"),
        ("3 Limits", "2 Authentication", "cites", "Sections 2 and 9", "rule"),
        ("4 Retry policy", "2 Authentication", "cites", "Section 2", "rule"),
    ]
    doc = conn.execute(
        "SELECT node_count, rule_edges, llm_edges, sections_asked FROM kb.graph_index_documents "
        "WHERE kb = 'g'"
    ).fetchone()
    assert doc == (5, 4, 0, 0)
    # Every section is embedded: title path, summary and its reference list.
    texts = [t for t in provider.embedded_texts if t.startswith("1 Overview")]
    assert texts and "References: 3 Limits; 4 Retry policy" in texts[-1]
    query = "account sends 100 requests per minute"
    hits = client.search("g", query, method="full_text", reference_expansion=False)
    assert hits[0].heading_path == ["3 Limits"]
    # (The fake provider's 16-dimension hashed vectors collide: the section is near the top.)
    for method in ("vector", "hybrid"):
        hits = client.search("g", query, method=method, reference_expansion=False)
        top = [h for h in hits[:3] if h.heading_path == ["3 Limits"]]
        assert top and top[0].vector_score is not None, method


def test_the_llm_reads_only_unresolved_sections_and_its_ids_are_checked(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    provider.chat = references_chat
    api_kb(client, conn, provider, if_add_node_summary="no", if_add_doc_description="no")
    asked = references_prompts(provider)
    # "2 Authentication" says "as described under" with nothing resolved; "3 Limits" names
    # a Section 9 that does not exist. Overview and Retry policy resolved all theirs.
    assert sorted(re.search(r"Section \[\w+\] (.+):", p).group(1) for p in asked) == [
        "2 Authentication",
        "3 Limits",
    ]
    assert len(provider.chat_calls) == 2
    assert ("2 Authentication", "3 Limits", "mentions", "rate limits", "llm") in edges(conn)
    doc = conn.execute(
        "SELECT rule_edges, llm_edges, sections_asked, dropped_unknown_ids, dropped_structural "
        "FROM kb.graph_index_documents WHERE kb = 'g'"
    ).fetchone()
    assert doc == (4, 1, 2, 1, 1)
    # A reindex with unchanged settings asks nothing again: every answer is cached.
    provider.chat_calls.clear()
    client.reindex_knowledge_base("g")
    run_worker(conn.info.dsn)
    assert provider.chat_calls == []
    assert len(edges(conn)) == 5


def test_enrichment_all_is_capped_at_the_concurrency_limit(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    provider.chat = references_chat
    provider.chat_delay = 0.2
    api_kb(
        client,
        conn,
        provider,
        enrichment="all",
        llm_concurrency=2,
        if_add_node_summary="no",
        if_add_doc_description="no",
    )
    assert len(references_prompts(provider)) == 5
    assert provider.max_in_flight == 2


def test_search_adds_the_sections_the_hits_reference(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    api_kb(client, conn, provider, llm=False, enrichment="rules")
    hits = client.search("g", "payment service overview guide", top_k=1)
    assert [h.heading_path[0] for h in hits] == ["1 Overview", "3 Limits", "4 Retry policy"]
    assert hits[0].expanded_from is None and hits[0].score is not None
    assert [h.rank for h in hits] == [1, 2, 3]
    assert all(h.expanded_from == hits[0].chunk_id and h.score is None for h in hits[1:])
    explained = client.explain_search("g", "payment service overview guide", top_k=1)
    assert [e["expansion"] for e in explained] == [
        None,
        "cites: Section 3",
        "cites: [the retry rules](#4-retry-policy)",
    ]
    # Capped, and off when asked.
    capped = client.search("g", "payment service overview guide", top_k=1, expansion_limit=1)
    assert [h.heading_path[0] for h in capped] == ["1 Overview", "3 Limits"]
    off = client.search("g", "payment service overview guide", top_k=1, reference_expansion=False)
    assert len(off) == 1
    # A section already among the hits is not added again.
    both = client.search("g", "payment service overview guide limits", top_k=2, method="full_text")
    paths = [h.heading_path[0] for h in both]
    assert len(paths) == len(set(paths))
    # build_context cites an expanded section like any other.
    ctx = client.build_context("g", "payment service overview guide", top_k=1)
    assert "[Source 2: api › 3 Limits]" in ctx["context"]
    assert [s["heading_path"][0] for s in ctx["sources"]][:3] == [
        "1 Overview",
        "3 Limits",
        "4 Retry policy",
    ]


def test_bad_graph_settings_name_the_field(client: Client, provider: FakeProvider) -> None:
    with pytest.raises(ConfigError, match=re.escape('unknown extra.enrichment "sometimes"')):
        client.create_knowledge_base(
            "bad", {"strategy": "graph_index", "extra": {"enrichment": "sometimes"}}
        )
    with pytest.raises(ConfigError, match="expansion_limit must be between 0 and 100"):
        client.create_knowledge_base("bad", {"strategy": "graph_index"}, {"expansion_limit": 500})
