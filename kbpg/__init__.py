"""kbpg: a knowledge base that lives inside PostgreSQL.

The SQL API (``kb.search``, ``kb.add_document``, ...) is the product; this package is the
thin driver around it: the embedded cluster, migrations, the indexing worker, file
loading, a client library and the CLI.
"""

from __future__ import annotations

from kbpg_db import __version__

from kbpg.client import AsyncClient, Client, SearchResult
from kbpg.errors import (
    AccessError,
    BusyError,
    ConfigError,
    ConflictError,
    DataError,
    DocumentError,
    InstallError,
    KbpgError,
    LimitError,
    NotFoundError,
    ProviderError,
    SharingError,
    StateError,
)

__all__ = [
    "AccessError",
    "AsyncClient",
    "BusyError",
    "Client",
    "ConfigError",
    "ConflictError",
    "DataError",
    "DocumentError",
    "InstallError",
    "KbpgError",
    "LimitError",
    "NotFoundError",
    "ProviderError",
    "SearchResult",
    "SharingError",
    "StateError",
    "__version__",
]
