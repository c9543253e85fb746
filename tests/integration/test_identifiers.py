"""Identifiers in full_text: an exact identifier in a question ranks the section that
defines it first, where the words it splits into would favour another."""

from __future__ import annotations

import psycopg

from kbpg.client import Client
from tests.fakeprovider import FakeProvider
from tests.helpers import full_text_kb

API = """# Errors

## ERR_SOME_CODE
Raised when the request body cannot be parsed.

## Err codes
Err code, err code, err code: err codes are codes. Err code, err code.

## Reading files
Call fs.readFile(path) to load a file; getUserName() returns who asked.

## Other
Reading and writing files, reading user names: see the guide.
"""


def kb(
    client: Client, conn: psycopg.Connection, provider: FakeProvider, name: str, **cfg: object
) -> None:
    full_text_kb(client, conn, provider, name, {"api": API}, **cfg)


def test_identifiers_are_indexed_whole_and_by_parts(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    kb(client, conn, provider, "ids")
    assert client.search("ids", "what does ERR_SOME_CODE mean")[0].heading_path[-1] == (
        "ERR_SOME_CODE"
    )
    assert client.search("ids", "readFile")[0].heading_path[-1] == "Reading files"
    assert client.search("ids", "get user name")[0].heading_path[-1] == "Reading files"
    # Without the identifier words (a generation from before the setting), the words the
    # parser splits ERR_SOME_CODE into favour the section that repeats them.
    kb(client, conn, provider, "plain", identifier_terms=False)
    top = client.search("plain", "what does ERR_SOME_CODE mean")[0]
    assert top.heading_path[-1] == "Err codes"
    assert client.search("plain", "readFile") == []
