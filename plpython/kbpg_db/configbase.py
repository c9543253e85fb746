"""What every settings model shares: strict models (an unknown field is an error) and the
chat-model settings of the features that call an LLM. ``kbpg_db.config`` and each
feature's ``settings`` module build on these."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


YesNo = Literal["yes", "no"]


class LlmSettings(Strict):
    """The chat model a strategy calls while indexing (through litellm).

    ``model`` is any litellm chat model (``openai/gpt-4o-mini``, ``anthropic/...``,
    ``ollama/...``) or, with ``api_base``, a model behind any OpenAI-compatible endpoint.
    Keys come from the session setting ``kb.<api_key_name>`` or the server's environment.
    """

    model: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        description="a litellm chat model (openai/gpt-4o-mini, anthropic/..., ollama/...), "
        "or openai/<name> with api_base for any OpenAI-compatible server; unset: the steps "
        "that need a model fall back to rules where the feature has them",
    )
    api_base: str | None = Field(
        None, max_length=2000, description="the endpoint's URL, for a self-hosted model"
    )
    api_key_name: str | None = Field(
        None,
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="the key's name: read from the setting kb.<name>, else the server's "
        "environment variable <name> (default: the provider's, e.g. OPENAI_API_KEY)",
    )
    llm_concurrency: int = Field(7, ge=1, le=64, description="LLM calls in flight per endpoint")
    request_timeout_s: float = Field(120.0, gt=0, le=3600, description="seconds per LLM call")
    max_retries: int = Field(
        5, ge=0, le=20, description="retries of a rate-limited, timed-out or 5xx call, backing off"
    )
    temperature: float = Field(0.0, ge=0.0, le=2.0, description="the model's sampling temperature")


def shown(value: Any) -> str:
    """A value as an error message quotes it (JSON, at most 80 characters)."""
    return json.dumps(value, default=str)[:80]


def one_of(values: tuple[str, ...], last: str = "or") -> str:
    """'a, b or c'."""
    return values[0] if len(values) == 1 else f"{', '.join(values[:-1])} {last} {values[-1]}"
