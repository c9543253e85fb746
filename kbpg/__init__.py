"""kbpg: a knowledge base that lives inside PostgreSQL.

The SQL API (``kb.search``, ``kb.add_document``, ...) is the product; this package is the
thin driver around it: the embedded cluster, migrations, the indexing worker, file
loading, a client library and the CLI.
"""

from __future__ import annotations

from kbpg_db import __version__

from kbpg.client import AsyncClient, Client, SearchResult
from kbpg.errors import (
    ConfigError,
    DocumentError,
    KbpgError,
    NotFoundError,
    ProviderError,
)

__all__ = [
    "AsyncClient",
    "Client",
    "ConfigError",
    "DocumentError",
    "KbpgError",
    "NotFoundError",
    "ProviderError",
    "SearchResult",
    "__version__",
]
