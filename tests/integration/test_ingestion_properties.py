"""Property-based: random titles and texts through the ingestion API."""

from __future__ import annotations

import psycopg
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kbpg.client import Client
from kbpg.errors import KbpgError

TEXT = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=400
)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(title=TEXT, content=TEXT, category=TEXT)
# "v" was once refused as blank: E'\v' is no escape in PostgreSQL, so "v" was trimmed.
@example(title="0", content="v", category="")
@example(title="t", content="\v\f text \t", category="c")
def test_put_document_stores_exactly_or_refuses_clearly(
    client: Client, conn: psycopg.Connection, title: str, content: str, category: str
) -> None:
    if not conn.execute("SELECT 1 FROM kb.knowledge_base WHERE name = 'prop'").fetchone():
        client.create_knowledge_base("prop")
    before = conn.execute("SELECT count(*) FROM kb.document").fetchone()[0]
    try:
        result = client.add_text("prop", title, content, {"category": category})
    except KbpgError as exc:
        assert exc.sqlstate in ("22023",), exc
        assert not title.strip() or not content.strip() or len(title) > 1000
        assert conn.execute("SELECT count(*) FROM kb.document").fetchone()[0] == before
        return
    stored = conn.execute(
        "SELECT title, content, metadata->>'category' FROM kb.document WHERE id = %s",
        (result.document_id,),
    ).fetchone()
    assert stored == (title, content, category)
    preview = conn.execute(
        "SELECT char_start, char_end, content FROM kb.preview_chunks(%s)", (content,)
    ).fetchall()
    for start, end, text in preview:
        assert content[start:end] == text
