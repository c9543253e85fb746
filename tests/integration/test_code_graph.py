"""The knowledge graph: code, document and heading graphs built by the indexing job, the
SQL functions that answer graph questions, and the graph channel of hybrid search."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from kbpg.client import Client
from kbpg.loaders import discover, load_file
from tests.code_repo import write_repo
from tests.fakeprovider import FakeProvider
from tests.helpers import remote_kb, run_worker

KG = {"knowledge_graph": {"enabled": True}}


def code_kb(
    client: Client,
    conn: psycopg.Connection[Any],
    provider: FakeProvider,
    root: Path,
    name: str = "code",
    **extra: Any,
) -> None:
    remote_kb(client, conn, provider, name, **{**KG, "chunk_size": 40, "chunk_overlap": 0, **extra})
    for path, base in discover([write_repo(root)]):
        client.put(name, load_file(path, root=base))
    run_worker(conn.info.dsn)


def active_config(conn: psycopg.Connection[Any], kb: str) -> dict[str, Any]:
    cfg: dict[str, Any] = conn.execute(
        "SELECT ix.indexing_config FROM kb.kb_index ix JOIN kb.knowledge_base k"
        " ON k.active_index_id = ix.id WHERE k.name = %s",
        (kb,),
    ).fetchone()[0]
    return cfg


def rows(conn: psycopg.Connection[Any], query: str, *args: Any) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in conn.execute(query, args).fetchall()]


# Every definition of the repository: (path, kind, qualified name, lines, member_of).
VERTICES = {
    ("geo/geo.go", "struct", "geo.Point", 5, 7, None),
    ("geo/geo.go", "interface", "geo.Measurer", 9, 11, None),
    ("geo/geo.go", "method", "geo.Measurer.Distance", 10, 10, "Measurer"),
    ("geo/geo.go", "method", "geo.Point.Distance", 13, 15, "Point"),
    ("geo/geo.go", "function", "geo.sq", 17, 19, None),
    ("geo/main.go", "function", "geo.Origin", 3, 7, None),
    ("native/shapes.cpp", "function", "geo.half", 5, 5, None),
    ("native/shapes.cpp", "method", "geo.Triangle.area", 7, 9, "Triangle"),
    ("native/shapes.cpp", "function", "main", 12, 15, None),
    ("native/shapes.h", "class", "geo.Polygon", 3, 6, None),
    ("native/shapes.h", "method", "geo.Polygon.area", 5, 5, "Polygon"),
    ("native/shapes.h", "class", "geo.Triangle", 7, 10, None),
    ("native/shapes.h", "method", "geo.Triangle.area", 9, 9, "Triangle"),
    ("native/util.c", "struct", "pair", 3, 3, None),
    ("native/util.c", "function", "add", 5, 5, None),
    ("native/util.c", "function", "sum_pair", 7, 9, None),
    ("rustlib/src/lib.rs", "enum", "Kind", 4, 7, None),
    ("rustlib/src/lib.rs", "function", "total", 9, 11, None),
    ("rustlib/src/shapes.rs", "trait", "Area", 1, 3, None),
    ("rustlib/src/shapes.rs", "method", "Area.area", 2, 2, "Area"),
    ("rustlib/src/shapes.rs", "struct", "Rect", 5, 8, None),
    ("rustlib/src/shapes.rs", "impl", "Rect", 10, 14, None),
    ("rustlib/src/shapes.rs", "method", "Rect.area", 11, 13, "Rect"),
    ("rustlib/src/shapes.rs", "function", "mul", 16, 18, None),
    ("shapes/base.py", "class", "shapes.base.Shape", 5, 12, None),
    ("shapes/base.py", "method", "shapes.base.Shape.area", 8, 9, "Shape"),
    ("shapes/base.py", "method", "shapes.base.Shape.describe", 11, 12, "Shape"),
    ("shapes/base.py", "function", "shapes.base.square", 15, 16, None),
    ("shapes/circle.py", "class", "shapes.circle.Circle", 5, 10, None),
    ("shapes/circle.py", "method", "shapes.circle.Circle.__init__", 6, 7, "Circle"),
    ("shapes/circle.py", "method", "shapes.circle.Circle.area", 9, 10, "Circle"),
    ("shapes/circle.py", "function", "shapes.circle.unit_circle", 13, 16, None),
    ("src/main/java/com/demo/Animal.java", "class", "com.demo.Animal", 3, 9, None),
    ("src/main/java/com/demo/Animal.java", "method", "com.demo.Animal.sound", 4, 4, "Animal"),
    ("src/main/java/com/demo/Animal.java", "method", "com.demo.Animal.compareTo", 6, 8, "Animal"),
    ("src/main/java/com/demo/Dog.java", "class", "com.demo.Dog", 5, 16, None),
    ("src/main/java/com/demo/Dog.java", "method", "com.demo.Dog.sound", 6, 9, "Dog"),
    ("src/main/java/com/demo/Dog.java", "method", "com.demo.Dog.make", 11, 15, "Dog"),
    ("web/app.ts", "class", "User", 3, 8, None),
    ("web/app.ts", "method", "User.constructor", 4, 4, "User"),
    ("web/app.ts", "method", "User.name", 5, 7, "User"),
    ("web/app.ts", "class", "Admin", 10, 14, None),
    ("web/app.ts", "method", "Admin.welcome", 11, 13, "Admin"),
    ("web/app.ts", "function", "shout", 16, 16, None),
    ("web/util.ts", "interface", "Named", 1, 3, None),
    ("web/util.ts", "method", "Named.name", 2, 2, "Named"),
    ("web/util.ts", "function", "greet", 5, 7, None),
}

# Every reference (calls, imports, inherits, implements) as resolved: (source, kind,
# target, resolution, confidence). A target of another file resolves through imports or
# the package; one known by name only splits its confidence; a library's stays external.
# A file importing one module in two statements has two imports (mod and use; from-imports).
REFERENCES = [
    ("geo/geo.go", "imports", "math", "external", 0.0),
    ("geo.Point.Distance", "calls", "Sqrt", "external", 0.0),
    ("geo.Point.Distance", "calls", "geo.sq", "same_file", 1.0),
    ("geo.Origin", "calls", "geo.Measurer.Distance", "name_only", 0.25),
    ("geo.Origin", "calls", "geo.Point.Distance", "name_only", 0.25),
    ("native/shapes.cpp", "imports", "native/shapes.h", "import", 0.9),
    ("native/shapes.cpp", "imports", "cmath", "external", 0.0),
    ("geo.Triangle.area", "calls", "geo.half", "same_file", 1.0),
    ("main", "calls", "geo.Triangle.area", "same_file", 1.0),
    ("geo.Triangle", "inherits", "geo.Polygon", "same_file", 1.0),
    ("native/util.c", "imports", "stdio.h", "external", 0.0),
    ("sum_pair", "calls", "add", "same_file", 1.0),
    ("rustlib/src/lib.rs", "imports", "rustlib/src/shapes.rs", "import", 0.9),
    ("total", "calls", "Area.area", "name_only", 0.25),
    ("total", "calls", "Rect.area", "name_only", 0.25),
    ("Rect", "implements", "Area", "same_file", 1.0),
    ("Rect.area", "calls", "mul", "same_file", 1.0),
    ("shapes/base.py", "imports", "math", "external", 0.0),
    ("shapes.base.Shape.describe", "calls", "shapes.base.Shape.area", "same_file", 1.0),
    ("shapes.base.Shape.describe", "calls", "type", "external", 0.0),
    ("shapes/circle.py", "imports", "shapes/base.py", "import", 0.9),
    ("shapes.circle.Circle", "inherits", "shapes.base.Shape", "import", 0.9),
    ("shapes.circle.Circle.area", "calls", "shapes.base.square", "import", 0.9),
    ("shapes.circle.unit_circle", "calls", "shapes.circle.Circle", "same_file", 1.0),
    ("shapes.circle.unit_circle", "calls", "shapes.base.Shape.describe", "name_only", 0.5),
    ("shapes.circle.unit_circle", "calls", "shapes.base.square", "import", 0.9),
    ("com.demo.Animal", "implements", "Comparable", "external", 0.0),
    ("com.demo.Animal.compareTo", "calls", "com.demo.Animal.sound", "same_file", 1.0),
    ("com.demo.Animal.compareTo", "calls", "compareTo", "external", 0.0),
    ("src/main/java/com/demo/Dog.java", "imports", "java.util.List", "external", 0.0),
    ("com.demo.Dog", "inherits", "com.demo.Animal", "import", 0.9),
    ("com.demo.Dog.make", "calls", "com.demo.Dog", "same_file", 1.0),
    ("com.demo.Dog.make", "calls", "com.demo.Dog.sound", "same_file", 1.0),
    ("web/app.ts", "imports", "web/util.ts", "import", 0.9),
    ("User", "implements", "Named", "import", 0.9),
    ("Admin", "inherits", "User", "same_file", 1.0),
    ("Admin.welcome", "calls", "greet", "import", 0.9),
    ("shout", "calls", "toUpperCase", "external", 0.0),
    ("greet", "calls", "Named.name", "same_file", 1.0),
    ("rustlib/src/lib.rs", "imports", "rustlib/src/shapes.rs", "import", 0.9),
    ("shapes/circle.py", "imports", "shapes/base.py", "import", 0.9),
]

REFERENCE_SQL = """
    SELECT source, kind, target, resolution, round(confidence::numeric, 2)::float
      FROM kb.graph_edges WHERE kb = %s AND kind IN ('calls', 'imports', 'inherits', 'implements')
"""


def test_code_graph_vertices_and_edges_are_exact(
    client: Client, conn: psycopg.Connection[Any], provider: FakeProvider, tmp_path: Path
) -> None:
    code_kb(client, conn, provider, tmp_path)
    docs = rows(conn, "SELECT title, status FROM kb.document ORDER BY title")
    # The walk skipped node_modules, .gitignore'd, hidden, binary and empty files.
    assert [t for t, _ in docs] == [
        "README.md", "geo/geo.go", "geo/main.go", "native/shapes.cpp", "native/shapes.h",
        "native/util.c", "rustlib/src/lib.rs", "rustlib/src/shapes.rs", "shapes/base.py",
        "shapes/circle.py", "src/main/java/com/demo/Animal.java",
        "src/main/java/com/demo/Dog.java", "web/app.ts", "web/util.ts",
    ]  # fmt: skip
    assert {s for _, s in docs} == {"ready"}
    got = set(
        rows(
            conn,
            "SELECT path, kind, qualified_name, start_line, end_line, member_of FROM kb.graph_node"
            " WHERE graph = 'code' AND kind NOT IN ('file', 'repository')",
        )
    )
    assert got == VERTICES
    files = rows(
        conn,
        "SELECT path, language, module, properties->>'repository' FROM kb.graph_node"
        " WHERE kind = 'file' ORDER BY path",
    )
    assert files[0] == ("geo/geo.go", "go", "geo", tmp_path.name)
    assert ("shapes/base.py", "python", "shapes/base", tmp_path.name) in files
    assert ("src/main/java/com/demo/Dog.java", "java", "com/demo", tmp_path.name) in files
    # repository -contains-> file: one repository vertex per file, one by name.
    contains = rows(
        conn,
        "SELECT source, target_path FROM kb.graph_edges WHERE kind = 'contains'"
        " AND source_path = target_path AND graph = 'code' ORDER BY 2",
    )
    assert {s for s, _ in contains} == {tmp_path.name} and len(contains) == len(docs) - 1
    repo = rows(conn, "SELECT vertex FROM kb.graph_neighbours('code', %s)", tmp_path.name)
    assert sorted(v for (v,) in repo) == sorted(t for t, _ in docs if t != "README.md")
    refs = [(s, k, t, r, c) for s, k, t, r, c in rows(conn, REFERENCE_SQL, "code")]
    assert sorted(refs) == sorted(REFERENCES)  # each reference once
    # defines: each file defines its top-level definitions, a class its members.
    defines = rows(conn, "SELECT source, target FROM kb.graph_edges WHERE kind = 'defines'")
    assert ("shapes/circle.py", "shapes.circle.Circle") in defines
    assert ("shapes.circle.Circle", "shapes.circle.Circle.area") in defines
    assert ("Rect", "Rect.area") in defines  # the impl block defines the method
    assert ("native/shapes.cpp", "geo.Triangle.area") in defines  # out of its class
    assert len(defines) == len(VERTICES)
    # Every definition names the chunk that holds its first line.
    off = rows(
        conn,
        "SELECT n.qualified_name FROM kb.graph_node n JOIN kb.chunk c ON c.id = n.chunk_id"
        " JOIN kb.document d ON d.id = n.document_id"
        " WHERE n.graph = 'code' AND n.kind <> 'file' AND NOT (c.char_start <="
        "  length(array_to_string((string_to_array(d.content, E'\\n'))[1:n.start_line], E'\\n'))"
        "  AND length(array_to_string((string_to_array(d.content, E'\\n'))[1:n.start_line - 1],"
        "  E'\\n')) < c.char_end)",
    )
    assert off == []


def test_code_is_chunked_at_definitions(
    client: Client, conn: psycopg.Connection[Any], provider: FakeProvider, tmp_path: Path
) -> None:
    code_kb(client, conn, provider, tmp_path)
    chunks = rows(
        conn,
        "SELECT c.heading_path, c.content, substr(d.content, c.char_start + 1,"
        " c.char_end - c.char_start) FROM kb.chunk c JOIN kb.document d ON d.id = c.document_id"
        " WHERE d.title = 'shapes/circle.py' ORDER BY c.ordinal",
    )
    # 40-token chunks: the imports with the class line, under the class; its two methods
    # together under the class; the function alone. Each an exact slice of the file.
    assert [p for p, _, _ in chunks] == [
        ["shapes/circle.py", "class Circle"],
        ["shapes/circle.py", "class Circle"],
        ["shapes/circle.py", "function unit_circle"],
    ]
    assert all(content == exact for _, content, exact in chunks)
    assert chunks[0][1].startswith("from shapes.base import")
    assert chunks[0][1].endswith("class Circle(Shape):")
    methods = chunks[1][1]
    assert methods.startswith("def __init__(self, r):") and methods.endswith("square(self.r)")
    assert chunks[2][1].startswith("def unit_circle():")
    # base.py: square is no member of Shape, so it is not merged into Shape's last method.
    base = rows(
        conn,
        "SELECT c.heading_path FROM kb.chunk c JOIN kb.document d ON d.id = c.document_id"
        " WHERE d.title = 'shapes/base.py' ORDER BY c.ordinal",
    )
    assert base[-1] == (["shapes/base.py", "function square"],)


def test_graph_questions_through_sql(
    client: Client, conn: psycopg.Connection[Any], provider: FakeProvider, tmp_path: Path
) -> None:
    code_kb(client, conn, provider, tmp_path)
    # Seed 001's questions: where is X defined, the methods of class Y.
    assert rows(
        conn,
        "SELECT kind, qualified_name, path, start_line FROM kb.graph_definitions('code', 'square')",
    ) == [("function", "shapes.base.square", "shapes/base.py", 15)]
    assert [r[0] for r in rows(
        conn, "SELECT path FROM kb.graph_definitions('code', 'Circle.area')")] == ["shapes/circle.py"]  # fmt: skip
    assert len(rows(conn, "SELECT 1 FROM kb.graph_definitions('code', 'area')")) == 7
    assert rows(conn, "SELECT name, path FROM kb.graph_members('code', 'Shape')") == [
        ("area", "shapes/base.py"),
        ("describe", "shapes/base.py"),
    ]
    # A C++ method defined in the .cpp belongs to its class declared in the header.
    assert rows(conn, "SELECT name, path, start_line FROM kb.graph_members('code', 'geo::Triangle')") == [
        ("area", "native/shapes.cpp", 7),
        ("area", "native/shapes.h", 9),
    ]  # fmt: skip
    assert rows(conn, "SELECT caller, line, resolution FROM kb.graph_callers('code', 'square')") == [
        ("shapes.circle.Circle.area", 10, "import"),
        ("shapes.circle.unit_circle", 16, "import"),
    ]  # fmt: skip
    assert rows(conn, "SELECT callee, path, resolution FROM kb.graph_callees('code', 'unit_circle')") == [
        ("shapes.circle.Circle", "shapes/circle.py", "same_file"),
        ("shapes.base.square", "shapes/base.py", "import"),
        ("shapes.base.Shape.describe", "shapes/base.py", "name_only"),
    ]  # fmt: skip
    assert rows(conn, "SELECT class, relation, depth FROM kb.graph_subclasses('code', 'User')") == [
        ("Admin", "inherits", 1)
    ]
    assert rows(
        conn, "SELECT class, relation, depth FROM kb.graph_subclasses('code', 'Named')"
    ) == [
        ("User", "implements", 1),
        ("Admin", "inherits", 2),
    ]
    assert rows(
        conn, "SELECT class FROM kb.graph_subclasses('code', 'Named', transitive => false)"
    ) == [("User",)]
    assert rows(conn, "SELECT import, resolved_path, resolution FROM kb.graph_imports('code', 'circle.py')") == [
        ("shapes.base", "shapes/base.py", "import"),
        (".base", "shapes/base.py", "import"),
    ]  # fmt: skip
    # The heading graph skips the '#' line inside the fenced block.
    assert rows(conn, "SELECT level, heading, heading_path FROM kb.graph_heading_tree('code', 'README.md')") == [
        (1, "Demo", "Demo"),
        (2, "Build", "Demo > Build"),
        (2, "Use", "Demo > Use"),
    ]  # fmt: skip
    near = rows(
        conn, "SELECT vertex, depth, via, direction FROM kb.graph_neighbours('code', 'Circle', 2)"
    )
    assert ("shapes.base.Shape", 1, "inherits", "out") in near
    assert ("shapes.circle.unit_circle", 1, "calls", "in") in near
    assert ("shapes.base.square", 2, "calls", "out") in near
    assert len({v for v, *_ in near}) == len(near)  # each vertex once, cycles or not
    capped = rows(conn, "SELECT 1 FROM kb.graph_neighbours('code', 'Circle', 5, 3)")
    assert len(capped) == 3


def test_references_follow_files_as_they_change(
    client: Client, conn: psycopg.Connection[Any], provider: FakeProvider, tmp_path: Path
) -> None:
    code_kb(client, conn, provider, tmp_path)
    inherits = "SELECT target, resolution FROM kb.graph_edges WHERE source = 'shapes.circle.Circle' AND kind = 'inherits'"  # noqa: E501
    assert rows(conn, inherits) == [("shapes.base.Shape", "import")]
    client.delete_document("code", "shapes/base.py")
    run_worker(conn.info.dsn)
    # The base class is gone: the reference stays, unresolved, without re-indexing circle.py.
    assert rows(conn, inherits) == [("Shape", "external")]
    client.add_text("code", "shapes/base.py", (tmp_path / "shapes/base.py").read_text())
    run_worker(conn.info.dsn)
    assert rows(conn, inherits) == [("shapes.base.Shape", "import")]


def test_graph_channel_in_hybrid_search(
    client: Client, conn: psycopg.Connection[Any], provider: FakeProvider, tmp_path: Path
) -> None:
    code_kb(client, conn, provider, tmp_path)
    top = rows(
        conn,
        "SELECT c.content, e.graph_rank, e.graph_path FROM kb.explain_search('code',"
        " 'where is square defined?') e JOIN kb.chunk c ON c.id = e.chunk_id ORDER BY e.final_rank",
    )
    assert "def square(x):" in top[0][0]
    assert top[0][1:] == (1, "names shapes.base.square")
    # Its callers follow through the graph, each with the path that reached it.
    paths = [p for _, _, p in top if p]
    assert "shapes.base.square -calls (in)-> shapes.circle.Circle.area" in paths
    hits = rows(
        conn,
        "SELECT chunk_id, graph_path FROM kb.explain_search('code', 'list all methods of class"
        " Shape') WHERE graph_rank IS NOT NULL ORDER BY graph_rank",
    )
    assert hits[0][1] == "names shapes.base.Shape"
    # The chunks of its methods come next, reached along defines.
    methods = {c for (c,) in rows(conn, "SELECT chunk_id FROM kb.graph_members('code', 'Shape')")}
    assert methods <= {c for c, _ in hits[:3]}
    assert any(p.startswith("shapes.base.Shape -defines-> ") for _, p in hits[1:3])

    # Plain words of prose never name a class ("shape", "circle"); written as code they do.
    def named(query: str) -> set[str]:
        return {
            p
            for (p,) in rows(
                conn,
                "SELECT graph_path FROM kb.explain_search('code', %s) WHERE graph_rank IS NOT NULL",
                query,
            )
            if p.startswith("names ")
        }

    assert not named("what shape does a circle have")
    assert named("what does `shape` hold") == {"names shapes.base.Shape"}
    assert "names shapes.circle.Circle" in named("the Circle class: how is its area computed")
    # graph_weight 0 turns the channel off; so does a KB without a knowledge graph.
    off = rows(
        conn,
        "SELECT graph_rank FROM kb.explain_search('code', 'where is square defined?', graph_weight => 0)",
    )
    assert {g for (g,) in off} == {None}


def test_document_graph(
    client: Client, conn: psycopg.Connection[Any], provider: FakeProvider
) -> None:
    remote_kb(client, conn, provider, "docs", **KG, chunker="markdown_header")
    text = (
        "# Alpha\n\nintro\n\n## Beta\n\ntext b\n\n```\n# not a heading\n```\n\n"
        "## Gamma\n\ntext c\n\n# Delta\n\nd\n"
    )
    client.add_text("docs", "doc.md", text)
    run_worker(conn.info.dsn)
    nodes = rows(
        conn, "SELECT graph, kind, name FROM kb.graph_node WHERE graph <> 'code' ORDER BY local_id"
    )
    assert nodes == [
        ("document", "document", "doc.md"),
        ("document", "chunk", "Alpha"),
        ("document", "chunk", "Alpha > Beta"),
        ("document", "chunk", "Alpha > Gamma"),
        ("document", "chunk", "Delta"),
        ("heading", "heading", "Alpha"),
        ("heading", "heading", "Beta"),
        ("heading", "heading", "Gamma"),
        ("heading", "heading", "Delta"),
    ]
    edges = rows(
        conn,
        "SELECT s.local_id, e.kind, t.local_id FROM kb.graph_edge e"
        " JOIN kb.graph_node s ON s.id = e.source_id JOIN kb.graph_node t ON t.id = e.target_id"
        " ORDER BY e.id",
    )
    assert edges == [
        (0, "include", 1), (1, "include", 2), (1, "next", 2), (1, "include", 3), (2, "next", 3),
        (0, "include", 4), (3, "next", 4),
        (0, "contains", 5), (5, "contains", 6), (5, "contains", 7), (0, "contains", 8),
    ]  # fmt: skip
    # Every chunk vertex is its chunk.
    assert rows(
        conn,
        "SELECT count(*) FROM kb.graph_node n JOIN kb.chunk c ON c.id = n.chunk_id"
        " WHERE n.kind = 'chunk' AND c.ordinal = (n.properties->>'ordinal')::integer",
    ) == [(4,)]
    # A heading the query quotes is the graph channel's first hit; its sub-headings follow.
    hits = rows(
        conn,
        "SELECT c.heading_path, e.graph_rank, e.graph_path FROM kb.explain_search('docs',"
        " 'what does alpha say') e JOIN kb.chunk c ON c.id = e.chunk_id"
        " WHERE e.graph_rank IS NOT NULL ORDER BY e.graph_rank",
    )
    assert hits == [
        (["Alpha"], 1, "names Alpha"),
        (["Alpha", "Beta"], 2, "Alpha -contains-> Alpha > Beta"),
        (["Alpha", "Gamma"], 3, "Alpha -contains-> Alpha > Gamma"),
    ]


def test_knowledge_graph_is_off_by_default_and_a_reindex_turns_it_on(
    client: Client, conn: psycopg.Connection[Any], provider: FakeProvider, tmp_path: Path
) -> None:
    remote_kb(client, conn, provider, "plain")
    root = write_repo(tmp_path)
    client.add_text("plain", "shapes/base.py", (root / "shapes/base.py").read_text())
    run_worker(conn.info.dsn)
    assert rows(conn, "SELECT count(*) FROM kb.graph_node") == [(0,)]
    with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState, match="has no knowledge graph"):
        conn.execute("SELECT * FROM kb.graph_definitions('plain', 'square')")
    conn.rollback()
    # Code is chunked at definitions without the graph too.
    paths = rows(conn, "SELECT heading_path FROM kb.chunk ORDER BY ordinal")
    assert paths[0][0][0] == "shapes/base.py"
    client.reindex_knowledge_base("plain", {**active_config(conn, "plain"), **KG})
    run_worker(conn.info.dsn)
    assert rows(conn, "SELECT qualified_name FROM kb.graph_definitions('plain', 'square')") == [
        ("shapes.base.square",)
    ]


def test_bad_input_is_named(
    client: Client, conn: psycopg.Connection[Any], provider: FakeProvider, tmp_path: Path
) -> None:
    code_kb(client, conn, provider, tmp_path)
    cases = [
        ("SELECT * FROM kb.graph_definitions('code', '  ')", "symbol must name a definition"),
        ("SELECT * FROM kb.graph_neighbours('code', 'Circle', 9)", "hops must be between 1 and 5"),
        ("SELECT * FROM kb.graph_neighbours('code', 'Circle', 1, 0)", "max_vertices must be"),
        ("SELECT * FROM kb.graph_callers('nope', 'x')", 'knowledge base "nope" does not exist'),
    ]
    for query, message in cases:
        with pytest.raises(psycopg.Error, match=message):
            conn.execute(query)
        conn.rollback()
    # Unknown names are no error: nothing is defined there.
    assert rows(conn, "SELECT * FROM kb.graph_callers('code', 'no_such_thing')") == []
    bad = [
        ({"strategy": "page_index", "extra": {"model": "x"}, **KG}, "knowledge_graph is an index of chunk_embed"),
        ({"knowledge_graph": {"enabled": True, "graphs": ["triples"]}}, "knowledge_graph.graphs"),
        ({"knowledge_graph": {"enabled": True, "graphs": []}}, "knowledge_graph.graphs"),
        ({"knowledge_graph": {"enabled": True, "graphs": ["code", "code"]}}, "names a graph twice"),
    ]  # fmt: skip
    before = rows(conn, "SELECT count(*) FROM kb.graph_node")
    for cfg, message in bad:
        with pytest.raises(Exception, match=message):
            client.reindex_knowledge_base("code", {**active_config(conn, "code"), **cfg})
    assert rows(conn, "SELECT count(*) FROM kb.graph_node") == before
