"""Tree Search over PageIndex trees: the LLM reasons over tables of contents, not vectors.

Phase 1 shows the LLM each document's compact summary (title, description, top-level
section titles) and lets it pick the relevant documents (skipped when the KB has one).
Phase 2 shows the picked documents' ToCs (titles and summaries, no text) with globally
prefixed ids (``d0:0001``) and asks for up to ``top_k`` of them. Answers are parsed as JSON,
else scanned for ids; every id is checked against the trees, and the ones that do not exist
are dropped and counted in the note.

When the picked ToCs would not fit ``toc_token_budget``, phase 2 descends level by level:
the model first sees the top-level sections (each marked with how many sub-sections it
has), names the ones that answer or lead to the answer, and sees their sub-sections in
the next round, until it picks leaves or keeps a section without opening it (at most
``MAX_ROUNDS`` rounds). A level that alone is over budget is pre-selected with BM25 over
the nodes' text and titles (a node counts when it or one of its descendants is a hit).

Nothing here writes: answers already in the call cache are reused, new ones are not
stored, so searches run on a read-only standby.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from kbpg_db import tokens
from kbpg_db.llm import Llm, Request, parse_json

_DOC_ID = re.compile(r"\bd(\d+)\b")
_NODE_ID = re.compile(r"\bd(\d+):(\d{4})\b")
PRESELECT_NODES = 40
MAX_ROUNDS = 6


class Generation(NamedTuple):
    """The index generation searched, with its knowledge base: every query reads that
    kb_id's rows only (docs/operations.md, "Beyond one machine")."""

    kb_id: int
    index_id: int


@dataclass
class Node:
    gid: str  # d0:0001
    document_id: int
    node_id: str
    chunk_id: int
    depth: int
    title: str
    summary: str | None
    page_start: int | None
    page_end: int | None
    parent_id: str | None


@dataclass
class Doc:
    did: str  # d0
    document_id: int
    title: str
    description: str | None
    top: list[str]
    nodes: list[Node] = field(default_factory=list)


@dataclass
class Outcome:
    hits: list[tuple[Node, str]]  # node, the model's reasoning
    note: str
    phases: dict[str, Any]


def _ids_answer(key: str, pattern: re.Pattern[str]) -> Any:
    """{"<key>": [...], "reasoning": "..."} as JSON; else the ids the answer's text names."""

    def check(text: str) -> tuple[list[str], str]:
        try:
            value = parse_json(text)
        except ValueError:
            value = None
        if isinstance(value, dict) and isinstance(value.get(key), list):
            return [str(v).strip() for v in value[key]], str(value.get("reasoning") or "")
        found = [m.group(0) for m in pattern.finditer(text)]
        if found:
            return found, "(ids read from the text of a non-JSON answer)"
        raise ValueError(f'expected {{"{key}": [...], "reasoning": "..."}}')

    return check


def _ask_ids(
    llm: Llm, purpose: str, system: str, user: str, key: str, pattern: re.Pattern[str]
) -> tuple[list[str], str]:
    schema = {
        "type": "object",
        "properties": {
            key: {"type": "array", "items": {"type": "string"}},
            "reasoning": {"type": "string", "maxLength": 1500},
        },
        "required": [key],
    }
    req = Request(
        purpose,
        [{"role": "system", "content": system}, {"role": "user", "content": user}],
        schema,
        _ids_answer(key, pattern),
        max_tokens=800,
        raw_answer=True,
    )
    ids, reasoning = llm.ask(req)
    return ids, reasoning


def load(plpy: Any, gen: Generation) -> list[Doc]:
    docs: list[Doc] = []
    rows = plpy.execute(
        plpy.prepare(
            "SELECT t.document_id, d.title, t.description, t.toc FROM kb.page_index_toc t "
            "JOIN kb.document d ON d.id = t.document_id AND d.kb_id = t.kb_id "
            "WHERE t.kb_id = $1 AND t.index_id = $2 ORDER BY t.document_id",
            ["integer", "bigint"],
        ),
        list(gen),
    )
    by_id: dict[int, Doc] = {}
    for i, r in enumerate(rows):
        toc = json.loads(r["toc"]) if isinstance(r["toc"], str) else r["toc"]
        doc = Doc(
            f"d{i}", int(r["document_id"]), r["title"], r["description"], [e["title"] for e in toc]
        )
        docs.append(doc)
        by_id[doc.document_id] = doc
    nodes = plpy.execute(
        plpy.prepare(
            "SELECT document_id, node_id, chunk_id, depth, title, summary, page_start, "
            "page_end, parent_id FROM kb.page_index_node WHERE kb_id = $1 AND index_id = $2 "
            "ORDER BY document_id, ordinal",
            ["integer", "bigint"],
        ),
        list(gen),
    )
    for r in nodes:
        owner = by_id.get(int(r["document_id"]))
        if owner is None:
            continue
        gid = f"{owner.did}:{len(owner.nodes) + 1:04d}"
        owner.nodes.append(
            Node(
                gid,
                owner.document_id,
                r["node_id"],
                int(r["chunk_id"]),
                int(r["depth"]),
                r["title"],
                r["summary"],
                r["page_start"],
                r["page_end"],
                r["parent_id"],
            )
        )
    return docs


def _listing(docs: list[Doc]) -> str:
    """Phase 1's view of documents: id, title, description, top-level sections."""
    return "\n".join(
        f"[{d.did}] {d.title}: {d.description or ''}\n    sections: {'; '.join(d.top)}"
        for d in docs
    )


def _pages(n: Node) -> str:
    if n.page_start and n.page_end and n.page_end != n.page_start:
        return f" (p.{n.page_start}–{n.page_end})"
    return f" (p.{n.page_start})" if n.page_start else ""


def toc_text(doc: Doc) -> str:
    lines = [f"Document {doc.did}: {doc.title}"]
    for n in doc.nodes:
        summary = f" — {n.summary}" if n.summary and n.summary != n.title else ""
        lines.append(f"{'  ' * (n.depth + 1)}[{n.gid}] {n.title}{_pages(n)}{summary}")
    return "\n".join(lines)


def _bm25_candidates(
    plpy: Any, gen: Generation, query: str, docs: list[Doc], bm25: tuple[float, float]
) -> set[str]:
    """Node gids BM25 (with the search's k1 and b) finds for the query, with their
    ancestors."""
    rows = plpy.execute(
        plpy.prepare(
            "SELECT chunk_id FROM kb._bm25_search($1, $2, $3, $4, $5, $6, NULL)",
            ["integer", "bigint", "text", "integer", "float8", "float8"],
        ),
        [*gen, query, PRESELECT_NODES, *bm25],
    )
    hit_chunks = {int(r["chunk_id"]) for r in rows}
    keep: set[str] = set()
    for doc in docs:
        by_node = {n.node_id: n for n in doc.nodes}
        for n in doc.nodes:
            if n.chunk_id in hit_chunks:
                cur: Node | None = n
                while cur is not None and cur.gid not in keep:
                    keep.add(cur.gid)
                    cur = by_node.get(cur.parent_id) if cur.parent_id else None
    return keep


def _ask_nodes(llm: Llm, query: str, listing: str, top_k: int, opening: bool = False) -> Any:
    more = (
        " A section marked [+N] has N sub-sections: name it to see them next, or name it "
        "and none of them to keep it whole."
        if opening
        else ""
    )
    return _ask_ids(
        llm,
        "tree_search_nodes",
        "You find the sections of documents that answer a question, by reading their tables "
        "of contents. Answer with JSON only.",
        f"Question: {query}\n\nTables of contents (id, title, pages, summary):\n{listing}\n\n"
        f'Return {{"node_ids": ["d0:0001", ...], "reasoning": "..."}} with at most {top_k} '
        f"ids, most relevant first.{more}",
        "node_ids",
        _NODE_ID,
    )


def _level_text(
    docs: list[Doc], shown: list[Node], parent_of: dict[str, Node], kids: dict[str, list[Node]]
) -> str:
    """One level of the picked ToCs: the shown nodes grouped by document and parent."""
    blocks: list[str] = []
    for doc in docs:
        mine = [n for n in shown if n.document_id == doc.document_id]
        if not mine:
            continue
        lines = [f"Document {doc.did}: {doc.title}"]
        group: Node | None = None
        for n in mine:
            parent = parent_of.get(n.gid)
            if parent is not None and parent is not group:
                lines.append(f"  inside {parent.title} ({parent.gid}):")
            group = parent
            summary = f" — {n.summary}" if n.summary and n.summary != n.title else ""
            more = f" [+{len(kids[n.gid])}]" if kids.get(n.gid) else ""
            lines.append(f"    [{n.gid}] {n.title}{_pages(n)}{more}{summary}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def _descend(
    plpy: Any,
    llm: Llm,
    gen: Generation,
    query: str,
    docs: list[Doc],
    top_k: int,
    budget: int,
    bm25: tuple[float, float],
) -> tuple[list[tuple[Node, str]], int, list[dict[str, Any]]]:
    """Phase 2 level by level (see the module's docstring). Returns the hits in the
    model's order (an opened section's picks take its place), dropped ids and rounds."""
    kids: dict[str, list[Node]] = {}
    parent_of: dict[str, Node] = {}
    for doc in docs:
        by_id = {n.node_id: n for n in doc.nodes}
        for n in doc.nodes:
            parent = by_id.get(n.parent_id) if n.parent_id else None
            if parent is not None:
                kids.setdefault(parent.gid, []).append(n)
                parent_of[n.gid] = parent
    frontier = [n for d in docs for n in d.nodes if n.gid not in parent_of]
    ranked: list[tuple[Node, str]] = []
    opened: set[str] = set()  # the sections whose sub-sections the current round shows
    rounds: list[dict[str, Any]] = []
    found: set[str] | None = None
    dropped = 0
    while frontier and len(rounds) < MAX_ROUNDS:
        shown = frontier
        listing = _level_text(docs, shown, parent_of, kids)
        info: dict[str, Any] = {}
        if tokens.count(listing) > budget:
            if found is None:
                found = _bm25_candidates(plpy, gen, query, docs, bm25)
            shown = [n for n in frontier if n.gid in found] or frontier
            while (
                len(shown) > 1 and tokens.count(_level_text(docs, shown, parent_of, kids)) > budget
            ):
                shown = shown[: len(shown) // 2]
            listing = _level_text(docs, shown, parent_of, kids)
            info["preselected"] = len(shown)
        ids, why = _ask_nodes(llm, query, listing, top_k, opening=True)
        visible = {n.gid: n for n in shown}
        chosen = [visible[g] for g in dict.fromkeys(ids) if g in visible]
        dropped += len(set(ids)) - len(chosen)
        rounds.append({"saw": len(shown), "chose": [n.gid for n in chosen], **info})
        if len(rounds) == 1:
            ranked = [(n, why) for n in chosen]
        else:
            out: list[tuple[Node, str]] = []
            for n, reason in ranked:
                picks = [c for c in chosen if parent_of.get(c.gid) is n] if n.gid in opened else []
                out.extend([(c, why) for c in picks] or [(n, reason)])
            ranked = out
        to_open = [n for n, _ in ranked if kids.get(n.gid) and n.gid not in opened]
        opened = {n.gid for n in to_open} | opened
        frontier = [c for n in to_open for c in kids[n.gid]]
    return ranked[:top_k], dropped, rounds


def search(
    plpy: Any,
    llm: Llm,
    gen: Generation,
    query: str,
    top_k: int,
    max_documents: int,
    budget: int,
    bm25: tuple[float, float],
) -> Outcome:
    """``bm25``: the search's k1 and b, for preselecting what a ToC over budget shows."""
    docs = load(plpy, gen)
    notes: list[str] = []
    phases: dict[str, Any] = {"documents": len(docs)}
    if not docs:
        return Outcome([], "tree_search: the knowledge base has no indexed trees yet", phases)
    # Phase 1: which documents.
    picked = docs
    if len(docs) > 1:
        listing = _listing(docs)
        if tokens.count(listing) > budget:
            hits_1 = _bm25_candidates(plpy, gen, query, docs, bm25)
            with_hits = [d for d in docs if any(n.gid in hits_1 for n in d.nodes)]
            docs_shown = with_hits[: max(max_documents * 4, 1)] or docs[: max_documents * 4]
            listing = _listing(docs_shown)
            notes.append(f"phase 1 saw {len(docs_shown)} of {len(docs)} documents (BM25)")
        ids, why = _ask_ids(
            llm,
            "tree_search_documents",
            "You pick the documents that can answer a question. Answer with JSON only.",
            f"Question: {query}\n\nDocuments:\n{listing}\n\nReturn "
            f'{{"documents": ["d0", ...], "reasoning": "..."}} with at most {max_documents} '
            "ids, most relevant first.",
            "documents",
            _DOC_ID,
        )
        known = {d.did: d for d in docs}
        chosen = [known[i] for i in dict.fromkeys(ids) if i in known][:max_documents]
        bad = [i for i in ids if i not in known]
        if bad:
            notes.append(f"{len(bad)} document id(s) the model named do not exist: dropped")
        picked = chosen
        phases["phase1"] = {"chose": [d.title for d in chosen], "reasoning": why}
        notes.append(
            f"phase 1 chose {len(chosen)} of {len(docs)} documents ("
            + ", ".join(d.title for d in chosen)[:200]
            + ")"
        )
    if not picked:
        return Outcome([], "tree_search: the model found no relevant document", phases)
    # Phase 2: which sections.
    text = "\n\n".join(toc_text(d) for d in picked)
    if tokens.count(text) <= budget:
        ids, why = _ask_nodes(llm, query, text, top_k)
        nodes = {n.gid: n for d in picked for n in d.nodes}
        hits = [(nodes[g], why) for g in dict.fromkeys(ids) if g in nodes]
        dropped = len(set(ids)) - len(hits)
        phases["phase2"] = {"chose": [n.gid for n, _ in hits], "reasoning": why}
    else:
        hits, dropped, rounds = _descend(plpy, llm, gen, query, picked, top_k, budget, bm25)
        phases["phase2"] = {"chose": [n.gid for n, _ in hits], "rounds": rounds}
        preselected = sum(r.get("preselected", 0) for r in rounds)
        notes.append(
            f"phase 2 descended {len(rounds)} level(s) (ToC over budget), seeing "
            + ", ".join(str(r["saw"]) for r in rounds)
            + " sections"
            + (f"; {preselected} of them BM25-preselected" if preselected else "")
        )
    if dropped:
        notes.append(f"{dropped} node id(s) the model named do not exist: dropped")
    notes.append(f"phase 2 chose {', '.join(n.gid for n, _ in hits[:top_k]) or 'nothing'}")
    u = llm.usage
    notes.append(
        f"{u.calls} LLM call(s), {u.cache_hits} cached, {u.prompt_tokens} prompt + "
        f"{u.completion_tokens} completion tokens"
        + (f", ${u.cost_usd:.6f}" if u.cost_known and u.calls else "")
    )
    return Outcome(hits[:top_k], "tree_search: " + "; ".join(notes), phases)
