"""Scanned pages made for the OCR tests: text typeset by MuPDF, rasterised at a given
resolution, turned a little, with speckle noise, then kept as an image or as a PDF page
with no text layer."""

from __future__ import annotations

import io
import random

WORDS = (
    "harbour crane vessel cargo manifest berth tide pilot ballast quay container "
    "freight customs inspection warehouse schedule shipment dock anchor rudder "
    "northern southern eastern western morning evening weekly monthly invoice "
    "captain engineer surveyor ledger register permit tariff pallet forklift"
).split()


def paragraphs(seed: int, count: int = 4, words: int = 40) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(words)) + "." for _ in range(count)]


def scan_png(
    columns: list[list[str]],
    dpi: int = 200,
    angle: float = 1.0,
    noise: float = 0.01,
    seed: int = 0,
) -> bytes:
    """One A4 page of text in ``columns`` (a list of paragraphs each), as a PNG scan."""
    import pymupdf
    from PIL import Image

    doc = pymupdf.open()
    page = doc.new_page()
    width = (page.rect.width - 144 - 24 * (len(columns) - 1)) / len(columns)
    for i, paras in enumerate(columns):
        x0 = 72 + i * (width + 24)
        page.insert_textbox(
            pymupdf.Rect(x0, 72, x0 + width, page.rect.height - 72),
            "\n\n".join(paras),
            fontsize=11,
            fontname="helv",
        )
    pix = page.get_pixmap(dpi=dpi, colorspace=pymupdf.csGRAY)
    img = Image.frombytes("L", (pix.width, pix.height), pix.samples)
    img = img.rotate(angle, resample=Image.Resampling.BILINEAR, expand=False, fillcolor=255)
    rng = random.Random(seed)
    px = img.load()
    assert px is not None
    for _ in range(int(noise * img.width * img.height)):
        px[rng.randrange(img.width), rng.randrange(img.height)] = rng.choice((0, 96, 255))
    out = io.BytesIO()
    img.save(out, format="PNG", dpi=(dpi, dpi))
    return out.getvalue()


def scanned_pdf(pages: list[bytes], text_pages: dict[int, str] | None = None) -> bytes:
    """A PDF of the ``pages`` (PNG scans, no text layer), A4; ``text_pages`` maps a
    1-based page number to a page with a real text layer instead."""
    import pymupdf

    doc = pymupdf.open()
    for number, png in enumerate(pages, start=1):
        page = doc.new_page()
        if text_pages and number in text_pages:
            box = pymupdf.Rect(72, 72, page.rect.width - 72, page.rect.height - 72)
            page.insert_textbox(box, text_pages[number], fontsize=11)
        else:
            page.insert_image(page.rect, stream=png)
    return doc.tobytes(deflate=True)


def eight_pages() -> bytes:
    """Eight A4 pages with a text layer: a "Chapter N" heading and a paragraph each."""
    import pymupdf

    doc = pymupdf.open()
    for i in range(1, 9):
        page = doc.new_page()
        page.insert_text((72, 72), f"Chapter {i}", fontsize=18)
        page.insert_textbox(
            pymupdf.Rect(72, 100, 520, 760),
            f"Page {i} talks about harbour number {i} and its cranes. " * 30,
            fontsize=11,
        )
    return bytes(doc.tobytes(deflate=True))
