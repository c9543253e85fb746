"""The documentation test sets are sound: every question's gold section exists in the
converted pages, as kbpg cites sections, and holds the question's needle; the paraphrase
set's questions carry neither their needle nor anything shaped like an identifier."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from kbpg_db import convert
from kbpg_db.chunking import chunk_text

DATA = Path(__file__).parents[2] / "data"
# snake_case, dotted.names, call(), CamelCase inside a word, --flags
IDENTIFIER = re.compile(r"\w_\w|\w\.\w|\w\(|[a-z][A-Z]|--\w")


def questions(name: str) -> list[dict]:
    lines = (DATA / name / "questions.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


@pytest.mark.parametrize("name", ["docs-pg", "docs-python", "docs-node"])
def test_gold_sections_exist_and_answer(name: str) -> None:
    sections: dict[str, list[tuple[str, str]]] = {}
    for page in sorted([*(DATA / name).glob("html/*.html"), *(DATA / name).glob("md/*.md")]):
        text = convert.convert(page.read_bytes(), page.name).content
        sections[page.name] = [
            (" › ".join([page.name, *c.heading_path]), c.content)
            for c in chunk_text(text, "markdown_header", 200, 20)
        ]
    qs = questions(name)
    assert len(qs) >= 60
    assert len({q["query"] for q in qs}) == len(qs)
    for q in qs:
        texts = [
            t
            for gold in q["expected"]
            for p, t in sections[gold.split(" › ")[0]]
            if p == gold or p.startswith(gold + " › ")
        ]
        assert texts, f"no section {q['expected']}"
        assert any(q["needle"].lower() in t.lower() for t in texts), q


@pytest.mark.parametrize("name", ["docs-python", "docs-node"])
def test_paraphrased_questions_name_nothing_of_their_answer(name: str) -> None:
    for q in questions(name):
        assert q["needle"].lower() not in q["query"].lower(), q
        assert not IDENTIFIER.search(q["query"]), q
