"""SQL generated from the Python models when kbpg migrate installs ``sql/``.

A ``/*@name*/`` marker in a SQL file (or ``/*@name*/stand-in/*@*/``, where the raw file
needs a value to parse) is replaced by ``macros()[name]``, so each fact has one
source: kb.search's and kb.explain_search's named parameters come from
``RetrievalConfig`` (adding a retrieval option is one edit to that model), and limits and
vocabularies from ``config``. The files stay valid SQL as written (a marker is a comment);
a marker quoted in a ``--`` comment is left as written.
"""

from __future__ import annotations

import json
import re
import types
import typing
from functools import lru_cache
from typing import Any

from kbpg_db import __version__, code_graph, config, convert

# kb.search's parameter names where they differ from the config field (kept for callers).
SQL_NAMES = {"bm25_k1": "k1", "bm25_b": "b"}
# /*@name*/ alone, or /*@name*/stand-in/*@*/ where the raw file needs a value there.
_MARKER = re.compile(r"/\*@(\w+)\*/(?:[^\n]*?/\*@\*/)?")


def _sql_type(annotation: Any) -> str:
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType) and len(args) == 1:
        return _sql_type(args[0])
    if origin is typing.Literal or annotation is str:
        return "text"
    if annotation is bool:
        return "boolean"
    if annotation is int:
        return "integer"
    if annotation is float:
        return "double precision"
    if origin is dict or annotation is dict:
        return "jsonb"
    raise TypeError(f"no SQL type for {annotation!r}")


def retrieval_parameters() -> list[tuple[str, str, str]]:
    """(SQL parameter name, config field, SQL type) for every retrieval_config field."""
    return [
        (SQL_NAMES.get(name, name), name, _sql_type(field.annotation))
        for name, field in config.RetrievalConfig.model_fields.items()
    ]


def search_options() -> tuple[str, ...]:
    """The named parameters of kb.search / kb.explain_search (the Python client's too)."""
    return (*(p for p, _, _ in retrieval_parameters()), "options")


# The exception handler every PL/pgSQL wrapper of a PL/Python function ends with
# (sql/000-python.sql): expected errors raised again without PL/Python's "plpy.Error: "
# prefix and traceback; an unexpected Python exception (38000) passes unchanged. RAISE
# refuses a NULL option, hence one branch per DETAIL/HINT combination.
RERAISE_EXPECTED = """EXCEPTION
  WHEN SQLSTATE '38000' THEN RAISE;
  WHEN OTHERS THEN
    DECLARE
      s text; m text; d text; h text;
    BEGIN
      GET STACKED DIAGNOSTICS s = RETURNED_SQLSTATE, m = MESSAGE_TEXT,
                              d = PG_EXCEPTION_DETAIL, h = PG_EXCEPTION_HINT;
      m := regexp_replace(m, '^((plpy|spiexceptions)\\.[A-Za-z]+: )+', '');
      d := nullif(d, '');
      h := nullif(h, '');
      IF d IS NOT NULL AND h IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = s, MESSAGE = m, DETAIL = d, HINT = h;
      ELSIF d IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = s, MESSAGE = m, DETAIL = d;
      ELSIF h IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = s, MESSAGE = m, HINT = h;
      END IF;
      RAISE EXCEPTION USING ERRCODE = s, MESSAGE = m;
    END;"""


def _quoted(values: tuple[str, ...]) -> str:
    return ", ".join("'" + v.replace("'", "''") + "'" for v in values)


def index_tables() -> tuple[str, ...]:
    """Every table that holds what an index generation built, keyed by (kb_id, index_id):
    the features' own tables (in their clearing order), then the searchable units."""
    return (*(t for f in config.FEATURES for t in f.tables), *config.SEARCH_TABLES)


def _clear_index_body() -> str:
    return "\n  ".join(
        f"DELETE FROM kb.{t} WHERE kb_id = p_kb_id AND index_id = p_index_id;"
        for t in index_tables()
    )


def _case_arms(mapping: dict[str, tuple[str, ...]], value: str) -> str:
    """``WHEN 'key' THEN <value>`` per entry (value formats the entry's tuple)."""
    arms = []
    for key, values in mapping.items():
        arms.append(f"WHEN '{key}' THEN " + value.format(_quoted(values)))
    return "\n           ".join(arms)


def _media_type_arms() -> str:
    """kb._media_type_of's CASE arms: a stored original's media type by its suffix."""
    return "\n    ".join(
        f"WHEN '{suffix[1:]}' THEN '{t.media_type}'" for suffix, t in convert.FILE_TYPES.items()
    )


def _own_search_arms() -> str:
    """kb._search_core's dispatch to the strategies that search on their own."""
    return "\n    ".join(
        f"WHEN '{f.name}' THEN v_stage := kb._search_{f.name}(v_plan, p_query);"
        for f in config.FEATURES
        if f.own_search
    )


def _reads_file_arms() -> str:
    """kb._build_reads_file's CASE arms: the strategies whose build reads a document's
    stored original, under the extra values that make it."""
    arms = "".join(
        f"WHEN '{f.name}' THEN indexing_config->'extra' @> '{json.dumps(f.reads_file)}' "
        for f in config.FEATURES
        if f.reads_file is not None
    )
    return f"CASE indexing_config->>'strategy' {arms}ELSE false END"


def _after_search_arms() -> str:
    """kb._search_core's dispatch to the strategies' steps after search."""
    return "\n      ".join(
        f"WHEN '{f.name}' THEN\n        RETURN QUERY SELECT {_AFTER_SEARCH_ROW} "
        f"FROM kb._after_search_{f.name}(v_plan, v_rows) a;"
        for f in config.FEATURES
        if f.after_search
    )


# An after-search row (chunk_id, final_rank, expanded_from, expansion) as one of
# kb._search_core's: no stage scores, the search's method, note and usage.
_AFTER_SEARCH_ROW = (
    "a.chunk_id, a.final_rank, NULL::double precision, NULL::integer, NULL::double precision, "
    "NULL::integer, NULL::double precision, NULL::integer, NULL::double precision, "
    "NULL::integer, NULL::double precision, v_plan.method, v_plan.note, "
    "coalesce(v_plan.usage, '{}'), a.expanded_from, a.expansion, NULL::integer, NULL::text"
)


def _family_arms() -> str:
    families: dict[str, list[str]] = {}
    for language, family in code_graph.LANGUAGE_FAMILIES.items():
        families.setdefault(family, [family]).append(language)
    return "\n              ".join(
        f"WHEN p_language IN ({_quoted(tuple(langs))}) THEN '{family}'"
        for family, langs in families.items()
    )


@lru_cache(maxsize=1)
def macros() -> dict[str, str]:
    params = retrieval_parameters()
    return {
        "retrieval_params": "".join(f"{p} {t} DEFAULT NULL,\n    " for p, _, t in params),
        "retrieval_object": ", ".join(f"'{f}', {p}" for p, f, _ in params),
        "max_document_bytes": str(config.MAX_DOCUMENT_BYTES),
        "usage_modes": _quoted(config.USAGE_MODES),
        "bm25_k1": repr(config.BM25_K1),
        "bm25_k1_full_text": repr(config.BM25_K1_FULL_TEXT),
        "term_expansion": str(config.TERM_EXPANSION),
        "local_prefix": config.LOCAL_PREFIX,
        # Generated from config.FEATURES: what a failed generation's clean-up deletes,
        # and the tables whose rows only kbpg's worker writes, readable as their index.
        "clear_index_tables": _clear_index_body(),
        "index_tables": _quoted(index_tables()),
        "index_tables_qualified": ", ".join(f"kb.{t}" for t in index_tables()),
        # the code graph's vocabularies, read by reference resolution in SQL.
        "target_kinds": _case_arms(code_graph.TARGET_KINDS, "ARRAY[{}]"),
        "language_families": _family_arms(),
        "file_suffixes": convert.supported(),
        "media_type_arms": _media_type_arms(),
        "own_search_arms": _own_search_arms(),
        "after_search_arms": _after_search_arms(),
        "reads_file_arms": _reads_file_arms(),
        "reraise_expected": RERAISE_EXPECTED,
        # The release the SQL was installed from: a PL/Python body whose session loaded
        # another release's package runs kb.python_init, which refuses to mix them.
        "kbpg_version": __version__,
    }


def expand(body: str) -> str:
    """Every marker replaced, except those quoted in a ``--`` comment (left as written)."""
    table = macros()

    def one(m: re.Match[str]) -> str:
        line_start = body.rfind("\n", 0, m.start()) + 1
        if "--" in body[line_start : m.start()]:
            return m.group(0)
        if m.group(1) not in table:
            raise KeyError(f"unknown SQL marker /*@{m.group(1)}*/")
        return table[m.group(1)]

    return _MARKER.sub(one, body)
