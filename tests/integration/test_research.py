"""research/directions.py replays kbpg's search: its defaults must be kb.search itself,
so a direction's figure is what it would do in the product. And its helpers, in small."""

from __future__ import annotations

import numpy as np
import psycopg
import pytest
from kbpg_db import config

from kbpg.client import Client
from research.directions import (
    ALL_WEIGHTS,
    DIRECTIONS,
    LEARNED,
    ORACLE,
    TUNED,
    Question,
    Replay,
    WeightCase,
    document_expansion,
    document_scores,
    expansion,
    fuse,
    opening_prose,
    plain,
    ranked,
    replay_set,
    score,
    weights_per_question,
)
from tests.fakeprovider import FakeProvider
from tests.helpers import remote_kb, run_worker

REPLAY_CORPUS = {
    "cats": "Cats are small felines. A cat sleeps most of the day and hunts mice.",
    "mice": "Mice are small rodents. Field mice eat seeds; cats hunt mice at night.",
    "tea": "Green tea is brewed at 80 degrees. Black tea takes boiling water.",
    "coffee": "Espresso is coffee brewed under pressure. Coffee beans are roasted seeds.",
    "bread": "Bread dough rises with yeast. Sourdough bread uses a starter.",
}


def fill_replay_kb(client: Client, dsn: str, kb: str) -> None:
    """The directions tests' five documents, indexed."""
    for title, text in REPLAY_CORPUS.items():
        client.add_text(kb, title, text)
    run_worker(dsn)


def test_directions_replay_ranks_as_search_does(
    client: Client, conn: psycopg.Connection, dsn: str, provider: FakeProvider
) -> None:
    """The replay's defaults are kb.search itself: the same BM25 top 10 for
    full_text, the same hybrid order, and its scores are kb.score_query's."""
    remote_kb(client, conn, provider, "replay")
    fill_replay_kb(client, dsn, "replay")
    asked = [("cats hunt mice", "mice"), ("coffee brewed", "coffee"), ("bread yeast", "bread")]
    questions = [Question(text, [title], {}) for text, title in asked]
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SET kb.fake_key = 'test-key'")
        replay = Replay(c, "replay", questions, beir=False)
        for q in questions:
            hybrid = [
                r[0]
                for r in c.execute(
                    "SELECT chunk_id FROM kb.search('replay', %s, top_k => 10)", (q.text,)
                ).fetchall()
            ]
            channel = replay.top(plain(replay, q, config.BM25_K1))
            assert hybrid and ranked(fuse(q.vector, channel, q.vector_weight, "zscore")) == hybrid
            scored = c.execute(
                "SELECT kb.score_query('replay', %s, %s)", (q.text, q.expected)
            ).fetchone()[0]
            # The replay's own vector scores (for candidates BM25 alone found) are kb.search's.
            exact = replay.embeddings @ q.embedding
            for cid, sim in q.vector:
                if cid in replay.row:
                    assert exact[replay.row[cid]] == pytest.approx(sim, abs=1e-5)
            # Heading words counted at the index's own heading_weight: the postings' BM25.
            assert np.allclose(
                replay.bm25_headings(q, config.BM25_K1, replay.heading_weight),
                plain(replay, q, config.BM25_K1),
            )
            mine = score(replay, q, hybrid)
            assert mine["mrr@10"] == pytest.approx(float(scored["rr"]))
            assert mine["ndcg@10"] == pytest.approx(float(scored["ndcg"]), abs=1e-4)
        out = replay_set(replay)
    cal = replay.calibration  # cosine similarities, and BM25 scores, of real lists
    assert -1 < cal.vector[0] < 1 and cal.vector[1] > 0
    assert cal.bm25[0] > 0 and cal.bm25_first[0] >= cal.bm25[0]
    assert out["bm25_replay"] == 1.0
    # A provider's model: no expansion by default, so full_text's default is BM25's list;
    # the replayed expansion itself is tested against the SQL's on a local KB below.
    assert replay.term_expansion == 0 and out["full_text_replay"] == 1.0
    # One section vector a chunk, unit length.
    assert replay.sections.shape == replay.embeddings.shape
    assert np.allclose(np.linalg.norm(replay.sections, axis=1), 1.0)
    # Every direction, but WordNet's where Debian's wordnet-base is not installed, and
    # document expansion's (a provider's model here; the local KB below has them).
    assert {
        d.label
        for d in DIRECTIONS
        if (replay.synonyms is not None or not d.needs_wordnet) and not d.needs_english
    } <= set(out)
    assert not any(d.label in out for d in DIRECTIONS if d.needs_english)
    assert out["defaults"]["full_text"]["success@5"] == 1.0  # each question names its answer


def test_directions_replay_expands_as_search_does(
    client: Client, conn: psycopg.Connection, dsn: str
) -> None:
    """A KB with a local model expands full_text by default: the replay's added words and
    weights are kb._expansion_terms's, and its full_text top 10 is kb.search's."""
    client.create_knowledge_base("replay-local", {}, {})
    fill_replay_kb(client, dsn, "replay-local")
    asked = [("a pet that chases rodents", "cats"), ("hot drink from leaves", "tea")]
    questions = [Question(text, [title], {}) for text, title in asked]
    with psycopg.connect(dsn, autocommit=True) as c:
        replay = Replay(c, "replay-local", questions, beir=False)
        assert replay.term_expansion == config.TERM_EXPANSION and len(replay.word_terms) > 2
        for q in questions:
            (terms,) = c.execute(
                "SELECT e.terms FROM kb.knowledge_base k "
                "JOIN kb.kb_index i ON i.id = k.active_index_id, "
                "kb._expansion_terms(k.id, i.id, %s, kb.embed_query(k.name, %s), 16, 0.3, "
                "i.indexing_config) e WHERE k.name = 'replay-local'",
                (q.text, q.text),
            ).fetchone()
            mine = {replay.lexemes[t]: w for t, w in expansion(replay, q, 16, 0.3).items()}
            assert terms and mine == pytest.approx(terms)
        out = replay_set(replay)
    # Document expansion: each chunk gains 10 English words it does not hold, the nearest
    # at 0.3 of an occurrence; its own words keep their postings and their idf.
    bounds, rows, tfs, dls, idf = document_expansion(replay, 10, 0.3)
    own = len(replay.term_rows)
    assert len(rows) == own + 10 * len(replay.ids)
    term = np.repeat(np.arange(len(bounds) - 1), np.diff(bounds))
    added = tfs < 1  # every posting of a chunk's own word has tf 1 or more
    assert added.sum() == 10 * len(replay.ids) and tfs[added].max() == pytest.approx(0.3)
    for row in range(len(replay.ids)):
        held = set(replay.chunk_terms[replay.chunk_bounds[row] : replay.chunk_bounds[row + 1]])
        gained = set(term[added & (rows == row)].tolist())
        assert len(gained) == 10 and not gained & held
    assert np.array_equal(idf[: len(replay.lexemes)], replay.idf)
    assert np.array_equal(dls, replay.dl[rows])  # each chunk keeps its length
    gained_only = Question("a drink", ["tea"], {})
    gained_only.terms_english = sorted(set(term[added].tolist()))[:3]
    assert document_scores(replay, gained_only, config.BM25_K1, 10, 0.3).max() > 0
    assert out["bm25_replay"] == 1.0 and out["full_text_replay"] == 1.0
    assert all(d.label in out for d in DIRECTIONS if d.needs_english)


def test_opening_prose_is_a_sections_first_paragraph_of_prose() -> None:
    text = (
        "### `fs.appendFile(path, data)`\n\n* `path` {string} filename\n* `data` {string}\n\n"
        "Asynchronously append data to a file,\ncreating it if needed.\n\n"
        "```js\nappendFile('a.txt', 'x');\n```\n\nMore text."
    )
    assert opening_prose(text) == ("Asynchronously append data to a file, creating it if needed.")
    assert opening_prose("```\ncode only\n```") == ""
    assert len(opening_prose("word " * 200)) == 300


def test_weights_per_question_learns_from_the_other_sets_and_bounds_them() -> None:
    """Where one signal tells which weight wins on every set, the weight fitted on the
    other sets follows it on the held-out set; the bound takes each question's best. Where
    the cue alone tells, tuning on half a set's questions finds the weights too."""
    rng = np.random.default_rng(7)

    def case(lean_vector: bool) -> WeightCase:
        signals = rng.normal(size=11)
        signals[0] = 1.0 if lean_vector else 0.0
        good = 0.5 if lean_vector else 0.3
        by_weight = {w: {"mrr@10": 1.0 if w == good else 0.25} for w in ALL_WEIGHTS}
        return WeightCase(signals, by_weight, "mrr@10")

    cases = {name: [case(i % 2 == 0) for i in range(20)] for name in ("a", "b", "c")}
    rows = weights_per_question(cases)
    for name in cases:
        assert rows[name][LEARNED]["hybrid"]["mrr@10"] > 0.9
        assert rows[name][ORACLE]["hybrid"]["mrr@10"] == 1.0
        # vector_weight 0.3 and plain_query_shift 0.2: each half finds the pair.
        assert rows[name][TUNED]["hybrid"]["mrr@10"] == 1.0
    # A set where the signal means the opposite: what the others teach does not carry.
    cases["d"] = [case(i % 2 == 0) for i in range(20)]
    for c in cases["d"]:
        c.signals[0] = 1.0 - c.signals[0]
    rows = weights_per_question(cases)
    assert rows["d"][LEARNED]["hybrid"]["mrr@10"] < 0.5
    assert rows["d"][ORACLE]["hybrid"]["mrr@10"] == 1.0
