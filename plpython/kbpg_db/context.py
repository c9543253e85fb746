"""Prompt-ready context: cited chunks within a token budget.

``assemble`` takes rows already ranked by SQL (system and policy documents first, then
the retrieved chunks) and lays them out under ``[Source n: title › section (p.N)]``
headers, never over the budget and at most ``max_per_doc`` chunks per retrieved document.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kbpg_db import tokens

OUTSIDE_SCOPE = "That's outside what I cover."
SECTION_MARK = " › "


@dataclass
class Context:
    text: str = ""
    sources: list[dict[str, Any]] = field(default_factory=list)
    tokens_used: int = 0
    has_relevant: bool = False

    def as_row(self) -> dict[str, Any]:
        import json

        return {
            "context": self.text,
            "sources": json.dumps(self.sources),
            "tokens_used": self.tokens_used,
            "has_relevant": self.has_relevant,
            "fallback": None if self.has_relevant else OUTSIDE_SCOPE,
        }


def source_label(
    title: str | None, heading_path: list[str] | None, page: int | None, page_end: int | None = None
) -> str:
    """How kbpg cites a source everywhere: ``title › Section > Sub (p.N)`` or ``(p.N–M)``."""
    parts = [title or "untitled"]
    if heading_path:
        parts.append(" > ".join(heading_path))
    text = SECTION_MARK.join(parts)
    if page and page_end and page_end != page:
        text += f" (p.{page}–{page_end})"
    elif page:
        text += f" (p.{page})"
    return text


def header(label: str, n: int, row: dict[str, Any]) -> str:
    label_text = source_label(
        row.get("title"), row.get("heading_path"), row.get("page"), row.get("page_end")
    )
    return f"[{label} {n}: {label_text}]"


def _origin(group: list[dict[str, Any]]) -> dict[str, Any]:
    """Where a source's chunks sit on their pages: their boxes in order, and OCR's mean
    confidence where OCR read any of them (chunks of a PDF or an image only)."""
    origins = [r.get("origin") or {} for r in group]
    regions = [region for o in origins for region in o.get("regions") or []]
    out: dict[str, Any] = {"regions": regions} if regions else {}
    read = [o["ocr"] for o in origins if o.get("ocr")]
    if read:
        mean = sum(float(o["confidence"]) for o in read) / len(read)
        out["ocr"] = {"engine": read[0]["engine"], "confidence": round(mean, 3)}
    return out


def assemble(rows: list[dict[str, Any]], budget: int, max_per_doc: int) -> Context:
    """Lay ``rows`` out in order within ``budget`` tokens.

    Each row: kind ('system' | 'policy' | 'rag'), chunk_id, document_id, title,
    heading_path, page, content, score, passed (rag rows: over the relevance threshold).
    A rag row may carry ``section``: the rows of its whole section (itself included) in
    document order; the section goes in whole when it fits, else the row alone.
    """
    ctx = Context()
    blocks: list[str] = []
    per_doc: dict[int, int] = {}
    seen: set[int] = set()

    def place(kind: str, group: list[dict[str, Any]]) -> bool:
        group = [r for r in group if r["chunk_id"] not in seen]
        if not group:
            return True
        first = group[0]
        label = {"system": "Always-known", "policy": "Policy"}.get(kind, "Source")
        n = len(ctx.sources) + 1
        head = header(label, n, first)
        if kind == "policy":
            head += "\n(guardrail: the answer must not contradict this)"
        block = head + "\n" + "\n\n".join(r["content"] for r in group)
        cost = tokens.count(block) + 2
        if ctx.tokens_used + cost > budget:
            return False
        ctx.tokens_used += cost
        blocks.append(block)
        seen.update(r["chunk_id"] for r in group)
        source = {
            "n": n,
            "label": head.split("\n", 1)[0],
            "kind": kind,
            "chunk_ids": [r["chunk_id"] for r in group],
            "document_id": first["document_id"],
            "title": first.get("title"),
            "heading_path": first.get("heading_path") or [],
            "page": first.get("page"),
            "score": first.get("score"),
        }
        source.update(_origin(group))
        ctx.sources.append(source)
        return True

    for row in rows:
        kind = row.get("kind", "rag")
        if kind != "rag":
            place(kind, [row])
            continue
        if not row.get("passed", True) or row["chunk_id"] in seen:
            continue
        if per_doc.get(row["document_id"], 0) >= max_per_doc:
            continue
        section = row.get("section") or []
        if (len(section) > 1 and place(kind, section)) or place(kind, [row]):
            per_doc[row["document_id"]] = per_doc.get(row["document_id"], 0) + 1
            ctx.has_relevant = True
    ctx.text = "\n\n".join(blocks)
    return ctx
