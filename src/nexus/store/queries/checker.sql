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
SELECT
  (SELECT coalesce(sum(outbox_count), 0) FROM orders WHERE order_id = ANY($1::text[])) AS notifications,
  (SELECT count(*) FROM deliveries WHERE order_id = ANY($1::text[]) AND state = 'pending') AS pending;

-- name: rejected
-- issue 12: the blocked steps of the report's orders, with the code they were refused for.
SELECT event_id::text AS event_id, code FROM rejected_events WHERE order_id = ANY($1::text[]);
