"""PL/Python never reaches for the network for a file kbpg ships."""

from __future__ import annotations

from typing import Any

import psycopg

# In a server process: every network call refused (an audit hook), tiktoken's cache folder
# pointing nowhere, and the encoding loaded afresh; then what kb functions call to count.
TOKENIZE_OFFLINE = """
DO $$
import os, sys
plpy.execute("SELECT kb.python_init()")
def refuse(event, args):
    if event in ("socket.connect", "socket.getaddrinfo", "urllib.Request"):
        raise RuntimeError("network used: " + event)
sys.addaudithook(refuse)
os.environ["TIKTOKEN_CACHE_DIR"] = "/nonexistent/kbpg-tiktoken"
from kbpg_db import tokens
tokens.encoding.cache_clear()
plpy.notice("tokens=%d" % tokens.count("Ünïcode 12345 tests"))
$$ LANGUAGE plpython3u
"""


def test_server_tokenizes_from_the_shipped_file_without_network(
    conn: psycopg.Connection[Any],
) -> None:
    notices: list[str] = []
    conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
    conn.execute(TOKENIZE_OFFLINE)
    assert notices == ["tokens=8"]
    # And the SQL function, in the same backend (the hook still refuses the network).
    assert conn.execute("SELECT kb.count_tokens('hello world')").fetchone() == (2,)
