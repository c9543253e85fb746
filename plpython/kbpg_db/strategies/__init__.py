"""Index strategies: one module each, behind one small interface.

A strategy module has ``build(doc, cfg, ctx) -> Built``: a document in, what to store
out. ``Built.chunks`` are the searchable units (kb.chunk rows, with vectors when the
strategy embeds them), so BM25, vector search, fusion, rerank and context assembly serve
every strategy through one code path; ``Built.artifacts`` is the strategy's own data,
written to its own tables by the SQL function ``kb._store_<strategy>``. The job runner,
index generations and the document lifecycle are the same for all of them
(``kb.process_job``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kbpg_db.config import IndexingConfig
from kbpg_db.llm import Llm


class StrategyError(Exception):
    """A document the strategy cannot index: the message names the stage and why."""


@dataclass
class Document:
    title: str
    content: str
    page_starts: list[int] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    file: bytes | None = None  # the original file, for a strategy that reads it (Doc2JSON images)


@dataclass
class Built:
    chunks: list[dict[str, Any]]  # kb.chunk_payload rows, in reading order
    artifacts: dict[str, Any] | None = None
    tokens: int = 0  # tokens embedded
    cost_usd: float | None = 0.0  # embedding cost


@dataclass
class BuildContext:
    """What a build may use: the LLM layer (None when the strategy needs none), the
    embedding key, a progress reporter shown in ``kb.document_status``, and the index
    generation with a way to read it (the triplet graph compares entities with it)."""

    llm: Llm | None
    embedding_key: str | None
    report: Callable[[str], None] = lambda _text: None
    index_id: int | None = None  # the generation being built
    # Reads the database: query((sql, [types]), [args]) -> rows (None outside a job).
    query: Callable[[tuple[str, list[str]], list[Any]], list[Any]] | None = None

    def stage(self, name: str, total: int | None = None) -> Callable[[int, int], None]:
        """A progress callback for one stage: "summarising nodes 12/40"."""

        def progress(done: int, of: int) -> None:
            self.report(f"{name} {done}/{total if total is not None else of}")

        self.report(name)
        return progress


def module(strategy: str) -> Any:
    """The module that builds a strategy's indexes."""
    return importlib.import_module(f"kbpg_db.strategies.{strategy}")


def build(doc: Document, cfg: IndexingConfig, ctx: BuildContext) -> Built:
    result: Built = module(cfg.strategy).build(doc, cfg, ctx)
    return result
