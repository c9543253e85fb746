"""kb.build_context: citations, budget, usage_mode, threshold, section expansion."""

from __future__ import annotations

import psycopg

from kbpg.client import Client
from tests.fakeprovider import FakeProvider
from tests.helpers import remote_kb, run_worker

GUIDE = """# Pricing

## Team plan

The team plan costs twelve euros per user per month.

## Personal plan

The personal plan costs six euros per month.

# Restoring

## Single file

Run restore with a path to bring back one file.

The restored file is written next to the original with a suffix, so nothing is overwritten.

Add an at option with a date to pick an older version of the file instead of the newest.

## Whole machine

Run restore with --all to rebuild a machine.
"""


def setup_kb(client: Client, conn: psycopg.Connection, provider: FakeProvider) -> None:
    remote_kb(client, conn, provider, "ctx", chunk_size=24, chunk_overlap=0)
    client.add_text("ctx", "Guide", GUIDE, page_starts=[0, GUIDE.index("# Restoring")])
    client.add_text(
        "ctx", "FAQ", "Prices: the team plan is billed yearly. Team plan invoices arrive monthly."
    )
    client.add_text(
        "ctx", "Persona", "You are the support assistant. Be brief.", usage_mode="system"
    )
    client.add_text("ctx", "Policy", "Never ask for the vault passphrase.", usage_mode="policy")
    run_worker(conn.info.dsn)


def test_context_orders_cites_and_budgets(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    setup_kb(client, conn, provider)
    ctx = client.build_context("ctx", "team plan price", token_budget=400)
    text = ctx["context"]
    assert ctx["has_relevant"] is True and ctx["fallback"] is None
    assert text.index("[Always-known 1: Persona") < text.index("[Policy 2: Policy")
    assert "(guardrail: the answer must not contradict this)" in text
    assert "[Source 3: Guide › Pricing > Team plan (p.1)]" in text
    assert ctx["tokens_used"] <= 400
    kinds = [s["kind"] for s in ctx["sources"]]
    assert kinds[:2] == ["system", "policy"] and set(kinds[2:]) == {"rag"}
    page2 = client.build_context("ctx", "restore a whole machine with all", token_budget=400)
    assert "(p.2)]" in page2["context"]


def test_context_limits(client: Client, conn: psycopg.Connection, provider: FakeProvider) -> None:
    setup_kb(client, conn, provider)
    one = client.build_context(
        "ctx", "plan costs euros", token_budget=400, max_chunks_per_document=1
    )
    rag = [s for s in one["sources"] if s["kind"] == "rag"]
    assert len({s["document_id"] for s in rag}) == len(rag)
    small = client.build_context("ctx", "plan costs euros", token_budget=60)
    assert small["tokens_used"] <= 60


def test_threshold_says_outside_scope(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    setup_kb(client, conn, provider)
    ctx = client.build_context("ctx", "volcano eruption lava", relevance_threshold=0.9)
    assert ctx["has_relevant"] is False
    assert ctx["fallback"] == "That's outside what I cover."
    assert "Source" not in ctx["context"]  # system and policy text only
    assert "[Always-known" in ctx["context"]


def test_section_expansion(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    setup_kb(client, conn, provider)
    plain = client.build_context("ctx", "single file path", top_k=1, token_budget=500)
    expanded = client.build_context(
        "ctx", "single file path", top_k=1, token_budget=500, expand_sections=True
    )
    plain_ids = [c for s in plain["sources"] if s["kind"] == "rag" for c in s["chunk_ids"]]
    exp_ids = [c for s in expanded["sources"] if s["kind"] == "rag" for c in s["chunk_ids"]]
    assert len(plain_ids) == 1 and set(plain_ids) <= set(exp_ids)
    section = conn.execute(
        "SELECT heading_path FROM kb.chunk WHERE id = %s", (plain_ids[0],)
    ).fetchone()[0]
    same = conn.execute(
        "SELECT count(*) FROM kb.chunk WHERE heading_path[1:%s] = %s", (len(section), section)
    ).fetchone()[0]
    assert len(exp_ids) == same > 1
