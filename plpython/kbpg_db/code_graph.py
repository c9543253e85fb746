"""The code graph of one source file: its definitions and what they call, import and extend.

tree-sitter parses Python, JavaScript, TypeScript (and TSX), Go, Rust, Java, C and C++
(one grammar wheel per language); other languages get a line scan for ``def``, ``class``,
``function``, ``fn`` ... definitions. A file yields:

- vertices: the file, and each function, method, class, interface, struct, enum, trait and
  impl with its name, qualified name (``shapes.circle.Circle.area``), lines and language;
- structural edges: the file or a class ``defines`` what is declared in it;
- references: ``calls``, ``imports``, ``inherits`` and ``implements``, each naming its
  target as written plus the modules it may come from (through the file's imports, or its
  own package). A target defined in the same file is resolved here (``same_file``);
  others are resolved in SQL across the knowledge base when queried, so a file added
  later resolves the references made to it without re-indexing the files that make them
  (``import`` when a named module holds the target, ``name_only`` when only a name
  matches, with the confidence split between the candidates).

Module keys are path-like for every language (``shapes/base``, ``web/util``, ``com/demo``),
and a reference's module matches a file's key whole or as its last path parts.
"""

from __future__ import annotations

import importlib
import posixpath
import re
from dataclasses import dataclass, field, replace
from functools import cache
from typing import Any, ClassVar

TREE_SITTER = {
    ".py": "python",
    ".pyi": "python",
    ".js": "javascript",
    ".mjs": "javascript",
    ".cjs": "javascript",
    ".jsx": "javascript",
    ".ts": "typescript",
    ".mts": "typescript",
    ".cts": "typescript",
    ".tsx": "tsx",
    ".go": "go",
    ".rs": "rust",
    ".java": "java",
    ".c": "c",
    ".h": "cpp",  # C++'s grammar reads C headers too; C's cannot read C++ ones
    ".cc": "cpp",
    ".cpp": "cpp",
    ".cxx": "cpp",
    ".c++": "cpp",
    ".hpp": "cpp",
    ".hh": "cpp",
    ".hxx": "cpp",
}
LINE_SCAN = {
    ".rb": "ruby",
    ".php": "php",
    ".kt": "kotlin",
    ".kts": "kotlin",
    ".swift": "swift",
    ".scala": "scala",
    ".cs": "csharp",
    ".lua": "lua",
    ".sh": "shell",
    ".bash": "shell",
    ".pl": "perl",
    ".pm": "perl",
    ".ex": "elixir",
    ".exs": "elixir",
    ".dart": "dart",
    ".jl": "julia",
    ".r": "r",
    ".sql": "sql",
}
LANGUAGES = tuple(sorted(set(TREE_SITTER.values()) | set(LINE_SCAN.values())))
DEFINITION_KINDS = ("function", "method", "class", "interface", "struct", "enum", "trait", "impl")
CLASS_LIKE = ("class", "interface", "struct", "enum", "trait", "impl")
# Languages whose files reference one another; a reference never resolves into another
# family (kb._language_family is generated from this).
LANGUAGE_FAMILIES = {"cpp": "c", "typescript": "javascript", "tsx": "javascript"}
# What each kind of reference may point at (kb._graph_target_kinds is generated from this).
TARGET_KINDS = {
    "calls": ("function", "method", "class", "struct"),
    "inherits": ("class", "interface", "struct", "trait"),
    "implements": ("interface", "trait", "class"),
    "imports": ("file",),
}


def language_of(path: str) -> str | None:
    """The language of a file by its name, or None for a file that is not code."""
    suffix = posixpath.splitext(path.lower())[1]
    return TREE_SITTER.get(suffix) or LINE_SCAN.get(suffix)


@dataclass
class Vertex:
    local_id: int
    kind: str
    name: str
    qualified_name: str
    start_line: int  # 1-based, inclusive
    end_line: int
    member_of: str | None = None  # the class a method belongs to, by name
    start_char: int = 0
    end_char: int = 0
    signature: str = ""


@dataclass
class Reference:
    source: int  # local id of the vertex that makes it
    kind: str  # calls, imports, inherits, implements
    target_name: str
    modules: list[str] = field(default_factory=list)
    line: int = 0
    target: int | None = None  # resolved in this file
    confidence: float | None = None
    resolution: str | None = None
    qualifier: str | None = None


@dataclass
class CodeGraph:
    path: str
    language: str
    module: str
    vertices: list[Vertex]
    defines: list[tuple[int, int]]  # (container, definition) local ids
    references: list[Reference]
    parser: str  # tree-sitter or line-scan

    def definitions(self) -> list[Vertex]:
        return [v for v in self.vertices if v.kind != "file"]

    def as_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "language": self.language,
            "module": self.module,
            "parser": self.parser,
            "vertices": [v.__dict__ for v in self.vertices],
            "defines": self.defines,
            "references": [r.__dict__ for r in self.references],
        }


# --- module keys --------------------------------------------------------------------------
def module_key(path: str, language: str, package: str | None = None) -> str:
    """A file's module as a path: ``shapes/base`` (Python, JS/TS, C/C++, Rust), its
    package's path (Java ``com/demo``, Go's directory)."""
    stem = posixpath.splitext(path)[0]
    syntax = _LANGUAGES.get(language)
    return syntax.module(path, stem, package) if syntax is not None else stem


def _python_module(path: str, dots: int, name: str) -> str:
    """``from ..x import y`` in ``path``: the module ``x`` as a path."""
    package = posixpath.dirname(path)
    for _ in range(dots - 1):
        package = posixpath.dirname(package)
    parts = [p for p in (package, name.replace(".", "/")) if p]
    return "/".join(parts)


def _rust_module(path: str, written: str) -> str:
    """A Rust path's module as a path key: ``crate::shapes`` from ``x/src/lib.rs`` is
    ``x/src/shapes``; ``self::`` and ``super::`` count from the file's own module."""
    parts = [p for p in written.split("::") if p]
    if parts and parts[0] == "crate":
        segments = path.split("/")
        root = (
            "/".join(segments[: len(segments) - 1 - segments[::-1].index("src")]) + "/src"
            if "src" in segments[:-1]
            else posixpath.dirname(path)
        )
        return "/".join([root.strip("/"), *parts[1:]]).strip("/")
    if parts and parts[0] in ("self", "super"):
        base = module_key(path, "rust")
        while parts and parts[0] in ("self", "super"):
            if parts.pop(0) == "super":
                base = posixpath.dirname(base)
        return "/".join([base, *parts]).strip("/")
    return "/".join(parts)


def _relative(path: str, spec: str) -> str:
    """A JS/TS/C include or import path as a module key (``./util`` from ``web/app.ts``:
    ``web/util``); a bare package name stays as written."""
    if spec.startswith("."):
        joined = posixpath.normpath(posixpath.join(posixpath.dirname(path), spec))
        return (
            posixpath.splitext(joined)[0]
            if posixpath.splitext(joined)[1] in TREE_SITTER
            else joined
        )
    return spec


# --- tree-sitter: reading nodes -------------------------------------------------------------
_DECLARATOR_WRAPPERS = {
    "function_declarator",
    "pointer_declarator",
    "reference_declarator",
    "parenthesized_declarator",
    "array_declarator",
}


def _text(node: Any) -> str:
    return str(node.text.decode("utf-8", "replace")) if node is not None else ""


def _type_name(node: Any) -> tuple[str, str | None]:
    """A type as written (``Comparable<Animal>``, ``geo::Polygon``, ``models.Base``) as
    (name, qualifier)."""
    if node.type in ("generic_type", "template_type"):
        inner = node.child_by_field_name("name") or (node.named_children or [node])[0]
        return _type_name(inner)
    text = _text(node).strip()
    text = re.sub(r"<.*$", "", text).strip()
    for sep in ("::", "."):
        if sep in text:
            qualifier, _, name = text.rpartition(sep)
            return name, qualifier
    return text, None


def _callee(node: Any) -> tuple[str, str | None]:
    """The called name and its qualifier: ``base.square`` -> (square, base)."""
    kind = node.type
    if kind in ("identifier", "type_identifier", "field_identifier", "property_identifier"):
        return _text(node), None
    for obj_field, name_field in (
        ("object", "attribute"),  # python
        ("object", "property"),  # js/ts member_expression
        ("operand", "field"),  # go selector
        ("value", "field"),  # rust field_expression
        ("argument", "field"),  # c/c++ field_expression
        ("path", "name"),  # rust scoped_identifier
        ("scope", "name"),  # c++ qualified_identifier
    ):
        name = node.child_by_field_name(name_field)
        obj = node.child_by_field_name(obj_field)
        if name is not None and obj is not None:
            return _text(name), _text(obj)
    if kind in ("generic_function", "template_function"):
        inner = node.child_by_field_name("function") or node.child_by_field_name("name")
        if inner is not None:
            return _callee(inner)
    return _type_name(node)


def _declarator_name(node: Any) -> tuple[str, str | None]:
    """C/C++: the name a (function) declarator declares, and the class it qualifies."""
    d = node.child_by_field_name("declarator")
    while d is not None and d.type in _DECLARATOR_WRAPPERS:
        nxt = d.child_by_field_name("declarator")
        d = nxt if nxt is not None else (d.named_children[0] if d.named_children else None)
    if d is None:
        return "", None
    if d.type == "qualified_identifier":
        name_node = d.child_by_field_name("name")
        scope = d.child_by_field_name("scope")
        name, _ = _declarator_name_leaf(name_node)
        return name, (_text(scope).split("::")[-1] if scope is not None else None)
    return _declarator_name_leaf(d)


def _declarator_name_leaf(node: Any) -> tuple[str, str | None]:
    if node is None:
        return "", None
    if node.type == "qualified_identifier":
        name, _ = _declarator_name_leaf(node.child_by_field_name("name"))
        scope = node.child_by_field_name("scope")
        return name, _text(scope).split("::")[-1] if scope is not None else None
    return _text(node), None


def _is_function_declarator(node: Any) -> bool:
    d = node.child_by_field_name("declarator")
    while d is not None and d.type in ("pointer_declarator", "reference_declarator"):
        d = d.child_by_field_name("declarator")
    return d is not None and d.type == "function_declarator"


def _children(node: Any, types: tuple[str, ...]) -> list[Any]:
    return [c for c in node.named_children if c.type in types]


def _descendants(node: Any, types: tuple[str, ...]) -> list[Any]:
    out = []
    stack = [node]
    while stack:
        n = stack.pop()
        if n.type in types:
            out.append(n)
        stack.extend(reversed(n.named_children))
    return out


def _rust_use(arg: Any) -> tuple[str, list[str]]:
    """``crate::shapes::{Area, Rect}`` -> ("crate::shapes", ["Area", "Rect"])."""
    if arg.type == "scoped_use_list":
        path = arg.child_by_field_name("path")
        items = arg.child_by_field_name("list")
        names = [
            _text(c).split("::")[-1] for c in (items.named_children if items is not None else [])
        ]
        return _text(path), [n for n in names if n != "self"]
    if arg.type == "use_as_clause":
        path = _text(arg.child_by_field_name("path"))
        alias = _text(arg.child_by_field_name("alias"))
        return path.rpartition("::")[0], [alias]
    text = _text(arg)
    base, _, name = text.rpartition("::")
    return base, [] if name == "*" else [name]


# --- tree-sitter: the languages --------------------------------------------------------------
class _Language:
    """One tree-sitter language as the walker reads it: the node types that define
    something and that call, and the hooks where languages differ (imports, the file's
    package, a definition's shape, what a class extends). The walker names no language."""

    grammar_module = ""
    grammar_function = "language"
    definitions: ClassVar[dict[str, str]] = {}  # node type -> definition kind
    calls: ClassVar[dict[str, str]] = {}  # node type -> the field naming the callee
    super_calls = True  # super().m() / super.m() call a base class's m

    def grammar(self) -> Any:
        return getattr(importlib.import_module(self.grammar_module), self.grammar_function)()

    def module(self, path: str, stem: str, package: str | None) -> str:
        """The file's module key (module_key)."""
        return stem

    def package_of(self, node: Any) -> str | None:
        """The package a top-level node declares (Java, Go), else None."""
        return None

    def prefix(self, path: str, package: str | None) -> list[str]:
        """What the file's qualified names start with."""
        return []

    def imports(self, w: _Walker, node: Any) -> None:
        """Record an import node's references and the names it binds."""

    def definition(
        self, node: Any, kind: str | None, member_of: str | None
    ) -> tuple[str, str, str | None] | None:
        """(kind, name, member_of) when ``node`` defines something (``kind`` is its node
        type's in ``definitions``), else None."""
        if kind is None:
            return None
        if kind == "function" and member_of is not None:
            kind = "method"
        return kind, _text(node.child_by_field_name("name")), member_of

    def heritage(self, node: Any) -> list[tuple[str, Any]]:
        """(inherits or implements, type node) for what a definition extends."""
        return []

    def callee(self, node: Any, target: Any) -> tuple[str, str | None]:
        """The called name and its qualifier."""
        return _callee(target)

    def qualified_module(self, path: str, qualifier: str) -> str:
        """The module a ``a::b`` qualifier names."""
        return qualifier.replace("::", "/")

    def unqualified_modules(self, w: _Walker) -> list[str]:
        """Where an unqualified name no import binds may be defined."""
        return []


class _Python(_Language):
    grammar_module = "tree_sitter_python"
    definitions: ClassVar[dict[str, str]] = {
        "function_definition": "function",
        "class_definition": "class",
    }
    calls: ClassVar[dict[str, str]] = {"call": "function"}

    def module(self, path: str, stem: str, package: str | None) -> str:
        return stem[: -len("/__init__")] if stem.endswith("/__init__") else stem

    def prefix(self, path: str, package: str | None) -> list[str]:
        return [p for p in module_key(path, "python").split("/") if p]

    def imports(self, w: _Walker, node: Any) -> None:
        if node.type == "import_statement":
            for child in node.named_children:
                name_node = (
                    child.child_by_field_name("name") if child.type == "aliased_import" else child
                )
                alias_node = (
                    child.child_by_field_name("alias") if child.type == "aliased_import" else None
                )
                dotted = _text(name_node)
                module = dotted.replace(".", "/")
                w.ref(0, "imports", dotted, node, modules=[module])
                w.aliases[_text(alias_node) if alias_node is not None else dotted.split(".")[0]] = [
                    module
                ]
            return
        if node.type != "import_from_statement":
            return
        written = _text(node.child_by_field_name("module_name"))
        dots = len(written) - len(written.lstrip("."))
        base = (
            _python_module(w.path, dots, written.lstrip(".")) if dots else written.replace(".", "/")
        )
        names = []
        for child in node.children_by_field_name("name"):
            name_node = (
                child.child_by_field_name("name") if child.type == "aliased_import" else child
            )
            alias_node = (
                child.child_by_field_name("alias") if child.type == "aliased_import" else None
            )
            name = _text(name_node)
            names.append(name)
            # The name is a definition in the module, or a module in the package.
            w.aliases[_text(alias_node) if alias_node is not None else name] = [
                base,
                posixpath.join(base, name.replace(".", "/")) if base else name,
            ]
        targets = [posixpath.join(base, n) if base else n for n in names] + [base]
        shown = written if written.strip(".") else written + ", ".join(names)  # ".base"
        w.ref(0, "imports", shown, node, modules=[t for t in targets if t])

    def heritage(self, node: Any) -> list[tuple[str, Any]]:
        args = node.child_by_field_name("superclasses")
        return [
            ("inherits", child)
            for child in (args.named_children if args is not None else [])
            if child.type in ("identifier", "attribute")
        ]


class _JavaScript(_Language):
    grammar_module = "tree_sitter_javascript"
    definitions: ClassVar[dict[str, str]] = {
        "function_declaration": "function",
        "generator_function_declaration": "function",
        "class_declaration": "class",
        "method_definition": "method",
    }
    calls: ClassVar[dict[str, str]] = {
        "call_expression": "function",
        "new_expression": "constructor",
    }

    def module(self, path: str, stem: str, package: str | None) -> str:
        return posixpath.dirname(stem) if stem.endswith("/index") else stem

    def imports(self, w: _Walker, node: Any) -> None:
        if node.type != "import_statement":
            return
        spec = _text(node.child_by_field_name("source")).strip("'\"`")
        module = _relative(w.path, spec)
        w.ref(0, "imports", spec, node, modules=[module])
        for ident in _descendants(node, ("identifier",)):
            if ident.parent is not None and ident.parent.type != "string":
                w.aliases[_text(ident)] = [module]

    def definition(
        self, node: Any, kind: str | None, member_of: str | None
    ) -> tuple[str, str, str | None] | None:
        if node.type == "variable_declarator":  # const f = () => ...
            value = node.child_by_field_name("value")
            if value is not None and value.type in (
                "arrow_function",
                "function_expression",
                "function",
            ):
                return (
                    ("method" if member_of else "function"),
                    _text(node.child_by_field_name("name")),
                    member_of,
                )
            return None
        return super().definition(node, kind, member_of)

    def heritage(self, node: Any) -> list[tuple[str, Any]]:
        found: list[tuple[str, Any]] = []
        for heritage in _children(node, ("class_heritage", "extends_type_clause")):
            clauses = _children(heritage, ("extends_clause", "implements_clause"))
            if not clauses:  # javascript: class_heritage holds the expression itself
                found += [("inherits", c) for c in heritage.named_children]
            if heritage.type == "extends_type_clause":
                found += [("inherits", c) for c in heritage.named_children]
            for clause in clauses:
                kind = "implements" if clause.type == "implements_clause" else "inherits"
                found += [(kind, c) for c in clause.named_children if c.type != "type_arguments"]
        return found


class _TypeScript(_JavaScript):
    grammar_module = "tree_sitter_typescript"
    definitions: ClassVar[dict[str, str]] = {
        **_JavaScript.definitions,
        "abstract_class_declaration": "class",
        "interface_declaration": "interface",
        "enum_declaration": "enum",
        "method_signature": "method",
        "abstract_method_signature": "method",
    }

    def __init__(self, grammar_function: str):
        self.grammar_function = grammar_function  # TypeScript's or TSX's


class _Go(_Language):
    grammar_module = "tree_sitter_go"
    definitions: ClassVar[dict[str, str]] = {
        "function_declaration": "function",
        "method_declaration": "method",
        "method_elem": "method",
    }
    calls: ClassVar[dict[str, str]] = {"call_expression": "function"}

    def module(self, path: str, stem: str, package: str | None) -> str:
        return posixpath.dirname(path) or (package or "")

    def package_of(self, node: Any) -> str | None:
        if node.type == "package_clause":
            return _text(node).removeprefix("package").strip()
        return None

    def prefix(self, path: str, package: str | None) -> list[str]:
        return package.split(".") if package else []

    def imports(self, w: _Walker, node: Any) -> None:
        if node.type != "import_spec":
            return
        path = _text(node.child_by_field_name("path")).strip('"`')
        alias = node.child_by_field_name("name")
        w.ref(0, "imports", path, node, modules=[path])
        w.aliases[_text(alias) if alias is not None else path.rsplit("/", 1)[-1]] = [path]

    def definition(
        self, node: Any, kind: str | None, member_of: str | None
    ) -> tuple[str, str, str | None] | None:
        if node.type == "type_spec":
            body = node.child_by_field_name("type")
            if body is not None and body.type in ("struct_type", "interface_type"):
                return body.type.split("_")[0], _text(node.child_by_field_name("name")), None
            return None
        if node.type == "method_declaration":
            receiver = node.child_by_field_name("receiver")
            types = _descendants(receiver, ("type_identifier",)) if receiver is not None else []
            return (
                "method",
                _text(node.child_by_field_name("name")),
                (_text(types[0]) if types else None),
            )
        if node.type == "method_elem":
            return "method", _text(node.child_by_field_name("name")), member_of
        return super().definition(node, kind, member_of)

    def unqualified_modules(self, w: _Walker) -> list[str]:
        return [module_key(w.path, "go", w.package)]


class _Rust(_Language):
    grammar_module = "tree_sitter_rust"
    definitions: ClassVar[dict[str, str]] = {
        "function_item": "function",
        "function_signature_item": "function",
        "struct_item": "struct",
        "enum_item": "enum",
        "trait_item": "trait",
        "impl_item": "impl",
    }
    calls: ClassVar[dict[str, str]] = {"call_expression": "function"}
    super_calls = False  # super:: is a module path

    def module(self, path: str, stem: str, package: str | None) -> str:
        return posixpath.dirname(stem) if stem.endswith(("/mod", "/lib", "/main")) else stem

    def imports(self, w: _Walker, node: Any) -> None:
        if node.type == "use_declaration":
            arg = node.child_by_field_name("argument")
            if arg is None:
                return
            base, names = _rust_use(arg)
            module = _rust_module(w.path, base)
            w.ref(0, "imports", base or _text(arg), node, modules=[module])
            for n in names:
                w.aliases[n] = [module]
        elif node.type == "mod_item" and node.child_by_field_name("body") is None:
            name = _text(node.child_by_field_name("name"))
            module = posixpath.join(module_key(w.path, "rust"), name)
            w.ref(0, "imports", name, node, modules=[module])
            w.aliases[name] = [module]

    def definition(
        self, node: Any, kind: str | None, member_of: str | None
    ) -> tuple[str, str, str | None] | None:
        if node.type == "impl_item":
            name, _ = _type_name(node.child_by_field_name("type"))
            return "impl", name, None
        return super().definition(node, kind, member_of)

    def heritage(self, node: Any) -> list[tuple[str, Any]]:
        if node.type == "impl_item":
            trait = node.child_by_field_name("trait")
            return [("implements", trait)] if trait is not None else []
        if node.type == "trait_item":
            bounds = node.child_by_field_name("bounds")
            return [("inherits", c) for c in (bounds.named_children if bounds is not None else [])]
        return []

    def qualified_module(self, path: str, qualifier: str) -> str:
        return _rust_module(path, qualifier)


class _Java(_Language):
    grammar_module = "tree_sitter_java"
    definitions: ClassVar[dict[str, str]] = {
        "class_declaration": "class",
        "record_declaration": "class",
        "interface_declaration": "interface",
        "enum_declaration": "enum",
        "method_declaration": "method",
        "constructor_declaration": "method",
    }
    calls: ClassVar[dict[str, str]] = {
        "method_invocation": "name",
        "object_creation_expression": "type",
    }

    def module(self, path: str, stem: str, package: str | None) -> str:
        return package.replace(".", "/") if package else stem

    def package_of(self, node: Any) -> str | None:
        if node.type == "package_declaration":
            return _text(node).removeprefix("package").removesuffix(";").strip()
        return None

    def prefix(self, path: str, package: str | None) -> list[str]:
        return package.split(".") if package else []

    def imports(self, w: _Walker, node: Any) -> None:
        if node.type != "import_declaration":
            return
        full = _text(node).removeprefix("import").removesuffix(";").strip()
        full = full.removeprefix("static ").strip()
        package, _, name = full.rpartition(".")
        module = package.replace(".", "/")
        w.ref(0, "imports", full, node, modules=[module])
        if name != "*":
            w.aliases[name] = [module]

    def heritage(self, node: Any) -> list[tuple[str, Any]]:
        found: list[tuple[str, Any]] = []
        sup = node.child_by_field_name("superclass")
        if sup is not None:
            found += [("inherits", c) for c in sup.named_children]
        for name, kind in (("interfaces", "implements"), ("extends_interfaces", "inherits")):
            holder = node.child_by_field_name(name) or next(iter(_children(node, (name,))), None)
            for tl in _children(holder, ("type_list",)) if holder is not None else []:
                found += [(kind, c) for c in tl.named_children]
        return found

    def callee(self, node: Any, target: Any) -> tuple[str, str | None]:
        name, qualifier = _callee(target)
        if node.type == "method_invocation":  # obj.m(): the object is the qualifier
            obj = node.child_by_field_name("object")
            qualifier = _text(obj) if obj is not None else None
        return name, qualifier

    def unqualified_modules(self, w: _Walker) -> list[str]:
        return [module_key(w.path, "java", w.package)]


class _C(_Language):
    grammar_module = "tree_sitter_c"
    definitions: ClassVar[dict[str, str]] = {"function_definition": "function"}
    calls: ClassVar[dict[str, str]] = {"call_expression": "function"}

    def imports(self, w: _Walker, node: Any) -> None:
        if node.type != "preproc_include":
            return
        target = node.child_by_field_name("path")
        spec = _text(target).strip('"<>')
        local = target is not None and target.type == "string_literal"
        path = (
            posixpath.normpath(posixpath.join(posixpath.dirname(w.path), spec)) if local else spec
        )
        w.ref(0, "imports", spec, node, modules=[path])
        w.includes.append(posixpath.splitext(path)[0])

    def definition(
        self, node: Any, kind: str | None, member_of: str | None
    ) -> tuple[str, str, str | None] | None:
        t = node.type
        if t in ("struct_specifier", "enum_specifier", "union_specifier"):
            if node.child_by_field_name("body") is None or node.child_by_field_name("name") is None:
                return None
            return (
                ("enum" if t == "enum_specifier" else "struct"),
                _text(node.child_by_field_name("name")),
                member_of,
            )
        if t == "function_definition":
            name, scope = _declarator_name(node)
            if scope is not None:  # C++'s Class::method defined outside its class
                return "method", name, scope
            return ("method" if member_of else "function"), name, member_of
        return super().definition(node, kind, member_of)

    def unqualified_modules(self, w: _Walker) -> list[str]:
        return list(w.includes)


class _Cpp(_C):
    grammar_module = "tree_sitter_cpp"
    definitions: ClassVar[dict[str, str]] = {
        "function_definition": "function",
        "class_specifier": "class",
    }
    calls: ClassVar[dict[str, str]] = {"call_expression": "function", "new_expression": "type"}

    def definition(
        self, node: Any, kind: str | None, member_of: str | None
    ) -> tuple[str, str, str | None] | None:
        if node.type in ("field_declaration", "declaration") and member_of is not None:
            if _is_function_declarator(node):  # a method declared in its class
                name, _ = _declarator_name(node)
                return "method", name, member_of
            return None
        return super().definition(node, kind, member_of)

    def heritage(self, node: Any) -> list[tuple[str, Any]]:
        return [
            ("inherits", c)
            for clause in _children(node, ("base_class_clause",))
            for c in clause.named_children
            if c.type in ("type_identifier", "qualified_identifier", "template_type")
        ]


# Each language tree-sitter reads (TREE_SITTER's values), described once.
_LANGUAGES: dict[str, _Language] = {
    "python": _Python(),
    "javascript": _JavaScript(),
    "typescript": _TypeScript("language_typescript"),
    "tsx": _TypeScript("language_tsx"),
    "go": _Go(),
    "rust": _Rust(),
    "java": _Java(),
    "c": _C(),
    "cpp": _Cpp(),
}


@cache
def _parser(language: str) -> Any:
    """A tree-sitter parser for a language, from its grammar wheel (imported on first use)."""
    import tree_sitter

    return tree_sitter.Parser(tree_sitter.Language(_LANGUAGES[language].grammar()))


_SCOPES = {"namespace_definition", "mod_item", "internal_module", "module"}
_SELF = {"self", "this", "cls", "Self", "super"}
_SUPER = re.compile(r"^super\s*(\(.*\))?$", re.S)


class _Walker:
    """Walks one file's tree, recording definitions and references; what differs by
    language it asks the file's ``_Language``."""

    def __init__(self, path: str, language: str, source: bytes):
        self.path = path
        self.language = language
        self.syntax = _LANGUAGES[language]
        self.source = source
        self.vertices: list[Vertex] = []
        self.defines: list[tuple[int, int]] = []
        self.references: list[Reference] = []
        self.aliases: dict[str, list[str]] = {}  # a name in scope -> the modules it may be
        self.package: str | None = None
        self.includes: list[str] = []
        # Character offsets of line starts, for exact chunk boundaries.
        text = source.decode("utf-8", "replace")
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self.text = text

    # -- helpers
    def add(self, kind: str, name: str, qualified: str, node: Any, member_of: str | None) -> Vertex:
        start, end = node.start_point[0] + 1, node.end_point[0] + 1
        first = _text(node).split("\n", 1)[0].strip()
        v = Vertex(
            len(self.vertices),
            kind,
            name,
            qualified,
            start,
            end,
            member_of,
            self.line_starts[start - 1],
            self.line_starts[end] if end < len(self.line_starts) else len(self.text),
            first[:200],
        )
        self.vertices.append(v)
        return v

    def ref(
        self,
        source: int,
        kind: str,
        name: str,
        node: Any,
        qualifier: str | None = None,
        modules: list[str] | None = None,
    ) -> None:
        if not name or (kind != "imports" and not re.match(r"^[A-Za-z_$~][\w$~]*$", name)):
            return
        if modules is None:
            modules = self.modules_for(name, qualifier)
        self.references.append(
            Reference(source, kind, name, modules, node.start_point[0] + 1, qualifier=qualifier)
        )

    def modules_for(self, name: str, qualifier: str | None) -> list[str]:
        """Where a referenced name may be defined: the module an import binds it or its
        qualifier to; else where the language looks (Go's and Java's own package, C's and
        C++'s included files)."""
        if qualifier and qualifier not in _SELF:
            head = re.split(r"\.|::", qualifier)[0]
            if head in self.aliases:
                return self.aliases[head]
            if "::" in qualifier:
                return [self.syntax.qualified_module(self.path, qualifier)]
            return []
        if name in self.aliases:
            return self.aliases[name]
        return self.syntax.unqualified_modules(self)

    def walk(self, node: Any, owner: Vertex | None, nest: list[str]) -> None:
        syntax = self.syntax
        syntax.imports(self, node)
        package = syntax.package_of(node)
        if package is not None:
            self.package = package
        member_of = owner.name if owner is not None and owner.kind in CLASS_LIKE else None
        found = syntax.definition(node, syntax.definitions.get(node.type), member_of)
        here = owner
        if found is not None and found[1]:
            kind, name, member_of = found
            qualified = ".".join(
                [*nest, *([member_of] if member_of and member_of not in nest else []), name]
            )
            v = self.add(kind, name, qualified, node, member_of)
            container = owner.local_id if owner is not None else 0
            self.defines.append((container, v.local_id))
            for ref_kind, type_node in syntax.heritage(node):
                type_name, qualifier = _type_name(type_node)
                self.ref(v.local_id, ref_kind, type_name, type_node, qualifier)
            nest = qualified.split(".")
            here = v
        elif node.type in _SCOPES and node.child_by_field_name("body") is not None:
            name_node = node.child_by_field_name("name")
            if name_node is not None:
                nest = [*nest, _text(name_node)]
        callee_field = syntax.calls.get(node.type)
        if callee_field is not None:
            target = node.child_by_field_name(callee_field)
            if target is not None:
                name, qualifier = syntax.callee(node, target)
                source = here.local_id if here is not None else 0
                if syntax.super_calls and qualifier and _SUPER.match(qualifier):
                    # super().m(), super(C, self).m(), super.m(): a base class's m
                    # (_resolve_local finds it, or names the bases' modules).
                    self.ref(source, "calls", name, node, "super", [])
                else:
                    self.ref(source, "calls", name, node, qualifier)
        for child in node.named_children:
            self.walk(child, here, nest)


# --- the line scan for other languages -----------------------------------------------------------
_SCAN = re.compile(
    r"^(?P<indent>[ \t]*)(?:(?:export|public|private|protected|internal|static|abstract|final|"
    r"open|override|async|local|sealed|data|pub)\s+)*"
    r"(?P<kw>def|defp|defmodule|class|module|function|func|fun|fn|sub|interface|struct|enum|"
    r"trait|object|protocol|extension)\s+(?P<name>[A-Za-z_][\w.?!]*)",
)
_KIND = {
    "def": "function",
    "defp": "function",
    "function": "function",
    "func": "function",
    "fun": "function",
    "fn": "function",
    "sub": "function",
    "defmodule": "class",
    "class": "class",
    "module": "class",
    "object": "class",
    "interface": "interface",
    "protocol": "interface",
    "struct": "struct",
    "enum": "enum",
    "trait": "trait",
    "extension": "impl",
}


def _line_scan(path: str, language: str, text: str) -> CodeGraph:
    lines = text.split("\n")
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)
    file_v = Vertex(0, "file", posixpath.basename(path), path, 1, len(lines), None, 0, len(text))
    vertices = [file_v]
    defines: list[tuple[int, int]] = []
    stack: list[tuple[int, Vertex]] = []  # (indent, vertex) of open class-like definitions
    for i, line in enumerate(lines):
        m = _SCAN.match(line)
        if m is None:
            continue
        indent = len(m.group("indent").expandtabs(4))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        kind = _KIND[m.group("kw")]
        owner = stack[-1][1] if stack else None
        name = m.group("name").split(".")[-1]
        if kind == "function" and owner is not None:
            kind = "method"
        qualified = ".".join([*(o.name for _, o in stack), name])
        v = Vertex(
            len(vertices),
            kind,
            name,
            qualified,
            i + 1,
            i + 1,
            owner.name if owner else None,
            starts[i],
            starts[i + 1] if i + 1 < len(starts) else len(text),
            line.strip()[:200],
        )
        vertices.append(v)
        defines.append((owner.local_id if owner else 0, v.local_id))
        if kind in CLASS_LIKE:
            stack.append((indent, v))
    # A definition runs to the next one at its indent or less.
    defs = vertices[1:]
    for j, v in enumerate(defs):
        indent = len(lines[v.start_line - 1]) - len(lines[v.start_line - 1].lstrip())
        end = len(lines)
        for w in defs[j + 1 :]:
            w_indent = len(lines[w.start_line - 1]) - len(lines[w.start_line - 1].lstrip())
            if w_indent <= indent:
                end = w.start_line - 1
                break
        # Not the blank lines after it, nor the closing lines of what encloses it.
        while end > v.start_line and (
            not lines[end - 1].strip()
            or len(lines[end - 1]) - len(lines[end - 1].lstrip()) < indent
        ):
            end -= 1
        v.end_line = end
        v.end_char = starts[end] if end < len(starts) else len(text)
    return CodeGraph(path, language, module_key(path, language), vertices, defines, [], "line-scan")


# --- the entry point ------------------------------------------------------------------------
def parse(path: str, text: str, language: str | None = None) -> CodeGraph:
    """The code graph of one file. ``path`` is the file's path in its repository (it
    gives module keys and qualified names); ``language`` defaults to the one its name says."""
    language = language or language_of(path)
    if language is None:
        raise ValueError(
            f"{path}: not a source file kbpg knows (languages: {', '.join(LANGUAGES)})"
        )
    if language not in set(TREE_SITTER.values()):
        return _line_scan(path, language, text)
    source = text.encode("utf-8")
    tree = _parser(language).parse(source)
    w = _Walker(path, language, source)
    lines = max(1, text.count("\n") + (0 if text.endswith("\n") else 1))
    w.vertices.append(
        Vertex(0, "file", posixpath.basename(path), path, 1, lines, None, 0, len(text))
    )
    # The package first: Java and Go name qualified names after it.
    for child in tree.root_node.named_children:
        package = w.syntax.package_of(child)
        if package is not None:
            w.package = package
    prefix = w.syntax.prefix(path, w.package)
    for child in tree.root_node.named_children:
        w.walk(child, None, prefix)
    graph = CodeGraph(
        path,
        language,
        module_key(path, language, w.package),
        w.vertices,
        w.defines,
        [],
        "tree-sitter",
    )
    graph.references = _resolve_local(graph, w.references)
    return graph


def _resolve_local(graph: CodeGraph, refs: list[Reference]) -> list[Reference]:
    """References to definitions of the same file resolved (``same_file``; a call on
    ``self``/``this`` prefers the enclosing class's member), one per (source, kind,
    target) so a loop of calls is one edge."""
    by_name: dict[str, list[Vertex]] = {}
    for v in graph.definitions():
        by_name.setdefault(v.name, []).append(v)
    owner_of = {d: c for c, d in graph.defines}
    out: list[Reference] = []
    seen: set[tuple[int, str, str, str | None]] = set()
    resolved: set[tuple[int, str, int]] = set()
    classes = {v.name: v.local_id for v in graph.vertices if v.kind in CLASS_LIKE}
    bases: dict[int, list[int]] = {}  # a class's bases defined in this file
    base_modules: dict[int, list[str]] = {}  # the modules any of its bases may come from
    for r in refs:
        if r.kind != "inherits":
            continue
        if r.target_name in classes and not r.qualifier:
            bases.setdefault(r.source, []).append(classes[r.target_name])
        known = base_modules.setdefault(r.source, [])
        known += [m for m in r.modules if m not in known]

    def class_of(local_id: int) -> int:
        """The class a definition is in (itself, if a class), else its outermost owner."""
        while local_id in owner_of and graph.vertices[local_id].kind not in CLASS_LIKE:
            local_id = owner_of[local_id]
        return local_id

    for r in refs:
        # One import edge per statement (two `from email import ...` lines differ in
        # what they import), one edge per other reference and target.
        key = (
            r.source,
            r.kind,
            r.target_name,
            "|".join(r.modules) if r.kind == "imports" else r.qualifier,
        )
        if key in seen:
            continue
        seen.add(key)
        if r.kind == "imports":
            out.append(r)
            continue
        allowed = TARGET_KINDS[r.kind]
        cands = [
            v
            for v in by_name.get(r.target_name, [])
            if v.kind in allowed and v.local_id != r.source
        ]
        if r.qualifier == "super" and graph.language != "rust":
            # The nearest base defined in this file that has the member, breadth first
            # through the inheritance; else another file's (the bases' modules) or none.
            cls = class_of(r.source)
            r = replace(r, modules=base_modules.get(cls, []))
            found: list[Vertex] = []
            frontier, visited = list(bases.get(cls, [])), {cls}
            while frontier and not found:
                found = [v for v in cands if owner_of.get(v.local_id) in frontier]
                visited.update(frontier)
                frontier = [b for f in frontier for b in bases.get(f, []) if b not in visited]
            cands = found
        elif r.qualifier in _SELF and cands:
            cls = class_of(r.source)
            mine = [v for v in cands if owner_of.get(v.local_id) == cls]
            cands = mine or cands
        elif r.qualifier and r.qualifier not in _SELF and r.modules:
            cands = []  # qualified by another module: not this file's
        if not cands:
            out.append(r)
            continue
        for v in cands:
            if (r.source, r.kind, v.local_id) in resolved:
                continue  # another call site of the same target
            resolved.add((r.source, r.kind, v.local_id))
            out.append(
                Reference(
                    r.source,
                    r.kind,
                    r.target_name,
                    r.modules,
                    r.line,
                    v.local_id,
                    round(1.0 / len(cands), 3),
                    "same_file",
                    r.qualifier,
                )
            )
    return out
