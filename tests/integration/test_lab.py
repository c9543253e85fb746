"""The Retrieval Lab in a real browser: headless Chromium (Debian's chromium and
chromium-driver) driven by selenium against `kbpg lab` served from this test. The tests
run a query, an A/B comparison and a test set, apply a preset and rechunk (and check the
database changed), preview chunks, change a document's usage_mode, import a BEIR folder,
and check that read-only and outside users see and may do only what row-level security
allows. Screenshots go to tests/artifacts/ (or $KBPG_ARTIFACTS)."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from kbpg.client import Client
from kbpg.lab.app import Lab, create_app
from tests.helpers import run_worker

ARTIFACTS = Path(os.environ.get("KBPG_ARTIFACTS") or Path(__file__).parents[1] / "artifacts")
BEIR = Path(__file__).parents[2] / "data" / "beir" / "scifact"

DOCS = {
    "Refunds": "# Refunds\n\nCustomers get their money back within 14 days of a return.\n\n"
    "## Exceptions\n\nGift cards and clearance items cannot be refunded.\n",
    "Shipping": "# Shipping\n\nParcels leave the Rotterdam warehouse within two business days.\n\n"
    "## Express\n\nExpress delivery reaches most of Europe overnight.\n",
    "Leave": "# Annual leave\n\nEmployees take 28 days of paid leave a year; the manager "
    "approves requests in the HR portal.\n",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def serve() -> Iterator[Callable[..., str]]:
    import uvicorn

    servers: list[Any] = []

    def start(dsn: str, kb: str | None = None, token: str | None = None) -> str:
        port = _free_port()
        server = uvicorn.Server(
            uvicorn.Config(
                create_app(Lab(dsn, kb, token)), host="127.0.0.1", port=port, log_level="warning"
            )
        )
        threading.Thread(target=server.run, daemon=True).start()
        deadline = time.monotonic() + 20
        while not server.started:
            if time.monotonic() > deadline:
                raise AssertionError("the lab server did not start")
            time.sleep(0.05)
        servers.append(server)
        return f"http://127.0.0.1:{port}/"

    yield start
    for s in servers:
        s.should_exit = True


@pytest.fixture
def browser() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ.setdefault("SE_OFFLINE", "true")  # never let Selenium Manager download
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1500,1100",
    ):
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
    driver.implicitly_wait(0)
    try:
        yield driver
    finally:
        driver.quit()


def _wait(driver: Any, cond: Callable[[], Any], what: str, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            got = cond()
            if got:
                return got
        except Exception as exc:  # the element is not there yet
            last = exc
        time.sleep(0.1)
    error = driver.find_element("id", "error").text
    raise AssertionError(f"timed out waiting for {what} (page error: {error!r}; {last})")


def _shot(driver: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(ARTIFACTS / f"lab-{name}.png"))


def _css(driver: Any, selector: str) -> list[Any]:
    return driver.find_elements("css selector", selector)


def _field(driver: Any, side: str, name: str) -> Any:
    return driver.find_element("css selector", f"#config-{side} [name='{name}']")


def _set(element: Any, value: str) -> None:
    element.clear()
    element.send_keys(value)


def _tab(driver: Any, name: str) -> None:
    driver.find_element("css selector", f"button[data-tab='{name}']").click()


def _confirm(driver: Any) -> str:
    _wait(driver, lambda: driver.find_element("id", "modal").is_displayed(), "the confirmation")
    body = driver.find_element("id", "modal-body").text
    driver.find_element("id", "modal-confirm").click()
    return str(body)


@pytest.fixture
def handbook(client: Client, conn: psycopg.Connection) -> str:
    client.create_knowledge_base("handbook", {"chunk_size": 120})
    for title, text in DOCS.items():
        client.add_text("handbook", title, text)
    run_worker(conn.info.dsn)
    return "handbook"


def test_lab_in_a_browser(
    browser: Any, serve: Callable[..., str], handbook: str, conn: psycopg.Connection
) -> None:
    d = browser
    d.get(serve(conn.info.dsn, handbook))
    _wait(d, lambda: d.find_element("id", "kb-info").text, "the KB to load")
    assert d.find_element("id", "kb").get_attribute("value") == "handbook"
    # Every retrieval setting of the KB is a field, with the KB's value.
    assert _field(d, "a", "top_k").get_attribute("value") == "10"
    assert _field(d, "a", "fusion").tag_name == "select"
    for name in (
        "method",
        "fusion",
        "vector_weight",
        "rrf_k",
        "fusion_depth",
        "similarity_threshold",
        "rerank",
        "ef_search",
        "bm25_k1",
        "filter",
    ):
        assert _field(d, "a", name) is not None

    # A single run: results with their source and each stage's rank and score.
    _set(d.find_element("id", "query"), "how many days of paid leave")
    d.find_element("id", "run-search").click()
    rows = _wait(d, lambda: _css(d, "#results-a tr.result"), "results")
    first = rows[0].find_elements("tag name", "td")
    assert first[1].text.startswith("Leave › Annual leave")
    assert "28 days" in first[2].text
    assert " · " in first[3].text and " · " in first[4].text  # vector and BM25 rank · score
    charts = {c.get_attribute("data-stage") for c in _css(d, "svg.stage-chart")}
    assert {"vector_score", "bm25_score", "fused_score"} <= charts
    _shot(d, "search")

    # A/B: B is full_text only; both lists, moves marked, overlap and the rank-shift chart.
    d.find_element("id", "ab-mode").click()
    d.find_element("css selector", "#config-b [name='method'] option[value='full_text']").click()
    _set(d.find_element("id", "query"), "Rotterdam warehouse parcels")
    d.find_element("id", "run-search").click()
    overlap = _wait(d, lambda: d.find_element("id", "overlap").text, "the A/B overlap")
    assert overlap.startswith("overlap@")
    b_rows = _css(d, "#results-b tr.result")
    assert b_rows and b_rows[0].find_elements("tag name", "td")[2].text.startswith("Shipping")
    assert _css(d, "#rank-shift-chart")
    moves = {r.find_elements("tag name", "td")[1].text for r in b_rows}
    assert moves <= {"=", "new"} | {m for m in moves if m[:1] in "▲▼"}
    _shot(d, "ab")

    # Apply A's top_k as a preset: the confirmation shows the diff, then the KB changes.
    _set(_field(d, "a", "top_k"), "7")
    d.find_element("id", "apply-a").click()
    diff = _confirm(d)
    assert "top_k" in diff and "10" in diff and "7" in diff
    _wait(d, lambda: "Applied" in d.find_element("id", "search-note").text, "the preset")
    cfg = conn.execute("SELECT retrieval_config FROM kb.knowledge_base WHERE name = 'handbook'")
    assert cfg.fetchone()[0]["top_k"] == 7

    # A test set: saved, run with A and B, metrics, bars and the failing queries.
    _tab(d, "tests")
    _set(d.find_element("id", "set-name"), "smoke")
    d.find_element("id", "set-lines").send_keys(
        "how many days of paid leave => Leave\n"
        "which items cannot be refunded => Refunds › Refunds › Exceptions\n"
        "overnight delivery in Europe => Shipping\n"
        "what is the capital of Peru => Shipping › Peru\n"  # no such section: a miss
    )
    d.find_element("css selector", "#new-set button").click()
    _wait(d, lambda: _css(d, "#sets tr[data-set='smoke']"), "the saved test set")
    d.find_element("id", "set-compare").click()
    d.find_element("css selector", "#sets tr[data-set='smoke'] .run-set").click()
    metrics = _wait(d, lambda: _css(d, "#set-result p.metrics"), "test-set metrics")
    assert len(metrics) == 2 and "Success@1" in metrics[0].text and "nDCG@10" in metrics[0].text
    assert _css(d, "#metric-chart rect.bar-a") and _css(d, "#metric-chart rect.bar-b")
    failures = [r.text for r in _css(d, "#failures tr.failure")]
    assert len(_css(d, "#failures tr.query")) == 4  # every query, with its rank under A and B
    assert any("capital of Peru" in f for f in failures)
    runs = conn.execute("SELECT metrics FROM kb.test_run ORDER BY id").fetchall()
    assert len(runs) == 2 and runs[0][0]["queries"] == 4
    _shot(d, "test-set")

    # BEIR import: of the queries whose relevant documents the KB holds (five here).
    from kbpg.evaluate import load_beir

    beir = load_beir(BEIR, "test")
    for qid in list(beir.queries)[:5]:
        for doc_id, grade in beir.qrels[qid].items():
            if grade > 0 and doc_id in beir.corpus:
                title, text = beir.corpus[doc_id]
                conn.execute(
                    "SELECT kb.put_document('handbook', %s, %s)", (doc_id, f"{title}\n\n{text}")
                )
    _set(d.find_element("id", "beir-name"), "scifact-5")
    _set(d.find_element("id", "beir-folder"), str(BEIR))
    _set(d.find_element("id", "beir-limit"), "5")
    d.find_element("css selector", "#beir button").click()
    row = _wait(d, lambda: _css(d, "#sets tr[data-set='scifact-5']"), "the imported set")
    assert row[0].find_elements("tag name", "td")[1].text == "5"

    # Chunking preview of a document under another config, then a rechunk to it.
    _tab(d, "chunks")
    d.find_element("css selector", "#chunk-doc option[value='Shipping']").click()
    config = json.loads(d.find_element("id", "chunk-config").get_attribute("value"))
    config.update(chunker="sentence", sentences_per_chunk=1)
    _set(d.find_element("id", "chunk-config"), json.dumps(config))
    d.find_element("id", "preview").click()
    chunks = _wait(d, lambda: _css(d, "#chunk-list li.chunk"), "the preview")
    assert len(chunks) >= 3 and "Rotterdam" in chunks[0].text + chunks[1].text
    _shot(d, "chunks")
    d.find_element("id", "rechunk").click()
    _confirm(d)
    _wait(
        d,
        lambda: (
            "building" in d.find_element("id", "rechunk-status").text
            or "active" in d.find_element("id", "rechunk-status").text
        ),
        "the rechunk to start",
    )
    run_worker(conn.info.dsn)
    _wait(
        d,
        lambda: (
            "active" in d.find_element("id", "rechunk-status").text
            and "(serving)" in d.find_element("id", "rechunk-status").text
        ),
        "the rechunk to finish",
    )
    chunker = conn.execute(
        "SELECT ix.indexing_config->>'chunker' FROM kb.knowledge_base k JOIN kb.kb_index ix "
        "ON ix.id = k.active_index_id WHERE k.name = 'handbook'"
    ).fetchone()
    assert chunker == ("sentence",)

    # Documents: status and counts; usage_mode changed from the page.
    _tab(d, "docs")
    d.find_element("id", "refresh-docs").click()
    time.sleep(0.5)  # the table is drawn anew by the refresh
    leave = "#docs tr[data-doc='Leave']"
    assert (
        _wait(d, lambda: d.find_element("css selector", f"{leave} td.status").text, "the documents")
        == "ready"
    )
    _wait(
        d,
        lambda: (
            d.find_element(
                "css selector", f"{leave} select.usage-mode option[value='system']"
            ).click()
            or True
        ),
        "the usage_mode picker",
    )
    _wait(
        d,
        lambda: (
            conn.execute("SELECT usage_mode FROM kb.document WHERE title = 'Leave'").fetchone()
            == ("system",)
        ),
        "usage_mode to change",
    )
    _shot(d, "documents")


def test_lab_respects_row_level_security(
    browser: Any, serve: Callable[..., str], handbook: str, conn: psycopg.Connection
) -> None:
    viewer, outsider = f"v{uuid.uuid4().hex[:8]}", f"o{uuid.uuid4().hex[:8]}"
    for role in (viewer, outsider):
        conn.execute(f'CREATE ROLE "{role}" LOGIN')
    try:
        conn.execute("SELECT kb.create_team(%s, acting_as => %s)", (viewer + "_team", viewer))
        conn.execute("SELECT kb.share_knowledge_base('handbook', %s)", (viewer + "_team",))
        dsn = conn.info.dsn
        d = browser
        # Shared read-only: the KB is there and searchable; changing it is not offered.
        d.get(serve(make_conninfo(dsn, user=viewer)))
        _wait(d, lambda: "read-only" in d.find_element("id", "kb-info").text, "read-only")
        assert not d.find_element("id", "apply-a").is_displayed()
        _set(d.find_element("id", "query"), "paid leave")
        d.find_element("id", "run-search").click()
        assert _wait(d, lambda: _css(d, "#results-a tr.result"), "results as the viewer")
        _shot(d, "read-only")
        # ... and the server refuses it even when asked directly.
        base = serve(make_conninfo(dsn, user=viewer))
        page = urllib.request.urlopen(base).read().decode()
        csrf = page.split('data-csrf="')[1].split('"')[0]
        req = urllib.request.Request(
            base + "api/preset/apply",
            data=json.dumps({"kb": "handbook", "config": {"top_k": 3}}).encode(),
            headers={"Content-Type": "application/json", "X-Kbpg-Lab": csrf},
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(req)
        assert refused.value.code == 403
        assert "shared with your team read-only" in json.loads(refused.value.read())["error"]
        # Without the page's token a write is refused before it reaches the database.
        req.remove_header("X-kbpg-lab")
        with pytest.raises(urllib.error.HTTPError) as no_token:
            urllib.request.urlopen(req)
        assert no_token.value.code == 403
        # An outsider sees no knowledge base at all.
        d.get(serve(make_conninfo(dsn, user=outsider)))
        _wait(
            d,
            lambda: "No knowledge base you can read" in d.find_element("id", "error").text,
            "the outsider's empty list",
        )
    finally:
        for role in (viewer, outsider):
            conn.execute(f'DROP OWNED BY "{role}"')
            conn.execute(f'DROP ROLE "{role}"')


def test_lab_beyond_loopback_needs_a_token(
    serve: Callable[..., str], handbook: str, conn: psycopg.Connection
) -> None:
    base = serve(conn.info.dsn, None, "s3cret")
    with pytest.raises(urllib.error.HTTPError) as denied:
        urllib.request.urlopen(base + "api/kbs")
    assert denied.value.code == 401
    ok = urllib.request.urlopen(base + "api/kbs?token=s3cret").read()
    assert "handbook" in ok.decode()


def test_lab_serves_requests_side_by_side_and_offers_only_what_a_kb_reads(
    serve: Callable[..., str], handbook: str, conn: psycopg.Connection, client: Client
) -> None:
    import asyncio

    import httpx

    class SlowLab(Lab):
        """One slow query (a long preview), as a big document makes."""

        def query(self, sql: str, params: Any = None) -> list[dict[str, Any]]:
            if "preview_chunks" in sql:
                time.sleep(5.0)
            return super().query(sql, params)

    lab = SlowLab(conn.info.dsn)
    app = create_app(lab)
    headers = {"X-Kbpg-Lab": lab.csrf}

    async def both() -> tuple[float, float]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://lab") as http:
            started = time.monotonic()

            async def timed(coro: Any) -> float:
                response = await coro
                assert response.status_code == 200, response.text
                return time.monotonic() - started

            slow = timed(
                http.post(
                    "/api/preview", json={"kb": handbook, "text": "# A\n\nb"}, headers=headers
                )
            )
            fast = timed(
                http.post("/api/search", json={"kb": handbook, "query": "refund"}, headers=headers)
            )
            took_slow, took_fast = await asyncio.gather(slow, fast)
            return took_slow, took_fast

    took_slow, took_fast = asyncio.run(both())
    # Served one after the other, the search would end after the preview: it ends while
    # the preview still sleeps (with seconds to spare for a loaded machine).
    assert took_slow >= 5.0 and took_fast < took_slow - 2.0, (took_slow, took_fast)
    # No favicon request fails; a chunk_embed KB's form has no tree or graph settings.
    base = serve(conn.info.dsn)
    assert urllib.request.urlopen(base + "favicon.ico").status == 204
    info = json.loads(urllib.request.urlopen(base + f"api/kb/{handbook}").read())
    assert info["methods"] == ["hybrid", "vector", "full_text"]
    for unused in ("max_documents", "toc_token_budget", "reference_expansion", "graph_weight"):
        assert unused not in info["retrieval_config"], unused
    assert "vector_weight" in info["retrieval_config"]
    # A knowledge base that does not exist is named, with the way to list them.
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(base + "api/kb/nope")
    assert missing.value.code == 404
    body = json.loads(missing.value.read())
    assert body["error"] == 'knowledge base "nope" does not exist'
    # A test query must expect documents the KB holds.
    page = urllib.request.urlopen(base).read().decode()
    csrf = page.split('data-csrf="')[1].split('"')[0]
    req = urllib.request.Request(
        base + "api/test-sets/save",
        data=json.dumps(
            {"kb": handbook, "name": "typo", "queries": "money back => Refund\n"}
        ).encode(),
        headers={"Content-Type": "application/json", "X-Kbpg-Lab": csrf},
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(req)
    assert refused.value.code == 400
    error = json.loads(refused.value.read())["error"]
    assert error == (
        'test query "money back" expects "Refund", which names no document of '
        'knowledge base "handbook"'
    )
    assert conn.execute("SELECT count(*) FROM kb.test_set").fetchone() == (0,)
