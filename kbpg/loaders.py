"""Loading files into documents: Markdown, text and source code as UTF-8, PDF page by
page (pymupdf); Office, HTML, CSV, JSON, EPUB, notebooks and feeds are sent as they are
and converted by the server's indexing job (kb.add_file); folders walked like a
repository (.gitignore, no vendored folders).

Every problem is a :class:`DocumentError` that names the file and what is wrong with
it, so a batch can report it and go on with the next file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kbpg_db import code_graph, convert
from kbpg_db.config import MAX_DOCUMENT_BYTES

from kbpg.errors import DocumentError

TEXT_SUFFIXES = (".md", ".markdown", ".txt")
PDF_SUFFIXES = (".pdf",)
# Source files: read as text, split at their definitions, and parsed into the code graph.
CODE_SUFFIXES = tuple(sorted({*code_graph.TREE_SITTER, *code_graph.LINE_SCAN}))
# Sent to kb.add_file as they are: the indexing job converts them (kbpg_db.convert).
CONVERTED_SUFFIXES = tuple(
    sorted(s for s in convert.FORMATS if s not in TEXT_SUFFIXES + PDF_SUFFIXES)
)
SUPPORTED = TEXT_SUFFIXES + PDF_SUFFIXES + CONVERTED_SUFFIXES + CODE_SUFFIXES
# In a git repository, JSON and CSV files are the code's data and settings
# (package.json, fixtures), not documents; a folder that is not a repository keeps them.
REPO_DATA_SUFFIXES = (".json", ".csv", ".tsv")
# Folders a repository walk never enters: dependencies and build output, not its own code.
VENDORED = frozenset(
    {
        "node_modules",
        "vendor",
        "third_party",
        "third-party",
        "bower_components",
        "site-packages",
        "__pycache__",
        "venv",
        "dist",
        "build",
        "target",
        "out",
        "coverage",
        "Pods",
    }
)
DEFAULT_MAX_BYTES = MAX_DOCUMENT_BYTES  # the server's default limit too


@dataclass
class LoadedDocument:
    title: str
    content: str
    metadata: dict[str, Any] = field(default_factory=dict)
    source_uri: str | None = None
    page_starts: list[int] | None = None
    usage_mode: str = "rag"
    file: bytes | None = None  # the original file, kept beside the text (PDFs)
    file_name: str | None = None
    convert: bool = False  # content is empty: the server converts ``file`` (kb.add_file)
    # Where each stretch of a PDF's text sits on its pages (convert.Region rows), stored in
    # the document's source_meta, not its metadata (chunks copy their document's metadata).
    regions: list[list[Any]] | None = None


def max_bytes() -> int:
    return int(os.environ.get("KBPG_MAX_FILE_BYTES") or DEFAULT_MAX_BYTES)


def _check_text(path: Path, text: str) -> str:
    if "\x00" in text:
        raise DocumentError(f"{path}: contains NUL bytes; this looks like a binary file")
    if not text.strip():
        raise DocumentError(f"{path}: has no text")
    return text


def load_text(path: Path) -> str:
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DocumentError(
            f"{path}: is not valid UTF-8 (byte {exc.start}: {raw[exc.start : exc.start + 1]!r})",
            hint="convert it to UTF-8, e.g. iconv -f latin1 -t utf-8",
        ) from None
    return _check_text(path, text.replace("\r\n", "\n"))


def reads_pdf() -> bool:
    """Whether this client reads PDFs itself (pymupdf, kbpg[server]); a client install
    without it sends them to the server, whose indexing job converts them the same way."""
    import importlib.util

    return importlib.util.find_spec("pymupdf") is not None


def load_pdf(path: Path, data: bytes) -> tuple[str, list[int], dict[str, Any]] | None:
    """Text of every page of the PDF ``data`` (read from ``path``) joined by a blank line,
    each page's start offset, and metadata (kbpg_db.convert, as the server converts).
    None for a PDF with scanned pages: the server reads those by OCR, in the KB's
    languages."""
    try:
        out = convert.convert_pdf(data, convert.Limits(), defer_ocr=True)
    except convert.ConvertError as exc:
        raise DocumentError(f"{path}: {exc}", hint=exc.hint) from None
    if out.meta.get("needs_ocr"):
        return None
    assert out.page_starts is not None
    return out.content, out.page_starts, out.meta


def load_file(
    path: Path,
    *,
    root: Path | None = None,
    metadata: dict[str, Any] | None = None,
    usage_mode: str = "rag",
    title: str | None = None,
) -> LoadedDocument:
    """Load one file. The title defaults to its path relative to ``root`` (or its name)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in SUPPORTED:
        raise DocumentError(
            f"{path}: unsupported file type {suffix or '(none)'}",
            hint="kbpg reads " + ", ".join(SUPPORTED),
        )
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise DocumentError(f"{path}: cannot be read ({exc.strerror})") from None
    if size == 0:
        raise DocumentError(f"{path}: is empty")
    if size > max_bytes():
        raise DocumentError(
            f"{path}: is {size} bytes; the limit is {max_bytes()} bytes",
            hint="split it, or raise KBPG_MAX_FILE_BYTES (and kb.max_document_bytes)",
        )
    meta: dict[str, Any] = {}
    page_starts = None
    regions = None
    original = None
    content = ""
    server_converts = suffix in CONVERTED_SUFFIXES or (suffix in PDF_SUFFIXES and not reads_pdf())
    try:
        if server_converts:
            original = path.read_bytes()
        elif suffix in PDF_SUFFIXES:
            original = path.read_bytes()  # kept too: Doc2JSON's image mode renders its pages
            loaded = load_pdf(path, original)
            if loaded is None:
                server_converts = True
            else:
                content, page_starts, meta = loaded
                regions = meta.pop("regions", None)
        else:
            content = load_text(path)
            if suffix in (".md", ".markdown"):  # as the server converts Markdown files
                content = _check_text(path, convert.readable_markdown(content))
    except OSError as exc:
        raise DocumentError(f"{path}: cannot be read ({exc.strerror})") from None
    if title is None:
        try:
            title = path.relative_to(root).as_posix() if root else path.name
        except ValueError:
            title = path.name
    if server_converts:
        return LoadedDocument(
            title=title,
            content="",
            metadata=dict(metadata or {}),
            source_uri=path.resolve().as_uri(),
            usage_mode=usage_mode,
            file=original,
            file_name=path.name,
            convert=True,
        )
    meta["file_type"] = suffix.lstrip(".")
    if suffix in CODE_SUFFIXES:
        meta["path"] = title
        meta["language"] = code_graph.language_of(path.name)
        if root is not None and (root / ".git").exists():
            meta["repository"] = root.resolve().name
    meta.update(metadata or {})
    return LoadedDocument(
        title=title,
        content=content,
        metadata=meta,
        source_uri=path.resolve().as_uri(),
        page_starts=page_starts,
        usage_mode=usage_mode,
        file=original,
        file_name=path.name if original is not None else None,
        regions=regions,
    )


def _ignore_spec(folder: Path) -> Any:
    """The patterns of a folder's .gitignore, or None."""
    import pathspec

    try:
        lines = (folder / ".gitignore").read_text("utf-8", errors="replace").splitlines()
    except OSError:
        return None
    return pathspec.GitIgnoreSpec.from_lines(lines)


def _ignored(specs: list[tuple[Path, Any]], entry: Path, is_dir: bool) -> bool:
    """Whether a .gitignore of a folder above ``entry`` ignores it."""
    for base, spec in specs:
        rel = entry.relative_to(base).as_posix() + ("/" if is_dir else "")
        if spec.match_file(rel):
            return True
    return False


def _is_empty(path: Path) -> bool:
    try:
        return path.stat().st_size == 0
    except OSError:
        return False


def _looks_binary(path: Path) -> bool:
    try:
        with path.open("rb") as fh:
            return b"\x00" in fh.read(8192)
    except OSError:
        return False  # the loader reports what cannot be read


def discover(paths: list[Path]) -> list[tuple[Path, Path]]:
    """Files under ``paths`` as (file, root) pairs. Folders are walked as a repository
    is: hidden files and folders, vendored and build folders (node_modules, vendor,
    target, ...) and what any .gitignore on the way ignores are skipped, and so are files
    of unsupported types and binary files. A file named directly is returned, so the
    loader reports what is wrong with it."""
    found: list[tuple[Path, Path]] = []
    for p in paths:
        if not p.is_dir():
            found.append((p, p.parent))
            continue
        root = package_root(p)
        if root != p:
            p = p.resolve()  # walked as the absolute path its root is
        specs: list[tuple[Path, Any]] = []
        in_repo = (p / ".git").exists()
        for folder, dirs, files in os.walk(p):
            here = Path(folder)
            specs = [(base, spec) for base, spec in specs if here == base or base in here.parents]
            spec = _ignore_spec(here)
            if spec is not None:
                specs.append((here, spec))

            dirs[:] = sorted(
                d
                for d in dirs
                if not d.startswith(".")
                and d not in VENDORED
                and not _ignored(specs, here / d, True)
            )
            for name in sorted(files):
                f = here / name
                suffix = f.suffix.lower()
                if name.startswith(".") or suffix not in SUPPORTED:
                    continue
                if in_repo and suffix in REPO_DATA_SUFFIXES:
                    continue
                if _ignored(specs, f, False) or not f.is_file():
                    continue
                if f.suffix.lower() in CODE_SUFFIXES and (_is_empty(f) or _looks_binary(f)):
                    continue  # an empty __init__.py is a marker, not a document
                found.append((f, root))
    return found


def package_root(folder: Path) -> Path:
    """Where titles of a folder's files are taken from: the folder, or, when it is a
    Python package (``__init__.py``), the folder above its outermost package, so
    ``kbpg ingest kb path/to/email`` titles ``email/parser.py`` and its imports of
    ``email.errors`` resolve as they do when the whole tree is ingested."""
    if not (folder / "__init__.py").is_file():
        return folder
    top = folder.resolve()
    while top.parent != top and (top.parent / "__init__.py").is_file():
        top = top.parent
    return top.parent
