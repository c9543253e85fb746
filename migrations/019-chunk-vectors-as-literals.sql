-- A strategy hands each chunk's vector to SQL as pgvector's text form (kbpg_db.embedding.
-- vector_literal), which vector_in reads in C, instead of a real[] that PL/Python builds
-- float by float. A fresh database has no kb.chunk_payload yet: sql/000-python.sql
-- creates it with the text attribute.
DO $$
BEGIN
  IF EXISTS (SELECT 1 FROM pg_attribute
              WHERE attrelid = to_regclass('kb.chunk_payload') AND attname = 'embedding'
                AND atttypid = 'real[]'::regtype) THEN
    ALTER TYPE kb.chunk_payload ALTER ATTRIBUTE embedding TYPE text;
  END IF;
END
$$;
