"""Heading text weighted above body text in BM25 (heading_weight, BM25F-style): a heading
word counts heading_weight times in its term frequency and in the chunk's length, and the
statistics stay exact (postings, lengths and kb_index totals agree with the chunks)."""

from __future__ import annotations

import math

import psycopg
import pytest

from kbpg.client import Client
from tests.fakeprovider import FakeProvider
from tests.helpers import full_text_kb

# "connection pooling" is what one section is about (its heading) and what another
# mentions over and over in passing.
GUIDE = """# Server guide

## Connection pooling
Keep a few sessions open and hand them out to clients.

## Client settings
The client keeps its connection settings here: a connection string, a connection
timeout, connection retries and pooling hints for the pooling library.
"""


def _top(client: Client, kb: str, query: str) -> str:
    return client.search(kb, query)[0].heading_path[-1]


def test_the_section_a_heading_names_ranks_first(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    full_text_kb(client, conn, provider, "weighted", {"guide": GUIDE})
    full_text_kb(client, conn, provider, "flat", {"guide": GUIDE}, heading_weight=1)
    cfg = conn.execute(
        "SELECT i.indexing_config FROM kb.knowledge_base k JOIN kb.kb_index i "
        "ON i.id = k.active_index_id WHERE k.name = 'weighted'"
    ).fetchone()[0]
    assert cfg["heading_weight"] == 2  # the default
    assert _top(client, "weighted", "connection pooling") == "Connection pooling"
    # Headings as body text: the section that repeats the words wins.
    assert _top(client, "flat", "connection pooling") == "Client settings"


def test_statistics_count_heading_words_heading_weight_times(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    full_text_kb(client, conn, provider, "hw3", {"guide": GUIDE}, heading_weight=3)
    ix = conn.execute(
        "SELECT active_index_id FROM kb.knowledge_base WHERE name = 'hw3'"
    ).fetchone()[0]
    chunks = conn.execute(
        "SELECT id, heading_path, tsv, doc_len FROM kb.chunk WHERE index_id = %s ORDER BY ordinal",
        (ix,),
    ).fetchall()
    pooling = next(c for c in chunks if c[1][-1] == "Connection pooling")
    # Its embedded text: "Server guide > Connection pooling\n\n## Connection pooling\n..."
    # 'pool' is in the heading path once (x3) and in the section's own heading line once.
    tf = conn.execute(
        "SELECT tf, dl FROM kb.posting WHERE chunk_id = %s AND lexeme = 'pool'", (pooling[0],)
    ).fetchone()
    assert tf == (3 + 1, pooling[3])
    plain = conn.execute(
        "SELECT kb.tsvector_length(%s::tsvector), "
        "(SELECT count(*) FROM unnest(%s::tsvector) u, unnest(u.weights) w WHERE w = 'A')",
        (pooling[2], pooling[2]),
    ).fetchone()
    assert plain[1] == 4  # server, guide, connection, pooling
    assert pooling[3] == plain[0] + 2 * plain[1]
    # Every posting's tf and dl, and the generation's totals, from the chunks themselves.
    bad = conn.execute(
        "SELECT count(*) FROM kb.posting p JOIN kb.chunk c ON c.id = p.chunk_id "
        "JOIN unnest(c.tsv) u ON u.lexeme = p.lexeme WHERE c.index_id = %s AND "
        "(p.dl <> c.doc_len OR p.tf <> coalesce(array_length(u.positions, 1), 1) "
        " + 2 * coalesce(cardinality(array_positions(u.weights, 'A')), 0))",
        (ix,),
    ).fetchone()[0]
    assert bad == 0
    n, total = conn.execute(
        "SELECT n_chunks, total_len FROM kb.kb_index WHERE id = %s", (ix,)
    ).fetchone()
    assert (n, total) == (len(chunks), sum(c[3] for c in chunks))
    # The BM25 score of a chunk, from its postings (kb.bm25_search) and from its tsvector
    # (kb.bm25_score), agree with the formula over weighted counts.
    found = dict(
        conn.execute("SELECT * FROM kb.bm25_search(%s, 'connection pooling', 10)", (ix,)).fetchall()
    )
    df = dict(
        conn.execute(
            "SELECT lexeme, df FROM kb.term_stat WHERE index_id = %s "
            "AND lexeme IN ('connect', 'pool')",
            (ix,),
        ).fetchall()
    )
    expect = 0.0
    for lexeme in ("connect", "pool"):
        tf_l = conn.execute(
            "SELECT tf FROM kb.posting WHERE chunk_id = %s AND lexeme = %s", (pooling[0], lexeme)
        ).fetchone()[0]
        idf = math.log(1 + (n - df[lexeme] + 0.5) / (df[lexeme] + 0.5))
        expect += idf * tf_l * 2.2 / (tf_l + 1.2 * (0.25 + 0.75 * pooling[3] / (total / n)))
    assert found[pooling[0]] == pytest.approx(expect, rel=1e-9)
    score = conn.execute(
        "SELECT kb.bm25_score(%s, %s::tsvector, 'connection pooling')", (ix, pooling[2])
    ).fetchone()[0]
    assert score == pytest.approx(expect, rel=1e-9)


def test_a_generation_without_the_setting_weighs_headings_as_body(
    conn: psycopg.Connection,
) -> None:
    text = "Guide > Retry policy\n\nRetries back off."
    heading = ["Guide", "Retry policy"]
    old, flat, weighted = conn.execute(
        "SELECT kb.chunk_tsvector(%s, %s, %s), kb.chunk_tsvector(%s, %s, %s), "
        "kb.chunk_tsvector(%s, %s, %s)",
        (
            '{"text_search_config": "english"}',
            text,
            heading,
            '{"text_search_config": "english", "heading_weight": 1}',
            text,
            heading,
            '{"text_search_config": "english", "heading_weight": 4}',
            text,
            heading,
        ),
    ).fetchone()
    plain = conn.execute("SELECT to_tsvector('english', %s)", (text,)).fetchone()[0]
    assert old == flat == plain
    assert weighted == "'back':5 'guid':1A 'polici':3A 'retri':2A,4"
    assert (
        conn.execute("SELECT kb.tsvector_length(%s::tsvector, 4)", (weighted,)).fetchone()[0] == 14
    )


@pytest.mark.parametrize("value", ["0", "11", '"two"', "1.5"])
def test_a_bad_heading_weight_is_refused(conn: psycopg.Connection, value: str) -> None:
    with pytest.raises(psycopg.errors.InvalidParameterValue) as err:
        conn.execute(
            "SELECT kb.create_knowledge_base('hw_bad', %s::jsonb)",
            ('{"heading_weight": ' + value + "}",),
        )
    assert "heading_weight" in str(err.value)
    assert (
        conn.execute("SELECT count(*) FROM kb.knowledge_base WHERE name = 'hw_bad'").fetchone()[0]
        == 0
    )
