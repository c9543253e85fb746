"""The knowledge graph beside a ChunkEmbed index: document, heading, code and triplet
graphs (``build``), source files' definitions and references (``code_graph``), and
communities over the triplets (``communities``). Settings: ``settings``. SQL:
sql/280-knowledge-graph-storage.sql to sql/284-knowledge-graph-entities-communities.sql.

Importing the package loads nothing: ``kbpg_db.config`` imports ``settings`` alone.
"""
