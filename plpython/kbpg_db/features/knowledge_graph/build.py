"""The knowledge-graph index of a ChunkEmbed document: its vertices and edges.

Three graphs share one build path and one pair of tables (kb.graph_node, kb.graph_edge,
written by kb._store_knowledge_graph):

- document: the document -include-> its top chunks, a chunk -include-> the chunks of the
  sections nested under its own, and chunk -next-> chunk in reading order;
- heading: a Markdown document -contains-> its H1s -contains-> H2s ..., from the headings
  outside fenced code;
- code: a source file -defines-> its definitions, with calls, imports, inherits and
  implements (``code_graph``).

Every vertex names the chunk that holds it, so a graph answer cites text.
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Callable
from typing import Any

from kbpg_db import chunking, code_graph, embedding, tokens
from kbpg_db.config import IndexingConfig
from kbpg_db.features import StrategyError
from kbpg_db.llm import Llm, Request


def code_source(title: str, metadata: dict[str, Any]) -> tuple[str, str] | None:
    """(path, language) when a document is a source file: its metadata ``path`` (what
    ``kbpg ingest`` sets) or its title ends like one, or its metadata names the language."""
    path = str(metadata.get("path") or title)
    language = metadata.get("language")
    if isinstance(language, str) and language in code_graph.LANGUAGES:
        return path, language
    found = code_graph.language_of(path)
    return (path, found) if found else None


def definition_tree(graph: code_graph.CodeGraph) -> list[chunking.Definition]:
    """The file's definitions nested as declared, for chunking at their boundaries."""
    by_id = {
        v.local_id: chunking.Definition(v.start_char, v.end_char, f"{v.kind} {v.name}")
        for v in graph.definitions()
    }
    top: list[chunking.Definition] = []
    for container, child in graph.defines:
        if child not in by_id:
            continue
        (by_id[container].children if container in by_id else top).append(by_id[child])
    return top


def _chunk_at(rows: list[dict[str, Any]], offset: int) -> int | None:
    """The ordinal of the chunk holding a character offset (the next one in a gap)."""
    starts = [r["char_start"] for r in rows]
    i = bisect.bisect_right(starts, offset) - 1
    if i >= 0 and offset < rows[i]["char_end"]:
        return int(rows[i]["ordinal"])
    if i + 1 < len(rows):
        return int(rows[i + 1]["ordinal"])
    return int(rows[-1]["ordinal"]) if rows else None


class _Graph:
    def __init__(self) -> None:
        self.nodes: list[dict[str, Any]] = []
        self.edges: list[dict[str, Any]] = []

    def node(self, graph: str, kind: str, name: str, qualified: str, **more: Any) -> int:
        local = len(self.nodes)
        self.nodes.append(
            {
                "local_id": local,
                "graph": graph,
                "kind": kind,
                "name": name[:1000],
                "qualified_name": qualified[:2000],
                **more,
            }
        )
        return local

    def edge(self, source: int, kind: str, target: int | None, **more: Any) -> None:
        self.edges.append({"source": source, "kind": kind, "target": target, **more})


KNOWN_ENTITIES = """
    SELECT n.qualified_name AS key, min(n.name) AS name, min(n.properties->>'type') AS type,
           min(left(c.content, 600)) AS context, (array_agg(n.embedding::text))[1] AS vector,
           (SELECT m.other_key FROM kb.graph_entity_merge m
             WHERE m.kb_id = $3 AND m.index_id = $1 AND m.key = n.qualified_name
               AND m.merged) AS canonical
      FROM kb.graph_node n LEFT JOIN kb.chunk c ON c.kb_id = $3 AND c.id = n.chunk_id
     WHERE n.kb_id = $3 AND n.index_id = $1 AND n.graph = 'triplets' AND n.kind = 'entity' AND n.path <> $2
     GROUP BY n.qualified_name
"""


def build(
    title: str,
    content: str,
    metadata: dict[str, Any],
    cfg: IndexingConfig,
    rows: list[dict[str, Any]],
    code: code_graph.CodeGraph | None,
    ctx: Any = None,
) -> dict[str, Any]:
    """The document's graphs as kb._store_knowledge_graph's artifacts; vertices and edges
    name chunks by ordinal and one another by local id. The triplet graph asks the LLM
    (``ctx.llm``) about every chunk, then about candidate duplicate entities."""
    wanted = set(cfg.knowledge_graph.graphs)
    g = _Graph()
    doc = g.node(
        "document",
        "document",
        title,
        title,
        path=metadata.get("path") or title,
        chunk=rows[0]["ordinal"] if rows else None,
    )
    if "document" in wanted:
        first_of: dict[tuple[str, ...], int] = {}  # a section's first chunk
        previous: int | None = None
        for r in rows:
            path = tuple(r["heading_path"] or ())
            name = chunking.HEADING_SEPARATOR.join(path) or f"chunk {r['ordinal']}"
            n = g.node(
                "document",
                "chunk",
                name,
                f"{title} #{r['ordinal']}",
                path=metadata.get("path") or title,
                chunk=r["ordinal"],
                properties={"ordinal": r["ordinal"], "page": r.get("page")},
            )
            # A section's first chunk includes the rest of the section and the first
            # chunks of the sections nested in it; the document includes the others.
            parent = first_of.get(path)
            if parent is None:
                parent = next(
                    (
                        first_of[path[:k]]
                        for k in range(len(path) - 1, 0, -1)
                        if path[:k] in first_of
                    ),
                    doc,
                )
                first_of[path] = n
            g.edge(parent, "include", n)
            if previous is not None:
                g.edge(previous, "next", n)
            previous = n
    if "heading" in wanted and code is None:
        stack: list[tuple[int, int]] = []  # (level, node) of the open headings
        line_starts = [0] + [i + 1 for i, ch in enumerate(content) if ch == "\n"]
        for offset, level, heading in chunking.markdown_headings(content):
            while stack and stack[-1][0] >= level:
                stack.pop()
            qualified = chunking.HEADING_SEPARATOR.join(
                [g.nodes[n]["name"] for _, n in stack] + [heading]
            )
            n = g.node(
                "heading",
                "heading",
                heading,
                qualified,
                path=metadata.get("path") or title,
                start_line=bisect.bisect_right(line_starts, offset),
                chunk=_chunk_at(rows, offset),
                properties={"level": level},
            )
            g.edge(stack[-1][1] if stack else doc, "contains", n)
            stack.append((level, n))
    if "code" in wanted and code is not None:
        local: dict[int, int] = {}
        for v in code.vertices:
            local[v.local_id] = g.node(
                "code",
                v.kind,
                v.name,
                v.qualified_name,
                path=code.path,
                module=code.module,
                language=code.language,
                member_of=v.member_of,
                start_line=v.start_line,
                end_line=v.end_line,
                chunk=_chunk_at(rows, v.start_char),
                properties={
                    "signature": v.signature,
                    "parser": code.parser,
                    **(
                        {"repository": metadata["repository"]} if metadata.get("repository") else {}
                    ),
                },
            )
        if metadata.get("repository"):
            repo = str(metadata["repository"])
            top = g.node(
                "code",
                "repository",
                repo,
                repo,
                path=code.path,
                chunk=rows[0]["ordinal"] if rows else None,
            )
            g.edge(top, "contains", local[0])
        for container, child in code.defines:
            g.edge(local[container], "defines", local[child])
        for ref in code.references:
            g.edge(
                local[ref.source],
                ref.kind,
                local[ref.target] if ref.target is not None else None,
                target_name=ref.target_name,
                target_modules=ref.modules,
                qualifier=ref.qualifier,
                line=ref.line,
                confidence=ref.confidence,
                resolution=ref.resolution,
            )
    merges: list[dict[str, Any]] = []
    spent: dict[str, Any] = {"tokens": 0, "cost_usd": 0.0}
    if "triplets" in wanted and rows:
        settings = cfg.knowledge_graph
        llm = ctx.llm.with_model(None) if ctx is not None and ctx.llm is not None else None
        if llm is None:
            raise StrategyError("the triplet graph needs the knowledge graph's LLM")
        found = extract_triplets(
            llm, title, rows, settings.max_triplets_per_chunk,
            ctx.stage("extracting triplets", len(rows)),
        )  # fmt: skip
        mine = triplet_graph(g, doc, title, rows, found)
        # Entity names embedded with the KB's model: similar meanings become merge
        # candidates, and the query vector finds entities by it.
        entities = [v for v in g.nodes if v["kind"] == "entity"]
        if entities:
            ctx.report(f"embedding {len(entities)} entity names")
            names = [v["name"] for v in entities]
            got = embedding.embed(cfg, names, ctx.embedding_key, [tokens.count(x) for x in names])
            for vertex, vec in zip(entities, got.vectors, strict=True):
                vertex["embedding"] = [round(float(x), 6) for x in vec]
                mine[vertex["qualified_name"]]["vector"] = vertex["embedding"]
            spent = {"tokens": got.tokens, "cost_usd": got.cost_usd}
        known: dict[str, dict[str, Any]] = {}
        if ctx.query is not None and ctx.index_id is not None and ctx.kb_id is not None:
            sql = (KNOWN_ENTITIES, ["bigint", "text", "integer"])
            for r in ctx.query(sql, [ctx.index_id, title, ctx.kb_id]):
                known[r["key"]] = {**r, "vector": json.loads(r["vector"]) if r["vector"] else None}
        llm.progress = ctx.stage("comparing entities")
        merges = merge_decisions(mine, known, settings, llm)
    return {"graph": {"nodes": g.nodes, "edges": g.edges, "merges": merges}, "embedded": spent}


# --- the triplet graph ------------------------------------------------------------------------
TRIPLETS_SCHEMA = {
    "type": "object",
    "properties": {
        "triplets": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "subject": {"type": "string"},
                    "subject_type": {"type": "string"},
                    "predicate": {"type": "string"},
                    "object": {"type": "string"},
                    "object_type": {"type": "string"},
                },
                "required": ["subject", "subject_type", "predicate", "object", "object_type"],
            },
        }
    },
    "required": ["triplets"],
}
_TRIPLET_FIELDS = ("subject", "subject_type", "predicate", "object", "object_type")
MERGE_SCHEMA = {
    "type": "object",
    "properties": {"same": {"type": "boolean"}, "reason": {"type": "string"}},
    "required": ["same", "reason"],
}
CHUNK_TOKENS = 3000  # of a chunk's text the triplet prompt shows, at most
# Legal-form words that do not change which organisation a name means.
_LEGAL = {
    "inc", "incorporated", "ltd", "limited", "llc", "llp", "corp", "corporation", "gmbh",
    "plc", "ag", "sa", "sas", "bv", "nv", "pty", "oy", "ab", "kk",
}  # fmt: skip
# Entity types that name the same kind of thing.
_TYPE_GROUPS = {
    "organization": {
        "organization", "organisation", "company", "corporation", "firm", "business",
        "startup", "org", "enterprise", "institution",
    },
    "person": {"person", "people", "individual", "human", "researcher", "author"},
    "place": {"place", "location", "city", "country", "region", "area"},
    "product": {"product", "service", "tool", "software", "application", "app"},
    "concept": {"concept", "idea", "notion", "topic", "technique", "method"},
}  # fmt: skip
_TYPE_OF = {word: group for group, words in _TYPE_GROUPS.items() for word in words}


def _words(text: str) -> list[str]:
    import unicodedata

    folded = unicodedata.normalize("NFKC", text).casefold()
    return re.sub(r"[^\w]+", " ", folded).split()


def name_key(name: str) -> str:
    """An entity name compared across chunks and documents: case, whitespace and
    punctuation folded, a trailing legal form dropped (``Anthropic, Inc.`` -> ``anthropic``)."""
    words = _words(name)
    while len(words) > 1 and words[-1] in _LEGAL:
        words.pop()
    return " ".join(words)


def type_key(kind: str) -> str:
    words = _words(kind)
    joined = " ".join(words)
    if joined in _TYPE_OF:
        return _TYPE_OF[joined]
    last = words[-1] if words else ""
    for singular in (last[:-3] + "y" if last.endswith("ies") else "", last[:-1], last):
        if singular in _TYPE_OF:
            return _TYPE_OF[singular]
    return joined


def entity_key(name: str, kind: str) -> str:
    """The key entities merge by: the folded name and the kind of thing it is, so a
    homonym of another type (Mercury the planet, Mercury the element) stays apart."""
    return f"{name_key(name)}|{type_key(kind)}"


def trigrams(text: str) -> set[str]:
    """pg_trgm's trigrams of a text: each word padded with two spaces before, one after."""
    out: set[str] = set()
    for word in _words(text):
        padded = f"  {word} "
        out.update(padded[i : i + 3] for i in range(len(padded) - 2))
    return out


def similarity(a: str, b: str) -> float:
    ta, tb = trigrams(a), trigrams(b)
    return len(ta & tb) / len(ta | tb) if ta and tb else 0.0


def _plural_of(a: str, b: str) -> bool:
    return a + "s" == b or a + "es" == b or b + "s" == a or b + "es" == a


def _check_triplets(limit: int) -> Callable[[Any], list[dict[str, str]]]:
    def check(value: Any) -> list[dict[str, str]]:
        if not isinstance(value, dict) or not isinstance(value.get("triplets"), list):
            raise ValueError('answer {"triplets": [...]}')
        out = []
        for t in value["triplets"][:limit]:
            if not isinstance(t, dict):
                raise ValueError("each triplet is an object with subject, predicate and object")
            clean = {k: str(t.get(k) or "").strip()[:200] for k in _TRIPLET_FIELDS}
            if clean["subject"] and clean["predicate"] and clean["object"]:
                out.append(clean)
        return out

    return check


def _check_merge(value: Any) -> tuple[bool, str]:
    if not isinstance(value, dict) or not isinstance(value.get("same"), bool):
        raise ValueError('answer {"same": true or false, "reason": "..."}')
    return value["same"], str(value.get("reason") or "")[:500]


def extract_triplets(
    llm: Llm,
    title: str,
    rows: list[dict[str, Any]],
    limit: int,
    progress: Callable[[int, int], None] | None = None,
) -> list[list[dict[str, str]]]:
    """Each chunk's (subject, predicate, object) triplets with the entities' types."""
    requests = [
        Request(
            "knowledge_triplets",
            [
                {
                    "role": "system",
                    "content": "You extract a knowledge graph from text: the facts it states "
                    "as (subject, predicate, object) triplets between named entities or "
                    "concepts, each entity with its type (organization, person, place, product, "
                    "concept, or a more precise one). Use the entities' names as the text writes "
                    "them; short predicates (has, reuses, founded). Answer with JSON only.",
                },
                {
                    "role": "user",
                    "content": f"Document: {title}\nText:\n{tokens.truncate(r['content'], CHUNK_TOKENS)}\n\n"
                    f'Return {{"triplets": [{{"subject": "...", "subject_type": "...", '
                    f'"predicate": "...", "object": "...", "object_type": "..."}}]}} with at '
                    f"most {limit} triplets; an empty list when the text states no facts.",
                },
            ],
            TRIPLETS_SCHEMA,
            _check_triplets(limit),
            max_tokens=1500,
        )
        for r in rows
    ]
    llm.progress = progress
    return list(llm.ask_many(requests))


def _merge_request(a: dict[str, Any], b: dict[str, Any]) -> Request:
    def side(e: dict[str, Any]) -> str:
        return f'"{e["name"]}" ({e["type"]}), seen in: "{tokens.truncate(e["context"], 150)}"'

    return Request(
        "entity_merge",
        [
            {
                "role": "system",
                "content": "You decide whether two entity mentions from a knowledge base name "
                "the same real-world thing. Answer with JSON only.",
            },
            {
                "role": "user",
                "content": f"A: {side(a)}\nB: {side(b)}\n\n"
                'Return {"same": true or false, "reason": "a short reason"}.',
            },
        ],
        MERGE_SCHEMA,
        _check_merge,
        max_tokens=200,
    )


def merge_decisions(
    mine: dict[str, dict[str, Any]],
    known: dict[str, dict[str, Any]],
    settings: Any,
    llm: Llm | None,
) -> list[dict[str, Any]]:
    """What to do with this document's entities whose key is new: every candidate duplicate
    among the entities known in the generation and the document's own (the same name with
    another type; a similar name, by trigrams, or a name close in meaning, by the names'
    vectors, of the same type) gets a decision. Rules merge plurals (type synonyms and legal
    forms are folded into the key already) and keep the rest apart; with entity_merge llm
    the model decides those. ``known`` maps key -> {name, type, context, canonical, vector};
    a merge points at the candidate's canonical key."""
    pool = dict(known)
    by_trigram: dict[str, set[str]] = {}
    for other in pool:
        for tri in trigrams(other.split("|", 1)[0]):
            by_trigram.setdefault(tri, set()).add(other)
    decisions: list[dict[str, Any]] = []
    asks: list[tuple[str, str, float]] = []
    for key, e in mine.items():
        if key in known:
            continue
        name, kind = key.split("|", 1)
        near = set().union(*(by_trigram.get(t, set()) for t in trigrams(name))) - {key}
        close = _close_in_meaning(e.get("vector"), kind, pool, settings.merge_vector_similarity)
        canonical = None
        for other in sorted(near | set(close) - {key}):
            o = pool[other]
            oname, okind = other.split("|", 1)
            sim = similarity(name, oname)
            if oname == name:
                sim, why = 1.0, f"same name, another type ({e['type']} / {o['type']})"
            elif okind == kind and sim >= settings.merge_similarity:
                why = f"similar names ({sim:.2f})"
            elif other in close:
                why = f"similar meaning (cosine {close[other]:.2f})"
            else:
                continue
            if why.startswith("similar names"):
                if _plural_of(name, oname) and canonical is None:
                    canonical = o.get("canonical") or other
                    decisions.append(_decision(key, canonical, True, "rule", "plural", sim))
                    continue
            if settings.entity_merge == "llm" and llm is not None:
                asks.append((key, other, sim))
            else:
                decisions.append(_decision(key, other, False, "rule", f"{why}: kept apart", sim))
        pool[key] = {**e, "canonical": canonical}
        for tri in trigrams(name):
            by_trigram.setdefault(tri, set()).add(key)
    if asks and llm is not None:
        answers = llm.ask_many([_merge_request(pool[a], pool[b]) for a, b, _ in asks])
        for (a, b, sim), (same, reason) in zip(asks, answers, strict=True):
            target = pool[b].get("canonical") or b
            if same and pool[a].get("canonical") is None and target != a:
                pool[a]["canonical"] = target
                decisions.append(_decision(a, target, True, "llm", reason, sim))
            else:
                decisions.append(_decision(a, b, False, "llm", reason, sim))
    return decisions


def _close_in_meaning(
    vector: list[float] | None, kind: str, pool: dict[str, dict[str, Any]], threshold: float
) -> dict[str, float]:
    """Entities of the same type whose name vectors are within ``threshold`` cosine."""
    import numpy as np

    others = [
        (k, o["vector"]) for k, o in pool.items() if o.get("vector") and k.split("|", 1)[1] == kind
    ]
    if vector is None or not others:
        return {}
    matrix = np.asarray([v for _, v in others], dtype=np.float32)
    q = np.asarray(vector, dtype=np.float32)
    cos = matrix @ q / (np.linalg.norm(matrix, axis=1) * (np.linalg.norm(q) or 1.0) + 1e-9)
    return {k: float(c) for (k, _), c in zip(others, cos, strict=True) if c >= threshold}


def _decision(
    key: str, other: str, merged: bool, by: str, reason: str, sim: float
) -> dict[str, Any]:
    return {
        "key": key,
        "other_key": other,
        "merged": merged,
        "decided_by": by,
        "reason": reason,
        "similarity": round(sim, 3),
    }


def triplet_graph(
    g: _Graph,
    doc: int,
    title: str,
    rows: list[dict[str, Any]],
    found: list[list[dict[str, str]]],
) -> dict[str, dict[str, Any]]:
    """Entity vertices (one per key in this document, its first name kept, the others as
    aliases) and relation edges with their chunk; returns key -> entity for merging."""
    entities: dict[str, dict[str, Any]] = {}
    node_of: dict[str, int] = {}
    for row, triplets in zip(rows, found, strict=True):
        for t in triplets:
            ends = []
            for name, kind in ((t["subject"], t["subject_type"]), (t["object"], t["object_type"])):
                key = entity_key(name, kind)
                if not name_key(name):
                    break
                if key not in node_of:
                    node_of[key] = g.node(
                        "triplets",
                        "entity",
                        name,
                        key,
                        path=title,
                        chunk=row["ordinal"],
                        properties={"type": kind, "aliases": [], "mentions": 0},
                    )
                    entities[key] = {"name": name, "type": kind, "context": row["content"]}
                props = g.nodes[node_of[key]]["properties"]
                props["mentions"] += 1
                if name != g.nodes[node_of[key]]["name"] and name not in props["aliases"]:
                    props["aliases"].append(name)
                ends.append(node_of[key])
            if len(ends) == 2 and ends[0] != ends[1]:
                g.edge(ends[0], "relation", ends[1], label=t["predicate"], chunk=row["ordinal"])
    return entities
