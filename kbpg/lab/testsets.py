"""Test sets from text the lab's form takes, and from a BEIR-format folder."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from kbpg.evaluate import load_beir
from kbpg.lab import LabError


def parse_lines(text: str) -> list[tuple[str, list[str]]]:
    """One query a line: ``query => expected; another expected`` (a title, or a section
    written ``title › heading``). Blank lines and lines starting with # are skipped."""
    out: list[tuple[str, list[str]]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        query, sep, expected = line.partition("=>")
        items = [e.strip() for e in expected.split(";") if e.strip()]
        if not sep or not query.strip() or not items:
            raise LabError(
                f"line {number}: write the query, then => and what it should find "
                f"(titles or 'title › section', separated by ;), got {line!r}"
            )
        out.append((query.strip(), items))
    if not out:
        raise LabError("give at least one query line: query => expected title")
    return out


def import_beir(
    connect: Callable[[], Any],
    kb: str,
    name: str,
    folder: Path,
    split: str = "test",
    limit: int | None = None,
) -> int:
    """A BEIR folder's queries as a test set; each expects the corpus documents its qrels
    mark relevant, by their ``_id`` (the title `kbpg eval` gives them)."""
    try:
        data = load_beir(folder, split)
    except Exception as exc:
        raise LabError(str(getattr(exc, "message", exc))) from None
    # Only documents the KB holds can be found (a KB of part of the corpus keeps the
    # queries whose relevant documents it has).
    import psycopg
    from psycopg.rows import tuple_row

    try:
        with connect() as conn, conn.cursor(row_factory=tuple_row) as cur:
            cur.execute("SELECT title FROM kb.list_documents(%s)", (kb,))
            held = {title for (title,) in cur.fetchall()}
    except psycopg.Error as exc:
        raise LabError.from_db(exc) from None
    rows = [
        (text, sorted(d for d, v in data.qrels.get(qid, {}).items() if v > 0 and d in held))
        for qid, text in data.queries.items()
    ]
    rows = [(q, e) for q, e in rows if e][: limit or None]
    if not rows:
        raise LabError(
            f"{folder} has no {split} queries whose relevant documents are in {kb!r}",
            hint="load the corpus first: kbpg eval, or kbpg ingest",
        )
    return save(connect, kb, name, f"BEIR {data.name}, {split} split", rows)


def save(
    connect: Callable[[], Any],
    kb: str,
    name: str,
    description: str,
    rows: list[tuple[str, list[str]]],
) -> int:
    """A new test set with its queries, in one transaction (all or nothing)."""
    import psycopg

    with connect() as conn:
        try:
            with conn.transaction():
                conn.execute("SELECT kb.create_test_set(%s, %s, %s)", (kb, name, description))
                with conn.cursor() as cur:
                    cur.executemany(
                        "SELECT kb.add_test_query(%s, %s, %s, %s)",
                        [(kb, name, q, e) for q, e in rows],
                    )
        except psycopg.Error as exc:
            raise LabError.from_db(exc) from None
    return len(rows)
