-- The read path's internals take the knowledge base's id and read that kb_id's rows only,
-- so that under Citus every statement routes to the node holding the KB (README "Beyond
-- one machine"). Their old signatures go; sql/ recreates them with kb_id first. The view
-- kb.graph_edges reads kb._graph_edges, so it goes too and sql/ recreates it.
DROP VIEW IF EXISTS kb.graph_edges;
DROP FUNCTION IF EXISTS kb._graph_edges(bigint, bigint[], text[]);
DROP FUNCTION IF EXISTS kb._entity_peers(bigint, bigint[]);
DROP FUNCTION IF EXISTS kb._graph_channel(bigint, text, integer, integer, jsonb, real[]);
DROP FUNCTION IF EXISTS kb._tree_search(bigint, text, jsonb, jsonb);
DROP FUNCTION IF EXISTS kb._py_tree_search(bigint, text, jsonb, jsonb);
DROP FUNCTION IF EXISTS kb._search_rows(text, text, jsonb);
DROP FUNCTION IF EXISTS kb._search_core(text, text, jsonb);

-- Those statements filter by index_id and kb_id together, and an index generation
-- belongs to one KB: without these statistics the planner multiplies the two
-- selectivities and expects a KB's rows 10x (or, with more KBs, far) too few.
CREATE STATISTICS IF NOT EXISTS kb.posting_kb_of_index (dependencies) ON index_id, kb_id FROM kb.posting;
CREATE STATISTICS IF NOT EXISTS kb.term_stat_kb_of_index (dependencies) ON index_id, kb_id FROM kb.term_stat;
CREATE STATISTICS IF NOT EXISTS kb.chunk_kb_of_index (dependencies) ON index_id, kb_id FROM kb.chunk;
CREATE STATISTICS IF NOT EXISTS kb.embedding_kb_of_index (dependencies) ON index_id, kb_id FROM kb.embedding;
CREATE STATISTICS IF NOT EXISTS kb.graph_node_kb_of_index (dependencies) ON index_id, kb_id FROM kb.graph_node;
CREATE STATISTICS IF NOT EXISTS kb.graph_edge_kb_of_index (dependencies) ON index_id, kb_id FROM kb.graph_edge;
CREATE STATISTICS IF NOT EXISTS kb.page_index_node_kb_of_index (dependencies) ON index_id, kb_id FROM kb.page_index_node;
ANALYZE kb.posting, kb.term_stat, kb.chunk, kb.embedding, kb.graph_node, kb.graph_edge,
        kb.page_index_node;
