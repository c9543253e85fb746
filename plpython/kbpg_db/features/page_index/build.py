"""PageIndex: a document's structure as a tree of sections, with a summary per node.

Markdown pipeline (this module): the heading tree (h1-h6 outside fenced code); a leaf
over ``max_token_num_each_node`` tokens is split into titled sub-sections, by the LLM
when one is configured and its answer checks out against the text, else at paragraph
boundaries; then node summaries and a document description. Without an LLM every step
still completes: summaries fall back to the section's lead text, marked ``lead_text``.

Node ids are stable: a hash of the node's title path (and its rank among siblings of the
same path), so a section keeps its id across re-indexes and unrelated edits.

Nodes are stored as the KB's chunks (reading order, exact character offsets, title
path as heading_path), so BM25 and context assembly serve them like any chunk; the
tree itself (ids, parents, summaries, page ranges) goes to ``kb.page_index_node`` and
the per-document ToC to ``kb.page_index_toc``.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

from kbpg_db import chunking, tokens
from kbpg_db.config import IndexingConfig
from kbpg_db.features import BuildContext, Built, Document, StrategyError
from kbpg_db.features.page_index.settings import PageIndexExtra
from kbpg_db.llm import Llm, LlmError, Request

LEAD_WORDS = 40
_PARAGRAPH = re.compile(r"\n[ \t]*\n")


@dataclass
class Node:
    title: str
    level: int
    start: int  # the heading line (or the text, for a preamble / split part)
    own_end: int  # where the next heading begins
    parent: Node | None = None
    children: list[Node] = field(default_factory=list)
    node_id: str = ""
    summary: str | None = None
    summary_kind: str = "none"
    token_count: int = 0
    has_heading: bool = True  # False for a preamble or a part split off a long section
    drawn: bool = False  # kbpg drew this boundary (a split part, an inferred heading)

    @property
    def end(self) -> int:
        return self.children[-1].end if self.children else self.own_end

    @property
    def path(self) -> list[str]:
        out: list[str] = []
        node: Node | None = self
        while node is not None:
            out.append(node.title)
            node = node.parent
        return out[::-1]

    @property
    def depth(self) -> int:
        return len(self.path) - 1


def _walk(nodes: list[Node]) -> list[Node]:
    out: list[Node] = []
    for n in nodes:
        out.append(n)
        out.extend(_walk(n.children))
    return out


def heading_tree(title: str, text: str) -> list[Node]:
    """Top-level nodes of a Markdown text's heading tree (text before the first heading
    becomes a node titled after the document)."""
    return tree_from_heads(title, text, chunking.markdown_headings(text))


def tree_from_heads(title: str, text: str, heads: list[tuple[int, int, str]]) -> list[Node]:
    """A tree from (offset, level, title) section starts in reading order."""
    roots: list[Node] = []
    if not heads or text[: heads[0][0]].strip():
        first = heads[0][0] if heads else len(text)
        roots.append(Node(title, 0, 0, first, has_heading=False))
    stack: list[Node] = []
    for i, (pos, level, head) in enumerate(heads):
        end = heads[i + 1][0] if i + 1 < len(heads) else len(text)
        node = Node(head or f"(untitled h{level})", level, pos, end)
        while stack and stack[-1].level >= level:
            stack.pop()
        if stack:
            node.parent = stack[-1]
            stack[-1].children.append(node)
        else:
            roots.append(node)
        stack.append(node)
    return roots


def pdf_tree(
    doc: Document, extra: PageIndexExtra, llm: Llm | None, ctx: BuildContext
) -> tuple[list[Node], dict[str, Any]]:
    """A PDF's tree from its outline, printed ToC or layout headings; the LLM only for
    ToC lines the pattern cannot read and for long stretches without any heading."""
    from kbpg_db.features.page_index import pdf_structure

    assert doc.page_starts is not None
    source, entries, details = pdf_structure.structure(
        doc.content,
        doc.page_starts,
        doc.metadata,
        extra.toc_check_page_num,
        extra.max_page_num_each_node,
        llm,
        ctx.report,
    )
    # Every entry is a node, even one lost at the start of its page where another starts
    # too (an empty section before it): the document names it.
    heads = [(e.offset or 0, e.level, e.title) for e in entries]
    roots = tree_from_heads(doc.title, doc.content, heads)
    if source in ("layout", "llm", "layout+llm"):
        # A heading read from the layout or by the LLM is kbpg's reading, and may merge;
        # a numbered one ("2.5 Future developments") is the document's own section.
        for node in _walk(roots):
            node.drawn = node.has_heading and not pdf_structure.numbered(node.title)
    return roots, {"structure": source, **details}


def split_long_pages(
    text: str, roots: list[Node], page_starts: list[int], max_pages: int, min_tokens: int
) -> None:
    """Leaves over ``max_pages`` pages get one child per ``max_pages`` pages; a last part
    under ``min_tokens`` tokens stays with the one before."""
    for node in _walk(roots):
        if node.children:
            continue
        first = chunking.page_of(page_starts, node.start) or 1
        last = chunking.page_of(page_starts, max(node.start, node.own_end - 1)) or first
        if last - first + 1 <= max_pages:
            continue
        base = _body_start(text, node)
        cuts = [base] + [page_starts[p - 1] for p in range(first + max_pages, last + 1, max_pages)]
        cuts = [c for c in cuts if c >= base]
        if len(cuts) > 1 and tokens.count(text[cuts[-1] : node.own_end]) < min_tokens:
            cuts.pop()
        if len(cuts) < 2:
            continue
        bounds = [*cuts, node.own_end]
        node.own_end = bounds[0]
        for k in range(len(cuts)):
            a = chunking.page_of(page_starts, bounds[k]) or first
            b = chunking.page_of(page_starts, max(bounds[k], bounds[k + 1] - 1)) or a
            node.children.append(
                Node(
                    f"{node.title} (pages {a}–{b})",
                    node.level + 1,
                    bounds[k],
                    bounds[k + 1],
                    parent=node,
                    has_heading=False,
                )
            )


def assign_ids(roots: list[Node]) -> None:
    seen: dict[str, int] = {}
    for node in _walk(roots):
        key = "\x1f".join(node.path)
        rank = seen.get(key, 0)
        seen[key] = rank + 1
        node.node_id = hashlib.blake2b(f"{key}#{rank}".encode(), digest_size=5).hexdigest()


def _body(text: str, node: Node) -> str:
    """A node's own text without its heading line."""
    return text[_body_start(text, node) : node.own_end].strip()


def lead_text(text: str, words: int = LEAD_WORDS) -> str:
    parts = text.split()
    return " ".join(parts[:words]) + (" …" if len(parts) > words else "")


# --- splitting oversized leaves ---------------------------------------------------------------
SPLIT_SCHEMA = {
    "type": "object",
    "properties": {
        "sections": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"title": {"type": "string"}, "starts_with": {"type": "string"}},
                "required": ["title", "starts_with"],
            },
        }
    },
    "required": ["sections"],
}


def _split_points(body: str, base: int) -> Any:
    """A validator: the LLM's sections must start, in order, at text found in the body."""

    def check(value: Any) -> list[tuple[str, int]]:
        if not isinstance(value, dict) or not isinstance(value.get("sections"), list):
            raise ValueError('expected {"sections": [{"title": ..., "starts_with": ...}]}')
        points: list[tuple[str, int]] = []
        cursor = 0
        for item in value["sections"]:
            if not isinstance(item, dict):
                raise ValueError("each section must be an object with title and starts_with")
            head = str(item.get("title") or "").strip()
            start = str(item.get("starts_with") or "").strip()
            if not head or not start:
                raise ValueError("each section needs a non-empty title and starts_with")
            at = body.find(start, cursor)
            if at < 0:
                raise ValueError(f"starts_with {start[:60]!r} does not occur in the text in order")
            points.append((head[:300], base + at))
            cursor = at + 1
        if len(points) < 2:
            raise ValueError("a split needs at least two sections")
        return points

    return check


def _structural_parts(text: str, start: int, end: int, limit: int) -> list[int]:
    """Start offsets of parts of at most ~limit tokens, cut at paragraph breaks."""
    cuts = [start]
    size = 0
    pos = start
    for m in [*_PARAGRAPH.finditer(text, start, end), None]:
        stop = m.end() if m else end
        piece = tokens.count(text[pos:stop])
        if size and size + piece > limit:
            cuts.append(pos)
            size = 0
        size += piece
        pos = stop
    return cuts


def _body_start(text: str, node: Node) -> int:
    """Where a node's text begins after its heading line."""
    if not node.has_heading:
        return node.start
    line_end = text.find("\n", node.start, node.own_end)
    return node.own_end if line_end < 0 else line_end + 1


def split_oversized(
    text: str, roots: list[Node], extra: PageIndexExtra, llm: Llm | None, ctx: BuildContext
) -> None:
    """Give each leaf over the token limit sub-sections; the leaf keeps its heading line
    (and any text before the first sub-section)."""
    limit = extra.max_token_num_each_node
    big = [
        n
        for n in _walk(roots)
        if not n.children and tokens.count(text[n.start : n.own_end]) > limit
    ]
    if not big:
        return
    answers: list[Any] = [None] * len(big)
    if llm is not None and llm.available:
        llm.progress = ctx.stage("splitting long sections", len(big))
        for i, node in enumerate(big):
            base = _body_start(text, node)
            body = text[base : node.own_end]
            req = Request(
                "split_section",
                [
                    {
                        "role": "system",
                        "content": "You divide a long document section into its natural "
                        "sub-sections. Answer with JSON only.",
                    },
                    {
                        "role": "user",
                        "content": f"Section: {' › '.join(node.path)}\n\nText:\n{body}\n\n"
                        'Return {"sections": [{"title": "...", "starts_with": "the first '
                        'words of the sub-section, copied exactly"}]} in reading order.',
                    },
                ],
                SPLIT_SCHEMA,
                _split_points(body, base),
            )
            try:
                answers[i] = llm.ask(req)
            except LlmError:
                answers[i] = None  # unusable twice: split by structure instead
    for node, points in zip(big, answers, strict=True):
        base = _body_start(text, node)
        if points is None:
            starts = _structural_parts(text, base, node.own_end, limit)
            if len(starts) < 2:
                continue
            points = [(f"{node.title} (part {k + 1})", at) for k, at in enumerate(starts)]
        bounds = [at for _, at in points] + [node.own_end]
        node.own_end = bounds[0]
        for k, (head, at) in enumerate(points):
            node.children.append(
                Node(
                    head,
                    node.level + 1,
                    at,
                    bounds[k + 1],
                    parent=node,
                    has_heading=False,
                    drawn=True,
                )
            )


def merge_small(text: str, roots: list[Node], min_tokens: int, max_tokens: int) -> int:
    """A leaf under ``min_tokens`` tokens whose boundary kbpg drew joins its previous
    sibling when that is a leaf (or, as a first child, its parent), as long as the result
    stays within ``max_tokens``. Sections the document itself names are never merged.
    Returns how many nodes were merged."""
    merged = 0

    def small(node: Node) -> bool:
        return (
            node.drawn
            and not node.children
            and tokens.count(text[node.start : node.own_end]) < min_tokens
        )

    def fold(siblings: list[Node], parent: Node | None) -> None:
        nonlocal merged
        for n in siblings:
            fold(n.children, n)
        i = 0
        while i < len(siblings):
            node = siblings[i]
            into = siblings[i - 1] if i else parent
            if (
                small(node)
                and into is not None
                and (into.children == [] if i else True)
                and into.own_end == node.start
                and tokens.count(text[into.start : node.own_end]) <= max_tokens
            ):
                into.own_end = node.own_end
                del siblings[i]
                merged += 1
            else:
                i += 1

    if min_tokens > 0:
        fold(roots, None)
    return merged


# --- summaries ------------------------------------------------------------------------------
SUMMARY_SCHEMA = {
    "type": "object",
    "properties": {"summary": {"type": "string", "maxLength": 600}},
    "required": ["summary"],
}
DESCRIPTION_SCHEMA = {
    "type": "object",
    "properties": {"description": {"type": "string", "maxLength": 600}},
    "required": ["description"],
}


def text_field(name: str) -> Any:
    """A validator for an answer ``{name: "..."}``: the text, stripped, not empty."""

    def check(value: Any) -> str:
        if not isinstance(value, dict) or not isinstance(value.get(name), str):
            raise ValueError(f'expected {{"{name}": "..."}}')
        out = value[name].strip()
        if not out:
            raise ValueError(f"{name} is empty")
        return out[:4000]

    return check


def summarise(
    text: str, roots: list[Node], extra: PageIndexExtra, llm: Llm | None, ctx: BuildContext
) -> None:
    nodes = _walk(roots)
    ask: list[tuple[Node, Request]] = []
    for node in nodes:
        own = text[node.start : node.own_end].strip()
        if not node.children and node.token_count <= extra.summary_token_threshold:
            node.summary, node.summary_kind = own, "own_text"
            continue
        if llm is None or not llm.available:
            body = _body(text, node)
            node.summary = (
                lead_text(body)
                if body
                else "Sections: " + "; ".join(c.title for c in node.children)
            )
            node.summary_kind = "lead_text"
            continue
        content = f"Section: {' › '.join(node.path)}\n\n{own}"
        if node.children:
            content += "\n\nIts sub-sections: " + "; ".join(c.title for c in node.children)
        ask.append(
            (
                node,
                Request(
                    "node_summary",
                    [
                        {
                            "role": "system",
                            "content": "You write a one to three sentence summary of a document "
                            "section saying what it covers. Answer with JSON only.",
                        },
                        {"role": "user", "content": content + '\n\nReturn {"summary": "..."}.'},
                    ],
                    SUMMARY_SCHEMA,
                    text_field("summary"),
                    max_tokens=300,
                ),
            )
        )
    if ask:
        assert llm is not None
        llm.progress = ctx.stage("summarising nodes", len(ask))
        for (node, _), summary in zip(ask, llm.ask_many([r for _, r in ask]), strict=True):
            node.summary, node.summary_kind = summary, "llm"


def describe(
    doc: Document, roots: list[Node], llm: Llm | None, ctx: BuildContext
) -> tuple[str, str]:
    if llm is None or not llm.available:
        bodies = (_body(doc.content, n) for n in _walk(roots))
        first = next((b for b in bodies if b), "")
        first = _PARAGRAPH.split(first, 1)[0].strip()
        return lead_text(first) or "; ".join(n.title for n in roots), "lead_text"
    outline = "\n".join(f"- {n.title}: {n.summary or ''}".rstrip(": ") for n in roots)
    ctx.report("describing the document")
    value = llm.ask(
        Request(
            "doc_description",
            [
                {
                    "role": "system",
                    "content": "You describe a document in one or two sentences so a reader "
                    "can tell whether it answers their question. Answer with JSON only.",
                },
                {
                    "role": "user",
                    "content": f"Document: {doc.title}\nTop-level sections:\n{outline}\n\n"
                    'Return {"description": "..."}.',
                },
            ],
            DESCRIPTION_SCHEMA,
            text_field("description"),
            max_tokens=300,
        )
    )
    return value, "llm"


# --- the strategy ---------------------------------------------------------------------------
def _toc(nodes: list[Node], pages: dict[str, tuple[int | None, int | None]]) -> list[Any]:
    return [
        {
            "node_id": n.node_id,
            "title": n.title,
            "summary": n.summary,
            "page_start": pages[n.node_id][0],
            "page_end": pages[n.node_id][1],
            "children": _toc(n.children, pages),
        }
        for n in nodes
    ]


@dataclass
class Tree:
    """A document's finished tree: what the PageIndex pipeline built, before storage."""

    roots: list[Node]
    nodes: list[Node]  # every node, in reading order
    structure: dict[str, Any]
    description: str | None
    description_kind: str


def build_tree(doc: Document, extra: PageIndexExtra, ctx: BuildContext) -> Tree:
    """The PageIndex pipeline: structure, splits, merges, ids, summaries, description."""
    text = doc.content
    llm = ctx.llm
    structure: dict[str, Any] = {"structure": "markdown_headings"}
    if doc.page_starts:
        ctx.report("reading the PDF's structure")
        roots, structure = pdf_tree(doc, extra, llm, ctx)
        split_long_pages(
            text,
            roots,
            doc.page_starts,
            extra.max_page_num_each_node,
            extra.min_token_num_each_node,
        )
    else:
        ctx.report("building the heading tree")
        roots = heading_tree(doc.title, text)
    split_oversized(text, roots, extra, llm, ctx)
    merged = merge_small(text, roots, extra.min_token_num_each_node, extra.max_token_num_each_node)
    if merged:
        structure["merged_small_nodes"] = merged
    assign_ids(roots)
    nodes = _walk(roots)
    for node in nodes:
        node.token_count = tokens.count(text[node.start : node.own_end])
    if extra.if_add_node_summary == "yes":
        summarise(text, roots, extra, llm, ctx)
    description, description_kind = (None, "none")
    if extra.if_add_doc_description == "yes":
        description, description_kind = describe(doc, roots, llm, ctx)
    if not nodes:
        raise StrategyError("building the tree: the document has no text")
    return Tree(roots, nodes, structure, description, description_kind)


def stored(doc: Document, tree: Tree) -> Built:
    """A tree as the KB's chunks (one per node, in reading order) and the node/ToC rows."""
    text = doc.content
    chunks: list[dict[str, Any]] = []
    pages: dict[str, tuple[int | None, int | None]] = {}
    meta: list[dict[str, Any]] = []
    for ordinal, node in enumerate(tree.nodes):
        content = text[node.start : node.own_end]
        first = chunking.page_of(doc.page_starts, node.start)
        last = chunking.page_of(doc.page_starts, max(node.start, node.end - 1))
        pages[node.node_id] = (first, last)
        chunks.append(
            {
                "ordinal": ordinal,
                "content": content,
                "embed_text": " › ".join(node.path) + "\n" + content,
                "token_count": node.token_count,
                "heading_path": node.path,
                "page": first,
                "char_start": node.start,
                "char_end": node.own_end,
                "embedding": None,
            }
        )
        meta.append(
            {
                "ordinal": ordinal,
                "node_id": node.node_id,
                "parent_id": node.parent.node_id if node.parent else None,
                "depth": node.depth,
                "title": node.title,
                "summary": node.summary,
                "summary_kind": node.summary_kind,
                "page_start": first,
                "page_end": last,
                "section_end": node.end,
            }
        )
    artifacts = {
        "nodes": meta,
        "toc": _toc(tree.roots, pages),
        "description": tree.description,
        "description_kind": tree.description_kind,
        **tree.structure,
    }
    return Built(chunks, artifacts, 0, 0.0)


def build(doc: Document, cfg: IndexingConfig, ctx: BuildContext) -> Built:
    return stored(doc, build_tree(doc, PageIndexExtra.model_validate(cfg.extra), ctx))
