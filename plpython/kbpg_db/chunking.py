"""Chunkers: markdown_header (default), recursive, fixed_size, and cjk.

The first three work on one idea: tokenize the text once with cl100k_base, mark the token
boundaries where a cut reads well (paragraph > line > sentence > word), then walk the
text taking windows of at most ``chunk_size`` tokens, each ended at the best boundary
the window offers. Every chunk is an exact slice of the source, so its character
offsets are exact; overlap starts the next window up to ``chunk_overlap`` tokens back,
at a word boundary.

``cjk`` is a separator-hierarchy splitter, for text without spaces between
words (Chinese, Japanese) as much as for any other: the text is split with no overlap at
the first separator of ``\\n\\n``, ``\\n``, ``。``, ``！``, ``？``, ``. ``, ``! ``, ``? ``,
``；``, ``; ``, ``，``, ``, ``, space that leaves pieces within the size (the next one
where a piece is still too long; single characters last), pieces are merged up to the
size, and then each chunk but the first is extended backwards by the exact trailing
``chunk_overlap`` of the text before it. Sizes count characters or tokens
(``chunk_unit``); custom ``separators`` go first, the hierarchy stays as the fallback.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from kbpg_db import tokens
from kbpg_db.config import CHUNKERS

PARAGRAPH, LINE, SENTENCE, WORD = 3, 2, 1, 0
_BREAKS = (
    (re.compile(r"\n[ \t]*\n"), PARAGRAPH, "end"),
    (re.compile(r"\n"), LINE, "end"),
    (re.compile(r"[.!?。！？…][\"'”’)\]]*(?=\s)"), SENTENCE, "end"),
    # CJK sentences and clauses end at their punctuation, with no space after it.
    (re.compile(r"[。！？；][」』”’）)]*"), SENTENCE, "end"),
    (re.compile(r"[，、：]"), WORD, "end"),
    (re.compile(r"\s+"), WORD, "start"),
)
_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
HEADING_SEPARATOR = " > "
# The most of a chunk's token budget its embedded heading path may take: a long heading
# (a link with a long URL, in converted HTML) is cut there, never the chunk's text.
HEADING_SHARE = 0.25
# A code span, kept as it is (`buf[Symbol.dispose]()` is no link), or a link: its text,
# then its target: <...>, or a URL (one level of parentheses inside it), then an optional
# title in quotes or parentheses, which may hold parentheses of its own.
_MD_LINK = re.compile(
    r"(?P<code>(?P<ticks>`+).+?(?P=ticks))"
    r"|!?\[(?P<text>[^\]]*)\]\((?:<[^>]*>|(?:[^()\s]|\([^()\s]*\))*)"
    r"""(?:\s+(?:"[^"]*"|'[^']*'|\([^)]*\)))?\s*\)|<(?:https?|mailto):[^>]*>"""
)


def heading_text(title: str) -> str:
    """A heading as a path element: Markdown links and images as their text, no URLs."""
    return " ".join(link_text(title).split())


def link_text(text: str) -> str:
    """A chunk's embedded text as the embedding model reads it: each Markdown link or image
    as its text, without its address (a URL or a page's file name says nothing of what the
    chunk is about; BM25 still indexes it). Code spans stay as written."""
    return _MD_LINK.sub(lambda m: m["code"] or m["text"] or "", text)


def embedded_header(path: list[str], chunk_size: int) -> str:
    """The heading path as embedded with a chunk, within HEADING_SHARE of the budget."""
    prefix = HEADING_SEPARATOR.join(path)
    cap = max(1, int(chunk_size * HEADING_SHARE))
    if tokens.count(prefix + "\n\n") <= cap:
        return prefix
    return tokens.truncate(prefix, max(1, cap - 1)).rstrip() + "…"


@dataclass
class Chunk:
    """One chunk: an exact slice ``text[char_start:char_end]`` of the document, except a
    piece of a table split by rows, whose content repeats the table's header before it."""

    ordinal: int
    content: str
    char_start: int
    char_end: int
    token_count: int
    heading_path: list[str] = field(default_factory=list)
    embed_text: str = ""
    header: str | None = None  # the heading path as embedded, when cut (embedded_header)

    @property
    def header_path(self) -> str:
        return self.header if self.header is not None else HEADING_SEPARATOR.join(self.heading_path)


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
        path.append((level, heading_text(title)))
        current_path = [t for _, t in path]
        if not bare:
            current_start = pos
    if len(text) > current_start:
        sections.append(Section(current_start, len(text), current_path))
    return sections


_TABLE_RULE = re.compile(r"^[ \t]*\|?[ \t]*:?-{3,}:?[ \t]*(\|[ \t]*:?-{3,}:?[ \t]*)*\|?[ \t]*$")


@dataclass
class Block:
    """A fenced code block or a Markdown table: kept whole in one chunk when it fits."""

    start: int
    end: int
    kind: str  # code | table
    header_end: int = 0  # a table: where its header and rule lines end


def _line_end(text: str, line: tuple[int, int]) -> int:
    """Where a line's text ends, before its newline."""
    a, b = line
    return b - 1 if b > a and text[b - 1] == "\n" else b


def _lines(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """(start, end) of each line of ``text[start:end]``, its newline included."""
    out: list[tuple[int, int]] = []
    pos = start
    while pos < end:
        nl = text.find("\n", pos, end)
        out.append((pos, end if nl < 0 else nl + 1))
        pos = out[-1][1]
    return out


def blocks(text: str, start: int = 0, end: int | None = None) -> list[Block]:
    """The fenced code blocks and Markdown tables of ``text[start:end]``, in order."""
    lines = _lines(text, start, len(text) if end is None else end)
    out: list[Block] = []
    i = 0
    while i < len(lines):
        a, b = lines[i]
        line = text[a:b].rstrip("\r\n")
        fence = _FENCE.match(line)
        if fence:
            marker = fence.group(1)[0] * 3
            j = i + 1
            while j < len(lines) and not text[lines[j][0] : lines[j][1]].lstrip(" ").startswith(
                marker
            ):
                j += 1
            last = min(j, len(lines) - 1)
            out.append(Block(a, _line_end(text, lines[last]), "code"))
            i = last + 1
            continue
        if "|" in line and i + 1 < len(lines):
            rule = text[lines[i + 1][0] : lines[i + 1][1]].rstrip("\r\n")
            if _TABLE_RULE.match(rule):
                j = i + 2
                while j < len(lines) and "|" in text[lines[j][0] : lines[j][1]]:
                    j += 1
                out.append(Block(a, _line_end(text, lines[j - 1]), "table", lines[i + 1][1]))
                i = j
                continue
        i += 1
    return out


def _token_boundaries(text: str) -> tuple[list[int], list[int]]:
    """Character offset of every token boundary of ``text`` (first 0, last len(text)),
    and the number of tokens before each. A character split over several tokens (common
    in CJK) has no boundary inside it, so the two lists differ."""
    ids = tokens.encoding().encode(text, disallowed_special=())
    if not ids:
        return ([0, len(text)], [0, 0]) if text else ([0], [0])
    raw = text.encode("utf-8", errors="surrogatepass")
    byte_ends = np.cumsum(tokens.byte_lengths(ids))
    # A byte is the start of a character unless it is a UTF-8 continuation byte; the
    # character offset of a byte boundary is the number of characters begun before it.
    starts = (np.frombuffer(raw, dtype=np.uint8) & 0xC0) != 0x80
    chars_before = np.concatenate(([0], np.cumsum(starts)))
    bounds = np.concatenate(([0], chars_before[np.minimum(byte_ends, len(raw))]))
    bounds[-1] = len(text)
    # Monotone, deduplicated (a multi-byte character split across tokens maps twice): of
    # equal offsets the last stands, with the most tokens before it.
    last = np.flatnonzero(np.diff(bounds, append=bounds[-1] + 1))
    return bounds[last].tolist(), last.tolist()


def _break_priorities(text: str, bounds: list[int], allowed: tuple[int, ...]) -> list[int]:
    prio = np.full(len(bounds), -1, dtype=np.int64)
    at = np.asarray(bounds)
    for pattern, level, side in _BREAKS:
        if level not in allowed:
            continue
        cuts = np.fromiter(
            (m.end() if side == "end" else m.start() for m in pattern.finditer(text)),
            dtype=np.int64,
        )
        i = np.searchsorted(at, cuts)
        inside = i < len(at)
        i = i[inside][at[i[inside]] == cuts[inside]]  # cuts that fall on a boundary
        prio[i] = np.maximum(prio[i], level)
    return prio.tolist()


def _windows(
    text: str, size: int, overlap: int, allowed: tuple[int, ...], keep: list[Block] | None = None
) -> list[tuple[int, int]]:
    """Character spans of the windows over ``text``; see the module docstring. No window
    ends inside a block of ``keep`` that fits in one; a longer one is cut at line ends."""
    bounds, before = _token_boundaries(text)
    n = len(bounds) - 1
    prio = _break_priorities(text, bounds, allowed)
    starts: list[int] = []  # boundary indices where a kept block begins
    whole: dict[int, int] = {}  # a fitting block's first boundary -> the one after it
    for blk in keep or []:
        i0 = bisect.bisect_left(bounds, blk.start)
        i1 = min(bisect.bisect_left(bounds, blk.end), n)
        # Counted alone: the token after a block may run on into the text that follows.
        fits = tokens.count(text[blk.start : blk.end]) <= size
        for i in range(i0 + 1, i1 + (bounds[i1] > blk.end)):
            at_line_end = text[bounds[i] - 1 : bounds[i]] == "\n"
            prio[i] = LINE if (not fits and at_line_end and LINE in allowed) else -1
        if i0 <= n and bounds[i0] == blk.start:
            starts.append(i0)
            if fits:
                whole[i0] = i1
    spans: list[tuple[int, int]] = []
    s = 0
    while s < n:
        # The furthest boundary at most `size` tokens on (a fitting block that starts
        # here runs to its end; _fit trims what follows it).
        limit = max(s + 1, bisect.bisect_right(before, before[s] + size) - 1, whole.get(s, 0))
        e = limit
        if limit < n:
            best, best_prio = -1, -1
            # Do not end a window in its first quarter: tiny chunks retrieve badly.
            for i in range(limit, s + max(1, size // 4) - 1, -1):
                if prio[i] > best_prio:
                    best, best_prio = i, prio[i]
                    if best_prio == max(allowed):
                        break
            if best <= s:  # no cut outside a kept block: end where the block begins
                best = max((i for i in starts if s < i <= limit), default=-1)
            if best > s:
                e = best
        spans.append((bounds[s], bounds[e]))
        if e >= n:
            break
        nxt = e
        if overlap > 0:
            for j in range(max(s + 1, bisect.bisect_left(before, before[e] - overlap)), e):
                if prio[j] >= WORD:
                    nxt = j
                    break
        s = nxt
    return spans


def _trim(text: str, start: int, end: int) -> tuple[int, int]:
    """A span without the whitespace at its ends."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def _fit(text: str, start: int, end: int, size: int) -> tuple[int, int, int] | None:
    """Trim whitespace off a span; shrink it until it holds at most ``size`` tokens."""
    start, end = _trim(text, start, end)
    if start >= end:
        return None
    count = tokens.count(text[start:end])
    while count > size and end > start + 1:
        # Re-tokenizing a slice can differ by a token or two from the whole-text pass.
        end -= max(1, (end - start) // (4 * count))
        count = tokens.count(text[start:end])
    return start, end, count


Span = tuple[int, int, int, str]  # start, end, tokens, a prefix (a table's header) or ""


def _windowed(
    text: str,
    start: int,
    end: int,
    size: int,
    overlap: int,
    allowed: tuple[int, ...],
    keep: list[Block],
) -> list[Span]:
    out: list[Span] = []
    piece = text[start:end]
    local = [Block(b.start - start, b.end - start, b.kind) for b in keep]
    for a, b in _windows(piece, size, overlap, allowed, local):
        pos, stop = start + a, start + b
        # A window that had to shrink to fit leaves a tail: it becomes the next chunk.
        while pos < stop:
            fitted = _fit(text, pos, stop, size)
            if fitted is None:
                break
            out.append((*fitted, ""))
            pos = fitted[1]
    return out


def _table_rows(text: str, table: Block, size: int) -> list[Span]:
    """A table too long for one chunk, by rows: its header and rule lines open every
    piece (the first has them in place), each piece within ``size`` tokens."""
    header = text[table.start : table.header_end]
    if tokens.count(header) * 2 > size:  # no room for rows beside the header: cut at lines
        return _windowed(text, table.start, table.end, size, 0, (LINE, WORD), [])
    out: list[Span] = []

    def piece(a: int, b: int) -> Span:
        prefix = "" if a == table.start else header
        body = text[a:b].rstrip("\n")
        return a, a + len(body), tokens.count(prefix + body), prefix

    group: tuple[int, int] | None = (table.start, table.header_end)  # the header, in place
    for a, b in _lines(text, table.header_end, table.end):
        if group is not None and piece(group[0], b)[2] <= size:
            group = (group[0], b)
            continue
        if group is not None:
            out.append(piece(*group))
        group = (a, b)
        if piece(a, b)[2] > size:  # one row longer than a chunk: cut it like text
            out += _windowed(text, a, b, size, 0, (WORD,), [])
            group = None
    if group is not None:
        out.append(piece(*group))
    return out


def _split_span(
    text: str,
    start: int,
    end: int,
    size: int,
    overlap: int,
    allowed: tuple[int, ...],
) -> list[Span]:
    """Chunks of ``text[start:end]``. Unless only words are allowed as cuts, code blocks
    and tables stay whole when they fit; a longer table is split by rows."""
    found = blocks(text, start, end) if allowed != (WORD,) else []
    out: list[Span] = []
    pos = start
    keep: list[Block] = []
    for blk in found:
        if blk.kind == "table" and tokens.count(text[blk.start : blk.end]) > size:
            out += _windowed(text, pos, blk.start, size, overlap, allowed, keep)
            out += _table_rows(text, blk, size)
            pos, keep = blk.end, []
        else:
            keep.append(blk)
    out += _windowed(text, pos, end, size, overlap, allowed, keep)
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
    chunk_unit: str = "tokens",
    separators: list[str] | None = None,
    sentences_per_chunk: int = 3,
    percentile: float = 20.0,
    embed: Callable[[str, list[tuple[int, int]]], list[list[float]]] | None = None,
) -> list[Chunk]:
    """Split ``text`` into chunks of at most ``chunk_size`` cl100k tokens.

    With ``title_line`` the document's first line is taken as its title and repeated at
    the head of every later chunk's embedded (and BM25) text, within the same budget.
    """
    if chunker not in CHUNKERS:
        raise ValueError(f"unknown chunker {chunker!r}; expected one of {', '.join(CHUNKERS)}")
    if chunk_size < 1:
        raise ValueError("chunk_size must be at least 1 token")
    if chunker == "semantic" and embed is None:
        raise ValueError("the semantic chunker needs the knowledge base's embedding model")
    if not 0 <= chunk_overlap < chunk_size:
        raise ValueError("chunk_overlap must be between 0 and chunk_size - 1 tokens")
    title = title_line_of(text) if title_line else ""
    if title:
        chunk_size = max(chunk_size - tokens.count(title + "\n\n"), min(chunk_size, 16))
        chunk_overlap = min(chunk_overlap, chunk_size - 1)
    chunks: list[Chunk] = []
    if chunker in ("paragraph", "sentence", "semantic"):
        if chunker == "paragraph":
            units = paragraph_spans(text)
            spans = group_spans(text, units, chunk_size)
        else:
            units = sentence_spans(text)
            cuts = None
            if chunker == "semantic":
                assert embed is not None  # checked above
                cuts = semantic_cuts(embed(text, units), percentile)
            per = sentences_per_chunk if chunker == "sentence" else None
            spans = group_spans(text, units, chunk_size, cuts, per)
        for s, e, n, head in spans:
            chunks.append(Chunk(len(chunks), head + text[s:e], s, e, n))
    elif chunker == "cjk":
        for s, e in cjk_chunks(text, chunk_size, chunk_overlap, chunk_unit, separators):
            if text[s:e].strip():
                chunks.append(Chunk(len(chunks), text[s:e], s, e, tokens.count(text[s:e])))
    elif chunker == "fixed_size":
        for s, e, n, head in _split_span(text, 0, len(text), chunk_size, chunk_overlap, (WORD,)):
            chunks.append(Chunk(len(chunks), head + text[s:e], s, e, n))
    elif chunker == "recursive":
        allowed = (PARAGRAPH, LINE, SENTENCE, WORD)
        for s, e, n, head in _split_span(text, 0, len(text), chunk_size, chunk_overlap, allowed):
            chunks.append(Chunk(len(chunks), head + text[s:e], s, e, n))
    else:
        allowed = (PARAGRAPH, LINE, SENTENCE, WORD)
        for section in markdown_sections(text):
            # The heading path is embedded with every chunk, so it shares the budget, up
            # to HEADING_SHARE of it.
            prefix = embedded_header(section.heading_path, chunk_size)
            budget = chunk_size - (tokens.count(prefix + "\n\n") if prefix else 0)
            budget = max(budget, min(chunk_size, 16))
            spans = _split_span(
                text, section.start, section.end, budget, min(chunk_overlap, budget - 1), allowed
            )
            for s, e, n, head in spans:
                chunks.append(
                    Chunk(
                        len(chunks),
                        head + text[s:e],
                        s,
                        e,
                        n,
                        list(section.heading_path),
                        header=prefix,
                    )
                )
    for chunk in chunks:
        chunk.embed_text = (
            f"{chunk.header_path}\n\n{chunk.content}" if chunk.heading_path else chunk.content
        )
        if title and not chunk.content.startswith(title):
            chunk.embed_text = f"{title}\n\n{chunk.embed_text}"
    return chunks


# --- paragraph, sentence and semantic chunkers ------------------------------------------------
_SENTENCE_END = re.compile(r"[.!?…][\"'”’)\]]*(?=\s)|[。！？][」』”’）)]*|\n[ \t]*\n")


def _pieces(
    text: str, pattern: re.Pattern[str], start: int, end: int, keep_mark: bool
) -> list[tuple[int, int]]:
    """The stretches of ``text[start:end]`` between matches of ``pattern`` (each with
    the match when ``keep_mark``), trimmed of whitespace, empty ones left out."""
    out: list[tuple[int, int]] = []
    pos = start
    for m in [*pattern.finditer(text, start, end), None]:
        stop = end if m is None else (m.end() if keep_mark else m.start())
        a, b = _trim(text, pos, stop)
        if a < b:
            out.append((a, b))
        pos = end if m is None else m.end()
    return out


def _units(text: str, pattern: re.Pattern[str], keep_mark: bool) -> list[tuple[int, int]]:
    """The pieces of ``text`` between ``pattern``'s matches; a fenced code block or a
    table is one piece, whatever it holds."""
    out: list[tuple[int, int]] = []
    pos = 0
    for blk in blocks(text):
        out += _pieces(text, pattern, pos, blk.start, keep_mark)
        out.append((blk.start, blk.end))
        pos = blk.end
    return out + _pieces(text, pattern, pos, len(text), keep_mark)


def paragraph_spans(text: str) -> list[tuple[int, int]]:
    """Each paragraph (text between blank lines), trimmed of surrounding whitespace; a
    code block with blank lines in it is still one paragraph."""
    return _units(text, _BREAKS[0][0], keep_mark=False)


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """Each sentence: up to its end mark (. ! ? and CJK 。！？) or a paragraph break; a
    fenced code block or a table counts as one sentence."""
    return _units(text, _SENTENCE_END, keep_mark=True)


def group_spans(
    text: str,
    units: list[tuple[int, int]],
    size: int,
    cut_before: set[int] | None = None,
    max_units: int | None = None,
) -> list[Span]:
    """Consecutive units joined while the joined text stays within ``size`` tokens (and
    ``max_units`` units), a new group wherever ``cut_before`` names a unit; a unit longer
    than ``size`` on its own is split like the recursive chunker."""
    out: list[Span] = []
    group: list[tuple[int, int]] = []

    def close() -> None:
        if group:
            a, b = group[0][0], group[-1][1]
            out.append((a, b, tokens.count(text[a:b]), ""))
            group.clear()

    for k, (a, b) in enumerate(units):
        if group and (
            (cut_before and k in cut_before)
            or (max_units and len(group) >= max_units)
            or tokens.count(text[group[0][0] : b]) > size
        ):
            close()
        if tokens.count(text[a:b]) > size:
            close()
            out += _split_span(text, a, b, size, 0, (PARAGRAPH, LINE, SENTENCE, WORD))
            continue
        group.append((a, b))
    close()
    return out


def semantic_cuts(vectors: list[list[float]], percentile: float) -> set[int]:
    """Where to start a new chunk: before each sentence whose similarity to the one
    before is among the lowest ``percentile`` percent of the document's."""
    if len(vectors) < 3:
        return set()
    arr = np.asarray(vectors, dtype=np.float32)
    arr /= np.maximum(np.linalg.norm(arr, axis=1, keepdims=True), 1e-9)
    sims = (arr[1:] * arr[:-1]).sum(axis=1)
    threshold = float(np.percentile(sims, percentile))
    return {k + 1 for k, sim in enumerate(sims.tolist()) if sim <= threshold}


CJK_SEPARATORS = (
    "\n\n", "\n", "。", "！", "？", ". ", "! ", "? ", "；", "; ", "，", ", ", " ",
)  # fmt: skip
_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\"}


def decode_separator(text: str) -> str:
    """A separator as typed in a config: ``\\n``, ``\\r``, ``\\t`` and ``\\\\`` become the
    characters they name; any other backslash stays as it is."""
    return re.sub(r"\\([nrt\\])", lambda m: _ESCAPES[m.group(1)], text)


def separator_list(custom: list[str] | None) -> list[str]:
    """Custom separators first (decoded), then the built-in hierarchy, each once."""
    out: list[str] = []
    for sep in [*(decode_separator(c) for c in custom or []), *CJK_SEPARATORS]:
        if sep and sep not in out:
            out.append(sep)
    return out


def _split_at(text: str, start: int, end: int, sep: str) -> list[int]:
    """Cut points in ``text[start:end]`` just after each ``sep`` (start and end included)."""
    cuts = [start]
    pos = text.find(sep, start, end)
    while pos >= 0:
        after = pos + len(sep)
        if start < after < end:
            cuts.append(after)
        pos = text.find(sep, after, end)
    cuts.append(end)
    return cuts


def separator_spans(
    text: str, size: int, seps: list[str], measure: Callable[[str], int]
) -> list[tuple[int, int]]:
    """Contiguous spans covering ``text`` exactly, each within ``size`` by ``measure``
    where a separator (or, last, single characters) allows."""

    def split(start: int, end: int, level: int) -> list[tuple[int, int]]:
        if measure(text[start:end]) <= size:
            return [(start, end)]
        if level >= len(seps):  # characters: the largest run that fits, then the next
            out = []
            pos = start
            while pos < end:
                stop = min(end, pos + size)
                while stop > pos + 1 and measure(text[pos:stop]) > size:
                    stop -= max(1, (stop - pos) // 8)
                out.append((pos, stop))
                pos = stop
            return out
        cuts = _split_at(text, start, end, seps[level])
        if len(cuts) == 2:
            return split(start, end, level + 1)
        pieces: list[tuple[int, int]] = []
        for a, b in itertools.pairwise(cuts):
            pieces += split(a, b, level + 1) if measure(text[a:b]) > size else [(a, b)]
        merged: list[tuple[int, int]] = []
        for a, b in pieces:  # greedy: neighbours join while they fit
            if merged and measure(text[merged[-1][0] : b]) <= size:
                merged[-1] = (merged[-1][0], b)
            else:
                merged.append((a, b))
        return merged

    return split(0, len(text), 0) if text else []


def cjk_chunks(
    text: str, size: int, overlap: int, unit: str, separators: list[str] | None
) -> list[tuple[int, int]]:
    """(start, end) per chunk: zero-overlap pieces of at most ``size - overlap``, each
    after the first extended back by exactly ``overlap`` characters (or the fewest
    characters that hold ``overlap`` tokens) of the text before it, but never back to the
    start of the chunk before it (after a piece shorter than the overlap)."""
    measure: Callable[[str], int] = len if unit == "characters" else tokens.count
    base = separator_spans(text, max(1, size - overlap), separator_list(separators), measure)
    out: list[tuple[int, int]] = []
    for i, (a, b) in enumerate(base):
        start = a
        if i and overlap:
            if unit == "characters":
                start = max(0, a - overlap)
            else:
                while start > 0 and tokens.count(text[start:a]) < overlap:
                    start -= 1
                # Token counts do not add up exactly across a cut: stay within the size.
                while start < a and tokens.count(text[start:b]) > size:
                    start += 1
            # A piece before it shorter than the overlap: never reach back to where the
            # chunk before starts (it would hold that chunk whole).
            start = max(start, out[-1][0] + 1)
        out.append((start, b))
    return out


def page_of(page_starts: list[int] | None, char_offset: int) -> int | None:
    """1-based page holding ``char_offset``, given each page's first character offset."""
    if not page_starts:
        return None
    return max(1, bisect.bisect_right(page_starts, char_offset))


# --- source code: chunks at definition boundaries -----------------------------------------------
@dataclass
class Definition:
    """A definition of a source file (code_graph gives them): characters ``start:end``
    (whole lines), a label (``class Circle``) and the definitions nested in it."""

    start: int
    end: int
    label: str
    children: list[Definition] = field(default_factory=list)


_LEAD = re.compile(r"^[ \t]*(#|//|/\*|\*|@|--|;|\"\"\"|''')")


def _with_leading_comments(text: str, start: int, floor: int) -> int:
    """Move a definition's start up over the comment and decorator lines right above it."""
    pos = start
    while pos > floor:
        prev = text.rfind("\n", floor, pos - 1)
        line_start = floor if prev < 0 else prev + 1
        line = text[line_start:pos]
        if not line.strip() or not _LEAD.match(line) or line_start < floor:
            break
        pos = line_start
    return pos


def definition_chunks(
    text: str, definitions: list[Definition], path: str, chunk_size: int, chunk_overlap: int
) -> list[Chunk]:
    """A source file's chunks: each definition (with the comments and decorators above it)
    is one chunk when it fits; a longer one is split at the definitions nested in it
    (a class at its methods), and one with none at line ends. Neighbouring pieces that fit
    together are merged. Every chunk is an exact slice; its heading path is the file and
    the definitions it sits in (``app.py > class Circle > def area``)."""
    pieces: list[tuple[int, int, list[str]]] = []

    def split(start: int, end: int, defs: list[Definition], path_: list[str]) -> None:
        prefix = HEADING_SEPARATOR.join(path_)
        budget = max(chunk_size - tokens.count(prefix + "\n\n"), min(chunk_size, 16))
        pos = start
        for d in sorted(defs, key=lambda d: d.start):
            if d.start < pos or d.end > end:
                continue  # overlapping (a line scan's guess): the enclosing span keeps it
            lead = _with_leading_comments(text, d.start, pos)
            if text[pos:lead].strip():
                whole(pos, lead, path_, budget)
            inner = [*path_, d.label]
            inner_budget = max(
                chunk_size - tokens.count(HEADING_SEPARATOR.join(inner) + "\n\n"),
                min(chunk_size, 16),
            )
            if tokens.count(text[lead : d.end]) <= inner_budget or not d.children:
                whole(lead, d.end, inner, inner_budget)
            else:
                split(lead, d.end, d.children, inner)
            pos = d.end
        if text[pos:end].strip():
            whole(pos, end, path_, budget)

    def whole(start: int, end: int, path_: list[str], budget: int) -> None:
        start, end = _trim(text, start, end)
        if start >= end:
            return
        if tokens.count(text[start:end]) <= budget:
            pieces.append((start, end, path_))
            return
        for s, e, _n, _head in _windowed(
            text, start, end, budget, min(chunk_overlap, budget - 1), (LINE, WORD), []
        ):
            pieces.append((s, e, path_))

    split(0, len(text), definitions, [path])
    # Merge neighbours that fit together: siblings (two methods of a class, under the
    # class; two pieces of one function) and a header (a class's first lines, a file's
    # imports) with the first member after it, under that member. A member and what
    # follows its class stay apart, so a chunk's path names the definitions it holds.
    merged: list[tuple[int, int, list[str]]] = []
    for s, e, p in pieces:
        if merged:
            ms, _me, mp = merged[-1]
            joined = None
            if len(mp) == len(p) and mp[:-1] == p[:-1]:
                joined = mp if mp == p else mp[:-1]
            elif mp == p[:-1]:
                joined = p  # the header goes with its first member, which names both
            prefix = HEADING_SEPARATOR.join(joined or [])
            if joined and tokens.count(prefix + "\n\n" + text[ms:e]) <= chunk_size:
                merged[-1] = (ms, e, joined)
                continue
        merged.append((s, e, p))
    chunks: list[Chunk] = []
    for s, e, p in merged:
        content = text[s:e]
        chunk = Chunk(len(chunks), content, s, e, tokens.count(content), list(p))
        chunk.embed_text = f"{chunk.header_path}\n\n{content}"
        chunks.append(chunk)
    return chunks
