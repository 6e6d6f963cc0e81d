-- Quotas on what a tenant stores (nexus.auth.quotas; the counting triggers are migration 0023's).

-- name: quota_state
-- One tenant's usage by quota (the sum of its delta rows, and how many rows), its own quotas (NULL: the
-- default), and the last applied seq of each of the given orders it stores ($2).
SELECT 'used' AS kind, quota AS name, sum(used)::bigint AS n, count(*)::bigint AS rows
FROM tenant_usage WHERE tenant_id = $1 GROUP BY quota
UNION ALL
SELECT 'limit', q.name, q.n, 0 FROM tenant_limits l
CROSS JOIN LATERAL (VALUES ('live_orders', l.quota_live_orders), ('unstarted_plans', l.quota_unstarted_plans),
                           ('buffered_steps', l.quota_buffered_steps), ('dead_letters', l.quota_dead_letters),
                           ('active_keys', l.quota_active_keys)) AS q(name, n)
WHERE l.tenant_id = $1 AND q.n IS NOT NULL
UNION ALL
SELECT 'order', o.order_id, o.last_seq, 0
FROM unnest($2::text[]) AS k(order_id) JOIN orders o ON o.tenant_id = $1 AND o.order_id = k.order_id;

-- name: recount_usage
-- Every tenant's usage ($1 NULL), or one tenant's, counted again from the rows (migration 0045).
SELECT nexus_recount_usage($1::text);

-- name: usage_of
-- Every tenant's usage ($1 NULL), or one tenant's, by quota.
SELECT tenant_id, quota, sum(used)::bigint AS used FROM tenant_usage
WHERE $1::text IS NULL OR tenant_id = $1 GROUP BY tenant_id, quota ORDER BY tenant_id, quota;

-- name: compact_usage
-- Fold one tenant's delta rows into one row per quota. Each row is deleted by one statement only (a
-- concurrent compaction skips the rows this one deleted, and cannot see the sums it inserts), so the
-- sum is never counted twice; the advisory lock only spares a second compaction the wait.
WITH gone AS (
    DELETE FROM tenant_usage
    WHERE tenant_id = $1 AND pg_try_advisory_xact_lock(hashtext('nexus.tenant_usage'), hashtext($1))
    RETURNING quota, used
)
INSERT INTO tenant_usage (tenant_id, quota, used)
SELECT $1, quota, sum(used) FROM gone GROUP BY quota HAVING sum(used) <> 0;

-- name: quota_gauges
-- Every tenant's usage and own quota (NULL: the default) of each quota, the most used tenants first (the
-- gauges' label budget goes to them).
WITH used AS (SELECT tenant_id, quota, sum(used)::bigint AS n FROM tenant_usage GROUP BY tenant_id, quota),
tenants AS (SELECT tenant_id FROM used UNION SELECT tenant_id FROM tenant_limits)
SELECT t.tenant_id, q.quota, coalesce(u.n, 0) AS used,
       CASE q.quota WHEN 'live_orders' THEN l.quota_live_orders WHEN 'unstarted_plans' THEN l.quota_unstarted_plans
                    WHEN 'buffered_steps' THEN l.quota_buffered_steps WHEN 'dead_letters' THEN l.quota_dead_letters
                    ELSE l.quota_active_keys END AS own_limit,
       sum(coalesce(u.n, 0)) OVER (PARTITION BY t.tenant_id) AS total
FROM tenants t
CROSS JOIN (VALUES ('live_orders'), ('unstarted_plans'), ('buffered_steps'), ('dead_letters'), ('active_keys')) AS q(quota)
LEFT JOIN used u ON u.tenant_id = t.tenant_id AND u.quota = q.quota
LEFT JOIN tenant_limits l ON l.tenant_id = t.tenant_id
ORDER BY total DESC, t.tenant_id, q.quota;

-- name: set_tenant_quotas
-- A tenant's own quotas ($3-$7; NULL: leave as it is); a tenant without a row gets the amount limit $2
-- (the current default) recorded beside them.
INSERT INTO tenant_limits (tenant_id, max_order_amount, quota_live_orders, quota_unstarted_plans,
                           quota_buffered_steps, quota_dead_letters, quota_active_keys)
VALUES ($1, $2::numeric, $3, $4, $5, $6, $7)
ON CONFLICT (tenant_id) DO UPDATE SET
    quota_live_orders = coalesce(EXCLUDED.quota_live_orders, tenant_limits.quota_live_orders),
    quota_unstarted_plans = coalesce(EXCLUDED.quota_unstarted_plans, tenant_limits.quota_unstarted_plans),
    quota_buffered_steps = coalesce(EXCLUDED.quota_buffered_steps, tenant_limits.quota_buffered_steps),
    quota_dead_letters = coalesce(EXCLUDED.quota_dead_letters, tenant_limits.quota_dead_letters),
    quota_active_keys = coalesce(EXCLUDED.quota_active_keys, tenant_limits.quota_active_keys),
    updated_at = now();

-- name: set_process_terminal
-- A registered process's terminal states (an order in one is no longer live).
UPDATE processes SET terminal = $3 WHERE name = $1 AND version = $2 AND terminal IS DISTINCT FROM $3;
