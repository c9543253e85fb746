"""kbpg's in-database Python: the modules PL/Python functions in ``sql/`` call.

Nothing here imports ``plpy`` at module level; functions that need the server take
it as an argument, so every module is plain, unit-testable Python.
"""

from __future__ import annotations

__version__ = "0.4.0"
