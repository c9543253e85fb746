"""PageIndex's PDF pipeline: a PDF's outline, a printed table of contents (front matter
before printed page 1), or headings set in a larger font — each recovered without an LLM,
with its titles, levels and physical start pages; then the LLM (the scripted server) for
ToC lines the pattern cannot read and for pages with no heading the layout shows. The
PDFs are generated here (pymupdf)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import psycopg
import pymupdf

from kbpg.client import Client
from kbpg.loaders import load_file
from tests.fakeprovider import FakeProvider, last_user
from tests.helpers import allow_fake_key, run_worker
from tests.integration.test_llm import llm_extra

BODY = "This section explains the matter in plain words. " * 6


def _pdf(path: Path, pages: list[list[tuple[str, float, str]]], toc: Any = None) -> Path:
    """Each page: (text, font size, font) lines from the top."""
    doc = pymupdf.open()
    for lines in pages:
        page = doc.new_page()
        y = 72.0
        for text, size, font in lines:
            box = pymupdf.Rect(72, y, 540, y + 400)
            page.insert_textbox(box, text, fontsize=size, fontname=font)
            y += size * (2 + len(text) // 80) + 8
    if toc:
        doc.set_toc(toc)
    doc.save(path)
    return path


def _tree(
    client: Client, conn: psycopg.Connection, path: Path, extra: dict[str, Any] | None = None
) -> list[tuple[str, int, Any]]:
    """Index one PDF into a KB of its own; its nodes as (title, depth, start page)."""
    client.create_knowledge_base(
        path.stem, {"strategy": "page_index", "extra": extra or {"if_add_node_summary": "no"}}
    )
    client.add_file(path.stem, path)
    run_worker(conn.info.dsn)
    status = client.document_status(path.stem)[0]
    assert status["status"] == "ready", status["error"]
    return conn.execute(
        "SELECT title, depth, page_start FROM kb.page_index_nodes WHERE kb = %s ORDER BY ordinal",
        (path.stem,),
    ).fetchall()


def _structure(conn: psycopg.Connection) -> tuple[str, dict[str, Any]]:
    return conn.execute("SELECT structure, structure_detail FROM kb.page_index_toc").fetchone()


def test_outline(client: Client, conn: psycopg.Connection, tmp_path: Path) -> None:
    body = (BODY, 10, "helv")
    path = _pdf(
        tmp_path / "outlined.pdf",
        [
            [("Introduction", 10, "helv"), body],
            [("Scope", 10, "helv"), body],
            [("Methods", 10, "helv"), body],
            [body],
        ],
        toc=[[1, "Introduction", 1], [2, "Scope", 2], [1, "Methods", 3]],
    )
    assert _tree(client, conn, path) == [("Introduction", 0, 1), ("Scope", 1, 2), ("Methods", 0, 3)]
    assert _structure(conn)[0] == "outline"


def test_printed_toc_calibrated_to_physical_pages(
    client: Client, conn: psycopg.Connection, tmp_path: Path
) -> None:
    body = (BODY, 10, "helv")
    contents = "Contents\n1 Introduction ........ 1\n1.1 Scope ........ 2\n2 Methods ........ 3\n"
    path = _pdf(
        tmp_path / "printed.pdf",
        [
            [("A Field Manual", 24, "helv")],
            [(contents, 10, "helv")],
            [("Preface", 10, "helv"), body],
            [("1 Introduction", 10, "helv"), body],  # printed page 1 = physical page 4
            [("1.1 Scope", 10, "helv"), body],
            [("2 Methods", 10, "helv"), body],
        ],
    )
    doc = load_file(path)
    assert "toc" not in doc.metadata  # no outline: the printed ToC has to be read
    tree = _tree(client, conn, path)
    assert tree[1:] == [("1 Introduction", 0, 4), ("1.1 Scope", 1, 5), ("2 Methods", 0, 6)]
    assert tree[0][0] == "printed.pdf"  # the front matter before the first section
    source, detail = _structure(conn)
    assert source == "printed_toc" and detail == {
        "toc_pages": [2],
        "page_offset": 3,
        "entries": {"found": 3, "approximate": 0, "lost": 0},
    }


def test_printed_toc_entry_off_by_one_is_repaired(
    client: Client, conn: psycopg.Connection, tmp_path: Path
) -> None:
    body = (BODY, 10, "helv")
    contents = "Contents\nAlpha ........ 1\nBeta ........ 2\nGamma ........ 3\nDelta ........ 3\n"
    path = _pdf(
        tmp_path / "repaired.pdf",
        [
            [(contents, 10, "helv")],
            [("Alpha", 10, "helv"), body],
            [("Beta", 10, "helv"), body],
            [("Gamma", 10, "helv"), body],
            [("Delta", 10, "helv"), body],  # the ToC says 3: it starts on printed page 4
        ],
    )
    tree = _tree(client, conn, path)
    assert [(t, p) for t, _, p in tree if t != "repaired.pdf"] == [
        ("Alpha", 2),
        ("Beta", 3),
        ("Gamma", 4),
        ("Delta", 5),
    ]


def test_layout_headings(client: Client, conn: psycopg.Connection, tmp_path: Path) -> None:
    body = (BODY, 10, "helv")
    path = _pdf(
        tmp_path / "layout.pdf",
        [
            [("1 Introduction", 18, "helv"), body, ("1.1 Background", 13, "helv"), body],
            [body, ("1.2 Goals", 13, "helv"), body],
            [("2 Results", 18, "helv"), body],
        ],
    )
    assert load_file(path).metadata["pdf_headings"][0] == {
        "level": 1,
        "title": "1 Introduction",
        "page": 1,
    }
    assert _tree(client, conn, path) == [
        ("1 Introduction", 0, 1),
        ("1.1 Background", 1, 1),
        ("1.2 Goals", 1, 2),
        ("2 Results", 0, 3),
    ]
    assert _structure(conn)[0] == "layout"


def test_long_sections_split_by_pages(
    client: Client, conn: psycopg.Connection, tmp_path: Path
) -> None:
    body = (BODY, 10, "helv")
    path = _pdf(
        tmp_path / "long.pdf",
        [[("Only", 10, "helv"), body]] + [[body] for _ in range(4)],
        toc=[[1, "Only", 1]],
    )
    client.create_knowledge_base(
        "long",
        {
            "strategy": "page_index",
            "extra": {"if_add_node_summary": "no", "max_page_num_each_node": 2},
        },
    )
    client.add_file("long", path)
    run_worker(conn.info.dsn)
    rows = conn.execute(
        "SELECT title, depth, page_start, page_end FROM kb.page_index_nodes ORDER BY ordinal"
    ).fetchall()
    assert rows == [
        ("Only", 0, 1, 5),
        ("Only (pages 1–2)", 1, 1, 2),
        ("Only (pages 3–4)", 1, 3, 4),
        ("Only (pages 5–5)", 1, 5, 5),
    ]


def _llm_kb(
    client: Client, conn: psycopg.Connection, provider: FakeProvider, path: Path, **extra: Any
) -> list[tuple[str, int, Any]]:
    allow_fake_key(conn)
    settings = llm_extra(provider, if_add_node_summary="no", if_add_doc_description="no", **extra)
    return _tree(client, conn, path, settings)


WRAPPED = "2 A rather long chapter title that wraps onto a second line"


def _irregular_toc(tmp_path: Path) -> Path:
    body = (BODY, 10, "helv")
    contents = (
        "Contents\n1 Introduction ........ 1\n2 A rather long chapter title that\n"
        "wraps onto a second line ........ 2\nChapter 3 Methods 3\n"
    )
    return _pdf(
        tmp_path / "irregular.pdf",
        [
            [("A Field Manual", 24, "helv")],
            [(contents, 10, "helv")],
            [("1 Introduction", 10, "helv"), body],  # printed page 1 = physical page 3
            [(WRAPPED, 10, "helv"), body],
            [("Chapter 3 Methods", 10, "helv"), body],
        ],
    )


def test_irregular_toc_lines_are_read_by_the_llm(
    client: Client, conn: psycopg.Connection, provider: FakeProvider, tmp_path: Path
) -> None:
    path = _irregular_toc(tmp_path)

    def chat(body: dict[str, Any]) -> str:
        prompt = last_user(body)
        assert "could not be read" in prompt, prompt
        assert "2 A rather long chapter title that\nChapter 3 Methods 3" in prompt
        entries = [
            {"title": "1 Introduction", "page": 1},
            {"title": WRAPPED, "page": 2, "level": 1},
            {"title": "Chapter 3 Methods", "page": 3, "level": 1},
            {"title": "Appendix Z", "page": 9},  # not on the page: dropped
        ]
        return json.dumps({"entries": entries})

    provider.chat = chat
    tree = _llm_kb(client, conn, provider, path)
    assert tree[1:] == [("1 Introduction", 0, 3), (WRAPPED, 0, 4), ("Chapter 3 Methods", 0, 5)]
    assert len(provider.chat_calls) == 1  # one ToC page with irregular lines
    source, detail = _structure(conn)
    assert source == "printed_toc"
    assert detail == {
        "toc_pages": [2],
        "page_offset": 2,
        "toc_entries_read_by_llm": 3,
        "toc_entries_dropped": 1,
        "entries": {"found": 3, "approximate": 0, "lost": 0},
    }


def test_irregular_toc_lines_without_an_llm_are_counted(
    client: Client, conn: psycopg.Connection, tmp_path: Path
) -> None:
    tree = _tree(client, conn, _irregular_toc(tmp_path))
    assert ("1 Introduction", 0, 3) in tree
    source, detail = _structure(conn)
    assert source == "printed_toc" and detail["toc_lines_unread"] == 2


def test_structure_inferred_by_the_llm_and_small_parts_merged(
    client: Client, conn: psycopg.Connection, provider: FakeProvider, tmp_path: Path
) -> None:
    body = (BODY, 10, "helv")
    path = _pdf(
        tmp_path / "plain.pdf",
        [
            [("Overview", 10, "helv"), body],
            [("Installation", 10, "helv"), body],
            [("Usage", 10, "helv"), ("Run it.", 10, "helv")],  # too short to stand alone
        ],
    )
    assert "pdf_headings" not in load_file(path).metadata  # nothing stands out in the layout

    def chat(body: dict[str, Any]) -> str:
        prompt = last_user(body)
        pages = re.findall(r"<page (\d+)>\n(.*)", prompt)
        assert [p for p, _ in pages] == ["1", "2", "3"]  # one group: the pages are short
        heads = [{"title": line, "level": 1, "page": int(p)} for p, line in pages]
        heads.append({"title": "Troubleshooting", "level": 1, "page": 2})  # not printed
        return json.dumps({"headings": heads})

    provider.chat = chat
    tree = _llm_kb(client, conn, provider, path)
    assert tree == [("Overview", 0, 1), ("Installation", 0, 2)]
    rows = conn.execute(
        "SELECT page_end, text FROM kb.page_index_nodes ORDER BY ordinal"
    ).fetchall()
    assert rows[1][0] == 3 and "Run it." in rows[1][1]  # Usage joined Installation
    source, detail = _structure(conn)
    assert source == "llm"
    assert detail == {
        "inferred_pages": 3,
        "inferred_headings": 3,
        "inferred_dropped": 1,
        "merged_small_nodes": 1,
        "entries": {"found": 3, "approximate": 0, "lost": 0},
    }
