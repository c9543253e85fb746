"""Chunkers as plain Python: structure, offsets, sizes, overlap (with hypothesis)."""

from __future__ import annotations

import itertools
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kbpg_db import tokens
from kbpg_db.chunking import CHUNKERS, chunk_text, markdown_sections, page_of


def test_markdown_sections_skip_fenced_code() -> None:
    text = "intro\n# A\ntext\n```\n# not a heading\n```\n## B\nmore\n~~~\n## nope\n~~~\n# C\nend"
    sections = markdown_sections(text)
    assert [s.heading_path for s in sections] == [[], ["A"], ["A", "B"], ["C"]]
    assert "".join(text[s.start : s.end] for s in sections) == text


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
        chunk_text("x", "semantic", 100, 0)
    with pytest.raises(ValueError, match="chunk_overlap"):
        chunk_text("x", "recursive", 10, 10)


def test_page_of() -> None:
    assert page_of(None, 5) is None
    assert [page_of([0, 10, 20], o) for o in (0, 9, 10, 25)] == [1, 1, 2, 3]


TEXT = st.text(
    alphabet=st.sampled_from(list("abcdefgh ijk.,!?\n\n#`é漢🙂\t")), min_size=0, max_size=1500
)


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
    chunks = chunk_text(text, chunker, size, overlap)
    covered = [False] * len(text)
    last_start = -1
    for i, c in enumerate(chunks):
        assert c.ordinal == i
        assert 0 <= c.char_start < c.char_end <= len(text)
        assert text[c.char_start : c.char_end] == c.content  # offsets point into the source
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
