"""OCR with Tesseract (its CLI's TSV): scanned PDF pages and image files."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

from kbpg_db.convert.base import (
    Converted,
    ConvertError,
    Limits,
    OcrUnavailable,
    Region,
    _absolute,
    _join_pages,
    _page_list,
)

# A page whose text layer has fewer word characters than this, and that images cover, is
# read by OCR (a scan with a stray text line, a page number, a stamp).
OCR_MIN_WORD_CHARS = 20
OCR_DPI = 300


def _word_chars(text: str) -> int:
    return len(re.findall(r"\w", text))


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
