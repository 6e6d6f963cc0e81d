-- issue 13: plan lifecycle (history, waiting, deadlines, approvals, decisions outbox).

-- name: order_history
-- Every decision about one order, in the order taken (its chain's positions); the notification of an
-- APPLY is the outbox row of its event.
SELECT d.seq, d.event_type, d.event_id, d.decision, d.code, d."check", d.message, d.at, d.plan_id, d.actor,
       o.id AS notification_id
FROM decision_log AS d
LEFT JOIN outbox AS o ON d.decision = 'APPLY' AND o.order_id = d.order_id AND o.event_id::text = d.event_id
WHERE d.order_id = $1
ORDER BY d.tenant_id, d.position;

-- name: plan_history
-- Every decision about the steps of one plan (its own REPLAN included), in the order taken.
SELECT d.order_id, d.seq, d.event_type, d.event_id, d.decision, d.code, d."check", d.message, d.at, d.actor,
       o.id AS notification_id
FROM decision_log AS d
LEFT JOIN outbox AS o ON d.decision = 'APPLY' AND o.order_id = d.order_id AND o.event_id::text = d.event_id
WHERE d.plan_id = $1
ORDER BY d.id;

-- name: order_history_after
-- The stream's next decisions: those after position $2 of the order's chain (the SSE event id).
SELECT d.position, d.seq, d.event_type, d.event_id, d.decision, d.code, d."check", d.message, d.at,
       o.id AS notification_id
FROM decision_log AS d
LEFT JOIN outbox AS o ON d.decision = 'APPLY' AND o.order_id = d.order_id AND o.event_id::text = d.event_id
WHERE d.order_id = $1 AND d.position > $2
ORDER BY d.position
LIMIT 500;

-- name: overdue_orders
-- Live plans past their deadline (the sweeper then aborts each through Gateway.submit, under its lock).
SELECT order_id, tenant_id, plan_id, last_seq FROM orders
WHERE deadline_at <= $1 AND status <> 'aborted' AND status <> 'completed'
ORDER BY deadline_at
LIMIT $2;
