"""The errors the driver raises: a small hierarchy over PostgreSQL's SQLSTATEs.

Which SQLSTATE becomes which class is kbpg_db.sqlstates' table, the one the SQL and the
Retrieval Lab use too.
"""

from __future__ import annotations

from kbpg_db.sqlstates import STATES


class KbpgError(Exception):
    """Base of every kbpg error. ``sqlstate`` is set when the database raised it."""

    def __init__(
        self,
        message: str,
        *,
        sqlstate: str | None = None,
        detail: str | None = None,
        hint: str | None = None,
    ) -> None:
        full = message
        if detail:
            full += f"\n  detail: {detail}"
        if hint:
            full += f"\n  hint: {hint}"
        super().__init__(full)
        self.message = message
        self.sqlstate = sqlstate
        self.detail = detail
        self.hint = hint


class NotFoundError(KbpgError):
    """An unknown knowledge base, document, team or member (P0002 no_data_found), or a
    role that does not exist (42704 undefined_object)."""


class ConfigError(KbpgError):
    """A bad parameter or config field (22023 invalid_parameter_value and kin)."""


class ConflictError(ConfigError):
    """A name already taken (23505 unique_violation, 42710 duplicate_object)."""


class SharingError(ConfigError):
    """A share that cannot be made (KB010 private KB, KB011 its own team, KB012 already
    shared)."""


class AccessError(KbpgError):
    """A change the role may not make (42501 insufficient_privilege): a KB shared with it
    read-only, a team it does not administer, a role it cannot act as."""


class DocumentError(KbpgError):
    """A document that cannot be loaded or stored: unreadable, empty, too large."""


class ProviderError(KbpgError):
    """An embedding or rerank provider failed (SQLSTATE KB001, ours)."""


class LimitError(DocumentError):
    """A document or query over a size limit (SQLSTATE 54000 program_limit_exceeded)."""


class DataError(KbpgError):
    """Data that does not fit the KB, e.g. a vector of another dimension (22000)."""


class StateError(KbpgError):
    """The object is not ready for the call (55000 object_not_in_prerequisite_state)."""


class BusyError(StateError):
    """The object is in use: a reindex is already running (55006 object_in_use)."""


class InstallError(KbpgError):
    """kbpg's PL/Python package is missing (KB002) or of another release than the schema
    (KB003), or the server lacks what kbpg needs (`kbpg install`'s checks): run
    `kbpg server-setup` on the database host and `kbpg install` from the same release, and
    reconnect a session that was open across an upgrade."""


class ClusterError(KbpgError):
    """The embedded PostgreSQL cluster could not be created, started or reached."""


_BY_SQLSTATE: dict[str, type[KbpgError]] = {s.code: globals()[s.error] for s in STATES}


def clean_message(message: str) -> str:
    """PL/Python prefixes errors raised with plpy.error by ``plpy.Error: ``; drop it."""
    return message[len("plpy.Error: ") :] if message.startswith("plpy.Error: ") else message


def from_db(exc: BaseException) -> KbpgError:
    """Translate a psycopg or asyncpg error into the matching KbpgError."""
    diag = getattr(exc, "diag", None)
    if diag is not None:  # psycopg
        state = getattr(exc, "sqlstate", None) or diag.sqlstate
        message = diag.message_primary or str(exc)
        detail, hint = diag.message_detail, diag.message_hint
    else:  # asyncpg
        state = getattr(exc, "sqlstate", None)
        message = getattr(exc, "message", None) or str(exc)
        detail, hint = getattr(exc, "detail", None), getattr(exc, "hint", None)
    cls = _BY_SQLSTATE.get(state or "", KbpgError)
    return cls(clean_message(message), sqlstate=state, detail=detail, hint=hint)


class ConnectionFailed(KbpgError):
    """The database could not be reached or refused the connection (SQLSTATE class 08,
    28 or 3D), or the connection string is malformed."""


# libpq's wording for each way a connection fails, and what to do about it.
_CONNECT_HINTS = (
    (
        r'role "[^"]*" does not exist',
        "connect as a role that exists (user=...), or create it: CREATE ROLE name LOGIN",
    ),
    (
        r'database "[^"]*" does not exist',
        "create it (createdb NAME, or CREATE DATABASE), or name another with dbname=...",
    ),
    (
        r"password authentication failed",
        "check the password (PGPASSWORD, ~/.pgpass or password=...) and the role",
    ),
    (
        r"no pg_hba\.conf entry",
        "the server's pg_hba.conf does not admit this host, role and database: ask its DBA",
    ),
    (r"could not translate host name", "check the host name (host=...)"),
)
_UNREACHABLE_HINT = (
    "is PostgreSQL running there, and are the host and port right? `kbpg up` starts the "
    "embedded cluster and `kbpg dsn` prints its connection string"
)


def connection_error(exc: BaseException) -> KbpgError:
    """A failed connection (psycopg's OperationalError, or the ProgrammingError of a
    malformed connection string) as a KbpgError with libpq's own message and a hint."""
    text = " ".join(str(exc).split())
    if type(exc).__name__ == "ProgrammingError" or "connection info string" in text:
        return ConnectionFailed(
            f"the connection string is malformed: {text}",
            hint='write it as "host=HOST port=5432 dbname=DB user=ROLE" or '
            "postgresql://ROLE@HOST:5432/DB (--dsn, KBPG_DSN or the PG* variables)",
        )
    import re

    hint = next((advice for pattern, advice in _CONNECT_HINTS if re.search(pattern, text)), None)
    return ConnectionFailed(
        f"cannot connect to the database: {text}", hint=hint or _UNREACHABLE_HINT
    )
