-- Read models of the HTTP API and the CLI.

-- name: order
SELECT order_id, tenant_id, plan_id, status, last_seq, tombstone, outbox_count, created_at, updated_at
FROM orders WHERE tenant_id = $2 AND order_id = $1;

-- name: order_view
-- What GET /v1/orders/{id} and its long poll show of an order, in one round trip: always one row, the
-- order's columns NULL when there is no order yet, `buffered` NULL when nothing waits for its turn.
SELECT o.plan_id, o.status, o.last_seq, o.tombstone, o.outbox_count,
       b.buffered, b.buffered_plan_id
FROM (SELECT array_agg(seq_id ORDER BY seq_id) AS buffered, (array_agg(plan_id ORDER BY seq_id))[1] AS buffered_plan_id
      FROM pending_events WHERE tenant_id = $2 AND order_id = $1) b
LEFT JOIN orders o ON o.tenant_id = $2 AND o.order_id = $1;

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

-- name: gauges
-- One pass over the pending deliveries gives their count and the age of the oldest (0 when none).
SELECT
    (SELECT count(*) FROM pending_events) AS pending_events,
    pending.n AS outbox_pending,
    pending.oldest_s AS outbox_oldest_pending_s,
    (SELECT count(*) FROM deliveries WHERE state = 'dead') AS outbox_dead
FROM (
    SELECT count(*) AS n, coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8 AS oldest_s
    FROM deliveries WHERE state = 'pending'
) AS pending;

-- name: claim_redrive
-- Returns the payload only to the one caller whose claim row went in.
WITH claim AS (
    INSERT INTO dead_letter_redrives (dead_letter_id)
    SELECT id FROM dead_letters WHERE id = $1 AND ($2::text IS NULL OR tenant_id = $2)
    ON CONFLICT (dead_letter_id) DO NOTHING
    RETURNING dead_letter_id, redriven_at
)
UPDATE dead_letters AS d SET redriven_at = claim.redriven_at
FROM claim WHERE d.id = claim.dead_letter_id
RETURNING d.id, d.payload, d.tenant_id;

-- name: withdraw_redrive
WITH gone AS (DELETE FROM dead_letter_redrives WHERE dead_letter_id = $1 AND decision IS NULL RETURNING dead_letter_id)
UPDATE dead_letters AS d SET redriven_at = NULL FROM gone WHERE d.id = gone.dead_letter_id;

-- name: record_redrive
UPDATE dead_letter_redrives SET decision = $2, new_dead_letter_id = $3 WHERE dead_letter_id = $1;
