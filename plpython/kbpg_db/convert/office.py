"""Office formats and data: DOCX and PPTX (MarkItDown), XLSX/XLS row by row, CSV, JSON;
EPUB, notebooks and feeds through MarkItDown's converters."""

from __future__ import annotations

import csv
import io
import json
import re
from typing import Any

from kbpg_db.convert.base import (
    MARKDOWN_OPTIONS,
    Converted,
    ConvertError,
    Limits,
    _RowBudget,
    _trim_rows,
    check_zip,
    decode_text,
    markdown_table,
)

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
