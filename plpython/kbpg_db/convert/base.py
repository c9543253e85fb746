"""What every converter shares: its errors, limits and result, text decoding, archive
checks and Markdown tables."""

from __future__ import annotations

import io
import zipfile
from dataclasses import dataclass, field
from typing import Any

from kbpg_db.config import MAX_DOCUMENT_BYTES


class ConvertError(Exception):
    """A file that cannot be converted: the message names the file and the problem."""

    def __init__(self, message: str, hint: str | None = None, status: int | None = None) -> None:
        super().__init__(message)
        self.hint = hint
        self.status = status  # a fetch's HTTP status (304, 404, 503...), where there was one


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


# MarkItDown's markdownify options: data: images kept (media extraction takes them out),
# underscores not escaped (shared_buffers, pg_dump stay one searchable identifier;
# CommonMark reads no emphasis inside a word).
MARKDOWN_OPTIONS: dict[str, Any] = {"keep_data_uris": True, "escape_underscores": False}
PAGE_SEPARATOR = "\n\n"


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


def _page_list(numbers: list[int]) -> str:
    """1, 2, 3, 5, 7, 8 as "1-3, 5, 7-8"."""
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)
