"""BM25 top-k scored in memory, with the postings of ``kb.posting`` kept per backend.

``kb._bm25_search`` in SQL reads every posting of every query term through the executor
(about 0.8 µs a posting, grouped by chunk): 40-60 ms for a SciFact question over 100k
chunks. Here each term's postings are read once, as one packed bytea (chunk id, tf, dl a
posting), and kept as numpy arrays for the life of the backend; a query then scores them
with numpy, summing per chunk with ``bincount``, and prunes large queries exactly
(:func:`_top`).

A term's cached postings stay valid exactly as long as its ``kb.term_stat`` row is the
same row version (its ``xmin`` and ``ctid``). Every change to a term's postings changes
that row in the same transaction (the statistics triggers of 150-bm25-statistics.sql
update df, or delete and insert the row), so a query that sees the same row version
sees the same postings, whichever backend wrote them and whether or not it committed.
Nothing is kept in step on the write path, and the function writes nothing: it runs on
hot standbys. The statistics (N, avgdl, df) are read from the tables on every query,
so scores are those of ``kb._bm25_exhaustive``, up to the order in which floating-point
sums are added.

The cache holds at most ``kb.bm25_cache_mb`` megabytes of postings per backend (8 bytes
a posting where chunk ids, tf and dl fit 32, 16 and 16 bits), least recently used first
out.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

# The index generation's statistics and the query's terms (its own, and the expansion's
# in $4) in one statement; the row version says whether a term's postings changed since
# they were cached. No row: no such generation in this KB; one row with no lexeme: none
# of the query's terms is indexed. The lexemes are worked out once, in FROM (OFFSET 0
# keeps the planner from folding them into term_stat's filter: under row-level security
# that filter runs after the policy's, once per row of the generation, 2.5 s for a member
# on 22k terms), and looked up by term_stat's key.
TERMS = (
    "SELECT i.n_chunks, i.total_len, ts.lexeme, ts.df, ts.version, ts.own "
    "FROM kb.kb_index i "
    "CROSS JOIN LATERAL (SELECT l AS own, l || $4 AS every "
    "  FROM kb._config_lexemes(i.indexing_config, $3) l OFFSET 0) q "
    "LEFT JOIN LATERAL ("
    "  SELECT t.lexeme, t.df, t.xmin::text || '/' || t.ctid::text AS version, "
    "  t.lexeme = ANY (q.own) AS own "
    "  FROM kb.term_stat t "
    "  WHERE t.index_id = i.id AND t.kb_id = i.kb_id AND t.df > 0 "
    "  AND t.lexeme = ANY (q.every)) ts ON true "
    "WHERE i.id = $1 AND i.kb_id = $2"
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
FILTERED = (
    "SELECT c.id FROM kb.chunk c WHERE c.kb_id = $1 AND c.id = ANY ($2) AND c.metadata @> $3::jsonb"
)

_PLANS: dict[str, Any] = {}
_TYPES = {
    "terms": ["bigint", "integer", "text", "text[]"],
    "postings": ["bigint", "integer", "text[]"],
    "filtered": ["integer", "bigint[]", "text"],
}
_SQL = {
    "terms": TERMS,
    "postings": POSTINGS,
    "filtered": FILTERED,
}


def _plan(plpy: Any, name: str) -> Any:
    if name not in _PLANS:
        _PLANS[name] = plpy.prepare(_SQL[name], _TYPES[name])
    return _PLANS[name]


@dataclass(frozen=True, slots=True)
class Postings:
    """One term's postings as of its term_stat row ``version``: chunk ids as ``base`` +
    ``offsets``, tf and dl, each in the narrowest integer type that holds them (8 bytes
    a posting for most terms)."""

    version: str
    base: int
    offsets: np.ndarray
    tf: np.ndarray
    dl: np.ndarray

    @property
    def ids(self) -> np.ndarray:
        return self.base + self.offsets.astype(np.int64)

    @property
    def nbytes(self) -> int:
        return int(self.offsets.nbytes + self.tf.nbytes + self.dl.nbytes)


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


def _narrow(values: np.ndarray) -> np.ndarray:
    """Non-negative integers in uint16 or uint32 where they fit (else int64)."""
    top = int(values.max()) if len(values) else 0
    for kind in (np.uint16, np.uint32):
        if top <= np.iinfo(kind).max:
            return values.astype(kind)
    return values.astype(np.int64)


def postings(version: str, ids: np.ndarray, tf: np.ndarray, dl: np.ndarray) -> Postings:
    """A term's postings, kept in chunk id order (pruning looks chunks up by id)."""
    if len(ids) > 1 and not bool(np.all(ids[1:] > ids[:-1])):
        order = np.argsort(ids, kind="stable")
        ids, tf, dl = ids[order], tf[order], dl[order]
    base = int(ids[0]) if len(ids) else 0
    return Postings(version, base, _narrow(ids - base), _narrow(tf), _narrow(dl))


def _unpack(version: str, packed: bytes) -> Postings:
    rows = np.frombuffer(packed, dtype=PACKED)
    return postings(
        version,
        rows["id"].astype(np.int64),
        rows["tf"].astype(np.int64),
        rows["dl"].astype(np.int64),
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


def _part(
    p: Postings, idf: float, k1: float, b: float, avgdl: float, at: np.ndarray | None = None
) -> np.ndarray:
    """A term's contribution to its chunks (those at positions ``at``, or all): the same
    expression, in the same order, as kb._bm25_search's SQL."""
    tf, dl = (p.tf, p.dl) if at is None else (p.tf[at], p.dl[at])
    return idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))


def _accumulate(
    postings: list[Postings],
    idfs: list[float],
    k1: float,
    b: float,
    avgdl: float,
    top_k: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(chunk ids, scores) of every chunk holding one of the terms; with ``top_k``, of
    those that can be among the top_k (every chunk scoring at least a lower bound of the
    k-th best score), which is all _ranked needs to pick the top_k."""
    lo = min(p.base for p in postings)
    where = np.concatenate([p.offsets.astype(np.int64) + (p.base - lo) for p in postings])
    parts = np.concatenate(
        [_part(p, idf, k1, b, avgdl) for p, idf in zip(postings, idfs, strict=True)]
    )
    span = int(where.max()) + 1
    if span < 4 * len(where) + 65536:  # ids close together: a dense accumulator
        acc = np.bincount(where, weights=parts, minlength=span)
        floor = None if top_k is None else _floor(acc, postings, lo, top_k)
        # Every contribution is above 0 (idf > 0, tf >= 1): a chunk is held where acc > 0.
        held = np.flatnonzero(acc) if floor is None else np.flatnonzero(acc >= floor)
        return held + lo, acc[held]
    rel, inverse = np.unique(where, return_inverse=True)
    return rel + lo, np.bincount(inverse, weights=parts)


def _floor(acc: np.ndarray, postings: list[Postings], lo: int, top_k: int) -> float | None:
    """A lower bound of the top_k-th best score in the dense accumulator ``acc``: the
    top_k-th best score among the chunks of the shortest posting list that has top_k of
    them (their sums in acc are final). None where no term has top_k chunks.

    Ranking the few chunks at or above it instead of every chunk held (~29k of 100k for
    a SciFact question), with the same chunks and scores, took ``search`` for 100
    candidates from 2.3 to 1.5 ms in the backend (A/B on the same queries)."""
    fit = [p for p in postings if len(p.offsets) >= top_k]
    if not fit:
        return None
    p = min(fit, key=lambda q: len(q.offsets))
    scores = acc[p.offsets.astype(np.int64) + (p.base - lo)]
    return float(np.partition(scores, len(scores) - top_k)[len(scores) - top_k])


PRUNE_MIN_POSTINGS = 150_000
PRUNE_TRIES = (0.1, 0.25, 0.5)


def _complete(
    ids: np.ndarray,
    scores: np.ndarray,
    terms: list[Postings],
    weights: list[float],
    k1: float,
    b: float,
    avgdl: float,
) -> np.ndarray:
    """``scores`` plus what ``terms`` give the chunks ``ids``, looked up by binary search
    in each term's sorted chunk ids."""
    scores = scores.copy()
    for p, idf in zip(terms, weights, strict=True):
        offsets = ids - p.base
        pos = np.searchsorted(p.offsets, offsets)
        inside = pos < len(p.offsets)
        hit = np.flatnonzero(inside)[p.offsets[pos[inside]] == offsets[inside]]
        scores[hit] += _part(p, idf, k1, b, avgdl, pos[hit])
    return scores


def _top(
    postings: list[Postings], idfs: list[float], k1: float, b: float, avgdl: float, top_k: int
) -> tuple[np.ndarray, np.ndarray, int]:
    """(chunk ids, scores) of the top_k, pruned (MaxScore) and exact, and how many terms
    were read whole.

    Terms in order of their bound idf·(k1+1) (no term gives a chunk more, whatever tf, dl
    and avgdl), the first e are read whole: their chunks are the candidates. A chunk
    holding none of them scores at most ``rest``, the other terms' bounds summed. The
    candidates best by what the e terms give them are scored in full (the other terms
    looked up by chunk id); the k-th best of those full scores, theta, is a lower bound
    of the final k-th score. Once rest < theta no other chunk can enter the top k, nor a
    candidate whose partial score + rest is below theta; the rest are scored in full.
    e grows until then (a few tries); otherwise every term is read whole."""
    order = sorted(range(len(idfs)), key=lambda i: -idfs[i])
    terms = [postings[i] for i in order]
    weights = [idfs[i] for i in order]
    read = np.cumsum([len(p.offsets) for p in terms])
    total = int(read[-1])
    rest = [sum(weights[i:]) * (k1 + 1) for i in range(len(weights) + 1)]
    # Each try costs a pass over the essential postings and a few lookups; below
    # PRUNE_MIN_POSTINGS scoring them all is as quick. The tries read up to 10%, 25% and
    # 50% of the postings.
    tries = sorted(
        {max(1, int(np.searchsorted(read, f * total, side="right"))) for f in PRUNE_TRIES}
    )
    for e in tries if total >= PRUNE_MIN_POSTINGS else []:
        if e >= len(terms):
            break
        ids, partial = _accumulate(terms[:e], weights[:e], k1, b, avgdl)
        if len(partial) < top_k:
            continue
        probe = _ranked(ids, partial, min(len(partial), 4 * top_k + 32))
        full = _complete(ids[probe], partial[probe], terms[e:], weights[e:], k1, b, avgdl)
        theta = float(np.partition(full, len(full) - top_k)[len(full) - top_k])
        if not rest[e] < theta:
            continue
        keep = np.flatnonzero(partial + rest[e] >= theta)
        ids = ids[keep]
        scores = _complete(ids, partial[keep], terms[e:], weights[e:], k1, b, avgdl)
        best = _ranked(ids, scores, top_k)
        return ids[best], scores[best], e
    ids, scores = _accumulate(terms, weights, k1, b, avgdl, top_k)
    best = _ranked(ids, scores, top_k)
    return ids[best], scores[best], len(terms)


def _ranked(chunk_ids: np.ndarray, scores: np.ndarray, n: int) -> np.ndarray:
    """Positions of the n best, by score descending then chunk id (the SQL order)."""
    if n < len(scores):
        kth = np.partition(scores, len(scores) - n)[len(scores) - n]
        pick = np.flatnonzero(scores >= kth)
    else:
        pick = np.arange(len(scores))
    order = np.lexsort((chunk_ids[pick], -scores[pick]))
    return pick[order[:n]]


@dataclass(frozen=True, slots=True)
class Hits:
    """kb._py_bm25_search's answer: the top chunks and their scores, best first, and
    "terms read whole/query terms" for kb.bm25_essential."""

    chunk_ids: list[int]
    scores: list[float]
    essential: str


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
    extra: dict[str, float] | None = None,
) -> Hits:
    """The top_k chunks of one index generation by BM25, as kb._bm25_search returns them.
    ``extra``: lexemes added to the query's own, each with the weight its idf is
    multiplied by (term expansion)."""
    if top_k is None or top_k < 1:
        return Hits([], [], "0/0")
    extra = extra or {}
    rows = plpy.execute(_plan(plpy, "terms"), [index_id, kb_id, query, list(extra)])
    if not rows:
        return Hits([], [], "0/0")
    n = float(rows[0]["n_chunks"])
    avgdl = float(rows[0]["total_len"]) / max(rows[0]["n_chunks"], 1)
    terms = [r for r in rows if r["lexeme"] is not None]
    if not terms:
        return Hits([], [], "0/0")
    budget = budget_mb * 1024 * 1024
    CACHE.trim(budget)  # the setting may have been lowered
    postings = _term_postings(plpy, kb_id, index_id, terms, budget)
    held = [t for t in terms if t["lexeme"] in postings]  # all of them: one snapshot
    idfs = [
        math.log(1 + (n - t["df"] + 0.5) / (t["df"] + 0.5))
        * (1.0 if t["own"] else extra[t["lexeme"]])
        for t in held
    ]
    found = [postings[t["lexeme"]] for t in held]
    if filter_json is None:
        top_ids, top_scores, read = _top(found, idfs, k1, b, avgdl, top_k)
        return Hits(top_ids.tolist(), top_scores.tolist(), f"{read}/{len(found)}")
    chunk_ids, scores = _accumulate(found, idfs, k1, b, avgdl)
    # With a filter: the best chunks in rounds (4·top_k + 64, then 4 times as many each
    # round), each round's checked in one statement, until top_k pass or none are left.
    out_ids: list[int] = []
    out_scores: list[float] = []
    done, want = 0, 4 * top_k + 64
    while done < len(scores) and len(out_ids) < top_k:
        batch = _ranked(chunk_ids, scores, min(want, len(scores)))[done:]
        ids = [int(x) for x in chunk_ids[batch]]
        passed = {r["id"] for r in plpy.execute(_plan(plpy, "filtered"), [kb_id, ids, filter_json])}
        for i, j in zip(ids, batch, strict=True):
            if i in passed:
                out_ids.append(i)
                out_scores.append(float(scores[j]))
        done, want = done + len(batch), want * 4
    return Hits(out_ids[:top_k], out_scores[:top_k], f"{len(found)}/{len(found)}")


def cache_stats(budget_mb: int) -> dict[str, Any]:
    """What this server process's term cache holds (kb.bm25_cache_stats)."""
    return {
        "terms": len(CACHE.entries),
        "megabytes": round(CACHE.nbytes / 1048576, 3),
        "hits": CACHE.hits,
        "misses": CACHE.misses,
        "budget_mb": budget_mb,
    }
