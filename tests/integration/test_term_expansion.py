"""full_text's term expansion: the vocabulary's vectors (kb.refresh_term_vectors, run by
the worker) and BM25 with the added words at their weights, in both scorers."""

from __future__ import annotations

import json
import math
import re
from typing import Any

import psycopg
import pytest

from kbpg.client import Client
from tests.fakeprovider import FakeProvider
from tests.helpers import remote_kb, run_worker

CORPUS = {
    "paths": "The basename function returns the last portion of a path. Directories hold files.",
    "dirs": "Create directories recursively; one directory may hold other directories and files.",
    "files": "Reading files: a file is opened, read and closed. Files live in directories.",
    "net": "Sockets connect hosts over the network. A socket listens on a port of the host.",
    "ports": "A port number picks the socket on a host; the network delivers packets to it.",
}


def build(client: Client, conn: psycopg.Connection, provider: FakeProvider, name: str,
          retrieval: dict[str, Any]) -> None:  # fmt: skip
    remote_kb(client, conn, provider, name, retrieval)
    for title, text in CORPUS.items():
        client.add_text(name, title, text)
    run_worker(conn.info.dsn)


def vocabulary(conn: psycopg.Connection, kb: str) -> dict[str, str | None]:
    return dict(
        conn.execute(
            "SELECT v.lexeme, v.word FROM kb.term_vector v JOIN kb.knowledge_base k "
            "ON k.id = v.kb_id AND k.active_index_id = v.index_id WHERE k.name = %s",
            (kb,),
        ).fetchall()
    )


def weighted_bm25(
    conn: psycopg.Connection, kb: str, weights: dict[str, float], k1: float, b: float = 0.75
) -> dict[int, float]:
    """BM25 computed here from the chunks' tsvectors, each lexeme's idf times its weight."""
    docs: dict[int, dict[str, int]] = {}
    for cid, tsv in conn.execute(
        "SELECT c.id, c.tsv::text FROM kb.chunk c JOIN kb.knowledge_base k "
        "ON k.active_index_id = c.index_id WHERE k.name = %s",
        (kb,),
    ).fetchall():
        docs[cid] = {
            m[1]: len(m[2].split(",")) if m[2] else 1
            for m in re.finditer(r"'((?:[^']|'')*)'(?::([\d,A-D]+))?", tsv)
        }
    n = len(docs)
    avgdl = sum(sum(t.values()) for t in docs.values()) / n
    out: dict[int, float] = {}
    for cid, tf in docs.items():
        dl = sum(tf.values())
        held = [lx for lx in weights if lx in tf]
        if held:
            out[cid] = 0.0
            for lx in held:
                df = sum(1 for t in docs.values() if lx in t)
                idf = math.log(1 + (n - df + 0.5) / (df + 0.5)) * weights[lx]
                out[cid] += idf * tf[lx] * (k1 + 1) / (tf[lx] + k1 * (1 - b + b * dl / avgdl))
    return out


def test_the_worker_embeds_the_words_of_kbs_that_expand(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    build(client, conn, provider, "plain", {"method": "full_text"})
    build(client, conn, provider, "expands", {"method": "full_text", "term_expansion": 4})
    assert vocabulary(conn, "plain") == {}  # unset with a provider's model: off, nothing built
    vocab = vocabulary(conn, "expands")
    in_two = {
        r[0]
        for r in conn.execute(
            "SELECT t.lexeme FROM kb.term_stat t JOIN kb.knowledge_base k "
            "ON k.id = t.kb_id AND k.active_index_id = t.index_id "
            "WHERE k.name = 'expands' AND t.df >= 2"
        ).fetchall()
    }
    assert set(vocab) == in_two  # every lexeme in two chunks or more, no other
    assert vocab["directori"] == "directories"  # the commonest spelling, not the stem
    for lexeme, word in vocab.items():
        if word is not None:
            (stems,) = conn.execute("SELECT to_tsvector('english', %s)::text", (word,)).fetchone()
            assert stems.startswith(f"'{lexeme}'"), (lexeme, word)
    # A document added later: the worker embeds the words it brings into two chunks.
    client.add_text("expands", "more", "Hosts exchange packets; packets carry a socket's data.")
    run_worker(conn.info.dsn)
    assert vocabulary(conn, "expands")["packet"] == "packets"
    state = conn.execute(
        "SELECT s.seen, s.error FROM kb.term_vector_state s JOIN kb.knowledge_base k "
        "ON k.id = s.kb_id AND k.active_index_id = s.index_id WHERE k.name = 'expands'"
    ).fetchone()
    assert state[1] is None and state[0].startswith("6/")


def expected_terms(conn: psycopg.Connection, kb: str, query: str, embedding: list[float],
                   count: int, weight: float) -> dict[str, float]:  # fmt: skip
    """The expansion worked out here: the ``count`` words nearest the query's embedding
    (exact cosine) that are not its own lexemes, the nearest at ``weight`` and the others
    by similarity over the nearest's; a word whose idf is above the mean idf of the
    query's own indexed words scaled down by that mean over its idf."""
    n, lexemes = conn.execute(
        "SELECT i.n_chunks, kb._config_lexemes(i.indexing_config, %s) FROM kb.knowledge_base k "
        "JOIN kb.kb_index i ON i.id = k.active_index_id WHERE k.name = %s",
        (query, kb),
    ).fetchone()
    df = dict(
        conn.execute(
            "SELECT t.lexeme, t.df FROM kb.term_stat t JOIN kb.knowledge_base k "
            "ON k.id = t.kb_id AND k.active_index_id = t.index_id WHERE k.name = %s AND t.df > 0",
            (kb,),
        ).fetchall()
    )

    def idf(lx: str) -> float:
        return math.log(1 + (n - df[lx] + 0.5) / (df[lx] + 0.5))

    near = conn.execute(
        "SELECT v.lexeme, 1 - (v.embedding <=> %s::real[]::vector) AS sim "
        "FROM kb.term_vector v JOIN kb.knowledge_base k "
        "ON k.id = v.kb_id AND k.active_index_id = v.index_id "
        "WHERE k.name = %s AND v.embedding IS NOT NULL AND v.lexeme <> ALL (%s) "
        "ORDER BY sim DESC, v.lexeme LIMIT %s",
        (embedding, kb, lexemes, count),
    ).fetchall()
    own = [idf(lx) for lx in lexemes if lx in df]
    cap = sum(own) / len(own) if own else math.inf
    top = near[0][1]
    weights = {lx: weight * sim / top * min(1.0, cap / idf(lx)) for lx, sim in near}
    return {lx: w for lx, w in weights.items() if w > 0}


@pytest.mark.parametrize("cache_mb", [256, 0])
def test_expanded_full_text_is_bm25_with_the_added_words_weighted(
    client: Client, conn: psycopg.Connection, provider: FakeProvider, cache_mb: int
) -> None:
    """The words nearest the query's embedding (not the query's own), the nearest at
    term_expansion_weight and the others by their similarity over the nearest's, a word
    rarer than the query's words on average weighing less; scored as BM25 scores the
    query's words: in memory and in SQL alike."""
    build(client, conn, provider, "kbx", {"method": "full_text", "term_expansion": 4})
    client.conn.execute(f"SET kb.bm25_cache_mb = {cache_mb}")
    capped = 0
    # "files directories": words the KB holds often, so a word in two chunks is rarer
    # than they are on average and weighs less.
    for query in ("where do files live", "files and directories"):
        rows = client.conn.execute(
            "SELECT chunk_id, score, usage FROM kb.search('kbx', %s, top_k => 100)", (query,)
        ).fetchall()
        words = rows[0][2]["term_expansion"]["words"]
        assert 1 <= len(words) <= 4
        (lexemes,) = conn.execute(
            "SELECT kb._config_lexemes(i.indexing_config, %s) FROM kb.knowledge_base k "
            "JOIN kb.kb_index i ON i.id = k.active_index_id WHERE k.name = 'kbx'",
            (query,),
        ).fetchone()
        own = set(lexemes)
        (terms,) = client.conn.execute(
            "SELECT e.terms FROM kb.knowledge_base k JOIN kb.kb_index i ON i.id = k.active_index_id, "
            "kb._expansion_terms(k.id, i.id, %s, kb.embed_query('kbx', %s), 4, 0.3, "
            "i.indexing_config) e WHERE k.name = 'kbx'",
            (query, query),
        ).fetchone()  # fmt: skip
        assert not own & terms.keys() and len(terms) == len(words)
        (embedding,) = client.conn.execute("SELECT kb.embed_query('kbx', %s)", (query,)).fetchone()
        want = expected_terms(conn, "kbx", query, embedding, 4, 0.3)
        assert terms == pytest.approx(want)
        assert all(0 < w <= 0.3 for w in terms.values())
        capped += sum(w < 0.3 - 1e-9 and terms[lx] == pytest.approx(w) for lx, w in want.items())
        expected = weighted_bm25(conn, "kbx", {**dict.fromkeys(own, 1.0), **terms}, k1=1.5)
        got = {cid: score for cid, score, _ in rows}
        assert got.keys() == expected.keys()
        for cid, score in expected.items():
            assert got[cid] == pytest.approx(score, abs=1e-6)
    assert capped  # the rule is exercised, not only its no-op side
    # Off for one call: the query's own words only, and no usage entry.
    plain = client.conn.execute(
        "SELECT chunk_id, score, usage FROM kb.search('kbx', %s, top_k => 100, "
        "term_expansion => 0)",
        (query,),
    ).fetchall()
    assert {c: s for c, s, _ in plain} == pytest.approx(
        weighted_bm25(conn, "kbx", dict.fromkeys(own, 1.0), k1=1.5)
    )
    assert all("term_expansion" not in u for _, _, u in plain)


def test_by_default_a_local_model_expands_and_a_providers_does_not(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    """term_expansion unset: 16 words where the KB embeds with a local model (the worker
    builds its vocabulary, full_text adds words), none with a provider's (no vocabulary,
    and a full_text query calls no provider)."""
    client.create_knowledge_base("local", {}, {"method": "full_text"})
    for title, text in CORPUS.items():
        client.add_text("local", title, text)
    build(client, conn, provider, "remote", {"method": "full_text"})  # the worker runs for both
    (stored,) = conn.execute(
        "SELECT retrieval_config->'term_expansion' FROM kb.knowledge_base WHERE name = 'local'"
    ).fetchone()
    assert stored is None  # unset: the rule, not a number, is what the KB keeps
    assert vocabulary(conn, "local") and vocabulary(conn, "remote") == {}
    query = "where do files live"
    (usage,) = client.conn.execute("SELECT usage FROM kb.search('local', %s)", (query,)).fetchone()
    assert 1 <= len(usage["term_expansion"]["words"]) <= 16 and "embedding" in usage
    calls = provider.embedding_calls
    rows = client.conn.execute(
        "SELECT note, usage FROM kb.search('remote', %s)", (query,)
    ).fetchall()
    assert rows and provider.embedding_calls == calls
    assert all(note is None and "term_expansion" not in u for note, u in rows)
    # 0 turns it off for a local model: plain BM25, the query not embedded.
    (usage,) = client.conn.execute(
        "SELECT usage FROM kb.search('local', %s, term_expansion => 0)", (query,)
    ).fetchone()
    assert "term_expansion" not in (usage or {}) and "embedding" not in (usage or {})


def test_a_local_kb_without_vectors_does_not_embed_the_query(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    """Expanding by default (a local model) where the words have no vectors yet: the query
    is not embedded for nothing, with options or without, and the note says why."""
    client.create_knowledge_base("bare", {}, {"method": "full_text"})
    for title, text in CORPUS.items():
        client.add_text("bare", title, text)
    run_worker(conn.info.dsn)
    conn.execute(
        "DELETE FROM kb.term_vector v USING kb.knowledge_base k "
        "WHERE k.name = 'bare' AND v.kb_id = k.id"
    )
    query = "where do files live"
    plain = [
        c for (c,) in client.conn.execute(
            "SELECT chunk_id FROM kb.search('bare', %s, term_expansion => 0)", (query,)
        )
    ]  # fmt: skip
    for options in ("{}", '{"method": "full_text"}', '{"top_k": 10}'):
        rows = client.conn.execute(
            "SELECT chunk_id, note, usage FROM kb.search('bare', %s, options => %s::jsonb)",
            (query, options),
        ).fetchall()
        assert [c for c, _, _ in rows] == plain, options
        assert "no vectors yet" in rows[0][1], options
        assert not {"embedding", "term_expansion"} & set(rows[0][2] or {}), options


def test_a_kb_without_vectors_searches_its_own_words_and_says_so(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    build(client, conn, provider, "later", {"method": "full_text"})
    query = "where do files live"
    calls = provider.embedding_calls
    rows = client.conn.execute(
        "SELECT chunk_id, note, usage FROM kb.search('later', %s, term_expansion => 4)", (query,)
    ).fetchall()
    assert rows and "no vectors yet" in rows[0][1]
    # Asked for by the call, an expansion with nothing to read embeds nothing either: no
    # call to the provider (an API call per query, for nothing).
    assert not {"embedding", "term_expansion"} & set(rows[0][2] or {})
    assert provider.embedding_calls == calls
    for bad in ("-1", '"many"', "2.5"):
        with pytest.raises(psycopg.Error, match="term_expansion"):
            client.conn.execute(
                "SELECT * FROM kb.search('later', %s, "
                "options => jsonb_build_object('term_expansion', %s::jsonb))",
                (query, bad),
            )
    assert [c for c, _, _ in rows] == [
        c for (c,) in client.conn.execute(
            "SELECT chunk_id FROM kb.search('later', %s, method => 'full_text')", (query,)
        )
    ]  # fmt: skip
    # The same with term_expansion in the KB's own config (its path embeds nothing).
    client.conn.execute(
        'SELECT kb.set_retrieval_config(\'later\', \'{"method": "full_text", '
        '"term_expansion": 4}\')'
    )
    (note,) = client.conn.execute("SELECT note FROM kb.search('later', %s)", (query,)).fetchone()
    assert "no vectors yet" in note
    # Named, a KB's words are embedded whatever its term_expansion; once is enough.
    refresh = "SELECT added, error FROM kb.refresh_term_vectors('later')"
    (added, error), = client.conn.execute(refresh).fetchall()  # fmt: skip
    assert error is None and added > 0
    assert client.conn.execute(refresh).fetchall() == []
    with pytest.raises(psycopg.Error, match="no-such-kb"):
        client.conn.execute("SELECT * FROM kb.refresh_term_vectors('no-such-kb')")
    rows = client.conn.execute(
        "SELECT note, usage FROM kb.search('later', %s, term_expansion => 4)", (query,)
    ).fetchall()
    assert rows[0][0] is None and rows[0][1]["term_expansion"]["words"]
    assert "embedding" in rows[0][1] and provider.embedding_calls > calls
    assert json.dumps(rows[0][1])  # usage stays JSON


def test_dropping_a_kb_during_a_refresh_waits_instead_of_deadlocking(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    import threading
    import time

    build(client, conn, provider, "gone", {"method": "full_text"})
    dsn = conn.info.dsn
    done: dict[str, Any] = {}

    def run(name: str, statement: str) -> None:
        try:
            with psycopg.connect(dsn, autocommit=True) as other:
                other.execute("SET kb.fake_key = 'test-key'")
                done[name] = other.execute(statement).fetchall()
        except psycopg.Error as exc:
            done[name] = exc

    # The refresh embeds the KB's words slowly; the drop comes in the meantime. Before,
    # the refresh held its table lock but no lock on the generation: the drop deleted the
    # generation and waited for that table lock (DROP INDEX term_vector_hnsw_N), and the
    # refresh's insert then waited for the deleted row: "deadlock detected" (or, where the
    # drop went through first, a foreign-key error on the generation gone beneath it).
    provider.embed_delay = 1.5
    refresh = threading.Thread(
        target=run, args=("refresh", "SELECT added, error FROM kb.refresh_term_vectors('gone')")
    )
    refresh.start()
    time.sleep(0.7)
    drop = threading.Thread(target=run, args=("drop", "SELECT kb.drop_knowledge_base('gone')"))
    drop.start()
    refresh.join(60)
    drop.join(60)
    provider.embed_delay = 0.0
    assert not isinstance(done["refresh"], Exception), done["refresh"]
    assert not isinstance(done["drop"], Exception), done["drop"]
    ((added, error),) = done["refresh"]
    assert error is None and added > 0
    assert done["drop"] == [(True,)]
    assert conn.execute("SELECT count(*) FROM kb.term_vector").fetchone() == (0,)


def test_a_refresh_steps_back_while_a_drop_is_open(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    build(client, conn, provider, "going", {"method": "full_text"})
    with psycopg.connect(conn.info.dsn) as dropping:
        dropping.execute("SELECT kb.drop_knowledge_base('going')")
        # Uncommitted: the refresh neither waits for the drop's locks nor deadlocks.
        conn.execute("SET kb.fake_key = 'test-key'")
        conn.execute("SET statement_timeout = '5s'")
        assert conn.execute("SELECT * FROM kb.refresh_term_vectors('going')").fetchall() == []
        conn.execute("RESET statement_timeout")
        dropping.rollback()
    # Once the drop is gone, the refresh does its work.
    ((added, error),) = conn.execute(
        "SELECT added, error FROM kb.refresh_term_vectors('going')"
    ).fetchall()
    assert error is None and added > 0
