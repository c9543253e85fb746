"""Client and AsyncClient have real, typed methods, generated from kbpg.api.Api."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

from kbpg.api import API, Api, generate_methods
from kbpg.client import AsyncClient, Client

REPO = Path(__file__).resolve().parents[2]


def test_the_generated_methods_are_current() -> None:
    formatted = subprocess.run(
        [
            str(Path(sys.executable).parent / "ruff"),
            "format",
            "--stdin-filename",
            "kbpg/_methods.py",
            "-",
        ],
        input=generate_methods(),
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    ).stdout
    assert formatted == (REPO / "kbpg" / "_methods.py").read_text(), (
        "kbpg/_methods.py is out of date with kbpg/api.py: run `make client-methods`"
    )


def test_every_method_is_defined_on_both_clients_with_its_types() -> None:
    for name in API:
        sync, asynchronous = getattr(Client, name), getattr(AsyncClient, name)
        assert name in vars(Client.__mro__[1]) and name in vars(AsyncClient.__mro__[1])
        assert inspect.iscoroutinefunction(asynchronous) and not inspect.iscoroutinefunction(sync)
        assert inspect.signature(sync) == inspect.signature(asynchronous)
        built = str(inspect.signature(getattr(Api, name)).return_annotation)
        assert inspect.signature(sync).return_annotation == built[len("Call[") : -1], name
    search = inspect.signature(Client.search).parameters
    assert search["top_k"].annotation == "int | None"
    assert search["filter"].annotation == "dict[str, Any] | None"
    assert search["top_k"].kind is inspect.Parameter.KEYWORD_ONLY
    assert inspect.signature(Client.build_context).parameters["token_budget"].annotation == (
        "int | None"
    )
