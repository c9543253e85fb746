"""Communities of the triplet graph, each summarised by the LLM,
kept current as documents change.

The entity graph of an index generation (entities merged by key and recorded merges,
relations as weighted undirected edges) is split by label propagation: every entity takes
the label most of its neighbours carry (ties to the smallest), in a fixed order, until
nothing changes. A community is each label with at least ``MIN_ENTITIES`` entities. Its
signature is a hash of its relations: a community whose relations did not change keeps
its summary; a new or changed one is summarised (title and a few sentences from its
facts), embedded with the KB's model and indexed for BM25; one that is gone is removed.
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

MIN_ENTITIES = 3
MAX_FACTS = 60  # relations a summary prompt shows, at most
ROUNDS = 30

RELATIONS = """
    SELECT coalesce(ms.other_key, s.qualified_name) AS a, coalesce(mt.other_key, t.qualified_name) AS b,
           s.name AS a_name, t.name AS b_name, e.label, e.chunk_id
      FROM kb.graph_edge e
      JOIN kb.graph_node s ON s.kb_id = e.kb_id AND s.id = e.source_id
      JOIN kb.graph_node t ON t.kb_id = e.kb_id AND t.id = e.target_id
      LEFT JOIN kb.graph_entity_merge ms
        ON ms.kb_id = e.kb_id AND ms.index_id = e.index_id AND ms.key = s.qualified_name
       AND ms.merged
      LEFT JOIN kb.graph_entity_merge mt
        ON mt.kb_id = e.kb_id AND mt.index_id = e.index_id AND mt.key = t.qualified_name
       AND mt.merged
     WHERE e.kb_id = $1 AND e.index_id = $2 AND e.kind = 'relation'
     ORDER BY e.id
"""
SUMMARY_SCHEMA = {
    "type": "object",
    "properties": {"title": {"type": "string"}, "summary": {"type": "string"}},
    "required": ["title", "summary"],
}


@dataclass
class Community:
    members: list[str]  # canonical entity keys, sorted
    names: list[str]
    facts: list[tuple[str, str, str]]  # (subject name, predicate, object name)
    chunk_ids: list[int]
    signature: str = ""
    summary: dict[str, str] = field(default_factory=dict)


def label_propagation(edges: list[tuple[str, str]]) -> dict[str, str]:
    """Each node's community label (deterministic: sorted order, ties to the smallest)."""
    weight: dict[str, Counter[str]] = defaultdict(Counter)
    for a, b in edges:
        if a != b:
            weight[a][b] += 1
            weight[b][a] += 1
    label = {n: n for n in weight}
    for _ in range(ROUNDS):
        changed = False
        for node in sorted(weight):
            votes: Counter[str] = Counter()
            for other, w in weight[node].items():
                votes[label[other]] += w
            best = max(votes.values())
            pick = min(lab for lab, v in votes.items() if v == best)
            if pick != label[node] and votes[label[node]] < best:
                label[node] = pick
                changed = True
        if not changed:
            break
    return label


def communities(rows: list[dict[str, Any]]) -> list[Community]:
    """The communities of an index's relations (rows of RELATIONS)."""
    label = label_propagation([(r["a"], r["b"]) for r in rows])
    names: dict[str, str] = {}  # an entity as first written (relations in insertion order)
    for r in rows:
        names.setdefault(r["a"], r["a_name"])
        names.setdefault(r["b"], r["b_name"])
    groups: dict[str, set[str]] = defaultdict(set)
    for node, lab in label.items():
        groups[lab].add(node)
    out = []
    for members in groups.values():
        if len(members) < MIN_ENTITIES:
            continue
        inside = [r for r in rows if r["a"] in members and r["b"] in members]
        facts = sorted({(r["a_name"], r["label"] or "", r["b_name"]) for r in inside})
        keyed = sorted(f"{r['a']}\t{r['label']}\t{r['b']}" for r in inside)
        c = Community(
            sorted(members),
            [names[m] for m in sorted(members) if m in names],
            facts,
            sorted({int(r["chunk_id"]) for r in inside if r["chunk_id"] is not None}),
        )
        c.signature = hashlib.sha256("\n".join(keyed).encode()).hexdigest()
        out.append(c)
    return sorted(out, key=lambda c: (-len(c.members), c.members))


def summary_request(c: Community) -> Any:
    from kbpg_db.llm import Request

    facts = "\n".join(f"- {s} {p} {o}" for s, p, o in c.facts[:MAX_FACTS])
    return Request(
        "community_summary",
        [
            {
                "role": "system",
                "content": "You summarise a cluster of related facts from a knowledge base, "
                "for readers who want to know what it covers. Answer with JSON only.",
            },
            {
                "role": "user",
                "content": f"Entities: {', '.join(c.names)}\nFacts:\n{facts}\n\n"
                'Return {"title": "a short title for what these facts are about", "summary": '
                '"two to four sentences that say what the facts establish, naming the entities"}.',
            },
        ],
        SUMMARY_SCHEMA,
        _check_summary,
        max_tokens=400,
    )


def _check_summary(value: Any) -> dict[str, str]:
    if not isinstance(value, dict) or not str(value.get("summary") or "").strip():
        raise ValueError('answer {"title": "...", "summary": "..."}')
    return {
        "title": str(value.get("title") or "").strip()[:200],
        "summary": str(value["summary"]).strip()[:4000],
    }


def refresh(plpy: Any, kb_id: int, index_id: int, indexing_config: Any) -> str:
    """The communities of an index generation's triplet graph, as kb.refresh_communities
    stores them: the signatures to keep, and the new or changed ones with their summary
    (LLM, cached) and its vector."""
    import json

    from kbpg_db import config, embedding, keys, llm, tokens
    from kbpg_db.sqlstates import EXTERNAL_FAILURE, SqlError

    cfg = config.indexing_cached(indexing_config)
    layer = llm.layer(plpy, cfg.llm())
    rows = [
        dict(r)
        for r in plpy.execute(plpy.prepare(RELATIONS, ["integer", "bigint"]), [kb_id, index_id])
    ]
    found = communities(rows)
    have = {
        r["signature"]
        for r in plpy.execute(
            plpy.prepare(
                "SELECT signature FROM kb.graph_community WHERE kb_id = $1 AND index_id = $2",
                ["integer", "bigint"],
            ),
            [kb_id, index_id],
        )
    }
    new = [c for c in found if c.signature not in have]
    try:
        answers = layer.ask_many([summary_request(c) for c in new])
    except llm.LlmError as exc:
        raise SqlError(f"summarising communities failed: {exc}", EXTERNAL_FAILURE) from None
    texts = [f"{a['title']}\n\n{a['summary']}" for a in answers]
    emb_key = keys.for_model(plpy, cfg.api_key_name, cfg.embedding_model)
    vectors = (
        embedding.embed(cfg, texts, emb_key, [tokens.count(t) for t in texts]).vectors
        if texts
        else []
    )
    return json.dumps(
        {
            "keep": [c.signature for c in found],
            "new": [
                {
                    "signature": c.signature,
                    "members": c.members,
                    "names": c.names,
                    "relations": len(c.facts),
                    "title": a["title"] or ", ".join(c.names[:3]),
                    "summary": a["summary"],
                    "embedding": [round(float(x), 6) for x in v],
                    "chunk_ids": c.chunk_ids,
                }
                for c, a, v in zip(new, answers, vectors, strict=True)
            ],
            "usage": layer.usage.as_json(),
        }
    )
