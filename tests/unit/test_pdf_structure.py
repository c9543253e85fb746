"""The PDF structure helpers as plain Python: which pages count as a printed ToC, how the
LLM's readings of irregular lines merge with the regular ones, and which stretches of
pages no heading covers."""

from __future__ import annotations

from kbpg_db.strategies.pdf_structure import Entry, pages, printed_toc, toc_lines, uncovered


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
