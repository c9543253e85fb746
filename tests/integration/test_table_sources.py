"""Table sources: an application's table kept in step with a knowledge base in the
database. Inserts become documents, text updates re-index, metadata-only updates change
metadata without embedding, deletes, TRUNCATE and rows leaving the filter remove; DDL that
breaks the source says so and loses nothing; dropping the source removes its triggers.
Embeddings are counted at the provider (real HTTP)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from kbpg.client import Client
from tests.fakeprovider import FakeProvider
from tests.helpers import remote_kb, run_worker


def docs(conn: psycopg.Connection[Any]) -> dict[str, tuple[Any, ...]]:
    return {
        r[0]: r[1:]
        for r in conn.execute(
            "SELECT d.source_key, d.title, d.status, d.metadata FROM kb.document d "
            "JOIN kb.knowledge_base k ON k.id = d.kb_id WHERE k.name = 'shop' "
            "ORDER BY d.source_key"
        )
    }


def built(provider: FakeProvider) -> list[str]:
    """The chunk texts embedded (each starts with its heading); queries aside."""
    return [t for t in provider.embedded_texts if "# " in t]


def source(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    cur = conn.execute("SELECT * FROM kb.sources WHERE kb = 'shop'")
    names = [c.name for c in cur.description or []]
    return dict(zip(names, cur.fetchone() or (), strict=False))


@pytest.fixture
def shop(client: Client, conn: psycopg.Connection[Any], provider: FakeProvider) -> None:
    remote_kb(client, conn, provider, "shop")
    conn.execute(
        "CREATE TABLE public.products (id bigint PRIMARY KEY, name text, body text, "
        "category text, price numeric, published boolean DEFAULT true, views int DEFAULT 0)"
    )
    conn.execute(
        "INSERT INTO public.products (id, name, body, category, price) "
        "SELECT i, 'Kettle ' || i, 'Kettle model ' || i || ' boils water in ' || i || "
        "' minutes.', 'kitchen', 10 + i FROM generate_series(1, 5) i"
    )


def test_rows_become_documents_and_follow_changes(
    client: Client, conn: psycopg.Connection[Any], provider: FakeProvider, shop: None
) -> None:
    conn.execute(
        "SELECT kb.add_table_source('shop', 'public.products', 'id', ARRAY['body'], "
        "title_column => 'name', metadata_columns => ARRAY['category', 'price'], "
        "filter => 'published')"
    )
    assert source(conn)["changes_waiting"] == 5  # existing rows queued at once
    run_worker(conn.info.dsn)
    got = docs(conn)
    assert list(got) == ["1", "2", "3", "4", "5"]
    assert got["2"][0] == "Kettle 2 (public.products 2)" and got["2"][1] == "ready"
    assert got["2"][2] == {"category": "kitchen", "price": 12}
    hits = client.search("shop", "kettle boils water in 3 minutes", top_k=1)
    assert hits[0].title == "Kettle 3 (public.products 3)"
    embedded = len(built(provider))

    # A column the source does not read: nothing queued.
    conn.execute("UPDATE public.products SET views = views + 1")
    assert source(conn)["changes_waiting"] == 0
    # Metadata only: metadata changes, nothing is embedded or queued.
    conn.execute("UPDATE public.products SET price = 99 WHERE id = 1")
    run_worker(conn.info.dsn)
    assert docs(conn)["1"][2]["price"] == 99 and len(built(provider)) == embedded
    hits = client.search("shop", "kettle", filter={"price": 99})
    assert [h.title for h in hits] == ["Kettle 1 (public.products 1)"]
    # Text: re-indexed; the old words stop answering.
    conn.execute("UPDATE public.products SET body = 'A kettle that whistles loudly.' WHERE id = 2")
    # Out of the filter, deleted, and inserted, in one transaction each.
    conn.execute("UPDATE public.products SET published = false WHERE id = 3")
    conn.execute("DELETE FROM public.products WHERE id = 4")
    conn.execute(
        "INSERT INTO public.products (id, name, body, category, price) "
        "VALUES (6, 'Teapot', 'A ceramic teapot for loose leaf tea.', 'kitchen', 25)"
    )
    # A statement that changes no row queues nothing; a rolled-back one leaves no trace.
    with pytest.raises(psycopg.errors.UniqueViolation), conn.transaction():
        conn.execute("INSERT INTO public.products (id, body) VALUES (7, 'x'), (7, 'y')")
    run_worker(conn.info.dsn)
    got = docs(conn)
    assert list(got) == ["1", "2", "5", "6"] and {g[1] for g in got.values()} == {"ready"}
    assert len(built(provider)) == embedded + 2  # the new text and the teapot
    assert client.search("shop", "whistles loudly", top_k=1)[0].title.startswith("Kettle 2")
    titles = {h.title for h in client.search("shop", "kettle boils water 3 minutes 4")}
    assert not titles & {"Kettle 3 (public.products 3)", "Kettle 4 (public.products 4)"}
    # A key changed: the old key's document goes, the new key's comes.
    conn.execute("UPDATE public.products SET id = 60 WHERE id = 6")
    run_worker(conn.info.dsn)
    assert list(docs(conn)) == ["1", "2", "5", "60"]
    # TRUNCATE empties the source's documents.
    conn.execute("TRUNCATE public.products")
    run_worker(conn.info.dsn)
    assert docs(conn) == {}
    src = source(conn)
    assert (src["state"], src["changes_waiting"], src["last_error"]) == ("active", 0, None)


def test_text_expression_and_the_columns_it_reads(
    client: Client, conn: psycopg.Connection[Any], shop: None
) -> None:
    client.add_table_source(  # the Python client's call of the same function
        "shop",
        "public.products",
        "id",
        text_expression="name || ': ' || body || ' (' || category || ')'",
        name="catalogue",
    )
    read = conn.execute(
        "SELECT config->'columns_read' FROM kb.source WHERE name = 'catalogue'"
    ).fetchone()[0]
    assert read == ["body", "category", "id", "name"]
    run_worker(conn.info.dsn)
    hit = client.search("shop", "kettle 4 kitchen", top_k=1)[0]
    assert hit.title == "public.products 4" and "Kettle 4: Kettle model 4" in hit.content
    conn.execute("UPDATE public.products SET price = 1")  # not read by the expression
    assert source(conn)["changes_waiting"] == 0


def test_ddl_that_breaks_a_source_says_so_and_loses_nothing(
    client: Client, conn: psycopg.Connection[Any], shop: None
) -> None:
    conn.execute("SELECT kb.add_table_source('shop', 'public.products', 'id', ARRAY['body'])")
    run_worker(conn.info.dsn)
    # A renamed table is followed.
    conn.execute("ALTER TABLE public.products RENAME TO goods")
    assert source(conn)["locator"] == "public.goods"
    conn.execute("INSERT INTO public.goods (id, body) VALUES (8, 'A milk frother.')")
    run_worker(conn.info.dsn)
    assert "8" in docs(conn)
    # A column it reads, dropped: broken, a warning, documents kept, changes not followed.
    notices: list[str] = []
    conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
    conn.execute("ALTER TABLE public.goods RENAME COLUMN body TO description")
    assert any("is broken" in n and "no longer has column body" in n for n in notices)
    src = source(conn)
    assert src["state"] == "broken" and "no longer has column body" in src["last_error"]
    conn.execute("DELETE FROM public.goods WHERE id = 1")
    assert source(conn)["changes_waiting"] == 0 and len(docs(conn)) == 6
    # Attached again with the new column: active, and every row and document checked.
    conn.execute(
        "SELECT kb.add_table_source('shop', 'public.goods', 'id', ARRAY['description'], "
        "name => 'public.products')"
    )
    run_worker(conn.info.dsn)
    assert source(conn)["state"] == "active" and "1" not in docs(conn) and len(docs(conn)) == 5
    # The table dropped: broken, documents kept.
    conn.execute("DROP TABLE public.goods")
    src = source(conn)
    assert src["state"] == "broken" and "was dropped" in src["last_error"]
    assert len(docs(conn)) == 5
    assert conn.execute("SELECT kb.drop_source('shop', 'public.products', true)").fetchone() == (5,)
    assert docs(conn) == {}


def test_drop_source_removes_its_triggers(conn: psycopg.Connection[Any], shop: None) -> None:
    conn.execute("SELECT kb.add_table_source('shop', 'public.products', 'id', ARRAY['body'])")
    run_worker(conn.info.dsn)
    triggers = "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'public.products'::regclass"
    functions = "SELECT count(*) FROM pg_proc WHERE proname ~ '^_source_[0-9]+_[0-9]+_changed$'"
    # INSERT, UPDATE, DELETE, TRUNCATE, and a row trigger on the key column.
    assert conn.execute(triggers).fetchone() == (5,)
    assert conn.execute(functions).fetchone() == (1,)
    assert conn.execute("SELECT kb.drop_source('shop', 'public.products')").fetchone() == (5,)
    assert conn.execute(triggers).fetchone() == (0,)
    assert conn.execute(functions).fetchone() == (0,)
    conn.execute("DELETE FROM public.products")  # no source: nothing queued, docs stay
    assert conn.execute("SELECT count(*) FROM kb.source_change").fetchone() == (0,)
    kept = conn.execute("SELECT count(*), count(source_id) FROM kb.document").fetchone()
    assert kept == (5, 0)  # kept, as documents added by hand


def test_an_install_keeps_the_triggers_and_makes_the_missing_ones(
    conn: psycopg.Connection[Any], shop: None
) -> None:
    """kbpg install generates each source's trigger function again but does not drop and
    create triggers that are there (that locks the application's table); one that is
    missing is made."""
    from kbpg.migrate import migrate

    conn.execute("SELECT kb.add_table_source('shop', 'public.products', 'id', ARRAY['body'])")
    run_worker(conn.info.dsn)
    triggers = (
        "SELECT tgname, oid FROM pg_trigger "
        "WHERE tgrelid = 'public.products'::regclass ORDER BY tgname"
    )
    before = conn.execute(triggers).fetchall()
    assert len(before) == 5
    migrate(conn)
    assert conn.execute(triggers).fetchall() == before
    upd = next(name for name, _ in before if name.endswith("_upd"))
    conn.execute(f"DROP TRIGGER {upd} ON public.products")
    migrate(conn)
    after = conn.execute(triggers).fetchall()
    assert [n for n, _ in after] == [n for n, _ in before]
    assert [o for n, o in after if n != upd] == [o for n, o in before if n != upd]
    conn.execute("UPDATE public.products SET body = 'A louder kettle.' WHERE id = 1")
    assert source(conn)["changes_waiting"] == 1


def test_attaching_needs_rights_and_a_good_definition(
    conn: psycopg.Connection[Any], dsn: str, shop: None
) -> None:
    cases = [
        ("'id', ARRAY['body'], text_expression => 'body'", "give text_columns or text_expression"),
        ("'id'", "give text_columns or text_expression"),
        ("'nope', ARRAY['body']", 'has no column "nope"'),
        ("'name', ARRAY['body']", 'key_column "name" must be unique'),
        ("'price', ARRAY['body']", "a key is an integer, text or uuid column"),
        ("'id', ARRAY['bodyy']", 'column "bodyy" does not exist'),
        ("'id', ARRAY['body'], filter => 'pg_sleep(1) = 1'", "operator does not exist"),
    ]
    for args, message in cases:
        with pytest.raises(psycopg.Error, match=message):
            conn.execute(f"SELECT kb.add_table_source('shop', 'public.products', {args})")
    with pytest.raises(psycopg.Error, match="is not a table"):
        conn.execute("SELECT kb.add_table_source('shop', 'kb.sources', 'kb', ARRAY['kb'])")
    # A role that may write the KB but not read the table, or not add triggers to it.
    conn.execute("CREATE ROLE shop_writer LOGIN")
    team = conn.execute(
        "SELECT t.name FROM kb.team t JOIN kb.knowledge_base k ON k.team_id = t.id "
        "WHERE k.name = 'shop'"
    ).fetchone()[0]
    conn.execute("SELECT kb.add_team_member(%s, 'shop_writer')", (team,))
    attach = "SELECT kb.add_table_source('shop', 'public.products', 'id', ARRAY['body'])"
    try:
        with psycopg.connect(dsn, user="shop_writer", autocommit=True) as writer:
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="needs SELECT on it"):
                writer.execute(attach)
            conn.execute("GRANT SELECT ON public.products TO shop_writer")
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="TRIGGER privilege"):
                writer.execute(attach)
            conn.execute("GRANT TRIGGER ON public.products TO shop_writer")
            writer.execute(attach)  # now it may: its rights read the table
            assert conn.execute("SELECT owner_role FROM kb.source").fetchone() == ("shop_writer",)
            writer.execute("SELECT kb.drop_source('shop', 'public.products')")
    finally:
        conn.execute("REVOKE ALL ON public.products FROM shop_writer")
        conn.execute("SELECT kb.remove_team_member(%s, 'shop_writer')", (team,))
        conn.execute("DROP ROLE shop_writer")
    assert conn.execute("SELECT count(*) FROM kb.source").fetchone() == (0,)


def test_large_statements_queue_every_key_and_the_worker_compares(
    conn: psycopg.Connection[Any], provider: FakeProvider, shop: None
) -> None:
    """An UPDATE of more than 64 rows queues every key it touched without comparing (the
    application's write pays no comparison); the worker finds the rows whose text changed,
    and embeds those only. Keys changed in small and large statements move documents."""
    conn.execute("SELECT kb.add_table_source('shop', 'public.products', 'id', ARRAY['body'])")
    run_worker(conn.info.dsn)
    conn.execute(
        "INSERT INTO public.products (id, name, body) "
        "SELECT i, 'n' || i, 'text ' || i FROM generate_series(100, 299) i"
    )
    assert source(conn)["changes_waiting"] == 200
    run_worker(conn.info.dsn)
    embedded = len(provider.embedded_texts)

    def queued(sql: str) -> int:
        before = source(conn)["changes_waiting"]
        conn.execute(sql)
        return int(source(conn)["changes_waiting"] - before)

    assert queued("UPDATE public.products SET views = 1 WHERE id < 110") == 0  # 10: compared
    assert queued("UPDATE public.products SET views = 2") == 205  # large: every key
    run_worker(conn.info.dsn)
    assert len(provider.embedded_texts) == embedded  # the worker found no text changed
    assert queued("UPDATE public.products SET body = body || '!' WHERE id >= 150") == 150
    # Keys changed: the old key (one row trigger each) and the new one are queued.
    assert queued("UPDATE public.products SET id = id + 1000 WHERE id >= 200") == 200
    assert queued("UPDATE public.products SET id = -id WHERE id IN (1, 2)") == 4
    assert queued("DELETE FROM public.products WHERE id < 120 AND id >= 100") == 20
    run_worker(conn.info.dsn)
    keys = {int(k) for k in docs(conn)}
    assert keys == {-1, -2, 3, 4, 5} | set(range(120, 200)) | set(range(1200, 1300))
    assert source(conn)["changes_waiting"] == 0


def test_columns_without_equality_are_compared_as_text(
    conn: psycopg.Connection[Any], shop: None
) -> None:
    """A json column (no equality operator) read by the source: an UPDATE compares it as
    text, and one that leaves it as it is queues nothing."""
    conn.execute("ALTER TABLE public.products ADD COLUMN spec json DEFAULT '{\"w\": 1}'")
    conn.execute(
        "SELECT kb.add_table_source('shop', 'public.products', 'id', "
        "text_expression => 'body || '' '' || (spec->>''w'')')"
    )
    run_worker(conn.info.dsn)
    assert docs(conn)["1"][1] == "ready"
    changes = "SELECT count(*) FROM kb.source_change"
    conn.execute("UPDATE public.products SET views = 3, spec = spec WHERE id = 1")
    assert conn.execute(changes).fetchone() == (0,)
    conn.execute("UPDATE public.products SET spec = '{\"w\": 2}' WHERE id = 1")
    assert conn.execute(changes).fetchone() == (1,)


def test_dropping_the_knowledge_base_removes_its_triggers(
    client: Client, conn: psycopg.Connection[Any], shop: None
) -> None:
    conn.execute("SELECT kb.add_table_source('shop', 'public.products', 'id', ARRAY['body'])")
    client.drop_knowledge_base("shop")
    triggers = "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'public.products'::regclass"
    assert conn.execute(triggers).fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM kb.source_change").fetchone() == (0,)
    conn.execute("UPDATE public.products SET body = 'still the application''s'")
