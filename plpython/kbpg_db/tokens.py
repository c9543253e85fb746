"""Token counting with tiktoken's cl100k_base, offline.

tiktoken downloads its BPE file on first use. The file ships inside litellm
(``litellm_core_utils/tokenizers``, named by the sha1 of its usual URL), so we point
``TIKTOKEN_CACHE_DIR`` there before tiktoken looks, without importing litellm itself
(which costs seconds).
"""

from __future__ import annotations

import importlib.util
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

ENCODING = "cl100k_base"


def _litellm_tokenizer_dir() -> Path | None:
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "litellm_core_utils" / "tokenizers"
        if candidate.is_dir():
            return candidate
    return None


@lru_cache(maxsize=1)
def encoding() -> Any:
    """The cl100k_base encoding, loaded once per process without network access."""
    if not os.environ.get("TIKTOKEN_CACHE_DIR"):
        cache = _litellm_tokenizer_dir()
        if cache is None:
            raise RuntimeError(
                "tiktoken's cl100k_base file was not found: install litellm (it ships the "
                "file) or set TIKTOKEN_CACHE_DIR to a folder holding it"
            )
        os.environ["TIKTOKEN_CACHE_DIR"] = str(cache)
    import tiktoken

    return tiktoken.get_encoding(ENCODING)


COMMON_WORD_RANK = 10_000


def common_words(rank: int = COMMON_WORD_RANK) -> list[str]:
    """Common English words, sorted: each lower-case word that cl100k_base writes, after a
    space, as one token among its first ``rank`` (its merges come roughly in the order of
    their frequency in English text). Migration 026 stores them in ``kb.common_word``;
    hybrid search does not take one for a rare term (``kb._query_has_exact_cue``)."""
    import re

    enc = encoding()
    words = (enc.decode_single_token_bytes(i) for i in range(rank))
    return sorted({w[1:].decode() for w in words if re.fullmatch(rb" [a-z]+", w)})


_byte_lengths: Any = None  # by token id; -1 where not looked up yet


def byte_lengths(ids: list[int]) -> Any:
    """The UTF-8 length in bytes of each cl100k_base token of ``ids`` (a numpy array): a
    text's token boundaries without decoding its tokens. Each token is decoded once per
    process, the first time a text holds it, so nothing is paid up front."""
    import numpy as np

    global _byte_lengths
    enc = encoding()
    if _byte_lengths is None:
        _byte_lengths = np.full(enc.max_token_value + 1, -1, dtype=np.int64)
    at = np.asarray(ids, dtype=np.int64)
    out = _byte_lengths[at]
    if (out < 0).any():
        for token in np.unique(at[out < 0]).tolist():
            _byte_lengths[token] = len(enc.decode_single_token_bytes(token))
        out = _byte_lengths[at]
    return out


def count(text: str) -> int:
    """Number of cl100k_base tokens in ``text``."""
    return len(encoding().encode(text, disallowed_special=()))


def truncate(text: str, limit: int) -> str:
    """The longest start of ``text`` within ``limit`` cl100k tokens."""
    ids = encoding().encode(text, disallowed_special=())
    return text if len(ids) <= limit else encoding().decode(ids[:limit])
