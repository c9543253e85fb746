-- Checks on text arguments that every entry point shares.

CREATE OR REPLACE FUNCTION kb._blank(value text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = kb, pg_catalog, pg_temp
AS $$
  SELECT value IS NULL OR value !~ '\S'
$$;
COMMENT ON FUNCTION kb._blank(text) IS
  'Internal: whether a text is missing or holds nothing but white space (spaces, tabs, '
  'line breaks, form feeds): a name, title or document that says nothing.';
