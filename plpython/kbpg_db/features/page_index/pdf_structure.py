"""A PDF's section structure, from what the document itself says, before any LLM.

In order: (1) the PDF's outline (bookmarks), carried in the document's metadata as
``toc``; (2) a printed table of contents in the first ``toc_check_page_num`` pages —
regular "title .... page" lines — with printed page numbers calibrated against the
physical pages (offset = the most common physical - printed difference over titles found
at a line start) and each entry's start page verified, and repaired when the title is
found on a nearby page instead; (3) headings detected from the layout (font size, weight,
numbering like "2.3"), carried in metadata as ``pdf_headings`` by the loader.

An LLM, when one is configured, is asked only where the document does not say: for the
lines of a printed ToC the pattern cannot read (wrapped titles, "Chapter 3 Methods 27"),
and for the headings of stretches of more than ``max_page_num_each_node`` pages where no
outline, ToC or layout heading starts a section (:func:`infer`). Every title it
names must occur in the page it claims; the rest is dropped and counted.

Each source gives entries (level, title, page); :func:`locate` turns them into character
offsets in the document's text, so node text, page ranges and offsets stay exact.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kbpg_db import tokens
from kbpg_db.llm import Llm, Request

_TOC_LINE = re.compile(
    r"^\s*(?P<title>\S.*?)\s*(?:(?:\.[ \t]*){2,}|…+|(?:·[ \t]*){2,}|\s{3,}|\t+)\s*(?P<page>\d{1,4})\s*$"
)
_NUMBERING = re.compile(r"^\s*(\d+(?:\.\d+)*)[.)]?\s+\S")
_CONTENTS = re.compile(r"^\s*(table\s+of\s+)?contents\s*$", re.I)
_ENDS_IN_NUMBER = re.compile(r"\S.*\s(\d{1,4})\s*$")
_PAGE_LABEL = re.compile(r"^\s*([ivxlcdm]+|\d{1,4}|page\s+\d+(\s+of\s+\d+)?)\s*$", re.I)
MIN_TOC_LINES = 3
GROUP_TOKENS = 6000  # page text per structure-inference call


@dataclass
class Entry:
    level: int
    title: str
    page: int  # physical, 1-based
    offset: int | None = None  # where the section starts in the document text
    located: str = ""  # found (at a line start) | approximate (inside a line) | lost


def pages(text: str, page_starts: list[int]) -> list[tuple[int, int]]:
    bounds = [*page_starts, len(text)]
    return [(bounds[i], bounds[i + 1]) for i in range(len(page_starts))]


def numbered(title: str) -> bool:
    """Does the title carry the document's own numbering ("2.5 Future developments")?"""
    return bool(_NUMBERING.match(title))


def _level(title: str) -> int:
    m = _NUMBERING.match(title)
    return m.group(1).count(".") + 1 if m else 1


# A section label printed before a title the outline names without it: "2.1", "A.3",
# "IV.", "Chapter 3", "Appendix B:".
_LABEL = (
    r"(?:(?:chapter|section|part|appendix)[ \t]+)?"
    r"(?:\d+(?:\.\d+)*|(?-i:[A-Z])(?:\.\d+)*|(?-i:[IVXLC]+))[.):]?"
)


def _title_pattern(title: str) -> re.Pattern[str]:
    words = [re.escape(w) for w in title.split()]
    return re.compile(r"(?im)^[ \t]*(?:" + _LABEL + r"[ \t]+)?" + r"\s+".join(words))


def find_on_page(text: str, span: tuple[int, int], title: str) -> int | None:
    """Offset of the line where ``title`` starts on a page (after a section label such as
    "2.1" or "Chapter 3", if one is printed before it), if it does."""
    if not title.split():
        return None
    m = _title_pattern(title).search(text, span[0], span[1])
    return m.start() if m else None


def find_in_page(text: str, span: tuple[int, int], title: str) -> int | None:
    """Where ``title`` is printed anywhere on a page (inside a line, across a line break):
    the start of its line."""
    m = _loose(title).search(text, span[0], span[1])
    if m is None:
        return None
    return max(span[0], text.rfind("\n", 0, m.start()) + 1)


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


@dataclass
class TocPage:
    """One page of a printed table of contents."""

    page: int  # physical, 1-based
    text: str
    regular: list[tuple[int, str, int]]  # (offset in the page, title, printed page)
    irregular: list[str]  # lines the pattern could not read


def printed_toc(text: str, spans: list[tuple[int, int]], check_pages: int) -> list[TocPage]:
    """The pages of a printed ToC in the first ``check_pages`` pages: those with at least
    MIN_TOC_LINES regular "title .... page" lines, or a "Contents" heading over lines that
    end in a number. Consecutive; the ToC ends at the first page that is neither."""
    found: list[TocPage] = []
    for i, (a, b) in enumerate(spans[:check_pages]):
        body = text[a:b]
        regular: list[tuple[int, str, int]] = []
        irregular: list[str] = []
        heading = False
        numbered = 0
        at = 0
        for line in body.splitlines(keepends=True):
            here, at = at, at + len(line)
            bare = line.strip()
            if not bare:
                continue
            if _CONTENTS.match(bare):
                heading = True
                continue
            m = _TOC_LINE.match(line.rstrip("\r\n"))
            if m and not m.group("title").isdigit():
                regular.append((here, m.group("title").strip(" .·…"), int(m.group("page"))))
            elif not _PAGE_LABEL.match(bare):
                irregular.append(bare)
                numbered += bool(_ENDS_IN_NUMBER.match(bare))
        if len(regular) >= MIN_TOC_LINES or (heading and len(regular) + numbered >= MIN_TOC_LINES):
            found.append(TocPage(i + 1, body, regular, irregular))
        elif found:
            break  # the ToC ended
    return found


# --- the LLM, where the document does not say -------------------------------------------------
def _listing_schema(key: str, required: list[str]) -> dict[str, Any]:
    """{"<key>": [{"title", "page", "level"}, ...]}: what both LLM steps answer."""
    fields = {
        "title": {"type": "string"},
        "page": {"type": "integer"},
        "level": {"type": "integer"},
    }
    item = {"type": "object", "properties": fields, "required": required}
    return {
        "type": "object",
        "properties": {key: {"type": "array", "items": item}},
        "required": [key],
    }


TOC_SCHEMA = _listing_schema("entries", ["title", "page"])
HEADINGS_SCHEMA = _listing_schema("headings", ["title", "level", "page"])


def _loose(title: str) -> re.Pattern[str]:
    """A title as printed: its words in order, across line breaks and dot leaders."""
    words = [re.escape(w) for w in re.findall(r"\w+", title)]
    return re.compile(r"(?i)\b" + r"[\W_]+".join(words) + r"\b") if words else re.compile("(?!)")


def _items(value: Any, key: str) -> list[dict[str, Any]]:
    if not isinstance(value, dict) or not isinstance(value.get(key), list):
        raise ValueError(f'expected {{"{key}": [{{"title": ..., "page": ...}}, ...]}}')
    items = value[key]
    if not all(isinstance(item, dict) for item in items):
        raise ValueError(f"each of {key} must be an object with title and page")
    return items


def _int(value: Any, default: int | None = None) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _toc_lines_check(page: TocPage) -> Any:
    """The LLM's entries for a ToC page: kept where the title is printed on that page."""

    def check(value: Any) -> tuple[list[tuple[int, str, int, int | None]], int]:
        out: list[tuple[int, str, int, int | None]] = []
        dropped = 0
        for item in _items(value, "entries"):
            title = " ".join(str(item.get("title") or "").split()).strip(" .·…")
            printed = _int(item.get("page"))
            m = _loose(title).search(page.text) if title else None
            if m is None or printed is None or not 0 <= printed <= 100_000:
                dropped += 1
                continue
            out.append((m.start(), title, printed, _int(item.get("level"))))
        return out, dropped

    return check


def read_irregular(
    pages_: list[TocPage], llm: Llm
) -> tuple[list[list[tuple[int, str, int, int | None]]], int]:
    """Per ToC page with unreadable lines, the entries the LLM reads there; and how many
    entries it named that are not on the page."""
    asked = [p for p in pages_ if p.irregular]
    requests = [
        Request(
            "toc_lines",
            [
                {
                    "role": "system",
                    "content": "You read the entries of a printed table of contents. "
                    "Answer with JSON only.",
                },
                {
                    "role": "user",
                    "content": f"A table of contents page:\n{p.text}\n\nThese lines could "
                    "not be read as 'title .... page':\n"
                    + "\n".join(p.irregular)
                    + '\n\nReturn {"entries": [{"title": "...", "page": <printed page>, '
                    '"level": <1 for a chapter, 2 for its sections...>}]} for every entry '
                    "of this page, titles copied exactly as printed, in order.",
                },
            ],
            TOC_SCHEMA,
            _toc_lines_check(p),
            max_tokens=2000,
        )
        for p in asked
    ]
    answers = llm.ask_many(requests)
    by_page = {p.page: a for p, a in zip(asked, answers, strict=True)}
    out = [by_page.get(p.page, ([], 0))[0] for p in pages_]
    return out, sum(a[1] for a in answers)


def toc_lines(
    pages_: list[TocPage], llm_entries: list[list[tuple[int, str, int, int | None]]] | None
) -> list[tuple[str, int, int | None]]:
    """(title, printed page, level) in reading order: the regular lines, with the LLM's
    readings of the other lines where there are some. A regular line that is the tail of
    a title the LLM read whole (a wrapped title) gives way to it."""
    lines: list[tuple[str, int, int | None]] = []
    for k, page in enumerate(pages_):
        merged: list[tuple[int, str, int, int | None]] = [
            (a, t, p, None) for a, t, p in page.regular
        ]
        for at, title, printed, level in (llm_entries or [[]] * len(pages_))[k]:
            key = _norm(title)
            same = [r for r in merged if _norm(r[1]) == key and r[2] == printed]
            if same:
                continue
            merged = [
                r for r in merged if not (r[2] == printed and key.endswith(" " + _norm(r[1])))
            ]
            merged.append((at, title, printed, level))
        lines.extend((t, p, lv) for _, t, p, lv in sorted(merged, key=lambda r: r[0]))
    return lines


def _norm(title: str) -> str:
    return " ".join(re.findall(r"\w+", title.lower()))


def _headings_check(text: str, spans: list[tuple[int, int]], group: list[int]) -> Any:
    """The LLM's headings for a group of pages: kept where the title starts a line on
    the page it names."""

    def check(value: Any) -> tuple[list[Entry], int]:
        out: list[Entry] = []
        dropped = 0
        for item in _items(value, "headings"):
            title = " ".join(str(item.get("title") or "").split())
            page = _int(item.get("page"))
            level = _int(item.get("level"), 1) or 1
            if not title or page not in group or find_on_page(text, spans[page - 1], title) is None:
                dropped += 1
                continue
            out.append(Entry(max(1, min(level, 6)), title[:300], page))
        return out, dropped

    return check


def page_groups(text: str, spans: list[tuple[int, int]], pages_: list[int]) -> list[list[int]]:
    """Consecutive pages packed into groups of about GROUP_TOKENS tokens."""
    groups: list[list[int]] = []
    size = 0
    for p in pages_:
        n = tokens.count(text[spans[p - 1][0] : spans[p - 1][1]])
        if groups and size + n <= GROUP_TOKENS and groups[-1][-1] == p - 1:
            groups[-1].append(p)
            size += n
        else:
            groups.append([p])
            size = n
    return groups


def infer(
    text: str, spans: list[tuple[int, int]], pages_: list[int], llm: Llm
) -> tuple[list[Entry], int]:
    """Headings of ``pages_`` by LLM structure inference over groups of pages: the
    entries (document order) and how many it named that are not on their page."""
    groups = page_groups(text, spans, pages_)
    requests = []
    for group in groups:
        tagged = "\n".join(
            f"<page {p}>\n{text[spans[p - 1][0] : spans[p - 1][1]][: GROUP_TOKENS * 6]}\n</page {p}>"
            for p in group
        )
        requests.append(
            Request(
                "structure_inference",
                [
                    {
                        "role": "system",
                        "content": "You find the section headings in the pages of a document. "
                        "Answer with JSON only.",
                    },
                    {
                        "role": "user",
                        "content": f"Pages of a document:\n{tagged}\n\nReturn "
                        '{"headings": [{"title": "...", "level": 1, "page": <the page number '
                        "in its tag>}]} for every section heading that starts on these "
                        "pages, in reading order: titles copied exactly as printed, level 1 "
                        "for a chapter or top section, 2 for its sub-sections and so on. "
                        'Return {"headings": []} when the pages start no section.',
                    },
                ],
                HEADINGS_SCHEMA,
                _headings_check(text, spans, group),
                max_tokens=2000,
            )
        )
    answers = llm.ask_many(requests)
    entries = [e for found, _ in answers for e in found]
    return entries, sum(d for _, d in answers)


def uncovered(entries: list[Entry], n_pages: int, max_pages: int) -> list[int]:
    """Pages in stretches of more than ``max_pages`` pages where no entry starts."""
    starts = sorted({e.page for e in entries})
    bounds = [0, *starts, n_pages + 1]
    out: list[int] = []
    for a, b in itertools.pairwise(bounds):
        # Pages a+1 .. b-1 start no section; the section at a runs over them.
        if b - a - 1 > max_pages:
            out.extend(range(a + 1, b))
    return out


def calibrate(
    text: str,
    spans: list[tuple[int, int]],
    lines: list[tuple[str, int, int | None]],
    toc_pages: list[int],
) -> tuple[list[Entry], int | None]:
    """ToC lines as entries at physical pages; returns them and the offset found."""
    after = max(toc_pages) if toc_pages else 0
    found_at: dict[int, int] = {}
    for k, (title, _printed, _given) in enumerate(lines):
        for p in range(after + 1, len(spans) + 1):
            if find_on_page(text, spans[p - 1], title) is not None:
                found_at[k] = p
                break
    diffs = Counter(found_at[k] - lines[k][1] for k in found_at)
    if not diffs:
        return [], None
    offset = diffs.most_common(1)[0][0]
    entries = []
    for k, (title, printed, given) in enumerate(lines):
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
        level = _level(title) if _NUMBERING.match(title) or not given else max(1, min(given, 6))
        entries.append(Entry(level, title, page))
    return entries, offset


def from_layout(meta: dict[str, Any], n_pages: int) -> list[Entry]:
    return _entries(meta.get("pdf_headings"), n_pages)


def locate(text: str, spans: list[tuple[int, int]], entries: list[Entry]) -> list[Entry]:
    """Character offsets for entries, in document order: where the title starts a line on
    its page (``found``), else the line it is printed in (``approximate``), else the
    page's first character (``lost``). Offsets never go backwards; no entry is dropped."""
    last = 0
    out: list[Entry] = []
    for e in entries:
        a, b = spans[e.page - 1]
        span = (max(a, last), b)
        at, how = find_on_page(text, span, e.title), "found"
        if at is None:
            at, how = find_in_page(text, span, e.title), "approximate"
        if at is None:
            at, how = span[0], "lost"
        e.offset, e.located = at, how
        last = at
        out.append(e)
    return out


def _located(entries: list[Entry], details: dict[str, Any]) -> dict[str, Any]:
    """details with how the entries were located: {"found": n, "approximate": n, "lost": n}."""
    counts = Counter(e.located for e in entries)
    return {**details, "entries": {k: counts.get(k, 0) for k in ("found", "approximate", "lost")}}


def structure(
    text: str,
    page_starts: list[int],
    meta: dict[str, Any],
    check_pages: int,
    max_pages: int,
    llm: Llm | None = None,
    report: Callable[[str], None] = lambda _stage: None,
) -> tuple[str, list[Entry], dict[str, Any]]:
    """The best structure the document states: (source, located entries, details). The
    LLM, when given, reads ToC lines the pattern cannot and infers the headings of long
    stretches of pages that no outline, ToC or layout heading covers."""
    spans = pages(text, page_starts)
    ask = llm if llm is not None and llm.available else None
    outline = from_outline(meta, len(spans))
    if outline:
        located = locate(text, spans, outline)
        return "outline", located, _located(located, {})
    toc = printed_toc(text, spans, check_pages)
    if toc:
        details: dict[str, Any] = {"toc_pages": [p.page for p in toc]}
        read: list[list[tuple[int, str, int, int | None]]] | None = None
        unread = sum(len(p.irregular) for p in toc)
        if unread and ask is not None:
            report("reading the printed table of contents (LLM, irregular lines)")
            read, dropped = read_irregular(toc, ask)
            details["toc_entries_read_by_llm"] = sum(len(r) for r in read)
            if dropped:
                details["toc_entries_dropped"] = dropped
        elif unread:
            details["toc_lines_unread"] = unread  # no LLM: only the regular lines were read
        entries, offset = calibrate(text, spans, toc_lines(toc, read), details["toc_pages"])
        if entries:
            details["page_offset"] = offset
            located = locate(text, spans, entries)
            return "printed_toc", located, _located(located, details)
    layout = from_layout(meta, len(spans))
    gaps = uncovered(layout, len(spans), max_pages) if layout else list(range(1, len(spans) + 1))
    if not gaps or ask is None:
        if not layout:
            return "none", [], {}
        located = locate(text, spans, layout)
        return "layout", located, _located(located, {})
    report(f"inferring the headings of {len(gaps)} page(s) (LLM)")
    found, dropped = infer(text, spans, gaps, ask)
    details = {"inferred_pages": len(gaps), "inferred_headings": len(found)}
    if dropped:
        details["inferred_dropped"] = dropped
    merged = sorted(
        [*layout, *found],
        key=lambda e: (e.page, find_on_page(text, spans[e.page - 1], e.title) or 0),
    )
    source = ("layout+llm" if found else "layout") if layout else ("llm" if found else "none")
    located = locate(text, spans, merged)
    return source, located, _located(located, details)
