"""kb.common_word's list (migration 026) is the one kbpg_db.tokens derives."""

from __future__ import annotations

import re
from pathlib import Path

from kbpg_db import tokens

MIGRATION = Path(__file__).parents[2] / "migrations" / "026-common-english-words.sql"


def test_the_stored_common_words_are_tokens_rule() -> None:
    sql = MIGRATION.read_text()
    body = sql.split("regexp_split_to_table(btrim(", 1)[1].split("), ' ')", 1)[0]
    stored = "".join(re.findall(r"'([^']*)'", body)).split()
    derived = tokens.common_words()
    assert stored == derived
    # Everyday words are on it, names an API reference is searched for are not.
    assert {"everything", "folder", "alone", "background", "water"} <= set(derived)
    assert not {"espresso", "mutex", "tsvector", "stdin"} & set(derived)
    assert 2000 < len(derived) < 4000
