"""Files to indexable text: PDF, Office, HTML, CSV, JSON, EPUB, notebooks, feeds.

Every format becomes Markdown whose structure the chunkers read: DOCX headings become
``#`` headings (so ``heading_path`` works), PPTX slides become sections whose slide number
is the page, XLSX/XLS sheets become sections holding Markdown tables, CSV a Markdown table,
JSON ``dotted.path[0].key: value`` lines. PDFs keep their pages, outline and layout
headings (pymupdf). DOCX, PPTX, HTML, EPUB, notebooks and RSS go through MarkItDown's
converters; spreadsheets are read row by row (openpyxl read-only, xlrd) so a row limit
bounds memory, which MarkItDown's pandas path would not.

Untrusted bytes are converted in a separate process (:func:`run_isolated`) with an
address-space and CPU limit, so a zip bomb, a parser crash or a runaway file costs that
process, never the PostgreSQL backend that asked. Bad input raises :class:`ConvertError`
with a message that names what is wrong.
"""

from __future__ import annotations

import base64
import csv
import io
import json
import os
import re
import sys
import zipfile
from collections import Counter
from dataclasses import asdict, dataclass, field
from html.parser import HTMLParser
from typing import Any

from kbpg_db.config import MAX_DOCUMENT_BYTES


class ConvertError(Exception):
    """A file that cannot be converted: the message names the file and the problem."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


class OcrUnavailable(ConvertError):
    """OCR cannot run at all (Tesseract or the language's data is missing): the whole
    file fails with it, not one page."""


@dataclass
class Limits:
    max_text_bytes: int = MAX_DOCUMENT_BYTES  # the converted text (kb.max_document_bytes)
    max_unzipped_bytes: int = 512 * 1024 * 1024  # all members of an Office/EPUB zip together
    max_zip_ratio: int = 200  # a member expanding more than this is a zip bomb
    max_zip_members: int = 20_000
    max_rows: int = 200_000  # CSV and spreadsheet rows, all sheets together
    max_depth: int = 512  # JSON and HTML nesting
    memory_mb: int = 2048  # the converting process's address space
    timeout_s: float = 300.0
    fetch_timeout_s: float = 30.0  # URLs: the fetch, and the render
    max_redirects: int = 10
    # OCR of scanned pages and images (indexing_config ocr, ocr_languages): Tesseract's
    # language codes joined by "+"; "" turns OCR off.
    ocr_languages: str = "eng"


@dataclass
class Converted:
    content: str
    format: str
    page_starts: list[int] | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    # URL ingestion: what was fetched (kept as the document's original file)
    file: bytes | None = None
    file_name: str | None = None


FORMATS: dict[str, str] = {
    ".pdf": "pdf",
    ".docx": "docx",
    ".pptx": "pptx",
    ".xlsx": "xlsx",
    ".xlsm": "xlsx",
    ".xls": "xls",
    ".html": "html",
    ".htm": "html",
    ".xhtml": "html",
    ".csv": "csv",
    ".tsv": "csv",
    ".json": "json",
    ".epub": "epub",
    ".ipynb": "ipynb",
    ".rss": "rss",
    ".atom": "rss",
    ".xml": "xml",  # an RSS or Atom feed, XHTML, or other XML (kept as text)
    ".rst": "rst",
    ".md": "markdown",
    ".markdown": "markdown",
    ".txt": "text",
    ".png": "image",
    ".jpg": "image",
    ".jpeg": "image",
    ".tif": "image",
    ".tiff": "image",
    ".bmp": "image",
    ".gif": "image",
    ".webp": "image",
}
# MarkItDown's markdownify options: data: images kept (media extraction takes them out),
# underscores not escaped (shared_buffers, pg_dump stay one searchable identifier;
# CommonMark reads no emphasis inside a word).
MARKDOWN_OPTIONS: dict[str, Any] = {"keep_data_uris": True, "escape_underscores": False}
PAGE_SEPARATOR = "\n\n"


def format_of(file_name: str, data: bytes | None = None) -> str | None:
    """The format of a file: by its extension, else by its first bytes."""
    name = file_name.lower()
    for suffix, fmt in FORMATS.items():
        if name.endswith(suffix):
            return fmt
    if data is not None:
        head = data[:512].lstrip()
        if head.startswith(b"%PDF-"):
            return "pdf"
        if data[:8] == b"\x89PNG\r\n\x1a\n" or data[:3] == b"\xff\xd8\xff":
            return "image"
        if data[:4] in (b"II*\x00", b"MM\x00*"):
            return "image"
        if head[:1] in (b"{", b"["):
            return "json"
        if re.match(rb"(?i)<(!doctype html|html|head|body)\b", head):
            return "html"
        if _FEED.match(head):
            return "rss"
    return None


# What an XML file's root is, after its declaration, comments and doctype.
_XML_PROLOGUE = rb"(?is)\s*(?:<\?xml[^>]*\?>\s*)?(?:(?:<!--.*?-->|<!DOCTYPE[^>]*>)\s*)*"
_FEED = re.compile(_XML_PROLOGUE + rb"<(?:rss|feed|rdf:RDF)\b")
_XHTML = re.compile(_XML_PROLOGUE + rb"<html\b")


def convert_xml(data: bytes, limits: Limits) -> Converted:
    """A .xml file by what it holds: a feed as a feed, XHTML as HTML, anything else as its
    text (markup included: element and attribute names are what one searches XML for)."""
    head = data[:4096]
    if _FEED.match(head):
        return _markitdown("rss", data, limits)
    if _XHTML.match(head):
        return convert_html(data, limits)
    return Converted(decode_text(data, "the XML file"), "xml")


# reStructuredText section titles: a line under (and maybe over) a line of one repeated
# punctuation character at least as long; levels in the order the styles first appear.
_RST_ADORNMENT = re.compile(r"^([!-/:-@\[-`{-~])\1{2,}[ \t]*$")


def convert_rst(data: bytes) -> Converted:
    """reStructuredText with its section titles as Markdown headings (the chunkers and
    PageIndex split at those); the rest kept as written."""
    lines = decode_text(data, "the file").split("\n")
    styles: list[tuple[str, bool]] = []
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        over = _RST_ADORNMENT.match(line)
        if (
            over
            and i + 2 < len(lines)
            and lines[i + 1].strip()
            and lines[i + 2].strip() == (line.strip())
        ):
            title, style, step = lines[i + 1].strip(), (line.strip()[0], True), 3
        elif (
            line.strip()
            and not over
            and i + 1 < len(lines)
            and (under := _RST_ADORNMENT.match(lines[i + 1]))
            and len(lines[i + 1].rstrip()) >= len(line.rstrip())
        ):
            title, style, step = line.strip(), (under.group(1), False), 2
        else:
            out.append(line)
            i += 1
            continue
        if style not in styles:
            styles.append(style)
        out.append("#" * min(styles.index(style) + 1, 6) + " " + title)
        i += step
    return Converted("\n".join(out), "rst")


def supported() -> str:
    return ", ".join(sorted(set(FORMATS)))


# ---------------------------------------------------------------------------- helpers


def decode_text(data: bytes, what: str) -> str:
    """UTF-8 (with or without BOM), UTF-16 with a BOM, else the best guess of
    charset-normalizer; NUL bytes mean a binary file."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        text = data.decode("utf-16")
    else:
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError:
            text = _guess_decode(data, what)
    if "\x00" in text:
        raise ConvertError(f"{what} contains NUL bytes; this looks like a binary file")
    return text.replace("\r\n", "\n").replace("\r", "\n")


_MD_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_MD_CODE_SPAN = r"(?P<code>(?P<ticks>`+)[^`\n](?:[^\n]*?[^`\n])?(?P=ticks)(?!`))"
# A code span or a line of indented code (kept), or an HTML comment (dropped); "<!--"
# with no "-->" is text.
_MD_COMMENT = re.compile(
    _MD_CODE_SPAN + r"|(?P<indented>^(?: {4}|\t)[^\n]*)|<!--.*?-->", re.S | re.M
)
# A link reference definition: [label]: destination, an optional title, nothing else.
_MD_DEFINITION = re.compile(
    r"""^ {0,3}\[((?:[^\]\\]|\\.)+)\]:[ \t]*(?:<[^>\n]*>|\S+)"""
    r"""(?:[ \t]+(?:"[^"\n]*"|'[^'\n]*'|\([^)\n]*\)))?[ \t]*$""",
    re.M,
)
# A code span (kept), or a reference link: [text][label], [text][] or [text] alone.
_MD_REFERENCE = re.compile(
    _MD_CODE_SPAN + r"|(?<![\\!\]])\[(?P<text>(?:[^\[\]\\`\n]|\\.|`[^`\n]*`)+)\]"
    r"(?:\[(?P<label>[^\[\]\n]*)\]|(?![(:\[]))"
)


def _label(text: str) -> str:
    return " ".join(text.lower().split())


def _md_blocks(text: str) -> list[tuple[bool, str]]:
    """The text as (is fenced code, lines) runs, in order."""
    out: list[tuple[bool, list[str]]] = []
    fence: str | None = None
    for line in text.split("\n"):
        mark = _MD_FENCE.match(line)
        code = fence is not None
        if mark and fence is None:
            fence, code = mark.group(1)[0] * 3, True
        elif mark and mark.group(1).startswith(fence or "\0"):
            fence = None
        if out and out[-1][0] == code:
            out[-1][1].append(line)
        else:
            out.append((code, [line]))
    return [(code, "\n".join(lines)) for code, lines in out]


# An HTML table written in Markdown, as a block of its own (CommonMark's HTML block).
_MD_HTML_TABLE = re.compile(r"^ {0,3}<table\b.*?</table>[ \t]*$", re.S | re.M | re.I)


class _TableReader(HTMLParser):
    """The rows of an HTML table: each cell's text, `code` as a code span, tags dropped."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.rows: list[list[str]] = []
        self.cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th") and self.rows:
            self.cell = []
        elif tag == "code" and self.cell is not None:
            self.cell.append("`")
        elif tag == "br" and self.cell is not None:
            self.cell.append(" ")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self.cell is not None:
            self.rows[-1].append(" ".join("".join(self.cell).split()))
            self.cell = None
        elif tag == "code" and self.cell is not None:
            self.cell.append("`")

    def handle_data(self, data: str) -> None:
        if self.cell is not None:
            self.cell.append(data)


def _html_table(m: re.Match[str]) -> str:
    reader = _TableReader()
    reader.feed(m[0])
    reader.close()
    rows = [r for r in reader.rows if r]
    return markdown_table(rows) if rows else m[0]


# Front matter: YAML between "---" lines (Jekyll, Hugo, Docusaurus, MkDocs) or TOML
# between "+++" lines (Hugo), at the very start of the file.
_FRONT_MATTER = re.compile(
    r"\A(?:---[ \t]*\n(.*?)\n(?:---|\.\.\.)|\+\+\+[ \t]*\n(.*?)\n\+\+\+)[ \t]*(?:\n|\Z)", re.S
)
_FRONT_TITLE = re.compile(
    r"""^title[ \t]*[:=][ \t]*(?:"([^"\n]*)"|'([^'\n]*)'|([^\n#]*?))[ \t]*$""", re.M
)
_FIELD_LINE = re.compile(r"^(?:[\w-]+[ \t]*[:=].*|[ \t-].*|#.*|)$")


def front_matter(text: str) -> tuple[str, str | None]:
    """The text without its front matter, and the title the front matter gives. A block
    whose lines are not all fields (``key: value``, ``key = value``, indented or list
    lines, comments) is text, not front matter."""
    m = _FRONT_MATTER.match(text)
    if not m:
        return text, None
    body = m.group(1) if m.group(1) is not None else m.group(2)
    if not all(_FIELD_LINE.match(line) for line in body.split("\n")):
        return text, None
    t = _FRONT_TITLE.search(body)
    title = next((g for g in t.groups() if g), None) if t else None
    return text[m.end() :], (title.strip() or None) if title else None


def readable_markdown(text: str) -> str:
    """Markdown as a reader sees it rendered: no front matter (its ``title`` becomes the
    first heading where the page has no heading of its own first, as documentation sites
    show it), no HTML comments (version notes, build markers), no link reference
    definitions, a reference link ``[text][label]`` as its text where its label is
    defined, and an HTML table as a Markdown one. Fenced code blocks and code spans stay
    as they are."""
    if text.startswith(("---", "+++")):
        text, title = front_matter(text)
        if title and not re.match(r"\s*#[ \t]", text):
            text = f"# {title}\n\n{text.lstrip(chr(10))}"
    if "<!--" not in text and "]:" not in text and "<table" not in text.lower():
        return text
    blocks = _md_blocks(text)
    labels: set[str] = set()
    prose: list[tuple[bool, str]] = []
    for code, part in blocks:
        if not code:
            part = _MD_COMMENT.sub(lambda m: m["code"] or m["indented"] or "", part)
            if "<table" in part.lower():
                part = _MD_HTML_TABLE.sub(_html_table, part)
            labels.update(_label(m.group(1)) for m in _MD_DEFINITION.finditer(part))
            part = re.sub(r"\n{3,}", "\n\n", _MD_DEFINITION.sub("", part))
        prose.append((code, part))
    out = [
        part
        if code or not labels
        else _MD_REFERENCE.sub(
            lambda m: (
                m["code"] or (m["text"] if _label(m["label"] or m["text"]) in labels else m[0])
            ),
            part,
        )
        for code, part in prose
    ]
    cleaned = "\n".join(out).strip("\n")
    return cleaned + "\n" if text.endswith("\n") else cleaned


def _guess_decode(data: bytes, what: str) -> str:
    from charset_normalizer import from_bytes  # MarkItDown's dependency

    best = from_bytes(data[: 1024 * 1024]).best()
    if best is not None and best.encoding:
        return data.decode(best.encoding, errors="replace")
    raise ConvertError(
        f"{what} is not valid UTF-8 and its encoding could not be recognised",
        hint="convert it to UTF-8, e.g. iconv -f latin1 -t utf-8",
    )


def check_zip(data: bytes, fmt: str, limits: Limits) -> None:
    """Refuse a damaged archive or a zip bomb before any parser expands it."""
    label = fmt.upper()
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile as exc:
        raise ConvertError(
            f"is not a valid {label} file: the archive is damaged or not an archive ({exc})"
        ) from None
    with zf:
        infos = zf.infolist()
        if len(infos) > limits.max_zip_members:
            raise ConvertError(
                f"is a {label} archive of {len(infos)} members; the limit is "
                f"{limits.max_zip_members}"
            )
        total = 0
        for info in infos:
            total += info.file_size
            if info.file_size > 10 * 1024 * 1024 and info.file_size > limits.max_zip_ratio * max(
                info.compress_size, 1
            ):
                raise ConvertError(
                    f"looks like a zip bomb: member {info.filename!r} expands "
                    f"{info.file_size // max(info.compress_size, 1)}-fold to {info.file_size} "
                    f"bytes (more than {limits.max_zip_ratio}-fold is refused)"
                )
        if total > limits.max_unzipped_bytes:
            raise ConvertError(
                f"expands to {total} bytes when unzipped; the limit is "
                f"{limits.max_unzipped_bytes} bytes (a zip bomb, or a file too large)",
                hint="raise kb.max_unzipped_bytes if the file is genuine",
            )
        if fmt in ("docx", "pptx", "xlsx"):
            names = {i.filename for i in infos}
            part = {
                "docx": "word/document.xml",
                "pptx": "ppt/presentation.xml",
                "xlsx": "xl/workbook.xml",
            }[fmt]
            if part not in names:
                raise ConvertError(f"is not a valid {label} file: it has no {part}")
        bad = zf.testzip() if total <= 64 * 1024 * 1024 else None
        if bad is not None:
            raise ConvertError(f"is not a valid {label} file: member {bad!r} is damaged")


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    text = str(value).replace("\r\n", "\n").strip()
    return text.replace("|", "\\|").replace("\n", "<br>")


def markdown_table(rows: list[list[Any]]) -> str:
    """Rows as a Markdown table, the first row the header; ragged rows padded."""
    width = max((len(r) for r in rows), default=0)
    if width == 0:
        return ""
    cells = [[_cell(v) for v in r] + [""] * (width - len(r)) for r in rows]
    head = cells[0]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * width]
    lines += ["| " + " | ".join(r) + " |" for r in cells[1:]]
    return "\n".join(lines)


def _trim_rows(rows: list[list[Any]]) -> list[list[Any]]:
    """Drop empty trailing cells and empty rows (a sheet's used range often runs on)."""
    out = []
    for r in rows:
        r = list(r)
        while r and (r[-1] is None or str(r[-1]).strip() == ""):
            r.pop()
        if r:
            out.append(r)
    return out


class _RowBudget:
    def __init__(self, limits: Limits, what: str) -> None:
        self.left = limits.max_rows
        self.limit = limits.max_rows
        self.what = what

    def take(self) -> None:
        self.left -= 1
        if self.left < 0:
            raise ConvertError(
                f"has more than {self.limit} {self.what}; the limit is {self.limit}",
                hint="split the file, or raise kb.max_table_rows",
            )


# ---------------------------------------------------------------------------- formats


# A page whose text layer has fewer word characters than this, and that images cover, is
# read by OCR (a scan with a stray text line, a page number, a stamp).
OCR_MIN_WORD_CHARS = 20
OCR_DPI = 300


def _word_chars(text: str) -> int:
    return len(re.findall(r"\w", text))


def convert_pdf(data: bytes, limits: Limits, defer_ocr: bool = False) -> Converted:
    """Every page's text joined by a blank line, each page's start offset, and the
    outline, or layout headings where there is none. A page without a text layer is read
    by OCR; a damaged file keeps the pages MuPDF can read, and its notes say which not.
    ``defer_ocr`` (a client that leaves OCR to the server): such pages are listed in
    ``meta["needs_ocr"]`` instead, and a file of only such pages is no error."""
    import pymupdf

    try:
        doc = pymupdf.open(stream=data, filetype="pdf")
    except Exception as exc:
        raise ConvertError(f"cannot be opened as a PDF ({exc})") from None
    with doc:
        if doc.needs_pass:
            raise ConvertError("is an encrypted PDF; decrypt it first")
        damaged = bool(doc.is_repaired)
        if damaged and doc.page_count == 0:
            raise ConvertError(
                "is a damaged PDF: no page could be read (MuPDF could not find its pages)",
                hint="the file may be truncated; get a complete copy",
            )
        pymupdf.TOOLS.mupdf_warnings(reset=True)
        texts: list[str] = []
        boxes: list[list[Region]] = []  # per page, offsets within its text
        unreadable: list[int] = []
        scans: list[int] = []
        for number in range(1, doc.page_count + 1):
            try:
                page = doc.load_page(number - 1)
                text, found = _page_text(page)
                broken = damaged and bool(pymupdf.TOOLS.mupdf_warnings(reset=True))
            except Exception:
                text, found, broken, page = "", [], True, None
            if broken and not _word_chars(text):
                unreadable.append(number)
                text, found = "", []
            elif page is not None and not broken and _scanned(page, text):
                scans.append(number)
            texts.append(text)
            boxes.append(found)
        if defer_ocr and scans:
            return Converted("", "pdf", None, {"needs_ocr": scans})
        ocr = _ocr_pages(doc, scans, texts, limits, boxes) if scans else None
        notes: list[str] = []
        if unreadable:
            readable = doc.page_count - len(unreadable)
            if readable == 0 or not any(_word_chars(t) for t in texts):
                raise ConvertError(
                    f"is a damaged PDF: none of its {doc.page_count} page(s) could be read",
                    hint="the file may be truncated; get a complete copy",
                )
            notes.append(
                f"{readable} of {doc.page_count} pages readable; the file is damaged "
                f"(pages {_page_list(unreadable)} could not be read)"
            )
        if ocr is not None:
            notes.extend(ocr.pop("notes"))
        content, starts = _join_pages(texts)
        if not content.strip():
            if scans and not limits.ocr_languages:
                hint = "turn OCR on (indexing_config ocr_languages), or run OCR on it first"
            elif scans and _tesseract() is None:
                hint = "install Tesseract (apt install tesseract-ocr tesseract-ocr-eng)"
            else:
                hint = "run OCR on it first, e.g. ocrmypdf"
            raise ConvertError(
                f"has no extractable text in its {len(texts)} page(s) (a scanned PDF "
                "without a text layer, and OCR read nothing?)",
                hint=hint,
            )
        meta: dict[str, Any] = {"pages": len(texts)}
        if notes:
            meta["notes"] = notes
        if ocr is not None and ocr["pages"]:
            meta["ocr"] = ocr
        regions = _absolute(boxes, starts)
        if regions:
            meta["regions"] = regions
        info = doc.metadata or {}
        if info.get("title"):
            meta["pdf_title"] = info["title"]
        try:
            toc = doc.get_toc()
        except Exception:
            toc = []
        if toc:
            meta["toc"] = [{"level": lvl, "title": title, "page": page} for lvl, title, page in toc]
        elif not unreadable:
            headings = layout_headings(doc)
            if headings:
                meta["pdf_headings"] = headings
    return Converted(content, "pdf", starts, meta)


# Where a stretch of a page's text sits: its offsets in the page's text, and its box in
# PDF points (x0, y0, x1, y1 from the page's top left; 72 to the inch), with Tesseract's
# mean word confidence (0..1) where OCR read it. A text layer gives one per block (a
# paragraph, a heading, a table cell run); OCR one per paragraph it finds.
@dataclass
class Region:
    start: int
    end: int
    box: tuple[float, float, float, float]
    confidence: float | None = None


MAX_REGIONS = 100_000  # a document's; past it none are kept (source_meta stays small)


def _join_pages(texts: list[str]) -> tuple[str, list[int]]:
    """The pages' texts joined by PAGE_SEPARATOR, and where each page starts in it."""
    starts: list[int] = []
    offset = 0
    for text in texts:
        starts.append(offset)
        offset += len(text) + len(PAGE_SEPARATOR)
    return PAGE_SEPARATOR.join(texts), starts


def _page_text(page: Any) -> tuple[str, list[Region]]:
    """A page's text (MuPDF's, as ``get_text("text")`` gives it: its text blocks in order)
    and each block's region."""
    blocks = [b for b in page.get_text("blocks") if b[6] == 0]
    text = "".join(b[4] for b in blocks).replace("\x00", "").strip()
    regions: list[Region] = []
    cursor = 0
    for x0, y0, x1, y1, block, *_ in blocks:
        piece = block.replace("\x00", "").strip()
        if not piece:
            continue
        at = text.find(piece, cursor)
        if at < 0:
            continue
        regions.append(Region(at, at + len(piece), (x0, y0, x1, y1)))
        cursor = at + len(piece)
    return text, regions


def _absolute(pages: list[list[Region]], starts: list[int]) -> list[list[Any]]:
    """Every page's regions as ``[char_start, char_end, page, x0, y0, x1, y1]`` (and the
    OCR confidence, where there is one) over the document's text."""
    out: list[list[Any]] = []
    for number, (regions, base) in enumerate(zip(pages, starts, strict=True), start=1):
        for r in regions:
            row: list[Any] = [base + r.start, base + r.end, number]
            row += [round(v, 1) for v in r.box]
            if r.confidence is not None:
                row.append(r.confidence)
            out.append(row)
    return out if len(out) <= MAX_REGIONS else []


def _scanned(page: Any, text: str) -> bool:
    """Whether a PDF page is a scan to OCR: next to no text layer, and images covering a
    quarter of the page or more (a blank page or a short title page is no scan)."""
    if _word_chars(text) >= OCR_MIN_WORD_CHARS:
        return False
    try:
        boxes = [info["bbox"] for info in page.get_image_info()]
    except Exception:
        return False
    area = abs(page.rect.width * page.rect.height) or 1.0
    covered = sum(abs((x1 - x0) * (y1 - y0)) for x0, y0, x1, y1 in boxes)
    return covered >= 0.25 * area


def _page_list(numbers: list[int]) -> str:
    """1, 2, 3, 5, 7, 8 as "1-3, 5, 7-8"."""
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)


def _tesseract() -> str | None:
    """The Tesseract command: KBPG_TESSERACT, else on PATH, else Debian's."""
    import shutil

    found = os.environ.get("KBPG_TESSERACT") or shutil.which("tesseract")
    if found:
        return found
    return "/usr/bin/tesseract" if os.path.exists("/usr/bin/tesseract") else None


@dataclass
class OcrPage:
    text: str
    confidence: float | None  # Tesseract's mean word confidence, 0..1
    words: int
    regions: list[Region] = field(default_factory=list)  # per paragraph, in pixels


def ocr_image(png: bytes, languages: str, dpi: int, timeout_s: float) -> OcrPage:
    """One image's text by Tesseract (its TSV output: word boxes with confidences),
    lines in reading order, a blank line between paragraphs."""
    import subprocess

    command = _tesseract()
    if command is None:
        raise OcrUnavailable(
            "needs OCR, and Tesseract is not installed",
            hint="install it: apt install tesseract-ocr tesseract-ocr-eng "
            "(kbpg server-setup --system-packages does)",
        )
    env = {**os.environ, "OMP_THREAD_LIMIT": "1"}
    try:
        out = subprocess.run(
            [command, "stdin", "stdout", "-l", languages, "--dpi", str(dpi), "tsv"],
            input=png,
            capture_output=True,
            timeout=timeout_s,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise ConvertError(f"took OCR more than {timeout_s:.0f} s on one page") from None
    if out.returncode != 0:
        stderr = out.stderr.decode("utf-8", "replace")
        err = stderr.strip().splitlines()
        message = err[-1] if err else f"exit status {out.returncode}"
        if "Failed loading language" in stderr:
            raise OcrUnavailable(
                f"needs OCR in {languages!r}, and Tesseract has no such language data",
                hint="install its language package (apt install tesseract-ocr-<lang>), or "
                "set indexing_config ocr_languages to installed ones",
            )
        raise ConvertError(f"could not be read by OCR: {message}")
    lines: dict[tuple[int, int, int, int], list[str]] = {}
    # Per paragraph: its box in pixels and its words' confidences.
    paragraphs: dict[tuple[int, int, int], tuple[list[int], list[float]]] = {}
    for row in out.stdout.decode("utf-8", "replace").splitlines()[1:]:
        cells = row.split("\t")
        if len(cells) < 12 or cells[0] != "5" or not cells[11].strip():
            continue
        conf = float(cells[10])
        if conf < 0:
            continue
        key = (int(cells[1]), int(cells[2]), int(cells[3]), int(cells[4]))
        lines.setdefault(key, []).append(cells[11].strip())
        left, top, width, height = (int(c) for c in cells[6:10])
        box, confs = paragraphs.setdefault(key[:3], ([left, top, left + width, top + height], []))
        box[:] = [min(box[0], left), min(box[1], top), max(box[2], left + width),
                  max(box[3], top + height)]  # fmt: skip
        confs.append(conf / 100)
    text = ""
    regions: list[Region] = []
    previous: tuple[int, int, int] | None = None
    start = 0
    for key in sorted(lines):
        paragraph = key[:3]
        if previous is not None and paragraph != previous:
            _close_paragraph(regions, paragraphs[previous], start, len(text))
            text += "\n"
            start = len(text) + 1
        if text:
            text += "\n"
        text += " ".join(lines[key])
        previous = paragraph
    if previous is not None:
        _close_paragraph(regions, paragraphs[previous], start, len(text))
    confidences = [c for _, confs in paragraphs.values() for c in confs]
    mean = round(sum(confidences) / len(confidences), 3) if confidences else None
    return OcrPage(text, mean, len(confidences), regions)


def _close_paragraph(
    regions: list[Region], paragraph: tuple[list[int], list[float]], start: int, end: int
) -> None:
    box, confs = paragraph
    conf = round(sum(confs) / len(confs), 3) if confs else None
    regions.append(Region(start, end, (box[0], box[1], box[2], box[3]), conf))


def _ocr_pages(
    doc: Any,
    numbers: list[int],
    texts: list[str],
    limits: Limits,
    boxes: list[list[Region]],
) -> dict[str, Any] | None:
    """OCR of the pages ``numbers`` (1-based) of ``doc``, in place in ``texts`` (and their
    regions in ``boxes``, in PDF points); what was read, for the document's source_meta."""
    if not limits.ocr_languages:
        return None
    if _tesseract() is None:
        return {
            "pages": [],
            "notes": [
                f"pages {_page_list(numbers)} have no text layer and were not read: "
                "Tesseract is not installed (apt install tesseract-ocr tesseract-ocr-eng)"
            ],
        }
    import pymupdf

    pages: list[dict[str, Any]] = []
    notes: list[str] = []
    for number in numbers:
        try:
            pix = doc.load_page(number - 1).get_pixmap(dpi=OCR_DPI, colorspace=pymupdf.csGRAY)
            png = pix.tobytes("png")
            del pix
            read = ocr_image(png, limits.ocr_languages, OCR_DPI, limits.timeout_s)
        except OcrUnavailable:
            raise
        except Exception as exc:
            notes.append(f"page {number} could not be read by OCR: {exc}")
            continue
        if _word_chars(read.text) > _word_chars(texts[number - 1]):
            texts[number - 1] = read.text
            pages.append({"page": number, "confidence": read.confidence, "words": read.words})
            scale = 72 / OCR_DPI  # the page was rendered at OCR_DPI
            boxes[number - 1] = [
                Region(r.start, r.end, tuple(v * scale for v in r.box), r.confidence)  # type: ignore[arg-type]
                for r in read.regions
            ]
    confs = [p["confidence"] for p in pages if p["confidence"] is not None]
    return {
        "engine": "tesseract",
        "languages": limits.ocr_languages,
        "pages": pages,
        "confidence": round(sum(confs) / len(confs), 3) if confs else None,
        "notes": notes,
    }


def convert_image(data: bytes, limits: Limits) -> Converted:
    """An image file (PNG, JPEG, TIFF with its pages, BMP, GIF, WebP) read by OCR: a page
    per frame, as a scanned PDF's."""
    import pymupdf

    if not limits.ocr_languages:
        raise ConvertError(
            "is an image, and OCR is off for this knowledge base",
            hint="set indexing_config ocr_languages (for example 'eng') to read images",
        )
    try:
        doc = pymupdf.open(stream=data)
        if not doc.is_pdf and doc.page_count == 0:
            raise ValueError("no image in it")
    except Exception as exc:
        raise ConvertError(f"cannot be opened as an image ({exc})") from None
    with doc:
        texts = [""] * doc.page_count
        boxes: list[list[Region]] = [[] for _ in texts]
        ocr = _ocr_pages(doc, list(range(1, doc.page_count + 1)), texts, limits, boxes)
    assert ocr is not None
    notes = ocr.pop("notes")
    if not ocr["pages"]:
        raise ConvertError(
            "has no text that OCR could read" + (f" ({notes[0]})" if notes else ""),
            hint="install Tesseract (apt install tesseract-ocr tesseract-ocr-eng)"
            if _tesseract() is None
            else None,
        )
    content, starts = _join_pages(texts)
    meta: dict[str, Any] = {"pages": len(texts), "ocr": ocr}
    if notes:
        meta["notes"] = notes
    regions = _absolute(boxes, starts)
    if regions:
        meta["regions"] = regions
    return Converted(content, "image", starts, meta)


_NUMBERED = re.compile(r"^(\d+(?:\.\d+)*)[.)]?\s+\S")
MAX_LAYOUT_HEADINGS = 2000


def layout_headings(doc: Any) -> list[dict[str, Any]]:
    """Headings of a PDF without an outline, from its layout: lines set larger than the
    body text (the most used size), or bold and numbered ("2.3 Scope"). The level is the
    numbering depth, else the rank of the line's size among the heading sizes."""
    sizes: Counter[float] = Counter()
    lines: list[tuple[int, str, float, bool]] = []
    for number, page in enumerate(doc.pages(), start=1):
        for block in page.get_text("dict").get("blocks", []):
            for line in block.get("lines", []):
                spans = [s for s in line.get("spans", []) if s.get("text", "").strip()]
                if not spans:
                    continue
                text = " ".join(s["text"].strip() for s in spans)
                size = round(max(float(s["size"]) for s in spans), 1)
                bold = all(
                    int(s.get("flags", 0)) & 16 or "bold" in str(s.get("font", "")).lower()
                    for s in spans
                )
                for s in spans:
                    sizes[round(float(s["size"]), 1)] += len(s["text"])
                lines.append((number, text, size, bold))
    if not sizes:
        return []
    body = sizes.most_common(1)[0][0]
    heads = [
        (p, t, sz)
        for p, t, sz, bold in lines
        if len(t) <= 120
        and not t.isdigit()
        and (sz >= body * 1.15 or (bold and _NUMBERED.match(t)))
    ]
    ranks = sorted({sz for _, _, sz in heads}, reverse=True)
    out = []
    for p, t, sz in heads[:MAX_LAYOUT_HEADINGS]:
        m = _NUMBERED.match(t)
        level = m.group(1).count(".") + 1 if m else ranks.index(sz) + 1
        out.append({"level": level, "title": t, "page": p})
    return out


_EMPTY_HEADER = re.compile(r"^\|(?:\s*\|)+\n\|(?:\s*-+\s*\|)+\n(\|.*\|)\n", re.M)


def _promote_headers(markdown: str) -> str:
    """A table converted from a DOCX has an empty header row (Word tables have no header
    cells); its first row becomes the header."""

    def fix(m: re.Match[str]) -> str:
        first = m.group(1)
        width = first.count("|") - 1
        return first + "\n|" + "---|" * width + "\n"

    return _EMPTY_HEADER.sub(fix, markdown)


def _reader_failed(label: str, exc: Exception) -> ConvertError:
    """The error of a reader that raised ``exc``. A reader whose library could not be
    loaded (MarkItDown's MissingDependencyException, raised from the ImportError it kept)
    says so: that is the installation's fault or the memory limit's, never the file's."""
    from markitdown import MissingDependencyException

    if isinstance(exc, MissingDependencyException | ImportError | MemoryError):
        why = exc.__cause__ or exc
        return ConvertError(
            f"could not be converted: the {label} reader's library could not be loaded "
            f"({type(why).__name__}: {why})"
        )
    return ConvertError(f"is not a valid {label} file ({type(exc).__name__}: {exc})")


def convert_docx(data: bytes, limits: Limits) -> Converted:
    from markitdown import StreamInfo
    from markitdown.converters import DocxConverter

    check_zip(data, "docx", limits)
    try:
        res = DocxConverter().convert(
            io.BytesIO(data), StreamInfo(extension=".docx"), **MARKDOWN_OPTIONS
        )
    except Exception as exc:
        raise _reader_failed("DOCX", exc) from None
    return Converted(_promote_headers(res.markdown or ""), "docx", None, _titled({}, res.title))


_SLIDE = re.compile(r"^<!-- Slide number: (\d+) -->\n", re.M)


def convert_pptx(data: bytes, limits: Limits) -> Converted:
    """Slides as sections, each slide's number its page; a slide without a title gets
    "Slide N" as its heading, so every slide is a section."""
    from markitdown import StreamInfo
    from markitdown.converters import PptxConverter

    check_zip(data, "pptx", limits)
    try:
        res = PptxConverter().convert(
            io.BytesIO(data), StreamInfo(extension=".pptx"), **MARKDOWN_OPTIONS
        )
    except Exception as exc:
        raise _reader_failed("PPTX", exc) from None
    md = res.markdown or ""
    marks = list(_SLIDE.finditer(md))
    parts: list[str] = []
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(md)
        body = md[m.end() : end].strip()
        if not body.startswith("# "):
            body = f"# Slide {m.group(1)}\n\n{body}".rstrip()
        parts.append(body)
    if not marks:
        return Converted(md, "pptx", None, {"slides": 0})
    content = ""
    starts = []
    for body in parts:
        starts.append(len(content))
        content += body + "\n\n"
    # page_starts index pages from 1 in order; slide numbers are 1..n in order too.
    return Converted(content.rstrip() + "\n", "pptx", starts, {"slides": len(parts)})


def _sheets_markdown(sheets: list[tuple[str, list[list[Any]]]], fmt: str) -> Converted:
    out = []
    for name, rows in sheets:
        rows = _trim_rows(rows)
        out.append(f"# {name}\n\n" + (markdown_table(rows) if rows else "(empty sheet)"))
    meta = {"sheets": [name for name, _ in sheets]}
    return Converted("\n\n".join(out) + "\n", fmt, None, meta)


def convert_xlsx(data: bytes, limits: Limits) -> Converted:
    import openpyxl

    check_zip(data, "xlsx", limits)
    budget = _RowBudget(limits, "rows")
    try:
        wb = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    except Exception as exc:
        raise ConvertError(f"is not a valid XLSX file ({type(exc).__name__}: {exc})") from None
    sheets = []
    try:
        for ws in wb.worksheets:
            rows = []
            for row in ws.iter_rows(values_only=True):
                budget.take()
                rows.append(list(row))
            sheets.append((ws.title, rows))
    except ConvertError:
        raise
    except Exception as exc:
        raise ConvertError(f"is a damaged XLSX file ({type(exc).__name__}: {exc})") from None
    finally:
        wb.close()
    return _sheets_markdown(sheets, "xlsx")


def convert_xls(data: bytes, limits: Limits) -> Converted:
    import xlrd

    budget = _RowBudget(limits, "rows")
    try:
        book = xlrd.open_workbook(file_contents=data, on_demand=True)
    except Exception as exc:
        raise ConvertError(f"is not a valid XLS file ({type(exc).__name__}: {exc})") from None
    sheets = []
    try:
        for i in range(book.nsheets):
            sh = book.sheet_by_index(i)
            rows = []
            for r in range(sh.nrows):
                budget.take()
                rows.append(sh.row_values(r))
            sheets.append((sh.name, rows))
            book.unload_sheet(i)
    finally:
        book.release_resources()
    return _sheets_markdown(sheets, "xls")


def convert_csv(data: bytes, limits: Limits, name: str = "") -> Converted:
    text = decode_text(data, "the CSV")
    sample = text[: 64 * 1024]
    delimiter = "\t" if name.lower().endswith(".tsv") else ","
    if not name.lower().endswith(".tsv"):
        try:
            delimiter = csv.Sniffer().sniff(sample, delimiters=",;\t|").delimiter
        except csv.Error:
            pass
    budget = _RowBudget(limits, "rows")
    rows = []
    csv.field_size_limit(min(limits.max_text_bytes, 2**31 - 1))
    try:
        for row in csv.reader(io.StringIO(text), delimiter=delimiter):
            budget.take()
            if any(c.strip() for c in row):
                rows.append(row)
    except csv.Error as exc:
        raise ConvertError(f"is not valid CSV ({exc})") from None
    if not rows:
        raise ConvertError("has no rows")
    return Converted(markdown_table(rows) + "\n", "csv", None, {"rows": len(rows) - 1})


def _json_depth_ok(text: str, limit: int) -> None:
    """Refuse nesting past ``limit`` before json.loads recurses into it."""
    depth = 0
    in_str = False
    esc = False
    for ch in text:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            if depth > limit:
                raise ConvertError(
                    f"is JSON nested more than {limit} levels deep; the limit is {limit}"
                )
        elif ch in "]}":
            depth -= 1


def flatten_json(value: Any, prefix: str = "") -> list[str]:
    """``a.b[0].c: value`` lines, one per scalar, in document order."""
    lines: list[str] = []
    stack: list[tuple[str, Any]] = [(prefix, value)]
    while stack:
        path, v = stack.pop()
        if isinstance(v, dict):
            if not v:
                lines.append(f"{path}: {{}}" if path else "{}")
            items = []
            for k, child in v.items():
                key = str(k)
                part = key if re.fullmatch(r"[A-Za-z_][\w-]*", key) else json.dumps(key)
                items.append((f"{path}.{part}" if path else part, child))
            stack.extend(reversed(items))
        elif isinstance(v, list):
            if not v:
                lines.append(f"{path}: []")
            stack.extend(reversed([(f"{path}[{i}]", c) for i, c in enumerate(v)]))
        else:
            shown = v if isinstance(v, str) else json.dumps(v)
            lines.append(f"{path}: {shown}" if path else str(shown))
    return lines


def convert_json(data: bytes, limits: Limits) -> Converted:
    text = decode_text(data, "the JSON")
    _json_depth_ok(text, limits.max_depth)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConvertError(f"is not valid JSON ({exc})") from None
    except RecursionError:
        raise ConvertError(f"is JSON nested too deeply (limit {limits.max_depth})") from None
    lines = flatten_json(value)
    return Converted("\n".join(lines) + "\n", "json", None, {"keys": len(lines)})


# Elements whose content is never text a reader sees: dropped with everything inside.
_DROPPED = (
    "script",
    "style",
    "iframe",
    "frame",
    "frameset",
    "object",
    "embed",
    "applet",
    "noscript",
    "template",
    "svg",
    "math",
    "canvas",
    "form",
    "button",
    "select",
    "input",
    "textarea",
    "link",
    "meta",
    "base",
)
_ALLOWED_TAGS = frozenset(
    {
        "a",
        "abbr",
        "b",
        "blockquote",
        "br",
        "caption",
        "code",
        "dd",
        "del",
        "details",
        "dfn",
        "div",
        "dl",
        "dt",
        "em",
        "figcaption",
        "figure",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "hr",
        "i",
        "img",
        "ins",
        "kbd",
        "li",
        "mark",
        "ol",
        "p",
        "pre",
        "q",
        "s",
        "samp",
        "section",
        "small",
        "span",
        "strong",
        "sub",
        "summary",
        "sup",
        "table",
        "tbody",
        "td",
        "tfoot",
        "th",
        "thead",
        "time",
        "tr",
        "u",
        "ul",
        "var",
        "article",
        "main",
        "header",
        "footer",
        "nav",
        "aside",
        "body",
        "html",
    }
)
_ALLOWED_ATTRS = {
    "a": ["href", "title"],
    "img": ["src", "alt", "title"],
    "abbr": ["title"],
    "td": ["colspan", "rowspan"],
    "th": ["colspan", "rowspan"],
}


def _html_depth_ok(html: str, limit: int) -> None:
    """Refuse nesting past ``limit``: the converters recurse per element."""
    from html.parser import HTMLParser

    void = {
        "area",
        "base",
        "br",
        "col",
        "embed",
        "hr",
        "img",
        "input",
        "link",
        "meta",
        "source",
        "track",
        "wbr",
        "p",
        "li",
        "td",
        "th",
        "tr",
        "option",
        "dt",
        "dd",
    }

    class Depth(HTMLParser):
        def __init__(self) -> None:
            super().__init__(convert_charrefs=False)
            self.depth = 0

        def handle_starttag(self, tag: str, attrs: Any) -> None:
            if tag in void:
                return
            self.depth += 1
            if self.depth > limit:
                raise ConvertError(
                    f"is HTML nested more than {limit} elements deep; the limit is {limit}"
                )

        def handle_endtag(self, tag: str) -> None:
            if tag not in void:
                self.depth = max(self.depth - 1, 0)

    Depth().feed(html)


_NAV_CLASS = re.compile(
    r"(?i)^(nav|navbar|navheader|navfooter|navigation|breadcrumbs?|skip-?link)$"
)


_ADMONITION = re.compile(r"(?i)^(note|tip|warning|caution|important|admonition|callout)$")


def _is_navigation(tag: Any) -> bool:
    if tag.name == "nav" or (tag.get("role") or "").lower() == "navigation":
        return True
    classes = tag.get("class") or []
    return any(_NAV_CLASS.match(c) for c in classes)


# Elements that are the page or its content, whatever their classes say: a skin marks
# <html> and <body> with its features ("vector-toc-available", "main-menu-pinned"), which
# read as furniture words, and dropping them would drop the page.
_NEVER_FURNITURE = frozenset({"html", "body", "main", "article"})


def _is_structure(tag: Any) -> bool:
    return tag.name in _NEVER_FURNITURE or (tag.get("role") or "").lower() == "main"


# Page furniture: what a site repeats around every page's content. By element, ARIA role,
# or a class or id made of these words (sidebar, vector-menu, p-lang, mw-jump-link, ...).
_FURNITURE_TAGS = ("aside", "footer")
_FURNITURE_ROLES = {
    "complementary",
    "contentinfo",
    "banner",
    "search",
    "menu",
    "menubar",
    "toolbar",
}
_FURNITURE_WORD = re.compile(
    r"(?i)(?:^|[-_])(?:sidebar|sidenav|menu|menubar|portlet|pinnable|breadcrumbs?|footer|"
    r"masthead|cookies?|share|social|advert|ads|lang|languages|interlanguage|catlinks|"
    r"printfooter|jump|editsection|navbox|noprint|indicators|skip|toc|sitenotice)"
    r"(?:$|[-_])"
)


def _is_furniture(tag: Any) -> bool:
    if tag.name in _FURNITURE_TAGS:
        return True
    if (tag.get("role") or "").lower() in _FURNITURE_ROLES:
        return True
    words = [*(tag.get("class") or []), tag.get("id") or ""]
    return any(_FURNITURE_WORD.search(w) for w in words if w)


def _main_content(soup: Any) -> None:
    """Keep only the page's main content when it marks one (<main>, role=main, a single
    <article>) holding most of the page's text; otherwise the page stays whole."""
    body = soup.body or soup
    total = len(body.get_text(" ", strip=True))
    marked = soup.find_all("main") + soup.find_all(attrs={"role": "main"})
    articles = soup.find_all("article")
    if not marked and len(articles) == 1:
        marked = articles
    for main in marked:
        if total and len(main.get_text(" ", strip=True)) >= 0.3 * total:
            main.extract()
            body.clear()
            body.append(main)
            return


_HEADING_TAG = re.compile(r"^h[1-6]$")
_PERMALINK_MARKS = {"¶", "§", "#", "🔗", "\uf0c1"}
_PERMALINK_CLASS = re.compile(r"(?i)\b(?:headerlink|hash-link|anchor-link|anchorjs-link)\b")


# Redirect links: a search engine's or a mail's click tracker in front of the real target
# (/ck/a?!&&p=...&u=a1aHR0cHM6..., /url?q=https://...). The target is kept where the link
# names it; otherwise the link goes and its text stays.
_REDIRECT_PATH = re.compile(
    r"(?i)^/(?:ck/a|url|aclk|l\.php|link|redirect|r|click|out|goto|away)/?$"
)
_TARGET_PARAMS = ("u", "url", "q", "target", "dest", "destination", "redirect", "uddg", "to")
_LONG_LINK = 400  # characters: a link this long is a tracker's payload, not an address


def _link_target(href: str) -> str | None:
    """The address a link should keep: its own, the real target behind a redirect, or
    None where it is noise in a chunk (a data: URI, an opaque tracking payload)."""
    import base64
    import binascii
    import urllib.parse

    href = href.strip()
    if href.lower().startswith("data:"):
        return None
    try:
        url = urllib.parse.urlsplit(href)
    except ValueError:
        return None
    redirect = bool(_REDIRECT_PATH.match(url.path or "")) and bool(url.query)
    if redirect or len(href) > _LONG_LINK:
        params = urllib.parse.parse_qs(url.query.lstrip("!&"), keep_blank_values=False)
        for name in _TARGET_PARAMS:
            for value in params.get(name, []):
                if re.match(r"(?i)^https?://", value):
                    return value
                if re.match(r"^a1[A-Za-z0-9_-]+$", value):  # base64url after "a1" (Bing)
                    try:
                        decoded = base64.urlsafe_b64decode(value[2:] + "=" * (-len(value[2:]) % 4))
                        target = decoded.decode("utf-8")
                    except (binascii.Error, ValueError):
                        continue
                    if re.match(r"(?i)^https?://\S+$", target):
                        return target
        return None
    return href


def _inline_data_image(src: str) -> str:
    """A data: image whose payload is written raw (``data:image/svg+xml,<svg ...>``, with
    spaces and quotes) percent-encoded whole, so media extraction takes it out of the text
    instead of leaving the SVG's source in a chunk."""
    import urllib.parse

    head, sep, payload = src.partition(",")
    if not sep or ";base64" in head.lower():
        return src
    return head + "," + urllib.parse.quote(urllib.parse.unquote(payload), safe="")


def _text_length(soup: Any) -> int:
    return len(re.sub(r"\s+", "", soup.get_text()))


# A cleaning step that leaves less than this of the page's text, and fewer characters than
# _KEEP_CHARS, is taken for a misreading of the page: its furniture is kept instead.
_KEEP_SHARE = 0.1
_KEEP_CHARS = 200


def clean_html(html: str) -> tuple[str, str | None, list[str]]:
    """The HTML without scripts, styles, frames, event handlers or javascript: links:
    dangerous elements go with their content, then bleach keeps only an allow-list of
    tags and attributes (data: images stay, for media extraction). Also the page title,
    and notes on what the cleaning did that a reader should know."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(html, "html.parser")
    title = soup.title.get_text(" ", strip=True) if soup.title else None
    for el in soup([*_DROPPED, "title", "head"]):
        el.decompose()
    total = _text_length(soup)
    whole = str(soup)
    _drop_furniture(soup)
    notes: list[str] = []
    kept = _text_length(soup)
    if total and kept < _KEEP_SHARE * total and kept < _KEEP_CHARS:
        # Removing the page's furniture would leave little or none of it: the page is kept
        # whole instead (its dangerous elements are gone all the same).
        soup = BeautifulSoup(whole, "html.parser")
        notes.append(
            f"the page was indexed whole: removing its navigation and sidebars would have "
            f"left {kept} of its {total} characters of text"
        )
    return _sanitize(soup), title or None, notes


def _drop_furniture(soup: Any) -> None:
    """Permalink marks, and the site's navigation, sidebars and footers around the page's
    own content."""
    # Permalink anchors ("¶" after Sphinx and MkDocs headings and definitions, "#" on
    # GitHub and Docusaurus): a symbol linking to the element itself, which would end up
    # in the section's name ("Basic Usage¶") and in the text.
    for a in soup.find_all("a", href=re.compile(r"^#")):
        if a.get_text(strip=True) in _PERMALINK_MARKS or _PERMALINK_CLASS.search(
            " ".join(a.get("class") or [])
        ):
            a.decompose()
    # Site navigation (prev/next bars, menus), sidebars, footers and language lists are
    # the site's, repeated on every page, not this page's content. Inside a heading such a
    # mark is furniture ("[edit]") unless it holds the heading's whole text (Sphinx's
    # "toc-backref" link around a section's name): then only the link goes.
    _main_content(soup)
    for el in soup.find_all(
        lambda t: not _is_structure(t) and (_is_navigation(t) or _is_furniture(t))
    ):
        if el.decomposed:
            continue
        head = el.find_parent(_HEADING_TAG)
        if head is not None and el.get_text(strip=True) == head.get_text(strip=True):
            el.unwrap()
        else:
            el.decompose()


def _sanitize(soup: Any) -> str:
    """Admonition titles as labels, links without tracking, then bleach's allow-list."""
    import bleach

    # An admonition's title ("Note", "Warning") is a label, not a section: as a heading it
    # would take the text after the box into a section named "Note".
    for box in soup.find_all(class_=_ADMONITION):
        for head in box.find_all(re.compile(r"^h[1-6]$")):
            head.name = "p"
            head.string = head.get_text(" ", strip=True) + ":"
    # A list whose items hold headings (search results, card grids) is a run of sections:
    # as a list, Markdown would indent each heading into its item ("2. ## Title") and the
    # section's title would be lost to the chunker.
    for item in soup.find_all("li"):
        if item.find(_HEADING_TAG) is not None:
            item.name = "div"
            if item.parent is not None and item.parent.name in ("ol", "ul"):
                item.parent.name = "div"
    for a in soup.find_all("a", href=True):
        target = _link_target(a["href"])
        if target is None:
            del a["href"]
        else:
            a["href"] = target
    for img in soup.find_all("img", src=re.compile(r"(?i)^\s*data:")):
        img["src"] = _inline_data_image(img["src"].strip())
    cleaner = bleach.Cleaner(
        tags=_ALLOWED_TAGS,
        attributes=_ALLOWED_ATTRS,
        protocols={"http", "https", "mailto", "data"},
        strip=True,
        strip_comments=True,
    )
    cleaned = str(cleaner.clean(str(soup)))
    # bleach allows data: for every URL attribute; only images may carry one.
    return re.sub(r'(?i)<a\b[^>]*\bhref="data:[^"]*"[^>]*>', "<a>", cleaned)


def convert_html(data: bytes | str, limits: Limits) -> Converted:
    from markitdown.converters import HtmlConverter

    html = data if isinstance(data, str) else decode_text(data, "the HTML")
    _html_depth_ok(html, limits.max_depth)
    cleaned, title, notes = clean_html(html)
    try:
        res = HtmlConverter().convert_string(cleaned, strict=True, **MARKDOWN_OPTIONS)
    except RecursionError:
        raise ConvertError(f"is HTML nested too deeply (limit {limits.max_depth})") from None
    meta = _titled({"notes": notes} if notes else {}, title)
    return Converted((res.markdown or "").strip() + "\n", "html", None, meta)


def _titled(meta: dict[str, Any], title: str | None) -> dict[str, Any]:
    if title:
        meta["source_title"] = title
    return meta


def _markitdown(fmt: str, data: bytes, limits: Limits) -> Converted:
    from markitdown import StreamInfo
    from markitdown.converters import EpubConverter, IpynbConverter, RssConverter

    if fmt == "epub":
        check_zip(data, "epub", limits)
    conv: Any = {"epub": EpubConverter, "ipynb": IpynbConverter, "rss": RssConverter}[fmt]()
    ext = {"epub": ".epub", "ipynb": ".ipynb", "rss": ".rss"}[fmt]
    if fmt == "ipynb":
        _json_depth_ok(decode_text(data, "the notebook"), limits.max_depth)
    try:
        res = conv.convert(
            io.BytesIO(data), StreamInfo(extension=ext, charset="utf-8"), **MARKDOWN_OPTIONS
        )
    except Exception as exc:
        raise _reader_failed(fmt.upper(), exc) from None
    if res is None or not (res.markdown or "").strip():
        raise ConvertError(f"has no text that a {fmt.upper()} reader finds")
    return Converted(res.markdown, fmt, None, _titled({}, res.title))


def convert(data: bytes, file_name: str, limits: Limits | None = None) -> Converted:
    """Convert ``data`` (a file named ``file_name``) in this process."""
    limits = limits or Limits()
    if not data:
        raise ConvertError("is empty")
    fmt = format_of(file_name, data)
    if fmt is None:
        raise ConvertError(
            f"has an unsupported file type ({os.path.splitext(file_name)[1] or 'no extension'})",
            hint="kbpg converts " + supported(),
        )
    if fmt == "pdf":
        out = convert_pdf(data, limits)
    elif fmt == "image":
        out = convert_image(data, limits)
    elif fmt == "docx":
        out = convert_docx(data, limits)
    elif fmt == "pptx":
        out = convert_pptx(data, limits)
    elif fmt == "xlsx":
        out = convert_xlsx(data, limits)
    elif fmt == "xls":
        out = convert_xls(data, limits)
    elif fmt == "html":
        out = convert_html(data, limits)
    elif fmt == "csv":
        out = convert_csv(data, limits, file_name)
    elif fmt == "json":
        out = convert_json(data, limits)
    elif fmt == "markdown":
        out = Converted(readable_markdown(decode_text(data, "the file")), fmt)
    elif fmt == "text":
        out = Converted(decode_text(data, "the file"), fmt)
    elif fmt == "xml":
        out = convert_xml(data, limits)
    elif fmt == "rst":
        out = convert_rst(data)
    else:
        out = _markitdown(fmt, data, limits)
    # No-break spaces (&nbsp; in "20.4.&nbsp;Memory") read as spaces in headings and search.
    out.content = out.content.replace("\xa0", " ")
    if not out.content.strip():
        raise ConvertError(f"has no text (converted as {fmt.upper()})")
    size = len(out.content.encode("utf-8"))
    if size > limits.max_text_bytes:
        raise ConvertError(
            f"converts to {size} bytes of text; the limit is {limits.max_text_bytes} bytes",
            hint="split the file or raise kb.max_document_bytes",
        )
    out.meta["file_type"] = fmt
    return out


# ---------------------------------------------------------------------------- isolation


def _limit_child(memory_mb: int, cpu_s: float) -> None:
    import resource

    mem = memory_mb * 1024 * 1024
    # The soft limit only: the child may lift it for Chromium, which has its own timeout.
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (mem, hard))
    cpu = int(cpu_s) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
    os.setsid()  # the child's own process group: a timeout kills all it started


# The child's first lines: whatever it dies of, it writes its peak address space to
# stderr first, so that an allocation refused near the limit reads as memory even where a
# C extension reports it as something else (SystemError, ImportError, a bare failure).
_CHILD = """\
import sys
sys.path[:0] = {path!r}
def _hook(*exc):
    try:
        with open("/proc/self/status") as status:
            sys.stderr.write("\\n" + "".join(x for x in status if x.startswith("VmPeak:")))
    except OSError:
        pass
    sys.__excepthook__(*exc)
sys.excepthook = _hook
from kbpg_db import convert
convert.main()
"""


# What running out of memory reads like, from Python, a C library or a loader.
_OUT_OF_MEMORY = re.compile(
    r"MemoryError|[Cc]annot allocate|failed to map|bad_alloc|[Mm]emory allocation"
)


def _peak_kb() -> int | None:
    """This process's peak address space in kB (Linux), or None where unknown."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmPeak:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def _near_limit(peak_kb: int | None, memory_mb: int) -> bool:
    """Whether a process that peaked at ``peak_kb`` was within reach of its limit: a
    failure there is a refused allocation, whatever name the library gave it."""
    return peak_kb is not None and peak_kb >= memory_mb * 1024 * 0.85


def run_isolated(
    request: dict[str, Any],
    data: bytes | None,
    limits: Limits,
    python: str | None = None,
    path: list[str] | None = None,
) -> Converted:
    """Convert (or fetch and convert, for ``request["url"]``) in a child process of
    ``python`` limited to ``limits.memory_mb`` of address space and ``timeout_s`` of
    time. The child imports from ``path`` (default: this process's sys.path, where this
    module was found)."""
    import signal
    import subprocess
    import tempfile

    python = python or sys.executable
    path = [p for p in (path or sys.path) if p]
    header = json.dumps({**request, "limits": asdict(limits)}).encode() + b"\n"
    with tempfile.TemporaryDirectory(prefix="kbpg-convert-") as home:
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": home,
            "TMPDIR": home,
            "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
            "OMP_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1",
        }
        proc = subprocess.Popen(
            [python, "-I", "-c", _CHILD.format(path=path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=home,
            preexec_fn=lambda: _limit_child(limits.memory_mb, limits.timeout_s),
        )
        try:
            out, err = proc.communicate(header + (data or b""), timeout=limits.timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise ConvertError(
                f"took longer than {limits.timeout_s:g} s to convert and was stopped",
                hint="raise kb.convert_timeout_s if the file is genuine",
            ) from None
    if proc.returncode != 0 or not out:
        tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
        if proc.returncode < 0:
            sig = signal.Signals(-proc.returncode).name
            raise ConvertError(
                f"could not be converted: the converter was stopped by {sig} (over its "
                f"{limits.memory_mb} MB memory or CPU limit, or a parser crashed) {tail[0]}".rstrip(),
                hint="raise kb.convert_memory_mb if the file is genuine",
            )
        # Out of memory shows many ways (MemoryError, a library that cannot be mapped, a
        # C extension's SystemError), so the child's peak address space decides as well.
        text = err.decode("utf-8", "replace")
        peak = re.search(r"VmPeak:\s+(\d+) kB", text)
        if _OUT_OF_MEMORY.search(text) or (
            peak and _near_limit(int(peak.group(1)), limits.memory_mb)
        ):
            raise ConvertError(
                f"could not be converted: the converter process ran out of its "
                f"{limits.memory_mb} MB memory limit ({tail[0]})",
                hint="raise kb.convert_memory_mb if the file is genuine",
            )
        raise ConvertError(f"could not be converted: the converter process failed ({tail[0]})")
    try:
        result = json.loads(out)
    except ValueError:
        raise ConvertError(
            "could not be converted: the converter's reply is not readable ("
            + out[:200].decode("utf-8", "replace").strip()
            + ")"
        ) from None
    if not isinstance(result, dict) or "ok" not in result:
        raise ConvertError("could not be converted: the converter's reply is not readable")
    if not result.get("ok"):
        raise ConvertError(result["error"], result.get("hint"))
    file = base64.b64decode(result["file"]) if result.get("file") else None
    return Converted(
        result["content"],
        result["format"],
        result.get("page_starts"),
        result.get("meta") or {},
        file,
        result.get("file_name"),
    )


def main() -> None:
    """The child's side: a JSON header line, then the file's bytes, on stdin; the result
    as one JSON object on stdout. Nothing else reaches stdout: what the libraries print
    (MuPDF writes its errors there) goes to stderr instead."""
    result_fd = os.dup(1)
    os.dup2(2, 1)
    sys.setrecursionlimit(5000)
    raw = sys.stdin.buffer.read()
    line, _, data = raw.partition(b"\n")
    req = json.loads(line)
    limits = Limits(**req.pop("limits"))
    try:
        if req.get("url"):
            from kbpg_db import fetch

            out = fetch.fetch_and_convert(req["url"], limits, req.get("render", True))
        else:
            out = convert(data, req["file_name"], limits)
    except ConvertError as exc:
        result: dict[str, Any] = {"ok": False, "error": str(exc), "hint": exc.hint}
        if _near_limit(_peak_kb(), limits.memory_mb) or _OUT_OF_MEMORY.search(str(exc)):
            # A parser that could not allocate often reports a damaged file instead.
            result["error"] += f" (the converter ran into its {limits.memory_mb} MB memory limit)"
            result["hint"] = "raise kb.convert_memory_mb if the file is genuine"
    except MemoryError:
        result = {
            "ok": False,
            "error": "could not be converted within the converter's "
            f"{limits.memory_mb} MB memory limit",
            "hint": "raise kb.convert_memory_mb if the file is genuine",
        }
    except RecursionError:
        result = {"ok": False, "error": "is nested too deeply to convert"}
    else:
        result = {
            "ok": True,
            "content": out.content,
            "format": out.format,
            "page_starts": out.page_starts,
            "meta": out.meta,
            "file": base64.b64encode(out.file).decode() if out.file else None,
            "file_name": out.file_name,
        }
    sys.stdout.flush()
    with os.fdopen(result_fd, "w", encoding="utf-8") as reply:
        reply.write(json.dumps(result))
