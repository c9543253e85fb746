"""The documentation test set is sound: every question's gold section exists in the
converted pages, as kbpg cites sections, and holds the question's needle."""

from __future__ import annotations

import json
from pathlib import Path

from kbpg_db import convert
from kbpg_db.chunking import chunk_text

DATA = Path(__file__).parents[2] / "data" / "docs-pg"


def test_gold_sections_exist_and_answer() -> None:
    sections: dict[str, list[tuple[str, str]]] = {}
    for page in sorted((DATA / "html").iterdir()):
        text = convert.convert(page.read_bytes(), page.name).content
        sections[page.name] = [
            (" › ".join([page.name, *c.heading_path]), c.content)
            for c in chunk_text(text, "markdown_header", 200, 20)
        ]
    questions = [json.loads(line) for line in (DATA / "questions.jsonl").read_text().splitlines()]
    assert len(questions) >= 50
    assert len({q["query"] for q in questions}) == len(questions)
    for q in questions:
        texts = [
            t
            for gold in q["expected"]
            for p, t in sections[gold.split(" › ")[0]]
            if p == gold or p.startswith(gold + " › ")
        ]
        assert texts, f"no section {q['expected']}"
        assert any(q["needle"].lower() in t.lower() for t in texts), q
