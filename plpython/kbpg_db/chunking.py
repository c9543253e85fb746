"""Chunkers: markdown_header (default), recursive and fixed_size.

All three work on one idea: tokenize the text once with cl100k_base, mark the token
boundaries where a cut reads well (paragraph > line > sentence > word), then walk the
text taking windows of at most ``chunk_size`` tokens, each ended at the best boundary
the window offers. Every chunk is an exact slice of the source, so its character
offsets are exact; overlap starts the next window up to ``chunk_overlap`` tokens back,
at a word boundary.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field

import numpy as np

from kbpg_db import tokens
from kbpg_db.config import CHUNKERS

PARAGRAPH, LINE, SENTENCE, WORD = 3, 2, 1, 0
_BREAKS = (
    (re.compile(r"\n[ \t]*\n"), PARAGRAPH, "end"),
    (re.compile(r"\n"), LINE, "end"),
    (re.compile(r"[.!?。！？…][\"'”’)\]]*(?=\s)"), SENTENCE, "end"),
    (re.compile(r"\s+"), WORD, "start"),
)
_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
HEADING_SEPARATOR = " > "


@dataclass
class Chunk:
    """One chunk: an exact slice ``text[char_start:char_end]`` of the document."""

    ordinal: int
    content: str
    char_start: int
    char_end: int
    token_count: int
    heading_path: list[str] = field(default_factory=list)
    embed_text: str = ""

    @property
    def header_path(self) -> str:
        return HEADING_SEPARATOR.join(self.heading_path)


@dataclass
class Section:
    start: int
    end: int
    heading_path: list[str]


def markdown_headings(text: str) -> list[tuple[int, int, str]]:
    """(offset, level, title) of every ATX heading h1-h6 outside fenced code blocks."""
    out: list[tuple[int, int, str]] = []
    fence: str | None = None
    pos = 0
    for line in text.splitlines(keepends=True):
        fence_match = _FENCE.match(line)
        if fence_match:
            marker = fence_match.group(1)
            if fence is None:
                fence = marker[0] * 3
            elif marker.startswith(fence):
                fence = None
        elif fence is None:
            heading = _HEADING.match(line.rstrip("\r\n"))
            if heading:
                out.append((pos, len(heading.group(1)), heading.group(2).strip()))
        pos += len(line)
    return out


def markdown_sections(text: str) -> list[Section]:
    """Split at ATX headings h1-h6, ignoring ``#`` lines inside fenced code blocks."""
    sections: list[Section] = []
    path: list[tuple[int, str]] = []
    current_start = 0
    current_path: list[str] = []
    heads = markdown_headings(text)
    for i, (pos, level, title) in enumerate(heads):
        # A heading with nothing under it but a deeper heading joins that section (its
        # line stays in the text) instead of becoming a heading-only chunk.
        bare = False
        if i > 0:
            prev_pos, prev_level, _ = heads[i - 1]
            line_end = text.find("\n", prev_pos)
            between = text[line_end + 1 : pos] if 0 <= line_end < pos else ""
            bare = level > prev_level and not between.strip()
        if pos > current_start and not bare:
            sections.append(Section(current_start, pos, current_path))
        path = [(lvl, t) for lvl, t in path if lvl < level]
        path.append((level, title))
        current_path = [t for _, t in path]
        if not bare:
            current_start = pos
    if len(text) > current_start:
        sections.append(Section(current_start, len(text), current_path))
    return sections


def _token_boundaries(text: str) -> list[int]:
    """Character offset of every token boundary of ``text`` (first 0, last len(text))."""
    enc = tokens.encoding()
    ids = enc.encode(text, disallowed_special=())
    if not ids:
        return [0, len(text)] if text else [0]
    raw = text.encode("utf-8", errors="surrogatepass")
    byte_ends = np.cumsum([len(b) for b in enc.decode_tokens_bytes(ids)])
    # A byte is the start of a character unless it is a UTF-8 continuation byte; the
    # character offset of a byte boundary is the number of characters begun before it.
    starts = (np.frombuffer(raw, dtype=np.uint8) & 0xC0) != 0x80
    chars_before = np.concatenate(([0], np.cumsum(starts)))
    bounds = [0, *chars_before[np.minimum(byte_ends, len(raw))].tolist()]
    bounds[-1] = len(text)
    # Monotone, deduplicated (a multi-byte character split across tokens maps twice).
    out = [0]
    for b in bounds[1:]:
        if b > out[-1]:
            out.append(int(b))
    return out


def _break_priorities(text: str, bounds: list[int], allowed: tuple[int, ...]) -> list[int]:
    prio = [-1] * len(bounds)
    for pattern, level, side in _BREAKS:
        if level not in allowed:
            continue
        for m in pattern.finditer(text):
            c = m.end() if side == "end" else m.start()
            i = bisect.bisect_left(bounds, c)
            if i < len(bounds) and bounds[i] == c and prio[i] < level:
                prio[i] = level
    return prio


def _windows(text: str, size: int, overlap: int, allowed: tuple[int, ...]) -> list[tuple[int, int]]:
    """Character spans of the windows over ``text``; see the module docstring."""
    bounds = _token_boundaries(text)
    n = len(bounds) - 1
    prio = _break_priorities(text, bounds, allowed)
    spans: list[tuple[int, int]] = []
    s = 0
    while s < n:
        limit = min(n, s + size)
        e = limit
        if limit < n:
            best, best_prio = -1, -1
            # Do not end a window in its first quarter: tiny chunks retrieve badly.
            for i in range(limit, s + max(1, size // 4) - 1, -1):
                if prio[i] > best_prio:
                    best, best_prio = i, prio[i]
                    if best_prio == max(allowed):
                        break
            if best > s:
                e = best
        spans.append((bounds[s], bounds[e]))
        if e >= n:
            break
        nxt = e
        if overlap > 0:
            for j in range(max(s + 1, e - overlap), e):
                if prio[j] >= WORD:
                    nxt = j
                    break
        s = nxt
    return spans


def _fit(text: str, start: int, end: int, size: int) -> tuple[int, int, int] | None:
    """Trim whitespace off a span; shrink it until it holds at most ``size`` tokens."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    if start >= end:
        return None
    count = tokens.count(text[start:end])
    while count > size and end > start + 1:
        # Re-tokenizing a slice can differ by a token or two from the whole-text pass.
        end -= max(1, (end - start) // (4 * count))
        count = tokens.count(text[start:end])
    return start, end, count


def _split_span(
    text: str,
    start: int,
    end: int,
    size: int,
    overlap: int,
    allowed: tuple[int, ...],
) -> list[tuple[int, int, int]]:
    out: list[tuple[int, int, int]] = []
    piece = text[start:end]
    for a, b in _windows(piece, size, overlap, allowed):
        pos, stop = start + a, start + b
        # A window that had to shrink to fit leaves a tail: it becomes the next chunk.
        while pos < stop:
            fitted = _fit(text, pos, stop, size)
            if fitted is None:
                break
            out.append(fitted)
            pos = fitted[1]
    return out


def title_line_of(text: str) -> str:
    """The first line of a text, when it reads like a title (short, more text follows)."""
    stripped = text.strip()
    first, sep, _rest = stripped.partition("\n")
    first = first.strip()
    return first if sep and first and len(first) <= 300 else ""


def chunk_text(
    text: str,
    chunker: str = "markdown_header",
    chunk_size: int = 200,
    chunk_overlap: int = 20,
    title_line: bool = False,
) -> list[Chunk]:
    """Split ``text`` into chunks of at most ``chunk_size`` cl100k tokens.

    With ``title_line`` the document's first line is taken as its title and repeated at
    the head of every later chunk's embedded (and BM25) text, within the same budget.
    """
    if chunker not in CHUNKERS:
        raise ValueError(f"unknown chunker {chunker!r}; expected one of {', '.join(CHUNKERS)}")
    if chunk_size < 1:
        raise ValueError("chunk_size must be at least 1 token")
    if not 0 <= chunk_overlap < chunk_size:
        raise ValueError("chunk_overlap must be between 0 and chunk_size - 1 tokens")
    title = title_line_of(text) if title_line else ""
    if title:
        chunk_size = max(chunk_size - tokens.count(title + "\n\n"), min(chunk_size, 16))
        chunk_overlap = min(chunk_overlap, chunk_size - 1)
    chunks: list[Chunk] = []
    if chunker == "fixed_size":
        for s, e, n in _split_span(text, 0, len(text), chunk_size, chunk_overlap, (WORD,)):
            chunks.append(Chunk(len(chunks), text[s:e], s, e, n))
    elif chunker == "recursive":
        allowed = (PARAGRAPH, LINE, SENTENCE, WORD)
        for s, e, n in _split_span(text, 0, len(text), chunk_size, chunk_overlap, allowed):
            chunks.append(Chunk(len(chunks), text[s:e], s, e, n))
    else:
        allowed = (PARAGRAPH, LINE, SENTENCE, WORD)
        for section in markdown_sections(text):
            prefix = HEADING_SEPARATOR.join(section.heading_path)
            # The heading path is embedded with every chunk, so it shares the budget.
            budget = chunk_size - (tokens.count(prefix + "\n\n") if prefix else 0)
            budget = max(budget, min(chunk_size, 16))
            spans = _split_span(
                text, section.start, section.end, budget, min(chunk_overlap, budget - 1), allowed
            )
            for s, e, n in spans:
                chunks.append(Chunk(len(chunks), text[s:e], s, e, n, list(section.heading_path)))
    for chunk in chunks:
        chunk.embed_text = (
            f"{chunk.header_path}\n\n{chunk.content}" if chunk.heading_path else chunk.content
        )
        if title and not chunk.content.startswith(title):
            chunk.embed_text = f"{title}\n\n{chunk.embed_text}"
    return chunks


def page_of(page_starts: list[int] | None, char_offset: int) -> int | None:
    """1-based page holding ``char_offset``, given each page's first character offset."""
    if not page_starts:
        return None
    return max(1, bisect.bisect_right(page_starts, char_offset))
