"""The Retrieval Lab (``kbpg lab``): a local web page over kbpg's SQL functions."""

from __future__ import annotations

from kbpg_db.sqlstates import STATES

# SQLSTATE -> HTTP status for errors the page shows (kbpg_db.sqlstates' table).
STATUS = {s.code: s.http for s in STATES}


class LabError(Exception):
    """A request the lab cannot serve: the message is shown on the page."""

    def __init__(self, message: str, status: int = 400, hint: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.hint = hint

    @classmethod
    def from_db(cls, exc: Exception) -> LabError:
        diag = getattr(exc, "diag", None)
        state = getattr(diag, "sqlstate", None) or ""
        message = getattr(diag, "message_primary", None) or str(exc).strip()
        return cls(message, STATUS.get(state, 400), getattr(diag, "message_hint", None))
