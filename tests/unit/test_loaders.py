"""File loading and its errors: every bad file says what is wrong."""

from __future__ import annotations

from pathlib import Path

import pymupdf
import pytest

from kbpg.errors import DocumentError
from kbpg.loaders import discover, load_file


def pdf(path: Path, pages: list[str], password: str | None = None) -> Path:
    doc = pymupdf.open()
    for text in pages:
        page = doc.new_page()
        if text:
            page.insert_text((72, 72), text)
    if password:
        doc.save(path, encryption=pymupdf.PDF_ENCRYPT_AES_256, user_pw=password, owner_pw=password)
    else:
        doc.save(path)
    return path


def test_text_and_pdf(tmp_path: Path) -> None:
    md = tmp_path / "a.md"
    md.write_text("# Title\r\nbody\r\n")
    doc = load_file(md, root=tmp_path, metadata={"category": "x"})
    assert (doc.title, doc.content, doc.metadata["category"]) == ("a.md", "# Title\nbody\n", "x")
    # Markdown as the server converts it: no comments or link definitions; text kept as is.
    md.write_text("# T\n\n<!-- YAML\nadded: v1\n-->\n\nSee [docs][].\n\n[docs]: https://x.y\n")
    assert load_file(md).content == "# T\n\nSee docs.\n"
    txt = tmp_path / "a.txt"
    txt.write_text("a <!-- b -->\n")
    assert load_file(txt).content == "a <!-- b -->\n"
    p = load_file(pdf(tmp_path / "b.pdf", ["page one", "page two"]))
    assert p.page_starts == [0, len("page one") + 2]
    assert p.content.split("\n\n") == ["page one", "page two"]
    assert p.metadata["pages"] == 2


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        ("empty.md", b"", "is empty"),
        ("blank.txt", b"  \n\n ", "has no text"),
        ("latin1.txt", "café".encode("latin-1"), "not valid UTF-8"),
        ("nul.md", b"text\x00more", "NUL bytes"),
        ("garbage.md", bytes(range(256)) * 10, "NUL bytes|not valid UTF-8"),
        ("garbage.pdf", b"this is not a pdf at all", "cannot be opened as a PDF"),
        (
            "truncated.pdf",
            b"%PDF-1.7\n1 0 obj\n<< /Type /Catalog",
            "cannot be opened|damaged|no extractable",
        ),
        ("movie.mp4", b"\x00\x00\x00\x18ftypmp42", "unsupported file type .mp4"),
    ],
)
def test_bad_files(tmp_path: Path, name: str, data: bytes, message: str) -> None:
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(DocumentError, match=message):
        load_file(path)


def test_office_files_go_to_the_server_as_they_are(tmp_path: Path) -> None:
    path = tmp_path / "deck.pptx"
    path.write_bytes(b"PK\x03\x04 whatever")  # converted (and judged) by the indexing job
    doc = load_file(path, metadata={"team": "sales"})
    assert doc.convert and doc.content == "" and doc.file == path.read_bytes()
    assert (doc.title, doc.file_name, doc.metadata) == ("deck.pptx", "deck.pptx", {"team": "sales"})


def test_pdf_without_text_and_encrypted(tmp_path: Path) -> None:
    with pytest.raises(DocumentError, match="no extractable text"):
        load_file(pdf(tmp_path / "scan.pdf", ["", ""]))
    with pytest.raises(DocumentError, match="encrypted"):
        load_file(pdf(tmp_path / "secret.pdf", ["hidden"], password="pw"))


def test_size_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KBPG_MAX_FILE_BYTES", "1000")
    big = tmp_path / "big.txt"
    big.write_bytes(b"a" * 1001)
    with pytest.raises(DocumentError, match="1001 bytes; the limit is 1000"):
        load_file(big)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DocumentError, match="cannot be read"):
        load_file(tmp_path / "nope.md")


def test_discover_walks_folders(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.md").write_text("x")
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "b.md").write_text("x")
    (tmp_path / "c.bin").write_text("x")
    found = discover([tmp_path])
    assert [f.name for f, _ in found] == ["a.md"]


def test_a_package_folder_is_titled_from_above_its_outermost_package(tmp_path: Path) -> None:
    """`kbpg ingest kb lib/email/mime` titles files as the whole tree would (email/...),
    so their imports resolve; a plain folder titles from itself."""
    pkg = tmp_path / "lib" / "email"
    (pkg / "mime").mkdir(parents=True)
    for folder in (pkg, pkg / "mime"):
        (folder / "__init__.py").write_text("")
    (pkg / "parser.py").write_text("from email import errors\n")
    (pkg / "mime" / "text.py").write_text("from email.mime import base\n")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.md").write_text("# A\n")
    for given, want in (
        (pkg, {"email/parser.py", "email/mime/text.py"}),
        (pkg / "mime", {"email/mime/text.py"}),
        (tmp_path / "notes", {"a.md"}),
    ):
        titles = {load_file(f, root=root).title for f, root in discover([given])}
        assert titles == want, given


def test_a_100_mb_file_is_refused_clearly(tmp_path: Path) -> None:
    big = tmp_path / "huge.md"
    with big.open("wb") as f:
        f.truncate(100 * 1024 * 1024)
    with pytest.raises(DocumentError, match="104857600 bytes; the limit is 52428800"):
        load_file(big)
