"""Damaged PDFs, and scanned pages and images read by OCR (Tesseract, Debian's package)."""

from __future__ import annotations

import io
import re
from collections import Counter

import pytest
from kbpg_db import chunking, convert
from kbpg_db.convert import ConvertError, Limits

from tests import scans
from tests.helpers import needs_tesseract
from tests.scans import eight_pages


def recall(truth: str, read: str) -> float:
    want = Counter(re.findall(r"\w+", truth.lower()))
    got = Counter(re.findall(r"\w+", read.lower()))
    return sum(min(n, got[w]) for w, n in want.items()) / sum(want.values())


def test_truncated_pdf_keeps_its_readable_pages_and_says_so() -> None:
    data = eight_pages()
    out = convert.convert(data[: len(data) // 2], "report.pdf")
    assert out.meta["notes"] == [
        "5 of 8 pages readable; the file is damaged (pages 6-8 could not be read)"
    ]
    assert out.page_starts is not None and len(out.page_starts) == 8
    at = out.content.index("harbour number 3")
    assert chunking.page_of(out.page_starts, at) == 3
    chunks = chunking.chunk_text(out.content, "recursive", 120)
    assert chunks and all(c.content.strip() for c in chunks)


def test_pdf_with_no_readable_page_is_named_damaged() -> None:
    import pymupdf

    doc = pymupdf.open()
    for i in range(8):
        doc.new_page().insert_text((72, 72), f"Page {i}")
    data = doc.tobytes(deflate=True, garbage=3, use_objstms=1)
    with pytest.raises(ConvertError, match=r"damaged PDF: no page could be read") as err:
        convert.convert(data[: len(data) // 2], "report.pdf")
    assert err.value.hint and "truncated" in err.value.hint


@needs_tesseract
def test_scanned_two_column_page_is_read_by_ocr() -> None:
    columns = [scans.paragraphs(1, 3, 35), scans.paragraphs(2, 3, 35)]
    truth = " ".join(p for col in columns for p in col)
    typed = "The harbour office opens at six. Questions go to the duty pilot."
    for dpi, angle in ((150, 1.2), (300, -0.8)):
        scan = scans.scan_png(columns, dpi=dpi, angle=angle, noise=0.01, seed=dpi)
        pdf = scans.scanned_pdf([b"", scan], text_pages={1: typed})
        out = convert.convert(pdf, "scan.pdf")
        assert out.page_starts is not None and len(out.page_starts) == 2
        second = out.content[out.page_starts[1] :]
        assert recall(truth, second) >= 0.95, (dpi, second[:300])
        assert out.content.startswith(typed)
        # The scanned words are on page 2, the typed page keeps its own text layer.
        word = columns[1][0].split()[0]
        assert chunking.page_of(out.page_starts, out.content.index(word, len(typed))) == 2
        ocr = out.meta["ocr"]
        assert ocr["engine"] == "tesseract" and ocr["languages"] == "eng"
        assert [p["page"] for p in ocr["pages"]] == [2]
        assert 0.5 < ocr["pages"][0]["confidence"] <= 1.0


@needs_tesseract
def test_image_files_are_read_by_ocr_a_page_per_frame() -> None:
    from PIL import Image

    first = scans.paragraphs(5, 2, 30)
    second = scans.paragraphs(6, 2, 30)
    png = scans.scan_png([first], dpi=200, angle=0.5)
    out = convert.convert(png, "notice.png")
    assert out.format == "image" and out.meta["file_type"] == "image"
    assert recall(" ".join(first), out.content) >= 0.95
    jpg = io.BytesIO()
    Image.open(io.BytesIO(png)).save(jpg, format="JPEG", quality=85)
    assert recall(" ".join(first), convert.convert(jpg.getvalue(), "notice.jpg").content) >= 0.95
    # A two-page TIFF: two pages, each its own number.
    frames = [Image.open(io.BytesIO(scans.scan_png([p], dpi=200))) for p in (first, second)]
    tiff = io.BytesIO()
    frames[0].save(tiff, format="TIFF", save_all=True, append_images=frames[1:])
    out = convert.convert(tiff.getvalue(), "fax.tiff")
    assert out.page_starts is not None and len(out.page_starts) == 2
    at = out.content.index(second[0].split()[0], out.page_starts[1])
    assert chunking.page_of(out.page_starts, at) == 2
    assert [p["page"] for p in out.meta["ocr"]["pages"]] == [1, 2]
    # Sniffed by its bytes where the name says nothing.
    assert convert.format_of("upload", png) == "image"


@needs_tesseract
def test_ocr_settings_errors_name_what_is_wrong() -> None:
    png = scans.scan_png([scans.paragraphs(7, 1, 20)], dpi=150)
    with pytest.raises(ConvertError, match="OCR is off") as err:
        convert.convert(png, "a.png", Limits(ocr_languages=""))
    assert err.value.hint and "ocr_languages" in err.value.hint
    with pytest.raises(ConvertError, match=r"'klingon'.*no such language data"):
        convert.convert(png, "a.png", Limits(ocr_languages="klingon"))


def test_a_client_leaves_scanned_pdfs_to_the_server() -> None:
    pdf = scans.scanned_pdf([scans.scan_png([scans.paragraphs(8, 1, 20)], dpi=100)])
    out = convert.convert_pdf(pdf, Limits(), defer_ocr=True)
    assert out.meta == {"needs_ocr": [1]}


def test_pdf_regions_locate_each_block_in_points() -> None:
    import pymupdf

    out = convert.convert(eight_pages(), "report.pdf")
    regions = out.meta["regions"]
    assert out.page_starts is not None
    doc = pymupdf.open(stream=eight_pages(), filetype="pdf")
    assert len(regions) == 16  # a heading and a paragraph a page
    for start, end, page, x0, y0, x1, y1 in regions:
        assert out.page_starts[page - 1] <= start < end <= len(out.content)
        # MuPDF reads the region's own words inside its box.
        inside = doc[page - 1].get_textbox(pymupdf.Rect(x0 - 1, y0 - 1, x1 + 1, y1 + 1))
        assert out.content[start:end].split()[:4] == inside.split()[:4]
    heading = regions[2]
    assert out.content[heading[0] : heading[1]] == "Chapter 2" and heading[2] == 2
    assert 45 < heading[4] < 72 < heading[6]  # its box spans the baseline set at 72 pt


@needs_tesseract
def test_ocr_regions_carry_their_confidence() -> None:
    import pymupdf

    png = scans.scan_png([scans.paragraphs(9, 2, 25)], dpi=200, angle=0.0, noise=0.0)
    out = convert.convert(png, "memo.png")
    regions = out.meta["regions"]
    assert len(regions) == 2  # two paragraphs, the first above the second
    assert regions[0][6] < regions[1][4]
    # Boxes in the page's points, as MuPDF lays the image out (its own resolution).
    page = pymupdf.open(stream=png)[0].rect
    for start, end, number, x0, y0, x1, y1, confidence in regions:
        assert number == 1 and 0.5 < confidence <= 1
        assert 0 <= x0 < x1 <= page.width and 0 <= y0 < y1 <= page.height
        assert x0 < 0.2 * page.width  # the text's left margin
        assert out.content[start:end].split()[0] in scans.WORDS
