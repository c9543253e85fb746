"""The PDF structure helpers as plain Python: which pages count as a printed ToC, how the
LLM's readings of irregular lines merge with the regular ones, and which stretches of
pages no heading covers."""

from __future__ import annotations

from kbpg_db.features import BuildContext, Document
from kbpg_db.features.page_index.build import merge_small, pdf_tree
from kbpg_db.features.page_index.pdf_structure import (
    Entry,
    pages,
    printed_toc,
    structure,
    toc_lines,
    uncovered,
)
from kbpg_db.features.page_index.settings import PageIndexExtra


def test_contents_heading_over_numbered_lines_is_a_toc_page() -> None:
    page = "Contents\nIntroduction 1\nMethods 4\nResults 9\n"
    body = "Introduction\nSome text with 3 numbers 12.\n"
    found = printed_toc(page + body, pages(page + body, [0, len(page)]), 5)
    assert [p.page for p in found] == [1]
    assert found[0].regular == [] and found[0].irregular == [
        "Introduction 1",
        "Methods 4",
        "Results 9",
    ]
    # Without the heading, three loose numbered lines are not a ToC.
    loose = "Introduction 1\nMethods 4\nResults 9\n"
    assert printed_toc(loose, pages(loose, [0]), 5) == []


def test_page_labels_are_not_irregular_lines() -> None:
    page = "Contents\nAlpha ........ 1\nBeta ........ 2\nGamma ........ 3\niii\n"
    (found,) = printed_toc(page, pages(page, [0]), 5)
    assert [t for _, t, _ in found.regular] == ["Alpha", "Beta", "Gamma"] and not found.irregular


def test_llm_readings_replace_the_tail_of_a_wrapped_title() -> None:
    text = "Contents\n1 Start ........ 1\n2 A long title\nthat wraps ........ 2\n3 End 5\n"
    (page,) = printed_toc(text, pages(text, [0]), 5)
    assert [t for _, t, _ in page.regular] == ["1 Start", "that wraps"]
    read = [
        [
            (text.index("1 Start"), "1 Start", 1, None),  # already read: kept once
            (text.index("2 A long"), "2 A long title that wraps", 2, 1),
            (text.index("3 End"), "3 End", 5, 1),
        ]
    ]
    assert toc_lines([page], read) == [
        ("1 Start", 1, None),
        ("2 A long title that wraps", 2, 1),
        ("3 End", 5, 1),
    ]
    assert toc_lines([page], None) == [("1 Start", 1, None), ("that wraps", 2, None)]


def test_uncovered_pages() -> None:
    entries = [Entry(1, "A", 1), Entry(1, "B", 3), Entry(1, "C", 20)]
    # Pages 4-19 start no section (16 pages > 10); 2 (one page) and 21-22 are fine.
    assert uncovered(entries, 22, 10) == list(range(4, 20))
    assert uncovered([], 3, 10) == []
    assert uncovered([], 12, 10) == list(range(1, 13))


def _doc(page_texts: list[str]) -> tuple[str, list[int]]:
    starts, at = [], 0
    for t in page_texts:
        starts.append(at)
        at += len(t)
    return "".join(page_texts), starts


def test_outline_titles_are_found_after_a_printed_label_and_none_is_lost() -> None:
    """An outline names "ASN.1 syntax"; the page prints "2.1 ASN.1 syntax". Two entries on
    one page must keep two offsets; a title printed inside a line is located there."""
    text, starts = _doc(
        [
            "1 Introduction\nThis manual describes the tool.\n",
            "2 Syntax\nAn overview.\n2.1 ASN.1 syntax\nTypes and values.\n"
            "See also: Chapter 3 Encoding rules and more.\n",
            "Appendix B: Licence\nCopying terms.\n",
        ]
    )
    outline = [
        {"level": 1, "title": "Introduction", "page": 1},
        {"level": 1, "title": "Syntax", "page": 2},
        {"level": 2, "title": "ASN.1 syntax", "page": 2},
        {"level": 2, "title": "Encoding rules", "page": 2},
        {"level": 2, "title": "Not printed anywhere", "page": 2},
        {"level": 1, "title": "Licence", "page": 3},
    ]
    source, entries, details = structure(text, starts, {"toc": outline}, 20, 10)
    assert source == "outline"
    where = {e.title: (e.offset, e.located) for e in entries}
    assert where["Introduction"] == (0, "found")
    assert where["Syntax"] == (starts[1], "found")
    assert where["ASN.1 syntax"] == (text.index("2.1 ASN.1"), "found")
    assert where["Encoding rules"] == (text.index("See also"), "approximate")
    assert where["Not printed anywhere"] == (text.index("See also"), "lost")
    assert where["Licence"] == (starts[2], "found")
    assert details["entries"] == {"found": 4, "approximate": 1, "lost": 1}
    offsets = [e.offset or 0 for e in entries]
    assert offsets == sorted(offsets)


def test_every_outline_entry_becomes_a_node() -> None:
    text, starts = _doc(
        ["1 Alpha\nText one.\n2 Beta\nText two.\n", "Page two without the heading.\n"]
    )
    outline = [
        {"level": 1, "title": "Alpha", "page": 1},
        {"level": 1, "title": "Beta", "page": 1},
        {"level": 1, "title": "Gamma", "page": 2},  # lost: at page 2's start
        {"level": 1, "title": "Delta", "page": 2},  # lost too: the same offset
    ]
    doc = Document("manual.pdf", text, starts, {"toc": outline})
    roots, info = pdf_tree(doc, PageIndexExtra(), None, BuildContext(llm=None, embedding_key=None))
    titles = [n.title for n in roots]
    assert titles == ["Alpha", "Beta", "Gamma", "Delta"]
    assert info["entries"] == {"found": 2, "approximate": 0, "lost": 2}


def test_spaced_dot_leaders_are_toc_lines() -> None:
    page = "Contents\nIntroduction . . . . . . 1\nGetting started . . . . 4\nReference · · · · 9\n"
    (found,) = printed_toc(page, pages(page, [0]), 5)
    assert [(t, p) for _, t, p in found.regular] == [
        ("Introduction", 1),
        ("Getting started", 4),
        ("Reference", 9),
    ]
    assert not found.irregular


def test_numbered_layout_headings_are_the_documents_and_never_merge() -> None:
    text, starts = _doc(
        [
            "2.4 Results\n" + "We measured many things over many weeks. " * 20 + "\n"
            "2.5 Future developments\nMore to come.\n"
            "Small print\nA line.\n"
        ]
    )
    headings = [
        {"level": 2, "title": "2.4 Results", "page": 1},
        {"level": 2, "title": "2.5 Future developments", "page": 1},
        {"level": 2, "title": "Small print", "page": 1},
    ]
    doc = Document("report.pdf", text, starts, {"pdf_headings": headings})
    extra = PageIndexExtra(min_token_num_each_node=40)
    roots, _ = pdf_tree(doc, extra, None, BuildContext(llm=None, embedding_key=None))
    merged = merge_small(text, roots, extra.min_token_num_each_node, 10_000)
    assert [n.title for n in roots] == ["2.4 Results", "2.5 Future developments"]
    assert merged == 1  # "Small print", unnumbered, joined the section before it
