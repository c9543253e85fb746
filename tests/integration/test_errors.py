"""Errors read like PostgreSQL's own, whatever language raised them: every public SQL
function of kb is called with representative bad input, and the whole error is checked —
SQLSTATE, message, DETAIL, HINT — with no Python traceback, no ``plpy.Error:`` prefix and
no pydantic phrasing. A new public function fails ``test_every_public_function_is_walked``
until it has a case here (or a reason it takes no bad input)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import psycopg
import pytest

from kbpg.client import AsyncClient, Client
from kbpg.errors import ConfigError

README_RC = "docs/configuration.md lists the retrieval_config fields and their ranges"
README_IC = "docs/configuration.md lists the indexing_config fields and their ranges"
NO_KB = 'knowledge base "nope" does not exist'
LIST_HINT = "kb.list_knowledge_bases() lists them"


@dataclass
class Case:
    function: str
    sql: str
    sqlstate: str
    message: str
    detail: str | None = None
    hint: str | None = None


CASES = [
    Case(
        "search",
        "SELECT * FROM kb.search('docs', 'spawn', top_k => 0)",
        "22023",
        "top_k must be between 1 and 1000 (got 0)",
        hint=README_RC,
    ),
    Case(
        "search",
        "SELECT * FROM kb.search('docs', 'spawn', method => 'tree_serch')",
        "22023",
        'unknown method "tree_serch" (expected hybrid, vector, full_text or tree_search)',
        hint=README_RC,
    ),
    Case("search", "SELECT * FROM kb.search('nope', 'x')", "P0002", NO_KB, hint=LIST_HINT),
    Case("search", "SELECT * FROM kb.search('docs', '')", "22023", "query must not be empty"),
    Case(
        "search", "SELECT * FROM kb.search('docs', E'\\t\\n ')", "22023", "query must not be empty"
    ),
    Case(
        "search",
        "SELECT * FROM kb.search('docs', 'x', rerank => true, rerank_model => 'llm')",
        "22023",
        'rerank_model "llm" ranks with the knowledge base\'s own chat model, and this '
        "knowledge base has none",
        detail="its indexing_config names no chat model (extra.model, or knowledge_graph.model "
        "with triplets)",
        hint='name one: rerank_model "llm:openai/gpt-4o-mini", or "llm:openai/NAME" with '
        "rerank_api_base for an OpenAI-compatible server",
    ),
    Case(
        "search",
        "SELECT * FROM kb.search('docs', 'x', options => '{\"top_kk\": 3}')",
        "22023",
        'unknown field "top_kk"',
        hint=README_RC,
    ),
    Case(
        "search",
        "SELECT * FROM kb.search('docs', 'x', filter => '[1]')",
        "22023",
        "filter must be a JSON object (metadata it must contain), not a array",
        hint='e.g. {"category": "billing"}',
    ),
    Case(
        "explain_search",
        "SELECT * FROM kb.explain_search('docs', 'x', ef_search => 0)",
        "22023",
        "ef_search must be between 1 and 1000 (got 0)",
        hint=README_RC,
    ),
    Case(
        "build_context",
        "SELECT * FROM kb.build_context('docs', 'x', token_budget => 0)",
        "22023",
        "token_budget must be between 1 and 1000000, not 0",
    ),
    Case(
        "tree_search",
        "SELECT * FROM kb.tree_search('docs', 'x')",
        "22023",
        'method "tree_search" is not available for a chunk_embed knowledge base (it serves '
        "hybrid, vector and full_text)",
        hint=README_RC,
    ),
    Case(
        "tree_search",
        "SELECT * FROM kb.tree_search('tree', 'x')",
        "22023",
        "tree_search needs an LLM, and this knowledge base has none",
        detail="its indexing_config.extra.model is not set",
        hint='reindex with indexing_config => \'{"strategy": "page_index", "extra": {"model": '
        '"..."}}\'',
    ),
    Case(
        "create_knowledge_base",
        "SELECT kb.create_knowledge_base('big', '{\"chunk_size\": 5000}')",
        "22023",
        "chunk_size 5000 exceeds the 200-token input of local/all-MiniLM-L6-v2; lower "
        "chunk_size or set truncate_for_embedding",
        hint=README_IC,
    ),
    Case(
        "create_knowledge_base",
        "SELECT kb.create_knowledge_base('d', '{\"strategy\": \"doc2json\"}')",
        "22023",
        "extra.json_schema is required",
        hint=README_IC,
    ),
    Case(
        "create_knowledge_base",
        "SELECT kb.create_knowledge_base('docs')",
        "23505",
        'knowledge base "docs" already exists',
        hint="pick another name or drop the existing one",
    ),
    Case(
        "create_knowledge_base",
        "SELECT kb.create_knowledge_base('')",
        "22023",
        "knowledge base name must not be empty",
    ),
    Case(
        "create_knowledge_base",
        "SELECT kb.create_knowledge_base(E'\\t')",
        "22023",
        "knowledge base name must not be empty",
    ),
    Case(
        "validate_config",
        "SELECT kb.validate_config('retrieval_config', '{\"top_k\": 2000, \"rrf_k\": -1}')",
        "22023",
        "top_k must be between 1 and 1000 (got 2000)",
        detail="2 problems in retrieval_config: top_k must be between 1 and 1000 (got 2000); "
        "rrf_k must be more than 0.0 and at most 10000.0 (got -1)",
        hint=README_RC,
    ),
    Case(
        "validate_config",
        "SELECT kb.validate_config('retrieval', '{}')",
        "22023",
        'unknown config kind "retrieval" (expected indexing_config or retrieval_config)',
        hint="kind is indexing_config or retrieval_config",
    ),
    Case(
        "validate_config",
        "SELECT kb.validate_config('retrieval_config', '{}', 'nostrategy')",
        "22023",
        'unknown strategy "nostrategy" (expected chunk_embed, page_index, graph_index or doc2json)',
        hint=README_RC,
    ),
    Case(
        "default_config",
        "SELECT kb.default_config('nope')",
        "22023",
        'unknown config kind "nope" (expected indexing_config or retrieval_config)',
    ),
    Case(
        "set_default_config",
        "SELECT kb.set_default_config('indexing_config', '{\"chunk_size\": 0}')",
        "22023",
        "chunk_size must be between 16 and 32000 (got 0)",
        hint=README_IC,
    ),
    Case(
        "set_default_config",
        "SELECT kb.set_default_config('nope', '{}')",
        "22023",
        'unknown config kind "nope" (expected indexing_config or retrieval_config)',
    ),
    Case(
        "set_retrieval_config",
        "SELECT kb.set_retrieval_config('docs', '{\"rrf_k\": 0}')",
        "22023",
        "rrf_k must be more than 0.0 and at most 10000.0 (got 0)",
        hint=README_RC,
    ),
    Case(
        "text_tsvector",
        "SELECT kb.text_tsvector('{\"text_search_config\": \"klingon\"}', 'text')",
        "42704",
        'text search configuration "klingon" does not exist',
    ),
    Case(
        "chunk_tsvector",
        "SELECT kb.chunk_tsvector('{\"text_search_config\": \"klingon\"}', 'text', NULL)",
        "42704",
        'text search configuration "klingon" does not exist',
    ),
    Case(
        "preview_chunks",
        "SELECT * FROM kb.preview_chunks('text', '{\"chunker\": \"nope\"}')",
        "22023",
        'unknown chunker "nope" (expected markdown_header, recursive, fixed_size, cjk, paragraph, '
        "sentence or semantic)",
        hint=README_IC,
    ),
    Case(
        "add_document",
        "SELECT kb.add_document('docs', 'x', '')",
        "22023",
        'document "x" has no text',
    ),
    Case(
        "add_document",
        "SELECT kb.add_document('docs', 'x', E'\\x0B\\f\\r\\n\\t ')",
        "22023",
        'document "x" has no text',
    ),
    Case(
        "add_document",
        "SELECT kb.add_document('docs', E'\\n\\t', 'text')",
        "22023",
        "document title must not be empty",
    ),
    Case(
        "add_document",
        "SELECT kb.add_document('docs', 'x', 'y', '[1]')",
        "22023",
        'metadata of document "x" must be a JSON object',
    ),
    Case(
        "put_document",
        "SELECT kb.put_document('docs', 'x', 'y', usage_mode => 'nope')",
        "22023",
        "usage_mode must be rag, system or policy, not 'nope'",
    ),
    Case(
        "add_file",
        "SELECT * FROM kb.add_file('docs', 'clip.mp4', '\\x0000001866747970'::bytea)",
        "22023",
        'file "clip.mp4" has an unsupported type',
        hint="kbpg converts .atom, .bmp, .csv, .docx, .epub, .gif, .htm, .html, .ipynb, .jpeg, "
        ".jpg, .json, .markdown, .md, .pdf, .png, .pptx, .rss, .rst, .tif, .tiff, .tsv, .txt, "
        ".webp, .xhtml, .xls, .xlsm, .xlsx, .xml files",
    ),
    Case(
        "add_file",
        "SELECT * FROM kb.add_file('docs', 'a.csv', ''::bytea)",
        "22023",
        'the file of document "a.csv" is empty',
    ),
    Case(
        "add_url",
        "SELECT * FROM kb.add_url('docs', 'ftp://example.com/x')",
        "22023",
        "url must be an http or https URL (got 'ftp://example.com/x')",
    ),
    Case(
        "add_url",
        "SELECT * FROM kb.add_url('nope', 'https://example.com')",
        "P0002",
        NO_KB,
        hint=LIST_HINT,
    ),
    Case(
        "media",
        "SELECT * FROM kb.media('docs', 'kbpg-media:abc.png')",
        "P0002",
        'media "kbpg-media:abc.png" does not exist in knowledge base "docs"',
        hint="a reference reads kbpg-media:<16 hex digits>.<extension>",
    ),
    Case(
        "create_test_set",
        "SELECT kb.create_test_set('docs', '  ')",
        "22023",
        "test set name must be 1 to 200 characters",
    ),
    Case(
        "add_test_query",
        "SELECT kb.add_test_query('docs', 'nope', 'q', ARRAY['x'])",
        "P0002",
        'test set "nope" does not exist in knowledge base "docs"',
        hint="kb.test_sets(kb) lists them",
    ),
    Case(
        "run_test_set",
        "SELECT kb.run_test_set('docs', 'nope')",
        "P0002",
        'test set "nope" does not exist in knowledge base "docs"',
        hint="kb.test_sets(kb) lists them",
    ),
    Case(
        "delete_test_set",
        "SELECT kb.delete_test_set('docs', 'nope')",
        "P0002",
        'test set "nope" does not exist in knowledge base "docs"',
        hint="kb.test_sets(kb) lists them",
    ),
    Case("test_sets", "SELECT * FROM kb.test_sets('nope')", "P0002", NO_KB, hint=LIST_HINT),
    Case(
        "score_query",
        "SELECT kb.score_query('docs', 'spawn', ARRAY['x'], '{\"rrf_k\": 0}')",
        "22023",
        "rrf_k must be more than 0.0 and at most 10000.0 (got 0)",
        hint=README_RC,
    ),
    Case(
        "set_document_usage_mode",
        "SELECT kb.set_document_usage_mode('docs', 'nope', 'system')",
        "P0002",
        'document "nope" does not exist in knowledge base "docs"',
    ),
    Case(
        "set_document_usage_mode",
        "SELECT kb.set_document_usage_mode('docs', 'nope', 'always')",
        "22023",
        "usage_mode must be rag, system or policy, not 'always'",
    ),
    Case(
        "delete_document",
        "SELECT kb.delete_document('docs', 99999::bigint)",
        "P0002",
        'document 99999 does not exist in knowledge base "docs"',
    ),
    Case(
        "delete_document",
        "SELECT kb.delete_document('docs', 'nope')",
        "P0002",
        'document "nope" does not exist in knowledge base "docs"',
    ),
    Case(
        "refresh_term_vectors",
        "SELECT * FROM kb.refresh_term_vectors('nope')",
        "P0002",
        NO_KB,
        hint=LIST_HINT,
    ),
    Case(
        "drop_knowledge_base",
        "SELECT kb.drop_knowledge_base('nope')",
        "P0002",
        NO_KB,
        hint=LIST_HINT,
    ),
    Case("embed_query", "SELECT kb.embed_query('nope', 'x')", "P0002", NO_KB, hint=LIST_HINT),
    Case(
        "reindex_document",
        "SELECT kb.reindex_document('docs', 'nope')",
        "P0002",
        'document "nope" does not exist in knowledge base "docs"',
    ),
    Case(
        "reindex_knowledge_base",
        "SELECT kb.reindex_knowledge_base('docs', '{\"chunk_size\": -4}')",
        "22023",
        "chunk_size must be between 16 and 32000 (got -4)",
        hint=README_IC,
    ),
    Case(
        "purge_llm_cache",
        "SELECT kb.purge_llm_cache(older_than => '-1 day')",
        "22023",
        "older_than must not be negative (got -1 days)",
        hint="e.g. interval '30 days'; NULL purges every cached answer",
    ),
    Case(
        "claim_jobs",
        "SELECT * FROM kb.claim_jobs('w', 0)",
        "22023",
        "max_jobs must be between 1 and 1000 (got 0)",
    ),
    Case(
        "claim_jobs",
        "SELECT * FROM kb.claim_jobs('')",
        "22023",
        "worker must name the worker claiming the jobs",
    ),
    Case(
        "list_documents",
        "SELECT * FROM kb.list_documents('nope')",
        "P0002",
        'knowledge base "nope" does not exist',
        hint="kb.list_knowledge_bases() lists them",
    ),
    Case(
        "index_generations",
        "SELECT * FROM kb.index_generations('nope')",
        "P0002",
        'knowledge base "nope" does not exist',
        hint="kb.list_knowledge_bases() lists them",
    ),
    Case(
        "index_generations",
        "SELECT * FROM kb.index_generations(NULL)",
        "22004",
        "knowledge base name must not be null",
    ),
    Case(
        "prefetch_embeddings",
        "SELECT kb.prefetch_embeddings(1, ARRAY[1], ' ')",
        "22023",
        "worker must name the worker that claimed the jobs",
    ),
    Case(
        "vector_search",
        "SELECT * FROM kb.vector_search(99999, ARRAY[1, 2]::real[], 10)",
        "P0002",
        "index generation 99999 does not exist",
    ),
    Case(
        "vector_search",
        "SELECT * FROM kb.vector_search((SELECT active_index_id FROM kb.knowledge_base "
        "WHERE name = 'docs'), ARRAY[1, 2]::real[], 10)",
        "22000",
        "query vector has 2 dimensions but the knowledge base stores 384 dimensions",
        hint="embed the query with the knowledge base's model",
    ),
    Case(
        "create_team",
        "SELECT kb.create_team('')",
        "22023",
        "team name must be 1 to 200 characters",
    ),
    Case(
        "add_team_member",
        "SELECT kb.add_team_member('nope', 'postgres')",
        "P0002",
        'team "nope" does not exist',
        hint="kb.list_teams() lists yours",
    ),
    Case(
        "add_team_member",
        "SELECT kb.add_team_member('default', 'no_such_role')",
        "42704",
        'role "no_such_role" does not exist',
        hint="team members are PostgreSQL roles (CREATE ROLE)",
    ),
    Case(
        "remove_team_member",
        "SELECT kb.remove_team_member('default', current_user)",
        "55006",
        'role "postgres" is the last admin of team "default"',
        hint="make another member admin first",
    ),
    Case(
        "share_knowledge_base",
        "SELECT kb.share_knowledge_base('docs', 'default')",
        "KB011",
        'kb_shared_with_owning_team: knowledge base "docs" belongs to team "default"',
        hint="its own team has access already",
    ),
    Case(
        "unshare_knowledge_base",
        "SELECT kb.unshare_knowledge_base('docs', 'default')",
        "P0002",
        'knowledge base "docs" is not shared with team "default"',
    ),
    Case(
        "knowledge_base_shares",
        "SELECT * FROM kb.knowledge_base_shares('nope')",
        "P0002",
        NO_KB,
        hint=LIST_HINT,
    ),
    Case(
        "set_document_chunking",
        "SELECT kb.set_document_chunking('docs', 'nope.md', '{\"chunkr\": 1}')",
        "P0002",
        'document "nope.md" does not exist in knowledge base "docs"',
    ),
    # Sources (kbpg sync).
    Case(
        "add_source",
        "SELECT kb.add_source('docs', 'x', '/x', 'ftp')",
        "22023",
        'source "x": unknown kind "ftp"',
        hint="kinds: folder, repository",
    ),
    *[
        Case(
            fn,
            sql,
            "P0002",
            'source "nope" does not exist in knowledge base "docs"',
            hint="kb.sources lists the sources of a KB",
        )
        for fn, sql in (
            ("drop_source", "SELECT kb.drop_source('docs', 'nope')"),
            ("sync_plan", "SELECT * FROM kb.sync_plan('docs', 'nope', '[]')"),
            ("bind_document", "SELECT kb.bind_document('docs', 'nope', 1, 'a.md', 'h')"),
        )
    ],
    Case(
        "finish_sync",
        "SELECT kb.finish_sync('docs', 'nope', '[]')",
        "P0002",
        'source "nope" does not exist in knowledge base "docs"',
        hint="kb.sources lists the sources of a KB",
    ),
    Case(
        "add_table_source",
        "SELECT kb.add_table_source('docs', 'kb.team', 'id', ARRAY['name'], text_expression => 'x')",
        "22023",
        'source "kb.team": give text_columns or text_expression, one of them',
    ),
    Case(
        "apply_source_changes",
        "SELECT * FROM kb.apply_source_changes(0)",
        "22023",
        "max_keys must be at least 1",
    ),
    Case(
        "add_url_source",
        "SELECT kb.add_url_source('docs', 's', ARRAY['https://x.test/'], '1 second')",
        "22023",
        'source "s": refresh_interval must be at least 1 minute (got 00:00:01)',
    ),
    Case(
        "move_document",
        "SELECT kb.move_document('docs', 999999, 'x.md')",
        "P0002",
        'document 999999 does not exist in knowledge base "docs"',
    ),
    Case(
        "retry_failed",
        "SELECT kb.retry_failed('docs', 'nope.md')",
        "P0002",
        'document "nope.md" does not exist in knowledge base "docs"',
    ),
    # The knowledge graph's questions.
    *[
        Case(
            fn,
            f"SELECT * FROM kb.{fn}('docs', 'x')",
            "55000",
            'knowledge base "docs" has no knowledge graph',
            hint="turn it on with kb.reindex_knowledge_base(kb, indexing_config => "
            '\'{"knowledge_graph": {"enabled": true}}\') (a reindex)',
        )
        for fn in (
            "graph_definitions",
            "graph_members",
            "graph_callers",
            "graph_callees",
            "graph_subclasses",
            "graph_imports",
            "graph_heading_tree",
            "graph_neighbours",
            "graph_entities",
            "graph_relations",
        )
    ],
    Case(
        "graph_callers",
        "SELECT * FROM kb.graph_callers('nope', 'x')",
        "P0002",
        NO_KB,
        hint=LIST_HINT,
    ),
    *[
        Case(
            fn,
            f"SELECT * FROM kb.{fn}('kg')",
            "55000",
            'knowledge base "kg" has no knowledge-graph communities',
            hint="set knowledge_graph.communities (with the triplets graph) and reindex",
        )
        for fn in ("graph_communities", "refresh_communities")
    ],
    Case(
        "graph_communities",
        "SELECT * FROM kb.graph_communities('kgc', 'x', top_k => 0)",
        "22023",
        "top_k must be between 1 and 1000 (got 0)",
    ),
    Case(
        "graph_definitions",
        "SELECT * FROM kb.graph_definitions('kg', ' ')",
        "22023",
        "symbol must name a definition (a name like area, or a qualified name like "
        "shapes.circle.Circle.area)",
    ),
    Case(
        "graph_neighbours",
        "SELECT * FROM kb.graph_neighbours('kg', 'x', 0)",
        "22023",
        "hops must be between 1 and 5 (got 0)",
    ),
    Case(
        "graph_neighbours",
        "SELECT * FROM kb.graph_neighbours('kg', 'x', 1, 20000)",
        "22023",
        "max_vertices must be between 1 and 10000 (got 20000)",
    ),
    Case(
        "graph_neighbours",
        "SELECT * FROM kb.graph_neighbours('kg', '')",
        "22023",
        "name must name a vertex (a symbol, heading or file)",
    ),
    # Scoring building blocks: kb.search calls them with validated arguments; nonsense
    # arithmetic gets PostgreSQL's own error.
    Case("bm25_tf", "SELECT kb.bm25_tf(1, 1, 0, 1.2, 0.75)", "22012", "division by zero"),
    Case("bm25_idf", "SELECT kb.bm25_idf(-1, 5)", "2201E", "cannot take logarithm of zero"),
]

# Public functions that take no input that can be wrong, with the reason.
NO_BAD_INPUT = {
    "list_knowledge_bases": "any flags and team name give a listing (maybe empty)",
    "refresh_url_sources": "a flag only: any value queues what is due (maybe nothing)",
    "list_teams": "no arguments",
    "queue_status": "no arguments",
    "server_cpu_count": "no arguments",
    "python_init": "no arguments (its install errors: test_llm.py::test_version_handshake)",
    "count_tokens": "any text has a token count",
    "query_lexemes": "any text has lexemes (an unknown index has none)",
    "tsvector_length": "any tsvector has a length",
    "cjk_bigrams": "any text has a bigram form (the same text when it holds no CJK)",
    "identifier_terms": "any text has identifier words (none when it names no identifier)",
    "rrf_fuse": "any ranks give a fused score (a missing rank or weight counts as none)",
    "bm25_score": "any tsvector and query have a score",
    "bm25_search": "any query has a ranking (an unknown index or top_k 0 gives no rows)",
    "bm25_cache_stats": "no arguments (a bad kb.bm25_cache_mb: test_bm25_pruning.py)",
    "embedding_process": "no arguments",
    "process_job": "an unknown or finished job is an outcome ('lost'), not an error",
    "fail_job": "an unknown job is an outcome ('lost'), not an error",
    "release_job": "an unknown job has nothing to release",
    "renew_leases": "unknown or other workers' jobs are not renewed (it returns how many were)",
    "refresh_stale_communities": "no arguments (a failing KB is reported in its row)",
}


@pytest.fixture
def kbs(client: Client) -> None:
    client.create_knowledge_base("docs")
    client.create_knowledge_base("tree", {"strategy": "page_index"})
    client.create_knowledge_base("kg", {"knowledge_graph": {"enabled": True}})
    kgc = {"enabled": True, "graphs": ["triplets"], "communities": True, "model": "openai/x"}
    client.create_knowledge_base("kgc", {"knowledge_graph": kgc})


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.function}:{c.message[:40]}")
def test_error_reads_like_postgresql(conn: psycopg.Connection, kbs: None, case: Case) -> None:
    with pytest.raises(psycopg.Error) as caught:
        conn.execute(case.sql).fetchall()
    diag = caught.value.diag
    got = (diag.sqlstate, diag.message_primary, diag.message_detail, diag.message_hint)
    assert got == (case.sqlstate, case.message, case.detail, case.hint)
    context = diag.context or ""
    assert "Traceback" not in context and "PL/Python" not in context, context
    assert not case.message.startswith("plpy") and "Input should be" not in case.message


def test_every_public_function_is_walked(conn: psycopg.Connection) -> None:
    public = {
        r[0]
        for r in conn.execute(
            "SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
            "WHERE n.nspname = 'kb' AND p.proname !~ '^_'"
        )
    }
    walked = {c.function for c in CASES} | set(NO_BAD_INPUT)
    assert public - walked == set(), "public functions with no bad-input case"
    assert walked - public == set(), "cases for functions that do not exist"


def test_unexpected_failure_keeps_its_traceback(conn: psycopg.Connection) -> None:
    # Not an input a caller can give through the public API: an internal function fed a
    # shape it never gets. Such a failure stays 38000, traceback included, to be reported.
    with pytest.raises(psycopg.Error) as caught:
        conn.execute("SELECT * FROM kb._assemble_context('\"x\"', 100, 1)")
    assert caught.value.diag.sqlstate == "38000"
    assert "Traceback" in (caught.value.diag.context or "")


def test_client_exception_carries_the_parts(client: Client, kbs: None) -> None:
    with pytest.raises(ConfigError) as caught:
        client.search("docs", "spawn", top_k=0)
    err = caught.value
    assert (err.message, err.sqlstate, err.detail, err.hint) == (
        "top_k must be between 1 and 1000 (got 0)",
        "22023",
        None,
        README_RC,
    )


def test_async_client_exception_carries_the_parts(dsn: str, kbs: None) -> None:
    async def go() -> ConfigError:
        async with await AsyncClient.connect(dsn) as a:
            try:
                await a.search("docs", "spawn", top_k=0)
            except ConfigError as exc:
                return exc
        raise AssertionError("no error")

    err = asyncio.run(go())
    assert (err.message, err.sqlstate, err.hint) == (
        "top_k must be between 1 and 1000 (got 0)",
        "22023",
        README_RC,
    )
