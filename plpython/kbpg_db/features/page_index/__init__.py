"""PageIndex: a heading tree per document with node summaries (``build``), the structure
of PDFs (``pdf_structure``) and Tree Search, where an LLM reads the trees' tables of
contents at query time (``tree_search``). Settings: ``settings``. SQL:
sql/250-page-index.sql.

Importing the package loads nothing: ``kbpg_db.config`` imports ``settings`` alone.
"""
