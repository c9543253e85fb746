"""cl100k_base from the file kbpg ships, with no network and whatever TIKTOKEN_CACHE_DIR says."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from kbpg_db import tokens

# A process that tokenizes with every network call refused: an audit hook raises on
# socket.connect and name look-ups, so a fallback to tiktoken's download fails loudly.
NO_NETWORK = """
import sys
def refuse(event, args):
    if event in ("socket.connect", "socket.getaddrinfo", "urllib.Request"):
        raise RuntimeError("network used: " + event)
sys.addaudithook(refuse)
from kbpg_db import tokens
print(tokens.encoding().encode("hello world"), tokens.count("Ünïcode 12345 tests"))
"""


def test_tokenizes_without_network_whatever_the_cache_dir_says(tmp_path: Path) -> None:
    empty = tmp_path / "cache"
    empty.mkdir()
    env = {**os.environ, "TIKTOKEN_CACHE_DIR": str(empty)}
    env["PYTHONPATH"] = str(Path(tokens.__file__).parent.parent)
    out = subprocess.run(
        [sys.executable, "-c", NO_NETWORK], env=env, capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("]")[0] + "]" == "[15339, 1917]"
    assert out.stdout.split("]")[1].strip() == "8"
    assert list(empty.iterdir()) == []  # tiktoken's cache was not written either


def test_shipped_file_is_cl100k_base() -> None:
    enc = tokens.encoding()
    assert enc.n_vocab == 100277
    assert enc.encode("<|endoftext|>", allowed_special="all") == [100257]
    assert (
        enc.decode(enc.encode("def f(x):\n    return x  # ünï")) == "def f(x):\n    return x  # ünï"
    )


def test_missing_or_damaged_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "cl100k_base.tiktoken"
    with pytest.raises(RuntimeError, match=r"cl100k_base\.tiktoken.*kbpg server-setup"):
        tokens.read_ranks(missing)
    missing.write_bytes(tokens.BPE_FILE.read_bytes()[:-100])
    with pytest.raises(RuntimeError, match=r"damaged.*kbpg server-setup"):
        tokens.read_ranks(missing)
