-- The knowledge-graph index beside vectors and BM25 on ChunkEmbed KBs
-- (indexing_config.knowledge_graph): one vertex table and one edge table for its graphs,
-- kept per document and index generation like chunks, traversed with recursive SQL.

-- Vertices: a document and its chunks (the document graph), Markdown headings (the
-- heading graph), a source file, its repository and its definitions (the code graph;
-- one repository vertex per file, the files of one repository share its name), the entities the
-- LLM found in a document's chunks (the triplet graph; one vertex per entity and document,
-- the same entity across documents shares its key).

CREATE TABLE kb.graph_node (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    index_id       bigint NOT NULL REFERENCES kb.kb_index (id) ON DELETE CASCADE,
    document_id    bigint NOT NULL REFERENCES kb.document (id) ON DELETE CASCADE,
    local_id       integer NOT NULL,  -- the vertex's number within its document's build
    graph          text NOT NULL CHECK (graph IN ('document', 'heading', 'code', 'triplets')),
    kind           text NOT NULL CHECK (kind IN (
                     'document', 'chunk', 'heading', 'file', 'function', 'method', 'class',
                     'interface', 'struct', 'enum', 'trait', 'impl', 'entity', 'repository')),
    name           text NOT NULL,
    qualified_name text NOT NULL,  -- an entity: its merge key (normalised name | type)
    path           text,     -- the file's path in its repository (code), else the title
    module         text,     -- code: the file's module key (shapes/base, com/demo)
    language       text,
    member_of      text,     -- a method's class, by name
    start_line     integer,
    end_line       integer,
    chunk_id       bigint REFERENCES kb.chunk (id) ON DELETE SET NULL,  -- the chunk holding it
    properties     jsonb NOT NULL DEFAULT '{}',
    embedding      vector,   -- an entity's name, embedded with the KB's model (vector match)
    UNIQUE (index_id, document_id, local_id)
);
CREATE INDEX graph_node_name_idx ON kb.graph_node (index_id, name);
CREATE INDEX graph_node_lower_name_idx ON kb.graph_node (index_id, lower(name));
CREATE INDEX graph_node_qualified_idx ON kb.graph_node (index_id, qualified_name);
CREATE INDEX graph_node_module_tail_idx ON kb.graph_node
  (index_id, (regexp_replace(module, '^.*/', ''))) WHERE kind = 'file';
CREATE INDEX graph_node_document_idx ON kb.graph_node (document_id);
CREATE INDEX graph_node_chunk_idx ON kb.graph_node (chunk_id);
COMMENT ON TABLE kb.graph_node IS
  'Knowledge-graph vertices per index generation: documents and chunks, Markdown headings, '
  'source files and their functions, methods, classes, interfaces, structs, enums, traits '
  'and impls, with name, qualified name, path, lines, language and the chunk holding each.';

-- Edges. Structural ones (include, next, contains, defines) and references resolved in the
-- same file have target_id; a reference to another file keeps what it names (target_name,
-- the modules it may come from) and is resolved when read (kb._graph_edges), so a file
-- added later resolves the references made to it.
CREATE TABLE kb.graph_edge (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    index_id       bigint NOT NULL REFERENCES kb.kb_index (id) ON DELETE CASCADE,
    document_id    bigint NOT NULL REFERENCES kb.document (id) ON DELETE CASCADE,
    source_id      bigint NOT NULL REFERENCES kb.graph_node (id) ON DELETE CASCADE,
    kind           text NOT NULL CHECK (kind IN (
                     'include', 'next', 'contains', 'defines', 'calls', 'imports', 'inherits',
                     'implements', 'relation')),
    label          text,     -- a relation's predicate as the LLM wrote it
    chunk_id       bigint REFERENCES kb.chunk (id) ON DELETE CASCADE,  -- a relation's source text
    target_id      bigint REFERENCES kb.graph_node (id) ON DELETE CASCADE,
    target_name    text,
    target_modules text[] NOT NULL DEFAULT '{}',
    qualifier      text,
    line           integer,
    confidence     real,
    resolution     text CHECK (resolution IN ('structure', 'same_file')),
    CHECK (target_id IS NOT NULL OR target_name IS NOT NULL)
);
CREATE INDEX graph_edge_source_idx ON kb.graph_edge (source_id);
CREATE INDEX graph_edge_target_idx ON kb.graph_edge (target_id);
CREATE INDEX graph_edge_open_name_idx ON kb.graph_edge (index_id, target_name)
  WHERE target_id IS NULL;
CREATE INDEX graph_edge_document_idx ON kb.graph_edge (document_id);
CREATE INDEX graph_edge_chunk_idx ON kb.graph_edge (chunk_id);
COMMENT ON TABLE kb.graph_edge IS
  'Knowledge-graph edges: document -include-> chunk, chunk -include-> chunk, chunk -next-> '
  'chunk, file/heading -contains-> heading, file/class -defines-> definition, and calls, '
  'imports, inherits, implements; an edge to another file is resolved when read; entity '
  '-relation-> entity with its predicate (label) and the chunk it was read from (chunk_id).';

-- Entity merges beyond the normalised key: candidate duplicates (the same name with
-- another type; similar names) and what was decided, by rule or by the LLM, once per pair.
CREATE TABLE kb.graph_entity_merge (
    index_id    bigint NOT NULL REFERENCES kb.kb_index (id) ON DELETE CASCADE,
    key         text NOT NULL,
    other_key   text NOT NULL,   -- the entity it was compared with (merged: its canonical key)
    merged      boolean NOT NULL,
    decided_by  text NOT NULL CHECK (decided_by IN ('rule', 'llm')),
    reason      text NOT NULL,
    similarity  real,            -- trigram similarity of the two names
    decided_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (index_id, key, other_key)
);
CREATE UNIQUE INDEX graph_entity_merge_one_canonical ON kb.graph_entity_merge (index_id, key)
  WHERE merged;
COMMENT ON TABLE kb.graph_entity_merge IS
  'Knowledge-graph entity merges beyond the normalised key: each candidate pair (same name, '
  'another type; similar names), merged or not, decided by a rule or recorded from the LLM.';

-- Communities of the triplet graph with their LLM summaries (knowledge_graph.communities),
-- and when each generation's communities were last brought up to date.
CREATE TABLE kb.graph_community (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    index_id    bigint NOT NULL REFERENCES kb.kb_index (id) ON DELETE CASCADE,
    signature   text NOT NULL,     -- a hash of its relations: unchanged, the summary stays
    members     text[] NOT NULL,   -- canonical entity keys
    names       text[] NOT NULL,
    relations   integer NOT NULL,
    title       text NOT NULL,
    summary     text NOT NULL,
    embedding   vector,
    tsv         tsvector NOT NULL,
    chunk_ids   bigint[] NOT NULL, -- the chunks its relations were read from
    updated_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (index_id, signature)
);
COMMENT ON TABLE kb.graph_community IS
  'Communities of a knowledge graph''s entities (label propagation over merged entities and '
  'their relations), each with an LLM title and summary, embedded and indexed for search.';
CREATE TABLE kb.graph_community_state (
    index_id     bigint PRIMARY KEY REFERENCES kb.kb_index (id) ON DELETE CASCADE,
    stale        boolean NOT NULL DEFAULT true,
    refreshed_at timestamptz,
    error        text
);
COMMENT ON TABLE kb.graph_community_state IS
  'Whether a generation''s entities changed since its communities were summarised (the '
  'worker refreshes stale ones when its queue is empty), and the last refresh''s error.';

DO $$
DECLARE
  t text;
  k text := 'index_id = ANY ((SELECT kb._readable_indexes(current_user))::bigint[])';
  w text := 'kb._can_write_index(index_id)';
BEGIN
  FOREACH t IN ARRAY ARRAY['graph_node', 'graph_edge', 'graph_entity_merge', 'graph_community',
                           'graph_community_state'] LOOP
    EXECUTE format('ALTER TABLE kb.%I ENABLE ROW LEVEL SECURITY', t);
    EXECUTE format('CREATE POLICY readable ON kb.%I FOR SELECT USING (%s)', t, k);
    EXECUTE format('CREATE POLICY adds ON kb.%I FOR INSERT WITH CHECK (%s)', t, w);
    EXECUTE format('CREATE POLICY changes ON kb.%I FOR UPDATE USING (%s) WITH CHECK (%s)',
                   t, w, w);
    EXECUTE format('CREATE POLICY removes ON kb.%I FOR DELETE USING (%s)', t, w);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON kb.%I TO PUBLIC', t);
  END LOOP;
END
$$;

-- Search gains the graph channel (graph_weight, graph_hops, graph_limit; graph_rank and
-- graph_path in explain_search): drop the functions; sql/ recreates them.
DO $$
DECLARE
  r regprocedure;
BEGIN
  FOR r IN SELECT p.oid::regprocedure FROM pg_proc p
            WHERE p.pronamespace = 'kb'::regnamespace
              AND p.proname IN ('search', 'explain_search', '_search_core', '_search_rows') LOOP
    EXECUTE 'DROP FUNCTION ' || r;
  END LOOP;
END
$$;

-- The indexing step knows its index generation (the triplet graph compares a document's
-- entities with those already indexed there).
DROP FUNCTION IF EXISTS kb._build_document(text, text, jsonb, integer[], jsonb, bytea);
DROP FUNCTION IF EXISTS kb._py_build_document(text, text, jsonb, integer[], jsonb, bytea);
