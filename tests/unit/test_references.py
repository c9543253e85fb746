"""GraphIndex's rule-based references: the words around a label must agree with the target."""

from __future__ import annotations

from kbpg_db.features.graph_index.build import Resolver
from kbpg_db.features.page_index import build as pi

MANUAL = """# Preface
Read this first.
## 3.1 Audience
Operators.
## 3.5 Conventions
Bold words are commands.
# Chapter 1: Introduction
The system in brief.
# Chapter 2: Installation
Install the packages.
# Chapter 3: Operation
## 3.1 Starting
Start the service.
## 3.5 System management
Manage users and disks.
# Chapter 4: Backups
Back up nightly.
"""


def resolve(text: str, names: list[str] | None = None) -> tuple[list[str], int, int]:
    nodes = pi._walk(pi.heading_tree("Operator Manual", MANUAL))
    resolver = Resolver(nodes, names or ["Operator Manual"])
    found, unresolved = resolver.find(text)
    return [nodes[t].title for t, _ in found], unresolved, resolver.external


def test_a_reference_into_another_work_is_no_edge() -> None:
    # Before: each became an edge to this manual's own Chapter 2 or 4.
    assert resolve("See the Style Guide, Chapter 2 - Page Layout, for margins.") == ([], 0, 1)
    assert resolve("as the Developer's Handbook, Chapter 4 explains") == ([], 0, 1)
    assert resolve("Details are in Chapter 4 of the Style Guide.") == ([], 0, 1)
    assert resolve("The wire format is in RFC 9110, Section 4.") == ([], 0, 1)
    # This document's own name, or "this", keeps the edge.
    assert resolve("See the Operator Manual, Chapter 4.") == (["Chapter 4: Backups"], 0, 0)
    assert resolve("See this Manual, Chapter 2.") == (["Chapter 2: Installation"], 0, 0)
    assert resolve("See Chapter 2 for the packages.") == (["Chapter 2: Installation"], 0, 0)


def test_a_title_beside_the_label_must_be_the_targets() -> None:
    assert resolve("See Chapter 2 - Installation.") == (["Chapter 2: Installation"], 0, 0)
    # A title that is not this manual's Chapter 2: another work's chapter, no edge.
    assert resolve("See Chapter 2 - Page Layout.") == ([], 0, 1)
    # Two sections 3.5 (the preface's and chapter 3's): ambiguous alone, settled by title.
    assert resolve("See Section 3.5.") == ([], 1, 0)
    assert resolve("See Section 3.5, \u201cSystem management\u201d.") == (
        ["3.5 System management"],
        0,
        0,
    )
    assert resolve('See Section 3.5 ("Conventions").') == (["3.5 Conventions"], 0, 0)
