"""ChunkEmbed: documents cut into chunks, each embedded and indexed for BM25 (``build``);
its settings are top-level indexing settings (``settings``). SQL: sql/200-documents.sql,
sql/300-bm25.sql, sql/400-search-plan.sql to sql/440-search.sql.

Importing the package loads nothing: ``kbpg_db.config`` imports ``settings`` alone.
"""
