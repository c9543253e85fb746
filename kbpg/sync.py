"""``kbpg sync``: a knowledge base kept in step with folders and repositories.

Each folder is a source of the KB (``kb.sources``). A sync reads the folder as ``kbpg
ingest`` does (the same files, .gitignore honoured, the same titles), hashes each file's
bytes, and asks the database what changed since the last sync (``kb.sync_plan``):

- a new file is put, a changed one put again (indexed anew; chunks whose text did not
  change keep their vectors);
- an unchanged file is not read past its hash: no conversion, no embedding, no LLM call;
- a renamed file (a file gone and a new one with the same bytes) is moved
  (``kb.move_document``), not embedded again;
- a file gone is removed with its chunks.

A sync that would remove more than half of a source's documents stops before it changes
anything, unless forced: a mistyped or unmounted path must not empty a KB.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kbpg.errors import KbpgError
from kbpg.loaders import discover, load_file

# Share of a source's documents a sync may remove without --force.
MAX_REMOVED_SHARE = 0.5
ACTIONS = ("added", "changed", "moved", "removed", "unchanged", "conflict")


@dataclass
class PlanRow:
    action: str  # added | changed | moved | removed | unchanged | conflict
    key: str  # the file's path in its source: the document's title
    document_id: int | None
    moved_from: str | None


@dataclass
class SyncPlan:
    kb: str
    source: str
    folder: Path
    rows: list[PlanRow]
    files: dict[str, tuple[Path, Path]] = field(default_factory=dict)  # key -> (file, root)
    hashes: dict[str, str] = field(default_factory=dict)
    documents: int = 0  # the source's documents before the sync

    def counts(self) -> dict[str, int]:
        c = Counter(r.action for r in self.rows)
        return {a: c.get(a, 0) for a in ACTIONS}

    def removes_too_much(self) -> bool:
        removed = self.counts()["removed"]
        return removed > 0 and removed > MAX_REMOVED_SHARE * self.documents


def file_hash(path: Path) -> str:
    """sha256 of a file's bytes, read in blocks."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def source_name(folder: Path) -> str:
    """A folder source's default name: its absolute path."""
    return str(folder.resolve())


def _key(path: Path, root: Path) -> str:
    """The title kbpg ingest gives a file (loaders.load_file), its key in the source."""
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.name


def plan(client: Any, kb: str, folder: Path, name: str | None = None) -> SyncPlan:
    """What a sync of ``folder`` into ``kb`` would do. Adds the source when it is new, in
    the caller's transaction (a dry run rolls it back)."""
    if not folder.is_dir():
        raise KbpgError(
            f"{folder}: not a folder",
            hint="kbpg sync follows folders; kbpg ingest adds single files",
        )
    name = name or source_name(folder)
    files: dict[str, tuple[Path, Path]] = {}
    for path, root in discover([folder]):
        files[_key(path, root)] = (path, root)
    hashes = {}
    for key, (path, _) in files.items():
        try:
            hashes[key] = file_hash(path)
        except OSError as exc:
            raise KbpgError(f"{path}: cannot be read ({exc.strerror})") from None
    kind = "repository" if (folder / ".git").exists() else "folder"
    client.add_source(kb, name, str(folder.resolve()), kind)
    rows = client.sync_plan(kb, name, [{"key": k, "hash": h} for k, h in hashes.items()])
    out = SyncPlan(
        kb,
        name,
        folder,
        [PlanRow(r["action"], r["source_key"], r["document_id"], r["moved_from"]) for r in rows],
        files,
        hashes,
    )
    out.documents = sum(
        1 for r in out.rows if r.action in ("changed", "moved", "removed", "unchanged")
    )
    return out


def apply(
    client: Any,
    p: SyncPlan,
    *,
    metadata: dict[str, Any] | None = None,
    usage_mode: str = "rag",
    report: Callable[[str], None] = print,
) -> dict[str, int]:
    """Carry out a plan; returns what was done by action, and ``failed``. A file that
    cannot be loaded is reported and left as it was; the others go on."""
    done = {a: 0 for a in ACTIONS} | {"failed": 0}
    for row in p.rows:
        try:
            if row.action in ("added", "changed"):
                path, root = p.files[row.key]
                doc = load_file(path, root=root, metadata=metadata, usage_mode=usage_mode)
                result = client.put(p.kb, doc)
                client.bind_document(p.kb, p.source, result.document_id, row.key, p.hashes[row.key])
                report(f"{row.action:9s} {row.key}")
            elif row.action == "moved":
                path, root = p.files[row.key]
                doc = load_file(path, root=root, metadata=metadata, usage_mode=usage_mode)
                assert row.document_id is not None
                client.move_document(p.kb, row.document_id, row.key, doc.metadata, row.key)
                report(f"moved     {row.moved_from} -> {row.key}")
            elif row.action == "removed":
                assert row.document_id is not None
                client.delete_document_by_id(p.kb, row.document_id)
                report(f"removed   {row.key}")
            elif row.action == "conflict":
                report(f"conflict  {row.key}: a document of this title belongs to another source")
            done[row.action] += 1
        except KbpgError as exc:
            done["failed"] += 1
            report(f"failed    {row.key}: {exc.message}")
    return done


def sync(
    client: Any,
    kb: str,
    folder: Path,
    *,
    name: str | None = None,
    dry_run: bool = False,
    force: bool = False,
    metadata: dict[str, Any] | None = None,
    usage_mode: str = "rag",
    report: Callable[[str], None] = print,
) -> tuple[SyncPlan, dict[str, int]]:
    """Plan and (unless ``dry_run``) apply a sync of one folder; returns the plan and what
    was done (the plan's counts for a dry run)."""
    if dry_run:
        with client.conn.transaction(force_rollback=True):
            p = plan(client, kb, folder, name)
        for row in p.rows:
            if row.action != "unchanged":
                shown = f"{row.moved_from} -> {row.key}" if row.action == "moved" else row.key
                report(f"{row.action:9s} {shown}")
        return p, p.counts()
    p = plan(client, kb, folder, name)
    if p.removes_too_much() and not force:
        removed = p.counts()["removed"]
        raise KbpgError(
            f"syncing {folder} would remove {removed} of the {p.documents} documents of "
            f'source "{p.source}"; nothing was changed',
            hint="check the path (is it mounted?); --dry-run lists them, --force removes them",
        )
    done = apply(client, p, metadata=metadata, usage_mode=usage_mode, report=report)
    client.finish_sync(kb, p.source, done)
    return p, done
