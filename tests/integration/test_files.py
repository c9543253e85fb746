"""Files and web pages through SQL and the worker: kb.add_file converts DOCX, PPTX, XLSX,
XLS, HTML, CSV, JSON and notebooks inside the indexing job into searchable chunks with
their headings, pages and tables; embedded images go to kb.document_media; bad files get
an error on their own document and harm nothing stored; kb.add_url fetches pages from a
local HTTP server and renders their scripts with headless Chromium."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from kbpg.cli import main as kbpg_main
from kbpg.client import Client
from tests import office_files as of
from tests import scans
from tests.helpers import needs_tesseract, run_worker
from tests.scans import eight_pages

FILES = {
    "policy.docx": of.docx_bytes,
    "deck.pptx": of.pptx_bytes,
    "plans.xlsx": of.xlsx_bytes,
    "stock.xls": of.xls_bytes,
    "guide.html": lambda: of.HTML.encode(),
    "cities.csv": lambda: of.CSV.encode(),
    "service.json": lambda: of.JSON.encode(),
    "analysis.ipynb": lambda: of.IPYNB.encode(),
}


def _add(conn: psycopg.Connection, kb: str, name: str, data: bytes, **kw: Any) -> tuple[int, str]:
    extra = "".join(f", {k} => %({k})s" for k in kw)
    row = conn.execute(
        f"SELECT document_id, action FROM kb.add_file(%(kb)s, %(name)s, %(data)s{extra})",
        {"kb": kb, "name": name, "data": data, **kw},
    ).fetchone()
    assert row is not None
    return int(row[0]), row[1]


def _status(conn: psycopg.Connection, kb: str) -> dict[str, dict[str, Any]]:
    rows = conn.execute(
        "SELECT title, status, error, chunk_count, source_format, media FROM kb.document_status "
        "WHERE kb = %s",
        (kb,),
    ).fetchall()
    return {
        r[0]: {"status": r[1], "error": r[2], "chunks": r[3], "format": r[4], "media": r[5]}
        for r in rows
    }


def _chunks(conn: psycopg.Connection, title: str) -> list[tuple[str, list[str], int | None]]:
    return conn.execute(
        "SELECT c.content, c.heading_path, c.page FROM kb.chunk c JOIN kb.document d "
        "ON d.id = c.document_id JOIN kb.knowledge_base k ON k.active_index_id = c.index_id "
        "WHERE d.title = %s ORDER BY c.ordinal",
        (title,),
    ).fetchall()


def _top(client: Client, kb: str, query: str) -> str:
    hits = client.search(kb, query, method="full_text", top_k=1)
    assert hits, query
    return hits[0].title


def test_every_format_through_the_worker(client: Client, conn: psycopg.Connection) -> None:
    client.create_knowledge_base("office")
    data = {name: make() for name, make in FILES.items()}
    for name, blob in data.items():
        assert _add(conn, "office", name, blob)[1] == "added"
    run_worker(conn.info.dsn)
    status = _status(conn, "office")
    assert {t: s["status"] for t, s in status.items()} == dict.fromkeys(FILES, "ready"), status
    assert status["policy.docx"]["format"] == "docx" and status["cities.csv"]["format"] == "csv"

    # DOCX headings are headings: heading_path works.
    docx = _chunks(conn, "policy.docx")
    paths = {tuple(h) for _, h, _ in docx}
    assert ("Refund policy", "Exceptions") in paths and ("Shipping",) in paths
    assert any("| Europe | 2 |" in c for c, _, _ in docx)
    # PPTX: one section per slide, the slide number its page.
    deck = _chunks(conn, "deck.pptx")
    assert {p for _, _, p in deck} == {1, 2, 3}
    assert any(p == 2 and "Lisbon" in c and h == ["Hiring plan"] for c, h, p in deck)
    # XLSX sheets are sections holding tables.
    xlsx = _chunks(conn, "plans.xlsx")
    assert any(h == ["Plans"] and "| Studio | 45 | 2000 |" in c for c, h, _ in xlsx)
    assert any(h == ["Contacts"] for _, h, _ in xlsx)
    # Each is findable by what it says.
    assert _top(client, "office", "Rotterdam warehouse business days") == "policy.docx"
    assert _top(client, "office", "hire platform engineers Lisbon") == "deck.pptx"
    assert _top(client, "office", "Gadgets count") == "stock.xls"
    assert _top(client, "office", "service owners oncall payments") == "service.json"
    assert _top(client, "office", "Netherlands population") == "cities.csv"
    assert _top(client, "office", "kbctl restore latest") == "guide.html"
    json_text = " ".join(c for c, _, _ in _chunks(conn, "service.json"))
    assert "service.owners[0].oncall: ana" in json_text
    # Cleaned HTML: nothing of its scripts, styles, frames or handlers reached a chunk.
    html_text = " ".join(c for c, _, _ in _chunks(conn, "guide.html"))
    for bad in ("SCRIPTTEXT", "XSS", "IFRAMETEXT", "NOSCRIPTTEXT", "javascript:", "onerror"):
        assert bad not in html_text
    # The original bytes are kept beside the text.
    kept = conn.execute(
        "SELECT f.data, f.media_type FROM kb.document_file f JOIN kb.document d "
        "ON d.id = f.document_id WHERE d.title = 'plans.xlsx'"
    ).fetchone()
    assert kept is not None and bytes(kept[0]) == data["plans.xlsx"]
    assert kept[1].endswith("spreadsheetml.sheet")


def test_every_converted_format_keeps_its_original_with_its_media_type(
    client: Client, conn: psycopg.Connection
) -> None:
    """The SQL side serves each suffix the converters read with its own media type (one
    list, kbpg_db.convert.FILE_TYPES), not application/octet-stream."""
    from kbpg_db.convert import FILE_TYPES

    served = dict(
        conn.execute(
            "SELECT s, kb._media_type_of('name' || upper(s)) FROM unnest(%s::text[]) s",
            (list(FILE_TYPES),),
        ).fetchall()
    )
    assert served == {s: t.media_type for s, t in FILE_TYPES.items()}
    client.create_knowledge_base("kept")
    for name, blob in [
        ("notes.rst", b"Title\n=====\n\nSome text.\n"),
        ("readme.markdown", b"# Readme\n\nHello.\n"),
        ("page.xhtml", b"<html xmlns='http://www.w3.org/1999/xhtml'><body><p>Hi</p></body></html>"),
        ("data.xml", b"<?xml version='1.0'?><items><item>one</item></items>"),
    ]:
        _add(conn, "kept", name, blob)
    kept = dict(
        conn.execute(
            "SELECT d.title, f.media_type FROM kb.document_file f JOIN kb.document d "
            "ON d.id = f.document_id"
        ).fetchall()
    )
    assert kept == {
        "notes.rst": "text/x-rst",
        "readme.markdown": "text/markdown",
        "page.xhtml": "application/xhtml+xml",
        "data.xml": "application/xml",
    }


def test_embedded_media_are_stored_once_and_referenced(
    client: Client, conn: psycopg.Connection
) -> None:
    client.create_knowledge_base("media")
    _add(conn, "media", "policy.docx", of.docx_bytes())
    _add(conn, "media", "guide.html", of.HTML.encode())
    md = f"# Diagram\n\nSee ![arch]({of.PNG_DATA_URI}) and ![again]({of.PNG_DATA_URI}).\n"
    assert client.add_text("media", "notes.md", md).action == "added"
    run_worker(conn.info.dsn)
    status = _status(conn, "media")
    assert all(s["status"] == "ready" for s in status.values()), status
    assert {t: s["media"] for t, s in status.items()} == {
        "policy.docx": 1,
        "guide.html": 1,
        "notes.md": 1,
    }
    stored = conn.execute(
        "SELECT d.title, d.content FROM kb.document d WHERE d.title IN ('policy.docx', 'notes.md')"
    ).fetchall()
    refs = conn.execute("SELECT title, ref FROM kb.document_media_list ORDER BY title").fetchall()
    assert {r[0] for r in refs} == {"guide.html", "notes.md", "policy.docx"}
    for title, content in stored:
        assert "base64" not in content
        ref = next(r for t, r in refs if t == title)
        assert ref.startswith("kbpg-media:") and ref in content
    # No chunk carries base64; the medium comes back by its reference, bytes exact.
    assert (
        conn.execute("SELECT count(*) FROM kb.chunk WHERE content LIKE '%;base64,%'").fetchone()[0]
        == 0
    )
    medium = client.media("media", refs[0][1])
    assert bytes(medium["data"]) == of.PNG and medium["media_type"] == "image/png"
    assert medium["byte_size"] == len(of.PNG)
    # Same text again: unchanged, media untouched.
    assert client.add_text("media", "notes.md", md).action == "unchanged"
    missing = "kbpg-media:0000000000000000.png"
    with pytest.raises(psycopg.errors.NoDataFound, match=f'media "{missing}" does not exist'):
        conn.execute("SELECT * FROM kb.media('media', %s)", (missing,))


def test_bad_files_fail_their_own_document_only(client: Client, conn: psycopg.Connection) -> None:
    client.create_knowledge_base("bad")
    _add(conn, "bad", "policy.docx", of.docx_bytes())
    run_worker(conn.info.dsn)
    before = _chunks(conn, "policy.docx")
    assert before
    bad = {
        "corrupt.docx": (b"PK\x03\x04" + b"\x00" * 200, "not a valid DOCX file"),
        "bomb.xlsx": (of.zip_bomb("xl/workbook.xml"), "looks like a zip bomb"),
        "nested.html": (of.deep_html(), "nested more than 512 elements deep"),
        "huge.csv": (of.big_csv(), "more than 200000 rows"),
        "nested.json": (of.deep_json(), "nested more than 512 levels deep"),
        "scan.pdf": (of.scanned_pdf_bytes(), "no extractable text"),
        "broken.pptx": (b"not a zip at all", "not a valid PPTX file"),
    }
    for name, (data, _) in bad.items():
        _add(conn, "bad", name, data)
    # The good document replaced by a damaged version: the old chunks keep serving.
    assert _add(conn, "bad", "damaged.docx", b"PK junk", title="policy.docx")[1] == "replaced"
    run_worker(conn.info.dsn)
    status = _status(conn, "bad")
    for name, (_, message) in bad.items():
        assert status[name]["status"] == "error", (name, status[name])
        assert message in status[name]["error"] and f'"{name}"' in status[name]["error"]
    assert status["policy.docx"]["status"] == "error"
    assert "not a valid DOCX file" in status["policy.docx"]["error"]
    assert _chunks(conn, "policy.docx") == before
    assert _top(client, "bad", "Rotterdam warehouse") == "policy.docx"
    # One try each: conversion is deterministic, so nothing was retried.
    attempts = conn.execute("SELECT max(attempts) FROM kb.job WHERE status = 'failed'").fetchone()
    assert attempts == (1,)
    # The worker is fine: the next good file indexes.
    _add(conn, "bad", "cities.csv", of.CSV.encode())
    run_worker(conn.info.dsn)
    assert _status(conn, "bad")["cities.csv"]["status"] == "ready"


def test_add_file_checks_its_arguments(client: Client, conn: psycopg.Connection) -> None:
    client.create_knowledge_base("args")
    cases = [
        (
            ("args", "clip.mp4", b"\x00\x00\x00\x18ftypmp42"),
            psycopg.errors.InvalidParameterValue,
            'file "clip.mp4" has an unsupported type',
        ),
        (("args", "", b"x"), psycopg.errors.InvalidParameterValue, "file_name must name the file"),
        (
            ("args", "a.csv", b""),
            psycopg.errors.InvalidParameterValue,
            'the file of document "a.csv" is empty',
        ),
        (("args", "a.csv", None), psycopg.errors.InvalidParameterValue, "is NULL"),
        (
            ("nope", "a.csv", b"a,b"),
            psycopg.errors.NoDataFound,
            'knowledge base "nope" does not exist',
        ),
    ]
    for args, exc, message in cases:
        with pytest.raises(exc, match=message):
            conn.execute("SELECT * FROM kb.add_file(%s, %s, %s)", args)
    conn.execute("SET kb.max_document_bytes = 10")
    with pytest.raises(psycopg.errors.ProgramLimitExceeded, match="is 11 bytes; the limit is 10"):
        conn.execute("SELECT * FROM kb.add_file('args', 'a.csv', 'a,b\n1,23456'::bytea)")
    conn.execute("RESET kb.max_document_bytes")
    assert conn.execute("SELECT count(*) FROM kb.document").fetchone() == (0,)


def test_only_the_server_configuration_raises_limits_or_moves_python(
    client: Client, conn: psycopg.Connection, dsn: str
) -> None:
    """Conversion runs as the server's OS user: a session, role or database setting (which
    any user can make for itself) may lower its limits but not raise them, and may not
    point PL/Python at other code."""
    client.create_knowledge_base("lim")
    kb_id, doc = conn.execute(
        "SELECT k.id, f.document_id FROM kb.add_file('lim', 'a.csv', 'a,b\n1,2'::bytea) f, "
        "kb.knowledge_base k WHERE k.name = 'lim'"
    ).fetchone()
    conn.execute("SET kb.convert_memory_mb = '100000'")
    with pytest.raises(psycopg.errors.InvalidParameterValue) as err:
        conn.execute("SELECT kb._convert_document(%s, %s)", (kb_id, doc))
    assert "kb.convert_memory_mb = 100000 is above the server's 2048" in str(err.value)
    assert "postgresql.conf" in err.value.diag.message_hint
    conn.execute("SET kb.convert_memory_mb = '512'")  # lower: fine
    assert conn.execute("SELECT kb._convert_document(%s, %s)", (kb_id, doc)).fetchone() == ({},)
    conn.execute("SET kb.max_document_bytes = '100000000'")  # the text's cap: any session
    assert conn.execute("SELECT kb._convert_document(%s, %s)", (kb_id, doc)).fetchone() == ({},)
    conn.execute("RESET kb.max_document_bytes")
    run_worker(dsn)
    assert _status(conn, "lim")["a.csv"]["status"] == "ready"
    with psycopg.connect(dsn, autocommit=True) as other:
        other.execute("SET kb.python_path = '/tmp'")
        with pytest.raises(psycopg.Error, match="read only from the server") as bad:
            other.execute("SELECT kb.python_init()")
        assert bad.value.sqlstate == "KB002"
        other.execute("RESET kb.python_path")
        other.execute("SELECT kb.python_init()")  # the server's own setting


def test_reindex_converts_the_kept_original_and_keep_file_false(
    client: Client, conn: psycopg.Connection
) -> None:
    client.create_knowledge_base("kept")
    xlsx = of.xlsx_bytes()
    _add(conn, "kept", "plans.xlsx", xlsx)
    _add(conn, "kept", "cities.csv", of.CSV.encode(), keep_file=False)
    assert _add(conn, "kept", "plans.xlsx", xlsx)[1] == "unchanged"
    run_worker(conn.info.dsn)
    files = dict(
        conn.execute(
            "SELECT d.title, f.byte_size FROM kb.document d LEFT JOIN kb.document_file f "
            "ON f.document_id = d.id"
        ).fetchall()
    )
    assert files["plans.xlsx"] == len(xlsx) and files["cities.csv"] is None
    # A reindex with another chunk size converts the kept original again; the CSV whose
    # original was dropped keeps the text converted before.
    conn.execute("UPDATE kb.document SET content = 'stale' WHERE title = 'plans.xlsx'")
    client.reindex_knowledge_base("kept", {"chunk_size": 120})
    run_worker(conn.info.dsn)
    status = _status(conn, "kept")
    assert all(s["status"] == "ready" for s in status.values()), status
    text = conn.execute("SELECT content FROM kb.document WHERE title = 'plans.xlsx'").fetchone()
    assert text[0].startswith("# Plans")
    assert _top(client, "kept", "Netherlands population") == "cities.csv"


def test_cli_ingests_a_folder_of_office_files(
    client: Client, conn: psycopg.Connection, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    client.create_knowledge_base("folder")
    for name, make in FILES.items():
        (tmp_path / name).write_bytes(make())
    (tmp_path / "notes.md").write_text("# Notes\n\nPlain Markdown still reads as before.\n")
    code = kbpg_main(["--dsn", conn.info.dsn, "ingest", "folder", str(tmp_path), "--wait"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"{len(FILES) + 1} added" in out
    status = _status(conn, "folder")
    assert len(status) == len(FILES) + 1
    assert all(s["status"] == "ready" for s in status.values()), status


# ------------------------------------------------------------------------------ URLs

PAGES = {
    "/js.html": (
        "text/html",
        b"<html><head><title>Status page</title></head><body><div id='app'>Loading</div>"
        b"<script>document.getElementById('app').innerHTML = '<h1>Incident review</h1>"
        b"<p>The ' + 'zebrafish deployment failed at noon.</p>';</script></body></html>",
    ),
    "/table.csv": ("text/csv", of.CSV.encode()),
}


# The fetch limit the URL test runs under, and how long /slow takes to answer. Chromium's
# cold start shares this limit with the render, and on a loaded 2-core machine (the test
# suite on both cores) it has taken over 3 s, so the limit is not tighter than this.
FETCH_TIMEOUT_S = 10
SLOW_S = FETCH_TIMEOUT_S + 4


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/loop":
            self.send_response(302)
            self.send_header("Location", "/loop")
            self.end_headers()
            return
        if self.path == "/slow":
            time.sleep(SLOW_S)
        page = PAGES.get(self.path)
        if page is None:
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", page[0])
        self.send_header("Content-Length", str(len(page[1])))
        self.end_headers()
        self.wfile.write(page[1])

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def site() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_urls_fetched_rendered_and_converted(
    client: Client, conn: psycopg.Connection, site: str
) -> None:
    db = conn.execute("SELECT current_database()").fetchone()[0]
    conn.execute(
        sql.SQL("ALTER DATABASE {} SET kb.fetch_timeout_s = {}").format(
            sql.Identifier(db), sql.Literal(str(FETCH_TIMEOUT_S))
        )
    )
    client.create_knowledge_base("web")
    page = client.add_url("web", site + "/js.html")
    assert page.action == "added"
    client.add_url("web", site + "/table.csv", title="cities")
    client.add_url("web", site + "/loop")
    client.add_url("web", site + "/slow")
    client.add_url("web", site + "/missing")
    with pytest.raises(
        psycopg.errors.InvalidParameterValue, match="url must be an http or https URL"
    ):
        conn.execute("SELECT * FROM kb.add_url('web', 'file:///etc/passwd')")
    run_worker(conn.info.dsn)
    status = _status(conn, "web")
    assert status[site + "/js.html"]["status"] == "ready", status
    assert status["cities"]["status"] == "ready", status
    assert "redirects more than 10 times" in status[site + "/loop"]["error"]
    assert status[site + "/slow"]["error"] == (
        f'document "{site}/slow": page {site}/slow did not answer within {FETCH_TIMEOUT_S} s '
        "(kb.fetch_timeout_s)"
    )
    assert "answered HTTP 404" in status[site + "/missing"]["error"]
    # Text the page's script wrote is indexed and found; source_uri keeps the URL.
    hits = client.search("web", "zebrafish deployment", method="full_text")
    assert hits and hits[0].title == site + "/js.html"
    assert hits[0].heading_path == ["Incident review"]
    assert conn.execute(
        "SELECT source_uri, source_meta->>'source_title' FROM kb.document WHERE title = %s",
        (site + "/js.html",),
    ).fetchone() == (site + "/js.html", "Status page")
    assert _top(client, "web", "Netherlands population") == "cities"
    # The rendered page is kept: a reindex converts it again without fetching.
    kept = conn.execute(
        "SELECT f.data FROM kb.document_file f JOIN kb.document d ON d.id = f.document_id "
        "WHERE d.title = %s",
        (site + "/js.html",),
    ).fetchone()
    assert kept is not None and b"zebrafish" in bytes(kept[0])
    assert client.add_url("web", site + "/js.html").action == "replaced"  # fetched anew


@needs_tesseract
def test_scans_and_images_are_read_by_ocr_in_the_job(
    client: Client, conn: psycopg.Connection, tmp_path: Path
) -> None:
    client.create_knowledge_base("scans")
    words = scans.paragraphs(11, 2, 30)
    png = scans.scan_png([words], dpi=200, angle=0.7)
    _add(conn, "scans", "notice.png", png)
    typed = "The harbour office opens at six."
    pdf = scans.scanned_pdf(
        [b"", scans.scan_png([scans.paragraphs(12, 2, 30)], dpi=200)], {1: typed}
    )
    (tmp_path / "ledger.pdf").write_bytes(pdf)
    (tmp_path / "photo.jpg").write_bytes(png)  # PNG bytes named .jpg: read by what they are
    code = kbpg_main(["--dsn", conn.info.dsn, "ingest", "scans", str(tmp_path), "--wait"])
    assert code == 0
    run_worker(conn.info.dsn)
    status = _status(conn, "scans")
    assert {t: s["status"] for t, s in status.items()} == {
        "notice.png": "ready",
        "ledger.pdf": "ready",
        "photo.jpg": "ready",
    }, status
    meta = conn.execute(
        "SELECT d.title, d.source_meta FROM kb.document d JOIN kb.knowledge_base k "
        "ON k.id = d.kb_id WHERE k.name = 'scans'"
    ).fetchall()
    ocr = {title: m["ocr"] for title, m in meta}
    assert [p["page"] for p in ocr["ledger.pdf"]["pages"]] == [2]
    assert ocr["notice.png"]["engine"] == "tesseract" and ocr["notice.png"]["confidence"] > 0.5
    # The scanned page's words are found, past the start of page 2.
    (starts,) = conn.execute(
        "SELECT page_starts FROM kb.document WHERE title = 'ledger.pdf'"
    ).fetchone() or (None,)
    word = scans.paragraphs(12, 2, 30)[1].split()[:6]
    hits = client.search("scans", " ".join(word), method="full_text", top_k=3)
    assert any(h.title == "ledger.pdf" and h.char_end > starts[1] for h in hits), hits
    assert _chunks(conn, "ledger.pdf")[0][0].startswith(typed)


def test_pdf_chunks_carry_their_regions_to_search_and_context(
    client: Client, conn: psycopg.Connection, tmp_path: Path
) -> None:
    client.create_knowledge_base("boxes")
    pdf = eight_pages()
    _add(conn, "boxes", "server.pdf", pdf)  # converted by the server's job
    (tmp_path / "client.pdf").write_bytes(pdf)  # converted by kbpg ingest's reader
    assert kbpg_main(["--dsn", conn.info.dsn, "ingest", "boxes", str(tmp_path), "--wait"]) == 0
    run_worker(conn.info.dsn)
    hits = client.search("boxes", "harbour number 5 cranes", method="full_text", top_k=4)
    assert {h.title for h in hits} == {"server.pdf", "client.pdf"}
    for hit in hits:
        regions = hit.metadata["regions"]
        assert regions and all(set(r) == {"page", "bbox"} for r in regions)
        assert hit.page in {r["page"] for r in regions}
        x0, y0, x1, y1 = regions[0]["bbox"]
        assert 0 < x0 < x1 <= 595 and 0 < y0 < y1 <= 842  # A4, in points
        assert "ocr" not in hit.metadata  # a text layer, not OCR
    # The same document converted either way: the same boxes for the same chunk.
    by_title = {h.title: h for h in hits if "harbour number 5" in h.content}
    assert by_title["server.pdf"].metadata["regions"] == by_title["client.pdf"].metadata["regions"]
    ((sources,),) = conn.execute(
        "SELECT sources FROM kb.build_context('boxes', 'harbour number 5 cranes', "
        "method => 'full_text', top_k => 2)"
    ).fetchall()
    assert sources and all(s["regions"] for s in sources)
    # The document's own metadata is untouched by them.
    metas = conn.execute("SELECT metadata FROM kb.document WHERE title LIKE '%.pdf'").fetchall()
    assert all("regions" not in m for (m,) in metas)


@needs_tesseract
def test_ocr_chunks_are_marked_with_their_confidence(
    client: Client, conn: psycopg.Connection
) -> None:
    client.create_knowledge_base("ocrmark")
    words = scans.paragraphs(21, 2, 30)
    _add(conn, "ocrmark", "scan.png", scans.scan_png([words], dpi=200))
    client.add_text("ocrmark", "typed", " ".join(words[:1]))
    run_worker(conn.info.dsn)
    hits = client.search("ocrmark", words[0], method="full_text", top_k=5)
    marks = {h.title: h.metadata.get("ocr") for h in hits}
    assert marks["typed"] is None
    assert marks["scan.png"]["engine"] == "tesseract"
    assert 0.5 < marks["scan.png"]["confidence"] <= 1


def test_put_document_refuses_regions_outside_its_text(conn: psycopg.Connection) -> None:
    conn.execute("SELECT kb.create_knowledge_base('regs')")
    for bad in (
        "[[0, 99, 1, 0, 0, 1, 1]]",
        "[[0, 2, 0, 0, 0, 1, 1]]",
        '[[0, 2, 1, "x", 0, 1, 1]]',
        '[["a", 2, 1, 0, 0, 1, 1]]',  # a string where an offset goes: this error, no cast's
        "[[0, 2, 1, 0, 0, 1]]",
        "{}",
    ):
        with pytest.raises(psycopg.errors.InvalidParameterValue, match='regions of document "d"'):
            conn.execute(
                "SELECT kb.put_document('regs', 'd', 'short text', regions => %s::jsonb)", (bad,)
            )
    assert conn.execute("SELECT count(*) FROM kb.document").fetchone() == (0,)
    conn.execute(
        "SELECT kb.put_document('regs', 'd', 'short text', regions => '[[0, 5, 1, 1, 2, 3, 4]]')"
    )
