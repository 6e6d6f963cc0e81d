-- Read-only queries of `nexus check`: what PostgreSQL says about the orders of an agent report.

-- name: orders
SELECT order_id, plan_id, status, last_seq, outbox_count, tombstone FROM orders WHERE order_id = ANY($1::text[]);

-- name: outbox
SELECT id, order_id, position, event_id, event_type, seq_id, plan_id
FROM outbox WHERE order_id = ANY($1::text[]) ORDER BY order_id, position;

-- name: deliveries
SELECT d.outbox_id, d.subscription_id, d.order_id, d.position, d.state, d.attempts
FROM deliveries d WHERE d.order_id = ANY($1::text[]);

-- name: pending_events
SELECT order_id, seq_id FROM pending_events WHERE order_id = ANY($1::text[]);

-- name: dead_letters
SELECT event_id, code FROM dead_letters WHERE event_id = ANY($1::text[]);

-- name: settled
-- (a removed order's notifications and pending deliveries are its marker's)
SELECT
  (SELECT coalesce(sum(outbox_count), 0) FROM orders WHERE order_id = ANY($1::text[]))
  + (SELECT coalesce(sum(notifications), 0) FROM removed_orders WHERE order_id = ANY($1::text[])) AS notifications,
  (SELECT count(*) FROM deliveries WHERE order_id = ANY($1::text[]) AND state = 'pending')
  + (SELECT coalesce(sum(pending), 0) FROM removed_orders WHERE order_id = ANY($1::text[])) AS pending;

-- name: removed
-- The removal markers of the report's orders removed after their retention period (nexus.retention): what
-- the checker proves them by once their rows have left.
SELECT tenant_id, order_id, plan_id, final_status AS status, last_seq, notifications AS outbox_count, tombstone,
       delivery_state, delivered, dead, pending
FROM removed_orders WHERE order_id = ANY($1::text[]);

-- name: rejected
-- the blocked steps of the report's orders, with the code they were refused for.
SELECT event_id::text AS event_id, code FROM rejected_events WHERE order_id = ANY($1::text[]);

-- name: lifecycle
-- how the report's plans ended beyond the agent's own steps: replaced (REPLAN), aborted by their
-- deadline, held for approval (still pending), denied (by a person or by expiry).
SELECT
  (SELECT count(*) FROM orders WHERE order_id = ANY($1::text[]) AND cardinality(superseded_plans) > 0) AS superseded,
  (SELECT count(*) FROM outbox WHERE order_id = ANY($1::text[]) AND event_type = 'ABORT_PLAN'
      AND payload->'event'->'data'->>'abort_code' = 'timeout') AS timed_out,
  (SELECT count(*) FROM approvals WHERE order_id = ANY($1::text[]) AND status = 'pending') AS held,
  (SELECT count(*) FROM approvals WHERE order_id = ANY($1::text[]) AND status IN ('denied', 'expired')) AS denied,
  (SELECT count(*) FROM approvals WHERE order_id = ANY($1::text[]) AND status = 'approved') AS approved;

-- name: approvals
-- every approval of the report's orders (the agent's held payments), with how it ended.
SELECT order_id, event_id::text AS event_id, status, decided_by
FROM approvals
WHERE order_id = ANY($1::text[])
ORDER BY order_id, created_at;
