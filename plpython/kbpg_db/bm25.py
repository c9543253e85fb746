"""BM25 top-k scored in memory, with the postings of ``kb.posting`` kept per backend.

``kb._bm25_search`` in SQL reads every posting of every query term through the executor
(about 0.8 µs a posting, grouped by chunk): 40-60 ms for a SciFact question over 100k
chunks. Here each term's postings are read once, as three packed arrays (chunk ids, tf,
dl), and kept for the life of the backend; a query then scores them with numpy, summing
per chunk with ``bincount``.

A term's cached postings stay valid exactly as long as its ``kb.term_stat`` row is the
same row version (its ``xmin`` and ``ctid``). Every change to a term's postings changes
that row in the same transaction (the statistics triggers of 150-bm25-statistics.sql
update df, or delete and insert the row), so a query that sees the same row version
sees the same postings, whichever backend wrote them and whether or not it committed.
Nothing is kept in step on the write path, and the function writes nothing: it runs on
hot standbys. The statistics (N, avgdl, df) are read from the tables on every query,
so scores are those of ``kb._bm25_exhaustive``, up to the order in which floating-point
sums are added.

The cache holds at most ``kb.bm25_cache_mb`` megabytes of postings per backend (16
bytes a posting), least recently used first out.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

INDEX = (
    "SELECT i.n_chunks, i.total_len, i.indexing_config::text AS cfg FROM kb.kb_index i "
    "WHERE i.id = $1 AND i.kb_id = $2"
)
# The row version says whether a term's postings changed since they were cached.
TERMS = (
    "SELECT ts.lexeme, ts.df, ts.xmin::text || '/' || ts.ctid::text AS version "
    "FROM kb.term_stat ts "
    "WHERE ts.index_id = $1 AND ts.kb_id = $2 AND ts.df > 0 "
    "AND ts.lexeme = ANY (kb._config_lexemes($3::jsonb, $4))"
)
# Packed in SQL, 16 bytes a posting (chunk id, tf, dl, big-endian as int8send and
# int4send write them): one bytea per term instead of a Python object per posting.
POSTINGS = (
    "SELECT p.lexeme, "
    "string_agg(int8send(p.chunk_id) || int4send(p.tf) || int4send(p.dl), ''::bytea) AS packed "
    "FROM kb.posting p "
    "WHERE p.index_id = $1 AND p.kb_id = $2 AND p.lexeme = ANY ($3) "
    "GROUP BY p.lexeme"
)
PACKED = np.dtype([("id", ">i8"), ("tf", ">i4"), ("dl", ">i4")])
# What kb.bm25_search reports in kb.bm25_essential: here every term is read whole.
ESSENTIAL = "SELECT set_config('kb.bm25_essential', $1, true)"
FILTERED = (
    "SELECT c.id FROM kb.chunk c "
    "WHERE c.kb_id = $1 AND c.id = ANY ($2) AND c.metadata @> $3::jsonb"
)

_PLANS: dict[str, Any] = {}
_TYPES = {
    "index": ["bigint", "integer"],
    "terms": ["bigint", "integer", "text", "text"],
    "postings": ["bigint", "integer", "text[]"],
    "filtered": ["integer", "bigint[]", "text"],
    "essential": ["text"],
}
_SQL = {
    "index": INDEX,
    "terms": TERMS,
    "postings": POSTINGS,
    "filtered": FILTERED,
    "essential": ESSENTIAL,
}


def _plan(plpy: Any, name: str) -> Any:
    if name not in _PLANS:
        _PLANS[name] = plpy.prepare(_SQL[name], _TYPES[name])
    return _PLANS[name]


@dataclass(frozen=True, slots=True)
class Postings:
    """One term's postings (chunk ids, tf, dl), as of its term_stat row ``version``."""

    version: str
    ids: np.ndarray
    tf: np.ndarray
    dl: np.ndarray

    @property
    def nbytes(self) -> int:
        return int(self.ids.nbytes + self.tf.nbytes + self.dl.nbytes)


class PostingCache:
    """Terms' postings by (kb_id, index_id, lexeme), least recently used out first."""

    def __init__(self) -> None:
        self.entries: OrderedDict[tuple[int, int, str], Postings] = OrderedDict()
        self.nbytes = 0
        self.hits = self.misses = 0

    def get(self, key: tuple[int, int, str], version: str) -> Postings | None:
        entry = self.entries.get(key)
        if entry is None or entry.version != version:
            self.misses += 1
            return None
        self.hits += 1
        self.entries.move_to_end(key)
        return entry

    def put(self, key: tuple[int, int, str], entry: Postings, budget: int) -> None:
        old = self.entries.pop(key, None)
        if old is not None:
            self.nbytes -= old.nbytes
        if entry.nbytes > budget:
            return
        self.entries[key] = entry
        self.nbytes += entry.nbytes
        self.trim(budget)

    def trim(self, budget: int) -> None:
        while self.nbytes > budget:
            _, gone = self.entries.popitem(last=False)
            self.nbytes -= gone.nbytes


CACHE = PostingCache()


def _unpack(version: str, packed: bytes) -> Postings:
    rows = np.frombuffer(packed, dtype=PACKED)
    return Postings(
        version,
        rows["id"].astype(np.int64),
        rows["tf"].astype(np.int32),
        rows["dl"].astype(np.int32),
    )


def _term_postings(
    plpy: Any, kb_id: int, index_id: int, terms: list[dict[str, Any]], budget: int
) -> dict[str, Postings]:
    """Each term's postings, from the cache where its row version is unchanged and
    otherwise read in one statement (and cached, within the budget)."""
    found: dict[str, Postings] = {}
    missing: dict[str, str] = {}
    for t in terms:
        entry = CACHE.get((kb_id, index_id, t["lexeme"]), t["version"])
        if entry is None:
            missing[t["lexeme"]] = t["version"]
        else:
            found[t["lexeme"]] = entry
    if missing:
        for row in plpy.execute(_plan(plpy, "postings"), [index_id, kb_id, list(missing)]):
            entry = _unpack(missing[row["lexeme"]], row["packed"])
            found[row["lexeme"]] = entry
            CACHE.put((kb_id, index_id, row["lexeme"]), entry, budget)
    return found


def _accumulate(
    postings: list[Postings], idfs: list[float], k1: float, b: float, avgdl: float
) -> tuple[np.ndarray, np.ndarray]:
    """(chunk ids, scores) of every chunk holding a query term."""
    ids = np.concatenate([p.ids for p in postings])
    # Term by term, the same expression, in the same order, as kb._bm25_search's SQL.
    parts = np.concatenate(
        [
            idf * p.tf * (k1 + 1) / (p.tf + k1 * (1 - b + b * p.dl / avgdl))
            for p, idf in zip(postings, idfs, strict=True)
        ]
    )
    lo, hi = int(ids.min()), int(ids.max())
    if hi - lo < 4 * len(ids) + 65536:  # ids close together: a dense accumulator
        acc = np.bincount(ids - lo, weights=parts, minlength=hi - lo + 1)
        present = np.zeros(hi - lo + 1, dtype=bool)
        present[ids - lo] = True
        held = np.flatnonzero(present)
        return held + lo, acc[held]
    chunk_ids, where = np.unique(ids, return_inverse=True)
    return chunk_ids, np.bincount(where, weights=parts)


def _ranked(chunk_ids: np.ndarray, scores: np.ndarray, n: int) -> np.ndarray:
    """Positions of the n best, by score descending then chunk id (the SQL order)."""
    if n < len(scores):
        kth = np.partition(scores, len(scores) - n)[len(scores) - n]
        pick = np.flatnonzero(scores >= kth)
    else:
        pick = np.arange(len(scores))
    order = np.lexsort((chunk_ids[pick], -scores[pick]))
    return pick[order[:n]]


def search(
    plpy: Any,
    kb_id: int,
    index_id: int,
    query: str,
    top_k: int,
    k1: float,
    b: float,
    filter_json: str | None,
    budget_mb: int,
) -> list[tuple[int, float]]:
    """The top_k chunks of one index generation by BM25, as kb._bm25_search returns them."""
    if top_k is None or top_k < 1:
        return []
    rows = plpy.execute(_plan(plpy, "index"), [index_id, kb_id])
    if not rows:
        return []
    n = float(rows[0]["n_chunks"])
    avgdl = float(rows[0]["total_len"]) / max(rows[0]["n_chunks"], 1)
    terms = list(plpy.execute(_plan(plpy, "terms"), [index_id, kb_id, rows[0]["cfg"], query]))
    plpy.execute(_plan(plpy, "essential"), [f"{len(terms)}/{len(terms)}"])
    if not terms:
        return []
    budget = budget_mb * 1024 * 1024
    CACHE.trim(budget)  # the setting may have been lowered
    postings = _term_postings(plpy, kb_id, index_id, terms, budget)
    held = [t for t in terms if t["lexeme"] in postings]  # all of them: one snapshot
    idfs = [math.log(1 + (n - t["df"] + 0.5) / (t["df"] + 0.5)) for t in held]
    chunk_ids, scores = _accumulate([postings[t["lexeme"]] for t in held], idfs, k1, b, avgdl)
    if filter_json is None:
        best = _ranked(chunk_ids, scores, top_k)
        return [(int(chunk_ids[i]), float(scores[i])) for i in best]
    # With a filter: the best chunks in rounds (4·top_k + 64, then 4 times as many each
    # round), each round's checked in one statement, until top_k pass or none are left.
    out: list[tuple[int, float]] = []
    done, want = 0, 4 * top_k + 64
    while done < len(scores) and len(out) < top_k:
        batch = _ranked(chunk_ids, scores, min(want, len(scores)))[done:]
        ids = [int(x) for x in chunk_ids[batch]]
        passed = {r["id"] for r in plpy.execute(_plan(plpy, "filtered"), [kb_id, ids, filter_json])}
        out.extend((i, float(scores[j])) for i, j in zip(ids, batch, strict=True) if i in passed)
        done, want = done + len(batch), want * 4
    return out[:top_k]
