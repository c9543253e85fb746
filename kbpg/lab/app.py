"""The Retrieval Lab: a local web page to test, compare and tune retrieval (``kbpg lab``).

Every read and write goes through kbpg's SQL functions over the user's own connection,
so the page shows what applications get and row-level security decides what the user
sees and may change. Pages are a Jinja template and one plain JavaScript file; no build.

Security: the server binds 127.0.0.1 unless told otherwise, and then an access token is
required (``?token=`` once, then a cookie). Every state-changing request must carry the
page's own random token in a header, which another site's page cannot read (CSRF).
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import secrets
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psycopg
from kbpg_db import config
from psycopg.rows import dict_row
from psycopg.types.json import Json
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from kbpg.lab import LabError, testsets

HERE = Path(__file__).parent


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Lab:
    """State of one lab server: where to connect and its tokens."""

    def __init__(self, dsn: str, kb: str | None = None, access_token: str | None = None) -> None:
        self.dsn = dsn
        self.kb = kb
        self.access_token = access_token  # required when bound beyond loopback
        self.csrf = secrets.token_urlsafe(24)

    def connect(self) -> psycopg.Connection[dict[str, Any]]:
        return psycopg.connect(self.dsn, autocommit=True, row_factory=dict_row)

    def query(self, sql: str, params: Any = None) -> list[dict[str, Any]]:
        try:
            with self.connect() as conn:
                return conn.execute(sql, params).fetchall()
        except psycopg.Error as exc:
            raise LabError.from_db(exc) from None


# ---------------------------------------------------------------------------- helpers


async def _body(request: Request) -> dict[str, Any]:
    try:
        data = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise LabError("the request body must be JSON") from None
    if not isinstance(data, dict):
        raise LabError("the request body must be a JSON object")
    return data


def _str(data: dict[str, Any], key: str, required: bool = True) -> str:
    value = data.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value.strip()):
        raise LabError(f"{key} must be a non-empty string")
    return value


def _config(data: dict[str, Any], key: str = "config") -> dict[str, Any]:
    value = data.get(key) or {}
    if not isinstance(value, dict):
        raise LabError(f"{key} must be an object of retrieval settings")
    # An empty field means "the KB's setting": left out, not null.
    return {k: v for k, v in value.items() if v is not None and v != ""}


def _lab(request: Request) -> Lab:
    lab: Lab = request.app.state.lab
    return lab


def _post(
    work: Callable[[Lab, dict[str, Any]], Response],
) -> Callable[[Request], Awaitable[Response]]:
    """A POST endpoint: the JSON body read on the event loop, the work (blocking database
    calls) in a worker thread, so one slow request never holds up the others."""

    async def endpoint(request: Request) -> Response:
        data = await _body(request)
        return await run_in_threadpool(work, _lab(request), data)

    endpoint.__name__ = work.__name__
    return endpoint


# ---------------------------------------------------------------------------- pages


async def page(request: Request) -> Response:
    lab = _lab(request)
    templates: Jinja2Templates = request.app.state.templates
    response = templates.TemplateResponse(
        request, "lab.html", {"csrf": lab.csrf, "kb": lab.kb or ""}
    )
    token = request.query_params.get("token")
    if token and lab.access_token and hmac.compare_digest(token, lab.access_token):
        response.set_cookie("kbpg_lab_token", token, httponly=True, samesite="strict")
    return response


# ---------------------------------------------------------------------------- reads


def kbs(request: Request) -> Response:
    rows = _lab(request).query(
        "SELECT name, embedding_model, documents, ready, pending, failed, chunks, team, "
        "visibility, access FROM kb.list_knowledge_bases() ORDER BY name"
    )
    return _json(rows)


def _found(rows: list[dict[str, Any]], kb: str) -> list[dict[str, Any]]:
    """The rows of a query on one knowledge base's row, or the error naming it."""
    if not rows:
        raise LabError(
            f'knowledge base "{kb}" does not exist', 404, "kb.list_knowledge_bases() lists them"
        )
    return rows


def kb_info(request: Request) -> Response:
    name = request.path_params["kb"]
    # A KB's indexing_config is its serving generation's (kb._knowledge_base_check).
    rows = _lab(request).query(
        "SELECT k.name, k.retrieval_config, k.indexing_config, "
        "k.indexing_config->>'strategy' AS strategy, "
        "(SELECT l.access FROM kb.list_knowledge_bases() l WHERE l.name = k.name) AS access "
        "FROM kb.knowledge_base k WHERE k.name = %s",
        (name,),
    )
    info = _found(rows, name)[0]
    # What the form offers: the methods this KB serves, and only settings it reads.
    spec = config.STRATEGIES.get(info["strategy"])
    info["methods"] = list(spec.methods) if spec is not None else list(config.METHODS)
    unused = config.unused_retrieval_fields(info["strategy"], info["indexing_config"] or {})
    info["retrieval_config"] = {
        k: v for k, v in (info["retrieval_config"] or {}).items() if k not in unused
    }
    return _json(info)


def _search(lab: Lab, kb: str, query: str, config: dict[str, Any]) -> dict[str, Any]:
    rows = lab.query(
        "SELECT e.*, c.content, c.heading_path, c.page, d.source_uri "
        "FROM kb.explain_search(%s, %s, options => %s::jsonb) e "
        "LEFT JOIN kb.chunk c ON c.id = e.chunk_id LEFT JOIN kb.document d ON d.id = c.document_id "
        "ORDER BY e.final_rank",
        (kb, query, Json(config)),
    )
    usage = rows[0]["usage"] if rows else None
    for r in rows:
        path = " › ".join([r["title"] or "", *(r["heading_path"] or [])])
        r["source"] = path + (f" (p.{r['page']})" if r.get("page") else "")
        r.pop("usage", None)
    return {"results": rows, "note": rows[0]["note"] if rows else None, "usage": usage}


def _json(value: Any, status: int = 200) -> JSONResponse:
    """Timestamps and numerics as text: the page shows them as they are."""
    return JSONResponse(json.loads(json.dumps(value, default=str)), status)


def search(lab: Lab, data: dict[str, Any]) -> Response:
    return _json(_search(lab, _str(data, "kb"), _str(data, "query"), _config(data)))


def compare(lab: Lab, data: dict[str, Any]) -> Response:
    kb, query = _str(data, "kb"), _str(data, "query")
    a = _search(lab, kb, query, _config(data, "a"))["results"]
    b = _search(lab, kb, query, _config(data, "b"))["results"]
    rank_a = {r["chunk_id"]: r["final_rank"] for r in a}
    rank_b = {r["chunk_id"]: r["final_rank"] for r in b}
    for r in a:
        r["other_rank"] = rank_b.get(r["chunk_id"])
    for r in b:
        r["other_rank"] = rank_a.get(r["chunk_id"])
        before = rank_a.get(r["chunk_id"])
        r["move"] = "new" if before is None else (before - r["final_rank"])
    k = max(len(a), len(b), 1)
    overlap = len(set(rank_a) & set(rank_b)) / k
    return _json({"a": a, "b": b, "overlap": round(overlap, 4), "k": k})


def documents(request: Request) -> Response:
    rows = _lab(request).query(
        "SELECT document_id, title, status, usage_mode, chunk_count, progress, error, "
        "tokens_embedded, embedding_cost_usd, llm_calls, llm_cost_usd, source_format, media, "
        "updated_at FROM kb.list_documents(%s) ORDER BY title",
        (request.path_params["kb"],),
    )
    return _json(rows)


def progress(request: Request) -> Response:
    name = request.path_params["kb"]
    lab = _lab(request)
    rows = lab.query(
        "SELECT index_id AS id, status, error, serving, jobs_done AS done, "
        "jobs_waiting AS waiting, jobs_failed AS failed "
        "FROM kb.index_generations(%s, latest => 3)",
        (name,),
    )
    return _json(rows)


def preview(lab: Lab, data: dict[str, Any]) -> Response:
    kb = _str(data, "kb")
    text = _str(data, "text", required=False)
    title = data.get("document")
    if not text.strip():
        if not title:
            raise LabError("pick a document or paste a text to preview")
        got = lab.query(
            "SELECT d.content FROM kb.document d JOIN kb.knowledge_base k ON k.id = d.kb_id "
            "WHERE k.name = %s AND d.title = %s",
            (kb, title),
        )
        if not got or got[0]["content"] is None:
            raise LabError(f'document "{title}" has no text yet', 404)
        text = got[0]["content"]
    config = data.get("indexing_config") or {}
    if not isinstance(config, dict):
        raise LabError("indexing_config must be a JSON object")
    rows = lab.query(
        "SELECT ordinal, content, token_count, heading_path, page, char_start, char_end "
        "FROM kb.preview_chunks(%s, %s::jsonb)",
        (text, Json(config)),
    )
    return _json(rows)


def test_sets(request: Request) -> Response:
    rows = _lab(request).query("SELECT * FROM kb.test_sets(%s)", (request.path_params["kb"],))
    return _json(rows)


def run_set(lab: Lab, data: dict[str, Any]) -> Response:
    kb, name = _str(data, "kb"), _str(data, "test_set")
    runs = {}
    for side in ("a", "b"):
        if side in data and data[side] is not None:
            runs[side] = lab.query(
                "SELECT kb.run_test_set(%s, %s, %s::jsonb) AS r",
                (kb, name, Json(_config(data, side))),
            )[0]["r"]
    if not runs:
        raise LabError("give a configuration to run: a (and b to compare)")
    return JSONResponse(runs)


# ---------------------------------------------------------------------------- writes


def preset_diff(lab: Lab, data: dict[str, Any]) -> Response:
    kb = _str(data, "kb")
    rows = lab.query(
        "SELECT k.retrieval_config AS current, kb.validate_config('retrieval_config', "
        "k.retrieval_config || %s::jsonb, k.indexing_config->>'strategy') AS proposed "
        "FROM kb.knowledge_base k WHERE k.name = %s",
        (Json(_config(data)), kb),
    )
    cur, new = _found(rows, kb)[0]["current"], rows[0]["proposed"]
    diff = [
        {"field": key, "from": cur.get(key), "to": new.get(key)}
        for key in sorted(set(cur) | set(new))
        if cur.get(key) != new.get(key)
    ]
    return JSONResponse({"diff": diff, "proposed": new})


def preset_apply(lab: Lab, data: dict[str, Any]) -> Response:
    kb = _str(data, "kb")
    rows = lab.query(
        "SELECT kb.set_retrieval_config(k.name, k.retrieval_config || %s::jsonb) AS cfg "
        "FROM kb.knowledge_base k WHERE k.name = %s",
        (Json(_config(data)), kb),
    )
    return JSONResponse({"retrieval_config": _found(rows, kb)[0]["cfg"]})


def rechunk(lab: Lab, data: dict[str, Any]) -> Response:
    config = data.get("indexing_config")
    if not isinstance(config, dict):
        raise LabError("indexing_config must be a JSON object")
    rows = lab.query(
        "SELECT kb.reindex_knowledge_base(%s, %s::jsonb) AS id", (_str(data, "kb"), Json(config))
    )
    return JSONResponse({"index_id": rows[0]["id"]})


def document_action(lab: Lab, data: dict[str, Any]) -> Response:
    kb, title, action = _str(data, "kb"), _str(data, "title"), _str(data, "action")
    if action == "usage_mode":
        lab.query(
            "SELECT kb.set_document_usage_mode(%s, %s, %s)", (kb, title, _str(data, "usage_mode"))
        )
    elif action == "reindex":
        lab.query("SELECT kb.reindex_document(%s, %s)", (kb, title))
    elif action == "delete":
        lab.query("SELECT kb.delete_document(%s, %s::text)", (kb, title))
    else:
        raise LabError("action must be usage_mode, reindex or delete")
    return JSONResponse({"ok": True})


def save_set(lab: Lab, data: dict[str, Any]) -> Response:
    kb, name = _str(data, "kb"), _str(data, "name")
    queries = testsets.parse_lines(_str(data, "queries"))
    count = testsets.save(lab.connect, kb, name, data.get("description") or "", queries)
    return JSONResponse({"name": name, "queries": count})


def import_beir(lab: Lab, data: dict[str, Any]) -> Response:
    limit = data.get("limit")
    count = testsets.import_beir(
        lab.connect,
        _str(data, "kb"),
        _str(data, "name"),
        Path(_str(data, "folder")),
        data.get("split") or "test",
        int(limit) if limit else None,
    )
    return JSONResponse({"name": data["name"], "queries": count})


def delete_set(lab: Lab, data: dict[str, Any]) -> Response:
    lab.query("SELECT kb.delete_test_set(%s, %s)", (_str(data, "kb"), _str(data, "name")))
    return JSONResponse({"ok": True})


# ---------------------------------------------------------------------------- the app


def _guard(app: Starlette) -> Any:
    async def middleware(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        request = Request(scope)
        lab: Lab = app.state.lab
        if lab.access_token is not None:
            given = (
                request.headers.get("x-kbpg-token")
                or request.cookies.get("kbpg_lab_token")
                or request.query_params.get("token")
                or ""
            )
            if not hmac.compare_digest(given, lab.access_token):
                await JSONResponse({"error": "an access token is required"}, 401)(
                    scope, receive, send
                )
                return
        if request.method not in ("GET", "HEAD") and not hmac.compare_digest(
            request.headers.get("x-kbpg-lab", ""), lab.csrf
        ):
            await JSONResponse({"error": "missing or wrong page token (reload the page)"}, 403)(
                scope, receive, send
            )
            return
        await app(scope, receive, send)

    return middleware


async def _lab_error(request: Request, exc: Exception) -> Response:
    status = exc.status if isinstance(exc, LabError) else 400
    hint = exc.hint if isinstance(exc, LabError) else None
    return JSONResponse({"error": str(exc), "hint": hint}, status)


def favicon(request: Request) -> Response:
    return Response(status_code=204)  # none: the page asks for no icon (lab.html)


def create_app(lab: Lab) -> Any:
    routes = [
        Route("/", page),
        Route("/favicon.ico", favicon),
        Route("/api/kbs", kbs),
        Route("/api/kb/{kb}", kb_info),
        Route("/api/kb/{kb}/documents", documents),
        Route("/api/kb/{kb}/progress", progress),
        Route("/api/kb/{kb}/test-sets", test_sets),
        Route("/api/search", _post(search), methods=["POST"]),
        Route("/api/compare", _post(compare), methods=["POST"]),
        Route("/api/preview", _post(preview), methods=["POST"]),
        Route("/api/test-sets/run", _post(run_set), methods=["POST"]),
        Route("/api/test-sets/save", _post(save_set), methods=["POST"]),
        Route("/api/test-sets/import-beir", _post(import_beir), methods=["POST"]),
        Route("/api/test-sets/delete", _post(delete_set), methods=["POST"]),
        Route("/api/preset/diff", _post(preset_diff), methods=["POST"]),
        Route("/api/preset/apply", _post(preset_apply), methods=["POST"]),
        Route("/api/rechunk", _post(rechunk), methods=["POST"]),
        Route("/api/document", _post(document_action), methods=["POST"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    app = Starlette(routes=routes, exception_handlers={LabError: _lab_error})
    app.state.lab = lab
    app.state.templates = Jinja2Templates(directory=str(HERE / "templates"))
    guarded = _guard(app)
    guarded.state = app.state  # type: ignore[attr-defined]
    return guarded


def serve(dsn: str, kb: str | None, host: str, port: int, token: str | None) -> None:
    import uvicorn

    if not is_loopback(host) and not token:
        token = secrets.token_urlsafe(18)
    lab = Lab(dsn, kb, token if (token or not is_loopback(host)) else None)
    url = f"http://{host}:{port}/" + (f"?token={lab.access_token}" if lab.access_token else "")
    print(f"kbpg lab: {url}  (Ctrl-C stops it)", flush=True)
    uvicorn.run(create_app(lab), host=host, port=port, log_level="warning")
