"""ocr: seconds per scanned page, and the share of its words read back (Tesseract)."""

from __future__ import annotations

import re
import statistics
import time
from collections import Counter
from typing import Any

from kbpg_db import convert

from tests import scans


def _recall(truth: str, read: str) -> float:
    want = Counter(re.findall(r"\w+", truth.lower()))
    got = Counter(re.findall(r"\w+", read.lower()))
    return sum(min(n, got[w]) for w, n in want.items()) / sum(want.values())


def bench_ocr(dsn: str, quick: bool) -> dict[str, Any]:
    del dsn  # conversion runs in this process, as the server's converter child does
    if convert.ocr._tesseract() is None:
        return {"workload": "skipped: Tesseract is not installed (make setup installs it)"}
    pages = 2 if quick else 6
    columns = [
        [scans.paragraphs(2 * i, 4, 45), scans.paragraphs(2 * i + 1, 4, 45)] for i in range(pages)
    ]
    truth = [" ".join(p for col in cols for p in col) for cols in columns]
    out: dict[str, Any] = {
        "workload": f"a {pages}-page PDF of A4 scans (two columns, 1 degree turned, 1% speckle) "
        f"read by convert.convert, rendered at {convert.ocr.OCR_DPI} dpi, one Tesseract thread",
    }
    for dpi in (150, 300):
        pngs = [
            scans.scan_png(cols, dpi=dpi, angle=1.0, noise=0.01, seed=i)
            for i, cols in enumerate(columns)
        ]
        pdf = scans.scanned_pdf(pngs)
        t0 = time.perf_counter()
        conv = convert.convert(pdf, "scan.pdf")
        seconds = time.perf_counter() - t0
        assert conv.page_starts is not None
        bounds = [*conv.page_starts[1:], len(conv.content)]
        recalls = [
            _recall(truth[i], conv.content[conv.page_starts[i] : bounds[i]]) for i in range(pages)
        ]
        out[f"scanned_at_{dpi}dpi_s_per_page"] = round(seconds / pages, 2)
        out[f"scanned_at_{dpi}dpi_word_recall"] = round(statistics.mean(recalls), 3)
        out[f"scanned_at_{dpi}dpi_confidence"] = conv.meta["ocr"]["confidence"]
    return out
