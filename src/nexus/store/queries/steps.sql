-- Server-numbered steps: plans and the first verdicts of numbered steps (nexus.plan_steps, ingress/steps_api).

-- name: orders_known
-- Under the orders' locks (Gateway.start_plans): what the tenant knows of each order, for the fold's decision
-- (core/decide/plan_start.py). $1 tenants, $2 order ids (pairs).
SELECT u.t AS tenant_id, u.o AS order_id,
       EXISTS (SELECT 1 FROM orders WHERE tenant_id = u.t AND order_id = u.o) AS "order",
       EXISTS (SELECT 1 FROM pending_events WHERE tenant_id = u.t AND order_id = u.o) AS buffered,
       EXISTS (SELECT 1 FROM plans WHERE tenant_id = u.t AND order_id = u.o) AS plan,
       EXISTS (SELECT 1 FROM removed_orders WHERE tenant_id = u.t AND order_id = u.o) AS removed
FROM unnest($1::text[], $2::text[]) AS u(t, o);

-- name: create_plan
-- Under the order's lock, once the fold decided the start (nothing known of the order).
INSERT INTO plans (tenant_id, order_id, plan_id, process, deadline_at, actor)
VALUES ($1, $2, $3, $4, $5, $6);

-- name: plan_of_order
-- The plan a step of the order follows: the started plan's row, or the order's (started by /v1/events).
SELECT p.plan_id AS started_plan, coalesce(o.process, p.process) AS process, p.deadline_at,
       o.plan_id AS order_plan, o.status, coalesce(o.last_seq, 0) AS last_seq
FROM (SELECT $1::text AS tenant_id, $2::text AS order_id) k
LEFT JOIN plans p ON p.tenant_id = k.tenant_id AND p.order_id = k.order_id
LEFT JOIN orders o ON o.tenant_id = k.tenant_id AND o.order_id = k.order_id
WHERE p.order_id IS NOT NULL OR o.order_id IS NOT NULL;

-- name: read_numbering
-- Under the orders' locks: the plans, the stored first verdicts of the given event ids, and each order's
-- last applied numbered step. $1, $2: tenants and order ids (pairs); $3: event ids.
SELECT 'plan' AS kind, tenant_id, order_id, plan_id, process, deadline_at,
       NULL::uuid AS event_id, NULL::integer AS seq_id, NULL::text AS digest, NULL::text AS decision,
       NULL::text AS code, NULL::text AS "check", NULL::text AS message, NULL::timestamptz AS decided_at
FROM plans WHERE (tenant_id, order_id) IN (SELECT * FROM unnest($1::text[], $2::text[]))
UNION ALL
SELECT 'known', tenant_id, order_id, NULL, NULL, NULL, event_id, seq_id, digest, decision, code, "check",
       message, decided_at
FROM plan_steps
WHERE (tenant_id, order_id) IN (SELECT * FROM unnest($1::text[], $2::text[])) AND event_id = ANY($3::uuid[])
UNION ALL
SELECT 'last', l.* FROM unnest($1::text[], $2::text[]) AS k(tenant_id, order_id)
CROSS JOIN LATERAL (
    SELECT s.tenant_id, s.order_id, NULL, NULL, NULL::timestamptz, s.event_id, s.seq_id, s.digest, s.decision,
           s.code, s."check", s.message, s.decided_at
    FROM plan_steps s
    WHERE s.tenant_id = k.tenant_id AND s.order_id = k.order_id AND s.decision = 'APPLY'
    ORDER BY s.seq_id DESC LIMIT 1
) l;
