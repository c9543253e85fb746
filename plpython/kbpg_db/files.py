"""Files, URLs and media inside the database: a file or URL document's text made in a
limited child process (kbpg_db.convert), the conversion limits from the kb.* settings,
and the media (data: URIs) taken out of a text into kb.document_media."""

from __future__ import annotations

import json
from typing import Any

from kbpg_db.config import from_json

# Conversion limits: setting name -> Limits field (kb.max_document_bytes is the text's).
CONVERT_SETTINGS = {
    "kb.max_document_bytes": "max_text_bytes",
    "kb.max_unzipped_bytes": "max_unzipped_bytes",
    "kb.max_table_rows": "max_rows",
    "kb.max_nesting_depth": "max_depth",
    "kb.convert_memory_mb": "memory_mb",
    "kb.convert_timeout_s": "timeout_s",
    "kb.fetch_timeout_s": "fetch_timeout_s",
}


def convert_limits(plpy: Any) -> Any:
    """The conversion limits, from the kb.* settings where they are set. A session, role or
    database setting (which any user can make for itself) may lower a limit, never raise
    it above the default: that takes postgresql.conf or ALTER SYSTEM."""
    from kbpg_db.convert import Limits
    from kbpg_db.sqlstates import INVALID_PARAMETER, SqlError

    names = list(CONVERT_SETTINGS)
    row = plpy.execute(
        "SELECT " + ", ".join(f"current_setting('{n}', true) AS c{i}" for i, n in enumerate(names))
    )[0]
    limits = Limits()
    for i, name in enumerate(names):
        raw = row[f"c{i}"]
        if not raw:
            continue
        field_name = CONVERT_SETTINGS[name]
        default = getattr(limits, field_name)
        kind = type(default)
        try:
            value = kind(float(raw)) if kind is int else kind(raw)
        except ValueError:
            raise SqlError(
                f"setting {name} must be a number (got {raw!r})", INVALID_PARAMETER
            ) from None
        if value <= 0:
            raise SqlError(f"setting {name} must be more than 0 (got {raw})", INVALID_PARAMETER)
        # Above the default, the value must come from the server's configuration files
        # (kb._server_setting): a session, role or database may only lower a limit. (The
        # text's own cap is a storage choice, settable per session as before; the child
        # process's memory limit still bounds what converting a large file costs.)
        if value > default and name != "kb.max_document_bytes":
            configured = plpy.execute(
                plpy.prepare("SELECT kb._server_setting($1) AS v", ["text"]), [name]
            )[0]["v"]
            try:
                ceiling = max(default, float(configured or 0))
            except ValueError:
                ceiling = default
            if value > ceiling:
                raise SqlError(
                    f"setting {name} = {raw} is above the server's {ceiling:g}, and a session, "
                    "role or database setting may only lower it",
                    INVALID_PARAMETER,
                    hint="a session, role or database may only lower this limit; raise it in "
                    "postgresql.conf or with ALTER SYSTEM",
                )
        setattr(limits, field_name, value)
    return limits


def media_json(found: list[Any]) -> list[dict[str, Any]]:
    import base64

    return [
        {
            "ref": m.ref,
            "media_type": m.media_type,
            "sha256": m.sha256,
            "data": base64.b64encode(m.data).decode("ascii"),
        }
        for m in found
    ]


def extract_media(content: str) -> dict[str, Any]:
    """The text with its data: URIs replaced by kbpg-media: references, and the media."""
    from kbpg_db import media

    text, found = media.extract(content)
    return {"content": text, "media": json.dumps(media_json(found))}


def file_format(file_name: str, head: bytes | None) -> str | None:
    from kbpg_db.convert import format_of

    return format_of(file_name, head)


# A page of a web source gone (HTTP 404 or 410) this many fetches in a row is removed.
GONE_AFTER = 3


def _server_python() -> str:
    """The server's own Python (PL/Python's), never a path a session could set: the
    converter's child runs as the server's OS user."""
    import sys

    return f"/usr/bin/python{sys.version_info[0]}.{sys.version_info[1]}"


def convert_document(plpy: Any, kb_id: int, document_id: int) -> dict[str, Any]:
    """Make a file or URL document's text: convert its stored original (or fetch the URL
    first) in a limited child process, take out its media, and store the text. Returns
    ``{"error": ...}`` with the error that stops the document, ``{}`` when the text is
    stored, or, for a web source's page fetched again, ``{"outcome": ...}``:
    ``unchanged`` (HTTP 304, or the same text), ``kept`` (a failure: the version indexed
    serves on) or ``gone`` (404 or 410 GONE_AFTER times in a row: remove it). A document
    whose original was not kept keeps the text converted before."""

    from kbpg_db import convert

    doc = plpy.execute(
        plpy.prepare(
            "SELECT d.kb_id, d.title, d.source_uri, d.source_format, d.content IS NOT NULL AS "
            "has_text, d.content_hash, d.source_meta, f.file_name, f.data, f.keep "
            "FROM kb.document d LEFT JOIN kb.document_file f "
            "ON f.kb_id = d.kb_id AND f.document_id = d.id "
            "WHERE d.kb_id = $1 AND d.id = $2",
            ["integer", "bigint"],
        ),
        [kb_id, document_id],
    )
    if not doc:
        return {}
    d = doc[0]
    stored = from_json(d["source_meta"]) or {}
    if d["source_format"] == "url" and stored.get("refetch"):
        return _refetch(plpy, kb_id, document_id, d, stored)
    limits = convert_limits(plpy)
    # OCR's languages: the newest generation's (a reindex converts with the new settings).
    ocr = plpy.execute(
        plpy.prepare(
            "SELECT coalesce(i.indexing_config->>'ocr_languages', 'eng') AS languages "
            "FROM kb.kb_index i WHERE i.kb_id = $1 AND i.status IN ('active', 'building') "
            "ORDER BY i.id DESC LIMIT 1",
            ["integer"],
        ),
        [kb_id],
    )
    if ocr:
        limits.ocr_languages = ocr[0]["languages"]
    if d["data"] is not None:
        request: dict[str, Any] = {"file_name": d["file_name"]}
        data = bytes(d["data"])
        what = f'file "{d["file_name"]}"'
    elif d["source_format"] == "url":
        meta = from_json(d["source_meta"]) or {}
        request = {"url": d["source_uri"], "render": bool(meta.get("render", True))}
        data = None
        what = f"page {d['source_uri']}"
    elif d["has_text"]:
        return {}  # the original was dropped after its first conversion
    else:
        return {"error": f'document "{d["title"]}": its original file is not stored; add it again'}
    try:
        out = convert.run_isolated(request, data, limits, _server_python())
    except convert.ConvertError as exc:
        hint = f" ({exc.hint})" if exc.hint else ""
        if request.get("url") and str(exc).startswith(("http://", "https://")):
            what = "page"  # the fetch's own message names the URL it was fetching
        return {"error": f'document "{d["title"]}": {what} {exc}{hint}'}
    _store(plpy, kb_id, document_id, d, out)
    return {}


def _store(plpy: Any, kb_id: int, document_id: int, d: Any, out: Any) -> None:
    """A converted document's text, media and (fetched) original, stored."""
    from kbpg_db import media

    text, found = media.extract(out.content)
    meta = dict(out.meta)
    if found:
        meta["media"] = len(found)
    if text != out.content:
        meta.pop("regions", None)  # their offsets are into the text before the media left
    # Only the version converted: a newer upload meanwhile has another content_hash.
    plpy.execute(
        plpy.prepare(
            "UPDATE kb.document SET content = $3, page_starts = $4, source_meta = $5::jsonb "
            "WHERE kb_id = $1 AND id = $2 AND content_hash = $6",
            ["integer", "bigint", "text", "integer[]", "text", "text"],
        ),
        [kb_id, document_id, text, out.page_starts, json.dumps(meta), d["content_hash"]],
    )
    plpy.execute(
        plpy.prepare("SELECT kb._store_media($1, $2, $3::jsonb)", ["integer", "bigint", "text"]),
        [kb_id, document_id, json.dumps(media_json(found))],
    )
    if out.file is not None:  # a fetched page or file: kept, so a reindex needs no fetch
        plpy.execute(
            plpy.prepare(
                "SELECT kb._keep_file($1, $2, $3, encode(sha256($3), 'hex'), $4, $4)",
                ["integer", "bigint", "bytea", "text"],
            ),
            [kb_id, document_id, out.file, out.file_name],
        )
    elif d["data"] is not None and not d["keep"]:
        plpy.execute(
            plpy.prepare(
                "DELETE FROM kb.document_file WHERE kb_id = $1 AND document_id = $2",
                ["integer", "bigint"],
            ),
            [kb_id, document_id],
        )


def _refetch(
    plpy: Any, kb_id: int, document_id: int, d: Any, stored: dict[str, Any]
) -> dict[str, Any]:
    """A web source's page fetched again, conditionally (its ETag and Last-Modified): a
    page that has not changed changes nothing, a failure keeps the version indexed, and
    a page gone GONE_AFTER times in a row is removed."""
    import hashlib

    from kbpg_db import convert

    request = {
        "url": d["source_uri"],
        "render": bool(stored.get("render", stored.get("rendered", True))),
        "validators": {k: stored[k] for k in ("etag", "last_modified") if stored.get(k)},
    }
    meta = {k: v for k, v in stored.items() if k not in ("refetch", "fetch_error", "gone")}
    try:
        out = convert.run_isolated(request, None, convert_limits(plpy), _server_python())
    except convert.ConvertError as exc:
        outcome = "unchanged"
        if exc.status != 304:
            gone = int(stored.get("gone", 0)) + 1 if exc.status in (404, 410) else 0
            if gone >= GONE_AFTER:
                return {"outcome": "gone", "error": str(exc)}
            meta["fetch_error"] = str(exc)
            if gone:
                meta["gone"] = gone
            outcome = "kept"
        _set_meta(plpy, kb_id, document_id, meta)
        return {"outcome": outcome}
    old = plpy.execute(
        plpy.prepare(
            "SELECT md5(content) AS h FROM kb.document WHERE kb_id = $1 AND id = $2",
            ["integer", "bigint"],
        ),
        [kb_id, document_id],
    )
    from kbpg_db import media

    text, _ = media.extract(out.content)
    if old and old[0]["h"] == hashlib.md5(text.encode("utf-8"), usedforsecurity=False).hexdigest():
        _set_meta(plpy, kb_id, document_id, {**meta, **out.meta})
        return {"outcome": "unchanged"}
    _store(plpy, kb_id, document_id, d, out)
    return {}


def _set_meta(plpy: Any, kb_id: int, document_id: int, meta: dict[str, Any]) -> None:
    plpy.execute(
        plpy.prepare(
            "UPDATE kb.document SET source_meta = $3::jsonb WHERE kb_id = $1 AND id = $2",
            ["integer", "bigint", "text"],
        ),
        [kb_id, document_id, json.dumps(meta)],
    )
