"""Source files: the code graph of one file, chunks at definition boundaries, and the
repository walk that finds them."""

from __future__ import annotations

from pathlib import Path

import pytest
from kbpg_db import chunking, code_graph, tokens
from kbpg_db.config import IndexingConfig
from kbpg_db.features.chunk_embed import build as chunk_embed
from kbpg_db.features.knowledge_graph import build as knowledge_graph

from kbpg.errors import DocumentError
from kbpg.loaders import discover, load_file
from tests.code_repo import FILES, write_repo


def defs(graph: code_graph.CodeGraph) -> list[tuple[str, str]]:
    return [(v.kind, v.qualified_name) for v in graph.definitions()]


def refs(graph: code_graph.CodeGraph) -> set[tuple[str, str, str | None, tuple[str, ...]]]:
    """(source, kind, target, modules) of each reference, the source by qualified name and
    the target by qualified name when resolved in the file, else as written."""
    vs = graph.vertices
    return {
        (
            vs[r.source].qualified_name,
            r.kind,
            vs[r.target].qualified_name if r.target is not None else r.target_name,
            tuple(r.modules),
        )
        for r in graph.references
    }


def test_python() -> None:
    g = code_graph.parse("shapes/circle.py", FILES["shapes/circle.py"])
    assert (g.language, g.module, g.parser) == ("python", "shapes/circle", "tree-sitter")
    assert defs(g) == [
        ("class", "shapes.circle.Circle"),
        ("method", "shapes.circle.Circle.__init__"),
        ("method", "shapes.circle.Circle.area"),
        ("function", "shapes.circle.unit_circle"),
    ]
    assert refs(g) == {
        ("shapes/circle.py", "imports", "shapes.base", ("shapes/base/Shape", "shapes/base/square", "shapes/base")),
        ("shapes/circle.py", "imports", ".base", ("shapes/base", "shapes")),
        ("shapes.circle.Circle", "inherits", "Shape", ("shapes/base", "shapes/base/Shape")),
        ("shapes.circle.Circle.area", "calls", "square", ("shapes/base", "shapes/base/square")),
        ("shapes.circle.unit_circle", "calls", "shapes.circle.Circle", ()),
        ("shapes.circle.unit_circle", "calls", "describe", ()),
        # base.square: the module `base` of the package, or a name in the package.
        ("shapes.circle.unit_circle", "calls", "square", ("shapes", "shapes/base")),
    }  # fmt: skip


def test_self_calls_prefer_the_own_class() -> None:
    src = (
        "class A:\n    def run(self):\n        return self.step()\n    def step(self):\n"
        "        return 1\n\nclass B:\n    def step(self):\n        return 2\n"
    )
    g = code_graph.parse("m.py", src)
    assert ("m.A.run", "calls", "m.A.step", ()) in refs(g)
    calls = [r for r in g.references if r.kind == "calls"]
    assert [(r.resolution, r.confidence) for r in calls] == [("same_file", 1.0)]


def test_typescript_go_rust_java_c_cpp() -> None:
    ts = code_graph.parse("web/app.ts", FILES["web/app.ts"])
    assert defs(ts) == [
        ("class", "User"), ("method", "User.constructor"), ("method", "User.name"),
        ("class", "Admin"), ("method", "Admin.welcome"), ("function", "shout"),
    ]  # fmt: skip
    assert ("User", "implements", "Named", ("web/util",)) in refs(ts)
    assert ("Admin", "inherits", "User", ()) in refs(ts)  # same file: resolved
    assert ("Admin.welcome", "calls", "greet", ("web/util",)) in refs(ts)
    go = code_graph.parse("geo/geo.go", FILES["geo/geo.go"])
    assert defs(go) == [
        ("struct", "geo.Point"), ("interface", "geo.Measurer"),
        ("method", "geo.Measurer.Distance"), ("method", "geo.Point.Distance"),
        ("function", "geo.sq"),
    ]  # fmt: skip
    assert ("geo.Point.Distance", "calls", "Sqrt", ("math",)) in refs(go)
    rs = code_graph.parse("rustlib/src/lib.rs", FILES["rustlib/src/lib.rs"])
    assert defs(rs) == [("enum", "Kind"), ("function", "total")]
    assert ("rustlib/src/lib.rs", "imports", "crate::shapes", ("rustlib/src/shapes",)) in refs(rs)
    shapes = code_graph.parse("rustlib/src/shapes.rs", FILES["rustlib/src/shapes.rs"])
    assert ("impl", "Rect") in defs(shapes) and ("method", "Rect.area") in defs(shapes)
    assert ("Rect", "implements", "Area", ()) in refs(shapes)
    java = code_graph.parse(
        "src/main/java/com/demo/Dog.java", FILES["src/main/java/com/demo/Dog.java"]
    )
    assert java.module == "com/demo"
    assert defs(java) == [
        ("class", "com.demo.Dog"), ("method", "com.demo.Dog.sound"), ("method", "com.demo.Dog.make"),
    ]  # fmt: skip
    # Unqualified names in Java may come from its own package.
    assert ("com.demo.Dog", "inherits", "Animal", ("com/demo",)) in refs(java)
    c = code_graph.parse("native/util.c", FILES["native/util.c"])
    assert defs(c) == [("struct", "pair"), ("function", "add"), ("function", "sum_pair")]
    cpp = code_graph.parse("native/shapes.cpp", FILES["native/shapes.cpp"])
    assert defs(cpp) == [
        ("function", "geo.half"), ("method", "geo.Triangle.area"), ("function", "main"),
    ]  # fmt: skip
    assert cpp.vertices[2].member_of == "Triangle"
    assert ("native/shapes.cpp", "imports", "shapes.h", ("native/shapes.h",)) in refs(cpp)


def test_broken_code_still_yields_its_definitions() -> None:
    g = code_graph.parse(
        "x.py", "def ok():\n    return 1\n\ndef broken(:\n    pass\n\nclass C:\n    pass\n"
    )
    names = [v.name for v in g.definitions()]
    assert "ok" in names and "C" in names


def test_line_scan_for_other_languages() -> None:
    src = "module Shop\n  class Cart\n    def total\n      1\n    end\n  end\nend\n\ndef helper\nend\n"
    g = code_graph.parse("shop.rb", src)
    assert g.parser == "line-scan" and g.language == "ruby"
    assert defs(g) == [
        ("class", "Shop"), ("class", "Shop.Cart"), ("method", "Shop.Cart.total"), ("function", "helper"),
    ]  # fmt: skip
    assert [(v.start_line, v.end_line) for v in g.definitions()] == [
        (1, 7),
        (2, 6),
        (3, 5),
        (9, 10),
    ]
    assert (0, 1) in g.defines and (2, 3) in g.defines and (0, 4) in g.defines
    kt = code_graph.parse("A.kt", "data class A(val x: Int)\nfun main() {}\n")
    assert defs(kt) == [("class", "A"), ("function", "main")]


def test_unknown_languages_are_named() -> None:
    assert code_graph.language_of("notes.md") is None
    with pytest.raises(ValueError, match="not a source file kbpg knows"):
        code_graph.parse("notes.md", "# hi")
    assert knowledge_graph.code_source("a/b.go", {}) == ("a/b.go", "go")
    assert knowledge_graph.code_source("README", {"path": "x/y.rs"}) == ("x/y.rs", "rust")
    assert knowledge_graph.code_source("script", {"language": "python"}) == ("script", "python")
    assert knowledge_graph.code_source("guide.md", {}) is None


def test_module_keys() -> None:
    assert code_graph.module_key("pkg/__init__.py", "python") == "pkg"
    assert code_graph.module_key("web/lib/index.ts", "typescript") == "web/lib"
    # JavaScript's index file is its folder's module too ("./lib" imports it).
    assert code_graph.module_key("web/lib/index.js", "javascript") == "web/lib"
    app = code_graph.parse("web/app.js", "import { pad } from './lib';\npad(1);\n")
    assert {m for r in app.references for m in r.modules} == {"web/lib"}
    assert code_graph.module_key("x/src/lib.rs", "rust") == "x/src"
    assert code_graph.module_key("x/src/a/mod.rs", "rust") == "x/src/a"
    assert code_graph._rust_module("x/src/lib.rs", "crate::a::b") == "x/src/a/b"
    assert code_graph._rust_module("x/src/a/mod.rs", "super::b") == "x/src/b"
    assert code_graph._rust_module("x/src/a.rs", "std::io") == "std/io"
    assert code_graph._python_module("a/b/c.py", 2, "d") == "a/d"


def test_definition_chunks_are_exact_slices_within_the_size() -> None:
    body = "\n".join(f"    total += {i}  # step {i} of the long loop" for i in range(60))
    src = (
        "import os\n\n\n# Adds things.\n@decorator\ndef add(a, b):\n    return a + b\n\n\n"
        f"def long():\n    total = 0\n{body}\n    return total\n\n\n"
        "class K:\n    def one(self):\n        return 1\n\n    def two(self):\n        return 2\n"
    )
    g = code_graph.parse("m.py", src)
    cfg = IndexingConfig(chunk_size=60, chunk_overlap=0)
    rows = chunk_embed.code_rows(g, src, cfg)
    for r in rows:
        assert r["content"] == src[r["char_start"] : r["char_end"]]
        assert tokens.count(r["embed_text"]) <= 60 + 2  # the path shares the budget
    paths = [tuple(r["heading_path"]) for r in rows]
    add = next(r for r in rows if "def add" in r["content"])
    # The comment and decorator above a definition go with it; the imports before it
    # join it under its name.
    assert "import os\n\n\n# Adds things.\n@decorator\ndef add(a, b):" in add["content"]
    assert add["heading_path"] == ["m.py", "function add"]
    assert ("m.py", "function long") in paths and paths.count(("m.py", "function long")) >= 3
    assert ("m.py", "class K") in paths  # the two methods, merged under their class
    assert all("def two" not in r["content"] or "def one" in r["content"] for r in rows)


def test_definition_chunks_without_definitions_are_line_windows() -> None:
    src = "\n".join(f"x{i} = {i}" for i in range(200))
    chunks = chunking.definition_chunks(src, [], "data.py", 50, 0)
    assert len(chunks) > 1
    assert all(c.heading_path == ["data.py"] and c.token_count <= 50 for c in chunks)
    assert all(src[c.char_start : c.char_end] == c.content for c in chunks)


def test_repository_walk(tmp_path: Path) -> None:
    root = write_repo(tmp_path / "demo")
    (root / "web" / ".gitignore").write_text("*.ts\n!util.ts\n")  # nested, with negation
    found = [f.relative_to(root).as_posix() for f, _ in discover([root])]
    assert "web/util.ts" in found and "web/app.ts" not in found
    for skipped in (
        "node_modules/left-pad/index.js", "generated/gen.py", "web/app.min.js", "blob.py",
        ".hidden/secret.py", "shapes/__init__.py",
    ):  # fmt: skip
        assert skipped not in found
    assert "README.md" in found and "native/shapes.h" in found
    doc = load_file(root / "geo" / "geo.go", root=root)
    assert doc.title == "geo/geo.go"
    meta = {"file_type": "go", "path": "geo/geo.go", "language": "go", "repository": "demo"}
    assert doc.metadata == meta
    # A binary or empty source file named directly is reported, not skipped.
    with pytest.raises(DocumentError, match="is empty"):
        load_file(root / "shapes" / "__init__.py")
    with pytest.raises(DocumentError, match="NUL bytes"):
        load_file(root / "blob.py")


def test_comments_and_decorators_above_a_definition_belong_to_it() -> None:
    src = "x = 1\n\n# Adds things.\n// and more\n@decorator\ndef add(a, b):\n    return a + b\n"
    start = src.index("def add")
    assert chunking._with_leading_comments(src, start, 0) == src.index("# Adds")
    # A blank line ends the run; nothing above the floor is taken.
    assert chunking._with_leading_comments("# far\n\ndef f(): pass\n", 8, 0) == 8
    assert chunking._with_leading_comments(src, start, src.index("@")) == src.index("@")


SUPER_CALLS = """
class Base:
    def save(self):
        return 1


class Middle(Base):
    def load(self):
        return 2


class Child(Middle):
    def save(self):
        super().save()
        super(Child, self).load()
        return 3


class Unrelated:
    def save(self):
        return 4


class Leaf(Exception):
    def save(self):
        return super().save()
"""


def test_super_calls_resolve_to_the_nearest_base() -> None:
    graph = code_graph.parse("pkg/shapes.py", SUPER_CALLS)
    by_id = {v.local_id: v for v in graph.vertices}
    owner = {d: c for c, d in graph.defines}
    calls = [
        (by_id[owner[r.source]].name, r.target_name, r.target, r.resolution, r.confidence)
        for r in graph.references
        if r.kind == "calls" and r.qualifier == "super"
    ]
    resolved = {
        (cls, name): (by_id[owner[t]].name if t is not None else None, how, conf)
        for cls, name, t, how, conf in calls
    }
    assert resolved[("Child", "save")] == ("Base", "same_file", 1.0)  # via Middle
    assert resolved[("Child", "load")] == ("Middle", "same_file", 1.0)
    assert resolved[("Leaf", "save")] == (None, None, None)  # Exception's: external


def test_every_from_import_statement_is_an_edge() -> None:
    graph = code_graph.parse(
        "email/parser.py",
        "from email import errors\nfrom email import message\nfrom email.policy import compat32\n",
    )
    imports = [r for r in graph.references if r.kind == "imports"]
    assert len(imports) == 3
    assert ["email/errors" in r.modules for r in imports] == [True, False, False]
    assert ["email/message" in r.modules for r in imports] == [False, True, False]
