"""The indexing features, one folder each, behind one small interface.

Each feature is declared once in ``kbpg_db.features.registry``; its folder holds its
settings model (``settings.py``) and its build code (``build.py``):

- ``chunk_embed``: chunks with vectors and BM25 (sql/200-documents.sql, 300-bm25.sql);
- ``page_index``: heading trees with summaries, PDF structure, Tree Search
  (sql/250-page-index.sql);
- ``graph_index``: the PageIndex tree plus the references between its sections
  (sql/260-graph-index.sql);
- ``doc2json``: fields of a schema extracted per document (sql/270-doc2json.sql);
- ``knowledge_graph``: graphs beside a ChunkEmbed index, the code graph and communities
  (sql/280-284).

A strategy's ``build(doc, cfg, ctx) -> Built`` takes a document in and gives what to
store. ``Built.chunks`` are the searchable units (kb.chunk rows, with vectors when the
strategy embeds them), so BM25, vector search, fusion, rerank and context assembly serve
every strategy through one code path; ``Built.artifacts`` is the strategy's own data,
written to its own tables by the SQL function ``kb._store_<strategy>``. The job runner,
index generations and the document lifecycle are the same for all of them
(``kb.process_job``). Adding one: docs/strategies.md, "Adding a strategy".
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # kbpg_db.config imports the features' settings: no cycle at run time
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
    id: int | None = None  # its kb.document id, when it is being indexed (not a preview)


@dataclass
class Built:
    chunks: list[dict[str, Any]]  # kb.chunk_payload rows, in reading order
    artifacts: dict[str, Any] | None = None
    tokens: int = 0  # tokens embedded
    cost_usd: float | None = 0.0  # embedding cost
    reused: int = 0  # chunks whose vectors came from the document's last build


@dataclass
class BuildContext:
    """What a build may use: the LLM layer (None when the strategy needs none), the
    embedding key, a progress reporter shown in ``kb.document_status``, and the index
    generation with a way to read it (the triplet graph compares entities with it)."""

    llm: Llm | None
    embedding_key: str | None
    report: Callable[[str], None] = lambda _text: None
    index_id: int | None = None  # the generation being built
    kb_id: int | None = None  # its knowledge base
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
    return importlib.import_module(f"kbpg_db.features.{strategy}.build")


def build(doc: Document, cfg: IndexingConfig, ctx: BuildContext) -> Built:
    result: Built = module(cfg.strategy).build(doc, cfg, ctx)
    return result


def _step_seconds(plpy: Any) -> float:
    row = plpy.execute("SELECT current_setting('kb.llm_step_seconds', true) AS v")
    try:
        return float(row[0]["v"]) if row and row[0]["v"] else 10.0
    except ValueError:
        return 10.0


def step(
    plpy: Any, doc: Document, cfg: IndexingConfig, index_id: int | None, kb_id: int | None
) -> dict[str, Any]:
    """One step of indexing a document with its KB's strategy (kb._build_document's row).

    status ``done``: chunks and artifacts to store; ``more``: the step's time is spent and
    the LLM answers so far are cached (the caller commits and calls again); ``failed``:
    the strategy cannot index the document (the message names the stage); ``error``: a
    provider failed after its retries (the job is retried with backoff).
    """
    import json
    import time

    from kbpg_db import config, embedding, keys, llm
    from kbpg_db.sqlstates import DATA_EXCEPTION, EXTERNAL_FAILURE, SqlError

    if cfg.embedding_model == config.LOCAL_MODEL:
        # The worker sets kb.onnx_threads by how many of its connections are busy.
        threads = plpy.execute("SELECT current_setting('kb.onnx_threads', true) AS t")[0]["t"]
        embedding.use_threads(int(threads) if threads and threads.isdigit() else None)
    progress: list[str] = []
    layer: Llm | None = None
    if cfg.uses_llm:
        layer = llm.layer(plpy, cfg.llm(), deadline=time.monotonic() + _step_seconds(plpy))
    ctx = BuildContext(
        layer,
        keys.for_model(plpy, cfg.api_key_name, cfg.embedding_model),
        progress.append,
        index_id=index_id,
        kb_id=kb_id,
        query=(lambda sql, args: list(plpy.execute(plpy.prepare(sql[0], sql[1]), args)))
        if index_id is not None
        else None,
    )
    out: dict[str, Any] = {
        "status": "done",
        "chunks": None,
        "artifacts": None,
        "tokens": 0,
        "cost_usd": 0.0,
        "progress": None,
        "usage": None,
        "error": None,
        "reused": 0,
    }
    try:
        built = build(doc, cfg, ctx)
    except llm.StepYield:
        out["status"] = "more"
    except (llm.LlmError, StrategyError) as exc:
        # A document the strategy cannot index, or a model that cannot answer it, fails
        # for good ("failed"); a provider that failed after its retries may recover
        # ("error": the job is retried with backoff).
        permanent = isinstance(exc, StrategyError) or (
            isinstance(exc, llm.LlmError) and exc.permanent
        )
        out["status"] = "failed" if permanent else "error"
        stage = progress[-1] if progress else "indexing"
        out["error"] = f'document "{doc.title}": {cfg.strategy}, while {stage}: {exc}'
    except ValueError as exc:
        raise SqlError(str(exc), DATA_EXCEPTION) from None
    except embedding.EmbeddingError as exc:
        raise SqlError(f"embedding failed: {exc}", EXTERNAL_FAILURE) from None
    else:
        for chunk in built.chunks:  # a strategy that does not reuse vectors has no hash
            chunk.setdefault("embed_hash", None)
        out.update(
            reused=built.reused,
            chunks=built.chunks,
            artifacts=json.dumps(built.artifacts) if built.artifacts is not None else None,
            tokens=built.tokens,
            cost_usd=built.cost_usd,
        )
    out["progress"] = progress[-1] if progress else None
    out["usage"] = json.dumps(layer.usage.as_json()) if layer else None
    return out
