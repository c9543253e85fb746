"""The triplet graph: the LLM (a scripted OpenAI-compatible server, over real HTTP, called
by litellm inside PostgreSQL) reads each chunk for (subject, predicate, object) triplets;
entities merge across chunks and documents by a normalised key, candidate duplicates are
merged by rule or by a recorded LLM decision, and every relation cites its chunk."""

from __future__ import annotations

import json
import re
from typing import Any

import psycopg
import pytest

from kbpg.client import Client
from tests.fakeprovider import FakeProvider, last_user
from tests.helpers import remote_kb, run_worker
from tests.integration.test_llm import llm_extra

DOCS = {
    "anthropic.md": "Anthropic's prompt cache reuses the KV matrix to cut cost.",
    "company.md": "anthropic builds Claude.",
    "legal.md": "Anthropic, Inc. is based in San Francisco.",
    "planets.md": "Mercury orbits the Sun.",
    "elements.md": "Mercury is a liquid metal.",
    "caches.md": "Prompt caches lower latency.",
    "assistant.md": "Claude AI answers questions.",
}
# What the model finds in each text: (subject, type, predicate, object, type).
FACTS = {
    "Anthropic's prompt cache": [
        ("Anthropic", "organization", "has", "Prompt Cache", "product"),
        ("Prompt Cache", "product", "reuses", "KV matrix", "concept"),
        ("Prompt Cache", "product", "cuts", "cost", "concept"),
    ],
    "anthropic builds": [("anthropic", "company", "builds", "Claude", "product")],
    "Anthropic, Inc.": [("Anthropic, Inc.", "organization", "based in", "San Francisco", "city")],
    "Mercury orbits": [("Mercury", "planet", "orbits", "Sun", "star")],
    "Mercury is a liquid": [("Mercury", "chemical element", "is a", "liquid metal", "concept")],
    "Prompt caches": [("Prompt caches", "product", "lower", "latency", "concept")],
    "Claude AI": [("Claude AI", "product", "answers", "questions", "concept")],
}


def chat(body: dict[str, Any]) -> str:
    prompt = last_user(body)
    if prompt.startswith("A: "):  # an entity merge question
        a, b = re.findall(r'"([^"]+)" \(([^)]+)\)', prompt)[:2]
        same = a[0].split()[0].lower() == b[0].split()[0].lower() and a[1] == b[1]
        return json.dumps({"same": same, "reason": "same product" if same else "different things"})
    text = prompt.split("Text:\n", 1)[1].split("\n\nReturn", 1)[0]
    found = next((v for k, v in FACTS.items() if k in text), [])
    return json.dumps(
        {
            "triplets": [
                {"subject": s, "subject_type": st, "predicate": p, "object": o, "object_type": ot}
                for s, st, p, o, ot in found
            ]
        }
    )


def triplet_kb(
    client: Client,
    conn: psycopg.Connection[Any],
    provider: FakeProvider,
    name: str,
    docs: dict[str, str],
    answer: Any = None,
    **settings: Any,
) -> None:
    llm = llm_extra(provider, llm_concurrency=2)
    llm.pop("summary_token_threshold")
    kg = {"enabled": True, "graphs": ["document", "triplets"], **llm, **settings}
    provider.chat = answer or chat
    remote_kb(client, conn, provider, name, knowledge_graph=kg)
    for title, text in docs.items():
        client.add_text(name, title, text)
    run_worker(conn.info.dsn)


def rows(conn: psycopg.Connection[Any], query: str, *args: Any) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in conn.execute(query, args).fetchall()]


def test_triplets_with_provenance_and_entity_merges(
    client: Client, conn: psycopg.Connection[Any], provider: FakeProvider
) -> None:
    triplet_kb(client, conn, provider, "kg", DOCS)
    assert rows(conn, "SELECT DISTINCT status FROM kb.document") == [("ready",)]
    # One call per chunk (each document is one chunk), never more than 2 in flight.
    asked = [p for p in provider.prompts() if "Text:\n" in p]
    assert len(asked) == len(DOCS) and provider.max_in_flight <= 2
    assert not [p for p in provider.prompts() if p.startswith("A: ")]  # rules: no merge calls
    # "Anthropic", "anthropic" and "Anthropic, Inc." (organization, company): one entity.
    ent = rows(
        conn,
        "SELECT entity, type, key, names, documents, mentions, merged_from"
        " FROM kb.graph_entities('kg', 'anthropic')",
    )
    assert [(e, t, k, sorted(n), d, m, f) for e, t, k, n, d, m, f in ent] == [
        ("Anthropic", "organization", "anthropic|organization",
         ["Anthropic", "Anthropic, Inc.", "anthropic"], 3, 3, []),
    ]  # fmt: skip
    # The homonym stays apart, and the decision is on record.
    assert rows(conn, "SELECT type FROM kb.graph_entities('kg', 'Mercury') ORDER BY 1") == [
        ("chemical element",),
        ("planet",),
    ]
    assert rows(
        conn, "SELECT key, other_key, merged, decided_by, reason FROM kb.graph_entity_merge"
        " WHERE key LIKE 'mercury%%' OR other_key LIKE 'mercury%%'",
    ) == [
        ("mercury|chemical element", "mercury|planet", False, "rule",
         "same name, another type (chemical element / planet): kept apart"),
    ]  # fmt: skip
    # A plural merges by rule into the entity it is the plural of.
    caches = rows(
        conn, "SELECT entity, names, merged_from FROM kb.graph_entities('kg', 'prompt caches')"
    )
    assert [(e, sorted(n), f) for e, n, f in caches] == [
        ("Prompt Cache", ["Prompt Cache", "Prompt caches"], ["prompt caches|product"])
    ]
    # "Claude" and "Claude AI" are similar names: kept apart by rule, on record.
    assert rows(conn, "SELECT count(*) FROM kb.graph_entities('kg', 'Claude')") == [(1,)]
    assert rows(
        conn, "SELECT merged, decided_by FROM kb.graph_entity_merge WHERE key = 'claude ai|product'"
    ) == [(False, "rule")]
    # Every relation cites the chunk it was read from.
    rel = rows(
        conn,
        "SELECT r.subject, r.predicate, r.object, r.document, c.content"
        " FROM kb.graph_relations('kg', 'Anthropic') r JOIN kb.chunk c ON c.id = r.chunk_id",
    )
    assert [(s, p, o, d) for s, p, o, d, _ in rel] == [
        ("Anthropic", "has", "Prompt Cache", "anthropic.md"),
        ("anthropic", "builds", "Claude", "company.md"),
        ("Anthropic, Inc.", "based in", "San Francisco", "legal.md"),
    ]
    assert all(s.split(",")[0].lower() in c.lower() for s, _, _, _, c in rel)
    # The graph channel: a question about Anthropic reaches what it builds, in another
    # document, through the merged entity.
    hits = rows(
        conn,
        "SELECT d.title, e.graph_path FROM kb.explain_search('kg', 'what does Anthropic build?') e"
        " JOIN kb.chunk c ON c.id = e.chunk_id JOIN kb.document d ON d.id = c.document_id"
        " WHERE e.graph_rank IS NOT NULL ORDER BY e.graph_rank",
    )
    assert hits[0][1] in ("names Anthropic", "names anthropic")
    assert {t for t, _ in hits} == {"anthropic.md", "company.md", "legal.md"}
    # legal.md holds no "anthropic" word: the merged entity brought it in.
    assert ("legal.md", "anthropic -same entity-> Anthropic, Inc.") in hits or (
        "legal.md",
        "Anthropic -same entity-> Anthropic, Inc.",
    ) in hits
    # No name in the query, but the entity's vector is the query's nearest.
    conn.execute("SET kb.fake_key = 'test-key'")  # this session predates the key
    by_vector = rows(
        conn,
        "SELECT graph_path FROM kb.explain_search('kg', 'cache prompt') WHERE graph_rank = 1",
    )
    assert by_vector == [("names Prompt Cache",)]
    near = rows(conn, "SELECT vertex, via FROM kb.graph_neighbours('kg', 'anthropic', 1)")
    assert ("Claude", "builds") in near and ("San Francisco", "based in") in near


def test_llm_decides_candidate_duplicates_and_the_decision_is_recorded(
    client: Client, conn: psycopg.Connection[Any], provider: FakeProvider
) -> None:
    docs = {k: DOCS[k] for k in ("planets.md", "elements.md", "company.md", "assistant.md")}
    triplet_kb(client, conn, provider, "kgl", docs, entity_merge="llm")
    merges = rows(
        conn,
        "SELECT key, other_key, merged, decided_by, reason FROM kb.graph_entity_merge ORDER BY key",
    )
    assert merges == [
        ("claude ai|product", "claude|product", True, "llm", "same product"),
        ("mercury|chemical element", "mercury|planet", False, "llm", "different things"),
    ]
    merge_calls = [p for p in provider.prompts() if p.startswith("A: ")]
    assert len(merge_calls) == 2
    claude = rows(conn, "SELECT entity, names FROM kb.graph_entities('kgl', 'Claude AI')")
    assert [(e, sorted(n)) for e, n in claude] == [("Claude", ["Claude", "Claude AI"])]
    # A reindex asks nothing again: every answer is in the LLM call cache.
    before = len(provider.chat_calls)
    client.reindex_knowledge_base("kgl")
    run_worker(conn.info.dsn)
    assert len(provider.chat_calls) == before
    assert rows(conn, "SELECT count(*) FROM kb.graph_entities('kgl', 'Claude AI')") == [(1,)]


def test_triplets_need_a_model(
    client: Client, conn: psycopg.Connection[Any], provider: FakeProvider
) -> None:
    with pytest.raises(
        Exception, match=r"knowledge_graph\.model is required for the triplets graph"
    ):
        remote_kb(
            client, conn, provider, "nomodel",
            knowledge_graph={"enabled": True, "graphs": ["triplets"]},
        )  # fmt: skip
    assert rows(conn, "SELECT count(*) FROM kb.knowledge_base WHERE name = 'nomodel'") == [(0,)]


SPACE = {"planets.md": "Venus and Mercury orbit the Sun."}
FACTS["Venus and Mercury"] = [
    ("Mercury", "planet", "orbits", "Sun", "star"),
    ("Venus", "planet", "orbits", "Sun", "star"),
]
FACTS["Claude writes"] = [("Claude", "product", "writes", "code", "concept")]


def community_chat(body: dict[str, Any]) -> str:
    prompt = last_user(body)
    if prompt.startswith("Entities: "):
        names = prompt.split("\n", 1)[0].removeprefix("Entities: ")
        first = names.split(", ")[0]
        return json.dumps({"title": f"About {first}", "summary": f"Facts about {names}."})
    return chat(body)


def summaries(provider: FakeProvider) -> list[str]:
    return [p for p in provider.prompts() if p.startswith("Entities: ")]


def test_communities_are_summarised_searchable_and_kept_current(
    client: Client, conn: psycopg.Connection[Any], provider: FakeProvider
) -> None:
    docs = {**{k: DOCS[k] for k in ("anthropic.md", "company.md", "legal.md")}, **SPACE}
    conn.execute("SET kb.fake_key = 'test-key'")  # for the query embeddings below
    # The worker refreshes stale communities when its queue is empty.
    triplet_kb(client, conn, provider, "kgc", docs, community_chat, communities=True)
    got = rows(conn, "SELECT rank, title, entities, relations FROM kb.graph_communities('kgc')")
    # Label propagation splits Anthropic's facts at the prompt cache: three communities.
    assert got == [
        (1, "About Anthropic", ["Anthropic", "Claude", "San Francisco"], 2),
        (2, "About cost", ["cost", "KV matrix", "Prompt Cache"], 2),
        (3, "About Mercury", ["Mercury", "Sun", "Venus"], 2),
    ]
    assert len(summaries(provider)) == 3
    broad = rows(
        conn,
        "SELECT title, chunk_ids FROM kb.graph_communities('kgc', 'which planets orbit the sun',"
        " top_k => 1)",
    )
    assert broad[0][0] == "About Mercury"
    cited = rows(conn, "SELECT content FROM kb.chunk WHERE id = ANY (%s)", broad[0][1])
    assert cited == [(SPACE["planets.md"],)]
    # A new fact joins Anthropic's community: only that one is summarised again.
    client.add_text("kgc", "claude.md", "Claude writes code.")
    run_worker(conn.info.dsn)
    assert len(summaries(provider)) == 4
    got = rows(conn, "SELECT title, entities, relations FROM kb.graph_communities('kgc')")
    assert got[0] == ("About Anthropic", ["Anthropic", "Claude", "code", "San Francisco"], 3)
    assert rows(conn, "SELECT stale, error FROM kb.graph_community_state") == [(False, None)]
    # A document deleted: its community goes.
    client.delete_document("kgc", "planets.md")
    run_worker(conn.info.dsn)
    assert [t for (t,) in rows(conn, "SELECT title FROM kb.graph_communities('kgc')")] == [
        "About Anthropic",
        "About cost",
    ]
    assert len(summaries(provider)) == 4
    assert rows(conn, "SELECT * FROM kb.refresh_communities('kgc')") == [(2, 0, 2, 0)]
    # Dropping the KB takes its graph and communities with it.
    client.drop_knowledge_base("kgc")
    assert rows(conn, "SELECT count(*) FROM kb.graph_community") == [(0,)]
    assert rows(conn, "SELECT count(*) FROM kb.graph_community_state") == [(0,)]
