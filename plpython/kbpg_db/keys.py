"""Provider keys, read where the server may read them: never from a table."""

from __future__ import annotations

import os
from typing import Any

# A model's provider (its prefix) -> the environment variable its key is read from.
DEFAULT_KEY_NAMES = {
    "openai": "OPENAI_API_KEY",
    "cohere": "COHERE_API_KEY",
    "voyage": "VOYAGE_API_KEY",
    "gemini": "GEMINI_API_KEY",
    "mistral": "MISTRAL_API_KEY",
    "jina_ai": "JINA_AI_API_KEY",
}


def api_key(plpy: Any, name: str | None) -> str | None:
    """A provider key: session setting ``kb.<name>`` first, then the server's environment."""
    if not name:
        return None
    row = plpy.execute(
        plpy.prepare("SELECT current_setting($1, true) AS v", ["text"]), ["kb." + name.lower()]
    )
    value = row[0]["v"] if row else None
    return value or os.environ.get(name)


def default_key_name(model: str) -> str | None:
    provider = model.split("/", 1)[0] if "/" in model else "openai"
    return DEFAULT_KEY_NAMES.get(provider)


def for_model(plpy: Any, key_name: str | None, model: str | None) -> str | None:
    """The key for a model: its settings' ``api_key_name``, else its provider's."""
    return api_key(plpy, key_name or default_key_name(model or ""))
