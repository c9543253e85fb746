"""Retrieval: BM25 exactness, vector/HNSW, hybrid RRF, options, rerank, explain."""

from __future__ import annotations

import json
import math
import re
from typing import Any

import psycopg
import pytest

from kbpg.client import Client
from kbpg.errors import ConfigError, NotFoundError
from tests.fakeprovider import FakeProvider
from tests.helpers import remote_kb, run_worker

CORPUS = {
    "cats": "Cats are small domesticated felines. A cat sleeps most of the day and hunts mice.",
    "dogs": "Dogs are loyal companions. A dog needs daily walks; dogs bark at strangers.",
    "tea": "Green tea is brewed at 80 degrees. Black tea takes boiling water and four minutes.",
    "coffee": "Espresso is coffee brewed under pressure. Coffee beans are roasted seeds.",
    "mice": "Mice are small rodents. Field mice eat seeds and grain; cats hunt mice at night.",
    "bread": "Bread dough rises with yeast. Sourdough bread uses a starter instead of yeast.",
}


def build(
    client: Client,
    conn: psycopg.Connection,
    provider: FakeProvider,
    name: str = "kb1",
    corpus: dict[str, str] | None = None,
    **extra: Any,
) -> None:
    remote_kb(client, conn, provider, name, **extra)
    for title, text in (corpus or CORPUS).items():
        client.add_text(
            name,
            title,
            text,
            {"category": "animals" if title in ("cats", "dogs", "mice") else "food"},
        )
    run_worker(conn.info.dsn)


def python_bm25(
    conn: psycopg.Connection, kb: str, query: str, k1: float = 1.2, b: float = 0.75
) -> dict[int, float]:
    """BM25 computed here, independently, from the chunks' tsvectors."""
    rows = conn.execute(
        "SELECT c.id, c.tsv::text FROM kb.chunk c JOIN kb.knowledge_base k "
        "ON k.active_index_id = c.index_id WHERE k.name = %s",
        (kb,),
    ).fetchall()
    docs: dict[int, dict[str, int]] = {}
    for cid, tsv in rows:
        tf: dict[str, int] = {}
        for m in re.finditer(r"'((?:[^']|'')*)'(?::([\d,A-D]+))?", tsv):
            lexeme = m.group(1).replace("''", "'")
            tf[lexeme] = len(m.group(2).split(",")) if m.group(2) else 1
        docs[cid] = tf
    n = len(docs)
    avgdl = sum(sum(t.values()) for t in docs.values()) / n
    qlex = [
        r[0]
        for r in conn.execute(
            "SELECT DISTINCT lexeme FROM unnest(to_tsvector('english', %s))", (query,)
        ).fetchall()
    ]
    scores: dict[int, float] = {}
    for cid, tf in docs.items():
        dl = sum(tf.values())
        s = 0.0
        hit = False
        for lex in qlex:
            if lex not in tf:
                continue
            hit = True
            df = sum(1 for t in docs.values() if lex in t)
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            s += idf * tf[lex] * (k1 + 1) / (tf[lex] + k1 * (1 - b + b * dl / avgdl))
        if hit:
            scores[cid] = s
    return scores


def test_bm25_matches_independent_computation(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    build(client, conn, provider)
    for query, k1, b in [
        ("cats hunt mice", 1.2, 0.75),
        ("tea coffee brewed", 0.9, 0.4),
        ("seeds", 2.0, 1.0),
        ("mice mice cats", 1.2, 0.0),
    ]:
        expected = python_bm25(conn, "kb1", query, k1, b)
        got = {
            r.chunk_id: r.score
            for r in client.search("kb1", query, method="full_text", top_k=100, k1=k1, b=b)
        }
        assert got.keys() == expected.keys()
        for cid, score in expected.items():
            assert got[cid] == pytest.approx(score, abs=1e-6)
        # The building blocks agree with the search too.
        for cid, score in expected.items():
            block = conn.execute(
                "SELECT kb.bm25_score(c.index_id, c.tsv, %s, %s, %s) FROM kb.chunk c WHERE id = %s",
                (query, k1, b, cid),
            ).fetchone()[0]
            assert block == pytest.approx(score, abs=1e-6)


def test_bm25_k1_left_unset_follows_the_method(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    """full_text alone scores with k1 1.5, hybrid's BM25 channel with 1.2; a k1 the KB or
    the call sets is used by both."""
    build(client, conn, provider)
    query = "cats hunt mice"
    assert client.knowledge_base("kb1")["retrieval_config"]["bm25_k1"] is None

    def scores(method: str, **options: Any) -> dict[int, float]:
        rows = client.search("kb1", query, method=method, top_k=100, **options)
        return {r.chunk_id: r.bm25_score for r in rows if r.bm25_score is not None}

    def assert_scored(got: dict[int, float], k1: float) -> None:
        expected = python_bm25(conn, "kb1", query, k1)
        assert got and set(got) <= set(expected)
        for cid, score in got.items():
            assert score == pytest.approx(expected[cid], abs=1e-6), (cid, k1)

    assert_scored(scores("full_text"), 1.5)
    assert_scored(scores("hybrid"), 1.2)
    assert_scored(scores("full_text", k1=1.2), 1.2)
    conn.execute(
        "SELECT kb.set_retrieval_config('kb1', %s::jsonb)",
        (json.dumps({"method": "full_text", "bm25_k1": 0.9}),),
    )
    assert_scored(scores("full_text"), 0.9)
    assert_scored(scores("hybrid"), 0.9)


def test_bm25_statistics_stay_exact(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    build(client, conn, provider)
    client.create_knowledge_base(
        "other", {**json.loads(json.dumps(client.knowledge_base("kb1")["indexing_config"]))}
    )
    before = python_bm25(conn, "kb1", "cats mice")
    client.add_text("other", "noise", "cats cats cats mice mice everywhere")
    client.add_text("kb1", "dogs", "Dogs chase cats. Mice fear dogs.")  # replace
    client.delete_document("kb1", "tea")
    client.add_text("kb1", "birds", "Birds eat seeds and sometimes mice.")
    run_worker(conn.info.dsn)
    expected = python_bm25(conn, "kb1", "cats mice")
    assert expected != before
    got = {
        r.chunk_id: r.score
        for r in client.search("kb1", "cats mice", method="full_text", top_k=100, k1=1.2)
    }
    assert got.keys() == expected.keys()
    for cid, score in expected.items():
        assert got[cid] == pytest.approx(score, abs=1e-6)
    # Statistics equal a recount from scratch.
    stats = conn.execute(
        "SELECT i.n_chunks, i.total_len, (SELECT count(*) FROM kb.chunk c WHERE c.index_id = i.id),"
        " (SELECT sum(doc_len) FROM kb.chunk c WHERE c.index_id = i.id) FROM kb.kb_index i"
    ).fetchall()
    for n, total, recount, relen in stats:
        assert (n, total) == (recount, relen or 0)
    bad_df = conn.execute(
        "SELECT count(*) FROM kb.term_stat t WHERE df <> (SELECT count(*) FROM kb.chunk c, "
        "unnest(c.tsv) u WHERE c.index_id = t.index_id AND u.lexeme = t.lexeme)"
    ).fetchone()[0]
    assert bad_df == 0


def test_methods_scores_and_columns(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    build(client, conn, provider)
    vec = client.search("kb1", "cats hunt mice", method="vector", top_k=3)
    assert len(vec) == 3
    assert vec[0].score == pytest.approx(vec[0].vector_score)
    assert [r.rank for r in vec] == [1, 2, 3]
    assert vec[0].score >= vec[1].score >= vec[2].score
    assert -1.0 <= vec[-1].score <= 1.0
    hyb = client.search("kb1", "cats hunt mice", top_k=4)
    assert hyb[0].score == pytest.approx(1.0)
    assert all(0 < r.score <= 1.0 for r in hyb)
    assert {r.title for r in hyb[:2]} == {"cats", "mice"}
    row = hyb[0]
    assert row.metadata["category"] == "animals"
    assert row.content and row.document_id and row.char_end > row.char_start


def test_hybrid_is_weighted_rrf(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    build(client, conn, provider)
    rows = client.explain_search(
        "kb1",
        "small cats and seeds",
        top_k=6,
        vector_weight=0.3,
        rrf_k=10,
        fusion="rrf",
        plain_query_shift=0,
    )
    assert rows
    raw = {}
    for r in rows:
        s = 0.0
        if r["vector_rank"]:
            s += 0.3 / (10 + r["vector_rank"])
        if r["bm25_rank"]:
            s += 0.7 / (10 + r["bm25_rank"])
        raw[r["chunk_id"]] = s
    top = max(raw.values())
    for r in rows:
        assert r["fused_score"] == pytest.approx(raw[r["chunk_id"]] / top)
        assert r["score"] == pytest.approx(r["fused_score"])
        assert r["vector_score"] is not None  # every candidate gets its similarity
    assert [r["final_rank"] for r in rows] == list(range(1, len(rows) + 1))


def test_bm25_only_hits_get_their_similarity(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    """With a shallow vector list, hits only BM25 found are returned with their exact
    cosine similarity (looked up for the rows returned only, unless a threshold needs it
    for every candidate: then the same rows and scores)."""
    build(client, conn, provider)
    q = "cats hunt mice seeds"
    rows = client.explain_search("kb1", q, top_k=4, fusion_depth=1, plain_query_shift=0)
    assert any(r["vector_rank"] is None for r in rows)  # BM25-only hits are returned
    # Every chunk's similarity, from the vector channel itself (the corpus is small).
    exact = {r.chunk_id: r.vector_score for r in client.search("kb1", q, method="vector", top_k=50)}
    assert len(exact) == len(CORPUS)
    for r in rows:
        assert r["vector_score"] == pytest.approx(exact[r["chunk_id"]], abs=1e-6)
    everyone = client.explain_search(
        "kb1", q, top_k=4, fusion_depth=1, similarity_threshold=-1, plain_query_shift=0
    )
    key = ("chunk_id", "final_rank", "score", "vector_rank", "vector_score", "bm25_rank")
    assert [[r[k] for k in key] for r in everyone] == [[r[k] for k in key] for r in rows]


def test_hybrid_zscore_fuses_standardised_scores(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    """The default fusion, recomputed from the two channels' own lists: each score as
    standard deviations above its list's mean, weighted and summed, a candidate missing
    from a list counting as one below that list's lowest; shown as exp(z - best z). The
    query is in plain words (each of its terms is in two of the six chunks): the vector
    weight is vector_weight + plain_query_shift."""
    build(client, conn, provider)
    query = "small cats and seeds"
    rows = client.explain_search(
        "kb1", query, top_k=6, vector_weight=0.1, plain_query_shift=0.2, fusion_depth=8
    )
    assert rows[0]["usage"]["fusion"] == {"vector_weight": pytest.approx(0.3)}
    ix = conn.execute(
        "SELECT active_index_id FROM kb.knowledge_base WHERE name = 'kb1'"
    ).fetchone()[0]
    emb = client.conn.execute("SELECT kb.embed_query('kb1', %s)", (query,)).fetchone()[0]
    lists = [
        conn.execute(
            "SELECT chunk_id, similarity FROM kb.vector_search(%s, %s::real[], 8)", (ix, emb)
        ).fetchall(),
        conn.execute(
            "SELECT chunk_id, score FROM kb.bm25_search(%s, %s, 8)", (ix, query)
        ).fetchall(),
    ]
    zs = []
    for lst in lists:
        values = [x for _, x in lst]
        mean = sum(values) / len(values)
        sd = math.sqrt(sum((x - mean) ** 2 for x in values) / len(values))
        zs.append({c: (x - mean) / sd if sd else 0.0 for c, x in lst})
    assert zs[0] and zs[1] and set(zs[0]) != set(zs[1])  # some candidates miss a list
    fused = {
        c: 0.3 * zs[0].get(c, min(zs[0].values()) - 1) + 0.7 * zs[1].get(c, min(zs[1].values()) - 1)
        for c in set(zs[0]) | set(zs[1])
    }
    order = sorted(fused, key=lambda c: (-fused[c], c))[:6]
    assert [r["chunk_id"] for r in rows] == order
    best = fused[order[0]]
    for r in rows:
        assert r["fused_score"] == pytest.approx(math.exp(fused[r["chunk_id"]] - best))
        assert r["score"] == pytest.approx(r["fused_score"])
    assert rows[0]["score"] == pytest.approx(1.0)
    # Pinned to rrf, the same KB ranks by ranks alone.
    rrf = client.explain_search("kb1", query, top_k=6, vector_weight=0.3, fusion="rrf")
    assert [r["fused_score"] for r in rrf] != [r["fused_score"] for r in rows]


def test_plain_queries_lean_on_vectors(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    """plain_query_shift moves weight to the vectors for a query in plain words only: not
    for one naming an identifier, an acronym or a term found in few chunks (here in one
    chunk of six) unless that term is a common English word in an English KB, not when it
    is 0, not past 1, and not for the other methods."""

    def weight(query: str, **options: Any) -> float:
        rows = client.search("kb1", query, **options)
        return rows[0].usage["fusion"]["vector_weight"]

    build(client, conn, provider)
    assert weight("small cats and seeds") == pytest.approx(0.7)  # defaults: 0.5 + 0.2
    for cue in (
        "small cats and seed_bank",  # snake_case
        "small cats and seeds.count",  # a dotted name
        "small cats and seeds()",  # a call
        "small cats and seedBank",  # camelCase
        "small cats and --seeds",  # a flag
        "small cats and DNA seeds",  # an acronym
        "small cats and espresso",  # a term in one chunk of six
    ):
        assert weight(cue) == pytest.approx(0.5), cue
    # "water" and "pressure" are in one chunk each too, and everyday words: no cue.
    assert weight("small cats and water") == pytest.approx(0.7)
    assert weight("small cats under pressure") == pytest.approx(0.7)
    assert weight("espresso under pressure") == pytest.approx(0.5)  # espresso still is
    # The list is English: a KB with another text search configuration counts every rare
    # term as before.
    build(client, conn, provider, "kb_simple", text_search_config="simple")
    rows = client.search("kb_simple", "small cats and water")
    assert rows[0].usage["fusion"]["vector_weight"] == pytest.approx(0.5)
    assert weight("small cats and seeds", plain_query_shift=0) == pytest.approx(0.5)
    assert weight("small cats", vector_weight=0.9, plain_query_shift=0.5) == pytest.approx(1.0)
    assert weight("small cats", vector_weight=0.0) == pytest.approx(0.0)  # BM25 alone stays
    assert "fusion" not in (client.search("kb1", "small cats", method="vector")[0].usage or {})


def test_filters_apply_to_every_method(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    build(client, conn, provider)
    for method in ("vector", "full_text", "hybrid"):
        rows = client.search(
            "kb1", "small seeds brewed", method=method, top_k=10, filter={"category": "food"}
        )
        assert rows, method
        assert {r.metadata["category"] for r in rows} == {"food"}
    with pytest.raises(ConfigError, match="filter must be a JSON object"):
        client.search("kb1", "x", filter=[1, 2])


def test_option_errors_name_the_option(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    build(client, conn, provider)
    with pytest.raises(ConfigError, match="method"):
        client.search("kb1", "cats", method="telepathy")
    with pytest.raises(ConfigError, match="top_k"):
        client.search("kb1", "cats", top_k=-1)
    with pytest.raises(ConfigError, match="top_k"):
        client.search("kb1", "cats", top_k=10**6)
    with pytest.raises(ConfigError, match="query must not be empty"):
        client.search("kb1", "  ")
    with pytest.raises(ConfigError, match="bogus"):
        client.search("kb1", "cats", options={"bogus": 1})
    with pytest.raises(TypeError, match="colour"):  # the typed method has no such option
        client.search("kb1", "cats", colour="red")  # type: ignore[call-arg]
    with pytest.raises(NotFoundError):
        client.search("missing", "cats")
    with pytest.raises(psycopg.errors.ProgramLimitExceeded):
        conn.execute("SELECT * FROM kb.search('kb1', repeat('cats ', 20000))")
    # A long but legal query works.
    assert client.search("kb1", "cats " * 2000, method="full_text")


def test_hostile_query_text_is_only_text(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    build(client, conn, provider)
    for q in ["'); DROP TABLE kb.chunk; --", "cats & | ! mice:*", "\\x00 ' \" ;", "猫 🐈"]:
        client.search("kb1", q)
    assert conn.execute("SELECT count(*) FROM kb.chunk").fetchone()[0] == len(CORPUS)


def test_retrieval_config_defaults_and_threshold(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    build(client, conn, provider, retrieval={"top_k": 2, "method": "vector"})
    assert len(client.search("kb1", "cats")) == 2
    all_rows = client.search("kb1", "cats hunt mice", top_k=6)
    cut = sorted(r.vector_score for r in all_rows)[len(all_rows) // 2]
    kept = client.search("kb1", "cats hunt mice", top_k=6, similarity_threshold=cut)
    assert kept and all(r.vector_score >= cut for r in kept)
    assert len(kept) < len(all_rows)


def test_provider_down_falls_back_to_bm25(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    build(client, conn, provider)
    provider.down = True
    rows = client.search("kb1", "cats hunt mice", top_k=3)
    assert rows and "full_text only" in (rows[0].note or "")
    assert rows[0].bm25_score is not None
    with pytest.raises(Exception, match="could not embed the query"):
        client.search("kb1", "cats", method="vector")


def test_rerank_remote(client: Client, conn: psycopg.Connection, provider: FakeProvider) -> None:
    build(
        client,
        conn,
        provider,
        retrieval={
            "rerank_model": "cohere/rerank-english-v3.0",
            "rerank_api_base": provider.url,
            "rerank_api_key_name": "FAKE_KEY",
        },
    )
    rows = client.explain_search("kb1", "mice eat seeds", top_k=3, rerank=True, candidate_count=6)
    assert provider.rerank_calls == 1
    assert rows[0]["usage"]["rerank"] == {"model": "cohere/rerank-english-v3.0", "documents": 6}
    assert [r["rerank_rank"] for r in rows] == [1, 2, 3]
    scores = [r["rerank_score"] for r in rows]
    assert scores == sorted(scores, reverse=True)
    assert rows[0]["title"] == "mice"
    thresholded = client.search(
        "kb1", "mice eat seeds", top_k=6, rerank=True, rerank_threshold=scores[0] - 1e-9
    )
    assert len(thresholded) == 1


def test_rerank_by_a_chat_model_ranks_the_candidates_in_one_cached_call(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    """rerank_model "llm:...": one listwise call (real HTTP, litellm in the server), the
    passages in the order the model answers, its cost in usage, the answer cached."""
    build(
        client,
        conn,
        provider,
        retrieval={
            "rerank_model": "llm:openai/ranker",
            "rerank_api_base": provider.url,
            "rerank_api_key_name": "FAKE_KEY",
        },
    )
    asked: list[list[str]] = []

    def rank(body: dict[str, Any]) -> str:
        prompt = body["messages"][-1]["content"]
        passages = re.findall(r"^\[(\d+)\] (.*)$", prompt, re.M)
        asked.append([text for _, text in passages])
        # The model puts the passage about tea first, then the others reversed.
        tea = [int(n) for n, text in passages if re.search(r"\btea\b", text)]
        rest = [int(n) for n, _ in reversed(passages) if int(n) not in tea]
        return json.dumps({"ranking": tea + rest})

    provider.chat = rank
    rows = client.explain_search("kb1", "a hot drink", top_k=3, rerank=True, candidate_count=6)
    assert len(provider.chat_calls) == 1 and len(asked[0]) == 6
    assert rows[0]["title"] == "tea"
    assert [r["rerank_rank"] for r in rows] == [1, 2, 3]
    assert [r["rerank_score"] for r in rows] == [1.0, 5 / 6, 4 / 6]
    usage = rows[0]["usage"]["rerank"]
    assert usage["model"] == "llm:openai/ranker" and usage["documents"] == 6
    assert usage["llm"]["calls"] == 1 and usage["llm"]["prompt_tokens"] > 0
    # The same question over the same candidates: answered from the cache.
    again = client.explain_search("kb1", "a hot drink", top_k=3, rerank=True, candidate_count=6)
    assert len(provider.chat_calls) == 1
    assert again[0]["usage"]["rerank"]["llm"]["cache_hits"] == 1
    assert [r["chunk_id"] for r in again] == [r["chunk_id"] for r in rows]
    # An answer that never names the passages is sent back once, then fails clearly.
    provider.chat = lambda body: json.dumps({"ranking": [99]})
    with pytest.raises(Exception, match="rerank with llm:openai/ranker failed"):
        client.search("kb1", "cats", rerank=True, candidate_count=4)
    assert len(provider.chat_calls) == 3
    with pytest.raises(ConfigError, match='rerank_model "llm:" names no model'):
        client.search("kb1", "cats", rerank=True, rerank_model="llm:")


def test_rerank_model_llm_is_the_knowledge_bases_own_chat_model(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    """rerank_model "llm": the chat model the KB's indexing calls ranks the candidates,
    through that model's endpoint and key; a KB with no chat model says so."""
    from tests.integration.test_graph_index import api_kb

    api_kb(client, conn, provider, enrichment="rules")  # GraphIndex, extra.model test-llm
    provider.chat_calls.clear()

    def rank(body: dict[str, Any]) -> str:
        passages = re.findall(r"^\[(\d+)\] (.*)$", body["messages"][-1]["content"], re.M)
        limits = [int(n) for n, text in passages if "100 requests" in text]
        return json.dumps({"ranking": limits + [int(n) for n, _ in passages]})

    provider.chat = rank
    options: dict[str, Any] = {
        "method": "full_text",
        "rerank": True,
        "rerank_model": "llm",
        "reference_expansion": False,
    }
    plain = client.search("g", "tokens requests", method="full_text", reference_expansion=False)
    assert "100 requests" not in plain[0].content and provider.chat_calls == []
    hits = client.search("g", "tokens requests", top_k=2, **options)
    assert len(provider.chat_calls) == 1 and provider.chat_calls[0]["model"] == "test-llm"
    assert "100 requests" in hits[0].content and hits[0].usage is not None
    usage = hits[0].usage["rerank"]
    assert usage["model"] == "llm:openai/test-llm" and usage["llm"]["calls"] == 1
    # Stored in the KB's config, on the full_text path that otherwise runs no PL/Python.
    client.conn.execute("SELECT kb.set_retrieval_config('g', %s)", (json.dumps(options),))
    assert "100 requests" in client.search("g", "tokens requests")[0].content
    # A KB whose indexing calls no chat model.
    build(client, conn, provider)
    with pytest.raises(Exception, match="own chat model, and this knowledge base has none"):
        client.search("kb1", "cats", rerank=True, rerank_model="llm")
    assert client.search("kb1", "cats", rerank=False, rerank_model="llm")  # not asked to rerank


def test_halfvec_for_large_models(client: Client, conn: psycopg.Connection) -> None:
    with FakeProvider(dim=3072) as big:
        remote_kb(client, conn, big, "big")
        client.add_text("big", "a", "cats hunt mice")
        client.add_text("big", "b", "tea is brewed")
        run_worker(conn.info.dsn)
        indexdef = conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE indexname LIKE 'embedding_hnsw_%'"
        ).fetchone()[0]
        assert "halfvec(3072)" in indexdef
        assert client.search("big", "cats", method="vector", top_k=1)[0].title == "a"


@pytest.mark.parametrize("cache_mb", [256, 0])
def test_full_text_with_the_kbs_own_config_runs_no_plpython(
    client: Client, conn: psycopg.Connection, provider: FakeProvider, cache_mb: int
) -> None:
    """No config validation, no model: with the KB's own full_text config the only
    Python is BM25 scored in memory (kbpg_db/bm25.py, numpy), and with
    kb.bm25_cache_mb = 0 there is none at all."""
    build(client, conn, provider)
    client.conn.execute("SELECT kb.set_retrieval_config('kb1', '{\"method\": \"full_text\"}')")
    with psycopg.connect(conn.info.dsn) as fresh:  # a new backend: nothing loaded yet
        fresh.execute("SET LOCAL track_functions = 'pl'")
        fresh.execute(f"SET LOCAL kb.bm25_cache_mb = {cache_mb}")
        rows = fresh.execute("SELECT title FROM kb.search('kb1', 'seeds brewed')").fetchall()
        assert rows
        called = dict(
            fresh.execute(
                "SELECT s.funcname, l.lanname FROM pg_stat_xact_user_functions s "
                "JOIN pg_proc p ON p.oid = s.funcid JOIN pg_language l ON l.oid = p.prolang "
                "WHERE s.schemaname = 'kb'"
            ).fetchall()
        )
    assert "_search_core" in called
    python = {name for name, lang in called.items() if lang == "plpython3u"}
    assert python == ({"_py_bm25_search", "python_init"} if cache_mb else set()), called


def test_each_search_returns_what_it_cost(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    build(client, conn, provider)
    [hit, *_] = client.search("kb1", "small seeds brewed", method="hybrid")
    assert hit.usage is not None
    assert hit.usage["embedding"]["model"] == "openai/fake-embed"
    assert hit.usage["embedding"]["tokens"] == 3  # the fake server counts words
    assert client.search("kb1", "seeds", method="full_text")[0].usage == {}
    explained = client.explain_search("kb1", "small seeds brewed")
    assert explained[0]["usage"]["embedding"]["tokens"] == 3
