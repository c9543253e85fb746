"""Doc2JSON end to end through the scripted OpenAI-compatible server: windows (count and
overlap exact), every merge rule, grounding spans, type errors, image mode (image parts
counted at the server), vector search over summaries, and the call cache on reindex."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import psycopg
import pymupdf
import pytest
from kbpg_db import tokens

from kbpg.client import Client
from kbpg.errors import ConfigError
from tests.fakeprovider import FakeProvider, last_user
from tests.helpers import allow_fake_key, remote_config, run_worker
from tests.integration.test_llm import llm_extra

SCHEMA = {
    "fields": [
        {"name": "vendor_name", "type": "string", "description": "Company that issued it"},
        {"name": "invoice_date", "type": "string", "examples": ["2026-01-31"]},
        {"name": "total_amount", "type": "number"},
        {"name": "payment_terms", "type": "string"},
        {"name": "paid", "type": "boolean"},
        {"name": "tags", "type": "array", "item_type": "string"},
        {
            "name": "line_items",
            "type": "array",
            "item_type": "object",
            "items": {
                "type": "object",
                "fields": [
                    {"name": "description", "type": "string"},
                    {"name": "quantity", "type": "integer"},
                ],
            },
        },
        {
            "name": "address",
            "type": "object",
            "fields": [{"name": "city", "type": "string"}, {"name": "zip", "type": "string"}],
        },
    ]
}

FILLER = " ".join(f"Clause {i} restates the general conditions of supply." for i in range(40))
INVOICE = (
    "INVOICE from ACME Corp, Oslo. Total due: 100 EUR. Item: Widget, quantity 2.\n\n"
    + FILLER
    + "\n\nCorrection: the vendor is Acme Corp Ltd; postcode 0150. Also a Gadget, quantity 3.\n\n"
    + FILLER
    + "\n\nIssued 2026-01-05, payment net 30-days.\n"
)

# What the model answers for each window (by its number in the prompt).
ANSWERS: dict[int, dict[str, Any]] = {
    1: {
        "vendor_name": "ACME Corp",
        "total_amount": 100,
        "tags": ["invoice"],
        "line_items": [{"description": "Widget", "quantity": 2}],
        "address": {"city": "Oslo"},
    },
    2: {
        "vendor_name": "Acme Corp Ltd",
        "total_amount": "one hundred",  # the wrong type: reported, never stored
        "tags": ["invoice", "corrected"],
        "line_items": [
            {"description": "Widget", "quantity": 2},  # the same item again: kept once
            {"description": "Gadget", "quantity": "three"},
        ],
        "address": {"zip": "0150"},
    },
    3: {"vendor_name": None, "invoice_date": "2026-01-05", "payment_terms": "Net 30 days"},
}


def window_of(prompt: str) -> int | None:
    m = re.search(r"\(window (\d+) of \d+\)|\(pages (\d+)–\d+\)", prompt)
    if m is None:
        return None
    return int(m.group(1)) if m.group(1) else (int(m.group(2)) + 2) // 3


def chat(body: dict[str, Any]) -> str:
    prompt = last_user(body)
    w = window_of(prompt)
    if w is not None:
        fields = dict(ANSWERS.get(w, {}))
        if w == 3:
            fields["foo"] = "bar"  # not in the schema
        return json.dumps({"summary": f"Part {w} of the invoice.", "fields": fields})
    return json.dumps({"summary": "An invoice from Acme Corp Ltd for a widget and a gadget."})


def doc2json_kb(
    client: Client,
    conn: psycopg.Connection,
    provider: FakeProvider,
    name: str = "inv",
    **extra: Any,
) -> None:
    allow_fake_key(conn)
    settings = {**llm_extra(provider), "json_schema": SCHEMA, **extra}
    settings.pop("summary_token_threshold")
    client.create_knowledge_base(name, remote_config(provider, strategy="doc2json", extra=settings))
    client.conn.execute("SET kb.fake_key = 'test-key'")


def extraction(conn: psycopg.Connection, kb: str = "inv") -> dict[str, Any]:
    row = conn.execute(
        "SELECT fields, summary, sources, errors, windows, mode FROM kb.doc2json_documents "
        "WHERE kb = %s",
        (kb,),
    ).fetchone()
    assert row is not None
    return dict(
        zip(("fields", "summary", "sources", "errors", "windows", "mode"), row, strict=True)
    )


def test_text_windows_merge_ground_and_report(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    provider.chat = chat
    doc2json_kb(client, conn, provider, window_tokens=400, window_overlap=50)
    client.add_text("inv", "invoice-7", INVOICE)
    run_worker(conn.info.dsn)
    # Windows: exactly as many as 400-token steps of 350 need, each sharing 50 tokens.
    n = tokens.count(INVOICE)
    expected = 1 + max(0, -(-(n - 400) // 350))
    prompts = [p for p in provider.prompts() if window_of(p) is not None]
    assert len(prompts) == expected == 3
    assert len(provider.chat_calls) == expected + 1  # and the document summary
    # Each window is the text of its tokens: window k covers tokens [350k, 350k + 400).
    enc = tokens.encoding()
    ids = enc.encode(INVOICE)
    _, offsets = enc.decode_with_offsets(ids)
    bounds = [
        (offsets[350 * k], offsets[350 * k + 400] if 350 * k + 400 < n else len(INVOICE))
        for k in range(expected)
    ]
    texts = {window_of(p): p.split("\n\nText:\n", 1)[1] for p in prompts}
    assert [texts[k + 1] for k in range(expected)] == [INVOICE[a:b] for a, b in bounds]
    stored = extraction(conn)["windows"]
    assert [(w["char_start"], w["char_end"]) for w in stored] == bounds
    assert [w["tokens"] for w in stored] == [400, 400, n - 700]
    got = extraction(conn)
    assert got["mode"] == "text"
    assert got["fields"] == {
        "vendor_name": "Acme Corp Ltd",  # the last value given wins; a null changes nothing
        "total_amount": 100,
        "tags": ["invoice", "corrected"],  # arrays gain new items only
        "line_items": [{"description": "Widget", "quantity": 2}, {"description": "Gadget"}],
        "address": {"city": "Oslo", "zip": "0150"},  # objects merge key by key
        "invoice_date": "2026-01-05",
        "payment_terms": "Net 30 days",
    }
    # Wrong types and unknown fields: reported per field and window, never stored.
    assert [(e["field"], e["window"], e["error"]) for e in got["errors"]] == [
        ("total_amount", 1, "expected a number, got string"),
        ("line_items[].quantity", 1, "expected an integer, got string"),
        ("foo", 2, "not in the schema"),
    ]
    # Grounding: the window each value came from and its span in the document's text.
    src = got["sources"]
    vendor = src["vendor_name"]
    assert vendor["window"] == 1 and vendor["match"] == "exact"
    assert INVOICE[vendor["char_start"] : vendor["char_end"]] == "Acme Corp Ltd"
    total = src["total_amount"]
    assert total["window"] == 0 and INVOICE[total["char_start"] : total["char_end"]] == "100"
    terms = src["payment_terms"]
    assert terms["match"] == "fuzzy" and terms["ratio"] >= 0.8
    assert INVOICE[terms["char_start"] : terms["char_end"]].lower().startswith("net 30")
    assert src["line_items[1].description"]["window"] == 1
    assert src["address.zip"]["match"] == "exact"
    assert [w["summary"] for w in got["windows"]] == [
        f"Part {i} of the invoice." for i in (1, 2, 3)
    ]
    assert got["summary"].startswith("An invoice from Acme Corp Ltd")

    # DBAs query the fields directly; vector search returns the document, summary and fields.
    vendor_sql = conn.execute(
        "SELECT fields->>'vendor_name' FROM kb.doc2json_documents WHERE kb = 'inv'"
    ).fetchone()[0]
    assert vendor_sql == "Acme Corp Ltd"
    hits = client.search("inv", "invoice from acme for a widget")
    assert [h.title for h in hits] == ["invoice-7"]
    assert hits[0].content.startswith("An invoice from Acme Corp Ltd")
    assert "vendor_name: Acme Corp Ltd" in hits[0].content
    assert "line_items[1].description: Gadget" in hits[0].content

    # A reindex with unchanged settings asks nothing again.
    provider.chat_calls.clear()
    client.reindex_knowledge_base("inv")
    run_worker(conn.info.dsn)
    assert provider.chat_calls == []
    assert extraction(conn)["fields"] == got["fields"]


def _invoice_pdf(path: Path, pages: int) -> Path:
    doc = pymupdf.open()
    for i in range(pages):
        page = doc.new_page()
        if i == 0:
            page.insert_text((72, 72), "INVOICE from ACME Corp, Oslo. Total due: 100 EUR.")
        else:
            page.insert_text((72, 72), f"Page {i + 1}: terms and conditions.")
    doc.save(path)
    return path


def test_image_mode_sends_pages_as_images(
    client: Client, conn: psycopg.Connection, provider: FakeProvider, tmp_path: Path
) -> None:
    provider.chat = chat
    doc2json_kb(client, conn, provider, mode="image", image_dpi=40)
    client.add_file("inv", _invoice_pdf(tmp_path / "scan.pdf", 5))
    run_worker(conn.info.dsn)
    assert conn.execute("SELECT media_type, byte_size > 0 FROM kb.document_file").fetchall() == [
        ("application/pdf", True)
    ]
    windows = []
    for body in provider.chat_calls:
        content = [m for m in body["messages"] if m["role"] == "user"][-1]["content"]
        if isinstance(content, list):
            images = [p for p in content if p.get("type") == "image_url"]
            assert all(p["image_url"]["url"].startswith("data:image/png;base64,") for p in images)
            windows.append((content[0]["text"].split("(", 1)[1].split(")")[0], len(images)))
    assert sorted(windows) == [("pages 1–3", 3), ("pages 4–5", 2)]
    got = extraction(conn)
    assert got["mode"] == "image" and got["fields"]["vendor_name"] == "Acme Corp Ltd"
    assert [w["pages"] for w in got["windows"]] == [[1, 3], [4, 5]]
    # Grounded against the text of the window's pages where the PDF has one; a value the
    # text does not hold (read off the image, or made up) says so.
    assert got["sources"]["total_amount"]["match"] == "exact"
    assert got["sources"]["total_amount"]["window"] == 0
    assert got["sources"]["vendor_name"] == {"window": 1, "match": "none"}
    # The call cache keeps a digest of each image, not the image.
    stored = conn.execute(
        "SELECT request::text FROM kb.llm_call WHERE purpose = 'doc2json_window'"
    ).fetchall()
    assert stored and all("base64," not in r[0] and ";sha256," in r[0] for r in stored)


def test_documents_doc2json_cannot_read_fail_on_their_row(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    provider.chat = chat
    doc2json_kb(client, conn, provider, name="img", mode="image")
    client.add_text("img", "typed", "A text with no PDF behind it.")
    allow_fake_key(conn)
    client.create_knowledge_base(
        "nollm", remote_config(provider, strategy="doc2json", extra={"json_schema": SCHEMA})
    )
    client.add_text("nollm", "plain", "Some text.")
    run_worker(conn.info.dsn)
    errors = dict(
        conn.execute(
            "SELECT k.name, d.error FROM kb.document d JOIN kb.knowledge_base k ON k.id = d.kb_id"
        ).fetchall()
    )
    assert "image mode reads the original PDF" in errors["img"]
    assert "Doc2JSON needs an LLM: set extra.model" in errors["nollm"]


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"fields": []}, "extra.json_schema: fields must be a non-empty list"),
        (
            {"fields": [{"name": "total", "type": "money"}]},
            'extra.json_schema field "total": unknown type "money"',
        ),
        (
            {
                "fields": [
                    {
                        "name": "line_items",
                        "type": "array",
                        "item_type": "object",
                        "items": {"type": "object", "fields": [{"name": "qty", "type": "int"}]},
                    }
                ]
            },
            'extra.json_schema field "line_items[].qty": unknown type "int"',
        ),
        (
            {"fields": [{"name": "line_items", "type": "array", "item_type": "object"}]},
            'field "line_items": an array of objects needs "items"',
        ),
        (
            {"fields": [{"name": "a", "type": "string"}, {"name": "a", "type": "number"}]},
            'field "a" is named twice',
        ),
        ({"fields": [{"name": "1st", "type": "string"}]}, "not a valid field name"),
    ],
)
def test_schemas_are_checked_at_creation(client: Client, schema: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        client.create_knowledge_base(
            "bad", {"strategy": "doc2json", "extra": {"json_schema": schema}}
        )
    with pytest.raises(ConfigError, match=re.escape("extra.window_overlap (500) must be smaller")):
        client.create_knowledge_base(
            "bad",
            {
                "strategy": "doc2json",
                "extra": {"json_schema": SCHEMA, "window_tokens": 500, "window_overlap": 500},
            },
        )
