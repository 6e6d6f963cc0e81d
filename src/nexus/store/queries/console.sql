-- read models of the web console (/console). $1 is always the viewer's tenant, or NULL for a key
-- spanning every tenant.

-- name: orders
-- One page of orders, newest first (keyset: $6/$7/$8 = created_at, tenant and id of the previous page's last
-- row); filters may be NULL. $5 finds an order by id (exact or prefix) or by its plan id.
SELECT tenant_id, order_id, plan_id, status, last_seq, process, process_version, outbox_count, created_at,
       updated_at
FROM orders
WHERE ($1::text IS NULL OR tenant_id = $1)
  AND ($2::text IS NULL OR status = $2)
  AND ($3::text IS NULL OR tenant_id = $3)
  AND ($4::text IS NULL OR process = $4)
  AND ($5::text IS NULL OR starts_with(order_id, $5) OR plan_id = $5)
  AND ($6::timestamptz IS NULL OR (created_at, tenant_id, order_id) < ($6, $7, $8))
  AND NOT tombstone
ORDER BY created_at DESC, tenant_id DESC, order_id DESC
LIMIT $9;

-- name: order
SELECT tenant_id, order_id, plan_id, status, last_seq, process, process_version, outbox_count, facts,
       created_at, updated_at
FROM orders WHERE ($1::text IS NULL OR tenant_id = $1) AND tenant_id = $2 AND order_id = $3;

-- name: timeline
-- Every decision about the order, in the order they were taken (the hash chain's positions).
SELECT position, at, actor, actor_name, event_id, plan_id, seq, event_type, decision, code, "check", message
FROM decision_log WHERE order_id = $2 AND tenant_id = $1 ORDER BY position;

-- name: buffered
SELECT seq_id, event_id, received_at, traceparent FROM pending_events
WHERE tenant_id = $1 AND order_id = $2 ORDER BY seq_id;

-- name: notifications
-- Each notification with its delivery to each subscriber (attempts so far, the last answer).
SELECT o.id AS outbox_id, o.position, o.event_type, o.seq_id, o.traceparent, o.created_at,
       d.subscription_id, s.name AS subscription, d.state, d.attempts, d.last_status, d.last_error,
       d.next_attempt_at, d.delivered_at, d.dead_at, d.dead_reason
FROM outbox o
LEFT JOIN deliveries d ON d.outbox_id = o.id
LEFT JOIN subscriptions s ON s.id = d.subscription_id
WHERE o.tenant_id = $1 AND o.order_id = $2
ORDER BY o.position, s.name;

-- name: tenants
SELECT DISTINCT tenant_id FROM api_keys WHERE tenant_id IS NOT NULL
UNION SELECT 'default' ORDER BY 1;

-- name: attempts
-- every recorded delivery attempt of the order's notifications (migration 0010), per
-- notification and subscriber in the order they were made.
SELECT outbox_id, subscription_id, attempt, at, outcome, status, error_class, duration_ms
FROM delivery_attempts WHERE tenant_id = $1 AND order_id = $2
ORDER BY outbox_id, subscription_id, at, id;

-- name: saga
-- the order's saga, if its process has effects.
SELECT status, error, created_at, updated_at FROM sagas WHERE tenant_id = $1 AND order_id = $2;

-- name: saga_steps
-- each step with an effect: its forward call and its compensation.
SELECT seq, step_name, service, status, pivot, compensable, uncertain, forward_path, compensation_path,
       attempts, compensation_attempts, last_error, executed_at, compensated_at, traceparent
FROM saga_steps WHERE tenant_id = $1 AND order_id = $2 ORDER BY seq;
