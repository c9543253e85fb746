"""Every SQLSTATE kbpg raises, in one table.

The SQL functions raise them (``RAISE ... USING ERRCODE``), the PL/Python modules through
``sqlapi.fail``, the Python client turns each into its ``kbpg.errors`` class, and the
Retrieval Lab into an HTTP status. ``tests/unit/test_sqlstates.py`` checks that every code
the SQL and the Python raise is here, that each class exists, and that docs/errors.md's
list names them all.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SqlState:
    code: str
    name: str  # PostgreSQL's condition name, or ours for the KB class
    error: str  # the kbpg.errors class the client raises
    http: int  # the Retrieval Lab's HTTP status
    meaning: str


STATES: tuple[SqlState, ...] = (
    SqlState(
        "22023", "invalid_parameter_value", "ConfigError", 400, "a bad parameter or config field"
    ),
    SqlState("22004", "null_value_not_allowed", "ConfigError", 400, "a required value is NULL"),
    SqlState(
        "22000",
        "data_exception",
        "DataError",
        400,
        "data that does not fit the knowledge base (a vector of another dimension)",
    ),
    SqlState(
        "54000",
        "program_limit_exceeded",
        "LimitError",
        413,
        "a document or query over a size limit",
    ),
    SqlState(
        "23505",
        "unique_violation",
        "ConflictError",
        409,
        "a knowledge base or team name already taken",
    ),
    SqlState(
        "42710",
        "duplicate_object",
        "ConflictError",
        409,
        "a test set (or other named object) that already exists",
    ),
    SqlState(
        "P0002",
        "no_data_found",
        "NotFoundError",
        404,
        "an unknown knowledge base, document, team or team member; a knowledge base you "
        "cannot read does not exist for you",
    ),
    SqlState("42704", "undefined_object", "NotFoundError", 404, "a role that does not exist"),
    SqlState(
        "42501",
        "insufficient_privilege",
        "AccessError",
        403,
        "a change you may not make: a knowledge base shared with you read-only, a team "
        "you do not administer, a role you cannot act as, a table only kbpg writes",
    ),
    SqlState(
        "55000",
        "object_not_in_prerequisite_state",
        "StateError",
        409,
        "an object not ready for the call (an index generation still building, a "
        "knowledge graph that is off)",
    ),
    SqlState(
        "55006",
        "object_in_use",
        "BusyError",
        409,
        "in use: a reindex already running, a team's last admin",
    ),
    SqlState(
        "KB001",
        "provider_failed",
        "ProviderError",
        502,
        "an embedding, rerank or LLM provider failed",
    ),
    SqlState(
        "KB002",
        "python_package_missing",
        "InstallError",
        500,
        "kbpg's PL/Python package is not importable, or kb.python_path was set outside "
        "the server's configuration",
    ),
    SqlState(
        "KB003",
        "version_mismatch",
        "InstallError",
        500,
        "the schema, its SQL and the PL/Python package are of different kbpg releases, "
        "or kbpg was upgraded while the session ran (start a new session)",
    ),
    SqlState(
        "KB010",
        "private_kb_cannot_be_shared",
        "SharingError",
        400,
        "a private knowledge base cannot be shared",
    ),
    SqlState(
        "KB011",
        "kb_shared_with_owning_team",
        "SharingError",
        400,
        "a knowledge base is shared with its own team",
    ),
    SqlState(
        "KB012",
        "kb_already_shared",
        "SharingError",
        409,
        "the knowledge base is already shared with that team",
    ),
)

BY_CODE: dict[str, SqlState] = {s.code: s for s in STATES}
BY_NAME: dict[str, SqlState] = {s.name: s for s in STATES}

# The codes the PL/Python modules raise by name.
INVALID_PARAMETER = BY_NAME["invalid_parameter_value"].code
DATA_EXCEPTION = BY_NAME["data_exception"].code
# Ours: a provider or model failed (PostgreSQL's class 58 reads as a lost connection).
EXTERNAL_FAILURE = BY_NAME["provider_failed"].code


class SqlError(Exception):
    """An expected error a module raises on the way out of the database: the SQL wrapper
    (``kbpg_db.sqlapi``) raises it again with its SQLSTATE, DETAIL and HINT."""

    def __init__(
        self, message: str, sqlstate: str, detail: str | None = None, hint: str | None = None
    ) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate
        self.detail = detail
        self.hint = hint
