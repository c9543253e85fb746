"""Validated knowledge-base settings: ``indexing_config`` and ``retrieval_config``.

The same pydantic models check configs in the database (``kb.validate_*_config``,
called on every write) and in the Python client, so an error names the field at fault
wherever it is caught. Unknown fields are errors, not silently ignored.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

LOCAL_MODEL = "local/all-MiniLM-L6-v2"


class ModelSpec(BaseModel):
    """What we know of an embedding model: its vector size and the longest chunk it takes.

    ``max_chunk_tokens`` is in cl100k tokens. For the local MiniLM the model reads 256
    WordPiece tokens; English technical prose runs ~25% more WordPieces than cl100k
    tokens, so 200 cl100k tokens is the longest chunk that is never cut short.
    """

    dimensions: int
    max_chunk_tokens: int


KNOWN_MODELS: dict[str, ModelSpec] = {
    LOCAL_MODEL: ModelSpec(dimensions=384, max_chunk_tokens=200),
    "openai/text-embedding-3-small": ModelSpec(dimensions=1536, max_chunk_tokens=8191),
    "openai/text-embedding-3-large": ModelSpec(dimensions=3072, max_chunk_tokens=8191),
    "openai/text-embedding-ada-002": ModelSpec(dimensions=1536, max_chunk_tokens=8191),
    "cohere/embed-english-v3.0": ModelSpec(dimensions=1024, max_chunk_tokens=512),
    "cohere/embed-multilingual-v3.0": ModelSpec(dimensions=1024, max_chunk_tokens=512),
    "voyage/voyage-3": ModelSpec(dimensions=1024, max_chunk_tokens=32000),
    "voyage/voyage-3-lite": ModelSpec(dimensions=512, max_chunk_tokens=32000),
    "gemini/text-embedding-004": ModelSpec(dimensions=768, max_chunk_tokens=2048),
    "mistral/mistral-embed": ModelSpec(dimensions=1024, max_chunk_tokens=8192),
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class IndexingConfig(_Strict):
    """How documents of a knowledge base are chunked and embedded (ChunkEmbed)."""

    strategy: Literal["chunk_embed"] = "chunk_embed"
    chunker: Literal["markdown_header", "recursive", "fixed_size"] = "markdown_header"
    chunk_size: int = Field(200, ge=16, le=32000, description="cl100k tokens per chunk, at most")
    chunk_overlap: int = Field(20, ge=0, description="cl100k tokens shared by neighbours")
    embedding_model: str = Field(LOCAL_MODEL, min_length=1, max_length=200)
    embedding_dimensions: int | None = Field(None, ge=1, le=16000)
    max_input_tokens: int | None = Field(
        None, ge=16, description="longest chunk the model takes (cl100k); known models know it"
    )
    title_line: bool = Field(
        False, description="first line is the title: repeat it in every chunk's text"
    )
    truncate_for_embedding: bool = Field(
        False, description="allow chunks longer than the model input; the model reads the start"
    )
    api_base: str | None = Field(None, max_length=2000)
    api_key_name: str | None = Field(
        None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", description="env var / kb.<name> setting"
    )
    batch_tokens: int = Field(250_000, ge=100, le=2_000_000)
    batch_size: int = Field(64, ge=1, le=4096)
    max_retries: int = Field(5, ge=0, le=20)
    request_timeout_s: float = Field(60.0, gt=0, le=3600)
    text_search_config: str = Field("english", pattern=r"^[A-Za-z_][A-Za-z0-9_.]*$")

    @model_validator(mode="after")
    def _check(self) -> IndexingConfig:
        if self.chunk_overlap >= self.chunk_size:
            raise ValueError(
                f"chunk_overlap ({self.chunk_overlap}) must be smaller than "
                f"chunk_size ({self.chunk_size})"
            )
        spec = KNOWN_MODELS.get(self.embedding_model)
        if spec is None and self.embedding_model.startswith("local/"):
            raise ValueError(
                f"unknown local embedding model {self.embedding_model!r}; "
                f"the local model is {LOCAL_MODEL!r}"
            )
        if spec is None and self.embedding_dimensions is None:
            raise ValueError(
                f"embedding_dimensions is required for model {self.embedding_model!r} "
                "(kbpg does not know its vector size)"
            )
        if spec is not None and self.embedding_dimensions not in (None, spec.dimensions):
            if self.embedding_model == LOCAL_MODEL:
                raise ValueError(f"{LOCAL_MODEL} makes {spec.dimensions}-dimension vectors")
        limit = self.max_input_tokens or (spec.max_chunk_tokens if spec else 8191)
        if self.chunk_size > limit and not self.truncate_for_embedding:
            raise ValueError(
                f"chunk_size {self.chunk_size} exceeds the {limit}-token input of "
                f"{self.embedding_model}; lower chunk_size or set truncate_for_embedding"
            )
        return self

    @property
    def dimensions(self) -> int:
        if self.embedding_dimensions is not None:
            return self.embedding_dimensions
        return KNOWN_MODELS[self.embedding_model].dimensions


class RetrievalConfig(_Strict):
    """Defaults for ``kb.search``; every field can be overridden per call."""

    method: Literal["hybrid", "vector", "full_text"] = "hybrid"
    top_k: int = Field(10, ge=1, le=1000)
    vector_weight: float = Field(0.5, ge=0.0, le=1.0)
    rrf_k: float = Field(60.0, gt=0.0, le=10000.0)
    fusion_depth: int = Field(100, ge=1, le=10000, description="candidates from each channel")
    similarity_threshold: float | None = Field(None, ge=-1.0, le=1.0)
    bm25_k1: float = Field(1.2, ge=0.0, le=10.0)
    bm25_b: float = Field(0.75, ge=0.0, le=1.0)
    # 100: recall@10 0.99 on real MiniLM vectors, 0.968 on the harder synthetic 100k set
    # of `make bench` (200 reaches 0.992 there, at ~9 ms more per hybrid query).
    ef_search: int = Field(100, ge=1, le=1000)
    rerank: bool = False
    rerank_model: str | None = Field(None, max_length=2000)
    rerank_api_base: str | None = Field(None, max_length=2000)
    rerank_api_key_name: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    candidate_count: int = Field(20, ge=1, le=1000, description="candidates the reranker sees")
    rerank_threshold: float | None = None
    filter: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _check(self) -> RetrievalConfig:
        if self.rerank and not self.rerank_model:
            raise ValueError("rerank is on but rerank_model is not set")
        return self


def describe_error(exc: ValidationError, what: str) -> str:
    """One line naming every field at fault, e.g. ``indexing_config.chunk_size: ...``."""
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        where = f"{what}.{loc}" if loc else what
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


def validate(kind: str, value: dict[str, Any] | None) -> dict[str, Any]:
    """Validate and complete a config; raise ``ValueError`` naming the bad fields."""
    models: dict[str, type[BaseModel]] = {
        "indexing_config": IndexingConfig,
        "retrieval_config": RetrievalConfig,
    }
    model = models[kind]
    if value is not None and not isinstance(value, dict):
        raise ValueError(f"{kind} must be a JSON object, not {type(value).__name__}")
    try:
        return model.model_validate(value or {}).model_dump(mode="json")
    except ValidationError as exc:
        raise ValueError(describe_error(exc, kind)) from None
