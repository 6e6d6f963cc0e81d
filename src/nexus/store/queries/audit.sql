-- the decision log (writes in Gateway.submit's transaction), checkpoints, verification, report.

-- name: read_heads
-- The last (position, hash) of each chain; the caller holds each order's advisory lock.
-- (nexus_chain_heads, migration 0031: also gateway.sql read_batch's 'head' rows).
SELECT tenant_id, order_id, position, hash FROM nexus_chain_heads($1::text[], $2::text[]);

-- name: insert_records
-- $1: the records as one JSON array of rows (audit.log.Records: a row's columns in the order below, the
-- hashes in hex), all at $2; actor_name (the last): beside the record, outside its hash. gateway.sql
-- `write_batch` inserts the same rows in its own statement (one round trip per batch); a shared SQL
-- function would cost a plan per call.
INSERT INTO decision_log (tenant_id, order_id, position, at, actor, event_id, plan_id, seq, event_type,
                          decision, code, "check", message, prev_hash, hash, actor_name)
SELECT r->>0, r->>1, (r->>2)::int, $2::timestamptz, r->>3, r->>4, r->>5, (r->>6)::int, r->>7, r->>8, r->>9,
       r->>10, r->>11, decode(r->>12, 'hex'), decode(r->>13, 'hex'), r->>14
FROM jsonb_array_elements($1::jsonb) WITH ORDINALITY AS u(r, n)
ORDER BY n;

-- name: records
-- In storage order; $1: one order only (NULL: all).
SELECT id, tenant_id, order_id, position, at, actor, event_id, plan_id, seq, event_type, decision, code,
       "check", message, prev_hash, hash
FROM decision_log
WHERE $1::text IS NULL OR order_id = $1
ORDER BY id;

-- name: last_checkpoint
SELECT id, digest, snapshot::text AS snapshot FROM audit_checkpoints ORDER BY id DESC LIMIT 1;

-- name: current_snapshot
SELECT pg_current_snapshot()::text AS snapshot, now() AS at;

-- name: changed_heads
-- Heads of the chains written by transactions the previous checkpoint's snapshot ($1) could not see
-- (NULL: every chain). Runs in the same REPEATABLE READ snapshot as current_snapshot.
SELECT DISTINCT ON (order_id, tenant_id) tenant_id, order_id, position, hash
FROM decision_log
WHERE $1::text::pg_snapshot IS NULL
   OR (txid >= pg_snapshot_xmin($1::text::pg_snapshot) AND NOT pg_visible_in_snapshot(txid, $1::text::pg_snapshot))
ORDER BY order_id, tenant_id, position DESC;

-- name: insert_checkpoint
INSERT INTO audit_checkpoints (at, snapshot, prev_digest, heads, digest, signature, key_id, public_key)
VALUES ($1, $2::text::pg_snapshot, $3, $4::jsonb, $5, $6, $7, $8)
RETURNING id;

-- name: checkpoints
SELECT id, at, prev_digest, heads::text AS heads, digest, signature, key_id, public_key
FROM audit_checkpoints ORDER BY id;

-- name: blocked
-- The blocked-actions report: REJECTED decisions, newest first; $6 a keyset cursor (the last id seen).
-- Its filters ($1-$5) are migration 0018's nexus_rejected_decisions, shared with `blocked_summary`.
SELECT id, at, tenant_id, order_id, plan_id, seq, event_type, event_id, code, "check", message, actor,
       actor_name
FROM nexus_rejected_decisions($1::text, $2::text, $3::text, $4::text, $5::timestamptz)
WHERE $6::bigint IS NULL OR id < $6
ORDER BY id DESC
LIMIT $7 OFFSET $8;

-- name: blocked_summary
-- Counts of REJECTED decisions by one dimension at a time (grouping sets), same filters as `blocked`.
SELECT code, "check", event_type, actor, GROUPING(code, "check", event_type, actor) AS g, count(*) AS n
FROM nexus_rejected_decisions($1::text, $2::text, $3::text, $4::text, $5::timestamptz)
GROUP BY GROUPING SETS ((code), ("check"), (event_type), (actor), ())
ORDER BY n DESC;
