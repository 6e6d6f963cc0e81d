-- Read models of the HTTP API and the CLI.

-- name: order
SELECT order_id, tenant_id, plan_id, status, last_seq, tombstone, outbox_count, created_at, updated_at
FROM orders WHERE tenant_id = $2 AND order_id = $1;

-- name: order_buffered
SELECT seq_id, plan_id FROM pending_events WHERE tenant_id = $2 AND order_id = $1 ORDER BY seq_id;

-- name: plan_orders
-- $2: a tenant, or NULL for a caller spanning every tenant.
SELECT o.tenant_id, o.order_id, o.plan_id, o.status, o.last_seq, o.tombstone, o.outbox_count,
       coalesce((SELECT array_agg(p.seq_id ORDER BY p.seq_id) FROM pending_events p
                 WHERE p.tenant_id = o.tenant_id AND p.order_id = o.order_id), '{}') AS buffered
FROM orders o WHERE o.plan_id = $1 AND ($2::text IS NULL OR o.tenant_id = $2)
ORDER BY o.tenant_id, o.order_id;

-- name: dead_letters
SELECT id, source, code, error, event_id, order_id, plan_id, payload, created_at, redriven_at, tenant_id
FROM dead_letters
WHERE ($1::text IS NULL OR code = $1) AND ($2::text IS NULL OR source = $2)
  AND ($3::boolean OR redriven_at IS NULL) AND ($6::text IS NULL OR tenant_id = $6)
ORDER BY id
LIMIT $4 OFFSET $5;

-- name: dead_letter
SELECT id, source, code, error, event_id, order_id, plan_id, payload, created_at, redriven_at, tenant_id
FROM dead_letters WHERE id = $1 AND ($2::text IS NULL OR tenant_id = $2);

-- name: mark_redriven
UPDATE dead_letters SET redriven_at = now() WHERE id = $1;

-- name: gauges
SELECT
    (SELECT count(*) FROM pending_events) AS pending_events,
    (SELECT count(*) FROM deliveries WHERE state = 'pending') AS outbox_pending,
    (SELECT count(*) FROM deliveries WHERE state = 'dead') AS outbox_dead;
