"""Chunkers as plain Python: structure, offsets, sizes, overlap (with hypothesis)."""

from __future__ import annotations

import itertools
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kbpg_db import tokens
from kbpg_db.chunking import (
    CHUNKERS,
    chunk_text,
    heading_text,
    link_text,
    markdown_sections,
    page_of,
)


def test_markdown_sections_skip_fenced_code() -> None:
    text = "intro\n# A\ntext\n```\n# not a heading\n```\n## B\nmore\n~~~\n## nope\n~~~\n# C\nend"
    sections = markdown_sections(text)
    assert [s.heading_path for s in sections] == [[], ["A"], ["A", "B"], ["C"]]
    assert "".join(text[s.start : s.end] for s in sections) == text


def test_the_model_reads_a_links_text_not_its_address() -> None:
    text = (
        'Use [`random.choice`](library/random.html#random.choice "random.choice") or see '
        "![a die](img/die.png) and <https://example.org/x>; `a[i](j)` is code.\n\nNext."
    )
    assert link_text(text) == "Use `random.choice` or see a die and ; `a[i](j)` is code.\n\nNext."


def test_heading_path_resets_by_level() -> None:
    text = "# A\n## B\n### C\nx\n## D\ny\n# E\nz"
    chunks = chunk_text(text, "markdown_header", 50, 0)
    # Headings with nothing but a deeper heading under them join that section.
    assert [c.heading_path for c in chunks] == [["A", "B", "C"], ["A", "D"], ["E"]]
    assert chunks[0].content.startswith("# A\n## B\n### C")
    assert chunks[1].embed_text.startswith("A > D\n\n")


def test_a_fenced_block_is_content() -> None:
    text = "# A\n```\ncode\n```\n## B\nmore"
    assert [s.heading_path for s in markdown_sections(text)] == [["A"], ["A", "B"]]


def test_recursive_prefers_paragraphs_then_sentences() -> None:
    para = "This is a sentence about cats. " * 6
    text = (para.strip() + "\n\n") * 4
    chunks = chunk_text(text, "recursive", 60, 0)
    assert all(c.content.endswith(".") for c in chunks)
    assert all(c.token_count <= 60 for c in chunks)


def test_fixed_size_snaps_to_words() -> None:
    text = " ".join(f"word{i}" for i in range(500))
    chunks = chunk_text(text, "fixed_size", 50, 10)
    words = set(text.split())
    for c in chunks:
        assert set(c.content.split()) <= words  # no word cut in half
        assert c.token_count <= 50


def test_a_single_long_line_and_deep_nesting() -> None:
    line = "x" * 100_000
    chunks = chunk_text(line, "recursive", 100, 10)
    assert "".join(c.content for c in chunks).count("x") >= 100_000
    nested = "".join(f"{'>' * i} level {i}\n" for i in range(1, 2000))
    assert chunk_text(nested, "markdown_header", 100, 10)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="unknown chunker"):
        chunk_text("x", "by-chapter", 100, 0)
    with pytest.raises(ValueError, match="chunk_overlap"):
        chunk_text("x", "recursive", 10, 10)


def test_page_of() -> None:
    assert page_of(None, 5) is None
    assert [page_of([0, 10, 20], o) for o in (0, 9, 10, 25)] == [1, 1, 2, 3]


TEXT = st.text(
    alphabet=st.sampled_from(list("abcdefgh ijk.,!?\n\n#`é漢🙂\t")), min_size=0, max_size=1500
)


def fake_embed(text: str, spans: list[tuple[int, int]]) -> list[list[float]]:
    """Bag-of-letters vectors: sentences sharing letters are similar."""
    return [[text[a:b].lower().count(ch) + 0.01 for ch in "abcdefghijklmnopqrstuvwxyz"]
            for a, b in spans]  # fmt: skip


@settings(
    max_examples=int(os.environ.get("KBPG_HYPOTHESIS_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    text=TEXT,
    chunker=st.sampled_from(CHUNKERS),
    size=st.integers(16, 80),
    overlap_frac=st.floats(0, 0.5),
)
def test_chunk_invariants(text: str, chunker: str, size: int, overlap_frac: float) -> None:
    overlap = int(size * overlap_frac)
    chunks = chunk_text(text, chunker, size, overlap, embed=fake_embed)
    covered = [False] * len(text)
    last_start = -1
    for i, c in enumerate(chunks):
        assert c.ordinal == i
        assert 0 <= c.char_start < c.char_end <= len(text)
        # Offsets point into the source (a piece of a long table repeats its header first).
        assert c.content.endswith(text[c.char_start : c.char_end])
        head = c.content[: len(c.content) - (c.char_end - c.char_start)]
        assert not head or (head.startswith("|") or "|" in head.splitlines()[0])
        assert c.content.strip()
        assert c.token_count == tokens.count(c.content) <= size
        assert c.char_start > last_start  # in order
        last_start = c.char_start
        for j in range(c.char_start, c.char_end):
            covered[j] = True
    # Every non-blank character lands in some chunk.
    assert all(covered[i] or text[i].isspace() for i in range(len(text)))
    # Neighbours share at most the configured overlap.
    for a, b in itertools.pairwise(chunks):
        if b.char_start < a.char_end:
            shared = text[b.char_start : a.char_end]
            assert tokens.count(shared) <= overlap + 2


def test_title_line_is_repeated_in_later_chunks() -> None:
    text = "Vitamin D and bone fractures\n" + "Patients took supplements daily. " * 60
    plain = chunk_text(text, "recursive", 60, 0)
    titled = chunk_text(text, "recursive", 60, 0, title_line=True)
    assert all(not c.embed_text.startswith("Vitamin D") for c in plain[1:])
    assert titled[0].embed_text == titled[0].content  # holds the title already
    assert all(c.embed_text.startswith("Vitamin D and bone fractures\n\n") for c in titled[1:])
    assert all(tokens.count(c.embed_text) <= 60 + 1 for c in titled)
    assert (
        chunk_text("one line only", "recursive", 60, 0, title_line=True)[0].embed_text
        == "one line only"
    )


CJK_TEXT = st.lists(
    st.sampled_from(
        ["缓存", "策略", "是", "一种", "方法", "。", "！", "？", "，", "；", "キャッシュ", "の",
         "設定", "hello", "world", ". ", ", ", " ", "\n", "\n\n", "캐시"]
    ),
    min_size=1,
    max_size=300,
).map("".join)  # fmt: skip


@settings(max_examples=int(os.environ.get("KBPG_HYPOTHESIS_EXAMPLES", "60")), deadline=None)
@given(text=CJK_TEXT, size=st.integers(100, 240), overlap=st.integers(0, 60))
def test_cjk_chunks_cover_the_text_with_exact_overlaps(text: str, size: int, overlap: int) -> None:
    from kbpg_db.chunking import cjk_chunks, separator_list, separator_spans

    base = separator_spans(text, size - overlap, separator_list(None), len)
    # Zero internal overlap: the pieces partition the text, each within size - overlap.
    assert "".join(text[a:b] for a, b in base) == text
    assert all(0 < b - a <= size - overlap for a, b in base)
    spans = cjk_chunks(text, size, overlap, "characters", None)
    assert [b for _, b in spans] == [b for _, b in base]
    previous = -1
    for (a, _), (start, end) in zip(base, spans, strict=True):
        # Each chunk is its piece with exactly `overlap` characters of the text before it,
        # but never reaching back to where the chunk before starts (it would hold it whole).
        assert start == max(0, a - overlap, previous + 1) if a else start == 0
        assert end - start <= size
        previous = start


def test_cjk_splits_at_the_punctuation_hierarchy() -> None:
    from kbpg_db.chunking import cjk_chunks, decode_separator, separator_list

    text = "缓存策略很重要。" * 10 + "\n\n" + "キャッシュの設定，とても大事です。" * 8
    spans = cjk_chunks(text, 100, 0, "characters", None)
    pieces = [text[a:b] for a, b in spans]
    assert pieces[0].endswith("\n\n") and all(p.endswith(("。", "\n\n")) for p in pieces)
    with_overlap = cjk_chunks(text, 100, 10, "characters", None)
    assert text[with_overlap[1][0] : spans[0][1]] == text[spans[0][1] - 10 : spans[0][1]]
    # Separators typed in a config: escapes become the characters.
    assert decode_separator("\\n\\n") == "\n\n" and decode_separator("a\\\\b\\t") == "a\\b\t"
    assert decode_separator("\\x") == "\\x"
    assert separator_list(["\\n---\\n", "。"])[:3] == ["\n---\n", "。", "\n\n"]
    chunks = chunk_text(text, "cjk", 100, 10, chunk_unit="characters")
    assert all(len(c.content) <= 100 for c in chunks)
    assert "".join(c.content for c in chunks[:1]) == text[: chunks[0].char_end]
    # The token-based chunkers end CJK sentences at their punctuation too.
    recursive = chunk_text(text, "recursive", 40, 0)
    assert all(c.content.endswith(("。", "，")) for c in recursive[:-1])


TABLE_ROWS = "\n".join(
    f"| {i} | item number {i} with a description | {i * 3} EUR |" for i in range(40)
)
PRICES = (
    "# Prices\nIntro paragraph about prices.\n\n| id | item | price |\n|---|---|---|\n"
    + TABLE_ROWS
    + "\n\nAfter the table.\n"
)


def test_a_long_table_is_split_by_rows_with_its_header_repeated() -> None:
    chunks = chunk_text(PRICES, "markdown_header", 120, 10)
    pieces = [c for c in chunks if "| item number" in c.content]
    assert len(pieces) > 3
    rows_seen: list[str] = []
    for c in pieces:
        assert c.content.startswith("| id | item | price |\n|---|---|---|\n| ")
        assert c.token_count == tokens.count(c.content) <= 120
        body = c.content.split("|---|---|---|\n", 1)[1]
        assert PRICES[c.char_start : c.char_end].endswith(body)
        rows_seen += body.splitlines()
    assert rows_seen == TABLE_ROWS.splitlines()  # every row once, in order, never cut


def test_tables_and_code_blocks_stay_whole_when_they_fit() -> None:
    table = "| a | b |\n|---|---|\n" + "\n".join(f"| row {i} | value {i} |" for i in range(8))
    code = "```python\n" + "\n".join(f"x{i} = compute({i})" for i in range(10)) + "\n```"
    prose = " ".join(f"Sentence {i} says something." for i in range(20))
    for block in (table, code):
        text = f"{prose}\n\n{block}\n\n{prose}"
        need = tokens.count(block)
        for size in (need, need + 7, need + 30, need * 2):
            chunks = chunk_text(text, "recursive", size, 0)
            assert any(block in c.content for c in chunks), (block[:10], size)


def test_paragraph_sentence_and_semantic_chunkers() -> None:
    text = (
        "Cats purr when content. Cats sleep most of the day.\n\n"
        "Cats hunt at dusk.\n\n"
        "Rockets burn fuel to climb. Rockets need oxygen to burn. Rockets reach orbit fast."
    )
    paragraphs = chunk_text(text, "paragraph", 200, 0)
    assert [c.content for c in paragraphs] == [text]  # merged up to the size
    small = chunk_text(text, "paragraph", 16, 0)
    assert small[0].content == "Cats purr when content. Cats sleep most of the day."
    assert all(c.token_count <= 16 for c in small)
    sentences = chunk_text(text, "sentence", 200, 0, sentences_per_chunk=2)
    assert [c.content for c in sentences] == [
        "Cats purr when content. Cats sleep most of the day.",
        "Cats hunt at dusk.\n\nRockets burn fuel to climb.",
        "Rockets need oxygen to burn. Rockets reach orbit fast.",
    ]

    def topics(body: str, spans: list[tuple[int, int]]) -> list[list[float]]:
        return [[1.0, 0.0] if "Cats" in body[a:b] else [0.0, 1.0] for a, b in spans]

    semantic = chunk_text(text, "semantic", 200, 0, percentile=20, embed=topics)
    assert [c.content.split()[0] for c in semantic] == ["Cats", "Rockets"]
    assert semantic[1].content.startswith("Rockets burn fuel")
    with pytest.raises(ValueError, match="semantic chunker needs"):
        chunk_text(text, "semantic", 200, 0)


def test_paragraph_chunker_keeps_a_code_block_with_blank_lines_whole() -> None:
    code = "```python\ndef f():\n    return 1\n\n\ndef g():\n    return 2\n```"
    text = f"Intro paragraph.\n\n{code}\n\nOutro paragraph."
    chunks = chunk_text(text, "paragraph", 30, 0)
    assert any(code in c.content for c in chunks)


def _boundaries_by_decoding(text: str) -> tuple[list[int], list[int]]:
    """_token_boundaries the plain way: decode each token, walk the characters."""
    enc = tokens.encoding()
    ids = enc.encode(text, disallowed_special=())
    raw = text.encode("utf-8", errors="surrogatepass")
    out, count, byte_pos = [0], [0], 0
    for n, token in enumerate(ids, start=1):
        byte_pos = min(byte_pos + len(enc.decode_single_token_bytes(token)), len(raw))
        chars = len(raw[:byte_pos].decode("utf-8", errors="ignore"))
        # a character begun but not finished counts as begun
        if byte_pos < len(raw) and (raw[byte_pos] & 0xC0) == 0x80:
            chars += 1
        chars = len(text) if n == len(ids) else chars
        if chars > out[-1]:
            out.append(chars)
            count.append(n)
        else:
            count[-1] = n
    return (out, count) if ids else (([0, len(text)], [0, 0]) if text else ([0], [0]))


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    st.lists(
        st.sampled_from([*"ab Zé\n\t.,", "缓存", "策略", "😀", "—", "ß", "\u211d", "\u0301", "  "]),
        max_size=60,
    ).map("".join)
)
def test_token_boundaries_match_decoding_each_token(text: str) -> None:
    from kbpg_db.chunking import _token_boundaries

    assert _token_boundaries(text) == _boundaries_by_decoding(text)


def test_token_byte_lengths_are_the_decoded_tokens() -> None:
    enc = tokens.encoding()
    ids = [0, 1, 220, 1000, 50000, 100000, enc.max_token_value, 220]
    lengths = tokens.byte_lengths(ids)
    for token, length in zip(ids, lengths.tolist(), strict=True):
        assert length == len(enc.decode_single_token_bytes(token))


def test_embedded_token_counts_are_those_of_the_embedded_texts() -> None:
    """The local model's tokens_embedded reuses the chunker's counts where a chunk is
    embedded as it is, and counts the heading path or title line where one leads it."""
    from kbpg_db.config import IndexingConfig
    from kbpg_db.features.chunk_embed import build as chunk_embed

    text = "Guide title\n\nIntro words here.\n\n# Setup\n\nInstall it.\n\n## Linux\n\n" + (
        "apt install the package and configure it. " * 30
    )
    for title_line in (False, True):
        cfg = IndexingConfig(chunk_size=40, chunk_overlap=0, title_line=title_line)
        rows = chunk_embed.chunk_rows(text, cfg, None)
        assert any(r["embed_text"] == r["content"] for r in rows)
        assert any(r["embed_text"] != r["content"] for r in rows)
        assert chunk_embed.embedded_token_counts(rows) == [
            tokens.count(r["embed_text"]) for r in rows
        ]


def test_a_document_cut_ahead_is_built_from_those_rows_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """kb.prefetch_embeddings cuts its documents' chunks; each job's build takes those rows
    instead of cutting again, only for the same text and settings, and only once."""
    from kbpg_db import chunking
    from kbpg_db.config import IndexingConfig
    from kbpg_db.features import BuildContext, Document
    from kbpg_db.features.chunk_embed import build as chunk_embed

    text = "# Setup\n\n" + "Install the package and configure it. " * 40
    cfg = IndexingConfig(chunk_size=40, chunk_overlap=0)
    fresh = chunk_embed.build(Document("Guide", text, None, {}), cfg, BuildContext(None, None))
    chunk_embed.clear_rows_ahead()
    ahead = chunk_embed.rows_ahead(text, cfg, None)
    cuts = []
    real_chunk_text = chunking.chunk_text
    monkeypatch.setattr(
        chunking, "chunk_text", lambda *a, **k: cuts.append(1) or real_chunk_text(*a, **k)
    )
    # Another text or other settings do not take them.
    assert chunk_embed.take_rows(text + " more", cfg, None) is None
    assert chunk_embed.take_rows(text, IndexingConfig(chunk_size=41, chunk_overlap=0), None) is None
    built = chunk_embed.build(Document("Guide", text, None, {}), cfg, BuildContext(None, None))
    assert not cuts and built.chunks is ahead
    assert [{**r, "embedding": None} for r in built.chunks] == [
        {**r, "embedding": None} for r in fresh.chunks
    ]
    assert [r["embedding"] for r in built.chunks] == [r["embedding"] for r in fresh.chunks]
    # Taken once: the next build of the same text cuts it again.
    chunk_embed.build(Document("Guide", text, None, {}), cfg, BuildContext(None, None))
    assert cuts == [1]
    chunk_embed.rows_ahead(text, cfg, None)
    chunk_embed.clear_rows_ahead()
    assert chunk_embed.take_rows(text, cfg, None) is None


def test_a_long_heading_never_starves_the_chunk_budget() -> None:
    """A heading that is a link with a long URL (converted HTML) or just very long: the
    chunks under it keep their size; the embedded path is cut, never the text."""
    url = "https://example.org/search?q=" + "&".join(f"p{i}=value{i}" for i in range(60))
    body = " ".join(f"Sentence {i} says something about the topic at hand." for i in range(60))
    text = f"# [Results for the query]({url})\n\n{body}\n"
    chunks = chunk_text(text, chunk_size=200, chunk_overlap=20)
    assert len(chunks) <= 8, [c.token_count for c in chunks]  # the heading line is text too
    assert min(c.token_count for c in chunks[:-1] if "Sentence" in c.content) > 100
    assert chunks[1].heading_path == ["Results for the query"]
    assert chunks[1].embed_text.split("\n\n")[0] == "Results for the query"
    long_heading = "# " + " ".join(f"word{i}" for i in range(150)) + "\n\n"
    chunks = chunk_text(long_heading + body, chunk_size=200, chunk_overlap=20)
    assert all(tokens.count(c.embed_text) <= 200 for c in chunks)
    text_chunks = [c for c in chunks[:-1] if "Sentence" in c.content]
    assert min(c.token_count for c in text_chunks) > 100  # 3/4 of the budget stays text
    assert chunks[0].heading_path[0].endswith("word149")  # stored whole
    assert chunks[1].embed_text.split("\n\n")[0].endswith("…")


@pytest.mark.parametrize(
    ("heading", "text"),
    [
        # Sphinx's module link: a title holding parentheses of its own.
        (
            '[`heapq`](#module-heapq "heapq: Heap queue (a.k.a. priority queue).") — Heaps',
            "`heapq` — Heaps",
        ),
        ("[Foo](https://en.wikipedia.org/wiki/Foo_(bar)) and ![logo](a.png)", "Foo and logo"),
        ("[a](b 'single') [c](<d e> (paren)) <https://x.y/z>", "a c"),
        # Brackets and parentheses inside a code span are code, not a link (Node.js's API).
        ("`subprocess[Symbol.dispose]()`", "`subprocess[Symbol.dispose]()`"),
        ("Class: `fs.Dir` and [`net.Socket`](#x)", "Class: `fs.Dir` and `net.Socket`"),
    ],
)
def test_heading_text_keeps_link_text_only(heading: str, text: str) -> None:
    assert heading_text(heading) == text
