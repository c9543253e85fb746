"""The features, declared once: what each strategy or feature is, builds and serves.

Everything that lists the features is built from ``FEATURES``: the ``strategy``
setting's values and each strategy's retrieval methods (``kbpg_db.config``), the settings
reference (``make docs``), and, when ``kbpg install`` applies ``sql/``, kb._clear_index's
tables, the row-level security of each feature's tables and kb._search_core's dispatch
to a strategy's own search steps (``kbpg_db.sqlgen``). Adding a strategy:
docs/strategies.md, "Adding a strategy".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from kbpg_db.features.chunk_embed.settings import ChunkEmbedExtra
from kbpg_db.features.doc2json.settings import Doc2JsonExtra
from kbpg_db.features.graph_index.settings import GraphIndexExtra
from kbpg_db.features.knowledge_graph.settings import KnowledgeGraphSettings
from kbpg_db.features.page_index.settings import PageIndexExtra


@dataclass(frozen=True)
class Feature:
    """One indexing feature: a strategy (it has retrieval methods) or a feature beside one
    (the knowledge graph). Its folder ``kbpg_db/features/<name>/`` holds ``settings.py``
    and ``build.py`` (``build(doc, cfg, ctx)``); its SQL file ``kb._store_<name>``."""

    name: str  # the strategy value; its folder under kbpg_db/features
    label: str  # how the docs and the Retrieval Lab name it
    settings: type[BaseModel]  # indexing_config.extra (knowledge graph: .knowledge_graph)
    # Its tables, each keyed by (kb_id, index_id) and readable as its index is: cleared
    # in this order when a generation fails (a table before those it references), and
    # distributed by kb_id with the others.
    tables: tuple[str, ...]
    methods: tuple[str, ...] = ()  # retrieval methods, the default first; () = no strategy
    uses_llm: bool = False  # an LLM builds its index (the knowledge graph: by its settings)
    # Search steps of its own, in its SQL file, which kb._search_core calls for its KBs:
    # kb._search_<name>(plan, query) ranks the candidates in place of the fused channels;
    # kb._after_search_<name>(plan, rows) adds rows after the hits.
    own_search: bool = False
    after_search: bool = False
    # retrieval_config fields only this feature reads (the Retrieval Lab hides them
    # elsewhere).
    retrieval_fields: frozenset[str] = frozenset()
    # The indexing_config.extra values under which its build reads the document's stored
    # original file (kb.process_job passes the file only then); None: never.
    reads_file: dict[str, Any] | None = None
    # The strategies a feature beside one may join (the knowledge graph); () for a strategy.
    beside: tuple[str, ...] = ()
    # Whether a document may carry chunking settings of its own (kb.put_document's
    # chunking), read over its knowledge base's.
    document_chunking: bool = False


FEATURES = (
    Feature(
        "chunk_embed",
        "ChunkEmbed",
        ChunkEmbedExtra,
        tables=(),
        methods=("hybrid", "vector", "full_text"),
        document_chunking=True,
    ),
    Feature(
        "page_index",
        "PageIndex",
        PageIndexExtra,
        tables=("page_index_node", "page_index_toc"),
        methods=("tree_search",),
        uses_llm=True,
        own_search=True,
        retrieval_fields=frozenset({"max_documents", "toc_token_budget"}),
    ),
    Feature(
        "graph_index",
        "GraphIndex",
        GraphIndexExtra,
        tables=("graph_index_reference",),
        methods=("hybrid", "vector", "full_text"),
        uses_llm=True,
        after_search=True,
        retrieval_fields=frozenset({"reference_expansion", "expansion_limit"}),
    ),
    Feature(
        "doc2json",
        "Doc2JSON",
        Doc2JsonExtra,
        tables=("doc2json_document",),
        methods=("vector",),
        uses_llm=True,
        reads_file={"mode": "image"},
    ),
    Feature(
        "knowledge_graph",
        "knowledge graph",
        KnowledgeGraphSettings,
        tables=(
            "graph_community",
            "graph_community_state",
            "graph_entity_merge",
            "graph_edge",
            "graph_node",
        ),
        retrieval_fields=frozenset({"graph_weight", "graph_hops", "graph_limit"}),
        beside=("chunk_embed",),
    ),
)
# The searchable units every strategy stores (term expansion's vocabulary, BM25, vectors,
# chunks), cleared last.
SEARCH_TABLES = ("term_vector", "term_vector_state", "posting", "term_stat", "embedding", "chunk")
STRATEGIES: dict[str, Feature] = {f.name: f for f in FEATURES if f.methods}
DEFAULT_STRATEGY = FEATURES[0].name
KNOWLEDGE_GRAPH = next(f for f in FEATURES if f.name == "knowledge_graph")
METHODS = tuple(dict.fromkeys(m for f in FEATURES for m in f.methods))
# Hybrid fusion's fields: unread where a strategy's one method serves.
FUSION_FIELDS = frozenset({"vector_weight", "rrf_k", "fusion_depth", "fusion", "plain_query_shift"})


def unused_retrieval_fields(strategy: str, indexing_config: dict[str, Any]) -> set[str]:
    """The retrieval_config fields a KB of this strategy and indexing_config never reads
    (the Retrieval Lab hides them): each feature's own fields where it is not in use (a
    strategy other than the KB's; the knowledge graph where it is not enabled), and
    fusion's (with the graph channel's) where hybrid is not among the strategy's
    methods."""
    kg = indexing_config.get("knowledge_graph") or {}
    in_use = {strategy} | (
        {"knowledge_graph"} if isinstance(kg, dict) and kg.get("enabled") else set()
    )
    unused = {field for f in FEATURES if f.name not in in_use for field in f.retrieval_fields}
    spec = STRATEGIES.get(strategy)
    if spec is not None and "hybrid" not in spec.methods:
        unused |= FUSION_FIELDS | KNOWLEDGE_GRAPH.retrieval_fields
    return unused
