-- Core tables of kbpg. Run once; recorded in kb.migration.

CREATE TABLE kb.knowledge_base (
    id               integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name             text NOT NULL UNIQUE
                     CHECK (name <> '' AND length(name) <= 200),
    description      text NOT NULL DEFAULT '',
    indexing_config  jsonb NOT NULL,
    retrieval_config jsonb NOT NULL,
    embedding_model  text NOT NULL,
    embedding_dim    integer NOT NULL CHECK (embedding_dim BETWEEN 1 AND 16000),
    active_index_id  bigint,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE kb.knowledge_base IS
  'One row per knowledge base. DBAs may write name, description and retrieval_config '
  '(validated); change indexing_config through kb.reindex_knowledge_base.';

-- One build of a KB's chunks, vectors and BM25 statistics. A KB serves from its active
-- index; a reindex builds a new one beside it and switches when complete.
CREATE TABLE kb.kb_index (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kb_id            integer NOT NULL REFERENCES kb.knowledge_base (id) ON DELETE CASCADE,
    indexing_config  jsonb NOT NULL,
    embedding_model  text NOT NULL,
    embedding_dim    integer NOT NULL,
    status           text NOT NULL DEFAULT 'building'
                     CHECK (status IN ('building', 'active', 'retired', 'failed')),
    error            text,
    n_chunks         bigint NOT NULL DEFAULT 0,
    total_len        bigint NOT NULL DEFAULT 0,
    created_at       timestamptz NOT NULL DEFAULT now(),
    activated_at     timestamptz
);
CREATE INDEX kb_index_kb_idx ON kb.kb_index (kb_id);
ALTER TABLE kb.knowledge_base
  ADD CONSTRAINT knowledge_base_active_index_fk
  FOREIGN KEY (active_index_id) REFERENCES kb.kb_index (id) DEFERRABLE INITIALLY DEFERRED;

CREATE TABLE kb.document (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kb_id            integer NOT NULL REFERENCES kb.knowledge_base (id) ON DELETE CASCADE,
    title            text NOT NULL CHECK (title <> '' AND length(title) <= 1000),
    source_uri       text,
    content          text NOT NULL,
    content_hash     text NOT NULL,
    page_starts      integer[],
    metadata         jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(metadata) = 'object'),
    usage_mode       text NOT NULL DEFAULT 'rag' CHECK (usage_mode IN ('rag', 'system', 'policy')),
    status           text NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'indexing', 'ready', 'error')),
    error            text,
    attempts         integer NOT NULL DEFAULT 0,
    chunk_count      integer NOT NULL DEFAULT 0,
    tokens_embedded  bigint NOT NULL DEFAULT 0,
    embedding_cost_usd numeric,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    indexed_at       timestamptz,
    UNIQUE (kb_id, title)
);
CREATE INDEX document_status_idx ON kb.document (kb_id, status);

CREATE TABLE kb.chunk (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    index_id         bigint NOT NULL REFERENCES kb.kb_index (id) ON DELETE CASCADE,
    document_id      bigint NOT NULL REFERENCES kb.document (id) ON DELETE CASCADE,
    ordinal          integer NOT NULL,
    content          text NOT NULL,
    token_count      integer NOT NULL,
    heading_path     text[] NOT NULL DEFAULT '{}',
    page             integer,
    char_start       integer NOT NULL,
    char_end         integer NOT NULL,
    metadata         jsonb NOT NULL DEFAULT '{}',
    tsv              tsvector NOT NULL,
    doc_len          integer NOT NULL,
    UNIQUE (index_id, document_id, ordinal)
);
CREATE INDEX chunk_document_idx ON kb.chunk (document_id);
CREATE INDEX chunk_tsv_idx ON kb.chunk USING gin (tsv);
CREATE INDEX chunk_metadata_idx ON kb.chunk USING gin (metadata jsonb_path_ops);

-- Vectors live apart from chunk text so HNSW maintenance never rewrites text rows.
-- The column is untyped; each kb_index gets a partial HNSW index on a cast to its
-- dimension (halfvec above 2000 dimensions).
CREATE TABLE kb.embedding (
    chunk_id         bigint PRIMARY KEY REFERENCES kb.chunk (id) ON DELETE CASCADE,
    index_id         bigint NOT NULL,
    embedding        vector NOT NULL
);
CREATE INDEX embedding_index_idx ON kb.embedding (index_id);

-- The inverted index behind BM25: one row per (lexeme, chunk) with its term frequency
-- and the chunk's length, so scoring is an index-only scan.
CREATE TABLE kb.posting (
    index_id         bigint NOT NULL,
    lexeme           text NOT NULL,
    chunk_id         bigint NOT NULL,
    tf               integer NOT NULL,
    dl               integer NOT NULL,
    PRIMARY KEY (index_id, lexeme, chunk_id)
);
CREATE INDEX posting_covering_idx ON kb.posting (index_id, lexeme) INCLUDE (chunk_id, tf, dl);
CREATE INDEX posting_chunk_idx ON kb.posting (chunk_id);

CREATE TABLE kb.term_stat (
    index_id         bigint NOT NULL,
    lexeme           text NOT NULL,
    df               integer NOT NULL CHECK (df >= 0),
    PRIMARY KEY (index_id, lexeme)
);

CREATE TABLE kb.job (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kb_id            integer NOT NULL REFERENCES kb.knowledge_base (id) ON DELETE CASCADE,
    document_id      bigint NOT NULL REFERENCES kb.document (id) ON DELETE CASCADE,
    index_id         bigint NOT NULL REFERENCES kb.kb_index (id) ON DELETE CASCADE,
    status           text NOT NULL DEFAULT 'queued'
                     CHECK (status IN ('queued', 'running', 'done', 'failed', 'cancelled')),
    attempts         integer NOT NULL DEFAULT 0,
    max_attempts     integer NOT NULL DEFAULT 5,
    run_after        timestamptz NOT NULL DEFAULT now(),
    locked_by        text,
    locked_until     timestamptz,
    last_error       text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    started_at       timestamptz,
    finished_at      timestamptz
);
CREATE INDEX job_claim_idx ON kb.job (run_after, id) WHERE status IN ('queued', 'running');
CREATE INDEX job_document_idx ON kb.job (document_id);
CREATE INDEX job_index_idx ON kb.job (index_id);
