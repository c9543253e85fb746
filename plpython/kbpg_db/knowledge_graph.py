"""The knowledge-graph index of a ChunkEmbed document: its vertices and edges.

Three graphs share one build path and one pair of tables (kb.graph_node, kb.graph_edge,
written by kb._store_knowledge_graph):

- document: the document -include-> its top chunks, a chunk -include-> the chunks of the
  sections nested under its own, and chunk -next-> chunk in reading order;
- heading: a Markdown document -contains-> its H1s -contains-> H2s ..., from the headings
  outside fenced code;
- code: a source file -defines-> its definitions, with calls, imports, inherits and
  implements (kbpg_db.code_graph).

Every vertex names the chunk that holds it, so a graph answer cites text.
"""

from __future__ import annotations

import bisect
from typing import Any

from kbpg_db import chunking, code_graph
from kbpg_db.config import IndexingConfig


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


def build(
    title: str,
    content: str,
    metadata: dict[str, Any],
    cfg: IndexingConfig,
    rows: list[dict[str, Any]],
    code: code_graph.CodeGraph | None,
) -> dict[str, Any]:
    """The document's graphs as kb._store_knowledge_graph's artifacts; vertices and edges
    name chunks by ordinal and one another by local id."""
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
    return {"graph": {"nodes": g.nodes, "edges": g.edges}}
