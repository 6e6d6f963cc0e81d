-- The database's own statistics and replication state (`nexus db`, /metrics, /readyz).

-- name: table_stats
-- Approximate rows (the planner's estimate, kept by autovacuum and ANALYZE: no table is scanned) and bytes
-- (heap, indexes and TOAST) of every table of the gateway's schema. A table never analysed reads -1 rows
-- before PostgreSQL 14's convention; it is reported as 0.
SELECT c.relname AS table_name,
       greatest(c.reltuples, 0)::bigint AS approx_rows,
       pg_total_relation_size(c.oid) AS total_bytes
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p') AND n.nspname = current_schema()
ORDER BY c.relname;

-- name: sync_standby_streaming
-- Whether the standby named $1 is connected and acknowledged as synchronous (or a candidate for it).
SELECT EXISTS (
    SELECT 1 FROM pg_stat_replication
    WHERE application_name = $1 AND state = 'streaming' AND sync_state IN ('sync', 'quorum', 'potential')
);

-- name: replication
SELECT application_name, state, sync_state, replay_lag FROM pg_stat_replication ORDER BY application_name;

-- name: backend_process
-- This connection's backend process and the server's data directory (the heavy lanes' renice,
-- nexus.store.lanes; reading data_directory needs a superuser or pg_read_all_settings, else it raises).
SELECT pg_backend_pid() AS pid, current_setting('data_directory') AS data_directory;
