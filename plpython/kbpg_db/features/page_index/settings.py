"""PageIndex's settings (indexing_config.extra)."""

from __future__ import annotations

from pydantic import Field

from kbpg_db.configbase import LlmSettings, YesNo


class PageIndexExtra(LlmSettings):
    """PageIndex: a document's heading tree with per-node summaries."""

    if_add_node_summary: YesNo = Field(
        "yes",
        description="summarise each node (short nodes keep their text; without a model, the "
        "section's lead text)",
    )
    if_add_doc_description: YesNo = Field(
        "yes", description="a one-paragraph description of each document for tree search"
    )
    max_token_num_each_node: int = Field(
        20000, ge=50, le=1_000_000, description="a leaf over this many tokens is split"
    )
    summary_token_threshold: int = Field(
        200, ge=0, le=100_000, description="nodes this short keep their own text as summary"
    )
    toc_check_page_num: int = Field(
        20, ge=1, le=1000, description="PDF pages searched for a printed table of contents"
    )
    max_page_num_each_node: int = Field(
        10, ge=1, le=10000, description="a PDF leaf over this many pages is split by pages"
    )
    min_token_num_each_node: int = Field(
        40,
        ge=0,
        le=100_000,
        description="a leaf this short whose boundary kbpg drew (a split part, a heading "
        "inferred from layout or by the LLM) joins its previous sibling; 0 keeps every leaf",
    )
