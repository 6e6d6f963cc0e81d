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
