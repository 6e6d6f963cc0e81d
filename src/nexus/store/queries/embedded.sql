-- name: configure_wal
-- A psql script, not a prepared statement: the embedded server's WAL settings (embedded.py `WAL_SETTINGS`, a
-- JSON object in psql's variable `wanted`) that it does not have yet, each set by ALTER SYSTEM (which runs
-- outside any transaction: psql's \gexec runs each row as a statement of its own), then a reload if any was.
WITH differing AS (
    SELECT key AS name, value
    FROM jsonb_each_text(:'wanted'::jsonb)
    WHERE current_setting(key) IS DISTINCT FROM value
)
SELECT format('ALTER SYSTEM SET %I = %L', name, value) FROM differing
UNION ALL
SELECT 'SELECT pg_reload_conf()' WHERE EXISTS (SELECT 1 FROM differing)
\gexec
