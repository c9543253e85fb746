"""ChunkEmbed's settings (indexing_config.extra)."""

from __future__ import annotations

from kbpg_db.configbase import Strict


class ChunkEmbedExtra(Strict):
    """ChunkEmbed has no strategy-specific settings: chunking and embedding are top-level."""
