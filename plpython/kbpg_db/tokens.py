"""Token counting with tiktoken's cl100k_base, offline.

The encoding's BPE file ships with this package (``data/cl100k_base.tiktoken``, the file
OpenAI publishes with tiktoken, MIT licence in ``data/NOTICE``) and is read from that
path alone. tiktoken's own ``get_encoding`` would look in ``TIKTOKEN_CACHE_DIR`` and, on a
miss (a folder the server's OS user cannot read is one), download the file: a database
server must never reach for the network, so it is not called.
"""

from __future__ import annotations

import base64
import hashlib
from functools import lru_cache
from pathlib import Path
from typing import Any

ENCODING = "cl100k_base"
BPE_FILE = Path(__file__).with_name("data") / "cl100k_base.tiktoken"
# tiktoken_ext.openai_public's cl100k_base: the file's hash, the split pattern and the
# special tokens, which the file does not hold.
BPE_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++"""
    r"""[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
SPECIAL_TOKENS = {
    "<|endoftext|>": 100257,
    "<|fim_prefix|>": 100258,
    "<|fim_middle|>": 100259,
    "<|fim_suffix|>": 100260,
    "<|endofprompt|>": 100276,
}


def read_ranks(path: Path = BPE_FILE) -> dict[bytes, int]:
    """The token ranks of a ``.tiktoken`` file (a base64 token and its rank a line),
    checked against cl100k_base's published hash."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise RuntimeError(
            f"tiktoken's cl100k_base file {path} could not be read ({exc.strerror or exc}): "
            "kbpg's in-database package is incomplete; install it again with "
            "`kbpg server-setup`"
        ) from None
    if hashlib.sha256(data).hexdigest() != BPE_SHA256:
        raise RuntimeError(
            f"tiktoken's cl100k_base file {path} is damaged (its sha256 is not "
            "cl100k_base's): install kbpg's in-database package again with "
            "`kbpg server-setup`"
        )
    ranks: dict[bytes, int] = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


@lru_cache(maxsize=1)
def encoding() -> Any:
    """The cl100k_base encoding, loaded once per process from the shipped file."""
    import tiktoken

    return tiktoken.Encoding(
        ENCODING,
        pat_str=PATTERN,
        mergeable_ranks=read_ranks(),
        special_tokens=SPECIAL_TOKENS,
    )


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
