"""Doc2JSON's settings (indexing_config.extra) and the schema of the fields it extracts."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, model_validator

from kbpg_db.configbase import LlmSettings, one_of, shown

FIELD_TYPES = ("string", "number", "integer", "boolean", "array", "object")
_FIELD_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class SchemaField:
    """One field of a Doc2JSON schema. An array has an ``item_type`` (and ``fields`` when
    its items are objects); an object has ``fields``."""

    name: str
    type: str
    description: str = ""
    examples: tuple[Any, ...] = ()
    item_type: str | None = None
    fields: tuple[SchemaField, ...] = ()


def _schema_fields(value: Any, prefix: str = "") -> tuple[SchemaField, ...]:
    """A list of field specs, each checked; an error names the field by its path
    (``line_items[].quantity``)."""
    where = f'extra.json_schema field "{prefix[:-1]}"' if prefix else "extra.json_schema"
    if not isinstance(value, list) or not value:
        raise ValueError(f"{where}: fields must be a non-empty list")
    out: list[SchemaField] = []
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise ValueError(f"{where}: fields[{i}] must be an object with name and type")
        name = item.get("name")
        if not isinstance(name, str) or not _FIELD_NAME.match(name) or len(name) > 100:
            raise ValueError(
                f"{where}: fields[{i}] has name {shown(name)}, not a valid field name (letters, "
                "digits and _, not starting with a digit, at most 100 characters)"
            )
        path = f'extra.json_schema field "{prefix}{name}"'
        unknown = sorted(set(item) - _FIELD_KEYS)
        if unknown:
            raise ValueError(f'{path}: unknown key "{unknown[0]}"')
        kind = item.get("type")
        if kind not in FIELD_TYPES:
            raise ValueError(f"{path}: unknown type {shown(kind)} (expected {one_of(FIELD_TYPES)})")
        description = item.get("description") or ""
        if not isinstance(description, str) or len(description) > 2000:
            raise ValueError(f"{path}: description must be text of at most 2000 characters")
        examples = item.get("examples") or []
        if not isinstance(examples, list) or len(examples) > 20:
            raise ValueError(f"{path}: examples must be a list of at most 20 values")
        item_type = item.get("item_type")
        fields: tuple[SchemaField, ...] = ()
        if kind == "array":
            item_type = item_type or ("object" if item.get("items") else "string")
            scalar_or_object = tuple(t for t in FIELD_TYPES if t != "array")
            if item_type not in scalar_or_object:
                raise ValueError(
                    f"{path}: unknown item_type {shown(item_type)} (expected "
                    f"{one_of(scalar_or_object)})"
                )
            if item_type == "object":
                items = item.get("items")
                if not isinstance(items, dict) or "fields" not in items:
                    raise ValueError(
                        f'{path}: an array of objects needs "items": '
                        '{"type": "object", "fields": [...]}'
                    )
                fields = _schema_fields(items["fields"], f"{prefix}{name}[].")
        elif item_type is not None or item.get("items") is not None:
            raise ValueError(f"{path}: item_type and items belong to arrays")
        if kind == "object":
            fields = _schema_fields(item.get("fields"), f"{prefix}{name}.")
        elif kind != "array" and item.get("fields") is not None:
            raise ValueError(f"{path}: fields belong to objects")
        out.append(SchemaField(name, kind, description, tuple(examples), item_type, fields))
    names = [f.name for f in out]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f'{where}: field "{prefix}{twice[0]}" is named twice')
    return tuple(out)


_FIELD_KEYS = {"name", "type", "description", "examples", "item_type", "items", "fields"}


def parse_json_schema(value: Any) -> tuple[SchemaField, ...]:
    """extra.json_schema ({"fields": [...]}) as field specs; a ValueError names the field."""
    if not isinstance(value, dict) or "fields" not in value:
        raise ValueError('extra.json_schema must be an object {"fields": [...]}')
    unknown = sorted(set(value) - {"fields", "type", "description"})
    if unknown:
        raise ValueError(f'extra.json_schema: unknown key "{unknown[0]}"')
    return _schema_fields(value["fields"])


class Doc2JsonExtra(LlmSettings):
    """Doc2JSON: fields of a schema extracted per document by an LLM over sliding windows."""

    json_schema: dict[str, Any] = Field(
        ..., description='{"fields": [{"name", "type", "description", "examples", ...}]}'
    )
    mode: Literal["text", "image"] = Field(
        "text",
        description="text: the model reads the document's text in windows; image: a PDF's "
        "pages as images (a vision model), for scans and forms",
    )
    extraction_model: str | None = Field(
        None, min_length=1, max_length=200, description="the LLM for extraction; default model"
    )
    window_tokens: int = Field(4000, ge=200, le=200_000, description="text mode window size")
    window_overlap: int = Field(200, ge=0, le=100_000, description="tokens windows share")
    pages_per_window: int = Field(3, ge=1, le=20, description="image mode: pages per window")
    image_dpi: int = Field(110, ge=36, le=300, description="image mode: rendering resolution")

    @model_validator(mode="after")
    def _check(self) -> Doc2JsonExtra:
        parse_json_schema(self.json_schema)
        if self.window_overlap >= self.window_tokens:
            raise ValueError(
                f"extra.window_overlap ({self.window_overlap}) must be smaller than "
                f"extra.window_tokens ({self.window_tokens})"
            )
        return self

    @property
    def fields(self) -> tuple[SchemaField, ...]:
        return parse_json_schema(self.json_schema)
