"""Context assembly as plain Python."""

from __future__ import annotations

from kbpg_db.context import OUTSIDE_SCOPE, assemble


def row(cid: int, doc: int, content: str, kind: str = "rag", **kw: object) -> dict[str, object]:
    return {
        "kind": kind,
        "chunk_id": cid,
        "document_id": doc,
        "title": f"Doc{doc}",
        "heading_path": ["A", "B"],
        "page": 3,
        "content": content,
        "score": 1.0,
        **kw,
    }


def test_headers_order_budget_and_caps() -> None:
    rows = [
        row(1, 9, "persona", kind="system"),
        row(2, 8, "policy text", kind="policy"),
        row(3, 1, "first"),
        row(4, 1, "second"),
        row(5, 1, "third"),
        row(6, 2, "other"),
    ]
    ctx = assemble(rows, 1000, 2)
    assert ctx.text.startswith("[Always-known 1: Doc9 › A > B (p.3)]\npersona")
    assert "[Policy 2: Doc8 › A > B (p.3)]\n(guardrail" in ctx.text
    assert "[Source 3: Doc1 › A > B (p.3)]\nfirst" in ctx.text
    assert "third" not in ctx.text  # at most 2 per document
    assert "other" in ctx.text and ctx.has_relevant
    tight = assemble(rows, 25, 2)
    assert tight.tokens_used <= 25


def test_nothing_passes() -> None:
    ctx = assemble([row(1, 1, "x", passed=False)], 100, 3)
    assert not ctx.has_relevant and ctx.as_row()["fallback"] == OUTSIDE_SCOPE
    assert ctx.text == ""


def test_section_falls_back_to_the_hit_when_too_big() -> None:
    section = [row(10, 1, "word " * 300), row(11, 1, "hit")]
    ctx = assemble([row(11, 1, "hit", section=section)], 50, 3)
    assert ctx.sources[0]["chunk_ids"] == [11]
    ctx = assemble([row(11, 1, "hit", section=[row(10, 1, "intro"), row(11, 1, "hit")])], 500, 3)
    assert ctx.sources[0]["chunk_ids"] == [10, 11]
