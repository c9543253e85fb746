"""directions: ranking ideas replayed offline on the four sets, each beside the defaults.

Each set's questions are searched once per channel through ``kb.search`` (method vector
and full_text, top 100, the fusion depth) and the KB's BM25 postings are read once from
``kb.posting``. A direction then rescores or refuses those lists in Python the way
``kb.search`` fuses them (z-scores, vector_weight 0.5 plus plain_query_shift 0.2 where
``kb.search`` gives it to the question) and is scored as ``kb.score_query`` scores a
documentation question (Success@1, Success@5, MRR@10, nDCG@10) and ``kbpg evaluate`` a
SciFact one (nDCG@10, documents ranked by their best chunk). The ``defaults`` row replays
``kb.search`` itself, full_text's term expansion included (the KB's words nearest the
question's embedding, read from ``kb.term_vector``): its figures are those of the docs and
quality groups. ``bm25_replay`` is the share of questions whose BM25 top 10 of the
question's own words (term_expansion 0) here is the SQL's, chunk for chunk, and
``full_text_replay`` the same for full_text as the KB's defaults run it. The BM25
directions change the question's own words' scores: their full_text compares with the row
"full_text of the query's own words". BM25 scores with kb.search's default k1 for each:
1.5 for full_text, 1.2 in the hybrid's list, unless a direction sets it.

A direction becomes a default only where it wins on all four sets; docs/performance.md
says what each gives.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from kbpg_db import config

from bench.common import say
from kbpg.evaluate import ndcg_at

DEPTH = 100  # kb.search's fusion_depth default: each channel's list is this long
B = 0.75  # kb.search's bm25_b default


@dataclass
class Question:
    text: str
    expected: list[str]  # documentation: titles or "title › section" paths; SciFact: ids
    rel: dict[str, int]  # SciFact's judgements (empty for documentation)
    terms: list[int] = field(default_factory=list)  # its lexemes the index holds
    vector: list[tuple[int, float]] = field(default_factory=list)
    full_text: list[tuple[int, float]] = field(default_factory=list)  # the SQL's BM25 list
    full_text_default: list[tuple[int, float]] = field(default_factory=list)  # expanded, if on
    vector_weight: float = 0.5  # kb.search's, plain_query_shift included
    pairs: list[tuple[int, int]] = field(default_factory=list)  # neighbouring query words
    counts: dict[int, int] = field(default_factory=dict)  # how often each term is in it
    embedding: np.ndarray | None = None  # the query's, as kb.embed_query makes it
    common: set[int] = field(default_factory=set)  # terms of its kb.common_word words
    common_20k: set[int] = field(default_factory=set)  # of its words among 20,000 tokens
    lexemes: list[str] = field(default_factory=list)  # all its lexemes, indexed or not
    terms_english: list[int] = field(default_factory=list)  # terms, with english_terms'


_TSV_ENTRY = re.compile(r"'((?:[^']|'')*)':([0-9A-D,]+)")


def tsv_positions(text: str) -> dict[str, list[int]]:
    """A tsvector's text form as lexeme -> its positions."""
    return {
        lex.replace("''", "'"): sorted(int(p.rstrip("ABCD")) for p in at.split(","))
        for lex, at in _TSV_ENTRY.findall(text)
    }


def tsv_headings(text: str) -> dict[str, int]:
    """A tsvector's text form as lexeme -> how many of its positions are weighted A (the
    chunk's heading path, kb.chunk_tsvector), for the lexemes that have any."""
    out = {lex.replace("''", "'"): at.count("A") for lex, at in _TSV_ENTRY.findall(text)}
    return {lex: n for lex, n in out.items() if n}


CALIBRATION_QUERIES = 200

# Princeton WordNet 3.0 as Debian's wordnet-base installs it (apt-get install
# wordnet-base): the synonym direction runs where it is there and is left out where not.
WORDNET = Path("/usr/share/wordnet")


@functools.cache
def _wordnet_senses() -> tuple[dict[tuple[str, str], list[str]], dict[str, list[tuple[str, str]]]]:
    """WordNet's synsets (part of speech, offset) -> their one-word lemmas, and each
    one-word lemma's first (commonest) synset of each part of speech; read once."""
    synsets: dict[tuple[str, str], list[str]] = {}
    first: dict[str, list[tuple[str, str]]] = {}
    for pos in ("noun", "verb", "adj", "adv"):
        for line in (WORDNET / f"data.{pos}").read_text(encoding="latin-1").splitlines():
            if line.startswith(" "):
                continue
            p = line.split()
            words = [p[4 + 2 * i].split("(")[0].lower() for i in range(int(p[3], 16))]
            synsets[pos, p[0]] = [w for w in words if "_" not in w]
        for line in (WORDNET / f"index.{pos}").read_text(encoding="latin-1").splitlines():
            if line.startswith(" "):
                continue
            p = line.split()
            if "_" not in p[0]:
                first.setdefault(p[0], []).append((pos, p[6 + int(p[3])]))
    return synsets, first


def wordnet_synonyms(conn: Any, cfg: dict[str, Any], index: dict[str, int]) -> dict[int, list[int]]:
    """Each KB term's WordNet synonyms among the KB's terms: the other words of the first
    (commonest) sense of each part of speech of every word the term stems from, stemmed
    with the KB's text configuration."""
    synsets, first = _wordnet_senses()
    words = sorted(set(first) | {w for ws in synsets.values() for w in ws})
    stem = {
        w: lex[0]
        for w, lex in conn.execute(
            "SELECT w, kb._config_lexemes(%s::jsonb, w) FROM unnest(%s::text[]) w",
            (json.dumps(cfg), words),
        )
        if len(lex) == 1 and lex[0] in index
    }
    out: dict[int, set[int]] = {}
    for word, senses in first.items():
        if word not in stem:
            continue
        term = index[stem[word]]
        for sense in senses:
            for other in synsets[sense]:
                if other in stem and index[stem[other]] != term:
                    out.setdefault(term, set()).add(index[stem[other]])
    return {t: sorted(ts) for t, ts in out.items()}


@dataclass(frozen=True)
class Calibration:
    """A KB's score scales: mean and standard deviation of the vector and BM25 (k1 1.2)
    scores in the channels' top 100, and of BM25's first score, over pseudo-queries."""

    vector: tuple[float, float]
    bm25: tuple[float, float]
    bm25_first: tuple[float, float]


class Replay:
    """One KB's serving index held in memory: postings by term and by chunk, and each
    chunk's title, path, document and position."""

    def __init__(self, conn: Any, kb: str, questions: list[Question], beir: bool) -> None:
        self.kb, self.beir, self.questions = kb, beir, questions
        row = conn.execute(
            "SELECT k.id, i.id, i.n_chunks, i.total_len, i.indexing_config "
            "FROM kb.knowledge_base k JOIN kb.kb_index i ON i.id = k.active_index_id "
            "WHERE k.name = %s",
            (kb,),
        ).fetchone()
        if row is None:
            raise SystemExit(f"directions: no serving index in KB {kb!r}")
        kb_id, ix, n, total, cfg = row
        self.n = n
        post = conn.execute(
            "SELECT lexeme, chunk_id, tf, dl FROM kb.posting WHERE index_id = %s AND kb_id = %s",
            (ix, kb_id),
        ).fetchall()
        self.lexemes = sorted({p[0] for p in post})
        index = {lex: i for i, lex in enumerate(self.lexemes)}
        term = np.array([index[p[0]] for p in post], dtype=np.int64)
        chunk = np.array([p[1] for p in post], dtype=np.int64)
        tf = np.array([p[2] for p in post], dtype=np.float64)
        dl = np.array([p[3] for p in post], dtype=np.float64)
        self.ids = np.unique(chunk)
        self.row = {int(c): i for i, c in enumerate(self.ids)}
        at = np.searchsorted(self.ids, chunk)
        df = np.bincount(term, minlength=len(self.lexemes))
        self.idf = np.log(1 + (n - df + 0.5) / (df + 0.5))
        self.avgdl = total / max(n, 1)
        by_term = np.argsort(term, kind="stable")
        self.term_bounds = np.searchsorted(term[by_term], np.arange(len(self.lexemes) + 1))
        self.term_rows, self.term_tf, self.term_dl = at[by_term], tf[by_term], dl[by_term]
        by_chunk = np.argsort(at, kind="stable")
        self.chunk_bounds = np.searchsorted(at[by_chunk], np.arange(len(self.ids) + 1))
        self.chunk_terms, self.chunk_tf = term[by_chunk], tf[by_chunk]
        self.dl = np.zeros(len(self.ids))
        self.dl[at] = dl
        self.title: dict[int, str] = {}
        self.path: dict[int, str] = {}
        self.place: dict[int, tuple[int, int]] = {}
        # Each chunk's word positions by term, from its tsvector (the proximity directions).
        self.positions: dict[int, dict[int, list[int]]] = {}
        # Heading words (positions weighted A), which the postings count heading_weight
        # times: the heading_weight directions count them another number of times.
        (self.heading_weight,) = conn.execute(
            "SELECT kb._heading_weight(%s::jsonb)", (json.dumps(cfg),)
        ).fetchone()
        heading: dict[int, int] = {}  # term x chunks + chunk row -> heading positions
        for cid, title, heads, doc, ordinal, tsv in conn.execute(
            "SELECT c.id, d.title, c.heading_path, c.document_id, c.ordinal, c.tsv::text "
            "FROM kb.chunk c JOIN kb.document d ON d.id = c.document_id AND d.kb_id = c.kb_id "
            "WHERE c.kb_id = %s AND c.index_id = %s",
            (kb_id, ix),
        ):
            self.title[cid] = title
            self.path[cid] = " › ".join([title, *heads])
            self.place[cid] = (doc, ordinal)
            self.positions[cid] = {
                index[x]: at for x, at in tsv_positions(tsv).items() if x in index
            }
            if cid in self.row:
                for x, n in tsv_headings(tsv).items():
                    if x in index:
                        heading[index[x] * len(self.ids) + self.row[cid]] = n
        # Aligned with term_rows: each posting's heading positions; and each chunk's.
        keys = np.fromiter(heading.keys(), np.int64, len(heading))
        counts = np.fromiter(heading.values(), np.float64, len(heading))
        order = np.argsort(keys)
        keys, counts = keys[order], counts[order]
        self.term_head = np.zeros(len(self.term_rows))
        self.head_len = np.zeros(len(self.ids))
        if len(keys):
            terms = np.repeat(np.arange(len(self.lexemes)), np.diff(self.term_bounds))
            posting = terms * len(self.ids) + self.term_rows
            found = np.searchsorted(keys, posting).clip(max=len(keys) - 1)
            hit = keys[found] == posting
            self.term_head[hit] = counts[found[hit]]
            np.add.at(self.head_len, keys % len(self.ids), counts)
        for q in questions:
            # The query's tsvector: its lexemes (kb._config_lexemes's) and their positions.
            qtsv = conn.execute(
                "SELECT kb.text_tsvector(%s::jsonb, %s)::text", (json.dumps(cfg), q.text)
            ).fetchone()
            positions = tsv_positions(qtsv[0] if qtsv else "")
            q.lexemes = sorted(positions)
            words = {index[x]: ats for x, ats in positions.items() if x in index}
            q.terms = sorted(words)
            # The lexemes kb._query_has_exact_cue takes for common English words, and
            # those of a longer list (a direction).
            (listed,) = conn.execute(
                "SELECT kb._common_lexemes(%s::jsonb, %s)", (json.dumps(cfg), q.text)
            ).fetchone()
            q.common = {index[x] for x in listed if x in index}
            longer = " ".join(w for w in re.findall(r"[A-Za-z]+", q.text) if common_word(w, 20_000))
            (listed,) = conn.execute(
                "SELECT kb._config_lexemes(%s::jsonb, %s)", (json.dumps(cfg), longer)
            ).fetchone()
            q.common_20k = {index[x] for x in listed if x in index}
            q.counts = {t: len(ats) for t, ats in words.items()}
            seq = sorted((at, t) for t, ats in words.items() for at in ats)
            q.pairs = sorted(
                {(a, b) for (i, a), (j, b) in itertools.pairwise(seq) if a != b and j - i <= 3}
            )
            # full_text of the query's own words (term_expansion 0: what BM25's replay
            # checks), and full_text as the KB's defaults run it (what term expansion's does).
            for attr, opts in (
                ("vector", {"method": "vector"}),
                ("full_text", {"method": "full_text", "term_expansion": 0}),
                ("full_text_default", {"method": "full_text"}),
            ):
                rows = conn.execute(
                    "SELECT chunk_id, score FROM kb.search(%s, %s, options => %s::jsonb)",
                    (kb, q.text, json.dumps({**opts, "top_k": DEPTH})),
                ).fetchall()
                setattr(q, attr, [(int(c), float(s)) for c, s in rows])
            used = conn.execute(
                "SELECT usage->'fusion'->>'vector_weight' FROM kb.search(%s, %s, options => "
                "%s::jsonb) LIMIT 1",
                (kb, q.text, json.dumps({"method": "hybrid", "fusion": "zscore", "top_k": 1})),
            ).fetchone()
            q.vector_weight = float(used[0]) if used and used[0] is not None else 0.5
        # Every chunk's embedding, normalised: a candidate's exact vector score (cosine,
        # as kb.vector_search scores) where only BM25 found it.
        emb = dict(
            conn.execute(
                "SELECT chunk_id, embedding::real[] FROM kb.embedding "
                "WHERE index_id = %s AND kb_id = %s",
                (ix, kb_id),
            ).fetchall()
        )
        dim = len(next(iter(emb.values())))
        self.embeddings = np.array([emb.get(int(c), [0.0] * dim) for c in self.ids])
        self.embeddings /= np.maximum(np.linalg.norm(self.embeddings, axis=1), 1e-12)[:, None]
        for q in questions:
            vec = conn.execute("SELECT kb.embed_query(%s, %s)", (kb, q.text)).fetchone()
            q.embedding = np.array(vec[0]) / max(float(np.linalg.norm(vec[0])), 1e-12)
        # Term expansion's vocabulary (kb.term_vector), built where it is not yet: each
        # word's lexeme (an index into self.lexemes) and unit vector.
        conn.execute("SELECT * FROM kb.refresh_term_vectors(%s)", (kb,)).fetchall()
        vocabulary: list[tuple[int, list[float]]] = [
            (index[lex], vec)
            for lex, vec in conn.execute(
                "SELECT lexeme, embedding::real[] FROM kb.term_vector "
                "WHERE index_id = %s AND kb_id = %s AND embedding IS NOT NULL ORDER BY lexeme",
                (ix, kb_id),
            ).fetchall()
            if lex in index
        ]
        self.word_terms = np.array([t for t, _ in vocabulary], dtype=np.int64)
        self.word_vectors = np.array([v for _, v in vocabulary], dtype=np.float64).reshape(
            len(vocabulary), -1
        )
        self.word_vectors /= np.maximum(np.linalg.norm(self.word_vectors, axis=1), 1e-12)[:, None]
        (expands,) = conn.execute(
            "SELECT kb._term_expansion(k.retrieval_config, i.indexing_config) "
            "FROM kb.knowledge_base k JOIN kb.kb_index i ON i.id = k.active_index_id "
            "WHERE k.name = %s",
            (kb,),
        ).fetchone()
        self.term_expansion = int(expands)
        self._english_vocabulary(conn, cfg, index)
        self.calibration = self._calibrate(conn, kb, ix)
        self.sections = self._section_vectors(conn, kb, kb_id, ix)
        self.synonyms = wordnet_synonyms(conn, cfg, index) if WORDNET.is_dir() else None

    def _english_vocabulary(self, conn: Any, cfg: dict[str, Any], index: dict[str, int]) -> None:
        """Document expansion's words (a direction): common English words, the words a
        paraphrase asks in, each as the KB stems it (``english_terms``, indices into
        ``lexemes``, which gains the lexemes no chunk holds) with its unit vector
        (``english_vectors``, embedded as kb.refresh_term_vectors embeds words); and each
        question's terms with those lexemes too (``Question.terms_english``). Only for a
        KB with a local model: a provider's would be asked for 8,000 words."""
        self.english_lexemes = len(self.lexemes)
        self.english_terms = np.zeros(0, dtype=np.int64)
        self.english_vectors = np.zeros((0, self.embeddings.shape[1]))
        if config.indexing_cached(cfg).embedding_model not in config.LOCAL_MODELS:
            return
        rows = conn.execute(
            "SELECT w, kb._config_lexemes(%s::jsonb, w) FROM unnest(%s::text[]) w",
            (json.dumps(cfg), list(english_words())),
        ).fetchall()
        pairs = [(w, lx[0]) for w, lx in rows if lx and len(lx) == 1]
        extra: dict[str, int] = {}
        for lx in [lx for _, lx in pairs] + [lx for q in self.questions for lx in q.lexemes]:
            if lx not in index and lx not in extra:
                extra[lx] = len(self.lexemes) + len(extra)
        self.english_lexemes = len(self.lexemes) + len(extra)
        everything = {**index, **extra}
        self.english_terms = np.array([everything[lx] for _, lx in pairs], dtype=np.int64)
        vectors = english_vectors(cfg)
        self.english_vectors = np.array([vectors[w] for w, _ in pairs])
        for q in self.questions:
            q.terms_english = sorted({everything[lx] for lx in q.lexemes})

    def _section_vectors(self, conn: Any, kb: str, kb_id: int, ix: int) -> np.ndarray:
        """Each chunk's section vector, one per section: the embedding of its heading path
        and the opening prose of its first chunk (what a reference section says it does,
        before parameter lists and examples)."""
        first: dict[str, str] = {}
        for cid, content in conn.execute(
            "SELECT id, content FROM kb.chunk WHERE kb_id = %s AND index_id = %s "
            "ORDER BY document_id, ordinal",
            (kb_id, ix),
        ):
            if cid in self.path:
                first.setdefault(self.path[cid], opening_prose(content))
        vectors = {}
        for label, lead in first.items():
            text = label.replace(" › ", " > ") + (f"\n\n{lead}" if lead else "")
            vec = conn.execute("SELECT kb.embed_query(%s, %s)", (kb, text)).fetchone()[0]
            vectors[label] = np.array(vec) / max(float(np.linalg.norm(vec)), 1e-12)
        return np.array([vectors[self.path[int(c)]] for c in self.ids])

    @staticmethod
    def _calibrate(conn: Any, kb: str, ix: int) -> Calibration:
        """The KB's own score scales, with no judgement: each channel's top 100 for
        CALIBRATION_QUERIES pseudo-queries (the first 12 words of chunks drawn by a hash of
        their ids), pooled."""
        texts = [
            " ".join(t.split()[:12])
            for (t,) in conn.execute(
                "SELECT content FROM kb.chunk WHERE index_id = %s ORDER BY md5(id::text) LIMIT %s",
                (ix, CALIBRATION_QUERIES),
            )
        ]
        pooled: dict[str, list[float]] = {"vector": [], "full_text": []}
        firsts: list[float] = []
        for text in texts:
            for method in pooled:
                scores = [
                    float(s)
                    for (s,) in conn.execute(
                        "SELECT score FROM kb.search(%s, %s, options => %s::jsonb)",
                        (
                            kb,
                            text,
                            json.dumps(
                                {"method": method, "top_k": DEPTH, "bm25_k1": config.BM25_K1}
                            ),
                        ),
                    )
                ]
                pooled[method] += scores
                if method == "full_text" and scores:
                    firsts.append(scores[0])
        spread = {m: (float(np.mean(v)), float(np.std(v)) or 1.0) for m, v in pooled.items()}
        return Calibration(
            spread["vector"],
            spread["full_text"],
            (float(np.mean(firsts)), float(np.std(firsts)) or 1.0),
        )

    def bm25(
        self, weights: dict[int, float], k1: float, b: float = B, delta: float = 0.0
    ) -> np.ndarray:
        """Every chunk's BM25 score for terms weighted ``weights`` (BM25+ with delta)."""
        postings = (self.term_bounds, self.term_rows, self.term_tf, self.term_dl, self.idf)
        return bm25_over(self, postings, weights, k1, b, delta)

    def bm25_headings(self, q: Question, k1: float, weight: int) -> np.ndarray:
        """Every chunk's BM25 score for the question's terms with its heading words
        counted ``weight`` times instead of the index's heading_weight (tf, the chunk's
        length and the average length alike, as kb.tsvector_length counts them)."""
        more = weight - self.heading_weight
        dl = self.dl + more * self.head_len
        avgdl = self.avgdl + more * float(self.head_len.sum()) / max(self.n, 1)
        out = np.zeros(len(self.ids))
        for t in q.terms:
            lo, hi = self.term_bounds[t], self.term_bounds[t + 1]
            rows = self.term_rows[lo:hi]
            tf = self.term_tf[lo:hi] + more * self.term_head[lo:hi]
            part = tf * (k1 + 1) / (tf + k1 * (1 - B + B * dl[rows] / avgdl))
            np.add.at(out, rows, self.idf[t] * part)
        return out

    def top(self, scores: np.ndarray, k: int = DEPTH) -> list[tuple[int, float]]:
        """The k best (chunk id, score), by score then chunk id as the SQL orders them."""
        k = min(k, int(np.count_nonzero(scores > 0)))
        if k == 0:
            return []
        pick = np.argpartition(-scores, k - 1)[:k]
        pick = pick[np.lexsort((self.ids[pick], -scores[pick]))]
        return [(int(self.ids[i]), float(scores[i])) for i in pick]

    def feedback(
        self, q: Question, k1: float, chunks: int, terms: int, keep: float, one_per_section: bool
    ) -> np.ndarray:
        """RM3: the first pass's best chunks (one per section or document) weighted by
        their scores; each word's share of them; the ``terms`` most likely words join the
        query, which keeps ``keep`` of the weight."""
        base = dict.fromkeys(q.terms, 1.0)
        first = self.bm25(base, k1)
        rows: list[int] = []
        seen: set[str] = set()
        for cid, _ in self.top(first, 3 * chunks):
            label = self.path[cid]
            if one_per_section and label in seen:
                continue
            seen.add(label)
            rows.append(int(np.searchsorted(self.ids, cid)))
            if len(rows) == chunks:
                break
        if not rows:
            return first
        weight = first[rows] / first[rows].sum()
        model = np.zeros(len(self.lexemes))
        for r, w in zip(rows, weight, strict=True):
            a, b = self.chunk_bounds[r], self.chunk_bounds[r + 1]
            np.add.at(model, self.chunk_terms[a:b], w * self.chunk_tf[a:b] / self.dl[r])
        best = np.argsort(-model)[:terms]
        mass = float(model[best].sum())
        weights = {t: keep for t in base}
        for t in best:
            weights[int(t)] = weights.get(int(t), 0.0) + (1 - keep) * len(base) * model[t] / mass
        return self.bm25(weights, k1)

    def proximity(
        self, q: Question, hits: list[tuple[int, float]], share: float, window: int, ordered: bool
    ) -> list[tuple[int, float]]:
        """``hits`` rescored: each gains ``share`` times, for every pair of neighbouring
        query words, the pair's mean idf times its saturated count (BM25's tf curve, k1
        1.2) of the times the two stand within ``window`` words of each other (the second
        after the first where ``ordered``)."""
        out = []
        for cid, s in hits:
            at = self.positions.get(cid, {})
            extra = 0.0
            for a, b in q.pairs:
                pa, pb = at.get(a), at.get(b)
                if not pa or not pb:
                    continue
                n = sum(
                    1
                    for x in pa
                    for y in pb
                    if (0 < y - x <= window if ordered else 0 < abs(y - x) <= window)
                )
                if n:
                    extra += (self.idf[a] + self.idf[b]) / 2 * n * 2.2 / (n + 1.2)
            out.append((cid, s + share * extra))
        return sorted(out, key=lambda x: (-x[1], x[0]))


def opening_prose(text: str, limit: int = 300) -> str:
    """A chunk's first paragraph of prose (lists, quotes, tables, headings and code left
    out), at most ``limit`` characters."""
    out: list[str] = []
    fenced = False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith(("```", "~~~")):
            fenced = not fenced
            continue
        if fenced or line.startswith(("    ", "\t")):
            continue
        if not stripped:
            if out:
                break
            continue
        if stripped.startswith(("*", "-", ">", "#", "|", "<", "+")):
            if out:
                break
            continue
        out.append(stripped)
    return " ".join(out)[:limit]


def _z(scores: list[float]) -> list[float]:
    if len(scores) < 2:
        return [0.0] * len(scores)
    mean = sum(scores) / len(scores)
    sd = math.sqrt(sum((s - mean) ** 2 for s in scores) / len(scores))
    return [(s - mean) / sd if sd else 0.0 for s in scores]


def fuse(
    vector: list[tuple[int, float]],
    text: list[tuple[int, float]],
    w: float,
    how: str,
    cal: Calibration | None = None,
) -> dict[int, float]:
    """kb.search's zscore fusion: each list's scores as z-scores, a chunk missing from a
    list one below that list's lowest. ``how`` "minmax": scores scaled to 0..1 instead, a
    miss counting as the list's lowest; "zcap": BM25's z-scores capped at 2.5; "log": the
    z-scores of ln(1 + BM25); "calibrated": standardised by the KB's score scales (``cal``)
    instead of the question's lists; "confident": BM25's weight times e^(0.25 z), z its
    first score against the KB's usual first score (within ±2); "gated": BM25's z-score
    at most 2 above the vector channel's (or above 0, whichever is more): BM25 may lift a
    candidate the vectors rank low, not crown it."""
    if how == "confident" and cal is not None and text:
        z = max(-2.0, min(2.0, (text[0][1] - cal.bm25_first[0]) / cal.bm25_first[1]))
        wt = (1 - w) * math.exp(0.25 * z)
        return fuse(vector, text, w / (w + wt), "zscore")
    if how == "calibrated" and cal is not None:
        nv = [(s - cal.vector[0]) / cal.vector[1] for _, s in vector]
        nt = [(s - cal.bm25[0]) / cal.bm25[1] for _, s in text]
        low_v = min(nv) - 1 if nv else 0.0
        low_t = min(nt) - 1 if nt else 0.0
    elif how == "minmax":
        nv, nt = (_minmax([s for _, s in x]) for x in (vector, text))
        low_v = low_t = 0.0
    else:
        nv = _z([s for _, s in vector])
        if how == "log":
            nt = _z([math.log1p(s) for _, s in text])
        else:
            nt = _z([s for _, s in text])
        if how == "zcap":
            nt = [min(z, 2.5) for z in nt]
        low_v = min(nv) - 1 if nv else 0.0
        low_t = min(nt) - 1 if nt else 0.0
    zv = dict(zip([c for c, _ in vector], nv, strict=True))
    zt = dict(zip([c for c, _ in text], nt, strict=True))
    if how == "gated":
        out = {}
        for c in {*zv, *zt}:
            v = zv.get(c, low_v)
            out[c] = w * v + (1 - w) * min(zt.get(c, low_t), max(v, 0.0) + 2.0)
        return out
    return {c: w * zv.get(c, low_v) + (1 - w) * zt.get(c, low_t) for c in {*zv, *zt}}


def fuse_complete(
    vector: list[tuple[int, float]],
    text: list[tuple[int, float]],
    w: float,
    vector_all: np.ndarray,
    text_all: np.ndarray,
    at: dict[int, int],
) -> dict[int, float]:
    """Z-score fusion over the union of the two lists, each candidate with its real score
    in both channels (standardised by each list's mean and spread) instead of a stand-in
    below the other list's last."""
    out: dict[int, float] = {}
    scales = []
    for hits in (vector, text):
        vals = [s for _, s in hits]
        mean = sum(vals) / len(vals) if vals else 0.0
        sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / len(vals)) if vals else 1.0
        scales.append((mean, sd or 1.0))
    (mv, sv), (mt, st) = scales
    listed_v, listed_t = dict(vector), dict(text)
    for c in listed_v.keys() | listed_t.keys():
        i = at.get(c)  # None: a chunk with no indexed term (its BM25 score is 0)
        v = listed_v[c] if c in listed_v else float(vector_all[i]) if i is not None else 0.0
        t = listed_t[c] if c in listed_t else float(text_all[i]) if i is not None else 0.0
        out[c] = w * (v - mv) / sv + (1 - w) * (t - mt) / st
    return out


def _minmax(scores: list[float]) -> list[float]:
    lo, hi = min(scores, default=0.0), max(scores, default=0.0)
    return [(s - lo) / (hi - lo) if hi > lo else 0.0 for s in scores]


def ranked(scores: dict[int, float]) -> list[int]:
    return sorted(scores, key=lambda c: (-scores[c], c))


def lift(replay: Replay, scores: dict[int, float], by: str, share: float) -> dict[int, float]:
    """Each candidate plus ``share`` times the best (positive) score of its neighbouring
    chunks (``by`` "neighbour": the chunks just before and after it) or of the other
    chunks of its section or document (``by`` "section", "document") among the
    candidates."""
    at = {replay.place[c]: s for c, s in scores.items()}
    group: dict[Any, list[tuple[float, int]]] = {}
    key: Callable[[int], Any] = (
        (lambda c: replay.path[c]) if by == "section" else (lambda c: replay.place[c][0])
    )
    for c, s in scores.items():
        group.setdefault(key(c), []).append((s, c))
    out = {}
    for c, s in scores.items():
        doc, pos = replay.place[c]
        if by == "neighbour":
            near = [at[(doc, pos + d)] for d in (-1, 1) if (doc, pos + d) in at]
        else:
            near = [x for x, other in group[key(c)] if other != c]
        out[c] = s + share * max(0.0, *near) if near else s
    return out


def score(replay: Replay, q: Question, order: list[int]) -> dict[str, float]:
    """kb.score_query's measures for a documentation question; nDCG@10 over documents
    ranked by their best chunk for a SciFact one."""
    if replay.beir:
        docs = list(dict.fromkeys(replay.title[c] for c in order))
        return {"ndcg@10": ndcg_at(docs, q.rel, 10)}
    found: dict[str, int] = {}
    for rank, c in enumerate(order[:10], start=1):
        title, path = replay.title[c], replay.path[c]
        for e in q.expected:
            if e not in found and (title == e or path == e or path.startswith(e + " › ")):
                found[e] = rank
    first = min(found.values(), default=None)
    ideal = sum(1 / math.log2(i + 1) for i in range(1, min(len(q.expected), 10) + 1))
    return {
        "success@1": float(first == 1),
        "success@5": float(first is not None and first <= 5),
        "mrr@10": 1 / first if first else 0.0,
        "ndcg@10": sum(1 / math.log2(r + 1) for r in found.values()) / ideal,
    }


def mean(rows: list[dict[str, float]]) -> dict[str, float]:
    return {k: round(sum(r[k] for r in rows) / len(rows), 4) for k in rows[0]}


def plain(r: Replay, q: Question, k1: float) -> np.ndarray:
    return r.bm25(dict.fromkeys(q.terms, 1.0), k1)


def by_query_count(r: Replay, q: Question, k1: float, k3: float | None) -> np.ndarray:
    """Each term weighted by how often the question says it: qtf, or (k3 + 1) qtf /
    (k3 + qtf) with k3 set (Robertson's saturation)."""
    return r.bm25(
        {t: n if k3 is None else (k3 + 1) * n / (k3 + n) for t, n in q.counts.items()}, k1
    )


def compounds_once(r: Replay, q: Question, k1: float) -> np.ndarray:
    """A hyphenated word counted once: the parser's whole compound ('tnf-alpha') is left
    out where its parts ('tnf', 'alpha') are query terms too."""
    held = {r.lexemes[t] for t in q.terms}
    keep = [
        t
        for t in q.terms
        if "-" not in r.lexemes[t] or not all(p in held for p in r.lexemes[t].split("-") if p)
    ]
    return r.bm25(dict.fromkeys(keep, 1.0), k1)


def expansion(r: Replay, q: Question, count: int, weight: float) -> dict[int, float]:
    """kb._expansion_terms: the ``count`` words nearest the question's embedding that are
    not its own terms, the nearest at ``weight`` and the others by similarity over the
    nearest's, each rarer than the question's terms on average scaled down to their mean
    idf (exact cosine here; the SQL reads an HNSW index)."""
    if not count or not len(r.word_terms) or q.embedding is None:
        return {}
    sim = r.word_vectors @ q.embedding
    own = set(q.terms)
    cap = float(np.mean(r.idf[q.terms])) if q.terms else math.inf
    out: dict[int, float] = {}
    top = None
    for j in np.argsort(-sim, kind="stable"):
        t = int(r.word_terms[j])
        if t in own:
            continue
        top = top if top is not None else float(sim[j])
        w = weight * float(sim[j]) / top * min(1.0, cap / float(r.idf[t])) if top > 0 else 0.0
        if w > 0:
            out[t] = w
        count -= 1
        if not count:
            break
    return out


def expanded(
    r: Replay, q: Question, k1: float, count: int | None = None, weight: float | None = None
) -> np.ndarray:
    """BM25 of the question's terms and its expansion's (term_expansion, 16 words at
    term_expansion_weight by default)."""
    count = config.TERM_EXPANSION if count is None else count
    weight = float(_DEFAULTS["term_expansion_weight"].default) if weight is None else weight
    return r.bm25({**dict.fromkeys(q.terms, 1.0), **expansion(r, q, count, weight)}, k1)


@functools.cache
def english_words() -> tuple[str, ...]:
    """Document expansion's vocabulary: the words of three letters or more that
    cl100k_base writes as one token among its first 30,000 (tokens.common_words)."""
    from kbpg_db import tokens

    return tuple(w for w in tokens.common_words(30_000) if len(w) >= 3)


_ENGLISH_VECTORS: dict[str, dict[str, np.ndarray]] = {}  # by embedding model


def english_vectors(indexing_config: dict[str, Any]) -> dict[str, np.ndarray]:
    """english_words' unit vectors by a KB's embedding model, embedded as
    kb.refresh_term_vectors embeds a KB's words; each model's once per run."""
    from kbpg_db import embedding

    cfg = config.indexing_cached(indexing_config)
    if cfg.embedding_model not in _ENGLISH_VECTORS:
        words = list(english_words())
        got = np.array(embedding.embed(cfg, words).vectors, dtype=np.float64)
        got /= np.maximum(np.linalg.norm(got, axis=1), 1e-12)[:, None]
        _ENGLISH_VECTORS[cfg.embedding_model] = dict(zip(words, got, strict=True))
    return _ENGLISH_VECTORS[cfg.embedding_model]


def bm25_over(
    r: Replay,
    postings: tuple[np.ndarray, ...],
    weights: dict[int, float],
    k1: float,
    b: float = B,
    delta: float = 0.0,
) -> np.ndarray:
    """Every chunk's BM25 score for terms weighted ``weights`` over ``postings``: each
    term's bounds, then each posting's chunk row, tf and chunk length, then each term's
    idf (the index's own, Replay.bm25, or document_expansion's)."""
    bounds, rows, tfs, dls, idf = postings
    out = np.zeros(len(r.ids))
    for t, w in weights.items():
        lo, hi = bounds[t], bounds[t + 1]
        tf, dl = tfs[lo:hi], dls[lo:hi]
        part = tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / r.avgdl)) + delta
        np.add.at(out, rows[lo:hi], w * idf[t] * part)
    return out


def document_expansion(r: Replay, count: int, weight: float) -> tuple[np.ndarray, ...]:
    """BM25's postings with each chunk's ``count`` English words nearest its embedding
    that it does not hold added, the nearest at ``weight`` of one occurrence and the
    others by their cosine over the nearest's (doc2query's idea, with the embedding
    model's neighbours in place of generated questions), as bm25_over reads postings.
    The chunk keeps its length and its own words their idf; an added word's idf counts
    the chunks that gained it. Built once per Replay."""
    key = (count, weight)
    cache = r.__dict__.setdefault("_document_expansions", {})
    if key in cache:
        return cache[key]
    terms, rows, tfs = [], [], []
    chunks = r.embeddings.astype(np.float32)
    words = r.english_vectors.astype(np.float32)
    for lo in range(0, len(r.ids), 1024):
        sim = chunks[lo : lo + 1024] @ words.T
        near = np.argpartition(-sim, 3 * count + 40, axis=1)[:, : 3 * count + 40]
        for i, cand in enumerate(near):
            row = lo + i
            held = set(r.chunk_terms[r.chunk_bounds[row] : r.chunk_bounds[row + 1]].tolist())
            seen: set[int] = set()
            top = None
            for j in cand[np.argsort(-sim[i, cand], kind="stable")]:
                t = int(r.english_terms[j])
                if t in seen or t in held:
                    continue
                seen.add(t)
                top = top if top is not None else float(sim[i, j])
                terms.append(t)
                rows.append(row)
                tfs.append(weight * float(sim[i, j]) / top)
                if len(seen) == count:
                    break
    own = np.repeat(np.arange(len(r.lexemes)), np.diff(r.term_bounds))
    term = np.concatenate([own, np.array(terms, dtype=np.int64)])
    order = np.argsort(term, kind="stable")
    at = np.concatenate([r.term_rows, np.array(rows, dtype=np.int64)])[order]
    tf = np.concatenate([r.term_tf, np.array(tfs)])[order]
    bounds = np.searchsorted(term[order], np.arange(r.english_lexemes + 1))
    df = np.diff(bounds).astype(np.float64)
    idf = np.log(1 + (r.n - df + 0.5) / (df + 0.5))
    idf[: len(r.lexemes)] = r.idf
    cache[key] = (bounds, at, tf, r.dl[at], idf)
    return cache[key]


def document_scores(r: Replay, q: Question, k1: float, count: int, weight: float) -> np.ndarray:
    """BM25 of the question's words over document_expansion's postings."""
    postings = document_expansion(r, count, weight)
    return bm25_over(r, postings, dict.fromkeys(q.terms_english, 1.0), k1)


@dataclass(frozen=True)
class Direction:
    """A change to the defaults: the question's BM25 scores (given the default k1 of the
    method), the fusion and its depth, and a lift of candidates by the chunks around them."""

    label: str
    bm25: Callable[[Replay, Question, float], np.ndarray] = plain
    fusion: str = "zscore"
    depth: int = DEPTH
    lift: tuple[str, float] | None = None
    proximity: tuple[float, int, bool] | None = None  # Replay.proximity's share, window, ordered
    weight: Callable[[Replay, Question], float] | None = None  # the question's vector weight
    section_vector: float = 0.0  # the vector list rescored: cosine + this x section cosine
    needs_wordnet: bool = False  # left out where WordNet is not installed
    needs_english: bool = False  # left out where the KB has no local model (english_words)
    # full_text's scores where they are not ``bm25``'s (the defaults: term expansion)
    full_text: Callable[[Replay, Question, float], np.ndarray] | None = None


_DEFAULTS = config.RetrievalConfig.model_fields
_CUE_NO_ACRONYM = re.compile(r"\w_\w|\w\.\w|\w\(|[a-z][A-Z]|--\w")
_CUE = re.compile(r"\w_\w|\w\.\w|\w\(|[a-z][A-Z]|--\w|\b[A-Z]{2,}\b")


def _rare(r: Replay, q: Question, common: set[int]) -> bool:
    """Whether a term of the question outside ``common`` is in few chunks (idf at least
    0.8 of ln(chunks)), as kb._query_has_exact_cue decides."""
    return any(r.idf[t] >= 0.8 * math.log(max(r.n, 2)) for t in q.terms if t not in common)


def _cue_weight(cue: bool) -> float:
    w = float(_DEFAULTS["vector_weight"].default)
    return w if cue else min(1.0, w + float(_DEFAULTS["plain_query_shift"].default))


def weight_without_acronyms(r: Replay, q: Question) -> float:
    """kb._query_has_exact_cue less its acronym rule: an acronym leans on BM25 only where
    it is a rare term, as any word is."""
    return _cue_weight(_rare(r, q, q.common) or bool(_CUE_NO_ACRONYM.search(q.text)))


def weight_every_rare_term(r: Replay, q: Question) -> float:
    """kb._query_has_exact_cue before kb.common_word: every rare term is a cue."""
    return _cue_weight(_rare(r, q, set()) or bool(_CUE.search(q.text)))


def weight_rare_not_common_20k(r: Replay, q: Question) -> float:
    """kb._query_has_exact_cue with a longer list of common words (20,000 tokens)."""
    return _cue_weight(_rare(r, q, q.common_20k) or bool(_CUE.search(q.text)))


def common_word(word: str, rank: int) -> bool:
    """A common English word by kbpg_db.tokens.common_words's rule, among ``rank`` tokens."""
    return word.lower() in _common_words(rank)


@functools.cache
def _common_words(rank: int) -> frozenset[str]:
    from kbpg_db import tokens

    return frozenset(tokens.common_words(rank))


def weight_rare_half_cue(r: Replay, q: Question) -> float:
    """kb._query_has_exact_cue's identifiers and acronyms keep vector_weight, a query whose
    only cue is a rare term gets half of plain_query_shift, a plain one all of it."""
    w = float(_DEFAULTS["vector_weight"].default)
    shift = float(_DEFAULTS["plain_query_shift"].default)
    if _CUE.search(q.text):
        return w
    return min(1.0, w + (shift / 2 if _rare(r, q, q.common) else shift))


def with_sections(r: Replay, q: Question, share: float) -> list[tuple[int, float]]:
    """The vector list rescored: each candidate's cosine plus ``share`` times its
    section vector's."""
    assert q.embedding is not None
    at = r.row
    out = [
        (c, s + share * float(r.sections[at[c]] @ q.embedding)) if c in at else (c, s)
        for c, s in q.vector
    ]
    return sorted(out, key=lambda x: (-x[1], x[0]))


def weight_on_disagreement(r: Replay, q: Question, shift: float, depth: int = 10) -> float:
    """The question's vector weight, ``shift`` more where the two channels' first ``depth``
    results share no section (one of them has missed; BM25 more often, on paraphrases)."""
    text = {r.path[c] for c, _ in r.top(plain(r, q, config.BM25_K1), depth)}
    vector = {r.path.get(c) for c, _ in q.vector[:depth]}
    return q.vector_weight if text & vector else min(1.0, q.vector_weight + shift)


def idf_share(r: Replay, q: Question, chunk: int) -> float:
    """The share of the question's terms, each weighted by its idf, that a chunk holds
    (0 for a question with no indexed term)."""
    total = sum(r.idf[t] for t in q.terms)
    if total <= 0:
        return 0.0
    held = r.positions.get(chunk, {})  # the chunk's terms
    return float(sum(r.idf[t] for t in q.terms if t in held) / total)


def weight_by_coverage(r: Replay, q: Question, below: float) -> float:
    """The question's vector weight, 0.2 more where BM25's first hit (the hybrid's list)
    holds less than ``below`` of the question's terms, each weighted by its idf: BM25
    matched a few of its words, not what it asks."""
    top = r.top(plain(r, q, config.BM25_K1), 1)
    if not top or not q.terms:
        return q.vector_weight
    share = idf_share(r, q, top[0][0])
    return min(1.0, q.vector_weight + 0.2) if share < below else q.vector_weight


def with_synonyms(r: Replay, q: Question, k1: float, share: float) -> np.ndarray:
    """BM25 for the question's terms and, at ``share`` of a term's weight, their WordNet
    synonyms (wordnet_synonyms) that the question does not say."""
    weights = dict.fromkeys(q.terms, 1.0)
    for t in q.terms:
        for other in (r.synonyms or {}).get(t, []):
            weights.setdefault(other, share)
    return r.bm25(weights, k1)


DIRECTIONS = [
    # kb.search's defaults: full_text expands where the KB does (a local model), hybrid's
    # BM25 list never does.
    Direction("defaults", full_text=lambda r, q, k1: expanded(r, q, k1, r.term_expansion)),
    # The baseline of the BM25 directions below, whose full_text is the query's words.
    Direction("full_text of the query's own words (term_expansion 0)"),
    Direction(
        "term expansion in hybrid's BM25 list too (16 words at 0.3)",
        lambda r, q, k1: expanded(r, q, k1, config.TERM_EXPANSION),
    ),
    Direction(
        "term expansion in hybrid's BM25 list for a question with an exact cue only",
        lambda r, q, k1: expanded(r, q, k1, config.TERM_EXPANSION if q.vector_weight <= 0.5 else 0),
    ),
    Direction(
        "the same at 0.1 of a word's weight",
        lambda r, q, k1: expanded(
            r, q, k1, config.TERM_EXPANSION if q.vector_weight <= 0.5 else 0, 0.1
        ),
    ),
    Direction(
        "document expansion: each chunk's 10 nearest English words it lacks, at 0.3",
        lambda r, q, k1: document_scores(r, q, k1, 10, 0.3),
        needs_english=True,
    ),
    Direction(
        "document expansion: each chunk's 5 nearest English words it lacks, at 0.3",
        lambda r, q, k1: document_scores(r, q, k1, 5, 0.3),
        needs_english=True,
    ),
    Direction("fusion depth 50", depth=50),
    Direction("min-max fusion", fusion="minmax"),
    Direction("BM25 z-scores capped at 2.5", fusion="zcap"),
    Direction(
        "plain_query_shift also for a query whose only cue is a common acronym",
        weight=weight_without_acronyms,
    ),
    Direction("fusion calibrated on the KB's score scales", fusion="calibrated"),
    Direction("BM25's weight by its first score against the KB's usual", fusion="confident"),
    Direction("z-scores of ln(1 + BM25)", fusion="log"),
    Direction("BM25's z-score at most 2 above the vector channel's", fusion="gated"),
    Direction("each candidate's real score in both channels", fusion="complete"),
    Direction(
        "every rare term is an exact cue, common English words too (the rule before)",
        weight=weight_every_rare_term,
    ),
    Direction(
        "a rare term is an exact cue only if it is none of the 20,000 commonest words",
        weight=weight_rare_not_common_20k,
    ),
    Direction(
        "vector weight 0.2 more where the channels' first 10 share no section",
        weight=lambda r, q: weight_on_disagreement(r, q, 0.2),
    ),
    Direction(
        "vector weight 0.2 more where the channels' first 5 share no section",
        weight=lambda r, q: weight_on_disagreement(r, q, 0.2, 5),
    ),
    Direction(
        "vector weight 0.1 more for every question (0.6, 0.8 with plain_query_shift)",
        weight=lambda r, q: min(1.0, q.vector_weight + 0.1),
    ),
    Direction(
        "a rare term alone is half a cue (vector weight 0.6; 0.5 with an identifier)",
        weight=weight_rare_half_cue,
    ),
    Direction("section vectors: + 0.2 of the section's cosine", section_vector=0.2),
    Direction("section vectors: + 0.5 of the section's cosine", section_vector=0.5),
    Direction(
        "vector weight 0.2 more where BM25's first hit holds under 0.4 of the question's idf",
        weight=lambda r, q: weight_by_coverage(r, q, 0.4),
    ),
    Direction("BM25 k1 1.2 for both", lambda r, q, k1: plain(r, q, 1.2)),
    Direction("BM25 k1 1.5 for both", lambda r, q, k1: plain(r, q, 1.5)),
    Direction(
        "BM25 k1 0.9, b 0.4 for both",
        lambda r, q, k1: r.bm25(dict.fromkeys(q.terms, 1.0), 0.9, 0.4),
    ),
    Direction(
        "BM25 b 0.6 for both",
        lambda r, q, k1: r.bm25(dict.fromkeys(q.terms, 1.0), k1, 0.6),
    ),
    Direction(
        "BM25 b 0.9 for both",
        lambda r, q, k1: r.bm25(dict.fromkeys(q.terms, 1.0), k1, 0.9),
    ),
    Direction(
        "BM25 query terms weighted by how often the question says them",
        lambda r, q, k1: by_query_count(r, q, k1, None),
    ),
    Direction(
        "BM25 query terms weighted by their saturated count (k3 1.2)",
        lambda r, q, k1: by_query_count(r, q, k1, 1.2),
    ),
    Direction("BM25 hyphenated words counted once (their parts only)", compounds_once),
    Direction(
        "BM25+ (delta 0.25)",
        lambda r, q, k1: r.bm25(dict.fromkeys(q.terms, 1.0), k1, delta=0.25),
    ),
    Direction(
        "BM25 heading_weight 1 (headings as body text)",
        lambda r, q, k1: r.bm25_headings(q, k1, 1),
    ),
    Direction("BM25 heading_weight 3", lambda r, q, k1: r.bm25_headings(q, k1, 3)),
    Direction(
        "BM25 with WordNet synonyms (first senses), each at 0.2",
        lambda r, q, k1: with_synonyms(r, q, k1, 0.2),
        needs_wordnet=True,
    ),
    Direction(
        "BM25 with WordNet synonyms (first senses), each at 0.5",
        lambda r, q, k1: with_synonyms(r, q, k1, 0.5),
        needs_wordnet=True,
    ),
    Direction(
        "RM3: 10 chunks, 10 words, query keeps 0.5",
        lambda r, q, k1: r.feedback(q, k1, 10, 10, 0.5, one_per_section=False),
    ),
    Direction(
        "RM3: 10 sections, 10 words, query keeps 0.9",
        lambda r, q, k1: r.feedback(q, k1, 10, 10, 0.9, one_per_section=True),
    ),
    Direction(
        "proximity: query word pairs within 8 words, + 0.1 (BM25's top 100 rescored)",
        proximity=(0.1, 8, False),
    ),
    Direction(
        "proximity: query word pairs as a phrase, + 0.25 (BM25's top 100 rescored)",
        proximity=(0.25, 1, True),
    ),
    Direction("neighbours: + 0.1 of the better neighbour's score", lift=("neighbour", 0.1)),
    Direction("section: + 0.1 of its section's best other chunk", lift=("section", 0.1)),
    Direction("document: + 0.1 of its document's best other chunk", lift=("document", 0.1)),
]


# The vector weights a question may be given where the weight is chosen per question.
WEIGHTS = (0.3, 0.5, 0.7, 0.85, 1.0)
LEARNED = "vector weight per question, learned on the other three sets (ridge over 11 signals)"
ORACLE = "each question's best vector weight of 0.3 to 1.0 (a bound, not a method)"
# A KB's own calibration: vector_weight and plain_query_shift chosen on a test set.
TUNING = [(w / 10, shift) for w in range(3, 11) for shift in (0.0, 0.1, 0.2, 0.3, 0.5)]
TUNED = (
    "vector_weight and plain_query_shift tuned on half the questions (a KB's own test set), "
    "scored on the other half (10 splits)"
)
# Every vector weight a question is scored at: WEIGHTS and what TUNING's pairs give it.
ALL_WEIGHTS = sorted(
    {*WEIGHTS, *(w for w, _ in TUNING), *(min(1.0, round(w + s, 2)) for w, s in TUNING)}
)


@dataclass
class WeightCase:
    """One question's signals for choosing its vector weight, and its hybrid figures at
    each of WEIGHTS and each weight TUNING gives it (the defaults' lists and fusion)."""

    signals: np.ndarray
    by_weight: dict[float, dict[str, float]]
    key: str  # the measure the choice is fitted to: MRR@10, SciFact's nDCG@10

    def best(self) -> dict[str, float]:
        """The figures at the weight of WEIGHTS that scores best on ``key``."""
        return max((self.by_weight[w] for w in WEIGHTS), key=lambda m: m[self.key])

    def at(self, weight: float, shift: float) -> dict[str, float]:
        """The figures under kb.search's rule: ``shift`` more for a question with no cue."""
        return self.by_weight[min(1.0, round(weight + shift, 2)) if self.signals[0] else weight]


def weight_case(r: Replay, q: Question) -> WeightCase:
    """The signals a per-question weight could read at query time: whether the question
    has an exact cue, the vector channel's first cosine and its lead over the fifth and
    its first z-score, BM25's first z-score, the share of the question's idf that BM25's
    and the vectors' first hits hold, the sections the channels' first 5 share, the
    documents their first 10 share, the question's length, and whether both channels put
    the same chunk first."""
    channel = r.top(plain(r, q, config.BM25_K1))
    cosines = [s for _, s in q.vector]
    zt = _z([s for _, s in channel]) or [0.0]
    zv = _z(cosines) or [0.0]
    sections = len({r.path.get(c) for c, _ in q.vector[:5]} & {r.path[c] for c, _ in channel[:5]})
    docs = len(
        {r.place[c][0] for c, _ in q.vector[:10] if c in r.place}
        & {r.place[c][0] for c, _ in channel[:10]}
    )
    signals = np.array(
        [
            float(q.vector_weight > 0.5),
            cosines[0] if cosines else 0.0,
            cosines[0] - cosines[min(4, len(cosines) - 1)] if cosines else 0.0,
            zv[0],
            zt[0],
            idf_share(r, q, channel[0][0]) if channel else 0.0,
            idf_share(r, q, q.vector[0][0]) if q.vector else 0.0,
            sections / 5,
            docs / 10,
            min(len(q.terms), 12) / 12,
            float(bool(channel and q.vector) and channel[0][0] == q.vector[0][0]),
        ]
    )
    by_weight = {w: score(r, q, ranked(fuse(q.vector, channel, w, "zscore"))) for w in ALL_WEIGHTS}
    return WeightCase(signals, by_weight, "ndcg@10" if r.beir else "mrr@10")


def weights_per_question(cases: dict[str, list[WeightCase]]) -> dict[str, dict[str, Any]]:
    """Two rows per set: the vector weight chosen per question by ridge regressions
    fitted on the other sets (one per weight of WEIGHTS, predicting its gain over 0.7 on
    the set's measure; each set weighs the same in the fit), and each question's best
    weight, the most any choice of weight per question could give."""
    out: dict[str, dict[str, Any]] = {}
    for held_out, mine in cases.items():
        train = [(c, 1 / len(cs)) for name, cs in cases.items() if name != held_out for c in cs]
        x = np.array([c.signals for c, _ in train])
        mu, sd = x.mean(axis=0), x.std(axis=0) + 1e-9
        x = np.c_[(x - mu) / sd, np.ones(len(x))]
        sw = np.array([share for _, share in train])
        gram = x.T @ (x * sw[:, None]) + 0.01 * np.eye(x.shape[1])
        fits = np.array(
            [
                np.linalg.solve(
                    gram,
                    x.T
                    @ (
                        sw
                        * np.array(
                            [c.by_weight[w][c.key] - c.by_weight[0.7][c.key] for c, _ in train]
                        )
                    ),
                )
                for w in WEIGHTS
            ]
        )
        chosen = [WEIGHTS[int(np.argmax(fits @ np.r_[(c.signals - mu) / sd, 1.0]))] for c in mine]
        out[held_out] = {
            LEARNED: {"hybrid": mean([c.by_weight[w] for c, w in zip(mine, chosen, strict=True)])},
            ORACLE: {"hybrid": mean([c.best() for c in mine])},
            TUNED: {"hybrid": tuned_on_half(mine)},
        }
    return out


def tuned_on_half(cases: list[WeightCase], splits: int = 10) -> dict[str, float]:
    """The figures of a KB tuned on its own test set: the pair of TUNING that scores best
    on a random half of the questions (the defaults on a tie), scored on the other half;
    the mean over ``splits`` random splits, each half in turn."""
    rng = np.random.default_rng(0)
    default = (_DEFAULTS["vector_weight"].default, _DEFAULTS["plain_query_shift"].default)
    rows: list[dict[str, float]] = []
    for _ in range(splits):
        order = rng.permutation(len(cases))
        halves = (order[: len(order) // 2], order[len(order) // 2 :])
        for fit, held in (halves, halves[::-1]):
            pick = max(
                TUNING,
                key=lambda p: (
                    sum(cases[i].at(*p)[cases[i].key] for i in fit),
                    p == default,
                ),
            )
            rows.append(mean([cases[i].at(*pick) for i in held]))
    return mean(rows)


def replay_set(replay: Replay, cases: list[WeightCase] | None = None) -> dict[str, Any]:
    """Every direction's figures on one set; ``cases`` (where given) gets each question's
    WeightCase for weights_per_question."""
    out: dict[str, Any] = {"questions": len(replay.questions)}
    if cases is not None:
        cases.extend(weight_case(replay, q) for q in replay.questions)
    for d in DIRECTIONS:
        if (d.needs_wordnet and replay.synonyms is None) or (
            d.needs_english and not len(replay.english_terms)
        ):
            continue
        text_rows, vector_rows, hybrid_rows = [], [], []
        same = same_expanded = 0
        for q in replay.questions:
            text = replay.top((d.full_text or d.bm25)(replay, q, config.BM25_K1_FULL_TEXT))
            if d.label == "defaults":
                # The replay's BM25 and expansion against the SQL's lists, top 10 each.
                mine = replay.top(plain(replay, q, config.BM25_K1_FULL_TEXT))
                same += [c for c, _ in mine[:10]] == [c for c, _ in q.full_text[:10]]
                same_expanded += [c for c, _ in text[:10]] == [
                    c for c, _ in q.full_text_default[:10]
                ]
            channel = replay.top(d.bm25(replay, q, config.BM25_K1))
            if d.proximity:
                text = replay.proximity(q, text, *d.proximity)
                channel = replay.proximity(q, channel, *d.proximity)
            text_scores = dict(text)
            w = d.weight(replay, q) if d.weight else q.vector_weight
            vector = with_sections(replay, q, d.section_vector) if d.section_vector else q.vector
            vector_rows.append(score(replay, q, [c for c, _ in vector]))
            if d.fusion == "complete":
                hybrid = fuse_complete(
                    q.vector[: d.depth],
                    channel[: d.depth],
                    w,
                    replay.embeddings @ q.embedding,
                    d.bm25(replay, q, config.BM25_K1),
                    replay.row,
                )
            else:
                hybrid = fuse(
                    vector[: d.depth], channel[: d.depth], w, d.fusion, replay.calibration
                )
            if d.lift:
                text_scores = lift(replay, text_scores, *d.lift)
                hybrid = lift(replay, hybrid, *d.lift)
            text_rows.append(score(replay, q, ranked(text_scores)))
            hybrid_rows.append(score(replay, q, ranked(hybrid)))
        out[d.label] = {"full_text": mean(text_rows), "hybrid": mean(hybrid_rows)}
        if d.section_vector or d.label == "defaults":
            out[d.label]["vector"] = mean(vector_rows)
        if d.label == "defaults":
            out["bm25_replay"] = round(same / len(replay.questions), 3)
            out["full_text_replay"] = round(same_expanded / len(replay.questions), 3)
    return out


def bench_directions(dsn: str, quick: bool) -> dict[str, Any]:
    """The directions of DIRECTIONS on data/docs-pg, data/docs-python and SciFact's test
    split (the KBs the docs and quality groups build, built here where missing)."""
    import psycopg

    from bench.docs import DOCS_SETS, docs_questions, ensure_docs_kb
    from bench.quality import scifact_set
    from kbpg.client import Client
    from kbpg.evaluate import EVAL_CONFIG, ensure_loaded

    out: dict[str, Any] = {
        "workload": "each set's vector and BM25 top 100 from kb.search and its postings, "
        "rescored and fused offline (zscore, vector_weight 0.5, plain_query_shift 0.2) per "
        "direction; documentation: Success@1/@5, MRR@10, nDCG@10; SciFact: nDCG@10"
    }
    sets: list[tuple[str, str, list[Question], bool]] = []
    for name in DOCS_SETS:
        ensure_docs_kb(dsn, name)
        qs = [Question(d["query"], d["expected"], {}) for d in docs_questions(name)]
        sets.append((name, f"bench-{name}", qs, False))
    data, kb = scifact_set(quick)
    with Client(dsn) as client:
        ensure_loaded(client, dsn, kb, data, concurrency=2, indexing_config=EVAL_CONFIG)
    qs = [Question(text, [], data.qrels[qid]) for qid, text in data.queries.items()]
    sets.append(("scifact", kb, qs, True))
    cases: dict[str, list[WeightCase]] = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name, kb, qs, beir in sets:
            say(f"directions: reading {kb} ({len(qs)} questions)")
            out[name] = replay_set(Replay(conn, kb, qs, beir), cases.setdefault(name, []))
    for name, rows in weights_per_question(cases).items():
        out[name].update(rows)
    return out
