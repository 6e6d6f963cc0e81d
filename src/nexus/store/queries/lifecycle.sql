-- plan lifecycle (history, waiting, deadlines, approvals, decisions outbox).

-- name: order_history
-- Every decision about one order ($1 tenant, $2 order_id), in the order taken (its chain's positions); the
-- notification of an APPLY is the outbox row of its event.
SELECT d.seq, d.event_type, d.event_id, d.decision, d.code, d."check", d.message, d.at, d.plan_id, d.actor, d.actor_name,
       o.id AS notification_id
FROM decision_log AS d
LEFT JOIN outbox AS o ON d.decision = 'APPLY' AND o.tenant_id = d.tenant_id AND o.order_id = d.order_id
                     AND o.event_id::text = d.event_id
WHERE d.tenant_id = $1 AND d.order_id = $2
ORDER BY d.position;

-- name: plan_history
-- Every decision about the steps of one plan (its own REPLAN included), in the order taken; $2: the
-- caller's tenant (NULL: a key spanning every tenant).
SELECT d.order_id, d.seq, d.event_type, d.event_id, d.decision, d.code, d."check", d.message, d.at, d.actor, d.actor_name,
       o.id AS notification_id
FROM decision_log AS d
LEFT JOIN outbox AS o ON d.decision = 'APPLY' AND o.tenant_id = d.tenant_id AND o.order_id = d.order_id
                     AND o.event_id::text = d.event_id
WHERE d.plan_id = $1 AND ($2::text IS NULL OR d.tenant_id = $2)
ORDER BY d.id;

-- name: order_history_after
-- The stream's next decisions: those after position $3 of the order's chain (the SSE event id).
SELECT d.position, d.seq, d.event_type, d.event_id, d.decision, d.code, d."check", d.message, d.at,
       d.actor, d.actor_name, o.id AS notification_id
FROM decision_log AS d
LEFT JOIN outbox AS o ON d.decision = 'APPLY' AND o.tenant_id = d.tenant_id AND o.order_id = d.order_id
                     AND o.event_id::text = d.event_id
WHERE d.tenant_id = $1 AND d.order_id = $2 AND d.position > $3
ORDER BY d.position
LIMIT 500;

-- name: overdue_orders
-- Live plans past their deadline (the sweeper then aborts each through Gateway.submit, under its lock).
-- A saga's completed pivot clears its order's deadline (core/sequencing), so such orders are not here.
SELECT order_id, tenant_id, plan_id, last_seq FROM orders
WHERE deadline_at <= $1 AND status <> 'aborted' AND status <> 'completed'
ORDER BY deadline_at
LIMIT $2;

-- name: unstarted_overdue_plans
-- Plans started with no step yet (no order row, nothing buffered) whose implicit deadline passed: $2 seconds
-- after their start (NEXUS_PLAN_START_TIMEOUT_S), or their own deadline if sooner. $1: now; $3: how many.
SELECT p.order_id, p.tenant_id, p.plan_id, p.process
FROM plans AS p
WHERE (p.created_at <= $1::timestamptz - make_interval(secs => $2::float8) OR p.deadline_at <= $1::timestamptz)
  AND NOT EXISTS (SELECT 1 FROM orders AS o WHERE o.tenant_id = p.tenant_id AND o.order_id = p.order_id)
  AND NOT EXISTS (SELECT 1 FROM pending_events AS e WHERE e.tenant_id = p.tenant_id AND e.order_id = p.order_id)
ORDER BY p.created_at
LIMIT $3;

-- name: unstarted_deadlines
-- Under the orders' locks, for the deadline sweeper's aborts: each unstarted plan's implicit deadline (as in
-- unstarted_overdue_plans) and process. $1, $2: tenants and order ids (pairs); $3: the start timeout (s).
SELECT p.tenant_id, p.order_id, p.process,
       least(p.deadline_at, p.created_at + make_interval(secs => $3::float8)) AS deadline_at
FROM plans AS p JOIN unnest($1::text[], $2::text[]) AS u(t, oid) ON p.tenant_id = u.t AND p.order_id = u.oid
WHERE NOT EXISTS (SELECT 1 FROM orders AS o WHERE o.tenant_id = p.tenant_id AND o.order_id = p.order_id)
  AND NOT EXISTS (SELECT 1 FROM pending_events AS e WHERE e.tenant_id = p.tenant_id AND e.order_id = p.order_id);

-- name: insert_approvals
INSERT INTO approvals (approval_id, tenant_id, order_id, event_id, plan_id, seq_id, event_type, envelope,
                       traceparent, expires_at, process_version)
SELECT approval_id, tenant_id, order_id, event_id, plan_id, seq_id, event_type, envelope::jsonb, traceparent,
       CASE WHEN expires_s IS NULL THEN NULL ELSE now() + make_interval(secs => expires_s) END, process_version
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::uuid[], $5::text[], $6::int[], $7::text[], $8::text[],
            $9::text[], $10::float8[], $11::int[])
    AS u(approval_id, tenant_id, order_id, event_id, plan_id, seq_id, event_type, envelope, traceparent, expires_s,
         process_version)
ON CONFLICT (approval_id) DO NOTHING;

-- name: cancel_approvals
-- Held steps dropped by an abort or a REPLAN (the fold's `cancelled_approvals`): no longer anyone's to approve
-- (ids derive from tenant+event). $2 the status they take, $3 by whom, each only if still $4 (pending).
UPDATE approvals SET status = $2, decided_at = now(), decided_by = $3
WHERE approval_id = ANY($1::uuid[]) AND status = $4;

-- name: decide_approval
-- Under the order's advisory lock: the one pending approval becomes approved/denied/expired, once.
UPDATE approvals SET status = $2, decided_at = now(), decided_by = $3
WHERE approval_id = $1 AND status = 'pending'
RETURNING approval_id;

-- name: approval
SELECT approval_id, tenant_id, order_id, event_id, plan_id, seq_id, event_type, envelope::text AS envelope,
       traceparent, status, created_at, expires_at, decided_at, decided_by, process_version
FROM approvals WHERE approval_id = $1;

-- name: pending_approvals
-- $1: the caller's tenant (NULL: every tenant).
SELECT approval_id, tenant_id, order_id, event_id, plan_id, seq_id, event_type, envelope::text AS envelope,
       traceparent, status, created_at, expires_at, decided_at, decided_by, process_version
FROM approvals
WHERE status = 'pending' AND ($1::text IS NULL OR tenant_id = $1)
ORDER BY created_at, approval_id
LIMIT $2;

-- name: expired_approvals
SELECT approval_id FROM approvals
WHERE status = 'pending' AND expires_at <= now()
ORDER BY expires_at
LIMIT $1;

-- name: relay_lock
-- One relay at a time (any number of gateways): records leave in id order, so per order in decision order.
SELECT pg_try_advisory_xact_lock(hashtextextended('nexus.decisions_outbox', 0));

-- name: relay_claim
SELECT id, tenant_id, order_id, value::text AS value, traceparent FROM decisions_outbox ORDER BY id LIMIT $1;

-- name: relay_done
DELETE FROM decisions_outbox WHERE id = ANY($1::bigint[]);
