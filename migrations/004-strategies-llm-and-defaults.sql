-- Index strategies, the LLM layer (call cache, accounting, resumable jobs), project
-- defaults, the version handshake and PageIndex's tables.

-- Signatures that change: recreated by sql/ right after.
DROP FUNCTION IF EXISTS kb.validate_config(text, jsonb);
DROP FUNCTION IF EXISTS kb.process_job(bigint, text);
DROP FUNCTION IF EXISTS kb._chunk_and_embed(text, jsonb, integer[]);
DROP TYPE IF EXISTS kb.indexing_result;

-- What kb.process_job tells the worker; the worker matches every value.
CREATE TYPE kb.job_outcome AS ENUM (
  'done',        -- indexed
  'more',        -- a step of a long (LLM) job is committed; call again
  'retry',       -- failed, queued again with backoff
  'failed',      -- failed for good (max_attempts reached or not retryable)
  'lost',        -- the job is no longer this worker's (lease taken over)
  'cancelled',   -- nothing left to do (its index generation is gone)
  'superseded'   -- the document changed meanwhile; the newer version's job indexes it
);

-- Project-level defaults (seed 000), applied to KBs created afterwards.
CREATE TABLE kb.setting (
    name       text PRIMARY KEY CHECK (name IN ('indexing_config', 'retrieval_config')),
    value      jsonb NOT NULL CHECK (jsonb_typeof(value) = 'object'),
    updated_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE kb.setting IS
  'Project-wide defaults for indexing_config and retrieval_config; set them with '
  'kb.set_default_config. A KB records its completed config when created.';

-- The schema's version, compared with the PL/Python package's on first use.
CREATE TABLE kb.version (
    id           boolean PRIMARY KEY DEFAULT true CHECK (id),
    version      text NOT NULL,
    installed_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE kb.version IS 'The kbpg version that kbpg migrate installed last.';

-- Every LLM answer that validated, by request: retried jobs, reindexes with unchanged
-- settings and re-uploads of unchanged sections never pay for the same call twice.
CREATE TABLE kb.llm_call (
    key               text PRIMARY KEY,
    model             text NOT NULL,
    purpose           text NOT NULL,
    request           jsonb NOT NULL,
    response          text NOT NULL,
    prompt_tokens     integer NOT NULL DEFAULT 0,
    completion_tokens integer NOT NULL DEFAULT 0,
    cost_usd          numeric,
    hits              bigint NOT NULL DEFAULT 0,
    created_at        timestamptz NOT NULL DEFAULT now(),
    last_used_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX llm_call_last_used_idx ON kb.llm_call (last_used_at);
COMMENT ON TABLE kb.llm_call IS
  'The LLM call cache: one validated answer per (model, endpoint, messages, parameters). '
  'DBAs may read and delete rows (kb.purge_llm_cache); a deleted answer is asked again.';

ALTER TABLE kb.job
  ADD COLUMN lease_seconds double precision NOT NULL DEFAULT 60,
  ADD COLUMN steps integer NOT NULL DEFAULT 0,
  ADD COLUMN progress text,
  ADD COLUMN llm_calls integer NOT NULL DEFAULT 0,
  ADD COLUMN llm_cache_hits integer NOT NULL DEFAULT 0,
  ADD COLUMN llm_prompt_tokens bigint NOT NULL DEFAULT 0,
  ADD COLUMN llm_completion_tokens bigint NOT NULL DEFAULT 0,
  ADD COLUMN llm_cost_usd numeric DEFAULT 0;

ALTER TABLE kb.document
  ADD COLUMN llm_calls integer NOT NULL DEFAULT 0,
  ADD COLUMN llm_cache_hits integer NOT NULL DEFAULT 0,
  ADD COLUMN llm_prompt_tokens bigint NOT NULL DEFAULT 0,
  ADD COLUMN llm_completion_tokens bigint NOT NULL DEFAULT 0,
  ADD COLUMN llm_cost_usd numeric;

-- PageIndex: the section tree of each document (its nodes are also the KB's chunks).
CREATE TABLE kb.page_index_node (
    index_id      bigint NOT NULL REFERENCES kb.kb_index (id) ON DELETE CASCADE,
    document_id   bigint NOT NULL REFERENCES kb.document (id) ON DELETE CASCADE,
    node_id       text NOT NULL,
    chunk_id      bigint NOT NULL REFERENCES kb.chunk (id) ON DELETE CASCADE,
    parent_id     text,
    ordinal       integer NOT NULL,
    depth         integer NOT NULL,
    title         text NOT NULL,
    summary       text,
    summary_kind  text NOT NULL CHECK (summary_kind IN ('llm', 'own_text', 'lead_text', 'none')),
    page_start    integer,
    page_end      integer,
    section_end   integer NOT NULL,
    PRIMARY KEY (index_id, document_id, node_id)
);
CREATE INDEX page_index_node_chunk_idx ON kb.page_index_node (chunk_id);
CREATE INDEX page_index_node_document_idx ON kb.page_index_node (document_id);
COMMENT ON TABLE kb.page_index_node IS
  'PageIndex section nodes: stable node_id (from the title path), parent, depth, summary '
  '(summary_kind says whether an LLM wrote it or it is the section''s own or lead text) and '
  'page range; the text is the chunk''s (kb.page_index_nodes joins them).';

CREATE TABLE kb.page_index_toc (
    index_id         bigint NOT NULL REFERENCES kb.kb_index (id) ON DELETE CASCADE,
    document_id      bigint NOT NULL REFERENCES kb.document (id) ON DELETE CASCADE,
    description      text,
    description_kind text NOT NULL CHECK (description_kind IN ('llm', 'lead_text', 'none')),
    toc              jsonb NOT NULL,
    node_count       integer NOT NULL,
    -- Where the tree came from: markdown_headings, or for a PDF outline, printed_toc (with
    -- its pages and the printed-to-physical page offset), layout or none.
    structure        text NOT NULL DEFAULT 'markdown_headings',
    structure_detail jsonb NOT NULL DEFAULT '{}',
    PRIMARY KEY (index_id, document_id)
);
CREATE INDEX page_index_toc_document_idx ON kb.page_index_toc (document_id);
COMMENT ON TABLE kb.page_index_toc IS
  'PageIndex''s lightweight table of contents per document: nested titles, node ids, '
  'summaries and page ranges, no text; plus the document description.';
