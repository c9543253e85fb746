"""Where a chunk's text sits on its document's pages, for a viewer to highlight it.

A PDF's or an image's conversion records regions (kbpg_db.convert.Region): stretches of
the document's text with their page and box in PDF points, and OCR's confidence where
Tesseract read them. A chunk gets the regions its characters overlap, merged where they
continue one another on a page (a paragraph and the next in the same column), so a chunk
has a few boxes, not one per line.
"""

from __future__ import annotations

import bisect
from typing import Any

# Boxes on one page merge when the next starts within this many points below the last and
# their columns overlap by half the narrower one's width.
MERGE_GAP = 14.0


def _mergeable(a: list[float], b: list[float]) -> bool:
    overlap = min(a[2], b[2]) - max(a[0], b[0])
    narrower = min(a[2] - a[0], b[2] - b[0])
    return b[1] <= a[3] + MERGE_GAP and b[3] >= a[1] and overlap >= 0.5 * max(narrower, 1.0)


def chunk_origins(meta: dict[str, Any], spans: list[list[int]]) -> dict[str, Any]:
    """``{ordinal: {"regions": [{"page", "bbox"}], "ocr": {"engine", "confidence"}}}``
    for each ``[ordinal, char_start, char_end]`` of ``spans`` that overlaps a region of
    ``meta["regions"]`` (rows ``[start, end, page, x0, y0, x1, y1(, confidence)]``, in
    text order)."""
    rows = sorted(meta.get("regions") or [], key=lambda r: r[0])
    if not rows:
        return {}
    starts = [r[0] for r in rows]
    engine = (meta.get("ocr") or {}).get("engine") or "tesseract"
    out: dict[str, Any] = {}
    for ordinal, start, end in spans:
        # The regions that end after the chunk starts and start before it ends.
        first = max(bisect.bisect_right(starts, start) - 1, 0)
        boxes: list[tuple[int, list[float]]] = []
        confidences: list[tuple[float, int]] = []
        for row in rows[first:]:
            if row[0] >= end:
                break
            if row[1] <= start:
                continue
            page, box = int(row[2]), [float(v) for v in row[3:7]]
            if boxes and boxes[-1][0] == page and _mergeable(boxes[-1][1], box):
                last = boxes[-1][1]
                boxes[-1] = (page, [min(last[0], box[0]), min(last[1], box[1]),
                                    max(last[2], box[2]), max(last[3], box[3])])  # fmt: skip
            else:
                boxes.append((page, box))
            if len(row) > 7 and row[7] is not None:
                overlap = min(end, row[1]) - max(start, row[0])
                confidences.append((float(row[7]), max(overlap, 1)))
        if not boxes:
            continue
        origin: dict[str, Any] = {
            "regions": [{"page": p, "bbox": [round(v, 1) for v in b]} for p, b in boxes]
        }
        if confidences:
            weight = sum(n for _, n in confidences)
            mean = sum(c * n for c, n in confidences) / weight
            origin["ocr"] = {"engine": engine, "confidence": round(mean, 3)}
        out[str(ordinal)] = origin
    return out
