"""PDF: pages, outline, layout headings and the text blocks' regions (pymupdf); scanned
pages go to OCR."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from kbpg_db.convert.base import (
    Converted,
    ConvertError,
    Limits,
    Region,
    _absolute,
    _join_pages,
    _page_list,
)
from kbpg_db.convert.ocr import OCR_MIN_WORD_CHARS, _ocr_pages, _tesseract, _word_chars

# ---------------------------------------------------------------------------- formats


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
