"""Where kbpg's own files are: the SQL, the migrations, the sample corpus, the lock file and
the in-database package.

An installed wheel carries them inside the package (``kbpg/_sql``, ``kbpg/_migrations``,
``kbpg/_sample``; pyproject's ``package-dir`` maps the checkout's folders there), and a
source checkout reads them where they stand (``sql/``, ``migrations/``, ``data/sample/``),
so an edit takes effect without a reinstall.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from kbpg.errors import InstallError

PACKAGE = Path(__file__).resolve().parent
# A source checkout: the package folder sits beside sql/ and migrations/.
CHECKOUT = PACKAGE.parent
_IN_CHECKOUT = (CHECKOUT / "pyproject.toml").is_file() and (CHECKOUT / "migrations").is_dir()

# Folder in a checkout -> the folder it is installed as inside the package.
_FOLDERS = {"sql": "_sql", "migrations": "_migrations", "data/sample": "_sample"}


def in_checkout() -> bool:
    """Whether kbpg runs from a source checkout (an editable install) rather than a wheel."""
    return _IN_CHECKOUT


def _folder(checkout_path: str) -> Path:
    path = CHECKOUT / checkout_path if _IN_CHECKOUT else PACKAGE / _FOLDERS[checkout_path]
    if not path.is_dir():
        raise InstallError(
            f"kbpg's {checkout_path} files are missing ({path} is not a folder)",
            hint="reinstall kbpg (pip install --force-reinstall kbpg)",
        )
    return path


def sql_dir() -> Path:
    """``sql/``: the functions users call, re-applied on every install."""
    return _folder("sql")


def migrations_dir() -> Path:
    """``migrations/``: run-once DDL, recorded in kb.migration."""
    return _folder("migrations")


def sample_dir() -> Path:
    """``data/sample/``: the corpus `kbpg demo` indexes."""
    return _folder("data/sample")


def lock_file() -> Path:
    """The exact versions kbpg is tested with (``kbpg/requirements.lock``): `make setup`
    installs with it as constraints, and `kbpg server-setup` pins PL/Python's packages
    from it."""
    return PACKAGE / "requirements.lock"


def plpython_source() -> Path:
    """The folder of the in-database package ``kbpg_db`` (installed beside kbpg, or
    ``plpython/kbpg_db`` in a checkout)."""
    spec = importlib.util.find_spec("kbpg_db")
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    return CHECKOUT / "plpython" / "kbpg_db"


def repo_path(*parts: str) -> Path:
    """A file that only a source checkout has (benchmark and evaluation data sets)."""
    path = CHECKOUT.joinpath(*parts)
    if not _IN_CHECKOUT or not path.exists():
        raise InstallError(
            f"{'/'.join(parts)} is part of kbpg's source repository, not of the installed package",
            hint="run this from a clone of the kbpg repository (make setup)",
        )
    return path
