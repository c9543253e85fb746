"""The ``kbpg`` command line."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

from kbpg_db.config import CHUNKERS, METHODS, STRATEGIES, USAGE_MODES

from kbpg.errors import KbpgError

CONCURRENCY_HELP = (
    "connections running jobs side by side (default: one per core of the database server, "
    "at most 4; the local model's threads are shared out over them)"
)


def _print_table(rows: list[dict[str, Any]], columns: list[str] | None = None) -> None:
    if not rows:
        print("(none)")
        return
    columns = columns or list(rows[0].keys())
    cells = [[("" if r.get(c) is None else str(r.get(c))) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)))


def _json_arg(text: str | None, what: str) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise KbpgError(f"{what} is not valid JSON: {exc}") from None


def _client(args: argparse.Namespace) -> Any:
    from kbpg.client import Client

    return Client(args.dsn)


# --- cluster ------------------------------------------------------------------------------
def cmd_up(args: argparse.Namespace) -> int:
    from kbpg.cluster import Cluster
    from kbpg.migrate import migrate

    cluster = Cluster.default()
    cluster.start()
    cluster.ensure_database()
    import psycopg

    with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
        migrate(conn)
    print(f"kbpg is up: {cluster.dsn()}")
    print(f"  data: {cluster.data}   log: {cluster.log_file}")
    if args.llm:
        from kbpg import llmserver

        api_base = llmserver.start_background(
            cluster.home, Path(args.llm), args.llm_port, args.llm_threads
        )
        print(f"  LLM: {Path(args.llm).name} at {api_base} (extra.api_base; model openai/local)")
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    from kbpg import llmserver
    from kbpg.cluster import Cluster

    cluster = Cluster.default()
    if llmserver.stop_background(cluster.home):
        print("stopped the LLM server")
    if not cluster.running():
        print("kbpg's embedded cluster is not running")
        return 0
    cluster.stop()
    print("stopped")
    return 0


def cmd_llm_serve(args: argparse.Namespace) -> int:
    from kbpg import llmserver

    return llmserver.serve(
        Path(args.model), args.host, args.port, args.threads, args.ctx, args.parallel
    )


def cmd_dsn(args: argparse.Namespace) -> int:
    from kbpg.cluster import Cluster

    if args.dsn:
        print(args.dsn)
        return 0
    print(Cluster.default().dsn())
    return 0


def cmd_install(args: argparse.Namespace) -> int:
    from kbpg_db import __version__

    from kbpg.cluster import Cluster
    from kbpg.db import connect, resolve_dsn, scalar
    from kbpg.migrate import check_python, check_server, migrate
    from kbpg.resources import migrations_dir

    dsn = resolve_dsn(args.dsn)
    cluster = Cluster.default()
    if cluster.running() and dsn == cluster.dsn():
        cluster.sync_plpython()
    with connect(dsn) as conn:
        check_server(conn)
        installed = scalar(conn, "SELECT to_regclass('kb.version') IS NOT NULL")
        previous = scalar(conn, "SELECT version FROM kb.version") if installed else None
        applied = migrate(conn)
        check_python(conn)
    if previous is None:
        print(f"installed kbpg {__version__}")
    elif previous != __version__:
        print(f"upgraded kbpg {previous} -> {__version__}")
    else:
        print(f"kbpg {__version__} is up to date")
    run_once = {p.name for p in migrations_dir().glob("*.sql")}
    print("  migrations applied: " + (", ".join(a for a in applied if a in run_once) or "none"))
    dropped = [a.removeprefix("drop ") for a in applied if a.startswith("drop ")]
    if dropped:
        print("  functions removed or recreated: " + ", ".join(dropped))
    print(f"  PL/Python on the server loads kbpg_db {__version__}")
    return 0


def cmd_server_setup(args: argparse.Namespace) -> int:
    from kbpg.serversetup import server_setup

    server_setup(
        args.python,
        Path(args.target) if args.target else None,
        force=args.force,
        with_system=args.system_packages,
    )
    return 0


def cmd_replica(args: argparse.Namespace) -> int:
    from kbpg.cluster import Cluster

    primary = Cluster.default()
    home = Path(args.home) if args.home else primary.home.with_name(primary.home.name + "-replica")
    replica = Cluster(home.resolve())
    if args.action == "create":
        if not primary.running():
            raise KbpgError("the embedded cluster is not running", hint="kbpg up")
        print(f"copying {primary.home} into a hot standby at {replica.home} ...", flush=True)
        replica.replicate(primary)
        replica.start()
        print(f"replica is up (read-only, follows the primary): {replica.dsn()}")
    elif args.action == "start":
        replica.start()
        print(f"replica is up: {replica.dsn()}")
    elif args.action == "stop":
        replica.stop()
        print("stopped the replica")
    else:
        if not replica.initialized:
            raise KbpgError(f"no replica at {replica.home}", hint="kbpg replica create")
        print(replica.dsn())
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from kbpg.cluster import Cluster

    if not args.dsn:
        cluster = Cluster.default()
        state = (
            "running"
            if cluster.running()
            else ("stopped" if cluster.initialized else "not created (kbpg up creates it)")
        )
        print(f"embedded cluster: {state}  ({cluster.home})")
        if not cluster.running():
            return 0 if not cluster.initialized else 1
    with _client(args) as client:
        if args.kb:
            return _kb_status(client, args.kb)
        rows = client.queue_status()
    print("\njob queue:")
    _print_table(rows)
    return 0


def _kb_status(client: Any, kb: str) -> int:
    """Why a KB's documents are or are not searchable yet: its sources, and each document
    not ready with its error, attempts and state."""
    client.knowledge_base(kb)  # an unknown KB is an error, not an empty table
    sources = client.sources(kb)
    print(f"sources of {kb!r}:")
    if sources:
        for s in sources:
            s["lag"] = _age(s["lag"])
            s["last_sync_at"] = (
                s["last_sync_at"].isoformat(" ", "seconds") if s["last_sync_at"] else None
            )
        _print_table(
            sources,
            [
                "source",
                "kind",
                "state",
                "documents",
                "ready",
                "queued",
                "failed",
                "lag",
                "last_sync_at",
                "last_error",
            ],
        )
    else:
        print("  none (kbpg sync adds a folder as a source)")
    docs = client.document_status(kb)
    counts: dict[str, int] = {}
    for d in docs:
        counts[d["status"]] = counts.get(d["status"], 0) + 1
    print("\ndocuments: " + (", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none"))
    waiting = [d for d in docs if d["status"] != "ready"]
    if waiting:
        _print_table(waiting, ["title", "status", "attempts", "progress", "error"])
        if counts.get("error"):
            print(f"\n{counts['error']} failed for good: kbpg retry {kb} queues them again")
    return 0


def _age(delta: Any) -> str | None:
    if delta is None:
        return None
    seconds = delta.total_seconds()
    return f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def cmd_retry(args: argparse.Namespace) -> int:
    with _client(args) as client:
        n = client.retry_failed(args.kb, args.title)
    print(f"queued {n} failed document{'s' if n != 1 else ''} again")
    return 0


def cmd_sync(args: argparse.Namespace) -> int:
    from kbpg.sync import sync

    metadata = _metadata_args(args.metadata)
    if args.name and len(args.paths) > 1:
        raise KbpgError("--name names one source: give one PATH with it")
    failed = 0
    with _client(args) as client:
        client.knowledge_base(args.kb)
        for path in args.paths:
            plan, done = sync(
                client,
                args.kb,
                Path(path),
                name=args.name,
                dry_run=args.dry_run,
                force=args.force,
                metadata=metadata,
                usage_mode=args.usage_mode,
            )
            shown = {k: v for k, v in done.items() if v or k in ("added", "changed", "removed")}
            prefix = "would be: " if args.dry_run else ""
            print(f"{plan.source}: {prefix}" + ", ".join(f"{v} {k}" for k, v in shown.items()))
            failed += done.get("failed", 0)
    if args.wait and not args.dry_run:
        from kbpg.db import resolve_dsn
        from kbpg.worker import Worker

        Worker(resolve_dsn(args.dsn), concurrency=args.concurrency, once=True).run()
    return 1 if failed else 0


# --- knowledge bases ----------------------------------------------------------------------
def cmd_kb_create(args: argparse.Namespace) -> int:
    icfg = _json_arg(args.indexing_config, "--indexing-config") or {}
    rcfg = _json_arg(args.retrieval_config, "--retrieval-config") or {}
    for key in ("strategy", "chunker", "chunk_size", "chunk_overlap", "embedding_model"):
        value = getattr(args, key)
        if value is not None:
            icfg[key] = value
    if args.knowledge_graph:
        icfg.setdefault("knowledge_graph", {})["enabled"] = True
    with _client(args) as client:
        kb_id = client.create_knowledge_base(
            args.name, icfg, rcfg, args.description or "", args.team, args.private
        )
    print(f"created knowledge base {args.name!r} (id {kb_id})")
    return 0


def cmd_kb_list(args: argparse.Namespace) -> int:
    with _client(args) as client:
        _print_table(
            client.list_knowledge_bases(
                include_shared=not args.no_shared, own_only=args.own_only, team=args.team
            )
        )
    return 0


def cmd_kb_show(args: argparse.Namespace) -> int:
    with _client(args) as client:
        kb = client.knowledge_base(args.name)
        docs = client.document_status(args.name)
    print(
        f"knowledge base {kb['name']!r}: model {kb['embedding_model']} ({kb['embedding_dim']} dims)"
    )
    print("indexing_config:  " + json.dumps(kb["indexing_config"], sort_keys=True))
    print("retrieval_config: " + json.dumps(kb["retrieval_config"], sort_keys=True))
    counts: dict[str, int] = {}
    for d in docs:
        counts[d["status"]] = counts.get(d["status"], 0) + 1
    print("documents: " + (", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none"))
    columns = ["document_id", "title", "status", "chunk_count", "attempts", "tokens_embedded"]
    if any(d["llm_calls"] or d["llm_cache_hits"] for d in docs):
        cost = sum(float(d["llm_cost_usd"] or 0) for d in docs)
        known = all(d["llm_cost_usd"] is not None for d in docs)
        print(
            f"LLM: {sum(d['llm_calls'] for d in docs)} calls paid, "
            f"{sum(d['llm_cache_hits'] for d in docs)} from the cache, "
            f"{sum(d['llm_prompt_tokens'] + d['llm_completion_tokens'] for d in docs)} tokens, "
            + (f"${cost:.4f}" if known else "cost unknown for this model")
        )
        columns += ["llm_calls", "llm_cache_hits"]
    if any(d["progress"] for d in docs):
        columns.append("progress")
    _print_table(docs, [*columns, "error"])
    return 0


def cmd_kb_drop(args: argparse.Namespace) -> int:
    with _client(args) as client:
        dropped = client.drop_knowledge_base(args.name, if_exists=args.if_exists)
    print(f"dropped {args.name!r}" if dropped else f"{args.name!r} did not exist")
    return 0


def cmd_kb_reindex(args: argparse.Namespace) -> int:
    icfg = _json_arg(args.indexing_config, "--indexing-config")
    with _client(args) as client:
        ix = client.reindex_knowledge_base(args.name, icfg)
    print(
        f"reindex of {args.name!r} queued as generation {ix}; searches use the old one "
        "until it is complete"
    )
    return 0


# --- documents ----------------------------------------------------------------------------
def progress_bar(total: int, unit: str, desc: str | None = None) -> Any:
    """A tqdm bar on a terminal; None elsewhere, or where tqdm is not installed (a client
    install), and the caller prints a line an item."""
    if not sys.stderr.isatty():
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, unit=unit, desc=desc, file=sys.stderr)


def _metadata_args(items: list[str] | None) -> dict[str, Any]:
    """--metadata KEY=VALUE options as a dict."""
    metadata: dict[str, Any] = {}
    for item in items or []:
        if "=" not in item:
            raise KbpgError(f"--metadata {item!r}: expected KEY=VALUE")
        key, value = item.split("=", 1)
        metadata[key] = value
    return metadata


def cmd_ingest(args: argparse.Namespace) -> int:
    from kbpg.loaders import discover, load_file

    metadata = _metadata_args(args.metadata)
    if args.category:
        metadata["category"] = args.category
    urls = [p for p in args.paths if p.lower().startswith(("http://", "https://"))]
    files: list[tuple[Path | str, Path | None]] = [(u, None) for u in urls]
    files += discover([Path(p) for p in args.paths if p not in urls])
    if not files:
        raise KbpgError("no supported files found in " + ", ".join(args.paths))
    counts = {"added": 0, "replaced": 0, "unchanged": 0, "failed": 0}
    bar = progress_bar(len(files), "file")
    with _client(args) as client:
        client.knowledge_base(args.kb)  # fail early on an unknown KB
        for path, root in files:
            try:
                if isinstance(path, str):  # a URL: the server's job fetches and converts it
                    result = client.add_url(
                        args.kb, path, metadata=metadata, usage_mode=args.usage_mode
                    )
                else:
                    doc = load_file(path, root=root, metadata=metadata, usage_mode=args.usage_mode)
                    result = client.put(args.kb, doc)
                counts[result.action] += 1
                line = f"{result.action:9s} {result.title}"
            except KbpgError as exc:
                counts["failed"] += 1
                line = f"failed    {path}: {exc.message}"
            if bar is not None:
                bar.write(line)
                bar.update(1)
            else:
                print(line)
    if bar is not None:
        bar.close()
    print(", ".join(f"{v} {k}" for k, v in counts.items()))
    if args.wait:
        from kbpg.db import resolve_dsn
        from kbpg.worker import Worker

        Worker(resolve_dsn(args.dsn), concurrency=args.concurrency, once=True).run()
        with _client(args) as client:
            errors = [d for d in client.document_status(args.kb) if d["status"] == "error"]
        for d in errors:
            print(f"error     {d['title']}: {d['error']}")
    return 1 if counts["failed"] else 0


def cmd_search(args: argparse.Namespace) -> int:
    options: dict[str, Any] = {
        "top_k": args.top_k,
        "method": args.method,
        "filter": _json_arg(args.filter, "--filter"),
    }
    if args.category:
        options["filter"] = {**(options["filter"] or {}), "category": args.category}
    if args.rerank:
        options["rerank"] = True
    options = {k: v for k, v in options.items() if v is not None}
    with _client(args) as client:
        results = client.search(args.kb, args.query, **options)
    if args.json:
        print(json.dumps([r.__dict__ for r in results], default=str, indent=2))
        return 0
    if not results:
        print("no results")
    for r in results:
        print(f"{r.rank:>2}. [{r.score:.4f}] {r.source}")
        snippet = " ".join(r.content.split())
        print(f"    {snippet[:300]}{'…' if len(snippet) > 300 else ''}")
    if results and results[0].note:
        print(f"note: {results[0].note}")
    return 0


def cmd_context(args: argparse.Namespace) -> int:
    with _client(args) as client:
        ctx = client.build_context(
            args.kb, args.query, token_budget=args.budget, relevance_threshold=args.threshold
        )
    if not ctx["has_relevant"]:
        print(f"(no relevant knowledge) {ctx['fallback']}")
    print(ctx["context"])
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    from kbpg.db import resolve_dsn
    from kbpg.worker import Worker

    worker = Worker(
        resolve_dsn(args.dsn),
        concurrency=args.concurrency,
        once=args.once,
        lease_seconds=args.lease,
        poll_interval=args.poll,
        batch=args.batch,
        model_threads=args.model_threads,
        durable_commits=args.durable_commits,
    )
    worker.install_signal_handlers()
    stats = worker.run()
    print(f"worker stopped: {stats.done} done, {stats.failed} failed, {stats.retried} retried")
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from kbpg.db import connect
    from kbpg.doctor import diagnose, print_findings

    with connect(args.dsn) as conn:
        return print_findings(diagnose(conn))


def cmd_uninstall(args: argparse.Namespace) -> int:
    from kbpg.db import connect, scalar
    from kbpg.doctor import uninstall

    with connect(args.dsn) as conn:
        db = scalar(conn, "SELECT current_database()")
        if not args.yes:
            kbs = docs = 0
            if scalar(conn, "SELECT to_regclass('kb.knowledge_base') IS NOT NULL"):
                kbs = scalar(conn, "SELECT count(*) FROM kb.knowledge_base")
                docs = scalar(conn, "SELECT count(*) FROM kb.document")
            if not sys.stdin.isatty():
                raise KbpgError(
                    f"kbpg uninstall removes the kb schema of database {db} "
                    f"({kbs} knowledge bases, {docs} documents) and asks first",
                    hint="add --yes to remove it without asking",
                )
            answer = input(
                f"Remove kbpg from database {db}: the kb schema with {kbs} knowledge bases and "
                f"{docs} documents, for good? [y/N] "
            )
            if answer.strip().lower() not in ("y", "yes"):
                print("nothing removed")
                return 1
        left = uninstall(conn)
    print(f"removed the kb schema from database {db}, with everything kbpg stored in it")
    for item in left:
        print(f"left: {item}")
    return 0


def cmd_mcp(args: argparse.Namespace) -> int:
    import importlib.util

    from kbpg.db import resolve_dsn

    if importlib.util.find_spec("mcp") is None:
        raise KbpgError("kbpg mcp needs the MCP SDK", hint="pip install 'kbpg[mcp]'")
    from kbpg.mcp_server import serve

    serve(resolve_dsn(args.dsn), args.transport, args.host, args.port, args.tokens)
    return 0


def cmd_lab(args: argparse.Namespace) -> int:
    from kbpg.db import resolve_dsn
    from kbpg.lab.app import serve

    serve(resolve_dsn(args.dsn), args.kb, args.host, args.port, args.token)
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from kbpg.evaluate import run_eval

    return run_eval(args)


def cmd_demo(args: argparse.Namespace) -> int:
    from kbpg.demo import run_demo

    return run_demo(args)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kbpg", description="A knowledge base inside PostgreSQL.")
    p.add_argument(
        "--dsn",
        help="libpq connection string (default: KBPG_DSN, PG* variables, "
        "else the embedded cluster)",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    up = sub.add_parser("up", help="create/start the embedded cluster and apply the schema")
    up.add_argument("--llm", metavar="FILE.gguf", help="also serve this local LLM (xllamacpp)")
    up.add_argument("--llm-port", type=int, default=8431)
    up.add_argument("--llm-threads", type=int, default=2)
    up.set_defaults(func=cmd_up)
    llm = sub.add_parser("llm", help="a local OpenAI-compatible LLM server")
    llms = llm.add_subparsers(dest="llm_command", required=True, metavar="ACTION")
    ls = llms.add_parser("serve", help="serve a GGUF model with llama.cpp (xllamacpp)")
    ls.add_argument("--model", required=True, metavar="FILE.gguf")
    ls.add_argument("--host", default="127.0.0.1")
    ls.add_argument("--port", type=int, default=8431)
    ls.add_argument("--threads", type=int, default=2)
    ls.add_argument("--ctx", type=int, default=4096, help="context window in tokens")
    ls.add_argument("--parallel", type=int, default=1, help="requests served at once")
    ls.set_defaults(func=cmd_llm_serve)
    sub.add_parser("down", help="stop the embedded cluster").set_defaults(func=cmd_down)
    st = sub.add_parser(
        "status",
        help="cluster state and the job queue; with a KB, its sources and the documents not "
        "searchable yet, and why",
    )
    st.add_argument("kb", nargs="?")
    st.set_defaults(func=cmd_status)
    rt = sub.add_parser("retry", help="queue again the documents whose indexing failed for good")
    rt.add_argument("kb")
    rt.add_argument("--title", help="only this document")
    rt.set_defaults(func=cmd_retry)
    sub.add_parser("dsn", help="print a connection string psql accepts").set_defaults(func=cmd_dsn)
    sub.add_parser(
        "install",
        aliases=["migrate"],
        help="install or upgrade the kb schema in a database (--dsn; needs a superuser)",
    ).set_defaults(func=cmd_install)
    ss = sub.add_parser(
        "server-setup",
        help="on the database host, as root: install what PL/Python imports, for the server's "
        "Python (/usr/local/lib/kbpg/pythonX.Y, kbpg's package in a folder per release)",
    )
    ss.add_argument(
        "--python",
        default="/usr/bin/python3",
        help="the Python plpython3u embeds (default /usr/bin/python3)",
    )
    ss.add_argument(
        "--target",
        help="the folder (default /usr/local/lib/kbpg/pythonX.Y; another "
        "one must be named by the server's kb.python_path)",
    )
    ss.add_argument("--force", action="store_true", help="reinstall the packages even if present")
    ss.add_argument(
        "--system-packages",
        action="store_true",
        help="first install plpython3u, pgvector >= 0.8, Chromium and Tesseract OCR (Debian 12/13)",
    )
    ss.set_defaults(func=cmd_server_setup)
    rp = sub.add_parser(
        "replica",
        help="a hot standby of the embedded cluster: it serves every read (search, context, lab)",
    )
    rp.add_argument("action", choices=["create", "start", "stop", "dsn"])
    rp.add_argument("--home", help="its folder (default: the embedded cluster's, + '-replica')")
    rp.set_defaults(func=cmd_replica)

    kb = sub.add_parser("kb", help="manage knowledge bases")
    kbs = kb.add_subparsers(dest="kb_command", required=True, metavar="ACTION")
    c = kbs.add_parser("create", help="create a knowledge base")
    c.add_argument("name")
    c.add_argument("--indexing-config", help="JSON object")
    c.add_argument("--retrieval-config", help="JSON object")
    c.add_argument(
        "--strategy",
        choices=tuple(STRATEGIES),
        help="how documents are indexed (default chunk_embed; the others need an LLM in "
        "--indexing-config, see docs/strategies.md)",
    )
    c.add_argument("--chunker", choices=CHUNKERS)
    c.add_argument("--chunk-size", dest="chunk_size", type=int)
    c.add_argument("--chunk-overlap", dest="chunk_overlap", type=int)
    c.add_argument("--embedding-model", dest="embedding_model")
    c.add_argument(
        "--knowledge-graph",
        action="store_true",
        help="also build the knowledge graph (document, heading and code graphs)",
    )
    c.add_argument("--description")
    c.add_argument("--team", help="the team it belongs to (default: your only team)")
    c.add_argument("--private", action="store_true", help="visible to you only")
    c.set_defaults(func=cmd_kb_create)
    ls = kbs.add_parser("list", help="the knowledge bases you can read")
    ls.add_argument("--own-only", action="store_true", help="your team's own, not shared ones")
    ls.add_argument("--no-shared", action="store_true", help="leave out KBs shared with you")
    ls.add_argument("--team", help="one of your teams only")
    ls.set_defaults(func=cmd_kb_list)
    s = kbs.add_parser("show", help="a knowledge base and its documents")
    s.add_argument("name")
    s.set_defaults(func=cmd_kb_show)
    d = kbs.add_parser("drop", help="drop a knowledge base and everything in it")
    d.add_argument("name")
    d.add_argument("--if-exists", action="store_true")
    d.set_defaults(func=cmd_kb_drop)
    r = kbs.add_parser("reindex", help="rebuild every document (zero downtime)")
    r.add_argument("name")
    r.add_argument("--indexing-config", help="new indexing_config (JSON); default: the current one")
    r.set_defaults(func=cmd_kb_reindex)

    i = sub.add_parser(
        "ingest",
        help="add files, folders and URLs (Markdown, text, PDF, DOCX, PPTX, XLSX/XLS, HTML, CSV, "
        "JSON, EPUB, ipynb, RSS, source code; folders walked as repositories; http(s) URLs "
        "fetched by the server and rendered with headless Chromium)",
    )
    i.add_argument("kb")
    i.add_argument("paths", nargs="+", metavar="PATH")
    i.add_argument("--category")
    i.add_argument("--metadata", action="append", metavar="KEY=VALUE")
    i.add_argument("--usage-mode", default="rag", choices=USAGE_MODES)
    i.add_argument("--wait", action="store_true", help="run a worker until the queue is empty")
    i.add_argument("--concurrency", type=int, help=CONCURRENCY_HELP)
    i.set_defaults(func=cmd_ingest)

    sy = sub.add_parser(
        "sync",
        help="keep a knowledge base in step with folders: new and changed files indexed, "
        "renamed ones moved, removed ones deleted, unchanged ones untouched",
    )
    sy.add_argument("kb")
    sy.add_argument("paths", nargs="+", metavar="PATH")
    sy.add_argument("--name", help="the source's name (default: the folder's absolute path)")
    sy.add_argument("--dry-run", action="store_true", help="list what would change; change nothing")
    sy.add_argument(
        "--force", action="store_true", help="remove more than half of a source's documents"
    )
    sy.add_argument("--metadata", action="append", metavar="KEY=VALUE")
    sy.add_argument("--usage-mode", default="rag", choices=USAGE_MODES)
    sy.add_argument("--wait", action="store_true", help="run a worker until the queue is empty")
    sy.add_argument("--concurrency", type=int, help=CONCURRENCY_HELP)
    sy.set_defaults(func=cmd_sync)

    q = sub.add_parser("search", help="search a knowledge base")
    q.add_argument("kb")
    q.add_argument("query")
    q.add_argument("--method", choices=METHODS)
    q.add_argument("--top-k", dest="top_k", type=int)
    q.add_argument("--filter", help="JSON object the chunk metadata must contain")
    q.add_argument("--category")
    q.add_argument("--rerank", action="store_true")
    q.add_argument("--json", action="store_true")
    q.set_defaults(func=cmd_search)

    x = sub.add_parser("context", help="prompt-ready context with citations")
    x.add_argument("kb")
    x.add_argument("query")
    x.add_argument("--budget", type=int, default=2000)
    x.add_argument("--threshold", type=float)
    x.set_defaults(func=cmd_context)

    w = sub.add_parser("worker", help="run the indexing worker")
    w.add_argument("--concurrency", type=int, help=CONCURRENCY_HELP)
    w.add_argument(
        "--durable-commits",
        action="store_true",
        help="each job's commit waits for the disk (default: it does not; a server crash may "
        "undo the last fraction of a second of finished jobs, which then simply run again)",
    )
    w.add_argument(
        "--model-threads",
        type=int,
        help="the local model's ONNX threads in each connection's server process (default: "
        "the server's kb.onnx_threads where set, else its cores shared out over the connections)",
    )
    w.add_argument("--once", action="store_true", help="drain the queue, then exit")
    w.add_argument("--lease", type=float, default=60.0, help="seconds a claimed job is held")
    w.add_argument("--poll", type=float, default=2.0, help="seconds between polls")
    w.add_argument(
        "--batch",
        type=int,
        default=16,
        help="jobs a thread claims at once; their chunks are embedded together (1: one by one)",
    )
    w.set_defaults(func=cmd_worker)

    lab = sub.add_parser(
        "lab",
        help="the Retrieval Lab: a local web page to test, compare and tune retrieval",
    )
    lab.add_argument("kb", nargs="?", help="the knowledge base to open first")
    lab.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (default 127.0.0.1; any other needs a token)",
    )
    lab.add_argument("--port", type=int, default=8765)
    lab.add_argument("--token", help="access token (default: none on 127.0.0.1, else a new one)")
    lab.set_defaults(func=cmd_lab)

    d = sub.add_parser(
        "doctor",
        help="check the server, the schema, PL/Python, the HNSW indexes and the queue",
    )
    d.set_defaults(func=cmd_doctor)
    u = sub.add_parser(
        "uninstall", help="remove the kb schema and everything kbpg stored (asks first)"
    )
    u.add_argument("--yes", action="store_true", help="do not ask")
    u.set_defaults(func=cmd_uninstall)

    m = sub.add_parser(
        "mcp",
        help="serve the knowledge bases to agents over the Model Context Protocol (kbpg[mcp])",
    )
    m.add_argument(
        "--transport",
        choices=("stdio", "http"),
        default="stdio",
        help="stdio (as the DSN's role; default) or streamable HTTP (a role per token)",
    )
    m.add_argument("--host", default="127.0.0.1", help="HTTP: address to bind")
    m.add_argument("--port", type=int, default=8766, help="HTTP: port (path /mcp)")
    m.add_argument(
        "--tokens",
        metavar="FILE",
        help='HTTP: a JSON file of bearer tokens to role names, {"token": "role"}',
    )
    m.set_defaults(func=cmd_mcp)

    e = sub.add_parser("eval", help="evaluate retrieval on a BEIR-format dataset")
    e.add_argument("dataset_dir")
    e.add_argument("--split", default="test")
    e.add_argument("--kb")
    e.add_argument(
        "--method",
        choices=METHODS,
        default="hybrid",
        help="tree_search needs a page_index KB (--indexing-config) and its LLM",
    )
    e.add_argument("--rerank", action="store_true")
    e.add_argument("--top-k", dest="top_k", type=int, default=100)
    e.add_argument("--json", action="store_true")
    e.add_argument("--concurrency", type=int, default=2)
    e.add_argument(
        "--option",
        action="append",
        metavar="KEY=JSON",
        help="extra kb.search option, e.g. fusion_depth=200",
    )
    e.add_argument("--indexing-config", help="indexing_config (JSON) for a new KB")
    e.add_argument(
        "--whole-documents",
        action="store_true",
        help="one chunk per document, the model reading its start (BEIR's protocol)",
    )
    e.set_defaults(func=cmd_eval)

    sub.add_parser("demo", help="index the sample corpus and run a few searches").set_defaults(
        func=cmd_demo
    )
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        return int(args.func(args) or 0)
    except KbpgError as exc:
        if args.verbose:
            import traceback

            traceback.print_exc(file=sys.stderr)
        print(f"kbpg: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        # What no command turned into a KbpgError: a connection that failed, an error of
        # the database's, or a bug. One line and a hint; -v keeps the traceback.
        if args.verbose:
            raise
        print(f"kbpg: error: {_unexpected(exc)}", file=sys.stderr)
        return 2


def _unexpected(exc: Exception) -> KbpgError:
    import psycopg

    from kbpg.errors import connection_error, from_db

    if isinstance(exc, psycopg.OperationalError) and getattr(exc, "sqlstate", None) in (
        None,
        *(f"08{x}" for x in ("000", "001", "003", "004", "006", "P01")),
        "28000",
        "28P01",
        "3D000",
    ):
        return connection_error(exc)
    if isinstance(exc, psycopg.ProgrammingError) and "connection info" in str(exc):
        return connection_error(exc)
    if isinstance(exc, psycopg.Error):
        return from_db(exc)
    message = " ".join(str(exc).split()) or "(no message)"
    return KbpgError(
        f"unexpected {type(exc).__name__}: {message}",
        hint="run again with -v for the traceback, and report it if it is kbpg's fault",
    )


if __name__ == "__main__":
    sys.exit(main())
