"""Doc2JSON: the fields of a JSON schema extracted per document by an LLM over windows of
text or page images (``build``, ``settings``). SQL: sql/270-doc2json.sql.

Importing the package loads nothing: ``kbpg_db.config`` imports ``settings`` alone.
"""
