"""GraphIndex's settings (indexing_config.extra): PageIndex's and its references'."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from kbpg_db.features.page_index.settings import PageIndexExtra


class GraphIndexExtra(PageIndexExtra):
    """GraphIndex: the PageIndex tree plus the cross-references between its sections."""

    enrichment: Literal["auto", "all", "rules"] = Field(
        "auto",
        description="which sections the LLM reads for references: auto, those whose "
        "reference-like wording the rules left unresolved; all, every section with text; "
        "rules, none (explicit references only)",
    )
    enrichment_model: str | None = Field(
        None, min_length=1, max_length=200, description="the LLM for references; default model"
    )
    max_references_per_node: int = Field(
        20, ge=1, le=200, description="references kept from one section, at most"
    )
