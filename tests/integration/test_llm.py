"""The LLM layer and the strategy seam, through PageIndex's Markdown pipeline.

Every call goes over real HTTP from the real litellm client inside PostgreSQL to a local
OpenAI-compatible server the test scripts (tests/fakeprovider.py); calls, their timing
and the most in flight at once are counted at the server.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from typing import Any

import psycopg
import pytest
from psycopg import sql

from kbpg.client import Client
from kbpg.errors import ConfigError
from tests.fakeprovider import FakeProvider, default_chat, last_user
from tests.helpers import allow_fake_key, run_worker

GUIDE = """# Install
Run the installer and accept the licence.
## Linux
Use the apt repository.
## Windows
Use the msi package.
# Configure
Edit the configuration file.
```
# not a heading: inside fenced code
```
"""


def llm_extra(provider: FakeProvider, **extra: Any) -> dict[str, Any]:
    return {
        "model": "openai/test-llm",
        "api_base": provider.url + "/v1",
        "api_key_name": "FAKE_KEY",
        "max_retries": 2,
        "request_timeout_s": 10,
        "summary_token_threshold": 0,  # every node gets an LLM summary
        **extra,
    }


def tree_kb(
    client: Client, conn: psycopg.Connection, provider: FakeProvider, name: str, **extra: Any
) -> None:
    allow_fake_key(conn)
    client.create_knowledge_base(
        name, {"strategy": "page_index", "extra": llm_extra(provider, **extra)}
    )


def set_db(conn: psycopg.Connection, name: str, value: str) -> None:
    db = conn.execute("SELECT current_database()").fetchone()[0]
    conn.execute(
        sql.SQL("ALTER DATABASE {} SET {} = {}").format(
            sql.Identifier(db), sql.Identifier(*name.split(".")), sql.Literal(value)
        )
    )


def nodes(conn: psycopg.Connection, kb: str) -> list[dict[str, Any]]:
    cur = conn.execute(
        "SELECT node_id, parent_id, depth, title, title_path, summary, summary_kind, text "
        "FROM kb.page_index_nodes WHERE kb = %s ORDER BY document_id, ordinal",
        (kb,),
    )
    cols = [c.name for c in cur.description]
    return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]


def test_tree_summaries_description_and_stable_ids(
    client: Client, conn: psycopg.Connection, dsn: str, provider: FakeProvider
) -> None:
    tree_kb(client, conn, provider, "t")
    client.add_text("t", "guide", GUIDE)
    stats = run_worker(dsn)
    assert stats.done == 1
    got = nodes(conn, "t")
    assert [(n["title"], n["depth"]) for n in got] == [
        ("Install", 0),
        ("Linux", 1),
        ("Windows", 1),
        ("Configure", 0),
    ]
    assert got[1]["parent_id"] == got[0]["node_id"] == got[2]["parent_id"]
    assert got[1]["title_path"] == ["Install", "Linux"]
    assert [n["summary"] for n in got] == [f"About {' › '.join(n['title_path'])}." for n in got]
    assert {n["summary_kind"] for n in got} == {"llm"}
    assert "# not a heading" in got[3]["text"]  # fenced code stays in its section
    toc, description = conn.execute("SELECT toc, description FROM kb.page_index_toc").fetchone()
    assert description == "A document about guide."
    assert [e["title"] for e in toc] == ["Install", "Configure"]
    assert [c["title"] for c in toc[0]["children"]] == ["Linux", "Windows"]
    assert "text" not in json.dumps(toc)  # the ToC holds no text
    assert len(provider.chat_calls) == 5  # four summaries and one description
    # The request asked for schema-constrained JSON.
    assert provider.chat_calls[0]["response_format"]["type"] == "json_schema"
    status = client.document_status("t")[0]
    assert (status["llm_calls"], status["llm_cache_hits"]) == (5, 0)
    assert status["llm_prompt_tokens"] > 0 and status["llm_completion_tokens"] > 0
    usage = client._rows("SELECT * FROM kb.knowledge_base_usage WHERE kb = 't'")[0]
    assert usage["llm_calls"] == 5

    # A reindex with unchanged settings pays for nothing: every answer is cached.
    client.reindex_knowledge_base("t")
    run_worker(dsn)
    assert len(provider.chat_calls) == 5
    status = client.document_status("t")[0]
    assert (status["llm_calls"], status["llm_cache_hits"]) == (0, 5)
    assert [n["node_id"] for n in nodes(conn, "t")] == [n["node_id"] for n in got]

    # An unrelated edit: a new section. Old sections keep their ids; only what changed
    # (the new node's summary, the description over the new outline) is asked.
    client.add_text("t", "guide", GUIDE + "# Appendix\nExtra notes.\n")
    run_worker(dsn)
    after = nodes(conn, "t")
    assert [n["node_id"] for n in after[:4]] == [n["node_id"] for n in got]
    assert after[4]["title"] == "Appendix"
    assert len(provider.chat_calls) == 7
    assert client.document_status("t")[0]["llm_cache_hits"] == 4


def test_fenced_and_malformed_answers(
    client: Client, conn: psycopg.Connection, dsn: str, provider: FakeProvider
) -> None:
    seen: Counter[str] = Counter()

    def chat(body: dict[str, Any]) -> str:
        prompt = last_user(body)
        answer = default_chat(body)
        seen[prompt] += 1
        if "Section: Install › Linux" in prompt:
            return "Sure! Here is the JSON:\n```json\n" + answer + "\n```"
        if "Section: Install › Windows" in prompt:
            return "I think it is about windows {not json"  # re-asked once with the error
        return answer

    provider.chat = chat
    tree_kb(client, conn, provider, "p")
    client.add_text("p", "guide", GUIDE)
    run_worker(dsn)
    assert client.document_status("p")[0]["status"] == "error"
    assert nodes(conn, "p") == []  # a failed document leaves no half-built tree
    # The fenced answer validated, so it is cached (as the model wrote it).
    cached = conn.execute(
        "SELECT response FROM kb.llm_call WHERE request::text LIKE '%› Linux%'"
    ).fetchone()[0]
    assert cached.startswith("Sure! Here is the JSON:")
    # The malformed one was asked twice (once more with the error), then failed clearly.
    windows = [b for b in provider.chat_calls if "› Windows" in json.dumps(b, ensure_ascii=False)]
    # Twice unusable fails for good: one attempt of the job, two calls, no retries.
    assert len(windows) == 2
    assert conn.execute(
        "SELECT status, attempts FROM kb.job j JOIN kb.knowledge_base k ON k.id = j.kb_id "
        "WHERE k.name = 'p'"
    ).fetchall() == [("failed", 1)]
    retry = windows[1]["messages"]
    assert retry[-2]["role"] == "assistant" and "cannot be used" in retry[-1]["content"]
    error = client.document_status("p")[0]["error"]
    assert 'document "guide"' in error and "summarising nodes" in error
    assert "unusable twice" in error and "its last answer" in error


def test_reask_then_success_and_balanced_object(
    client: Client, conn: psycopg.Connection, dsn: str, provider: FakeProvider
) -> None:
    asked: Counter[str] = Counter()

    def chat(body: dict[str, Any]) -> str:
        prompt = last_user(body)
        if "cannot be used" in prompt:
            return default_chat({"messages": [body["messages"][1]]})
        asked[prompt] += 1
        if "Section: Configure" in prompt:
            return "no JSON in here"
        if "Section: Install › Linux" in prompt:
            return 'The answer is {"summary": "About Install › Linux."} as requested.'
        return default_chat(body)

    provider.chat = chat
    tree_kb(client, conn, provider, "r")
    client.add_text("r", "guide", GUIDE)
    run_worker(dsn)
    assert client.document_status("r")[0]["status"] == "ready"
    got = {n["title"]: n["summary"] for n in nodes(conn, "r")}
    assert got["Configure"] == "About Configure." and got["Linux"] == "About Install › Linux."
    assert client.document_status("r")[0]["llm_calls"] == 6  # five questions, one re-ask


def test_rate_limit_honours_retry_after_and_timeouts_retry(
    client: Client, conn: psycopg.Connection, dsn: str, provider: FakeProvider
) -> None:
    state = {"n": 0}

    def chat(body: dict[str, Any]) -> Any:
        state["n"] += 1
        if state["n"] == 1:
            return (
                429,
                {"error": {"message": "slow down", "type": "rate_limit"}},
                {"Retry-After": "1"},
            )
        if state["n"] == 2:
            time.sleep(2.5)  # over request_timeout_s: the client gives up and retries
        return default_chat(body)

    provider.chat = chat
    tree_kb(client, conn, provider, "rl", llm_concurrency=1, request_timeout_s=1)
    client.add_text("rl", "guide", "# Only\nOne section.\n")
    run_worker(dsn)
    assert client.document_status("rl")[0]["status"] == "ready"
    t = provider.chat_times
    assert t[1] - t[0] >= 0.95  # waited as Retry-After said
    assert len(t) == 4  # 429, timed out, then the summary and the description


def test_concurrency_cap_holds_across_jobs(
    client: Client, conn: psycopg.Connection, dsn: str, provider: FakeProvider
) -> None:
    provider.chat_delay = 0.25
    tree_kb(client, conn, provider, "c", llm_concurrency=3, if_add_doc_description="no")
    for d in range(3):
        client.add_text("c", f"doc{d}", "".join(f"# S{d}.{i}\nText {i}.\n" for i in range(8)))
    run_worker(dsn, concurrency=3)
    assert [s["status"] for s in client.document_status("c")] == ["ready"] * 3
    assert len(provider.chat_calls) == 24
    assert provider.max_in_flight == 3  # parallel, and never more than the cap in all


def test_worker_killed_mid_job_resumes_from_cache(
    client: Client, conn: psycopg.Connection, dsn: str, provider: FakeProvider
) -> None:
    set_db(conn, "kb.llm_step_seconds", "0")  # every wave of calls commits
    provider.chat_delay = 0.3
    tree_kb(client, conn, provider, "k", llm_concurrency=2)
    client.add_text("k", "long", "".join(f"# Part {i}\nBody of part {i}.\n" for i in range(10)))
    proc = subprocess.Popen(
        [sys.executable, "-m", "kbpg.cli", "--dsn", dsn, "worker", "--poll", "0.2", "--lease", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    while len(provider.chat_calls) < 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    progress = client.document_status("k")[0]["progress"]
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    conn.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE application_name = 'kbpg-worker'"
    )
    assert progress and progress.startswith("summarising nodes ")  # e.g. "summarising nodes 4/10"
    time.sleep(0.5)
    cached = {
        r[0]
        for r in conn.execute(
            "SELECT request->'messages'->-1->>'content' FROM kb.llm_call"
        ).fetchall()
    }
    assert 0 < len(cached) < 11
    before = len(provider.chat_calls)
    run_worker(dsn)  # claims the job once its lease has expired
    assert client.document_status("k")[0]["status"] == "ready"
    resumed = provider.prompts()[before:]
    assert not cached & set(resumed)  # nothing cached was asked again
    assert len(nodes(conn, "k")) == 10
    job = conn.execute("SELECT steps, attempts FROM kb.job WHERE status = 'done'").fetchone()
    assert job[0] > 2 and job[1] == 2  # several committed steps over two attempts


def test_a_step_longer_than_its_lease_keeps_the_job(
    client: Client, conn: psycopg.Connection, dsn: str, provider: FakeProvider
) -> None:
    """A step's lease runs from the step's end: a step that outlasts a lease (a slow
    provider) does not hand its job to another worker between steps."""
    set_db(conn, "kb.llm_step_seconds", "0")  # every wave of calls commits
    provider.chat_delay = 3.0
    tree_kb(client, conn, provider, "slow", llm_concurrency=1)
    client.add_text("slow", "doc", "".join(f"# Part {i}\nBody of part {i}.\n" for i in range(3)))
    with (
        psycopg.connect(dsn, autocommit=True) as worker,
        psycopg.connect(dsn, autocommit=True) as other,
    ):
        claim = "SELECT kb_id, id FROM kb.claim_jobs(%s, 1, 2)"  # a lease of two seconds
        kb_id, job_id = worker.execute(claim, ("w1",)).fetchone()
        step = "SELECT kb.process_job(%s, %s, 'w1')::text"
        outcome = worker.execute(step, (kb_id, job_id)).fetchone()[0]
        assert outcome == "more"  # a step of over two seconds (a call takes 3)
        assert other.execute(claim, ("w2",)).fetchall() == []
        provider.chat_delay = 0
        while outcome == "more":
            outcome = worker.execute(step, (kb_id, job_id)).fetchone()[0]
        assert outcome == "done"
    assert conn.execute("SELECT attempts FROM kb.job WHERE id = %s", (job_id,)).fetchone() == (1,)
    assert client.document_status("slow")[0]["status"] == "ready"


def test_a_long_job_hands_back_the_jobs_claimed_with_it(
    client: Client, conn: psycopg.Connection, dsn: str, provider: FakeProvider
) -> None:
    """A connection claims several jobs at once. An LLM job runs in steps, for minutes:
    the jobs claimed with it go back to the queue at its first step, for other connections
    and workers, instead of waiting out their leases behind it."""
    set_db(conn, "kb.llm_step_seconds", "0")  # every wave of calls commits
    provider.chat_delay = 0.2
    tree_kb(client, conn, provider, "pair", llm_concurrency=1)
    for i in range(2):
        client.add_text("pair", f"d{i}", "".join(f"# Part {k}\nBody {i}.{k}.\n" for k in range(6)))
    done: list[Any] = []
    run = threading.Thread(target=lambda: done.append(run_worker(dsn)), daemon=True)
    run.start()  # one connection: it claims both jobs
    seen = set()
    while run.is_alive():
        rows = conn.execute("SELECT status, steps FROM kb.job ORDER BY steps DESC").fetchall()
        seen.add(tuple((status, steps > 0) for status, steps in rows))
        time.sleep(0.05)
    run.join()
    assert done and done[0].lost == 0
    # The first job a step in, the other back in the queue.
    assert (("running", True), ("queued", False)) in seen
    assert conn.execute("SELECT attempts FROM kb.job").fetchall() == [(1,), (1,)]
    assert {d["status"] for d in client.document_status("pair")} == {"ready"}


def test_without_an_llm_markdown_still_indexes(
    client: Client, conn: psycopg.Connection, dsn: str
) -> None:
    from kbpg_db import tokens

    client.create_knowledge_base(
        "n", {"strategy": "page_index", "extra": {"summary_token_threshold": 12}}
    )
    client.add_text("n", "guide", GUIDE)
    run_worker(dsn)
    got = nodes(conn, "n")
    assert [tokens.count(n["text"]) <= 12 for n in got] == [True, True, True, False]
    # Short leaves keep their own text; a parent and a long leaf get their lead text.
    assert [n["summary_kind"] for n in got] == ["lead_text", "own_text", "own_text", "lead_text"]
    assert got[0]["summary"] == "Run the installer and accept the licence."
    desc = conn.execute("SELECT description, description_kind FROM kb.page_index_toc").fetchone()
    assert desc == ("Run the installer and accept the licence.", "lead_text")


def test_oversized_leaf_split_by_llm_or_structure(
    client: Client, conn: psycopg.Connection, dsn: str, provider: FakeProvider
) -> None:
    long_text = "# Big\n" + "\n\n".join(f"Paragraph {i} " + "word " * 60 for i in range(4))
    tree_kb(client, conn, provider, "s", max_token_num_each_node=100)
    client.add_text("s", "big", long_text)
    run_worker(dsn)
    got = nodes(conn, "s")
    assert [n["title"] for n in got] == ["Big", "Part 1", "Part 2", "Part 3", "Part 4"]
    assert got[1]["text"].startswith("Paragraph 0")
    # An unusable split answer (words not in the text) falls back to paragraph cuts.
    provider.chat = lambda body: (
        json.dumps({"sections": [{"title": "X", "starts_with": "nowhere"}]})
        if '"sections"' in last_user(body)
        else default_chat(body)
    )
    conn.execute("SELECT kb.purge_llm_cache()")  # else the cached split answers again
    client.create_knowledge_base(
        "s2", {"strategy": "page_index", "extra": llm_extra(provider, max_token_num_each_node=100)}
    )
    client.add_text("s2", "big", long_text)
    run_worker(dsn)
    titles = [n["title"] for n in nodes(conn, "s2")]
    assert titles[0] == "Big" and titles[1:] == [f"Big (part {i})" for i in range(1, len(titles))]
    assert len(titles) >= 3


def test_provider_down_fails_the_document_with_no_half_tree(
    client: Client, conn: psycopg.Connection, dsn: str, provider: FakeProvider
) -> None:
    provider.chat = lambda body: (500, {"error": {"message": "model crashed"}})
    tree_kb(client, conn, provider, "d", max_retries=0)
    client.add_text("d", "guide", GUIDE)
    run_worker(dsn)
    status = client.document_status("d")[0]
    assert status["status"] == "error"
    assert 'document "guide": page_index, while summarising nodes' in status["error"]
    assert "model crashed" in status["error"]
    assert nodes(conn, "d") == []
    assert conn.execute("SELECT count(*) FROM kb.chunk").fetchone()[0] == 0


def test_cost_from_litellm_prices(
    client: Client, conn: psycopg.Connection, dsn: str, provider: FakeProvider
) -> None:
    allow_fake_key(conn)
    extra = llm_extra(provider, model="openai/gpt-4o-mini")
    client.create_knowledge_base("$", {"strategy": "page_index", "extra": extra})
    client.add_text("$", "guide", GUIDE)
    run_worker(dsn)
    status = client.document_status("$")[0]
    assert status["llm_calls"] == 5 and float(status["llm_cost_usd"]) > 0


def test_strategy_seam_errors_and_methods(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    with pytest.raises(ConfigError, match=r"extra\.json_schema is required"):
        client.create_knowledge_base("g", {"strategy": "doc2json"})
    with pytest.raises(ConfigError) as info:
        client.create_knowledge_base("m", {"strategy": "page_index"}, {"method": "hybrid"})
    assert info.value.message == (
        'method "hybrid" is not available for a page_index knowledge base (it serves tree_search)'
    )
    assert info.value.sqlstate == "22023"
    client.create_knowledge_base("m", {"strategy": "page_index"})
    assert client.knowledge_base("m")["retrieval_config"]["method"] == "tree_search"
    with pytest.raises(ConfigError, match="tree_search needs an LLM"):
        client.search("m", "anything")  # no extra.model on this KB
    client.create_knowledge_base("plain")
    with pytest.raises(ConfigError, match="not available for a chunk_embed knowledge base"):
        client.search("plain", "x", method="tree_search")
    # Reindexing into another strategy takes the new strategy's method along.
    client.reindex_knowledge_base("plain", {"strategy": "page_index"})
    kb = client.knowledge_base("plain")
    assert kb["indexing_config"]["strategy"] == "page_index"
    assert kb["retrieval_config"]["method"] == "tree_search"


def test_project_defaults_apply_to_new_kbs_only(client: Client, conn: psycopg.Connection) -> None:
    conn.execute(
        "SELECT kb.set_default_config('indexing_config', "
        '\'{"chunk_size": 120, "extra": {"model": "openai/house-model"}}\')'
    )
    conn.execute("SELECT kb.set_default_config('retrieval_config', '{\"top_k\": 7}')")
    client.create_knowledge_base("a")
    client.create_knowledge_base("b", {"strategy": "page_index", "chunk_size": 150})
    a, b = client.knowledge_base("a"), client.knowledge_base("b")
    assert a["indexing_config"]["chunk_size"] == 120 and a["indexing_config"]["extra"] == {}
    assert b["indexing_config"]["chunk_size"] == 150
    assert b["indexing_config"]["extra"]["model"] == "openai/house-model"
    assert a["retrieval_config"]["top_k"] == 7 == b["retrieval_config"]["top_k"]
    # Changing the defaults never alters an existing KB.
    conn.execute("SELECT kb.set_default_config('indexing_config', '{\"chunk_size\": 90}')")
    assert client.knowledge_base("a")["indexing_config"]["chunk_size"] == 120
    assert conn.execute("SELECT kb.default_config('indexing_config')").fetchone()[0] == {
        "chunk_size": 90
    }
    with pytest.raises(psycopg.errors.InvalidParameterValue, match=r'unknown field "extra\.nope"'):
        conn.execute(
            "SELECT kb.set_default_config('indexing_config', '{\"extra\": {\"nope\": 1}}')"
        )


def test_llm_cache_purge(
    client: Client, conn: psycopg.Connection, dsn: str, provider: FakeProvider
) -> None:
    tree_kb(client, conn, provider, "pc")
    client.add_text("pc", "guide", GUIDE)
    run_worker(dsn)
    assert conn.execute("SELECT count(*) FROM kb.llm_call").fetchone()[0] == 5
    assert conn.execute("SELECT kb.purge_llm_cache(model => 'other')").fetchone()[0] == 0
    assert conn.execute("SELECT kb.purge_llm_cache()").fetchone()[0] == 5
    client.reindex_knowledge_base("pc")
    run_worker(dsn)
    assert len(provider.chat_calls) == 10  # purged answers are asked again


def test_version_handshake(conn: psycopg.Connection, dsn: str) -> None:
    conn.execute("UPDATE kb.version SET version = '0.0.1'")
    with psycopg.connect(dsn, autocommit=True) as fresh:
        with pytest.raises(psycopg.Error) as info:
            fresh.execute("SELECT kb.count_tokens('hello')")
    diag = info.value.diag
    assert diag.sqlstate == "KB003"
    assert (diag.message_primary or "").startswith(
        "kbpg's schema is version 0.0.1 but its PL/Python package is version"
    )
    assert diag.message_hint and "kbpg install" in diag.message_hint
    assert "Traceback" not in (diag.context or "")
