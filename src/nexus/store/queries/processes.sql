-- Process registry and per-tenant limits.

-- name: register_process
INSERT INTO processes (name, version, content_hash, body) VALUES ($1, $2, $3, $4)
ON CONFLICT (name, version) DO NOTHING;

-- name: all_processes
SELECT name, version, content_hash, body, created_at FROM processes ORDER BY name, version;

-- name: set_tenant_limit
INSERT INTO tenant_limits (tenant_id, max_order_amount) VALUES ($1, $2::numeric)
ON CONFLICT (tenant_id) DO UPDATE SET max_order_amount = EXCLUDED.max_order_amount, updated_at = now();

-- name: set_tenant_list_limit
-- A tenant's max_list_items ($3; NULL: the process's own); a tenant without a row gets the amount limit $2
-- (the current default) recorded beside it.
INSERT INTO tenant_limits (tenant_id, max_order_amount, max_list_items) VALUES ($1, $2::numeric, $3)
ON CONFLICT (tenant_id) DO UPDATE SET max_list_items = EXCLUDED.max_list_items, updated_at = now()
RETURNING max_order_amount::text AS max_order_amount;

-- name: set_tenant_retention
-- A tenant's retention period in seconds ($3; NULL: NEXUS_RETENTION_S); a tenant without a row gets the amount
-- limit $2 (the current default) recorded beside it.
INSERT INTO tenant_limits (tenant_id, max_order_amount, retention_s) VALUES ($1, $2::numeric, $3)
ON CONFLICT (tenant_id) DO UPDATE SET retention_s = EXCLUDED.retention_s, updated_at = now()
RETURNING max_order_amount::text AS max_order_amount;

-- name: tenant_limits
SELECT tenant_id, max_order_amount::text AS max_order_amount, max_list_items, retention_s, updated_at, quota_live_orders,
       quota_unstarted_plans, quota_buffered_steps, quota_dead_letters, quota_active_keys
FROM tenant_limits ORDER BY tenant_id;

-- name: rejected_counts
SELECT code, count(*) AS n FROM rejected_events GROUP BY code ORDER BY code;
