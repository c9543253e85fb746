"""Tree Search end to end through the scripted OpenAI-compatible server, which answers from
the prompt's content (documents and sections whose titles share words with the question)."""

from __future__ import annotations

import json
import re
from typing import Any

import psycopg
import pytest

from kbpg.client import Client
from kbpg.errors import ConfigError
from tests.fakeprovider import FakeProvider, default_chat, last_user
from tests.helpers import allow_fake_key, run_worker
from tests.integration.test_llm import GUIDE, llm_extra

BILLING = """# Refunds
Refunds are paid within five days.
## Partial refunds
A partial refund covers part of an order.
# Invoices
Invoices are sent monthly.
"""


def two_docs(
    client: Client, conn: psycopg.Connection, provider: FakeProvider, **extra: Any
) -> None:
    allow_fake_key(conn)
    client.create_knowledge_base(
        "ts", {"strategy": "page_index", "extra": llm_extra(provider, **extra)}
    )
    client.add_text("ts", "guide", GUIDE)
    client.add_text("ts", "billing", BILLING)
    run_worker(conn.info.dsn)
    provider.chat_calls.clear()


def test_two_phases_global_ids_and_results(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    two_docs(client, conn, provider)
    before = conn.execute("SELECT count(*) FROM kb.llm_call").fetchone()[0]
    hits = client.search("ts", "how are refunds paid?")
    assert [(h.title, h.heading_path) for h in hits] == [
        ("billing", ["Refunds"]),
        ("billing", ["Refunds", "Partial refunds"]),
    ]
    assert hits[0].content.startswith("# Refunds") and hits[0].score == 1.0
    assert "2 LLM call(s)" in (hits[0].note or "")
    assert hits[0].usage is not None and hits[0].usage["llm"]["calls"] == 2
    prompts = provider.prompts()
    assert len(prompts) == 2  # phase 1 (documents), phase 2 (sections)
    assert "[d0] guide" in prompts[0] and "[d1] billing" in prompts[0]
    assert "[d1:0001] Refunds" in prompts[1] and "[d0:" not in prompts[1]  # only the pick
    assert "Refunds are paid" not in prompts[1]  # ToCs carry summaries, never text
    # The query path writes nothing, so it runs in a read-only transaction (a standby).
    with psycopg.connect(conn.info.dsn) as ro:
        ro.execute("SET TRANSACTION READ ONLY")
        ro.execute("SET kb.fake_key = 'test-key'")
        rows = ro.execute("SELECT title FROM kb.search('ts', 'how are refunds paid?')").fetchall()
        assert [r[0] for r in rows] == ["billing", "billing"]
    assert conn.execute("SELECT count(*) FROM kb.llm_call").fetchone()[0] == before
    # explain_search shows what each phase chose.
    explained = client.explain_search("ts", "how are refunds paid?")
    assert "phase 1 chose 1 of 2 documents (billing)" in explained[0]["note"]
    assert "phase 2 chose d1:0001, d1:0002" in explained[0]["note"]


def test_rich_results_and_context_citations(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    two_docs(client, conn, provider)
    rows = client._rows("SELECT * FROM kb.tree_search('ts', 'partial refunds', top_k => 1)")
    assert len(rows) == 1
    row = rows[0]
    assert row["document"] == "billing" and row["title_path"] == ["Refunds", "Partial refunds"]
    assert row["summary"] == "About Refunds › Partial refunds."
    assert row["reasoning"].startswith("titles match")
    assert row["phases"]["phase1"]["chose"] == ["billing"]
    assert row["usage"]["calls"] == 2 and row["usage"]["prompt_tokens"] > 0
    ctx = client.build_context("ts", "partial refunds", method="tree_search")
    assert "[Source 1: billing › Refunds > Partial refunds]" in ctx["context"]


def test_hallucinated_ids_are_dropped_and_counted(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    two_docs(client, conn, provider)

    def chat(body: dict[str, Any]) -> str:
        if '"node_ids"' in last_user(body):
            return json.dumps({"node_ids": ["d9:0001", "d1:0003", "d1:0099"], "reasoning": "x"})
        return default_chat(body)

    provider.chat = chat
    hits = client.search("ts", "invoices")
    assert [h.heading_path for h in hits] == [["Invoices"]]
    assert "2 node id(s) the model named do not exist: dropped" in (hits[0].note or "")


def test_prose_answers_fall_back_to_the_ids_they_name(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    two_docs(client, conn, provider)

    def chat(body: dict[str, Any]) -> str:
        prompt = last_user(body)
        if '"documents"' in prompt:
            return "I would look at d0 first."
        if '"node_ids"' in prompt:
            return "Section d0:0002 covers Linux, then d0:0003."
        return default_chat(body)

    provider.chat = chat
    hits = client.search("ts", "anything")
    assert [h.heading_path[-1] for h in hits] == ["Linux", "Windows"]
    assert len(provider.chat_calls) == 2  # no re-ask: the ids were usable


def test_single_document_skips_phase_one(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    allow_fake_key(conn)
    client.create_knowledge_base("one", {"strategy": "page_index", "extra": llm_extra(provider)})
    client.add_text("one", "guide", GUIDE)
    run_worker(conn.info.dsn)
    provider.chat_calls.clear()
    hits = client.search("one", "configure the file", top_k=3)
    assert [h.heading_path for h in hits] == [["Configure"]]
    assert len(provider.chat_calls) == 1


def test_toc_over_budget_is_preselected_with_bm25(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    allow_fake_key(conn)
    client.create_knowledge_base(
        "big", {"strategy": "page_index", "extra": llm_extra(provider, if_add_node_summary="no")}
    )
    sections = "".join(f"# Topic {i}\nGeneral remarks number {i}.\n" for i in range(80))
    sections += "# Glaciers\nGlaciers move slowly downhill.\n"
    client.add_text("big", "atlas", sections)
    run_worker(conn.info.dsn)
    provider.chat_calls.clear()
    hits = client.search("big", "how do glaciers move?", toc_token_budget=300)
    assert [h.heading_path for h in hits] == [["Glaciers"]]
    prompt = provider.prompts()[-1]
    assert len(re.findall(r"\[d0:\d{4}\]", prompt)) < 10  # not all 81 sections
    assert "BM25-preselected" in (hits[0].note or "")


def test_preselection_uses_the_search_s_bm25_parameters(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    """What BM25 preselects for a ToC over budget follows the search's k1 and b: with full
    length normalisation (b = 1) the short sections that name the word once rank first,
    without it (b = 0) the long ones that repeat it."""
    allow_fake_key(conn)
    client.create_knowledge_base(
        "norm", {"strategy": "page_index", "extra": llm_extra(provider, if_add_node_summary="no")}
    )
    filler = " ".join(f"w{j}" for j in range(60))
    text = "".join(f"# Note {i}\nGlacier.\n" for i in range(30))
    text += "".join(f"# Essay {i}\nGlacier glacier glacier {filler}.\n" for i in range(30))
    text += "".join(f"# Topic {i}\nGeneral remarks.\n" for i in range(20))
    client.add_text("norm", "atlas", text)
    run_worker(conn.info.dsn)

    def chat(body: dict[str, Any]) -> str:  # picks the first section it is shown
        ids = re.findall(r"\[(d0:\d{4})\]", last_user(body))
        return json.dumps({"node_ids": ids[:1], "reasoning": "the first"})

    provider.chat = chat

    def shown(b: float) -> tuple[int, int]:
        provider.chat_calls.clear()
        hits = client.search("norm", "glacier", toc_token_budget=700, b=b)
        assert "BM25-preselected" in (hits[0].note or "")
        prompt = provider.prompts()[-1]
        return len(re.findall(r"\] Note \d+", prompt)), len(re.findall(r"\] Essay \d+", prompt))

    notes, essays = shown(1.0)
    assert notes == 30 and essays == 10, (notes, essays)  # the 40 preselected, all shown
    notes, essays = shown(0.0)
    assert notes == 10 and essays == 30, (notes, essays)


def test_toc_over_budget_descends_level_by_level(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    allow_fake_key(conn)
    client.create_knowledge_base(
        "deep", {"strategy": "page_index", "extra": llm_extra(provider, if_add_node_summary="no")}
    )
    chapters = ["Rivers", "Mountains", "Deserts", "Oceans", "Glaciers", "Forests"]
    text = ""
    for c in chapters:
        text += f"# {c}\nAn overview of {c.lower()}.\n"
        for k in range(12):
            text += f"## {c} topic {k}\nRemarks on {c.lower()} number {k}.\n"
    text = text.replace("## Glaciers topic 7\n", "## How ice flows\n")
    client.add_text("deep", "atlas", text)
    run_worker(conn.info.dsn)
    provider.chat_calls.clear()

    def chat(body: dict[str, Any]) -> str:
        prompt = last_user(body)
        if "[d0:" in prompt and "How ice flows" in prompt:  # round 2: Glaciers' sections
            ids = re.findall(r"\[(d0:\d{4})\] How ice flows", prompt)
            return json.dumps({"node_ids": ids, "reasoning": "ice moves by flowing"})
        if "[d0:" in prompt:  # round 1: the chapters; Glaciers has sub-sections
            ids = re.findall(r"\[(d0:\d{4})\] Glaciers \[\+12\]", prompt)
            return json.dumps({"node_ids": ids, "reasoning": "glaciers are ice"})
        return default_chat(body)

    provider.chat = chat
    hits = client.search("deep", "how do glaciers move?", toc_token_budget=300)
    assert [h.heading_path for h in hits] == [["Glaciers", "How ice flows"]]
    first, second = provider.prompts()
    assert "Glaciers [+12]" in first and "topic" not in first  # only the top level
    assert "inside Glaciers" in second and "Rivers" not in second  # only Glaciers' level
    explained = client.explain_search("deep", "how do glaciers move?", toc_token_budget=300)
    assert (
        "phase 2 descended 2 level(s) (ToC over budget), seeing 6, 12 sections"
        in (explained[0]["note"])
    )

    # A section opened whose sub-sections the model does not pick is kept whole.
    def keep_whole(body: dict[str, Any]) -> str:
        prompt = last_user(body)
        if "inside Glaciers" in prompt:
            return json.dumps({"node_ids": [], "reasoning": "the chapter as a whole"})
        return chat(body)

    provider.chat = keep_whole
    hits = client.search("deep", "glaciers in general", toc_token_budget=300)
    assert [h.heading_path for h in hits] == [["Glaciers"]]


def test_needs_an_llm(client: Client, conn: psycopg.Connection) -> None:
    client.create_knowledge_base("nollm", {"strategy": "page_index"})
    client.add_text("nollm", "guide", GUIDE)
    run_worker(conn.info.dsn)
    with pytest.raises(ConfigError, match="tree_search needs an LLM"):
        client.search("nollm", "install")


def test_eval_runs_tree_search(
    conn: psycopg.Connection, dsn: str, provider: FakeProvider, tmp_path: Any, capsys: Any
) -> None:
    from kbpg.cli import main

    allow_fake_key(conn)
    corpus = [
        {"_id": "glaciers", "title": "Glaciers", "text": "Glaciers move slowly downhill."},
        {"_id": "volcanoes", "title": "Volcanoes", "text": "Volcanoes erupt molten rock."},
        {"_id": "deserts", "title": "Deserts", "text": "Deserts get little rain."},
    ]
    (tmp_path / "qrels").mkdir()
    (tmp_path / "corpus.jsonl").write_text("\n".join(json.dumps(d) for d in corpus))
    (tmp_path / "queries.jsonl").write_text(
        json.dumps({"_id": "q1", "text": "how do glaciers move"})
        + "\n"
        + json.dumps({"_id": "q2", "text": "when do volcanoes erupt"})
    )
    (tmp_path / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\nq1\tglaciers\t1\nq2\tvolcanoes\t1\n"
    )
    icfg = {"strategy": "page_index", "extra": llm_extra(provider)}
    code = main(
        [
            "--dsn",
            dsn,
            "eval",
            str(tmp_path),
            "--method",
            "tree_search",
            "--top-k",
            "3",
            "--indexing-config",
            json.dumps(icfg),
            "--json",
        ]
    )
    assert code == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["method"] == "tree_search" and result["queries"] == 2
    assert result["ndcg@10"] == 1.0
