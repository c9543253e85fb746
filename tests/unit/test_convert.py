"""kbpg_db.convert: every format to Markdown with its structure, HTML cleaned, media taken
out, and bad input refused with a message that names the problem; the isolated child
process bounds memory and time."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kbpg_db import chunking, convert, media
from kbpg_db.convert import ConvertError, Limits

from tests import office_files as of


def test_docx_headings_tables_and_image() -> None:
    out = convert.convert(of.docx_bytes(), "policy.docx")
    assert out.format == "docx" and out.meta["file_type"] == "docx"
    heads = re.findall(r"^(#+) (.+)$", out.content, re.M)
    assert heads == [("#", "Refund policy"), ("##", "Exceptions"), ("#", "Shipping")]
    # Word tables have no header cells: the first row becomes the header.
    assert "| Zone | Days |\n|---|---|\n| Europe | 2 |\n| Overseas | 9 |" in out.content
    assert of.PNG_DATA_URI in out.content  # kept for media extraction


def test_pptx_slides_are_sections_with_pages() -> None:
    out = convert.convert(of.pptx_bytes(), "deck.pptx")
    assert out.meta["slides"] == 3
    assert out.page_starts is not None and len(out.page_starts) == 3
    slides = [
        out.content[a:b] for a, b in zip(out.page_starts, [*out.page_starts[1:], None], strict=True)
    ]
    assert slides[0].startswith("# Quarterly results\n") and "eleven percent" in slides[0]
    assert slides[1].startswith("# Hiring plan\n") and "Lisbon" in slides[1]
    # A slide without a title still starts a section, named by its number.
    assert slides[2].startswith("# Slide 3\n") and "Pixel" in slides[2]
    assert "data:image/png;base64," in slides[2]


def test_xlsx_and_xls_sheets_become_tables() -> None:
    out = convert.convert(of.xlsx_bytes(), "plans.xlsx")
    assert out.meta["sheets"] == ["Plans", "Contacts"]
    assert out.content.startswith(
        "# Plans\n\n| Plan | Price (EUR) | Messages |\n|---|---|---|\n| Starter | 19 | 500 |\n"
        "| Studio | 45 | 2000 |\n\n# Contacts\n\n| Team | Email |"
    )
    xls = convert.convert(of.xls_bytes(), "stock.xls")
    assert (
        xls.content
        == "# Inventory\n\n| Item | Count |\n|---|---|\n| Widgets | 40 |\n| Gadgets | 7 |\n"
    )


def test_csv_is_a_markdown_table_and_cells_are_escaped() -> None:
    out = convert.convert(of.CSV.encode(), "cities.csv")
    assert out.content.splitlines()[:3] == [
        "| city | country | population |",
        "|---|---|---|",
        "| Lisbon | Portugal | 545000 |",
    ]
    odd = convert.convert(b'a;b\n"x|y";"multi\nline"\n', "odd.csv")
    assert "| x\\|y | multi<br>line |" in odd.content  # sniffed ';', pipe escaped
    tsv = convert.convert(b"k\tv\n1\t2\n", "t.tsv")
    assert tsv.content.startswith("| k | v |")


def test_json_flattened_to_dotted_paths() -> None:
    out = convert.convert(of.JSON.encode(), "service.json")
    assert out.content.splitlines() == [
        "service.name: billing",
        "service.owners[0].team: payments",
        "service.owners[0].oncall: ana",
        "limits.rate: 100",
        "limits.burst: null",
        "tags[0]: core",
        "tags[1]: eu",
    ]
    assert convert.flatten_json({"a b": {"": []}, "x": {}}) == ['"a b"."": []', "x: {}"]


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
        lambda kids: (
            st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=3), kids, max_size=3)
        ),
        max_leaves=20,
    )
)
@settings(max_examples=200, deadline=None)
def test_json_flatten_keeps_every_scalar(value: object) -> None:
    lines = convert.flatten_json(value)

    def scalars(v: object) -> int:
        if isinstance(v, dict):
            return sum(scalars(c) for c in v.values()) or 1
        if isinstance(v, list):
            return sum(scalars(c) for c in v) or 1
        return 1

    assert len(lines) == scalars(value)


def test_html_is_cleaned_before_conversion() -> None:
    out = convert.convert(of.HTML.encode(), "guide.html")
    text = out.content
    assert out.meta["source_title"] == "Backup guide"
    assert "# Backups" in text and "## Restore" in text
    assert "nightly backup at 02:00 UTC" in text and "kbctl restore --from latest" in text
    for bad in (
        "SCRIPTTEXT",
        "XSS",
        "javascript:",
        "IFRAMETEXT",
        "NOSCRIPTTEXT",
        "OBJECTTEXT",
        "steal()",
        "onerror",
        "onclick",
        "color: red",
        "<script",
        "<iframe",
        "NAVTEXT",
        "MENUTEXT",
    ):  # navigation is boilerplate, not content
        assert bad not in text, bad
    assert "Set shared_buffers first." in text  # identifiers keep their underscores
    assert of.PNG_DATA_URI in text  # the image stays for media extraction


@pytest.mark.parametrize(
    "payload",
    [
        '<img src=x onerror="alert(1)">',
        "<svg/onload=alert(1)>",
        '<a href="jav&#x09;ascript:alert(1)">x</a>',
        '<a href="data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==">x</a>',
        "<scr<script>ipt>alert(1)</script>",
        '<div style="background:url(javascript:alert(1))">styled</div>',
        "<math><mtext><table><mglyph><style><img src=x onerror=alert(1)>",
        '<form action="javascript:alert(1)"><button>go</button></form>',
        "<body background=javascript:alert(1)>",
        '<meta http-equiv="refresh" content="0;url=javascript:alert(1)">',
    ],
)
def test_xss_payloads_never_reach_text(payload: str) -> None:
    html = f"<html><body><p>safe words</p>{payload}</body></html>"
    cleaned, _, _ = convert.clean_html(html)
    lowered = cleaned.lower()
    assert "javascript:" not in lowered.replace("&#x09;", "")
    assert "onerror" not in lowered and "onload" not in lowered
    assert "<script" not in lowered and "data:text/html" not in lowered
    assert "style=" not in lowered
    out = convert.convert(html.encode(), "x.html")
    # Whatever is left is inert text: no markup that runs, no script URL, no handler.
    assert "safe words" in out.content
    assert not re.search(
        r"<\s*/?\s*(script|iframe|svg|img|a|form|meta|body|object|style)\b", out.content, re.I
    )
    assert "javascript:" not in out.content.lower() and "onerror" not in out.content


def test_ipynb_markdown_and_text() -> None:
    nb = convert.convert(of.IPYNB.encode(), "analysis.ipynb")
    assert "# Notebook title" in nb.content and "print('hello')" in nb.content
    assert convert.convert(b"# Hi\n\nthere\r\n", "a.md").content == "# Hi\n\nthere\n"
    latin = convert.convert("café crème".encode("latin-1"), "menu.txt")
    assert "caf" in latin.content


def test_markdown_is_indexed_as_it_reads_rendered() -> None:
    # Node.js's API pages: version history in HTML comments, reference-style links with
    # their definitions at the end. A reader sees neither the comments nor the URLs.
    page = (
        "# File system\n\n<!--introduced_in=v0.10.0-->\n\n"
        "### `fs.readFile(path[, options])`\n\n<!-- YAML\nadded: v10.0.0\nchanges:\n"
        "  - version: v15.2.0\n    pr-url: https://github.com/nodejs/node/pull/35911\n-->\n\n"
        "Reads a [Readable][] stream; see [`fs.open()`][] and [the guide][g]. Kept: "
        "[unknown][nope], [inline](https://x.example), `a[0]` and `<!--` in code.\n"
        "Before <!-- a note --> after.\n\n"
        "```html\n<!-- markup in an example -->\n[a]: https://kept.example\n```\n\n"
        "[Readable]: stream.md#class-streamreadable\n[`fs.open()`]: #fsopen\n"
        '[g]: https://example.com/guide "The guide"\n'
    )
    text = convert.convert(page.encode(), "fs.md").content
    assert text == (
        "# File system\n\n### `fs.readFile(path[, options])`\n\n"
        "Reads a Readable stream; see `fs.open()` and the guide. Kept: [unknown][nope], "
        "[inline](https://x.example), `a[0]` and `<!--` in code.\nBefore  after.\n\n"
        "```html\n<!-- markup in an example -->\n[a]: https://kept.example\n```\n"
    )
    # Front matter (Docusaurus, Jekyll, Hugo) is no text; its title heads a page that has
    # no heading of its own first, as documentation sites show it.
    docusaurus = (
        b'---\ntitle: "Getting started"\nsidebar_position: 2\ntags:\n  - intro\n---\n\nRun it.\n'
    )
    assert convert.convert(docusaurus, "start.md").content == "# Getting started\n\nRun it.\n"
    hugo = b"+++\ntitle = 'Hugo page'\ndate = 2024-01-01\n+++\n# Own heading\n\nBody\n"
    assert convert.convert(hugo, "page.md").content == "# Own heading\n\nBody\n"
    rules = b"---\nA thematic break, then a sentence.\n---\n\nmore\n"
    assert convert.convert(rules, "x.md").content == rules.decode()
    # Indented code keeps its comments; a comment's own indented lines go with it.
    indented = b"Markup:\n\n    <!-- kept -->\n    <p>x</p>\n\n<!-- gone\n    - v1\n-->\nEnd\n"
    assert convert.convert(indented, "x.md").content == (
        "Markup:\n\n    <!-- kept -->\n    <p>x</p>\n\nEnd\n"
    )
    # An HTML table written in Markdown reads as a Markdown table (rows, code, no tags).
    table = (
        b"Signals:\n\n<table>\n  <tr>\n    <th>Constant</th>\n    <th>Description</th>\n  </tr>\n"
        b"  <tr>\n    <td><code>SIGINT</code></td>\n    <td>Sent on <kbd>Ctrl</kbd>+<kbd>C</kbd>,\n"
        b"    a | b.</td>\n  </tr>\n</table>\n\n<table><p>no rows</p></table>\n"
    )
    assert convert.convert(table, "os.md").content == (
        "Signals:\n\n| Constant | Description |\n|---|---|\n"
        "| `SIGINT` | Sent on Ctrl+C, a \\| b. |\n\n<table><p>no rows</p></table>\n"
    )
    # A comment that is never closed is text, and plain text files are left as they are.
    assert convert.convert(b"a <!-- b\n\nc\n", "x.md").content == "a <!-- b\n\nc\n"
    assert convert.convert(b"a <!-- b -->\n", "x.txt").content == "a <!-- b -->\n"


def test_format_by_extension_then_content() -> None:
    assert convert.format_of("Report.DOCX") == "docx"
    assert convert.format_of("noext", b"%PDF-1.7\n...") == "pdf"
    assert convert.format_of("noext", b"  <!DOCTYPE html><html>") == "html"
    assert convert.format_of("noext", b'{"a": 1}') == "json"
    assert convert.format_of("image.png", b"\x89PNG") == "image"
    assert convert.format_of("clip.mp4", b"\x00\x00\x00\x18ftypmp42") is None
    with pytest.raises(ConvertError, match=r"unsupported file type \(\.mp4\)"):
        convert.convert(b"\x00\x00\x00\x18ftypmp42", "clip.mp4")


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        (
            "broken.docx",
            b"PK\x03\x04 this is not a zip",
            "not a valid DOCX file: the archive is damaged",
        ),
        ("broken.xlsx", b"garbage", "not a valid XLSX file"),
        ("broken.pptx", b"", "is empty"),
        ("empty.zip.docx", None, "has no word/document.xml"),
        ("broken.xls", b"\xd0\xcf\x11\xe0 not really", "not a valid XLS file"),
        ("bad.json", b'{"a": ', "not valid JSON"),
        ("bad.csv", b"\x00\x01\x02", "NUL bytes"),
        ("scan.pdf", None, "no extractable text in its 1 page"),
    ],
)
def test_bad_files_get_clear_errors(name: str, data: bytes | None, message: str) -> None:
    if name == "empty.zip.docx":
        import io
        import zipfile

        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as zf:
            zf.writestr("hello.txt", "hi")
        data = buf.getvalue()
    if name == "scan.pdf":
        data = of.scanned_pdf_bytes()
    assert data is not None
    with pytest.raises(ConvertError, match=re.escape(message)):
        convert.convert(data, name)


def test_zip_bomb_is_refused_before_expansion() -> None:
    bomb = of.zip_bomb()
    assert len(bomb) < 1024 * 1024
    with pytest.raises(ConvertError, match=r"looks like a zip bomb: member 'word/document.xml'"):
        convert.convert(bomb, "bomb.docx")
    small = Limits(max_unzipped_bytes=1000, max_zip_ratio=10**9)
    with pytest.raises(ConvertError, match=r"expands to .* bytes when unzipped; the limit is 1000"):
        convert.convert(of.docx_bytes(), "policy.docx", small)


def test_nesting_and_row_limits() -> None:
    with pytest.raises(ConvertError, match="JSON nested more than 512 levels deep"):
        convert.convert(of.deep_json(), "deep.json")
    with pytest.raises(ConvertError, match="HTML nested more than 512 elements deep"):
        convert.convert(of.deep_html(), "deep.html")
    with pytest.raises(ConvertError, match="has more than 200000 rows; the limit is 200000"):
        convert.convert(of.big_csv(), "big.csv")
    with pytest.raises(ConvertError, match="has more than 2 rows"):
        convert.convert(of.xlsx_bytes(), "plans.xlsx", Limits(max_rows=2))
    with pytest.raises(ConvertError, match=r"converts to .* bytes of text; the limit is 50"):
        convert.convert(of.CSV.encode(), "c.csv", Limits(max_text_bytes=50))


def test_media_extraction_replaces_data_uris() -> None:
    text = f'intro ![a]({of.PNG_DATA_URI}) and again <img src="{of.PNG_DATA_URI}"> end'
    out, found = media.extract(text)
    assert len(found) == 1
    m = found[0]
    assert m.data == of.PNG and m.media_type == "image/png" and m.ref.endswith(".png")
    assert out == f'intro ![a](kbpg-media:{m.ref}) and again <img src="kbpg-media:{m.ref}"> end'
    assert media.extract("data:image/png;base64,!!!notbase64") == (
        "data:image/png;base64,!!!notbase64",
        [],
    )
    # The payload ends where base64 ends: the words after it stay.
    gif = media.extract("x data:image/gif;base64,R0lGODlh and more")
    assert gif[0].endswith(" and more") and gif[1][0].media_type == "image/gif"


def test_isolated_conversion_matches_in_process() -> None:
    data = of.pptx_bytes()
    inside = convert.convert(data, "deck.pptx")
    outside = convert.run_isolated({"file_name": "deck.pptx"}, data, Limits())
    assert (outside.content, outside.page_starts, outside.meta) == (
        inside.content,
        inside.page_starts,
        inside.meta,
    )


def test_isolated_errors_and_limits() -> None:
    with pytest.raises(ConvertError, match="not a valid DOCX file"):
        convert.run_isolated({"file_name": "x.docx"}, b"PK\x03\x04junk", Limits())
    # A converter that needs more memory than allowed costs its own process only, and the
    # error names the limit however the refused allocation showed (MemoryError, an
    # ImportError, a C extension's SystemError: each limit below meets a different one).
    for memory_mb in (30, 35, 40, 45, 60):
        with pytest.raises(ConvertError, match=rf"{memory_mb} MB memory limit|stopped by SIG"):
            convert.run_isolated(
                {"file_name": "deck.pptx"}, of.pptx_bytes(), Limits(memory_mb=memory_mb)
            )
    with pytest.raises(ConvertError, match=r"took longer than 0.05 s to convert and was stopped"):
        convert.run_isolated({"file_name": "deck.pptx"}, of.pptx_bytes(), Limits(timeout_s=0.05))
    assert json.loads(json.dumps({"ok": True}))  # the protocol is JSON


def test_a_reader_that_cannot_load_its_library_does_not_blame_the_file() -> None:
    from markitdown import MissingDependencyException  # raised from the failed import

    try:
        try:
            raise ImportError("lxml/etree.so: failed to map segment from shared object")
        except ImportError as cause:
            raise MissingDependencyException("PptxConverter recognized the input") from cause
    except MissingDependencyException as exc:
        err = convert.office._reader_failed("PPTX", exc)
    assert str(err) == (
        "could not be converted: the PPTX reader's library could not be loaded (ImportError: "
        "lxml/etree.so: failed to map segment from shared object)"
    )
    assert str(convert.office._reader_failed("PPTX", ValueError("bad zip"))) == (
        "is not a valid PPTX file (ValueError: bad zip)"
    )
    # What a refused allocation reads like, from the loader, OpenBLAS or C++.
    for text in (
        "failed to map segment from shared object",
        "OpenBLAS error: Memory allocation still failed after 10 retries, giving up.",
        "std::bad_alloc",
        "OSError: [Errno 12] Cannot allocate memory",
    ):
        assert convert.isolation._OUT_OF_MEMORY.search(text), text
    assert not convert.isolation._OUT_OF_MEMORY.search("is not a valid PPTX file (KeyError: 'x')")


def test_the_converters_stdout_carries_only_its_reply(tmp_path: Path) -> None:
    """A library that prints to stdout (MuPDF writes its errors there), from Python or
    from C, cannot corrupt the child's JSON reply; a reply that is not JSON anyway is a
    ConvertError that names it, not a JSONDecodeError."""
    import subprocess
    import sys

    plpython = str(Path(convert.__file__).resolve().parents[2])
    noisy = (
        f"import os, sys; sys.path[:0] = [{plpython!r}]; from kbpg_db import convert; "
        "real = convert.convert\n"
        "def loud(*a, **k):\n"
        "    print('MuPDF error: syntax error in xref'); sys.stdout.flush()\n"
        "    os.write(1, b'warning from C\\n')\n"
        "    return real(*a, **k)\n"
        "convert.convert = loud; convert.main()"
    )
    header = json.dumps({"file_name": "a.csv", "limits": {}}).encode() + b"\n"
    proc = subprocess.run(
        [sys.executable, "-c", noisy],
        input=header + b"a,b\n1,2\n",
        capture_output=True,
        check=True,
    )
    reply = json.loads(proc.stdout)
    assert reply["ok"] and "| a | b |" in reply["content"]
    assert b"MuPDF error" in proc.stderr and b"warning from C" in proc.stderr
    garbage = tmp_path / "python"
    garbage.write_text("#!/bin/sh\ncat > /dev/null\necho 'MuPDF error: cannot find startxref'\n")
    garbage.chmod(0o755)
    with pytest.raises(ConvertError, match=r"the converter.s reply is not readable \(MuPDF error"):
        convert.run_isolated({"file_name": "a.pdf"}, b"%PDF-1.4", Limits(), python=str(garbage))


def test_xml_files_convert_by_what_they_hold() -> None:
    feed = (
        b'<?xml version="1.0" encoding="utf-8"?>\n<!-- saved from the site -->\n'
        b'<feed xmlns="http://www.w3.org/2005/Atom"><title>Release notes</title>'
        b"<entry><title>Version 2</title><summary>Faster indexing of feeds.</summary></entry>"
        b"</feed>"
    )
    out = convert.convert(feed, "releases.xml")
    assert out.meta["file_type"] == "xml" and out.format == "rss"
    assert "## Version 2" in out.content and "Faster indexing of feeds." in out.content
    rss = (
        b"<rss version='2.0'><channel><title>News</title><item><title>Item one</title>"
        b"<description>First item.</description></item></channel></rss>"
    )
    assert "Item one" in convert.convert(rss, "news.xml").content
    xhtml = (
        b"<?xml version='1.0'?>\n<!DOCTYPE html>\n<html><body><h1>Title</h1><p>Body.</p>"
        b"</body></html>"
    )
    assert convert.convert(xhtml, "page.xml").content.startswith("# Title")
    config = b"<?xml version='1.0'?><project><artifactId>kbpg-demo</artifactId></project>"
    out = convert.convert(config, "pom.xml")
    assert out.format == "xml" and "<artifactId>kbpg-demo</artifactId>" in out.content


def test_restructuredtext_titles_become_headings() -> None:
    rst = (
        b"=======\n Guide\n=======\n\nIntro.\n\nInstall\n-------\n\nRun it.\n\n"
        b"On Linux\n~~~~~~~~\n\napt.\n\nUsage\n-----\n\nA transition follows.\n\n----\n\nEnd.\n"
    )
    out = convert.convert(rst, "guide.rst")
    heads = [line for line in out.content.splitlines() if line.startswith("#")]
    assert heads == ["# Guide", "## Install", "### On Linux", "## Usage"]
    assert "----" in out.content and "End." in out.content


WIKI_LIKE = """<!DOCTYPE html><html><head><title>Zebrafish - Encyclopedia</title></head><body>
<a class="mw-jump-link" href="#content">Jump to content</a>
<header class="vector-header"><div class="vector-menu">Main menu Navigation Contents</div>
  <div class="vector-pinnable-header">Main menu <span>move to sidebar</span> hide</div></header>
<div id="mw-panel" class="vector-sidebar">Current events Random article Donate</div>
<main id="content">
  <h1>Zebrafish</h1>
  <div id="toc" class="toc">Contents 1 Habitat 2 Research</div>
  <p>The zebrafish is a freshwater fish of the minnow family.
     <img src="data:image/svg+xml,%3Csvg%20xmlns%3D%22http://www.w3.org/2000/svg%22%3E%3C/svg%3E"
          alt="icon"></p>
  <h2>Habitat<span class="mw-editsection">[edit]</span></h2>
  <p>It lives in streams and rice paddies of South Asia.</p>
  <h2>Research</h2><p>It is a model organism in developmental biology.</p>
  <div class="navbox">Fish families: Cyprinidae Danionidae Xenocyprididae</div>
</main>
<div id="p-lang" class="vector-menu interlanguage">Deutsch Español Français 日本語</div>
<footer id="footer">This page was last edited on 1 May. Privacy policy. About.</footer>
</body></html>"""


def test_html_keeps_the_main_content_without_page_furniture() -> None:
    out = convert.convert_html(WIKI_LIKE, Limits())
    text, found = media.extract(out.content)
    for furniture in (
        "Jump to content",
        "move to sidebar",
        "Random article",
        "Deutsch",
        "last edited",
        "[edit]",
        "Cyprinidae",
        "Contents 1",
    ):
        assert furniture not in text, furniture
    assert text.startswith("# Zebrafish")
    assert "## Habitat" in text and "rice paddies" in text and "model organism" in text
    # The inline SVG (percent-encoded, not base64) goes to media, not into the text.
    assert "data:" not in text and [m.media_type for m in found] == ["image/svg+xml"]
    assert found[0].data.startswith(b"<svg")
    # A page without a marked main part keeps all of its text but the furniture.
    plain = "<html><body><div class='sidebar'>Links</div><p>Only text.</p></body></html>"
    assert convert.convert_html(plain, Limits()).content.strip() == "Only text."


PAGES = Path(__file__).parent.parent / "pages"


def test_mediawiki_page_keeps_its_article_without_the_skin() -> None:
    """A MediaWiki (Vector 2022) page: <html> and <body> carry the skin's feature classes
    ("vector-toc-available", "main-menu-pinned-disabled"), which read as furniture words;
    the article inside <main role=main> is indexed, the skin's menus are not."""
    out = convert.convert_html((PAGES / "mediawiki_vector.html").read_text(), Limits())
    text, _ = media.extract(out.content)
    assert text.startswith("# Zebrafish")
    for kept in ("Danio rerio", "rice paddies", "genome was sequenced in 2013", "Danionidae"):
        assert kept in text, kept
    for furniture in (
        "create an account",
        "154 languages",
        "move to sidebar",
        "Deutsch",
        "Random article",
        "View history",
        "What links here",
        "From Wikipedia",
        "last edited",
        "Categories",
        "Microrasbora",
        "[edit]",
        "Toggle the table",
    ):
        assert furniture not in text, furniture
    paths = [s.heading_path for s in chunking.markdown_sections(text)]
    assert ["Zebrafish", "Habitat"] in paths and ["Zebrafish", "Research"] in paths
    assert "notes" not in out.meta  # nothing fell back


def test_cleaning_that_would_empty_a_page_keeps_it_whole_and_says_so() -> None:
    body = "The harbour opens at six and closes at ten. " * 20
    page = f"<html><body><div class='sidebar-layout'><p>{body}</p></div></body></html>"
    out = convert.convert_html(page, Limits())
    assert "The harbour opens at six" in out.content
    (note,) = out.meta["notes"]
    assert "indexed whole" in note and "left 0 of its" in note
    # A page whose furniture is a small part keeps no note.
    ok = f"<html><body><nav>Home About</nav><p>{body}</p></body></html>"
    assert "notes" not in convert.convert_html(ok, Limits()).meta


def test_search_results_lose_their_trackers_not_their_titles() -> None:
    out = convert.convert_html((PAGES / "search_results.html").read_text(), Limits())
    text, found = media.extract(out.content)
    # Click-tracking redirects become their targets where the link names one, else go.
    assert "/ck/a" not in text and "ntb=1" not in text
    assert "(https://en.wikipedia.org/wiki/History_of_Microsoft)" in text
    assert "(https://news.example.com/microsoft-at-50)" in text
    # The inline SVG icon (raw, with spaces and quotes) is media, not text.
    assert "data:" not in text and "<svg" not in text and "viewBox" not in text
    assert [m.media_type for m in found] == ["image/svg+xml"]
    assert found[0].data.startswith(b"<svg xmlns='http://www.w3.org/2000/svg'")
    # Each result's title, and a result's section title, are sections.
    paths = [s.heading_path for s in chunking.markdown_sections(text)]
    title = "1995–2007: Foray into the Web, Windows 95, Windows XP, and Xbox"
    assert ["History of Microsoft - Wikipedia", title] in paths
    assert ["Microsoft at 50"] in paths
    assert "search" not in text.lower().split("microsoft")[0]  # no search box or tabs


@pytest.mark.parametrize(
    ("href", "target"),
    [
        ("https://example.com/a?b=1", "https://example.com/a?b=1"),
        ("/docs/guide.html#x", "/docs/guide.html#x"),
        ("https://www.google.com/url?q=https://example.org/p&sa=U", "https://example.org/p"),
        ("https://t.example/redirect?to=http%3A%2F%2Fexample.net%2F", "http://example.net/"),
        ("https://www.bing.com/ck/a?!&&p=abc&ntb=1", None),
        ("data:text/plain,hello", None),
        ("https://ads.example/c?" + "x" * 500, None),
    ],
)
def test_link_targets(href: str, target: str | None) -> None:
    assert convert.html._link_target(href) == target


def test_html_permalink_anchors_stay_out_of_headings_and_text() -> None:
    page = (
        '<h1>json<a class="headerlink" href="#module-json" title="Permalink">¶</a></h1>'
        '<section id="basic"><h2>Basic Usage<a class="headerlink" href="#basic">¶</a></h2>'
        '<dl><dt id="json.dump">json.dump(obj, fp)<a class="headerlink" href="#json.dump">¶</a>'
        "</dt><dd>Serialize obj.</dd></dl>"
        '<h3><a class="hash-link" href="#x" aria-label="Direct link"></a>Options</h3>'
        '<h3>Limits <a href="#limits">#</a></h3><p>See <a href="#basic">Basic Usage</a>.</p>'
        '<h3><a class="toc-backref" href="#id1" role="doc-backlink">Coroutines</a>'
        '<a class="headerlink" href="#coroutines">¶</a></h3><p>Async.</p>'
        "</section>"
    )
    md = convert.convert_html(page, Limits()).content
    paths = [s.heading_path for s in chunking.markdown_sections(md)]
    assert ["json", "Basic Usage"] in paths
    assert ["json", "Basic Usage", "Options"] in paths
    assert ["json", "Basic Usage", "Limits"] in paths
    # Sphinx's link from a heading back to the page's contents is not page furniture.
    assert ["json", "Basic Usage", "Coroutines"] in paths
    assert "¶" not in md and "#x" not in md and "#limits" not in md
    assert "[Basic Usage](#basic)" in md  # a link in the text is the text's
