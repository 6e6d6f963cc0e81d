-- The tenants holding finished orders, stepped through by the partial index orders_tenant_finished_at (0030):
-- one probe per tenant, however many finished orders each holds. retention.sql's due_orders and
-- oldest_finished start from it and scan each tenant's orders up to that tenant's own cutoff.
CREATE FUNCTION nexus_finished_tenants() RETURNS SETOF text LANGUAGE sql STABLE AS $$
    WITH RECURSIVE tenants (tenant_id) AS (
        (SELECT o.tenant_id FROM orders AS o WHERE o.finished_at IS NOT NULL ORDER BY o.tenant_id LIMIT 1)
        UNION ALL
        SELECT (SELECT o.tenant_id FROM orders AS o
                WHERE o.finished_at IS NOT NULL AND o.tenant_id > t.tenant_id ORDER BY o.tenant_id LIMIT 1)
        FROM tenants AS t WHERE t.tenant_id IS NOT NULL
    )
    SELECT tenant_id FROM tenants WHERE tenant_id IS NOT NULL
$$;
