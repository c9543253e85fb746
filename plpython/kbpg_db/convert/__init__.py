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

One module a family of formats: ``formats`` (the list of file types and how a file's
format is told), ``pdf`` and ``ocr``, ``office`` (Office, spreadsheets, CSV, JSON, EPUB,
notebooks, feeds), ``html``, ``text`` (Markdown, reStructuredText); ``base`` what they
share and ``isolation`` the child process. :func:`convert` dispatches by format.
"""

from __future__ import annotations

import os

from kbpg_db.convert.base import (
    MARKDOWN_OPTIONS,
    PAGE_SEPARATOR,
    Converted,
    ConvertError,
    Limits,
    OcrUnavailable,
    Region,
    decode_text,
)
from kbpg_db.convert.formats import FILE_TYPES, FORMATS, FileType, format_of, supported
from kbpg_db.convert.html import clean_html, convert_html, convert_xml
from kbpg_db.convert.isolation import main, run_isolated
from kbpg_db.convert.ocr import convert_image, ocr_image
from kbpg_db.convert.office import (
    _markitdown,
    convert_csv,
    convert_docx,
    convert_json,
    convert_pptx,
    convert_xls,
    convert_xlsx,
    flatten_json,
)
from kbpg_db.convert.pdf import convert_pdf
from kbpg_db.convert.text import convert_rst, readable_markdown

# The package's API: what the loaders, fetch, sqlgen and the server's jobs use.
__all__ = [
    "FILE_TYPES",
    "FORMATS",
    "MARKDOWN_OPTIONS",
    "PAGE_SEPARATOR",
    "ConvertError",
    "Converted",
    "FileType",
    "Limits",
    "OcrUnavailable",
    "Region",
    "clean_html",
    "convert",
    "convert_html",
    "convert_pdf",
    "decode_text",
    "flatten_json",
    "format_of",
    "main",
    "ocr_image",
    "readable_markdown",
    "run_isolated",
    "supported",
]


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
