"""A PDF's section structure, from what the document itself says, before any LLM.

In order: (1) the PDF's outline (bookmarks), carried in the document's metadata as
``toc``; (2) a printed table of contents in the first ``toc_check_page_num`` pages —
regular "title .... page" lines — with printed page numbers calibrated against the
physical pages (offset = the most common physical - printed difference over titles found
at a line start) and each entry's start page verified, and repaired when the title is
found on a nearby page instead; (3) headings detected from the layout (font size, weight,
numbering like "2.3"), carried in metadata as ``pdf_headings`` by the loader.

Each source gives entries (level, title, page); :func:`locate` turns them into character
offsets in the document's text, so node text, page ranges and offsets stay exact.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

_TOC_LINE = re.compile(
    r"^\s*(?P<title>\S.*?)\s*(?:\.{2,}|…+|·{2,}|\s{3,}|\t+)\s*(?P<page>\d{1,4})\s*$"
)
_NUMBERING = re.compile(r"^\s*(\d+(?:\.\d+)*)[.)]?\s+\S")
MIN_TOC_LINES = 3


@dataclass
class Entry:
    level: int
    title: str
    page: int  # physical, 1-based
    offset: int | None = None  # where the section starts in the document text


def pages(text: str, page_starts: list[int]) -> list[tuple[int, int]]:
    bounds = [*page_starts, len(text)]
    return [(bounds[i], bounds[i + 1]) for i in range(len(page_starts))]


def _level(title: str) -> int:
    m = _NUMBERING.match(title)
    return m.group(1).count(".") + 1 if m else 1


def _title_pattern(title: str) -> re.Pattern[str]:
    words = [re.escape(w) for w in title.split()]
    return re.compile(r"(?im)^[ \t]*" + r"\s+".join(words))


def find_on_page(text: str, span: tuple[int, int], title: str) -> int | None:
    """Offset of the line where ``title`` starts on a page, if it does."""
    if not title.split():
        return None
    m = _title_pattern(title).search(text, span[0], span[1])
    return m.start() if m else None


def _entries(items: Any, n_pages: int) -> list[Entry]:
    """(level, title, page) items from metadata, those that make sense for this PDF."""
    out = []
    for item in items or []:
        try:
            level, title, page = int(item["level"]), str(item["title"]).strip(), int(item["page"])
        except (KeyError, TypeError, ValueError):
            continue
        if title and 1 <= page <= n_pages:
            out.append(Entry(level, title, page))
    return out


def from_outline(meta: dict[str, Any], n_pages: int) -> list[Entry]:
    return _entries(meta.get("toc"), n_pages)


def printed_toc(
    text: str, spans: list[tuple[int, int]], check_pages: int
) -> tuple[list[tuple[str, int]], list[int]]:
    """("title", printed page) lines of a printed ToC, and the pages it is printed on."""
    lines: list[tuple[str, int]] = []
    toc_pages: list[int] = []
    for i, (a, b) in enumerate(spans[:check_pages]):
        found = []
        for line in text[a:b].splitlines():
            m = _TOC_LINE.match(line)
            if m and not m.group("title").isdigit():
                found.append((m.group("title").strip(" .·…"), int(m.group("page"))))
        if len(found) >= MIN_TOC_LINES:
            lines.extend(found)
            toc_pages.append(i + 1)
        elif toc_pages:
            break  # the ToC ended
    return lines, toc_pages


def calibrate(
    text: str, spans: list[tuple[int, int]], lines: list[tuple[str, int]], toc_pages: list[int]
) -> tuple[list[Entry], int | None]:
    """ToC lines as entries at physical pages; returns them and the offset found."""
    after = max(toc_pages) if toc_pages else 0
    found_at: dict[int, int] = {}
    for k, (title, _printed) in enumerate(lines):
        for p in range(after + 1, len(spans) + 1):
            if find_on_page(text, spans[p - 1], title) is not None:
                found_at[k] = p
                break
    diffs = Counter(found_at[k] - lines[k][1] for k in found_at)
    if not diffs:
        return [], None
    offset = diffs.most_common(1)[0][0]
    entries = []
    for k, (title, printed) in enumerate(lines):
        page = printed + offset
        if not (1 <= page <= len(spans)) or find_on_page(text, spans[page - 1], title) is None:
            # Repair: the nearest page where the title starts a line.
            near = [
                p
                for p in range(max(after + 1, page - 3), min(len(spans), page + 3) + 1)
                if find_on_page(text, spans[p - 1], title) is not None
            ]
            if near:
                page = min(near, key=lambda p: abs(p - (printed + offset)))
            elif k in found_at:
                page = found_at[k]
            elif not 1 <= page <= len(spans):
                continue
        entries.append(Entry(_level(title), title, page))
    return entries, offset


def from_layout(meta: dict[str, Any], n_pages: int) -> list[Entry]:
    return _entries(meta.get("pdf_headings"), n_pages)


def locate(text: str, spans: list[tuple[int, int]], entries: list[Entry]) -> list[Entry]:
    """Character offsets for entries, in document order; a title not found on its page
    starts at the page's first character. Offsets never go backwards."""
    last = 0
    out: list[Entry] = []
    for e in entries:
        a, b = spans[e.page - 1]
        at = find_on_page(text, (max(a, last), b), e.title)
        if at is None:
            at = max(a, last)
        e.offset = at
        last = at
        out.append(e)
    return out


def structure(
    text: str, page_starts: list[int], meta: dict[str, Any], check_pages: int
) -> tuple[str, list[Entry], dict[str, Any]]:
    """The best structure the document states: (source, located entries, details)."""
    spans = pages(text, page_starts)
    outline = from_outline(meta, len(spans))
    if outline:
        return "outline", locate(text, spans, outline), {}
    lines, toc_pages = printed_toc(text, spans, check_pages)
    if lines:
        entries, offset = calibrate(text, spans, lines, toc_pages)
        if entries:
            return (
                "printed_toc",
                locate(text, spans, entries),
                {"toc_pages": toc_pages, "page_offset": offset},
            )
    layout = from_layout(meta, len(spans))
    if layout:
        return "layout", locate(text, spans, layout), {}
    return "none", [], {}
