-- Where a chunk's text sits on its pages: kb.chunk.origin holds its boxes (PDF points, per
-- page) and OCR's confidence where OCR read it, from the regions a PDF's or an image's
-- conversion records. kb.put_document takes those regions from a client that converts a
-- PDF itself (kbpg ingest); sql/ recreates it with the new argument, and the nine-argument
-- signature goes so that a call with nine arguments is not ambiguous.
ALTER TABLE kb.chunk ADD COLUMN IF NOT EXISTS origin jsonb;
DROP FUNCTION IF EXISTS kb.put_document(text, text, text, jsonb, text, text, integer[], bytea, text);
