"""Embedded media: ``data:`` URIs (base64 or percent-encoded) taken out of a document's text.

A document converted from DOCX, PPTX or HTML, or Markdown written with inline images,
can carry megabytes of base64 that would be chunked, embedded and counted against token
budgets. Each ``data:`` URI is stored once per document (``kb.document_media``) and its
place in the text gets a short reference, ``kbpg-media:<sha256 prefix>.<ext>``, which
``kb.media(kb, ref)`` turns back into the bytes.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import urllib.parse
from dataclasses import dataclass

PREFIX = "kbpg-media:"
# A data URI with base64 content. No whitespace inside: it could not be told from the
# words after it.
_DATA_URI = re.compile(
    r"data:(?P<type>[A-Za-z]+/[A-Za-z0-9.+-]+)(?:;[A-Za-z0-9=._-]+)*;base64,"
    r"(?P<data>[A-Za-z0-9+/]+={0,2})"
)
# And one with its content percent-encoded (an SVG icon written inline:
# data:image/svg+xml,%3Csvg...%3E), up to where a Markdown link or an attribute ends.
_ENCODED_URI = re.compile(
    r"data:(?P<type>[A-Za-z]+/[A-Za-z0-9.+-]+)(?:;(?!base64)[A-Za-z0-9=._-]+)*,"
    r"(?P<data>[^\s)\"'<>\]]+)"
)
EXTENSIONS = {
    "image/png": "png",
    "image/jpeg": "jpg",
    "image/jpg": "jpg",
    "image/gif": "gif",
    "image/webp": "webp",
    "image/svg+xml": "svg",
    "image/bmp": "bmp",
    "image/tiff": "tiff",
    "image/x-emf": "emf",
    "image/x-wmf": "wmf",
    "application/pdf": "pdf",
    "audio/mpeg": "mp3",
    "video/mp4": "mp4",
}
REF_HEX = 16  # 64 bits of the sha256 name a medium within its document


@dataclass(frozen=True)
class Medium:
    ref: str  # "<sha256[:16]>.<ext>", the part after kbpg-media:
    media_type: str
    data: bytes
    sha256: str


def has_data_uri(text: str) -> bool:
    return "data:" in text and (
        _DATA_URI.search(text) is not None or _ENCODED_URI.search(text) is not None
    )


def extract(text: str) -> tuple[str, list[Medium]]:
    """``text`` with each base64 data URI replaced by its reference, and the media (each
    distinct one once). A payload that is not valid base64 stays as it was."""
    found: dict[str, Medium] = {}

    def replace(m: re.Match[str], encoded: bool = False) -> str:
        media_type = m.group("type").lower()
        payload = m.group("data")
        if encoded:
            data = urllib.parse.unquote_to_bytes(payload)
        else:
            try:
                data = base64.b64decode(payload, validate=True)
            except (binascii.Error, ValueError):
                return m.group(0)
        if not data:
            return m.group(0)
        digest = hashlib.sha256(data).hexdigest()
        ext = EXTENSIONS.get(media_type) or re.sub(r"[^a-z0-9]", "", media_type.split("/")[1])[:8]
        ref = f"{digest[:REF_HEX]}.{ext or 'bin'}"
        found.setdefault(ref, Medium(ref, media_type, data, digest))
        return PREFIX + ref

    out = _DATA_URI.sub(replace, text)
    if "data:" in out:
        out = _ENCODED_URI.sub(lambda m: replace(m, encoded=True), out)
    return out, list(found.values())
