"""The knowledge graph's settings (indexing_config.knowledge_graph)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from kbpg_db.configbase import LlmSettings

GRAPHS = ("document", "heading", "code", "triplets")


class KnowledgeGraphSettings(LlmSettings):
    """The knowledge-graph index of a ChunkEmbed KB,
    beside its vectors and BM25: graphs of vertices and edges in kb.graph_node and
    kb.graph_edge, read by the graph SQL functions and by search's graph channel. The LLM
    settings (``model``, ``api_base``, ...) serve the triplet graph."""

    enabled: bool = Field(False, description="build the knowledge graph (a reindex to change)")
    graphs: list[Literal[GRAPHS]] = Field(  # type: ignore[valid-type]
        default_factory=lambda: ["document", "heading", "code"],
        min_length=1,
        description="document: document -include-> chunk, chunk -include-> chunk where "
        "sections nest, chunk -next-> chunk; heading: a Markdown document's headings; code: "
        "a source file's definitions with calls, imports, inherits and implements; "
        "triplets: (subject, predicate, object) from each chunk by the LLM",
    )
    max_triplets_per_chunk: int = Field(
        20, ge=1, le=200, description="triplets graph: facts kept from one chunk, at most"
    )
    entity_merge: Literal["rules", "llm"] = Field(
        "rules",
        description="candidate duplicate entities (the same name with another type, similar "
        "names): rules merges type synonyms and plurals only; llm asks the model about the "
        "rest and records its answer",
    )
    merge_similarity: float = Field(
        0.6, gt=0.0, le=1.0, description="trigram similarity that makes two names candidates"
    )
    merge_vector_similarity: float = Field(
        0.9,
        gt=0.0,
        le=1.0,
        description="cosine similarity of two names' vectors (same type) that makes them candidates",
    )
    communities: bool = Field(
        False,
        description="detect communities over the triplet graph and have the LLM summarise "
        "each (kb.graph_communities); the worker keeps them current as documents change",
    )

    @model_validator(mode="after")
    def _distinct(self) -> KnowledgeGraphSettings:
        if len(set(self.graphs)) != len(self.graphs):
            raise ValueError("knowledge_graph.graphs names a graph twice")
        if self.communities and "triplets" not in self.graphs:
            raise ValueError("knowledge_graph.communities are built over the triplets graph")
        if self.enabled and "triplets" in self.graphs and not self.model:
            raise ValueError(
                "knowledge_graph.model is required for the triplets graph (the LLM that "
                "reads each chunk; with api_base for an OpenAI-compatible endpoint)"
            )
        return self
