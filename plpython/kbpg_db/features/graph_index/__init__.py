"""GraphIndex: the PageIndex tree plus the cross-references between its sections, followed
at query time (``build``, ``settings``). SQL: sql/260-graph-index.sql.

Importing the package loads nothing: ``kbpg_db.config`` imports ``settings`` alone.
"""
