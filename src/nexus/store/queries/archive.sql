-- Trimming the decision log into archive segments (nexus.audit.archive) and reading its anchors back
-- (migration 0025). The trim runs in one transaction per pass, with `nexus.remover` set (migration 0021).

-- name: trim_lock
-- One trim at a time, whatever the number of processes: a later pass does the rest.
SELECT pg_try_advisory_xact_lock(1852143725);

-- name: removed_chains
-- Chains whose order row is absent and whose last record is older than $1 (an order leaves after the retention
-- period; a chain newer than that may belong to an order not created yet, e.g. a buffered first step), whose last
-- record a checkpoint signed (the segment that keeps it must be verifiable alone); at most $2.
WITH signed AS (
    SELECT e->>0 AS tenant_id, e->>1 AS order_id, (e->>2)::int AS position, decode(e->>3, 'hex') AS hash
    FROM audit_checkpoints AS c, jsonb_array_elements(c.heads) AS e
), heads AS (
    SELECT DISTINCT ON (d.order_id, d.tenant_id) d.tenant_id, d.order_id, d.position, d.hash, d.at
    FROM decision_log AS d
    WHERE d.order_id <> '~ingress'
    ORDER BY d.order_id, d.tenant_id, d.position DESC
)
SELECT h.tenant_id, h.order_id, h.position, h.hash
FROM heads AS h
WHERE h.at < $1
  AND NOT EXISTS (SELECT 1 FROM orders AS o WHERE o.order_id = h.order_id AND o.tenant_id = h.tenant_id)
  AND EXISTS (SELECT 1 FROM signed AS s WHERE s.tenant_id = h.tenant_id AND s.order_id = h.order_id
              AND s.position = h.position AND s.hash = h.hash)
ORDER BY h.tenant_id, h.order_id
LIMIT $2;

-- name: ingress_signed
-- The positions of each `~ingress` chain that a checkpoint signed, whose record is older than $1 and followed by
-- another: where a trim by age may cut it (the last record stays: the chain's next position is read from it).
SELECT DISTINCT d.tenant_id, d.order_id, d.position, d.hash
FROM audit_checkpoints AS c
CROSS JOIN LATERAL jsonb_array_elements(c.heads) AS e
JOIN decision_log AS d
  ON d.order_id = e->>1 AND d.tenant_id = e->>0 AND d.position = (e->>2)::int AND d.hash = decode(e->>3, 'hex')
WHERE e->>1 = '~ingress' AND d.at < $1
  AND EXISTS (SELECT 1 FROM decision_log AS n
              WHERE n.order_id = d.order_id AND n.tenant_id = d.tenant_id AND n.position = d.position + 1)
ORDER BY d.tenant_id, d.position;

-- name: chain_records
-- The records of each chain ($1 tenants, $2 orders) up to a position ($3), in storage order.
SELECT d.id, d.tenant_id, d.order_id, d.position, d.at, d.actor, d.event_id, d.plan_id, d.seq, d.event_type,
       d.decision, d.code, d."check", d.message, d.prev_hash, d.hash
FROM unnest($1::text[], $2::text[], $3::int[]) AS u(tenant_id, order_id, upto)
JOIN decision_log AS d ON d.order_id = u.order_id AND d.tenant_id = u.tenant_id AND d.position <= u.upto
ORDER BY d.id;

-- name: delete_chain_records
DELETE FROM decision_log AS d
USING unnest($1::text[], $2::text[], $3::int[]) AS u(tenant_id, order_id, upto)
WHERE d.order_id = u.order_id AND d.tenant_id = u.tenant_id AND d.position <= u.upto;

-- name: records_before
-- `nexus audit export --before`: of each chain (of tenant $2; NULL: every tenant), the records up to the last one
-- recorded before $1, in storage order.
SELECT d.id, d.tenant_id, d.order_id, d.position, d.at, d.actor, d.event_id, d.plan_id, d.seq, d.event_type,
       d.decision, d.code, d."check", d.message, d.prev_hash, d.hash
FROM decision_log AS d
JOIN (
    SELECT tenant_id, order_id, max(position) AS upto FROM decision_log
    WHERE at < $1 AND ($2::text IS NULL OR tenant_id = $2)
    GROUP BY order_id, tenant_id
) AS u ON d.order_id = u.order_id AND d.tenant_id = u.tenant_id AND d.position <= u.upto
ORDER BY d.id;

-- name: chain_anchors
SELECT id, tenant_id, order_id, position, prev_hash, archive, whole
FROM audit_anchors WHERE kind = 'chain' ORDER BY id;

-- name: checkpoint_anchor
-- The latest: where the retained checkpoints start.
SELECT id, prev_digest, archive FROM audit_anchors WHERE kind = 'checkpoints' ORDER BY id DESC LIMIT 1;

-- name: insert_chain_anchors
INSERT INTO audit_anchors (kind, tenant_id, order_id, position, prev_hash, whole, archive)
SELECT 'chain', u.tenant_id, u.order_id, u.position, u.prev_hash, u.whole, u.archive
FROM unnest($1::text[], $2::text[], $3::int[], $4::bytea[], $5::bool[], $6::text[])
     AS u(tenant_id, order_id, position, prev_hash, whole, archive);

-- name: insert_checkpoint_anchor
INSERT INTO audit_anchors (kind, prev_digest, archive) VALUES ('checkpoints', $1, $2) RETURNING id;

-- name: delete_checkpoints
-- The oldest checkpoints, up to id $1.
DELETE FROM audit_checkpoints WHERE id <= $1;

-- name: delete_anchors
-- Anchors no retained row needs: $1 ids, and the checkpoint anchors older than $2 (NULL: none).
DELETE FROM audit_anchors WHERE id = ANY($1::bigint[]) OR (kind = 'checkpoints' AND id < $2);
