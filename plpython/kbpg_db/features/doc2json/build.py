"""Doc2JSON: the fields of a schema extracted from each document by an LLM.

A window slides over the document: in text mode ``window_tokens`` cl100k tokens sharing
``window_overlap`` with the one before; in image mode ``pages_per_window`` pages rendered
to PNG (pymupdf, from the original PDF kept in ``kb.document_file``) and sent as image
parts to a vision model. Per window the LLM answers a brief summary and the fields it can
fill from what it sees (the answer format is a JSON schema built from the KB's fields).

Merging, window by window in reading order: a scalar takes the last value given (a null
or missing one changes nothing); an array gains the items it does not hold yet (identical
items once); an object merges key by key under the same rules. A value of the wrong type
is never stored: it is reported under ``errors`` with its field, window and value.

Every scalar stored is grounded: ``sources[path]`` says which window gave it and the
character span of the document text it came from (an exact match, else case-insensitive,
else number formats, else the closest fuzzy match of at least 0.8 similarity; ``none``
when the text holds nothing like it, e.g. a value read off an image).

A last call writes the document summary from the windows' summaries; it is embedded,
and the document's one chunk is that summary followed by its fields, so ``vector`` search
returns documents with their summary and fields.
"""

from __future__ import annotations

import base64
import difflib
import json
import re
from dataclasses import dataclass
from typing import Any

from kbpg_db import embedding, tokens
from kbpg_db.config import IndexingConfig
from kbpg_db.features import BuildContext, Built, Document, StrategyError
from kbpg_db.features.doc2json.settings import Doc2JsonExtra, SchemaField
from kbpg_db.features.page_index.build import text_field
from kbpg_db.llm import Llm, Request

FUZZY_MIN = 0.8
_JSON_TYPES = {
    "string": "string",
    "number": "number",
    "integer": "integer",
    "boolean": "boolean",
    "array": "array",
    "object": "object",
}


@dataclass
class Window:
    index: int
    char_start: int
    char_end: int
    pages: tuple[int, int] | None = None  # image mode: first and last page (1-based)
    tokens: int = 0


# --- windows --------------------------------------------------------------------------------
def text_windows(text: str, size: int, overlap: int) -> list[Window]:
    """Windows of ``size`` tokens, each sharing exactly ``overlap`` tokens with the one
    before; the last one may be shorter. Character offsets are exact."""
    enc = tokens.encoding()
    ids = enc.encode(text, disallowed_special=())
    if not ids:
        return []
    decoded, offsets = enc.decode_with_offsets(ids)
    if decoded != text:  # (invalid UTF-8 never reaches here: text is a str)
        raise StrategyError("windowing: the text does not survive tokenisation unchanged")
    out: list[Window] = []
    step = size - overlap
    start = 0
    while True:
        end = min(start + size, len(ids))
        c0 = offsets[start]
        c1 = offsets[end] if end < len(ids) else len(text)
        out.append(Window(len(out), c0, c1, tokens=end - start))
        if end == len(ids):
            return out
        start += step


def page_windows(page_starts: list[int], text_len: int, per: int) -> list[Window]:
    out: list[Window] = []
    n = len(page_starts)
    for first in range(0, n, per):
        last = min(first + per, n) - 1
        end = page_starts[last + 1] if last + 1 < n else text_len
        out.append(Window(len(out), page_starts[first], end, (first + 1, last + 1)))
    return out


def render_pages(data: bytes, first: int, last: int, dpi: int) -> list[str]:
    """PNG data URLs of pages ``first``..``last`` (1-based) of a PDF."""
    import pymupdf

    try:
        pdf = pymupdf.open(stream=data, filetype="pdf")
    except Exception as exc:
        raise StrategyError(f"the stored PDF cannot be opened: {exc}") from None
    with pdf:
        urls = []
        for number in range(first - 1, min(last, pdf.page_count)):
            png = pdf[number].get_pixmap(dpi=dpi).tobytes("png")
            urls.append("data:image/png;base64," + base64.b64encode(png).decode())
        return urls


# --- the answer's schema and types ----------------------------------------------------------
def field_schema(f: SchemaField) -> dict[str, Any]:
    if f.type == "object":
        return {"type": ["object", "null"], "properties": properties(f.fields)}
    if f.type == "array":
        if f.item_type == "object":
            items: dict[str, Any] = {"type": "object", "properties": properties(f.fields)}
        else:
            items = {"type": _JSON_TYPES[f.item_type or "string"]}
        return {"type": ["array", "null"], "items": items}
    return {"type": [_JSON_TYPES[f.type], "null"]}


def properties(fields: tuple[SchemaField, ...]) -> dict[str, Any]:
    out = {}
    for f in fields:
        spec = field_schema(f)
        if f.description:
            spec["description"] = f.description
        out[f.name] = spec
    return out


def answer_schema(fields: tuple[SchemaField, ...]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "summary": {"type": "string"},
            "fields": {"type": "object", "properties": properties(fields)},
        },
        "required": ["summary", "fields"],
    }


def describe_fields(fields: tuple[SchemaField, ...], indent: str = "") -> str:
    lines = []
    for f in fields:
        kind = f"array of {f.item_type}" if f.type == "array" else f.type
        line = f"{indent}- {f.name} ({kind})"
        if f.description:
            line += f": {f.description}"
        if f.examples:
            line += f" (e.g. {', '.join(json.dumps(e) for e in f.examples[:5])})"
        lines.append(line)
        if f.fields:
            lines.append(describe_fields(f.fields, indent + "  "))
    return "\n".join(lines)


def _check_window(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict) or not isinstance(value.get("fields"), dict):
        raise ValueError('expected {"summary": "...", "fields": {...}}')
    summary = value.get("summary")
    return {
        "summary": summary.strip() if isinstance(summary, str) else "",
        "fields": value["fields"],
    }


def _scalar_ok(kind: str, value: Any) -> tuple[bool, Any]:
    if kind == "string":
        return isinstance(value, str), value
    if kind == "boolean":
        return isinstance(value, bool), value
    if isinstance(value, bool):
        return False, value
    if kind == "integer":
        if isinstance(value, float) and value.is_integer():
            return True, int(value)  # 3.0 is the integer 3: nothing is lost
        return isinstance(value, int), value
    return isinstance(value, (int, float)), value  # number


def checked(
    fields: tuple[SchemaField, ...],
    given: dict[str, Any],
    window: int,
    prefix: str,
    errors: list[dict[str, Any]],
) -> dict[str, Any]:
    """The values of ``given`` that have their field's type; the rest go to ``errors``."""
    by_name = {f.name: f for f in fields}
    out: dict[str, Any] = {}
    for name, value in given.items():
        path = prefix + name
        f = by_name.get(name)
        if f is None:
            errors.append(
                {"field": path, "window": window, "error": "not in the schema", "value": value}
            )
            continue
        if value is None:
            continue
        if f.type == "object":
            if not isinstance(value, dict):
                errors.append(_type_error(path, window, "an object", value))
                continue
            out[name] = checked(f.fields, value, window, path + ".", errors)
        elif f.type == "array":
            if not isinstance(value, list):
                errors.append(_type_error(path, window, "an array", value))
                continue
            items = []
            for k, item in enumerate(value):
                if f.item_type == "object":
                    if not isinstance(item, dict):
                        errors.append(_type_error(f"{path}[{k}]", window, "an object", item))
                        continue
                    items.append(checked(f.fields, item, window, f"{path}[].", errors))
                    continue
                ok, item = _scalar_ok(f.item_type or "string", item)
                if ok:
                    items.append(item)
                elif item is not None:
                    errors.append(_type_error(f"{path}[{k}]", window, _a(f.item_type), item))
            out[name] = items
        else:
            ok, value = _scalar_ok(f.type, value)
            if ok:
                out[name] = value
            else:
                errors.append(_type_error(path, window, _a(f.type), value))
    return out


def _a(kind: str | None) -> str:
    return {"integer": "an integer", "object": "an object", "array": "an array"}.get(
        kind or "string", f"a {kind}"
    )


def _type_error(path: str, window: int, expected: str, value: Any) -> dict[str, Any]:
    got = type(value).__name__.replace("str", "string").replace("dict", "object")
    return {
        "field": path,
        "window": window,
        "error": f"expected {expected}, got {got}",
        "value": value,
    }


# --- merging and grounding --------------------------------------------------------------------
def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def merge(
    into: dict[str, Any],
    new: dict[str, Any],
    fields: tuple[SchemaField, ...],
    window: int,
    prefix: str,
    ground: Any,
    sources: dict[str, Any],
) -> None:
    """Merge one window's checked values into the document's: last scalar wins, arrays
    gain new items, objects merge key by key. ``ground(value)`` spans a scalar."""
    by_name = {f.name: f for f in fields}
    for name, value in new.items():
        f = by_name[name]
        path = prefix + name
        if f.type == "object":
            merge(into.setdefault(name, {}), value, f.fields, window, path + ".", ground, sources)
        elif f.type == "array":
            held = into.setdefault(name, [])
            for item in value:
                if any(_same(item, h) for h in held):
                    continue
                held.append(item)
                for at, leaf in flatten(item, f"{path}[{len(held) - 1}]"):
                    sources[at] = {"window": window, **ground(leaf)}
        else:
            into[name] = value
            sources[path] = {"window": window, **ground(value)}


def flatten(value: Any, path: str = "") -> Any:
    """(path, scalar) for every scalar in a value: ``a.b``, ``items[0].sku``."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from flatten(item, f"{path}.{key}" if path else key)
    elif isinstance(value, list):
        for k, item in enumerate(value):
            yield from flatten(item, f"{path}[{k}]")
    else:
        yield path, value


def _number_forms(value: float | int) -> list[str]:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    forms = [str(value)]
    if isinstance(value, int):
        forms += [f"{value:,}", f"{value:,}.00", f"{value}.00"]
    else:
        forms += [f"{value:,.2f}", f"{value:.2f}", f"{value:,}"]
    return list(dict.fromkeys(forms))


def grounder(text: str, start: int, end: int) -> Any:
    """A function giving the span of ``text[start:end]`` a value came from (document
    offsets) and how it matched: exact, case, number, fuzzy (with its ratio) or none."""
    window = text[start:end]
    lowered = window.lower()

    def ground(value: Any) -> dict[str, Any]:
        if isinstance(value, bool) or value is None:
            return {"match": "none"}
        if isinstance(value, (int, float)):
            for form in _number_forms(value):
                at = _find_number(window, form)
                if at >= 0:
                    return _span(
                        start + at,
                        start + at + len(form),
                        "exact" if form == str(value) else "number",
                    )
            return {"match": "none"}
        needle = str(value).strip()
        if not needle:
            return {"match": "none"}
        at = window.find(needle)
        if at >= 0:
            return _span(start + at, start + at + len(needle), "exact")
        at = lowered.find(needle.lower())
        if at >= 0:
            return _span(start + at, start + at + len(needle), "case")
        found = _fuzzy(lowered, needle.lower())
        if found is not None:
            a, b, ratio = found
            if _DIGITS.search(needle):
                # Approximate grounding is for wording: a number, date or version must be
                # in the text as it is. The span grows to whole words, and its numbers
                # must be the value's ("2000-2019" is not grounded on "2000-2018").
                a, b = _whole_words(window, a, b)
                if _DIGITS.findall(window[a:b]) != _DIGITS.findall(needle):
                    return {"match": "none"}
            return {**_span(start + a, start + b, "fuzzy"), "ratio": round(ratio, 3)}
        return {"match": "none"}

    return ground


_DIGITS = re.compile(r"\d+")


def _whole_words(text: str, a: int, b: int) -> tuple[int, int]:
    """``text[a:b]`` widened to the word (or number) it starts and ends inside."""
    while a > 0 and text[a - 1].isalnum() and text[a].isalnum():
        a -= 1
    while b < len(text) and b > 0 and text[b].isalnum() and text[b - 1].isalnum():
        b += 1
    return a, b


def _find_number(window: str, form: str) -> int:
    for m in re.finditer(re.escape(form), window):
        before = window[m.start() - 1 : m.start()]
        after = window[m.end() : m.end() + 1]
        if not (before.isdigit() or after.isdigit()):
            return m.start()
    return -1


def _span(a: int, b: int, how: str) -> dict[str, Any]:
    return {"char_start": a, "char_end": b, "match": how}


def _fuzzy(hay: str, needle: str) -> tuple[int, int, float] | None:
    """The stretch of ``hay`` most like ``needle`` (ratio >= FUZZY_MIN), anchored on the
    longest blocks they share."""
    if len(needle) < 4 or not hay:
        return None
    matcher = difflib.SequenceMatcher(None, hay, needle, autojunk=False)
    best: tuple[int, int, float] | None = None
    blocks = sorted(matcher.get_matching_blocks(), key=lambda m: -m.size)[:8]
    for block in blocks:
        if block.size == 0:
            continue
        base = block.a - block.b
        for a in range(max(0, base - 3), max(0, base) + 4):
            for length in range(max(1, len(needle) - 3), len(needle) + 4):
                piece = hay[a : a + length]
                if not piece:
                    continue
                ratio = difflib.SequenceMatcher(None, piece, needle, autojunk=False).ratio()
                if best is None or ratio > best[2]:
                    best = (a, a + len(piece), ratio)
    return best if best is not None and best[2] >= FUZZY_MIN else None


# --- the strategy ---------------------------------------------------------------------------
def _extraction_llm(extra: Doc2JsonExtra, llm: Llm | None) -> Llm:
    if llm is None or not llm.available:
        raise StrategyError(
            "Doc2JSON needs an LLM: set extra.model (and api_base for a local "
            "OpenAI-compatible server)"
        )
    return llm.with_model(extra.extraction_model)


def fields_text(values: dict[str, Any]) -> list[str]:
    """``path: value`` lines, the way the document's chunk shows its fields."""
    return [f"{path}: {json.dumps(v) if isinstance(v, bool) else v}" for path, v in flatten(values)]


def build(doc: Document, cfg: IndexingConfig, ctx: BuildContext) -> Built:
    extra = Doc2JsonExtra.model_validate(cfg.extra)
    fields = extra.fields
    llm = _extraction_llm(extra, ctx.llm)
    text = doc.content
    if extra.mode == "image":
        if doc.file is None:
            raise StrategyError(
                "image mode reads the original PDF, and this document has none stored: add it "
                "as a PDF file (kbpg ingest, or kb.put_document(..., file => ...))"
            )
        starts = doc.page_starts or [0]
        windows = page_windows(starts, len(text), extra.pages_per_window)
    else:
        windows = text_windows(text, extra.window_tokens, extra.window_overlap)
    if not windows:
        raise StrategyError("windowing: the document has no text")
    schema_text = describe_fields(fields)
    requests = []
    ctx.report(f"preparing {len(windows)} windows")
    for w in windows:
        where = (
            f"pages {w.pages[0]}–{w.pages[1]}"
            if w.pages
            else f"window {w.index + 1} of {len(windows)}"
        )
        instruction = (
            f"Document: {doc.title} ({where})\n\nFields to fill:\n{schema_text}\n\n"
            "Fill only fields this part states; leave the others out or null. Copy values as "
            'written. Return {"summary": "one or two sentences on this part", "fields": {...}}.'
        )
        content: Any
        if w.pages:
            assert doc.file is not None
            images = render_pages(doc.file, w.pages[0], w.pages[1], extra.image_dpi)
            content = [{"type": "text", "text": instruction}] + [
                {"type": "image_url", "image_url": {"url": url}} for url in images
            ]
        else:
            content = f"{instruction}\n\nText:\n{text[w.char_start : w.char_end]}"
        requests.append(
            Request(
                "doc2json_window",
                [
                    {
                        "role": "system",
                        "content": "You extract structured fields from documents. Answer "
                        "with JSON only.",
                    },
                    {"role": "user", "content": content},
                ],
                answer_schema(fields),
                _check_window,
                max_tokens=2000,
            )
        )
    llm.progress = ctx.stage("extracting fields", len(requests))
    answers = llm.ask_many(requests)
    values: dict[str, Any] = {}
    sources: dict[str, Any] = {}
    errors: list[dict[str, Any]] = []
    window_rows = []
    for w, answer in zip(windows, answers, strict=True):
        good = checked(fields, answer["fields"], w.index, "", errors)
        merge(values, good, fields, w.index, "", grounder(text, w.char_start, w.char_end), sources)
        window_rows.append(
            {
                "window": w.index,
                "char_start": w.char_start,
                "char_end": w.char_end,
                "tokens": w.tokens or None,
                "pages": list(w.pages) if w.pages else None,
                "summary": answer["summary"],
            }
        )
    ctx.report("writing the document summary")
    parts = "\n".join(f"- {r['summary']}" for r in window_rows if r["summary"])
    summary = llm.ask(
        Request(
            "doc2json_summary",
            [
                {
                    "role": "system",
                    "content": "You summarise a document in two to four sentences so a reader "
                    "can tell what it is and whether it answers their question. Answer with "
                    "JSON only.",
                },
                {
                    "role": "user",
                    "content": f"Document: {doc.title}\nSummaries of its parts, in order:\n"
                    f'{parts or "(none)"}\n\nReturn {{"summary": "..."}}.',
                },
            ],
            {
                "type": "object",
                "properties": {"summary": {"type": "string"}},
                "required": ["summary"],
            },
            text_field("summary"),
            max_tokens=400,
        )
    )
    chunk = summary + ("\n\n" + "\n".join(fields_text(values)) if values else "")
    ctx.report("embedding the summary")
    vec = embedding.embed(
        cfg,
        [tokens.truncate(summary, cfg.input_tokens)],
        ctx.embedding_key,
        [tokens.count(summary)],
    )
    row = {
        "ordinal": 0,
        "content": chunk,
        "embed_text": doc.title + "\n" + chunk,
        "token_count": tokens.count(chunk),
        "heading_path": [],
        "page": 1 if doc.page_starts else None,
        "char_start": 0,
        "char_end": len(text),
        "embedding": embedding.vector_literal(vec.vectors[0]),
    }
    artifacts = {
        "fields": values,
        "summary": summary,
        "sources": sources,
        "errors": errors,
        "windows": window_rows,
        "mode": extra.mode,
    }
    return Built([row], artifacts, vec.tokens, vec.cost_usd)
