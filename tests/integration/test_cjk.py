"""Chinese and Japanese text through the database: the cjk chunker, and full_text that
finds a CJK word inside an unsegmented run (character bigrams)."""

from __future__ import annotations

from typing import Any

import psycopg

from kbpg.client import Client
from tests.fakeprovider import FakeProvider
from tests.helpers import full_text_kb

ZH = (
    "# 缓存\n缓存策略可以减少数据库的负载。当数据变化时，缓存需要失效。\n\n"
    "# 日志\n日志记录系统的运行状态，便于排查问题。\n"
)
JA = "キャッシュの設定は管理画面から変更できます。設定を保存すると、すぐに反映されます。"
EN = "Caching reduces load on the database. Logging records what the system did."


def kb_with(
    client: Client, conn: psycopg.Connection, provider: FakeProvider, name: str, **cfg: Any
) -> None:
    full_text_kb(client, conn, provider, name, {"zh": ZH, "ja": JA, "en": EN}, **cfg)


def test_full_text_finds_words_inside_cjk_runs(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    kb_with(client, conn, provider, "cjk")
    top = client.search("cjk", "缓存")[0]
    assert top.title == "zh" and top.heading_path == ["缓存"]
    assert client.search("cjk", "日志怎么记录")[0].heading_path == ["日志"]
    assert client.search("cjk", "キャッシュの設定")[0].title == "ja"
    assert [h.title for h in client.search("cjk", "logging records")] == ["en"]
    # A generation built without bigrams (as before the setting) cannot find the word.
    kb_with(client, conn, provider, "plain", cjk_bigrams=False)
    assert client.search("plain", "策略") == []
    assert client.search("cjk", "策略")[0].heading_path == ["缓存"]


def test_cjk_chunker_in_characters(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    text = "缓存策略很重要。" * 30
    rows = client._rows(
        "SELECT content, char_start, char_end FROM kb.preview_chunks($1, $2::jsonb)",
        [
            text,
            '{"chunker": "cjk", "chunk_unit": "characters", "chunk_size": 100, '
            '"chunk_overlap": 16, "separators": ["\\\\n\\\\n"]}',
        ],
    )
    assert len(rows) == 3 and all(len(r["content"]) <= 100 for r in rows)
    assert all(r["content"].endswith("。") for r in rows)
    # Each chunk after the first starts exactly 16 characters into the one before it.
    assert [r["char_start"] for r in rows[1:]] == [r["char_end"] - 16 for r in rows[:-1]]
