"""kbpg server-setup shows what pip fetches as it goes, a line per package in a log."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kbpg import serversetup
from kbpg.serversetup import read_lock


def test_pip_progress_is_a_line_per_package(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pinned = read_lock()
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    serversetup._pip(tmp_path, version, [f"idna=={pinned['idna']}"], deps=False)
    out = capsys.readouterr().out.splitlines()
    assert any(line.startswith("==>   [1] Collecting idna==") for line in out), out
    assert any(line.startswith("==>   Successfully installed idna") for line in out), out
    assert (tmp_path / "idna").is_dir()


def test_pip_failure_names_the_packages(tmp_path: Path) -> None:
    from kbpg.errors import KbpgError

    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    with pytest.raises(KbpgError, match="pip could not install") as err:
        serversetup._pip(tmp_path, version, ["idna==0.0.0.404"], deps=False)
    assert "idna==0.0.0.404" in str(err.value)
