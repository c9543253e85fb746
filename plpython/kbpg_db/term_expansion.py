"""Term expansion for full_text search: the vocabulary's embeddings.

A paraphrased question shares few words with its answer ("take just the last part of a
path" against ``path.basename()``), so BM25 alone misses it. With term expansion on
(``retrieval_config.term_expansion``; by default where the KB embeds with a local model),
a full_text search embeds the query and adds the indexed words nearest to it
(``kb._expansion_terms``) to BM25's query, each at a fraction of a word's weight: the
words the model places near the question, from the KB's own vocabulary. Measured on four
sets in docs/performance.md.

This module fills ``kb.term_vector``: for each lexeme a generation indexes in two chunks
or more, the embedding of its commonest spelling in the chunks (none where no word stems
to it alone: a number, a part of an identifier) ("directories", not the
stem "directori", which the model reads worse). The worker runs it for each generation
whose chunks changed when its queue is empty (``kb.refresh_term_vectors``); only
lexemes without a vector are embedded, and vectors of lexemes no longer in two chunks go.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

from kbpg_db import config, embedding, keys

# A word the expansion may add: three letters or more, standing alone (not part of an
# identifier with digits or underscores, whose parts BM25 indexes apart anyway).
WORD = re.compile(r"(?<!\w)[^\W\d_]{3,}(?!\w)")
MIN_CHUNKS = 2  # a lexeme in fewer chunks is a typo or a name more often than a word
CHUNK_BATCH = 2000  # chunks read at a time
WORD_BATCH = 5000  # words stemmed at a time
INSERT_BATCH = 500

MISSING = (
    "SELECT t.lexeme FROM kb.term_stat t "
    "WHERE t.index_id = $1 AND t.kb_id = $2 AND t.df >= $3 "
    "AND NOT EXISTS (SELECT 1 FROM kb.term_vector v "
    "WHERE v.index_id = t.index_id AND v.kb_id = t.kb_id AND v.lexeme = t.lexeme)"
)
STALE = (
    "DELETE FROM kb.term_vector v WHERE v.index_id = $1 AND v.kb_id = $2 "
    "AND NOT EXISTS (SELECT 1 FROM kb.term_stat t WHERE t.index_id = v.index_id "
    "AND t.kb_id = v.kb_id AND t.lexeme = v.lexeme AND t.df >= $3)"
)
# The chunks holding a missing lexeme (all of them when every lexeme is missing).
CHUNKS = (
    "SELECT c.content FROM kb.chunk c WHERE c.kb_id = $2 AND c.index_id = $1 "
    "AND c.id IN (SELECT p.chunk_id FROM kb.posting p "
    "WHERE p.index_id = $1 AND p.kb_id = $2 AND p.lexeme = ANY ($3))"
)
ALL_CHUNKS = "SELECT c.content FROM kb.chunk c WHERE c.kb_id = $2 AND c.index_id = $1"
STEMS = "SELECT w, kb._config_lexemes($1::jsonb, w) AS lexemes FROM unnest($2::text[]) w"
INSERT = (
    "INSERT INTO kb.term_vector (index_id, kb_id, lexeme, word, embedding) "
    "SELECT $1, $2, u.l, u.w, u.e::vector FROM unnest($3::text[], $4::text[], $5::text[]) "
    "u(l, w, e) ON CONFLICT DO NOTHING"
)


def spellings(
    plpy: Any, index_id: int, kb_id: int, lexemes: set[str], every: bool, indexing_config: str
) -> dict[str, str]:
    """Each lexeme's commonest spelling in the chunks that hold it (ties: the first in
    alphabetical order); a word is counted where it stems to that one lexeme alone."""
    counts: Counter[str] = Counter()
    if every:
        plan = plpy.prepare(ALL_CHUNKS, ["bigint", "integer"])
        args: list[Any] = [index_id, kb_id]
    else:
        plan = plpy.prepare(CHUNKS, ["bigint", "integer", "text[]"])
        args = [index_id, kb_id, sorted(lexemes)]
    cursor = plpy.cursor(plan, args)
    while rows := cursor.fetch(CHUNK_BATCH):
        for row in rows:
            counts.update(w.lower() for w in WORD.findall(row["content"] or ""))
    stems = plpy.prepare(STEMS, ["text", "text[]"])
    words = sorted(counts)
    best: dict[str, str] = {}
    for at in range(0, len(words), WORD_BATCH):
        for row in plpy.execute(stems, [indexing_config, words[at : at + WORD_BATCH]]):
            found = row["lexemes"] or []
            if len(found) != 1 or found[0] not in lexemes:
                continue
            lexeme, word = found[0], row["w"]
            held = best.get(lexeme)
            if held is None or (counts[word], held) > (counts[held], word):
                best[lexeme] = word
    return best


def refresh(plpy: Any, kb_id: int, index_id: int, indexing_config: Any) -> dict[str, int]:
    """Embed the words of one generation that have no vector yet; drop the vectors of
    lexemes no longer in MIN_CHUNKS chunks. Returns the counts."""
    removed = plpy.execute(
        plpy.prepare(STALE, ["bigint", "integer", "integer"]), [index_id, kb_id, MIN_CHUNKS]
    ).nrows()
    missing = {
        r["lexeme"]
        for r in plpy.execute(
            plpy.prepare(MISSING, ["bigint", "integer", "integer"]), [index_id, kb_id, MIN_CHUNKS]
        )
    }
    if not missing:
        return {"added": 0, "removed": removed}
    (first,) = plpy.execute(
        plpy.prepare(
            "SELECT NOT EXISTS (SELECT 1 FROM kb.term_vector "
            "WHERE index_id = $1 AND kb_id = $2) AS every",
            ["bigint", "integer"],
        ),
        [index_id, kb_id],
    )
    raw = indexing_config if isinstance(indexing_config, str) else json.dumps(indexing_config)
    best = spellings(plpy, index_id, kb_id, missing, first["every"], raw)
    insert = plpy.prepare(INSERT, ["bigint", "integer", "text[]", "text[]", "text[]"])
    # A lexeme no word stems to alone (a number, a part of an identifier) is kept without
    # a vector, so that later refreshes do not look for it again.
    none = sorted(missing - best.keys())
    for at in range(0, len(none), INSERT_BATCH):
        part = none[at : at + INSERT_BATCH]
        plpy.execute(insert, [index_id, kb_id, part, [None] * len(part), [None] * len(part)])
    if not best:
        return {"added": 0, "removed": removed}
    icfg = config.indexing_cached(raw)
    key = keys.for_model(plpy, icfg.api_key_name, icfg.embedding_model)
    lexemes = sorted(best)
    step = max(INSERT_BATCH, icfg.batch_size)
    for at in range(0, len(lexemes), step):
        part = lexemes[at : at + step]
        words = [best[lx] for lx in part]
        vectors = embedding.embed(icfg, words, key).vectors
        plpy.execute(
            insert,
            [index_id, kb_id, part, words, [embedding.vector_literal(v) for v in vectors]],
        )
    return {"added": len(lexemes), "removed": removed}
