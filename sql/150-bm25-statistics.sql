-- Exact BM25 corpus statistics, maintained by triggers on kb.chunk.
--
-- Inserting chunks adds their postings, their lexemes' document frequencies and the
-- index's chunk count and total length; deleting chunks (directly, through a document
-- or KB delete, or a replacement) takes them away again. All statistics writes of one
-- index are serialised by a transaction-level advisory lock, so concurrent workers can
-- never deadlock on the shared term_stat rows; the lock is held only for the short
-- write phase of a job (chunking and embedding happen before it). The triggers loop over the
-- KBs in the statement's transition table (one, for a job's chunks) so that each statement
-- reads and writes one KB's rows (docs/operations.md, "Beyond one machine").

CREATE OR REPLACE FUNCTION kb._lock_index_stats(p_index_ids bigint[]) RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_id bigint;
BEGIN
  FOR v_id IN SELECT DISTINCT i FROM unnest(p_index_ids) AS i ORDER BY 1 LOOP
    PERFORM pg_advisory_xact_lock(1801, v_id::integer);
  END LOOP;
END
$$;
COMMENT ON FUNCTION kb._lock_index_stats(bigint[]) IS
  'Internal: serialises BM25 statistics writes per index (advisory locks, in id order).';

CREATE OR REPLACE FUNCTION kb._chunk_after_insert() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_kb integer;
BEGIN
  PERFORM kb._lock_index_stats(ARRAY(SELECT DISTINCT index_id FROM new_chunks));
  FOR v_kb IN SELECT DISTINCT kb_id FROM new_chunks LOOP
    -- tf counts a heading word (weight A, kb.chunk_tsvector) heading_weight times, as
    -- doc_len (kb.tsvector_length) does.
    -- The weight is read once per generation (MATERIALIZED), not once per posting.
    WITH i AS MATERIALIZED (
      SELECT ix.id, kb._heading_weight(ix.indexing_config) AS hw
        FROM kb.kb_index ix WHERE ix.kb_id = v_kb
    )
    INSERT INTO kb.posting (index_id, lexeme, chunk_id, kb_id, tf, dl)
    SELECT n.index_id, u.lexeme, n.id, n.kb_id,
           coalesce(array_length(u.positions, 1), 1)
           + (i.hw - 1) * coalesce(cardinality(array_positions(u.weights, 'A')), 0),
           n.doc_len
    FROM new_chunks n
    JOIN i ON i.id = n.index_id,
    unnest(n.tsv) u
    WHERE n.kb_id = v_kb;
    INSERT INTO kb.term_stat AS t (index_id, lexeme, kb_id, df)
    SELECT n.index_id, u.lexeme, n.kb_id, count(*)
    FROM new_chunks n, unnest(n.tsv) u
    WHERE n.kb_id = v_kb
    GROUP BY 1, 2, 3 ORDER BY 1, 2
    ON CONFLICT (index_id, lexeme, kb_id) DO UPDATE SET df = t.df + EXCLUDED.df;
    UPDATE kb.kb_index i
       SET n_chunks = i.n_chunks + s.n, total_len = i.total_len + s.len
      FROM (SELECT index_id, count(*) AS n, sum(doc_len) AS len FROM new_chunks
             WHERE kb_id = v_kb GROUP BY 1) s
     WHERE i.kb_id = v_kb AND i.id = s.index_id;
  END LOOP;
  RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION kb._chunk_after_delete() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_kb   integer;
  v_live bigint[];
BEGIN
  -- Statistics are kept for the generations that stay: not for one being dropped (its
  -- kb_index row is gone, and its postings and statistics with it) nor a
  -- failed one (kb._clear_index). Only kbpg's own code deletes chunks (the worker, or a
  -- cascade from a document or generation), and this trigger runs as the tables' owner
  -- either way; kb._kb_index_guard keeps other roles from marking a generation failed.
  v_live := ARRAY(SELECT DISTINCT o.index_id FROM old_chunks o
                   WHERE EXISTS (SELECT 1 FROM kb.kb_index i
                                  WHERE i.kb_id = o.kb_id AND i.id = o.index_id
                                    AND i.status <> 'failed'));
  IF cardinality(v_live) = 0 THEN
    RETURN NULL;
  END IF;
  PERFORM kb._lock_index_stats(v_live);
  FOR v_kb IN SELECT DISTINCT kb_id FROM old_chunks WHERE index_id = ANY (v_live) LOOP
    DELETE FROM kb.posting p USING old_chunks o
     WHERE p.kb_id = v_kb AND o.kb_id = v_kb AND p.chunk_id = o.id
       AND o.index_id = ANY (v_live);
    UPDATE kb.term_stat t
       SET df = t.df - s.n
      FROM (SELECT o.index_id, u.lexeme, count(*) AS n
              FROM old_chunks o, unnest(o.tsv) u
             WHERE o.kb_id = v_kb AND o.index_id = ANY (v_live) GROUP BY 1, 2) s
     WHERE t.kb_id = v_kb AND t.index_id = s.index_id AND t.lexeme = s.lexeme;
    DELETE FROM kb.term_stat t
     USING (SELECT DISTINCT o.index_id, u.lexeme
              FROM old_chunks o, unnest(o.tsv) u
             WHERE o.kb_id = v_kb AND o.index_id = ANY (v_live)) s
     WHERE t.kb_id = v_kb AND t.index_id = s.index_id AND t.lexeme = s.lexeme AND t.df <= 0;
    UPDATE kb.kb_index i
       SET n_chunks = i.n_chunks - s.n, total_len = i.total_len - s.len
      FROM (SELECT index_id, count(*) AS n, sum(doc_len) AS len FROM old_chunks
             WHERE kb_id = v_kb AND index_id = ANY (v_live) GROUP BY 1) s
     WHERE i.kb_id = v_kb AND i.id = s.index_id;
  END LOOP;
  RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION kb._chunk_no_update() RETURNS trigger
LANGUAGE plpgsql
SET search_path = kb, pg_catalog, pg_temp
AS $$
BEGIN
  IF NEW.tsv IS DISTINCT FROM OLD.tsv OR NEW.doc_len IS DISTINCT FROM OLD.doc_len
     OR NEW.index_id IS DISTINCT FROM OLD.index_id THEN
    RAISE EXCEPTION 'chunk % : tsv, doc_len and index_id are maintained by kbpg', OLD.id
      USING ERRCODE = 'invalid_parameter_value',
            HINT = 'reindex the document instead (kb.reindex_document)';
  END IF;
  RETURN NEW;
END
$$;

-- Postings and statistics have no foreign keys (they are scanned by index prefix and
-- written in bulk): a generation's go with its kb_index row here, however the row goes
-- (kb.drop_knowledge_base, a DELETE FROM kb.knowledge_base, a failed build's cleanup).
CREATE OR REPLACE FUNCTION kb._kb_index_after_delete() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = kb, pg_catalog, pg_temp
AS $$
BEGIN
  DELETE FROM kb.posting WHERE kb_id = OLD.kb_id AND index_id = OLD.id;
  DELETE FROM kb.term_stat WHERE kb_id = OLD.kb_id AND index_id = OLD.id;
  RETURN NULL;
END
$$;
COMMENT ON FUNCTION kb._kb_index_after_delete() IS
  'Internal (trigger on kb.kb_index): a generation''s BM25 postings and statistics go with it.';
CREATE OR REPLACE TRIGGER kb_index_after_delete AFTER DELETE ON kb.kb_index
  FOR EACH ROW EXECUTE FUNCTION kb._kb_index_after_delete();

CREATE OR REPLACE TRIGGER chunk_after_insert AFTER INSERT ON kb.chunk
  REFERENCING NEW TABLE AS new_chunks
  FOR EACH STATEMENT EXECUTE FUNCTION kb._chunk_after_insert();
CREATE OR REPLACE TRIGGER chunk_after_delete AFTER DELETE ON kb.chunk
  REFERENCING OLD TABLE AS old_chunks
  FOR EACH STATEMENT EXECUTE FUNCTION kb._chunk_after_delete();
CREATE OR REPLACE TRIGGER chunk_no_update BEFORE UPDATE ON kb.chunk
  FOR EACH ROW EXECUTE FUNCTION kb._chunk_no_update();
